//! [`LlmDelegateToolCalls`]: runs the tool calls of an assistant message, with its
//! defaults ([`DEFAULT_TOOL_TIMEOUT`], [`DEFAULT_CONCURRENCY`]).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt as _, StreamExt as _};
use loopstack_core::{Emitter, EventKind, RunContext, SaveOptions, ToolContext, ToolOutput, ToolRegistry};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::RwLock;
use tracing::Instrument as _;

pub use crate::call_result::ToolCallResult;
use crate::dispatch::ErrorPolicy;
use crate::error::AgentError;
use crate::message::{Message, ToolResult, ToolUse, duplicate_ids};

mod run;

pub(crate) use run::redact_output;

/// The default per-tool timeout.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);
/// The default number of tool calls run at once.
pub const DEFAULT_CONCURRENCY: usize = 64;

impl DelegateResult {
    /// The batch as a [`DispatchResults`](crate::DispatchResults) collection: one
    /// entry per call of `message` that has its result, in call order, with its
    /// arguments, its JSON result kept as JSON (a text result as a string), the
    /// content the model reads and the error of a failed call; the counts, the
    /// chat-style messages and the entries by call id come with it. Calls still
    /// pending are left out.
    pub fn dispatch(&self, message: &Message) -> crate::DispatchResults {
        let calls: Vec<&ToolUse> = message.tool_uses().collect();
        self.results
            .iter()
            .filter(|r| !r.is_pending())
            .map(|r| {
                let arguments = calls.iter().find(|c| c.id == r.tool_use_id).map_or(Value::Null, |c| c.input.clone());
                crate::DispatchEntry::new(r.clone(), arguments)
            })
            .collect()
    }
}

/// What a batch of calls is run with besides the message; the default is none of it.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct CallOptions<'a> {
    /// Calls a person denied: not run, answered with their denial.
    pub denied: &'a [ToolDenial],
    /// The conversation the results are saved to (the default one when `None`).
    pub conversation: Option<&'a str>,
    /// The run's state as JSON, for workflow tools whose input mapping reads
    /// `ctx.*` (see [`WorkflowTool`](crate::WorkflowTool)).
    pub state: Option<&'a Arc<Value>>,
    /// Calls whose result is known without running them: what a person said an
    /// at-most-once call whose outcome was unknown returned. Not run; answered with it.
    pub answered: &'a [ToolCallResult],
    /// The step the calls' idempotency keys name, when the batch was first tried at
    /// an earlier step (`None`: the step this transition commits as).
    pub key_step: Option<u64>,
    /// A person's answers to the input calls asked for on their last attempt
    /// ([`ToolOutput::needs_input`](loopstack_core::ToolOutput::needs_input)): each
    /// such call runs again with its answer in its context.
    pub inputs: &'a [CallInput],
}

/// A person's answer to the input call `call_id` asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CallInput {
    /// The call.
    pub call_id: String,
    /// The answer, with the request it answers.
    pub answer: loopstack_core::InputAnswer,
}

impl CallInput {
    /// `answer` for call `call_id`.
    pub fn new(call_id: impl Into<String>, answer: loopstack_core::InputAnswer) -> Self {
        Self { call_id: call_id.into(), answer }
    }
}

impl<'a> CallOptions<'a> {
    /// No denials, the default conversation, no state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the calls a person denied.
    #[must_use]
    pub fn denied(mut self, denied: &'a [ToolDenial]) -> Self {
        self.denied = denied;
        self
    }

    /// Sets the conversation the results are saved to.
    #[must_use]
    pub fn conversation(mut self, conversation: Option<&'a str>) -> Self {
        self.conversation = conversation;
        self
    }

    /// Sets the run's state for workflow tools.
    #[must_use]
    pub fn state(mut self, state: &'a Arc<Value>) -> Self {
        self.state = Some(state);
        self
    }

