//! The OpenAI Responses API provider ([`Responses`]).
//!
//! ```no_run
//! use loopstack_model::{ChatModel, ChatRequest, Message, OpenAiResponses, ReasoningEffort};
//!
//! # async fn run() -> Result<(), loopstack_model::LlmError> {
//! let model = OpenAiResponses::from_env()?; // OPENAI_API_KEY, optional OPENAI_BASE_URL
//! let request = ChatRequest::new("gpt-5-mini", vec![Message::user("Hello!")])
//!     .system("Be brief.")
//!     .reasoning_effort(ReasoningEffort::Low);
//! let response = model.chat(&request).await?;
//! println!("{}", response.message.reasoning_text()); // the reasoning's summary
//! println!("{}", response.message.text());
//! # Ok(()) }
//! ```

// Split by concern: `request` encodes a `ChatRequest`, `reply` decodes a response
// body (and the items and final response of a stream), `stream` a streamed response.

mod reply;
mod request;
mod stream;

use std::fmt;
use std::time::Duration;

use futures::stream::BoxStream;
use serde_json::Value;

use super::azure::Route;
use crate::error::LlmError;
use crate::http::{self, ApiKey, Auth, Call, Client, http_settings};
use crate::model::{ChatModel, ChatRequest, ChatResponse, StreamEvent};

const PROVIDER: &str = "openai-responses";

/// The endpoint's path.
pub(super) const PATH: &str = "/v1/responses";

/// The OpenAI Responses API (`POST {base}/v1/responses`), stateless: each request
/// carries the whole conversation, and nothing is stored at OpenAI.
///
/// The model of each call is [`ChatRequest::model`]. One HTTP client is built with the
/// model and reused by every call (clones share it). Its
/// [`provider`](ChatModel::provider) is `openai-responses` (`azure-responses` when
/// [`Azure`](super::Azure) built it).
///
/// | setting | default | setter |
/// |---|---|---|
/// | API key | `OPENAI_API_KEY` in [`Responses::from_env`] | [`Responses::new`], [`Responses::api_key`] |
/// | base URL | `OPENAI_BASE_URL`, else `https://api.openai.com` | [`Responses::base_url`] |
/// | request timeout | 10 minutes | [`Responses::timeout`] |
/// | retries | [`RetryPolicy::default`](crate::RetryPolicy::default): 3, backoff 0.5 s doubling up to 8 s | [`Responses::retry_policy`] |
/// | `store` | `false` | [`Responses::store`] |
/// | `include: ["reasoning.encrypted_content"]` | sent | [`Responses::encrypted_reasoning`] |
/// | structured output (a [`ChatRequest::response_schema`] sent as `text.format`) | on | [`Responses::structured_output`] |
///
/// **Reasoning.** With `store: false` OpenAI keeps nothing between requests, so a
/// reasoning model's `reasoning` items come back with their `encrypted_content` (the
/// `include` above) and must be sent back with the next request, before the
/// `function_call` they preceded, or the API refuses it. Each item is a
/// [`ContentBlock::Reasoning`](crate::ContentBlock::Reasoning) of provider
/// `openai-responses`, whose text is the item's summaries (joined by blank lines) and
/// whose `data` is `{"id", "summary", "encrypted_content"}`; it is sent back unchanged
/// as a `reasoning` input item, in its place among the message's blocks. Reasoning of
/// other providers (and of Azure) is not sent. A request's
/// [`ModelSettings::reasoning_effort`](crate::ModelSettings::reasoning_effort) is sent as
/// `reasoning: {"effort", "summary": "auto"}` (`{"effort": "none"}` for
/// [`ReasoningEffort::None`](crate::ReasoningEffort::None)); a streamed summary arrives
/// as [`StreamEvent::ReasoningDelta`]s.
///
/// **How messages map.** The system prompt is `instructions`; user text and images are
/// `input_text` and `input_image` parts of `message` items; an assistant's text is an
/// `output_text` part of an assistant `message`, its tool calls `function_call` items
/// whose `call_id` is the [`ToolUse::id`](crate::ToolUse::id); each
/// [`ToolResult`](crate::ToolResult) is a `function_call_output` (the API has no error
/// flag: an error result's output is prefixed with `Error: `), and the images of a
/// result follow in a user message naming its call. Tools are `function` tools, `strict`
/// when their schema meets strict mode (every property required, no others). The
/// output limit is `max_output_tokens`; the API has no stop sequences, so
/// [`ModelSettings::stop_sequences`](crate::ModelSettings::stop_sequences) is not sent.
/// [`ModelSettings::prompt_cache_key`](crate::ModelSettings::prompt_cache_key) is
/// `prompt_cache_key`, and the options of
/// [`ModelSettings::provider_options`](crate::ModelSettings::provider_options) under the
/// provider's name are merged into the body last.
///
/// **Replies.** Each output item is one content block, in order: a `message` its text
/// (refusals included), a `function_call` a tool call (arguments that are not valid
/// JSON, or nest deeper than [`MAX_JSON_DEPTH`](crate::message::MAX_JSON_DEPTH), are
/// kept in [`ToolUse::invalid_input`](crate::ToolUse::invalid_input)), a `reasoning` item
/// as above, and any other item a [`ContentBlock::Provider`](crate::ContentBlock::Provider)
/// block sent back as it came. Status `completed` stops with
/// [`StopReason::EndTurn`](crate::StopReason::EndTurn) (or `ToolUse`), `incomplete` for
/// `max_output_tokens` with [`StopReason::MaxTokens`](crate::StopReason::MaxTokens) (for
/// another reason, `Other` with that reason); a `failed` response, a
/// `response.failed` event and an `error` event are the [`LlmError`] their code stands
/// for (a rate limit [`LlmError::RateLimited`], `server_error`
/// [`LlmError::Server`], `invalid_prompt` and the image codes
/// [`LlmError::InvalidRequest`]). Usage counts cached input tokens apart from
/// `input_tokens` (`cache_read_input_tokens`) and reasoning tokens within
/// `output_tokens` (`reasoning_output_tokens`). A streamed reply ends with the same
/// response as a plain one; a stream that ends before `response.completed` (or
/// `.incomplete`) is [`LlmError::MalformedResponse`].
///
/// Timeouts, retries and the bounds on what a server sends (error bodies, event
/// lines and events) are those of [`OpenAi`](super::OpenAi). The API key never appears
/// in `Debug` output, logs or errors.
#[derive(Clone)]
#[must_use = "a model does nothing until it is called"]
pub struct Responses {
    http: Client,
    provider: &'static str,
    store: bool,
    encrypted_reasoning: bool,
    structured_output: bool,
    /// Azure's deployment URLs, when Azure built the model for them.
    route: Option<Route>,
}

