//! The Anthropic Messages API provider.
//!
//! ```no_run
//! use loopstack_model::{Anthropic, ChatModel, ChatRequest, Message};
//!
//! # async fn run() -> Result<(), loopstack_model::LlmError> {
//! let claude = Anthropic::from_env()?; // ANTHROPIC_API_KEY, optional ANTHROPIC_BASE_URL
//! let request = ChatRequest::new("claude-sonnet-4-5", vec![Message::user("Hello!")]).system("Be brief.");
//! let response = claude.chat(&request).await?;
//! println!("{}", response.message.text());
//! # Ok(()) }
//! ```

// Split by concern: `request` encodes a `ChatRequest`, `reply` decodes a response
// body and `stream` a streamed response.

mod reply;
mod request;
mod stream;

use std::fmt;
use std::time::Duration;

use futures::stream::BoxStream;
use reqwest::header::HeaderValue;

use crate::error::LlmError;
use crate::http::{self, ApiKey, Auth, Call, Client, http_settings};
use crate::model::{ChatModel, ChatRequest, ChatResponse, StreamEvent};

const PROVIDER: &str = "anthropic";

/// The endpoint's path.
const PATH: &str = "/v1/messages";

/// The Anthropic Messages API (`POST {base}/v1/messages`).
///
/// The model of each call is [`ChatRequest::model`]. One HTTP client is built with the
/// model and reused by every call (clones share it).
///
/// | setting | default | setter |
/// |---|---|---|
/// | API key | `ANTHROPIC_API_KEY` in [`Anthropic::from_env`] | [`Anthropic::api_key`] |
/// | base URL | `ANTHROPIC_BASE_URL`, else `https://api.anthropic.com` | [`Anthropic::base_url`] |
/// | request timeout | 10 minutes | [`Anthropic::timeout`] |
/// | retries | [`RetryPolicy::default`](crate::RetryPolicy::default): 3, backoff 0.5 s doubling up to 8 s | [`Anthropic::retry_policy`] |
/// | `max_tokens` when the request has none | 4096 | [`Anthropic::default_max_tokens`] |
///
/// The timeout is a deadline for each whole attempt, whatever the server sends: a
/// non-streamed call until its body is read, a stream from the request until its last
/// event (a server that keeps sending pings or bytes forever still times out; raise
/// the timeout for very long streamed replies). An error response's body is read up to
/// 64 KiB; a line of an event stream may be [`SSE_MAX_LINE_BYTES`](crate::sse::SSE_MAX_LINE_BYTES)
/// long and an event [`SSE_MAX_EVENT_BYTES`](crate::sse::SSE_MAX_EVENT_BYTES) large (beyond,
/// the stream ends in [`LlmError::MalformedResponse`]). An `error` object sent with a
/// success status, as the body or as an `error` event of a stream, is the [`LlmError`]
/// of the HTTP status its type stands for (`overloaded_error`: [`LlmError::Overloaded`]),
/// and a non-streamed one is retried like that status. Tool inputs nested deeper than
/// [`MAX_JSON_DEPTH`](crate::message::MAX_JSON_DEPTH) are not parsed: they are kept as
/// [`ToolUse::invalid_input`](crate::ToolUse::invalid_input) and answered with an error
/// result.
///
/// Content blocks the crate has no type for (`thinking`, `redacted_thinking`, server
/// tools) come back as [`ContentBlock::Provider`](crate::ContentBlock::Provider) with provider `"anthropic"` and are
/// sent back to Anthropic unchanged; provider blocks of other providers are dropped.
///
/// The API key never appears in `Debug` output, logs or errors.
#[derive(Clone)]
#[must_use = "a model does nothing until it is called"]
pub struct Anthropic {
    http: Client,
    default_max_tokens: u32,
}

impl fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Anthropic");
        self.http.debug_fields(&mut d);
        d.field("default_max_tokens", &self.default_max_tokens).finish()
    }
}

impl Anthropic {
    /// The API's address when none is set.
    pub const DEFAULT_BASE_URL: &'static str = "https://api.anthropic.com";
    /// The `max_tokens` sent when the request has none (the API requires one).
    pub const DEFAULT_MAX_TOKENS: u32 = 4096;
    /// The request timeout when none is set: 10 minutes, as in Anthropic's SDKs.
    pub const DEFAULT_TIMEOUT: Duration = http::DEFAULT_TIMEOUT;
    /// The `anthropic-beta` header sent when a request that thinks offers tools:
    /// interleaved thinking, so the model reasons between tool calls too.
    pub const INTERLEAVED_THINKING: &'static str = "interleaved-thinking-2025-05-14";

