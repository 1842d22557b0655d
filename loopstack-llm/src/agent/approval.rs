//! Tool calls that wait for a person, and the person's decisions.

use loopstack_core::schemars::{self, JsonSchema};
use loopstack_core::{Definition, RunError, RunId, RunOutcome, RunRecord, RunStatus, Runtime};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The agent's place where calls wait for decisions.
const AWAITING_APPROVAL: &str = "awaiting_approval";

/// The agent's place where at-most-once calls whose outcome is unknown wait for a
/// person to say what happened.
const AWAITING_OUTCOME: &str = "awaiting_outcome";

/// The agent's signal that carries decisions ([`ToolDecisions`]).
pub const DECIDE_TOOLS: &str = "decide_tools";

/// The agent's signal that says what happened to at-most-once calls whose outcome
/// is unknown, as [`ToolDecisions`]: a decision with a
/// [`result`](ToolDecision::result) gives the call's result, an approval runs it
/// again, a denial answers it with the denial.
pub const RESOLVE_TOOLS: &str = "resolve_tools";

/// The signal that answers the calls a run waiting at `place` waits on: decisions
/// at `awaiting_approval`, outcomes at `awaiting_outcome`.
pub(crate) fn answering_signal(place: &str) -> Option<&'static str> {
    match place {
        AWAITING_APPROVAL => Some(DECIDE_TOOLS),
        AWAITING_OUTCOME => Some(RESOLVE_TOOLS),
        _ => None,
    }
}

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
/// waits at `awaiting_approval`, or at `awaiting_outcome` (at-most-once calls whose
/// outcome is unknown, answered the same way: see [`RESOLVE_TOOLS`]); `None` for any
/// other run, or an agent's run that waits for something else or has ended. It
/// drives nothing.
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
    if !takes_decisions(definition) || record.status != RunStatus::Waiting {
        return Ok(None);
    }
    /// The fields of the agent's state read here.
    #[derive(Deserialize)]
    struct Waiting {
        #[serde(default)]
        pending_approval: Vec<PendingCall>,
        #[serde(default)]
        unknown_outcome: Vec<PendingCall>,
    }
    let outcome = match &*record.place {
        AWAITING_APPROVAL => false,
        AWAITING_OUTCOME => true,
        _ => return Ok(None),
    };
    let state: Waiting = serde_json::from_str(record.state.get()).map_err(|source| RunError::State {
        workflow: definition.name(),
        run_id: record.run_id,
        source,
    })?;
    Ok(Some(if outcome { state.unknown_outcome } else { state.pending_approval }))
}

/// Sends `decisions` to an agent's run known by its id and drives it on, as
/// [`Agent::decide`](crate::Agent::decide) does for an agent at hand: the
/// [`DECIDE_TOOLS`] signal to a run that waits for approvals, [`RESOLVE_TOOLS`] to
/// one that waits for the outcome of at-most-once calls (by the run's place).
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
    let record = runtime.store().load_run(run_id).await?;
    let signal = answering_signal(&record.place).unwrap_or(DECIDE_TOOLS);
    runtime.signal_by_name(run_id, signal, payload).await
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
    /// Whether the tool is the client's ([`ClientTool`](super::ClientTool)): the call
    /// is answered with the client's result ([`ToolDecision::result`]), never run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub client: bool,
    /// Set when the call ran and asks a person for input before it can finish
    /// (an MCP server's elicitation): what to ask, and the schema the answer fits.
    /// A decision answers it with [`ToolDecision::input`]; a denial declines it. The
    /// call runs again with the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<loopstack_core::InputRequest>,
}

/// A person's decision on one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ToolDecision {
    /// The call's id ([`PendingCall::call_id`]).
    pub call_id: String,
    /// Whether the call may run: at `awaiting_outcome`, whether it runs again.
    pub approved: bool,
    /// Why; a denied call's reason is what the model reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The call's result, as a person knows it: the call is not run, and the model
    /// reads this text as its result. For an at-most-once call whose outcome is
    /// unknown (its run waits at `awaiting_outcome`), what it did; `approved` is
    /// then `true` (see [`ToolDecision::result`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The answer to a call that asks for input ([`PendingCall::input`]): a value
    /// that fits the request's schema. `approved` with no input answers with `{}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
}

impl ToolDecision {
    /// Answers call `call_id`, which asks for input ([`PendingCall::input`]), with
    /// `input`: the call runs again with it.
    pub fn input(call_id: impl Into<String>, input: Value) -> Self {
        Self { call_id: call_id.into(), approved: true, reason: None, result: None, input: Some(input) }
    }

    /// Approves call `call_id`.
    pub fn approve(call_id: impl Into<String>) -> Self {
        Self { call_id: call_id.into(), approved: true, reason: None, result: None, input: None }
    }

    /// Answers call `call_id` with its result, without running it: what an
    /// at-most-once call whose outcome is unknown did, as a person found out.
    ///
    /// ```
    /// use loopstack_llm::ToolDecision;
    ///
    /// let decision = ToolDecision::result("call_1", "refund r-17 was made");
    /// assert_eq!(
    ///     serde_json::to_value(&decision).unwrap(),
    ///     serde_json::json!({"call_id": "call_1", "approved": true, "result": "refund r-17 was made"})
    /// );
    /// ```
    pub fn result(call_id: impl Into<String>, result: impl Into<String>) -> Self {
        Self { call_id: call_id.into(), approved: true, reason: None, result: Some(result.into()), input: None }
    }

    /// Denies call `call_id`, telling the model why.
    pub fn deny(call_id: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { call_id: call_id.into(), approved: false, reason: Some(reason.into()), result: None, input: None }
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
