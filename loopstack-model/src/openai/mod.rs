//! The OpenAI Chat Completions provider, also for OpenAI-compatible local servers
//! (llama.cpp's `llama-server`, Ollama, vLLM); the OpenAI Responses provider
//! ([`Responses`], in [`responses`]); and Azure OpenAI ([`Azure`], in [`azure`]),
//! which builds either for an Azure resource.
//!
//! ```no_run
//! use loopstack_model::{ChatModel, ChatRequest, Message, OpenAi};
//!
//! # async fn run() -> Result<(), loopstack_model::LlmError> {
//! // A local Ollama: no key, and small models may write tool calls as JSON text.
//! let local = OpenAi::new().base_url("http://localhost:11434/v1").text_tool_calls(true);
//! let request = ChatRequest::new("qwen2.5:3b", vec![Message::user("Hello!")]);
//! let response = local.chat(&request).await?;
//! println!("{}", response.message.text());
//! # Ok(()) }
//! ```

// Split by concern: `request` encodes a `ChatRequest`, `reply` decodes a response
// body, `stream` a streamed response, and `text_tools` reads tool calls a model wrote
// as text.

pub mod azure;
mod reply;
mod request;
pub mod responses;
mod stream;
mod text_tools;

pub use azure::Azure;
pub use responses::Responses;

use std::fmt;
use std::time::Duration;

use futures::stream::BoxStream;
use serde_json::Value;

use self::azure::Route;
use crate::call_ids::CallIds;
use crate::error::LlmError;
use crate::http::{self, Auth, Call, Client, http_settings};
use crate::model::{ChatModel, ChatRequest, ChatResponse, StreamEvent};

const PROVIDER: &str = "openai";

/// The endpoint's path.
const PATH: &str = "/v1/chat/completions";

/// OpenAI Chat Completions (`POST {base}/v1/chat/completions`), and the servers that
/// speak it: llama.cpp's `llama-server`, Ollama, vLLM.
///
/// The model of each call is [`ChatRequest::model`]. One HTTP client is built with the
/// model and reused by every call (clones share it).
///
/// | setting | default | setter |
/// |---|---|---|
/// | API key | `OPENAI_API_KEY` in [`OpenAi::from_env`]; none: no `Authorization` header | [`OpenAi::api_key`] |
/// | base URL | `OPENAI_BASE_URL`, else `https://api.openai.com` | [`OpenAi::base_url`] |
/// | request timeout | 10 minutes | [`OpenAi::timeout`] |
/// | retries | [`RetryPolicy::default`](crate::RetryPolicy::default): 3, backoff 0.5 s doubling up to 8 s | [`OpenAi::retry_policy`] |
/// | structured output (a [`ChatRequest::response_schema`] sent as `response_format`) | on | [`OpenAi::structured_output`] |
/// | tool calls written as JSON text | `OPENAI_TEXT_TOOL_CALLS=1` (or `true`) in [`OpenAi::from_env`], else off | [`OpenAi::text_tool_calls`] |
///
/// The base URL may end in `/v1` (`http://localhost:11434/v1`, as Ollama documents it)
/// or not (`http://localhost:8080`); `/v1/chat/completions` is appended without doubling
/// `/v1`. The timeout is a deadline for each whole attempt, whatever the server sends:
/// a non-streamed call until its body is read, a stream from the request until its last
/// chunk (a server that keeps sending forever still times out; raise the timeout for
/// very long streamed replies). An error response's body is read up to 64 KiB; a line
/// of an event stream may be [`SSE_MAX_LINE_BYTES`](crate::sse::SSE_MAX_LINE_BYTES) long and
/// an event [`SSE_MAX_EVENT_BYTES`](crate::sse::SSE_MAX_EVENT_BYTES) large (beyond, the
/// stream ends in [`LlmError::MalformedResponse`]). An error a server sends with a
/// success status (`{"error": ..}` as the body, as a chunk of a stream, or llama.cpp's
/// `error:` line) is the [`LlmError`] of the HTTP status it stands for, and a
/// non-streamed one is retried like that status.
///
/// How messages map: the system prompt is the first `system` message; each
/// [`ToolResult`](crate::ToolResult) is a `tool` message (the API has no error flag: an
/// error result's content is prefixed with `Error: `); tool arguments that were not
/// valid JSON are sent back as the model wrote them (shortened, when refused for their
/// depth). In replies, arguments that are not valid JSON are kept in
/// [`ToolUse::invalid_input`](crate::ToolUse::invalid_input), as are arguments (a string,
/// an object, or written as text) nested deeper than
/// [`MAX_JSON_DEPTH`](crate::message::MAX_JSON_DEPTH), which are not parsed; a missing tool-call
/// id becomes `call_<n>`, numbered after the tool calls already in the conversation
/// (so it never repeats an earlier call's id), and a reply with tool calls whose
/// `finish_reason` is `stop` (some local servers) stops with
/// [`StopReason::ToolUse`](crate::StopReason::ToolUse). The API counts cached
/// tokens within `prompt_tokens`; [`Usage`](crate::Usage) counts them apart, as for
/// Anthropic: `input_tokens` is `prompt_tokens` minus `cached_tokens`, which are
/// `cache_read_input_tokens`.
///
/// The API key never appears in `Debug` output, logs or errors.
#[derive(Clone)]
#[must_use = "a model does nothing until it is called"]
pub struct OpenAi {
    http: Client,
    /// `openai`, or `azure` when [`Azure`] built it.
    provider: &'static str,
    /// Azure's URLs, when [`Azure`] built it.
    route: Option<Route>,
    text_tool_calls: bool,
    completion_tokens_field: Option<bool>,
    structured_output: bool,
}