    /// Sets the calls whose result is known already (see [`CallOptions::answered`]).
    #[must_use]
    pub fn answered(mut self, answered: &'a [ToolCallResult]) -> Self {
        self.answered = answered;
        self
    }

    /// Sets the answers to the input calls asked for (see [`CallOptions::inputs`]).
    #[must_use]
    pub fn inputs(mut self, inputs: &'a [CallInput]) -> Self {
        self.inputs = inputs;
        self
    }

    /// Sets the step the calls' idempotency keys name: the step the batch was first
    /// tried at, so every attempt of a call has the key of its first
    /// ([`ToolContext::idempotency_key`]).
    #[must_use]
    pub fn key_step(mut self, step: u64) -> Self {
        self.key_step = Some(step);
        self
    }
}

/// Saves a batch's results, in call order, as one tool-result message of
/// `conversation` (the default one when `None`).
pub fn save_results(
    cx: &mut RunContext,
    results: &[ToolCallResult],
    conversation: Option<&str>,
) -> Result<(), serde_json::Error> {
    if results.iter().any(|r| !r.images.is_empty()) {
        let message = ToolCallResult::message(results);
        return crate::image::save_with_images(cx, message, conversation, SaveOptions::new());
    }
    let message = Message::tool_results(results.iter().map(ToolResult::from));
    crate::generate::save_message(cx, &message, conversation, SaveOptions::new())
}

/// Results with their long contents cut to `max` bytes with a marker.
fn truncated(results: &[ToolCallResult], max: usize) -> Vec<ToolCallResult> {
    let mut cut = results.to_vec();
    for result in &mut cut {
        if result.content.len() > max {
            result.content = crate::dispatch::truncate_bytes(&result.content, max).into_owned();
        }
    }
    cut
}

/// A tool call a person denied: it is not run, and the model reads
/// `denied by the user: <reason>` as its error result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolDenial {
    /// The id of the call.
    pub call_id: String,
    /// Why, as the person said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ToolDenial {
    /// A denial of call `call_id`, with an optional reason.
    pub fn new(call_id: impl Into<String>, reason: Option<String>) -> Self {
        Self { call_id: call_id.into(), reason }
    }

    /// The error result the model reads.
    pub fn result_text(&self) -> String {
        match self.reason.as_deref().map(str::trim) {
            Some(reason) if !reason.is_empty() => format!("denied by the user: {reason}"),
            _ => "denied by the user".to_owned(),
        }
    }
}

/// What delegating one message's tool calls produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DelegateResult {
    /// Exactly one result per call, in call order.
    pub results: Vec<ToolCallResult>,
    /// Whether every call has its result. In-process tools always give one (a failure
    /// is an error result), so this is `true` today; it is `false` for calls still
    /// pending elsewhere, such as tools that run as waiting sub-workflows.
    pub all_completed: bool,
    /// How many results are errors.
    pub error_count: usize,
    /// At-most-once calls ([`Effect::AtMostOnce`](loopstack_core::Effect::AtMostOnce))
    /// whose outcome is unknown: the step runs again after a crash
    /// ([`RunContext::may_repeat`]) and the drive that died may have run them.
    /// When there are any, nothing of the batch was run (`results` is empty,
    /// `all_completed` is `false`, nothing is saved): the step asks a person what
    /// happened and runs the batch again with the answers
    /// ([`CallOptions::answered`], and for "run it again" nothing: a batch run by a
    /// drive's later step runs its at-most-once calls). The agent waits at
    /// `awaiting_outcome` for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_outcome: Vec<crate::PendingCall>,
}

