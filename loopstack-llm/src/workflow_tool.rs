//! A workflow as a tool: each call starts one child run, and what the child
//! publishes is the call's result.

use std::time::Duration;

use loopstack_core::schemars::JsonSchema;
use loopstack_core::{
    ChildEnded, RegistryError, RunError, RunOutcome, RunStatus, Tool, ToolContext, ToolError, ToolOptions, ToolOutput,
    is_valid_tool_name, tool_input_schema,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::dispatch::{CallView, ChildInput, DEFAULT_MAX_ERROR_CHARS, ProjectionContext, Secrets, select_result};

/// The signal a workflow tool's child run ends with: the parent's wait transition
/// of this name takes its [`ChildEnded`]. The [`Agent`](crate::Agent) has one at
/// `awaiting_tools`; a workflow of your own that delegates calls to workflow tools
/// whose children may wait needs one too.
pub const TOOL_RESULT_SIGNAL: &str = "tool_result";
/// The default time a workflow tool's child run may take before it first waits or
/// ends.
pub const DEFAULT_WORKFLOW_TOOL_TIMEOUT: Duration = Duration::from_secs(30);

/// Child ids of workflow tools are numbered from here, apart from the children a
/// transition starts itself (numbered from 0).
pub(crate) const CALL_SEQ_BASE: u64 = 1 << 32;

/// A registered workflow offered to a model as a tool. The model sees only the
/// name, the description and the argument schema (generated from a Rust type);
/// each call starts one child run of the workflow, whose input is built from the
/// call by an [input mapping](crate::dispatch::InputMapping) or a function, and
/// whose published result (`tool_result_value`, else `tool_result_text`, else its
/// output without top-level `_` keys) is the call's result.
///
/// - The workflow must be registered with the runtime
///   ([`Runtime::register`](loopstack_core::Runtime::register)).
/// - Arguments the argument type does not list are dropped with a warning;
///   arguments that do not convert to it give an error result for that call.
/// - A child that fails, is cancelled, or takes longer than the timeout (default
///   30 s; zero means 24 hours) before it ends or first waits gives an error result
///   (its details bounded in length, registered [`Secrets`] redacted); one that
///   times out is cancelled.
/// - A child that waits (for a person's signal, a timer) leaves its call pending:
///   the agent waits, durably, until the child ends, and its end is the call's
///   result ([`TOOL_RESULT_SIGNAL`]). The timeout does not count the waiting: a
///   person's approval may take days. A waiting child keeps its own deadline, as a
///   timer transition of its workflow (`#[transition(from = Asked, to = End, after =
///   "48h")]`), durable across restarts; cancelling the child
///   ([`Runtime::cancel`](loopstack_core::Runtime::cancel)) also ends the call, with
///   an error result.
/// - To offer an [`Agent`](crate::Agent) as a tool, use
///   [`Agent::as_tool`](crate::Agent::as_tool): its calls take a question and
///   give the agent's answer, and its tokens count in the caller's limits.
///
/// ```no_run
/// use loopstack_llm::WorkflowTool;
/// # #[derive(serde::Deserialize, loopstack_core::schemars::JsonSchema)]
/// # #[schemars(crate = "loopstack_core::schemars")]
/// # struct RefundArgs { order: String }
/// let tool = WorkflowTool::new::<RefundArgs>("issue_refund", "Refunds an order after a manager approves.", "refund")?
///     .input(loopstack_llm::dispatch::ChildInput::mapping(serde_json::json!({"order": "arguments.order"}))?)
///     .timeout(std::time::Duration::from_secs(10));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct WorkflowTool {
    name: String,
    description: String,
    schema: Value,
    workflow: String,
    input: ChildInput,
    timeout: Duration,
    check: fn(&Value) -> Result<(), String>,
}

impl std::fmt::Debug for WorkflowTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowTool")
            .field("name", &self.name)
            .field("workflow", &self.workflow)
            .field("input", &self.input)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

fn check<A: DeserializeOwned>(args: &Value) -> Result<(), String> {
    A::deserialize(args).map(drop).map_err(|e| e.to_string())
}

impl WorkflowTool {
    /// A tool named `name` (validated like `#[tool]` names) that runs the
    /// registered workflow `workflow`, with arguments of type `A`. Its child's input
    /// is the call's envelope (the call, tool name, arguments, call id and index)
    /// until [`WorkflowTool::input`] sets a mapping.
    pub fn new<A: JsonSchema + DeserializeOwned>(
        name: impl Into<String>,
        description: impl Into<String>,
        workflow: impl Into<String>,
    ) -> Result<Self, RegistryError> {
        let name = name.into();
        if !is_valid_tool_name(&name) {
            return Err(RegistryError::InvalidName(name));
        }
        Ok(Self {
            name,
            description: description.into(),
            schema: tool_input_schema::<A>(),
            workflow: workflow.into(),
            input: ChildInput::default(),
            timeout: DEFAULT_WORKFLOW_TOOL_TIMEOUT,
            check: check::<A>,
        })
    }

    /// Sets how the child's input is built from the call and the parent's state.
    #[must_use]
    pub fn input(mut self, input: ChildInput) -> Self {
        self.input = input;
        self
    }

