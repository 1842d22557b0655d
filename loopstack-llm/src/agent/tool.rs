//! An agent as a tool of another agent: each call is a durable child run of the
//! named agent, and its answer is the call's result.

use std::time::Duration;

use loopstack_core::schemars::JsonSchema;
use loopstack_core::{
    ChildEnded, RegistryError, RunContext, RunError, RunStatus, Tool, ToolContext, ToolError, ToolOptions, ToolOutput,
    is_valid_tool_name, tool_input_schema,
};
use serde::Deserialize;
use serde_json::Value;

use super::{Agent, AgentStatus, TypedAgent, takes_decisions};
use crate::dispatch::{DEFAULT_MAX_ERROR_CHARS, Secrets};
use crate::message::Usage;
use crate::workflow_tool::{CALL_SEQ_BASE, TOOL_RESULT_SIGNAL};

/// The default time an agent tool's child run may take before it ends or first
/// waits: model turns are slow, so longer than a workflow tool's.
pub const DEFAULT_AGENT_TOOL_TIMEOUT: Duration = Duration::from_secs(300);

/// The arguments of an agent tool: the question the called agent answers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[schemars(crate = "loopstack_core::schemars")]
pub struct AgentQuestion {
    /// The question or task for the agent, with everything it needs to know: it
    /// sees only this, not the conversation so far.
    pub question: String,
}

/// Why [`Agent::as_tool`] refused to make a tool, or [`Agent::handoff`] a handoff.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AgentToolError {
    /// The tool's name is not a valid tool name.
    #[error(transparent)]
    Name(#[from] RegistryError),
    /// The agent has no name of its own: it is the workflow `agent`, which the
    /// calling agent may be too, so its calls could run the caller itself.
    #[error(
        "only a named agent can be a tool: name it with `Agent::named` (an unnamed agent is the workflow `agent`, \
         which the calling agent may be too)"
    )]
    Unnamed,
    /// The target of a handoff has no name of its own ([`Agent::handoff`]): its
    /// transfer tool and the run's record of who has the conversation need one.
    #[error("only a named agent can take a handoff: name it with `Agent::named` (its tool is `transfer_to_<name>`)")]
    UnnamedHandoff,
    /// An agent cannot hand the conversation to itself.
    #[error("agent `{name}` cannot hand the conversation to itself")]
    HandoffToSelf {
        /// The agent's name.
        name: String,
    },
}

/// A named agent offered to another agent as a tool ([`Agent::as_tool`]).
///
/// The model sees the tool's name, its description and one argument, the
/// `question` ([`AgentQuestion`]). Each call is a durable child run of the agent
/// (the workflow of the agent's [name](Agent::named)) whose prompt is the
/// question; the child's final answer is the call's result (its text, or its
/// typed answer as JSON for a [`TypedAgent`]).
///
/// - **Registration**: the called agent must be registered on the runtime next to
///   the agent that calls it (`Runtime::new().try_register(billing)?.try_register(triage)?`),
///   so that its runs resume after a restart; a call runs the agent registered
///   under that name (the tool keeps only the name), and a call to an agent that
///   is not registered gives an error result that says so.
/// - **Waiting**: a child that waits (a call of its own that needs approval, a
///   workflow tool of its own that waits) keeps the parent's call pending: the
///   parent run waits, durably, at
///   [`AgentStatus::AwaitingTools`], and goes on with the answer once the child's
///   approval is decided and the child ends.
/// - **Usage**: the child's tokens and cost are added to the parent's
///   ([`AgentState::usage`](super::AgentState::usage), [`AgentState::cost`](super::AgentState::cost)),
///   so the parent's [`Limits`](super::Limits) count them; the child keeps its own
///   limits as well. The child's cost is priced by the child's own
///   [`Prices`](super::Prices): give the called agent prices too when the caller
///   has a cost budget.
/// - **Errors**: a child that fails, is cancelled, stops at one of its limits, or
///   takes longer than the timeout (default 5 minutes) before it ends or first
///   waits, gives one error result the parent's model reads; the parent goes on.
/// - A [chat](Agent::chat) agent waits for its user after each answer, so its calls
///   stay pending: offer agents that answer and end.
///
/// ```
/// use loopstack_core::{Runtime, ToolRegistry};
/// use loopstack_llm::{Agent, ScriptedModel};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let billing = Agent::new(ScriptedModel::new().text("You paid 20 EUR on 1 May."), "m", ToolRegistry::new())
///     .named("billing")?;
/// let model = ScriptedModel::new()
///     .tool_call("billing", serde_json::json!({"question": "What did the customer pay in May?"}))
///     .text("You paid 20 EUR on 1 May.");
/// let tools = ToolRegistry::new().with(billing.as_tool("billing", "Answers billing questions.")?)?;
/// let triage = Agent::new(model, "m", tools).named("triage")?;
/// // The called agent is registered too: its runs are durable like any other.
/// let runtime = Runtime::new().try_register(billing)?.try_register(triage.clone())?;
/// let reply = triage.ask(&runtime, "What did I pay in May?").await?;
/// assert_eq!(reply.text, "You paid 20 EUR on 1 May.");
/// assert_eq!(reply.usage.all_tokens(), 60, "two turns of its own and one of billing's, 20 tokens each");
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct AgentTool {
    name: String,
    description: String,
    agent: &'static str,
    timeout: Duration,
}