/// Runs every tool call of an assistant message and saves one tool-result message
/// document with all results.
///
/// Every failure becomes a result the model sees, and the run goes on: an unknown tool
/// or one not offered in that turn (the error names the tools that are), arguments that
/// are not valid JSON (or nest deeper than [`MAX_JSON_DEPTH`](crate::message::MAX_JSON_DEPTH)),
/// that are not a JSON object (`null`, a number, a string, an array: checked here, for
/// every tool) or do not deserialize, a handler that returns an error or panics, and a
/// call that outlives its timeout. Calls run concurrently (at most
/// [`DEFAULT_CONCURRENCY`] at once unless set); a tool whose options say it is not
/// concurrent runs alone.
///
/// Called from a task of a multi-thread runtime (a [`Worker`](loopstack_core::Worker)'s
/// runs, a drive inside `tokio::spawn`), each call runs in a task of its own, so a
/// tool that blocks its thread still gets its timeout result on time (the blocked
/// task is aborted at its next await); called from outside a task (`block_on`, the
/// body of `#[tokio::main]`) the calls run inline unless
/// [`isolate_calls(true)`](Self::isolate_calls) is set. Either way, blocking work
/// belongs in `tokio::task::spawn_blocking` (see [`Tool::call`](loopstack_core::Tool::call)).
///
/// Each call gets exactly one result, and no two results share an id: a call that
/// repeats the id of an earlier call in the message is not run, and its error result
/// (saying why) carries the id `<id>_dup<n>` (`n` from 2). Messages from
/// [`LlmGenerateText`](crate::LlmGenerateText) never have repeated ids: it renames them
/// the same way before it saves the message, so there every call runs.
#[derive(Debug, Clone)]
pub struct LlmDelegateToolCalls {
    tools: ToolRegistry,
    default_timeout: Duration,
    concurrency: usize,
    policy: ErrorPolicy,
    max_stored_bytes: usize,
    /// Whether each call runs in a task of its own: `None` decides by where the
    /// step runs (see [`LlmDelegateToolCalls::isolate_calls`]).
    isolate: Option<bool>,
}

impl LlmDelegateToolCalls {
    /// A step over these tools.
    pub fn new(tools: ToolRegistry) -> Self {
        Self {
            tools,
            default_timeout: DEFAULT_TOOL_TIMEOUT,
            concurrency: DEFAULT_CONCURRENCY,
            policy: ErrorPolicy::Continue,
            max_stored_bytes: crate::dispatch::DEFAULT_MAX_STORED_BYTES,
            isolate: None,
        }
    }