    /// Sets how long the child may run before it ends or first waits (30 s unless
    /// set; zero means 24 hours).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = if timeout.is_zero() { Duration::from_secs(24 * 60 * 60) } else { timeout };
        self
    }

    /// The workflow each call runs.
    pub fn workflow(&self) -> &str {
        &self.workflow
    }

    /// An error result; the details are redacted of the runtime's `secrets`
    /// before they are bounded, so a cut never leaves part of a secret behind.
    fn failure(&self, what: &str, detail: &str, secrets: &Secrets) -> ToolOutput {
        let detail = secrets.redact_bounded(detail, DEFAULT_MAX_ERROR_CHARS);
        ToolOutput::error(format!("tool `{}` failed: {what}: {detail}", self.name))
    }
}

/// The result a child run's end gives its call: what it published when it
/// completed, else an error result with its status and error (redacted of
/// `secrets`, the runtime's, then bounded to
/// [`DEFAULT_MAX_ERROR_CHARS`]).
pub fn child_result(ended: &ChildEnded, secrets: &Secrets) -> ToolOutput {
    if ended.completed() {
        return match select_result(ended.output.clone().unwrap_or(Value::Null)).0 {
            Value::String(text) => ToolOutput::text(text),
            value => ToolOutput::json(value),
        };
    }
    let status = match ended.status {
        RunStatus::Cancelled => "was cancelled",
        RunStatus::Stopped => "stopped",
        _ => "failed",
    };
    let detail = ended.error.as_deref().unwrap_or("no reason was recorded");
    ToolOutput::error(format!(
        "the workflow `{}` {status}: {}",
        ended.workflow,
        secrets.redact_bounded(detail, DEFAULT_MAX_ERROR_CHARS)
    ))
}

#[async_trait::async_trait]
impl Tool for WorkflowTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    fn options(&self) -> ToolOptions {
        // The tool keeps its own timeout: on it, the child is cancelled, not dropped.
        ToolOptions::new().needs_run(true).timeout(Duration::ZERO)
    }

    async fn call(&self, args: Value, cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let (Ok(runtime), Some(parent), Some(step)) = (cx.runtime(), cx.run_id(), cx.step()) else {
            return Err(ToolError::new(format!(
                "tool `{}` runs a workflow and can only be called from a run",
                self.name
            )));
        };
        if let Err(why) = (self.check)(&args) {
            return Err(ToolError::invalid_arguments(format!("invalid arguments for tool `{}`: {why}", self.name)));
        }
        let state = cx.parent_state().unwrap_or(&Value::Null);
        let call = CallView::new(cx.call_id(), cx.tool_name(), &args).with_index(cx.index());
        let input = match self.input.child_input(&ProjectionContext::new(call, state)) {
            Ok(input) => input,
            Err(why) => return Ok(self.failure("its input could not be built", &why, runtime.secrets())),
        };
        let child = loopstack_core::children::child_run_id(parent, step, CALL_SEQ_BASE + cx.index() as u64);
        if let Err(e) = runtime.create_child(parent, child, &self.workflow, input, TOOL_RESULT_SIGNAL).await {
            return Ok(self.failure("its run could not be started", &e.to_string(), runtime.secrets()));
        }
        let span = tracing::info_span!("loopstack.workflow_tool", tool = %self.name, workflow = %self.workflow, child = %child);
        let drive = tracing::Instrument::instrument(runtime.drive_child(child), span);
        match tokio::time::timeout(self.timeout, drive).await {
            Err(_) => {
                if let Err(e) = runtime.cancel(child, "the tool call timed out").await {
                    tracing::warn!(child = %child, error = %e, "could not cancel a timed-out child run");
                }
                Ok(ToolOutput::error(format!(
                    "tool `{}` timed out after {} s: its workflow `{}` did not finish",
                    self.name,
                    self.timeout.as_secs(),
                    self.workflow
                )))
            }
            Ok(Ok(RunOutcome::Completed)) => {
                let record = runtime.store().load_run(child).await.map_err(|e| ToolError::new(e.to_string()))?;
                let output: Value = serde_json::from_str(record.state.get()).unwrap_or(Value::Null);
                let ended =
                    ChildEnded::new(child, record.workflow.to_string(), RunStatus::Completed, Some(output), None);
                Ok(child_result(&ended, runtime.secrets()))
            }
            Ok(Ok(RunOutcome::Stopped { reason })) => {
                let ended = ChildEnded::new(child, self.workflow.as_str(), RunStatus::Stopped, None, Some(reason));
                Ok(child_result(&ended, runtime.secrets()))
            }
            Ok(Err(RunError::InvalidStatus { .. })) => {
                // Not queued or waiting: another driver holds it (as after a crash), or it
                // ended before, as when the transition runs again after a retry.
                let record = runtime.store().load_run(child).await.map_err(|e| ToolError::new(e.to_string()))?;
                if !record.status.is_finished() {
                    return Ok(ToolOutput::pending(child));
                }
                let output = (record.status == RunStatus::Completed)
                    .then(|| serde_json::from_str::<Value>(record.state.get()).unwrap_or(Value::Null));
                let ended = ChildEnded::new(child, record.workflow.to_string(), record.status, output, record.error);
                Ok(child_result(&ended, runtime.secrets()))
            }
            // It waits: its end is the result.
            Ok(Ok(_)) => Ok(ToolOutput::pending(child)),
            Ok(Err(e)) => {
                Ok(self.failure(&format!("its workflow `{}` failed", self.workflow), &e.to_string(), runtime.secrets()))
            }
        }
    }
}
