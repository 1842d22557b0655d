//! Why a model call failed.

use std::time::Duration;

/// A boxed error that can cross threads: the transport error of [`LlmError::Connection`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a model call failed. Every variant names the provider and the model.
///
/// An error the API sends in place of an answer with a success status, in a 200 body
/// (`{"type": "error", "error": {..}}`, `{"error": {..}}`) or inside a stream (an
/// `error` event or chunk), is the variant of the HTTP status it stands for, and its
/// `status` is that status: `overloaded_error` is [`LlmError::Overloaded`],
/// `rate_limit_error` (OpenAI's `rate_limit_exceeded`) [`LlmError::RateLimited`],
/// `api_error`, `server_error` and unknown types [`LlmError::Server`] with status 500,
/// `invalid_request_error` [`LlmError::InvalidRequest`] with 400; a numeric `code`
/// (llama.cpp, vLLM) is the status. A non-streamed one is retried as that status would be.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The API key is missing, wrong, or lacks permission (HTTP 401, 403).
    #[error("{provider} ({model}): authentication failed (HTTP {status}): {message}")]
    Authentication {
        /// The provider.
        provider: &'static str,
        /// The model.
        model: String,
        /// The HTTP status.
        status: u16,
        /// The API's message.
        message: String,
    },
    /// The API refused the request (HTTP 400, 404, 413, 422 ...); not retried.
    #[error("{provider} ({model}): invalid request (HTTP {status}): {message}")]
    InvalidRequest {
        /// The provider.
        provider: &'static str,
        /// The model.
        model: String,
        /// The HTTP status.
        status: u16,
        /// The API's message.
        message: String,
    },
    /// Too many requests (HTTP 429), after the retries ran out.
    #[error("{provider} ({model}): rate limited{}: {message}", fmt_retry_after(*.retry_after))]
    RateLimited {
        /// The provider.
        provider: &'static str,
        /// The model.
        model: String,
        /// What the server asked to wait, if it said.
        retry_after: Option<Duration>,
        /// The API's message.
        message: String,
    },
    /// The provider is overloaded (Anthropic's HTTP 529 or `overloaded_error`), after the
    /// retries ran out.
    #[error("{provider} ({model}): overloaded: {message}")]
    Overloaded {
        /// The provider.
        provider: &'static str,
        /// The model.
        model: String,
        /// The API's message.
        message: String,
    },
    /// The server failed (HTTP 5xx, 408, 409), after the retries ran out.
    #[error("{provider} ({model}): server error (HTTP {status}): {message}")]
    Server {
        /// The provider.
        provider: &'static str,
        /// The model.
        model: String,
        /// The HTTP status.
        status: u16,
        /// The API's message.
        message: String,
    },
    /// No complete answer within the request timeout.
    #[error("{provider} ({model}): timed out after {after:?}")]
    Timeout {
        /// The provider.
        provider: &'static str,
        /// The model.
        model: String,
        /// The timeout.
        after: Duration,
    },
    /// The connection failed, after the retries ran out.
    #[error("{provider} ({model}): connection failed: {source}")]
    Connection {
        /// The provider.
        provider: &'static str,
        /// The model.
        model: String,
        /// The transport error.
        #[source]
        source: BoxError,
    },
    /// The response did not have the expected shape.
    #[error("{provider} ({model}): malformed response: {message}")]
    MalformedResponse {
        /// The provider.
        provider: &'static str,
        /// The model.
        model: String,
        /// What was wrong.
        message: String,
    },
    /// The provider is not set up: no API key, no such provider, an invalid URL.
    #[error("{provider}: configuration error: {message}")]
    Config {
        /// The provider.
        provider: &'static str,
        /// What is missing or wrong.
        message: String,
    },
    /// A scripted model was asked for more replies than it has, or its function failed.
    #[error("scripted model ({model}): {message}")]
    Script {
        /// The model name in the request.
        model: String,
        /// What went wrong.
        message: String,
    },
    /// A replay's request departs from the recorded one
    /// (`loopstack_model::ReplayModel`): `diff` says how.
    #[error("{diff}")]
    Replay {
        /// The request (1-based) that departs.
        turn: usize,
        /// What differs: the system prompt's lines, the settings, tools or messages.
        diff: String,
    },
}

fn fmt_retry_after(d: Option<Duration>) -> String {
    d.map(|d| format!(" (retry after {d:?})")).unwrap_or_default()
}

impl LlmError {
    /// The provider the error came from.
    pub fn provider(&self) -> &'static str {
        match self {
            Self::Authentication { provider, .. }
            | Self::InvalidRequest { provider, .. }
            | Self::RateLimited { provider, .. }
            | Self::Overloaded { provider, .. }
            | Self::Server { provider, .. }
            | Self::Timeout { provider, .. }
            | Self::Connection { provider, .. }
            | Self::MalformedResponse { provider, .. }
            | Self::Config { provider, .. } => provider,
            Self::Script { .. } => "scripted",
            Self::Replay { .. } => "replay",
        }
    }

    /// The kind of error in one low-cardinality word (`rate_limited`, `timeout`,
    /// ...), for logs, metrics and traces (OpenTelemetry's `error.type`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Authentication { .. } => "authentication",
            Self::InvalidRequest { .. } => "invalid_request",
            Self::RateLimited { .. } => "rate_limited",
            Self::Overloaded { .. } => "overloaded",
            Self::Server { .. } => "server",
            Self::Timeout { .. } => "timeout",
            Self::Connection { .. } => "connection",
            Self::MalformedResponse { .. } => "malformed_response",
            Self::Config { .. } => "config",
            Self::Script { .. } => "script",
            Self::Replay { .. } => "replay",
        }
    }

    /// Whether the call may succeed if made again (a timeout is not retried: the
    /// request may still be running on the server).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. } | Self::Overloaded { .. } | Self::Server { .. } | Self::Connection { .. }
        )
    }

    /// Whether the model is unavailable for now, so another model may answer instead
    /// (`loopstack_model::GenerateOptions::fallback` then tries the next model): an error
    /// [retryable](Self::is_retryable) after the retries ran out, or a timeout.
    pub fn is_unavailable(&self) -> bool {
        self.is_retryable() || matches!(self, Self::Timeout { .. })
    }
}