impl fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("OpenAi");
        d.field("provider", &self.provider);
        self.http.debug_fields(&mut d);
        d.field("text_tool_calls", &self.text_tool_calls).field("structured_output", &self.structured_output).finish()
    }
}

impl Default for OpenAi {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenAi {
    /// The API's address when none is set.
    pub const DEFAULT_BASE_URL: &'static str = "https://api.openai.com";
    /// The request timeout when none is set: 10 minutes, as in OpenAI's SDKs.
    pub const DEFAULT_TIMEOUT: Duration = http::DEFAULT_TIMEOUT;

    /// A model at [`OpenAi::DEFAULT_BASE_URL`] with no API key; set one with
    /// [`OpenAi::api_key`], or point [`OpenAi::base_url`] at a local server.
    pub fn new() -> Self {
        let http =
            Client::new(PROVIDER, Self::DEFAULT_BASE_URL, PATH, Auth { header: "authorization", prefix: "Bearer " });
        Self {
            http,
            provider: PROVIDER,
            route: None,
            text_tool_calls: false,
            completion_tokens_field: None,
            structured_output: true,
        }
    }

    /// A model of `provider` sending its calls through `http` to Azure's URLs (`route`),
    /// with the output limit as `max_completion_tokens`.
    fn with_client(provider: &'static str, http: Client, route: Option<Route>) -> Self {
        Self { provider, route, completion_tokens_field: Some(true), ..Self::new() }.with_http(http)
    }

    fn with_http(mut self, http: Client) -> Self {
        self.http = http;
        self
    }

    /// A model configured from the environment: `OPENAI_API_KEY` and
    /// `OPENAI_BASE_URL` (at least one: OpenAI's API needs the key, a local server
    /// only its URL), and `OPENAI_TEXT_TOOL_CALLS` (optional: `1` or `true` turns on
    /// [`OpenAi::text_tool_calls`], `0` or `false` leaves it off).
    ///
    /// # Errors
    /// [`LlmError::Config`] when neither `OPENAI_API_KEY` nor `OPENAI_BASE_URL` is set
    /// (a request to OpenAI without a key could only fail later), when the base URL
    /// is invalid, or when `OPENAI_TEXT_TOOL_CALLS` is none of `1`, `true`, `0`,
    /// `false`.
    pub fn from_env() -> Result<Self, LlmError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        if http::non_empty(lookup, "OPENAI_API_KEY").is_none() && http::non_empty(lookup, "OPENAI_BASE_URL").is_none() {
            return Err(LlmError::Config {
                provider: PROVIDER,
                message: "neither OPENAI_API_KEY nor OPENAI_BASE_URL is set: set OPENAI_API_KEY for OpenAI's API, \
                          or OPENAI_BASE_URL for an OpenAI-compatible server (Ollama, llama.cpp, vLLM)"
                    .to_owned(),
            });
        }
        let mut model = Self::new();
        model.http.configure_from(lookup, "OPENAI_API_KEY", "OPENAI_BASE_URL")?;
        if let Some(value) = http::non_empty(lookup, "OPENAI_TEXT_TOOL_CALLS") {
            model.text_tool_calls = match value.to_ascii_lowercase().as_str() {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => {
                    return Err(LlmError::Config {
                        provider: PROVIDER,
                        message: format!("OPENAI_TEXT_TOOL_CALLS must be 1, true, 0 or false, not `{value}`"),
                    });
                }
            };
        }
        Ok(model)
    }