    /// Sets the timeout of tools that set none (30 s unless set; zero means 24 hours).
    #[must_use]
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout;
        self
    }

    /// Sets how many calls run at once (at least 1).
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// Sets what a failed call does: [`ErrorPolicy::Continue`] (the default: every
    /// call gets its result, failures are error results the model reads) or
    /// [`ErrorPolicy::FailFast`] (the first failure fails the step with
    /// [`AgentError::ToolFailed`]: the calls still running are dropped, and a run
    /// that fails cancels its child runs, so workflow tools' children are cancelled
    /// too; nothing of the batch is saved).
    #[must_use]
    pub fn error_policy(mut self, policy: ErrorPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Sets whether each call runs in a task of its own, so a tool that blocks its
    /// thread still gets its timeout result on time. Unless set, calls are isolated
    /// when the step runs in a task of a multi-thread runtime (a worker's runs, a
    /// drive inside `tokio::spawn`), and run inline when it runs in `block_on` (the
    /// body of `#[tokio::main]`), where the hand-off to another thread costs tens of
    /// microseconds a call. Set it to `true` there when tools may block; on a
    /// current-thread runtime nothing can run while a tool blocks the thread, so
    /// calls run inline whatever is set.
    #[must_use]
    pub fn isolate_calls(mut self, isolate: bool) -> Self {
        self.isolate = Some(isolate);
        self
    }

    /// Sets how long a result may be in the stored conversation, in bytes (256 KiB
    /// unless set): a longer one is stored cut, with a marker saying how much there
    /// was (`… [truncated: N of M bytes]`). The [`DelegateResult`] the step returns
    /// keeps every result whole, and so does the conversation the next model turn of
    /// the same drive reads; a run resumed in another process reads what was stored.
    #[must_use]
    pub fn max_stored_bytes(mut self, max: usize) -> Self {
        self.max_stored_bytes = max;
        self
    }

    /// Saves a batch's results as [`save_results`] does, each cut to this step's
    /// [`max_stored_bytes`](Self::max_stored_bytes).
    pub fn save_results(
        &self,
        cx: &mut RunContext,
        results: &[ToolCallResult],
        conversation: Option<&str>,
    ) -> Result<(), serde_json::Error> {
        let max = self.max_stored_bytes;
        let options = match conversation {
            Some(name) => SaveOptions::new().tag(format!("{}{name}", crate::generate::NAMED_CONVERSATION_PREFIX)),
            None => SaveOptions::new(),
        };
        if results.iter().any(|r| !r.images.is_empty()) {
            // Each image saved once, as a document the message refers to.
            let mut full = ToolCallResult::message(results);
            let count = crate::image::store_images(cx, &mut full)?;
            let options = options.meta(crate::image::IMAGES_META, count);
            if results.iter().all(|r| r.content.len() <= max) {
                cx.save_shared(Arc::new(full), options)?;
            } else {
                let mut stored = ToolCallResult::message(&truncated(results, max));
                crate::image::store_images(cx, &mut stored)?;
                cx.save_shared_as(&stored, Arc::new(full), options)?;
            }
            return Ok(());
        }
        let full = Arc::new(Message::tool_results(results.iter().map(ToolResult::from)));
        if results.iter().all(|r| r.content.len() <= max) {
            cx.save_shared(full, options)?;
        } else {
            // The store gets each long result cut with a marker; this drive's next
            // steps (the next model turn) read the whole results.
            let stored = Message::tool_results(results.iter().map(|r| ToolResult {
                tool_use_id: r.tool_use_id.clone(),
                content: crate::dispatch::truncate_bytes(&r.content, max).into_owned(),
                is_error: r.is_error,
            }));
            cx.save_shared_as(&stored, full, options)?;
        }
        Ok(())
    }

    /// The tools.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// Runs the calls of `message`, of which `offered` lists the tools offered in its
    /// turn, and saves the results as one message document of the run's default
    /// conversation. For a turn of a named conversation
    /// ([`GenerateOptions::conversation`](crate::GenerateOptions::conversation)) use
    /// [`call_with`](Self::call_with) with
    /// [`CallOptions::conversation`], or its calls stay unanswered there.
    pub async fn call(
        &self,
        cx: &mut RunContext,
        message: &Message,
        offered: &[String],
    ) -> Result<DelegateResult, AgentError> {
        self.call_with(cx, message, offered, &CallOptions::default()).await
    }

    /// Like [`call`](Self::call), with [`CallOptions`]: calls a person denied, the
    /// conversation the results go to, the run's state for workflow tools.
    ///
    /// When a call is pending (a workflow tool whose child run waits), nothing is
    /// saved: the results message is saved once every call has its result, by
    /// [`save_results`] (the agent does this when the last child ends).
    pub async fn call_with(
        &self,
        cx: &mut RunContext,
        message: &Message,
        offered: &[String],
        options: &CallOptions<'_>,
    ) -> Result<DelegateResult, AgentError> {
        let mut result = self.run_with(cx, message, offered, options).await;
        // What the results keep of their images (in the state, between steps) is a
        // reference to the run's image document, saved once.
        crate::image::store_result_images(cx, &mut result.results)?;
        if self.policy == ErrorPolicy::FailFast
            && let Some(failed) = result.results.iter().find(|r| r.is_error)
        {
            return Err(AgentError::ToolFailed {
                call_id: failed.tool_use_id.clone(),
                tool: failed.name.clone(),
                error: failed.content.clone(),
            });
        }
        if result.all_completed {
            self.save_results(cx, &result.results, options.conversation)?;
        }
        Ok(result)
    }
}
