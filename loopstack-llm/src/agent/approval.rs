//! Tool calls that wait for a person, and the person's decisions.

use loopstack_core::schemars::{self, JsonSchema};
use loopstack_core::{Definition, RunError, RunId, RunOutcome, RunRecord, RunStatus, Runtime};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The agent's place where calls wait for decisions.
const AWAITING_APPROVAL: &str = "awaiting_approval";

/// The agent's signal that carries decisions ([`ToolDecisions`]).
pub const DECIDE_TOOLS: &str = "decide_tools";

/// Whether `definition` is an agent's table, whatever the agent's name
/// ([`Agent::named`](crate::Agent::named)): it waits at `awaiting_approval` for the
/// [`DECIDE_TOOLS`] signal. For code that operates runs by name (the command line,
/// the HTTP API) and has no [`Agent`](crate::Agent) value at hand.
pub fn takes_decisions(definition: &Definition) -> bool {
    definition.transitions().iter().any(|t| t.wait && t.name == DECIDE_TOOLS && t.leaves(AWAITING_APPROVAL))
}

/// The calls a stored run waits to have decided, each with its id, tool and
/// arguments, read from its state: `Some` when the run is a run of an agent (of
/// any name: `definition` is its workflow's table, see [`takes_decisions`]) that
/// waits at `awaiting_approval`; `None` for any other run, or an agent's run that
/// waits for something else or has ended. It drives nothing.
///
/// [`Agent::pending`](crate::Agent::pending) is the same for a run of an agent at
/// hand; this one serves the command line and the HTTP API, which know runs by
/// their workflow's name.
///
/// # Errors
/// [`RunError::State`] when the run's state does not read.
///
/// ```
/// use loopstack_core::{Runtime, ToolRegistry};
/// use loopstack_llm::{Agent, ScriptedModel, pending_calls};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// # struct Reset;
/// # #[async_trait::async_trait]
/// # impl loopstack_core::Tool for Reset {
/// #     fn name(&self) -> &str { "reset_password" }
/// #     fn description(&self) -> &str { "Resets a password." }
/// #     fn input_schema(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
/// #     async fn call(&self, _: serde_json::Value, _: &loopstack_core::ToolContext)
/// #         -> Result<loopstack_core::ToolOutput, loopstack_core::ToolError> { Ok(loopstack_core::ToolOutput::text("done")) }
/// # }
/// let mut tools = ToolRegistry::new().with(Reset)?;
/// tools.require_approval("reset_password")?;
/// let model = ScriptedModel::new().tool_call("reset_password", serde_json::json!({"user": "ada"}));
/// let agent = Agent::new(model, "m", tools).named("helpdesk")?;
/// let runtime = Runtime::new().register(agent.clone());
/// let run_id = agent.ask(&runtime, "Reset Ada's password").await?.run_id;
///
/// // Known only by its id: the table comes from the runtime, by the run's workflow.
/// let record = runtime.store().load_run(run_id).await?;
/// let table = runtime.definition_of(&record.workflow).unwrap();
/// let pending = pending_calls(table, &record)?.unwrap();
/// assert_eq!((pending[0].name.as_str(), &pending[0].arguments), ("reset_password", &serde_json::json!({"user": "ada"})));
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
pub fn pending_calls(definition: &Definition, record: &RunRecord) -> Result<Option<Vec<PendingCall>>, RunError> {
    if !takes_decisions(definition) || record.status != RunStatus::Waiting || record.place != AWAITING_APPROVAL {
        return Ok(None);
    }
    /// The one field of the agent's state read here.
    #[derive(Deserialize)]
    struct Waiting {
        #[serde(default)]
        pending_approval: Vec<PendingCall>,
    }
    let state: Waiting = serde_json::from_str(record.state.get()).map_err(|source| RunError::State {
        workflow: definition.name(),
        run_id: record.run_id,
        source,
    })?;
    Ok(Some(state.pending_approval))
}

/// Sends `decisions` to an agent's run known by its id (the [`DECIDE_TOOLS`]
/// signal, by the run's workflow's name) and drives it on, as
/// [`Agent::decide`](crate::Agent::decide) does for an agent at hand.
///
/// # Errors
/// As [`Runtime::signal_by_name`]: an unknown run, a run that does not wait for
/// decisions, or a decision on a call that does not wait for one.
pub async fn decide_by_name(
    runtime: &Runtime,
    run_id: RunId,
    decisions: &ToolDecisions,
) -> Result<RunOutcome, RunError> {
    let payload = serde_json::to_value(decisions).expect("decisions serialize");
    runtime.signal_by_name(run_id, DECIDE_TOOLS, payload).await
}

/// A tool call that waits for a person's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PendingCall {
    /// The call's id, to name in a [`ToolDecision`].
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The arguments the model gave.
    pub arguments: Value,
}

/// A person's decision on one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ToolDecision {
    /// The call's id ([`PendingCall::call_id`]).
    pub call_id: String,
    /// Whether the call may run.
    pub approved: bool,
    /// Why; a denied call's reason is what the model reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ToolDecision {
    /// Approves call `call_id`.
    pub fn approve(call_id: impl Into<String>) -> Self {
        Self { call_id: call_id.into(), approved: true, reason: None }
    }

    /// Denies call `call_id`, telling the model why.
    pub fn deny(call_id: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { call_id: call_id.into(), approved: false, reason: Some(reason.into()) }
    }
}

/// The payload of the agent's `decide_tools` signal: decisions on some or all of
/// the calls that wait. The run goes on once every call has one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ToolDecisions {
    /// The decisions, one per call.
    pub decisions: Vec<ToolDecision>,
}

impl ToolDecisions {
    /// These decisions.
    pub fn new(decisions: impl IntoIterator<Item = ToolDecision>) -> Self {
        Self { decisions: decisions.into_iter().collect() }
    }

    /// Approves every call in `calls`.
    pub fn approve_all<'a>(calls: impl IntoIterator<Item = &'a PendingCall>) -> Self {
        Self::new(calls.into_iter().map(|c| ToolDecision::approve(&c.call_id)))
    }

    /// Denies every call in `calls` for one reason.
    pub fn deny_all<'a>(calls: impl IntoIterator<Item = &'a PendingCall>, reason: &str) -> Self {
        Self::new(calls.into_iter().map(|c| ToolDecision::deny(&c.call_id, reason)))
    }
}
