//! `LlmDelegateToolCalls`: runs the tool calls of an assistant message.

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
        let message = Message::tool_call_results(results);
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
/// are not valid JSON (or nest deeper than [`MAX_JSON_DEPTH`](crate::MAX_JSON_DEPTH)),
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
            let mut full = Message::tool_call_results(results);
            let count = crate::image::store_images(cx, &mut full)?;
            let options = options.meta(crate::image::IMAGES_META, count);
            if results.iter().all(|r| r.content.len() <= max) {
                cx.save_shared(Arc::new(full), options)?;
            } else {
                let mut stored = Message::tool_call_results(&truncated(results, max));
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

    /// Runs the calls without saving anything.
    pub async fn run(&self, cx: &RunContext, message: &Message, offered: &[String]) -> DelegateResult {
        self.run_with(cx, message, offered, &CallOptions::default()).await
    }

    /// Runs the calls not in `options.denied` without saving anything; denied calls
    /// get their error result.
    pub async fn run_with(
        &self,
        cx: &RunContext,
        message: &Message,
        offered: &[String],
        options: &CallOptions<'_>,
    ) -> DelegateResult {
        let denied = options.denied;
        // A step that may repeat one a dead drive began runs no at-most-once call it
        // has no answer for: that drive committed the call's intent and may have run it.
        // (A step that does not repeat, the usual case, looks at no call here.)
        if cx.may_repeat() {
            let unknown = self.unknown_outcome(message, offered, options);
            if !unknown.is_empty() {
                tracing::warn!(calls = unknown.len(), "at-most-once tool calls of a dead drive have no result");
                return DelegateResult { unknown_outcome: unknown, ..DelegateResult::default() };
            }
        }
        let events = cx.events_enabled().then(|| cx.emitter());
        let exclusive = RwLock::new(());
        let run_id = cx.run_id();
        let cancellation = cx.cancellation().clone();
        // The step the batch was first tried at (this transition's, unless a person's
        // answer made it run again later): with the run and the call id, a key that
        // is the same on every attempt of the call.
        let step = options.key_step.unwrap_or(cx.step() + 1);
        // Calls that repeat the id of an earlier call are not run: each gets an error
        // result under a new id (empty when the ids are unique, the usual case).
        let renamed = duplicate_ids(message);
        // The futures are made first and streamed second: a closure inside the stream
        // would make the future's `Send` bound fail to hold for all lifetimes.
        let calls: Vec<_> = message
            .tool_uses()
            .enumerate()
            .map(|(index, call)| {
                let duplicate = renamed.iter().find(|(i, _)| *i == index).map(|(_, id)| id.as_str());
                let mut tcx = ToolContext::new(call.id.clone(), call.name.clone())
                    .with_index(index)
                    .with_run_id(run_id)
                    .with_step(step)
                    .with_cancellation(cancellation.clone());
                if !cx.runtime().secrets().is_empty() {
                    tcx = tcx.with_secrets(cx.runtime().secrets().clone());
                }
                // Only tools that start runs carry the runtime and the state.
                if self.tools.spec(&call.name).is_some_and(|s| s.options.needs_run) {
                    tcx = tcx.with_runtime(cx.runtime().clone());
                    if let Some(state) = options.state {
                        tcx = tcx.with_parent_state(state.clone());
                    }
                }
                let denial = denied.iter().find(|d| d.call_id == call.id);
                let answer = options.answered.iter().find(|a| a.tool_use_id == call.id);
                let batch = Batch { offered, exclusive: &exclusive, events: events.as_ref() };
                self.run_one(call, tcx, batch, duplicate, denial, answer).map(move |result| (index, result))
            })
            .collect();
        // Unordered, so one slow call does not hold back the start of later ones; the
        // results are put back in call order below. A single call needs no machinery.
        let mut indexed: Vec<(usize, ToolCallResult)> = if self.policy == ErrorPolicy::FailFast {
            // Stop at the first failure; dropping the stream drops the calls in flight.
            let mut stream = futures::stream::iter(calls).buffer_unordered(self.concurrency);
            let mut done = Vec::new();
            while let Some((index, result)) = stream.next().await {
                let failed = result.is_error;
                done.push((index, result));
                if failed {
                    break;
                }
            }
            done
        } else if calls.len() == 1 {
            futures::future::join_all(calls).await
        } else {
            futures::stream::iter(calls).buffer_unordered(self.concurrency).collect().await
        };
        indexed.sort_unstable_by_key(|(index, _)| *index);
        let results: Vec<ToolCallResult> = indexed.into_iter().map(|(_, result)| result).collect();
        let error_count = results.iter().filter(|r| r.is_error).count();
        let all_completed = results.len() == message.tool_uses().count() && results.iter().all(|r| r.pending.is_none());
        DelegateResult { all_completed, error_count, results, unknown_outcome: Vec::new() }
    }

    /// The at-most-once calls of `message` that would run (a tool offered and
    /// registered, arguments that are a JSON object, an id of their own) and have
    /// no answer: neither denied nor [`answered`](CallOptions::answered).
    fn unknown_outcome(
        &self,
        message: &Message,
        offered: &[String],
        options: &CallOptions<'_>,
    ) -> Vec<crate::PendingCall> {
        let renamed = duplicate_ids(message);
        message
            .tool_uses()
            .enumerate()
            .filter(|(index, call)| {
                self.tools.spec(&call.name).is_some_and(|s| s.options.effect.is_at_most_once())
                    && offered.contains(&call.name)
                    && call.invalid_input.is_none()
                    && call.input.is_object()
                    && !renamed.iter().any(|(i, _)| i == index)
                    && !options.denied.iter().any(|d| d.call_id == call.id)
                    && !options.answered.iter().any(|a| a.tool_use_id == call.id)
            })
            .map(|(_, call)| crate::PendingCall {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.input.clone(),
            })
            .collect()
    }

    async fn run_one(
        &self,
        call: &ToolUse,
        cx: ToolContext,
        Batch { offered, exclusive, events }: Batch<'_>,
        duplicate: Option<&str>,
        denial: Option<&ToolDenial>,
        answer: Option<&ToolCallResult>,
    ) -> ToolCallResult {
        if let Some(denial) = denial {
            tracing::info!(tool = %call.name, call_id = %call.id, "tool call denied");
            return ToolCallResult::error(&call.id, &call.name, denial.result_text());
        }
        if let Some(answer) = answer {
            tracing::info!(tool = %call.name, call_id = %call.id, "tool call answered without running it");
            return answer.clone();
        }
        if let Some(new_id) = duplicate {
            tracing::warn!(tool = %call.name, call_id = %call.id, new_id, "a tool call repeats the id of an earlier call");
            return ToolCallResult::error(
                new_id,
                &call.name,
                format!(
                    "this call to `{}` was not run: its id `{}` is the id of an earlier call in the same message, \
                     and every call needs an id of its own",
                    call.name, call.id
                ),
            );
        }
        // Named after OpenTelemetry's GenAI conventions: a span `execute_tool {name}`.
        let span = tracing::info_span!(
            "loopstack.tool",
            otel.name = tracing::field::display(format_args!("execute_tool {}", call.name)),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.name,
            gen_ai.tool.call.id = %call.id,
            gen_ai.tool.type = "function",
            duration_ms = tracing::field::Empty,
            outcome = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let started = Instant::now();
        if let Some(events) = events {
            events.emit(|| EventKind::ToolCallStarted { call_id: call.id.clone(), name: call.name.clone() });
        }
        let secrets = cx.secrets().cloned();
        let mut output = self.execute(call, cx, offered, exclusive).instrument(span.clone()).await;
        // The runtime's secrets never reach the model, the documents or the log.
        if let Some(secrets) = secrets.filter(|s| !s.is_empty()) {
            redact_output(&secrets, &mut output);
        }
        let duration = started.elapsed();
        if let Some(events) = events {
            events.emit(|| EventKind::ToolCallFinished {
                call_id: call.id.clone(),
                name: call.name.clone(),
                duration,
                error: output.is_error.then(|| output.to_text().into_owned()),
            });
        }
        if !span.is_disabled() {
            span.record("duration_ms", crate::usage::as_i64(duration.as_millis()));
            span.record("outcome", if output.is_error { "error" } else { "ok" });
        }
        if output.is_error {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", "tool_error");
            span.in_scope(|| tracing::warn!(content = %output.to_text(), "tool call failed"));
        }
        ToolCallResult::new(&call.id, &call.name, output)
    }

    async fn execute(&self, call: &ToolUse, cx: ToolContext, offered: &[String], exclusive: &RwLock<()>) -> ToolOutput {
        let name = call.name.as_str();
        if !offered.iter().any(|o| o == name) || self.tools.get(name).is_none() {
            let available: Vec<String> = offered.iter().filter(|o| self.tools.get(o).is_some()).cloned().collect();
            return self.tools.unknown_tool(name, Some(&available)).into();
        }
        if let Some(bad) = &call.invalid_input {
            return ToolOutput::error(format!(
                "the arguments of this call to `{name}` are not valid JSON ({}); call the tool again with a JSON object",
                bad.error
            ));
        }
        if !call.input.is_object() {
            return ToolOutput::error(format!(
                "the arguments of this call to `{name}` must be a JSON object of its parameters, not {}; \
                 call the tool again with a JSON object",
                json_kind(&call.input)
            ));
        }
        let spec = self.tools.spec(name).expect("checked above");
        let timeout = spec.options.effective_timeout(self.default_timeout);
        let _guard = if spec.options.concurrent {
            futures::future::Either::Left(exclusive.read().await)
        } else {
            futures::future::Either::Right(exclusive.write().await)
        };
        let registry = self.tools.clone();
        let (tool, input) = (name.to_owned(), call.input.clone());
        let invocation = async move { registry.call(&tool, input, &cx).await };
        let finished = if self.isolate.unwrap_or_else(in_own_task) && multi_thread() {
            // In a task of its own, so the timeout fires here even while the tool
            // blocks the worker thread it runs on: the call gets its error result on
            // time. The task is aborted (at its next await) once this future stops
            // waiting for it: on the timeout, or when dropped, as on cancellation.
            let mut task = AbortOnDrop(tokio::spawn(invocation.in_current_span()));
            match tokio::time::timeout(timeout, &mut task.0).await {
                Err(_) => None,
                Ok(Ok(result)) => Some(Ok(result)),
                Ok(Err(join)) => Some(Err(join.try_into_panic().ok())),
            }
        } else {
            tokio::time::timeout(timeout, AssertUnwindSafe(invocation).catch_unwind())
                .await
                .ok()
                .map(|r| r.map_err(Some))
        };
        match finished {
            None => ToolOutput::error(format!("tool `{name}` timed out after {}", fmt_duration(timeout))),
            Some(Err(Some(panic))) => {
                let what = loopstack_core::panic_message(panic.as_ref());
                tracing::error!(tool = name, call_id = %call.id, panic = %what, "tool panicked");
                ToolOutput::error(format!("tool `{name}` failed: it panicked: {what}"))
            }
            // Only an abort cancels the task, and only once nothing awaits it.
            Some(Err(None)) => ToolOutput::error(format!("tool `{name}` failed: its task was cancelled")),
            Some(Ok(Err(err))) => err.into(),
            Some(Ok(Ok(output))) => output,
        }
    }
}

/// What the calls of one batch share.
#[derive(Clone, Copy)]
struct Batch<'a> {
    /// The tools offered in the turn.
    offered: &'a [String],
    /// Held shared by concurrent tools, alone by the others.
    exclusive: &'a RwLock<()>,
    /// Where tool call events go, when someone listens.
    events: Option<&'a Emitter>,
}

