//! Errors of the LLM layer.

use std::time::Duration;

use loopstack_core::BoxError;

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
    /// ([`ReplayModel`](crate::ReplayModel)): `diff` says how.
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

    /// Whether the call may succeed if made again (a timeout is not retried: the
    /// request may still be running on the server).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. } | Self::Overloaded { .. } | Self::Server { .. } | Self::Connection { .. }
        )
    }

    /// Whether the model is unavailable for now, so another model may answer instead
    /// (see [`GenerateOptions::fallback`](crate::GenerateOptions::fallback)): an error
    /// [retryable](Self::is_retryable) after the retries ran out, or a timeout.
    pub fn is_unavailable(&self) -> bool {
        self.is_retryable() || matches!(self, Self::Timeout { .. })
    }
}

/// Why an LLM step of a workflow ([`LlmGenerateText`](crate::LlmGenerateText),
/// [`LlmDelegateToolCalls`](crate::LlmDelegateToolCalls), the [`Agent`](crate::Agent))
/// failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The model call failed.
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// No model is registered for the provider named in the options.
    #[error("no model is registered for provider `{provider}`; registered: {}", list(.available))]
    UnknownProvider {
        /// The provider asked for.
        provider: String,
        /// The providers registered.
        available: Vec<String>,
    },
    /// A tool named in the options is not in the registry.
    #[error("tool `{tool}` is offered to the model but not registered; registered: {}", list(.available))]
    UnknownTool {
        /// The tool asked for.
        tool: String,
        /// The tools registered.
        available: Vec<String>,
    },
    /// A message document could not be written or read.
    #[error("message document error: {0}")]
    Document(#[from] serde_json::Error),
    /// A model is already registered under this name in [`Models`](crate::Models).
    #[error(
        "a model is already registered as `{name}`; register a second model of one provider under a name of its own (`Models::with_named`)"
    )]
    DuplicateModel {
        /// The name taken.
        name: String,
    },
    /// A tool call failed under [`ErrorPolicy::FailFast`](crate::dispatch::ErrorPolicy::FailFast).
    #[error("tool call `{call_id}` to `{tool}` failed, and the batch fails fast: {error}")]
    ToolFailed {
        /// The call.
        call_id: String,
        /// The tool.
        tool: String,
        /// Its error result.
        error: String,
    },
    /// A child run could not be started.
    #[error(transparent)]
    Child(#[from] loopstack_core::ChildError),
    /// Every model of a turn's fallback chain failed (see
    /// [`GenerateOptions::fallback`](crate::GenerateOptions::fallback)); the chain
    /// stops at the first failure that is not [`LlmError::is_unavailable`].
    #[error("every model failed: {}", failures.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    AllModelsFailed {
        /// Each model's error (which names the provider and model), in the order asked.
        failures: Vec<LlmError>,
    },
    /// The run was handed to an agent ([`AgentState::agent`](crate::AgentState::agent))
    /// that the agent driving it does not know: a build whose agent lost a
    /// handoff the run took.
    #[error("the run was handed to agent `{agent}`, which this agent does not know; it knows: {}", list(.known))]
    UnknownAgent {
        /// The agent the run was handed to.
        agent: String,
        /// The agents the driving agent can hand to, itself first.
        known: Vec<String>,
    },
    /// A signal decides on one call twice.
    #[error("call `{call_id}` has more than one decision in the signal; give one per call")]
    DuplicateDecision {
        /// The call.
        call_id: String,
    },
    /// A tool decision names a call that does not wait for one.
    #[error("call `{call_id}` does not wait for a decision; the calls that wait: {}", list(.pending))]
    NotPending {
        /// The call the decision names.
        call_id: String,
        /// The calls that wait.
        pending: Vec<String>,
    },
    /// A tool without [`ToolOptions::needs_run`](loopstack_core::ToolOptions::needs_run)
    /// answered with a pending result ([`ToolOutput::pending`](loopstack_core::ToolOutput::pending)):
    /// only a tool given the run can start the child run that ends it.
    #[error(
        "tool `{tool}` answered call `{call_id}` with a pending result, but only a tool marked \
         `#[tool(needs_run)]` can start the child run that gives it"
    )]
    PendingWithoutRun {
        /// The call.
        call_id: String,
        /// The tool.
        tool: String,
    },
}

fn list(items: &[String]) -> String {
    if items.is_empty() { "none".to_owned() } else { items.join(", ") }
}