impl Agent {
    /// This agent as a tool of another agent, named `name` (validated like
    /// `#[tool]` names) with `description` for the calling model: see
    /// [`AgentTool`]. Each call runs this agent, under its [name](Agent::named),
    /// as a child run; register it on the runtime too.
    ///
    /// # Errors
    /// [`AgentToolError::Unnamed`] when the agent has no [name](Agent::named), and
    /// [`AgentToolError::Name`] when `name` is not a valid tool name.
    pub fn as_tool(
        &self,
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> Result<AgentTool, AgentToolError> {
        let name = name.into();
        if !is_valid_tool_name(&name) {
            return Err(RegistryError::InvalidName(name).into());
        }
        if !self.named {
            return Err(AgentToolError::Unnamed);
        }
        Ok(AgentTool { name, description: description.into(), agent: self.name(), timeout: DEFAULT_AGENT_TOOL_TIMEOUT })
    }
}

impl<T: JsonSchema + serde::de::DeserializeOwned> TypedAgent<T> {
    /// This typed agent as a tool of another agent, as [`Agent::as_tool`]: the
    /// call's result is its typed answer, as JSON.
    ///
    /// # Errors
    /// As [`Agent::as_tool`].
    pub fn as_tool(
        &self,
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> Result<AgentTool, AgentToolError> {
        self.agent().as_tool(name, description)
    }
}

impl AgentTool {
    /// Sets how long the child may run before it ends or first waits (5 minutes
    /// unless set; zero means 24 hours). On the timeout the child is cancelled and
    /// the call's result is an error. The waiting does not count.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = if timeout.is_zero() { Duration::from_secs(24 * 60 * 60) } else { timeout };
        self
    }

    /// The name of the agent each call runs (its workflow).
    pub fn agent(&self) -> &'static str {
        self.agent
    }

    fn failure(&self, detail: &str, secrets: &Secrets) -> ToolOutput {
        let detail = secrets.redact_bounded(detail, DEFAULT_MAX_ERROR_CHARS);
        ToolOutput::error(format!("tool `{}` failed: {detail}", self.name))
    }
}