impl fmt::Debug for Responses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Responses");
        d.field("provider", &self.provider);
        self.http.debug_fields(&mut d);
        d.field("store", &self.store)
            .field("encrypted_reasoning", &self.encrypted_reasoning)
            .field("structured_output", &self.structured_output)
            .field("route", &self.route)
            .finish()
    }
}

impl Responses {
    /// The API's address when none is set.
    pub const DEFAULT_BASE_URL: &'static str = "https://api.openai.com";
    /// The request timeout when none is set: 10 minutes, as in OpenAI's SDKs.
    pub const DEFAULT_TIMEOUT: Duration = http::DEFAULT_TIMEOUT;

    /// A model calling the API with this key (sent as `Authorization: Bearer <key>`;
    /// an empty key sends none, for a local server), at
    /// [`Responses::DEFAULT_BASE_URL`].
    pub fn new(api_key: impl Into<String>) -> Self {
        let mut model = Self::with_client(
            PROVIDER,
            Client::new(PROVIDER, Self::DEFAULT_BASE_URL, PATH, Auth { header: "authorization", prefix: "Bearer " }),
        );
        let api_key = api_key.into();
        if !api_key.trim().is_empty() {
            model.http.api_key = Some(ApiKey::new(api_key));
        }
        model
    }

    /// A model of `provider` sending its calls through `http`.
    pub(super) fn with_client(provider: &'static str, http: Client) -> Self {
        Self { http, provider, store: false, encrypted_reasoning: true, structured_output: true, route: None }
    }

    /// Sends the calls to Azure's deployment URLs.
    pub(super) fn with_route(mut self, route: Option<Route>) -> Self {
        self.route = route;
        self
    }