/// Whether a call runs in a task of its own: when it is made from a task of a
/// multi-thread runtime, where the caller's timeout can then fire on another worker
/// while the tool blocks its thread. The spawn costs about 10 us a call on an idle
/// runtime (waking a parked worker; measured with the overhead benchmark's W1 driven
/// from a task: 9.8 -> 19.7 us a run), nothing next to a real tool. Outside a task
/// (the future `block_on` runs, such as the body of `#[tokio::main]`) the hand-off
/// would cost a cross-thread round trip per call, and on a current-thread runtime a
/// blocked thread holds up everything anyway: there the call runs inline.
fn in_own_task() -> bool {
    tokio::task::try_id().is_some()
        && tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread)
}

/// Whether the current runtime has worker threads a spawned call can run on.
fn multi_thread() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread)
}

/// A spawned call, aborted when it is no longer awaited.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Redacts a tool's output in place.
pub(crate) fn redact_output(secrets: &loopstack_core::secrets::Secrets, output: &mut ToolOutput) {
    match &mut output.content {
        loopstack_core::ToolContent::Text(text) => {
            if let std::borrow::Cow::Owned(redacted) = secrets.redact(text) {
                *text = redacted;
            }
        }
        loopstack_core::ToolContent::Json(value) => {
            secrets.redact_value(value);
        }
    }
}

/// What a JSON value is, as the model would say it.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) { format!("{} s", ms / 1000) } else { format!("{ms} ms") }
}