    /// The `anthropic-version` header sent.
    pub const API_VERSION: &'static str = "2023-06-01";

    /// A model calling the API with this key, at [`Anthropic::DEFAULT_BASE_URL`].
    pub fn new(api_key: impl Into<String>) -> Self {
        let mut http = Client::new(PROVIDER, Self::DEFAULT_BASE_URL, PATH, Auth { header: "x-api-key", prefix: "" });
        http.api_key = Some(ApiKey::new(api_key));
        Self { http, default_max_tokens: Self::DEFAULT_MAX_TOKENS }
    }

    /// A model configured from the environment: `ANTHROPIC_API_KEY` (required) and
    /// `ANTHROPIC_BASE_URL` (optional).
    ///
    /// # Errors
    /// [`LlmError::Config`] when the key is missing or empty, or the base URL is invalid.
    pub fn from_env() -> Result<Self, LlmError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        let key = http::non_empty(lookup, "ANTHROPIC_API_KEY")
            .ok_or_else(|| LlmError::Config { provider: PROVIDER, message: "ANTHROPIC_API_KEY is not set".into() })?;
        let mut model = Self::new(key);
        model.http.configure_from(lookup, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")?;
        Ok(model)
    }

    /// Sets the API key, sent as `x-api-key`.
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.http.api_key = Some(ApiKey::new(api_key));
        self
    }

    http_settings!();

    /// Sets the `max_tokens` sent when a request has none.
    pub fn default_max_tokens(mut self, max_tokens: u32) -> Self {
        self.default_max_tokens = max_tokens;
        self
    }

    fn call<'a>(&self, request: &'a ChatRequest, stream: bool) -> Result<Call<'a>, LlmError> {
        let body = request::encode_request(request, self.default_max_tokens, stream)?;
        let mut call = self.http.call(&request.model, &body, stream)?;
        call.headers.insert("anthropic-version", HeaderValue::from_static(Self::API_VERSION));
        if body.get("thinking").is_some_and(|t| t["type"] == "enabled") && !request.tools.is_empty() {
            // Thinking between tool calls, not only before the first.
            call.headers.insert("anthropic-beta", HeaderValue::from_static(Self::INTERLEAVED_THINKING));
        }
        Ok(call)
    }
}

#[async_trait::async_trait]
impl ChatModel for Anthropic {
    fn provider(&self) -> &'static str {
        PROVIDER
    }

    /// `false`: the Messages API has no structured output, and a request's
    /// [`ChatRequest::response_schema`] is not sent.
    fn structured_output(&self) -> bool {
        false
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.http.chat(request, self.call(request, false), |body| reply::decode_response(body, &request.model)).await
    }

    fn stream<'a>(&'a self, request: &'a ChatRequest) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
        self.http.stream(request, self.call(request, true), stream::Decoder::new(&request.model))
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
        let err = Anthropic::from_lookup(&lookup(&[])).unwrap_err();
        assert!(
            matches!(err, LlmError::Config { provider: "anthropic", ref message } if message.contains("ANTHROPIC_API_KEY"))
        );
        assert!(Anthropic::from_lookup(&lookup(&[("ANTHROPIC_API_KEY", "")])).is_err());
        let model = Anthropic::from_lookup(&lookup(&[("ANTHROPIC_API_KEY", "sk-ant-secret")])).unwrap();
        assert_eq!(model.http.base_url, Anthropic::DEFAULT_BASE_URL);
        assert_eq!(model.http.api_key, Some(ApiKey::new("sk-ant-secret")));
        let model =
            Anthropic::from_lookup(&lookup(&[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_BASE_URL", "http://proxy:8080")]))
                .unwrap();
        assert_eq!(model.http.base_url, "http://proxy:8080");
        let err = Anthropic::from_lookup(&lookup(&[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_BASE_URL", "::bad")]))
            .unwrap_err();
        assert!(matches!(err, LlmError::Config { .. }));
        assert!(!format!("{:?}", Anthropic::new("sk-ant-secret")).contains("secret"));
    }
}