    /// A model configured from the environment: `OPENAI_API_KEY` and `OPENAI_BASE_URL`
    /// (at least one: OpenAI's API needs the key, a compatible local server only its
    /// URL).
    ///
    /// # Errors
    /// [`LlmError::Config`] when neither is set, or the base URL is invalid.
    pub fn from_env() -> Result<Self, LlmError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        if http::non_empty(lookup, "OPENAI_API_KEY").is_none() && http::non_empty(lookup, "OPENAI_BASE_URL").is_none() {
            return Err(LlmError::Config {
                provider: PROVIDER,
                message: "neither OPENAI_API_KEY nor OPENAI_BASE_URL is set: set OPENAI_API_KEY for OpenAI's API, \
                          or OPENAI_BASE_URL for a server that speaks the Responses API"
                    .to_owned(),
            });
        }
        let mut model = Self::new("");
        model.http.configure_from(lookup, "OPENAI_API_KEY", "OPENAI_BASE_URL")?;
        Ok(model)
    }

    /// Sets the API key, sent as `Authorization: Bearer <key>` (for a model
    /// [`Azure`](super::Azure) built, as Azure's key or token).
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.http.api_key = Some(ApiKey::new(api_key));
        self
    }

    http_settings!();

    /// Whether OpenAI stores the responses (`store`, off by default). Off, nothing is
    /// kept between requests and reasoning comes back through its encrypted content;
    /// on, a reasoning item is sent back by its id even without that content.
    pub fn store(mut self, store: bool) -> Self {
        self.store = store;
        self
    }

    /// Whether reasoning items are asked for with their encrypted content (`include:
    /// ["reasoning.encrypted_content"]`, on by default), which a stateless tool loop
    /// needs to send them back. Turn it off for a server or model that refuses it.
    pub fn encrypted_reasoning(mut self, enabled: bool) -> Self {
        self.encrypted_reasoning = enabled;
        self
    }

    /// Whether a request's [`ChatRequest::response_schema`] is sent (on by default), as
    /// `text: {"format": {"type": "json_schema", "name", "schema", "strict"}}`, so that
    /// the answer is JSON text matching the schema (`strict` when the schema meets
    /// strict mode); this is what [`ChatModel::structured_output`] reports.
    pub fn structured_output(mut self, enabled: bool) -> Self {
        self.structured_output = enabled;
        self
    }

    fn call<'a>(&self, request: &'a ChatRequest, stream: bool) -> Result<Call<'a>, LlmError> {
        let wire = request::Wire {
            provider: self.provider,
            store: self.store,
            encrypted_reasoning: self.encrypted_reasoning,
            structured_output: self.structured_output,
        };
        let mut body = request::encode_request(request, stream, wire);
        if let Value::Object(fields) = &mut body {
            if let Some(route) = &self.route {
                route.set_model(fields);
            }
            request.settings.apply_provider_options(self.provider, fields)?;
        }
        let mut call = self.http.call(&request.model, &body, stream)?;
        if let Some(route) = &self.route {
            call.url = route.responses_url(self.provider, &self.http.base_url)?;
        }
        Ok(call)
    }
}

#[async_trait::async_trait]
impl ChatModel for Responses {
    fn provider(&self) -> &'static str {
        self.provider
    }

    /// On unless turned off with [`Responses::structured_output`].
    fn structured_output(&self) -> bool {
        self.structured_output
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let provider = self.provider;
        self.http
            .chat(request, self.call(request, false), |body| reply::decode_response(body, provider, &request.model))
            .await
    }

    fn stream<'a>(&'a self, request: &'a ChatRequest) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
        self.http.stream(request, self.call(request, true), stream::Decoder::new(self.provider, &request.model))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_configuration() {
        let lookup = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
        };
        let err = Responses::from_lookup(&lookup(&[("OPENAI_API_KEY", " ")])).unwrap_err();
        assert!(
            matches!(err, LlmError::Config { provider: PROVIDER, ref message } if message.contains("OPENAI_API_KEY"))
        );
        let model = Responses::from_lookup(&lookup(&[("OPENAI_API_KEY", "sk-secret")])).unwrap();
        assert_eq!(model.http.base_url.as_str(), Responses::DEFAULT_BASE_URL);
        assert!(model.http.api_key.is_some());
        assert!(!format!("{model:?}").contains("secret"));
        let local = Responses::from_lookup(&lookup(&[("OPENAI_BASE_URL", "http://localhost:8000/v1")])).unwrap();
        assert_eq!(local.http.base_url.as_str(), "http://localhost:8000/v1");
        assert!(local.http.api_key.is_none());
        assert!(matches!(
            Responses::from_lookup(&lookup(&[("OPENAI_API_KEY", "k"), ("OPENAI_BASE_URL", "::bad")])),
            Err(LlmError::Config { .. })
        ));
        assert!(Responses::new(" ").http.api_key.is_none());
        let model = Responses::new("k");
        assert_eq!((model.provider(), ChatModel::structured_output(&model)), (PROVIDER, true));
    }
}