#[async_trait::async_trait]
impl Tool for AgentTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        tool_input_schema::<AgentQuestion>()
    }

    fn options(&self) -> ToolOptions {
        // The tool keeps its own timeout: on it, the child is cancelled, not dropped.
        ToolOptions::new().needs_run(true).timeout(Duration::ZERO)
    }

    async fn call(&self, args: Value, cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let (Ok(runtime), Some(parent), Some(step)) = (cx.runtime(), cx.run_id(), cx.step()) else {
            return Err(ToolError::new(format!(
                "tool `{}` runs the agent `{}` and can only be called from a run",
                self.name, self.agent
            )));
        };
        let question = match AgentQuestion::deserialize(&args) {
            Ok(q) => q.question,
            Err(e) => {
                return Err(ToolError::invalid_arguments(format!("invalid arguments for tool `{}`: {e}", self.name)));
            }
        };
        let secrets = runtime.secrets();
        match runtime.definition_of(self.agent) {
            None => {
                tracing::warn!(tool = %self.name, agent = self.agent, "an agent tool's agent is not registered");
                return Ok(self.failure(
                    &format!(
                        "the agent `{}` is not registered on this runtime; register it next to the agent that calls \
                         it (`Runtime::try_register`)",
                        self.agent
                    ),
                    secrets,
                ));
            }
            Some(definition) if !takes_decisions(definition) => {
                return Ok(self.failure(&format!("the workflow `{}` is not an agent", self.agent), secrets));
            }
            Some(_) => {}
        }
        let child = loopstack_core::children::child_run_id(parent, step, CALL_SEQ_BASE + cx.index() as u64);
        if let Err(e) =
            runtime.create_child(parent, child, self.agent, Value::String(question), TOOL_RESULT_SIGNAL).await
        {
            return Ok(self.failure(&format!("its run could not be started: {e}"), secrets));
        }
        let span = tracing::info_span!("loopstack.agent_tool", tool = %self.name, agent = self.agent, child = %child);
        let drive = tracing::Instrument::instrument(runtime.drive_child(child), span);
        // Whatever happens, the child's end is the result: it comes as the parent's
        // `tool_result` signal with the child's state, its answer and its usage
        // (already in the parent's inbox when the child ended within the call).
        match tokio::time::timeout(self.timeout, drive).await {
            Err(_) => {
                if let Err(e) = runtime.cancel(child, "the tool call timed out").await {
                    tracing::warn!(child = %child, error = %e, "could not cancel a timed-out child run");
                    return Ok(ToolOutput::error(format!(
                        "tool `{}` timed out after {} s: the agent `{}` did not finish",
                        self.name,
                        self.timeout.as_secs(),
                        self.agent
                    )));
                }
                Ok(ToolOutput::pending(child))
            }
            Ok(Ok(_)) | Ok(Err(RunError::InvalidStatus { .. })) => Ok(ToolOutput::pending(child)),
            Ok(Err(e)) => {
                // A child whose step failed has ended, and told the parent; one that
                // could not be driven at all has not.
                let ended = runtime.store().load_run(child).await.is_ok_and(|r| r.status.is_finished());
                if ended {
                    Ok(ToolOutput::pending(child))
                } else {
                    Ok(self.failure(&format!("the agent `{}` failed: {e}", self.agent), secrets))
                }
            }
        }
    }
}

/// The few fields of a child agent's state its end is read by.
#[derive(Deserialize, Default)]
struct ChildAgent {
    #[serde(default)]
    usage: Usage,
    #[serde(default)]
    cost: f64,
    #[serde(default)]
    status: Option<AgentStatus>,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    answer: Option<Value>,
}

/// What a child agent's end gives its call, when the child is an agent (its
/// workflow waits for tool decisions, whatever its name): its answer or an error
/// result, with the tokens and cost it used. `None` for children of other
/// workflows. Read only when a pending call's child ends.
pub(crate) async fn agent_child_result(cx: &RunContext, ended: &ChildEnded) -> Option<(ToolOutput, Usage, f64)> {
    let runtime = cx.runtime();
    if !runtime.definition_of(&ended.workflow).is_some_and(takes_decisions) {
        return None;
    }
    let state: ChildAgent = match &ended.output {
        Some(output) => match ChildAgent::deserialize(output) {
            Ok(state) => state,
            Err(e) => {
                tracing::warn!(child = %ended.child, error = %e, "a child agent's state does not read");
                let text = format!("the agent `{}` ended, but its answer does not read: {e}", ended.workflow);
                return Some((ToolOutput::error(text), Usage::default(), 0.0));
            }
        },
        // A child that failed or was cancelled: its last checkpoint has its usage.
        None => match runtime.store().load_run(ended.child).await {
            Ok(record) => serde_json::from_str(record.state.get()).unwrap_or_default(),
            Err(e) => {
                tracing::warn!(child = %ended.child, error = %e, "could not read a child agent's usage");
                ChildAgent::default()
            }
        },
    };
    let output = answer_of(&ended.workflow, ended.status, &state, ended.error.as_deref(), runtime.secrets());
    Some((output, state.usage, state.cost))
}