    /// Sets the API key, sent as `Authorization: Bearer <key>`.
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.http.api_key = Some(http::ApiKey::new(api_key));
        self
    }

    http_settings!();

    /// Whether to accept tool calls a model wrote as JSON in its text (off by default),
    /// for small local models that do not use the API's `tool_calls`.
    ///
    /// When on, the request offered tools and the reply has no `tool_calls`, a reply
    /// that writes calls as JSON, `{"name": "get_weather", "arguments": {..}}` (or
    /// `"parameters"`), becomes tool calls and
    /// [`StopReason::ToolUse`](crate::StopReason::ToolUse). Taken are a reply made of
    /// nothing but such calls (one, an array, or several one after the other; bare, in a
    /// `` ``` ``/`` ```json `` fence or between tags such as `<tool_call>`; also with
    /// doubled or stray braces around them, `{{"name": .., "arguments": {..}}}`, as
    /// small models copy the format from their chat template), and a fenced or
    /// `<tool_call>` block of them inside prose, whose text around it is kept. A call to
    /// a tool that was not offered is still a call: the dispatch answers it with an error
    /// naming the tools that are, which the model can correct. The calls get ids
    /// `call_<n>` numbered after the tool calls already in the request's conversation,
    /// skipping any id it uses, so they never collide with an earlier turn's and are the
    /// same for the same request. In a stream, the text deltas were already yielded; the
    /// tool calls follow as events before [`StreamEvent::Done`].
    ///
    /// The conversation is sent back in the same form: each assistant turn's calls as the
    /// JSON text above (one per line), and their results as a user message that repeats
    /// each call with what it `returned:` (or why it `failed:`), instead of `tool_calls`
    /// and `tool` messages. A small model reads that; given the API's own form, which its
    /// chat template renders in a format it did not write, Qwen2.5-Coder-1.5B asks for
    /// the same call again instead of answering.
    ///
    /// [`OpenAi::from_env`] turns it on when `OPENAI_TEXT_TOOL_CALLS` is `1` or `true`.
    pub fn text_tool_calls(mut self, enabled: bool) -> Self {
        self.text_tool_calls = enabled;
        self
    }

    /// Whether the output token limit is sent as `max_completion_tokens` (which
    /// OpenAI's reasoning models require) instead of `max_tokens` (which local servers
    /// understand). Unset, it is `max_completion_tokens` for `api.openai.com` and
    /// `max_tokens` for any other base URL.
    pub fn max_completion_tokens(mut self, enabled: bool) -> Self {
        self.completion_tokens_field = Some(enabled);
        self
    }

    /// Whether a request's [`ChatRequest::response_schema`] is sent (on by default), as
    /// `response_format: {"type": "json_schema", "json_schema": {"name", "schema",
    /// "strict": true}}`, so that the answer is JSON text matching the schema; this is
    /// what [`ChatModel::structured_output`] reports. Turn it off for servers that lack
    /// structured output (older local servers refuse or ignore `response_format`); the
    /// schema is then not sent, and callers such as the agent ask for the answer in
    /// another way. (On an `OpenAi` the trait's query is
    /// `ChatModel::structured_output(&model)`, as this builder method has its name.)
    pub fn structured_output(mut self, enabled: bool) -> Self {
        self.structured_output = enabled;
        self
    }

    fn token_limit_field(&self) -> &'static str {
        let official = self.http.base_url.contains("://api.openai.com");
        if self.completion_tokens_field.unwrap_or(official) { "max_completion_tokens" } else { "max_tokens" }
    }

    fn call<'a>(&self, request: &'a ChatRequest, stream: bool) -> Result<Call<'a>, LlmError> {
        let wire = request::Wire {
            token_limit_field: self.token_limit_field(),
            structured_output: self.structured_output,
            text_tool_calls: self.text_tool_calls,
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
            call.url = route.chat_url(self.provider, &self.http.base_url, &request.model)?;
        }
        Ok(call)
    }

    /// The tools whose JSON-text calls are accepted, if that is on.
    fn text_tools<'a>(&self, request: &'a ChatRequest) -> Vec<&'a str> {
        if self.text_tool_calls { request.tools.iter().map(|t| t.name.as_str()).collect() } else { Vec::new() }
    }
}

