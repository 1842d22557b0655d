//! Errors of the LLM layer.

pub use loopstack_model::LlmError;

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
    /// An answer to a call that asks for input does not fit the request's schema.
    #[error("the input for call `{call_id}` does not fit what it asks: {reason}")]
    InvalidInput {
        /// The call.
        call_id: String,
        /// Where and how the answer does not fit.
        reason: String,
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