/// What a run of an agent (of any name) that ended gives as a tool's result: its
/// answer (the text, or a typed agent's value as JSON) when it completed with one;
/// otherwise an error result that says why in words (a limit it reached, an answer
/// cut at the token limit, a failure with its reason, a cancellation), with
/// `secrets` redacted. The same result a calling agent reads for
/// [`Agent::as_tool`]; the MCP server (`loopstack::mcp_server`) returns it for a
/// call of an agent. `state` is the run's state as stored; `error` its recorded
/// error.
///
/// ```
/// use loopstack_core::{RunStatus, ToolOutput, secrets::Secrets};
/// use loopstack_llm::agent::agent_answer;
/// use serde_json::json;
///
/// let done = json!({"output": "Paid on 1 May."});
/// assert_eq!(agent_answer("billing", RunStatus::Completed, &done, None, &Secrets::new()), ToolOutput::text("Paid on 1 May."));
/// let failed = agent_answer("billing", RunStatus::Failed, &json!({}), Some("the model is down"), &Secrets::new());
/// assert!(failed.is_error && failed.to_text().contains("the model is down"));
/// ```
pub fn agent_answer(
    agent: &str,
    status: RunStatus,
    state: &Value,
    error: Option<&str>,
    secrets: &Secrets,
) -> ToolOutput {
    match ChildAgent::deserialize(state) {
        Ok(state) => answer_of(agent, status, &state, error, secrets),
        Err(e) => ToolOutput::error(format!("the agent `{agent}` ended, but its answer does not read: {e}")),
    }
}

fn answer_of(agent: &str, status: RunStatus, state: &ChildAgent, error: Option<&str>, secrets: &Secrets) -> ToolOutput {
    match status {
        RunStatus::Completed => match (&state.status, &state.answer, &state.output) {
            (None | Some(AgentStatus::Completed), Some(answer), _) => ToolOutput::json(answer.clone()),
            (None | Some(AgentStatus::Completed), None, text) => ToolOutput::text(text.clone().unwrap_or_default()),
            (Some(status), _, text) => {
                let partial = text.as_ref().filter(|t| !t.trim().is_empty()).map(|t| format!("; its last text: {t}"));
                ToolOutput::error(secrets.redact_bounded(
                    &format!("the agent `{agent}` did not answer: {}{}", describe(status), partial.unwrap_or_default()),
                    DEFAULT_MAX_ERROR_CHARS,
                ))
            }
        },
        status => {
            let what = match status {
                RunStatus::Cancelled => "was cancelled",
                RunStatus::Stopped => "stopped",
                _ => "failed",
            };
            let detail = error.unwrap_or("no reason was recorded");
            ToolOutput::error(format!(
                "the agent `{agent}` {what}: {}",
                secrets.redact_bounded(detail, DEFAULT_MAX_ERROR_CHARS)
            ))
        }
    }
}

/// How a child agent that ended without an answer stopped, in the model's words.
fn describe(status: &AgentStatus) -> String {
    match status {
        AgentStatus::LimitReached(limit) => format!("it reached {limit}"),
        AgentStatus::MaxTokens => "its answer was cut at its output token limit".to_owned(),
        AgentStatus::EmptyAnswer => "its answer was empty".to_owned(),
        AgentStatus::RepeatedToolCalls { tools, times } => {
            format!("it asked for the same calls ({}) {times} turns in a row", tools.join(", "))
        }
        AgentStatus::InvalidAnswer { error, .. } => format!("its answer did not fit its type: {error}"),
        other => format!("it stopped ({other:?})"),
    }
}