#[async_trait::async_trait]
impl ChatModel for OpenAi {
    fn provider(&self) -> &'static str {
        self.provider
    }

    /// On unless turned off with [`OpenAi::structured_output`].
    fn structured_output(&self) -> bool {
        self.structured_output
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let text_tools = self.text_tools(request);
        let provider = self.provider;
        self.http
            .chat(request, self.call(request, false), |body| {
                let mut ids = CallIds::new(&request.messages);
                let mut response = reply::decode_response(body, provider, &request.model, &mut ids)?;
                text_tools::apply_text_tool_calls(&mut response, &text_tools, &mut ids);
                Ok(response)
            })
            .await
    }

    fn stream<'a>(&'a self, request: &'a ChatRequest) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
        let decoder = stream::Decoder::new(
            self.provider,
            &request.model,
            self.text_tools(request),
            CallIds::new(&request.messages),
        );
        self.http.stream(request, self.call(request, true), decoder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ApiKey;

    #[test]
    fn the_token_limit_field_follows_the_server() {
        assert_eq!(OpenAi::new().token_limit_field(), "max_completion_tokens");
        let local = OpenAi::new().base_url("http://localhost:11434/v1");
        assert_eq!(local.token_limit_field(), "max_tokens");
        assert_eq!(local.max_completion_tokens(true).token_limit_field(), "max_completion_tokens");
        assert_eq!(OpenAi::new().max_completion_tokens(false).token_limit_field(), "max_tokens");
    }

    #[test]
    fn env_configuration() {
        let lookup = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
        };
        // Neither the key nor a URL: said now, not at the first request.
        for unset in [&[][..], &[("OPENAI_API_KEY", " "), ("OPENAI_BASE_URL", "")][..]] {
            let err = OpenAi::from_lookup(&lookup(unset)).unwrap_err();
            assert!(
                matches!(&err, LlmError::Config { provider: "openai", message }
                    if message.contains("OPENAI_API_KEY") && message.contains("OPENAI_BASE_URL")),
                "{err:?}"
            );
        }
        let model = OpenAi::from_lookup(&lookup(&[("OPENAI_API_KEY", "sk-secret")])).unwrap();
        assert_eq!(model.http.base_url.as_str(), OpenAi::DEFAULT_BASE_URL);
        let model =
            OpenAi::from_lookup(&lookup(&[("OPENAI_API_KEY", ""), ("OPENAI_BASE_URL", "http://localhost:11434/v1")]))
                .unwrap();
        assert_eq!((model.http.api_key.clone(), model.http.base_url.as_str()), (None, "http://localhost:11434/v1"));
        let model = OpenAi::from_lookup(&lookup(&[("OPENAI_API_KEY", "sk-secret")])).unwrap();
        assert_eq!(model.http.api_key, Some(ApiKey::new("sk-secret")));
        assert!(!format!("{model:?}").contains("secret"));
        assert!(matches!(
            OpenAi::from_lookup(&lookup(&[("OPENAI_BASE_URL", "localhost:11434")])),
            Err(LlmError::Config { .. })
        ));
        assert!(!OpenAi::from_lookup(&lookup(&[("OPENAI_API_KEY", "k")])).unwrap().text_tool_calls);
        for (value, want) in
            [("1", true), ("true", true), (" TRUE ", true), ("0", false), ("false", false), ("", false)]
        {
            let model = OpenAi::from_lookup(&|name: &str| match name {
                "OPENAI_TEXT_TOOL_CALLS" => Some(value.to_owned()),
                "OPENAI_BASE_URL" => Some("http://127.0.0.1:8080/v1".to_owned()),
                _ => None,
            });
            assert_eq!(model.unwrap().text_tool_calls, want, "{value:?}");
        }
        let err =
            OpenAi::from_lookup(&lookup(&[("OPENAI_API_KEY", "k"), ("OPENAI_TEXT_TOOL_CALLS", "yes")])).unwrap_err();
        assert!(
            matches!(err, LlmError::Config { provider: "openai", ref message } if message.contains("OPENAI_TEXT_TOOL_CALLS")),
            "{err:?}"
        );
    }
}
