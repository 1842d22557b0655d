//! Running a model turn's tool calls: concurrently, each with its timeout, approval
//! and error policy, its result redacted and bounded.

use super::*;

impl LlmDelegateToolCalls {
    /// Runs the calls without saving anything.
    pub async fn run(&self, cx: &RunContext, message: &Message, offered: &[String]) -> DelegateResult {
        self.run_with(cx, message, offered, &CallOptions::default()).await
    }

    /// Runs the calls not in `options.denied` without saving anything; denied calls
    /// get their error result.
    pub async fn run_with<'m>(
        &self,
        cx: &RunContext,
        message: &'m Message,
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
        // The run's token when it has one; else each call makes its own if its tool
        // asks, as nothing outside the run can cancel it (no `cancel_on`).
        let cancellation = cx.existing_cancellation().cloned();
        // The step the batch was first tried at (this transition's, unless a person's
        // answer made it run again later): with the run and the call id, a key that
        // is the same on every attempt of the call.
        let step = options.key_step.unwrap_or(cx.step() + 1);
        // Calls that repeat the id of an earlier call are not run: each gets an error
        // result under a new id (empty when the ids are unique, the usual case).
        let renamed = duplicate_ids(message);
        // The futures are made first and streamed second: a closure inside the stream
        // would make the future's `Send` bound fail to hold for all lifetimes.
        let call_future = |(index, call): (usize, &'m ToolUse)| {
            let duplicate = renamed.iter().find(|(i, _)| *i == index).map(|(_, id)| id.as_str());
            let mut tcx = ToolContext::new(call.id.clone(), call.name.clone())
                .with_index(index)
                .with_run_id(run_id)
                .with_step(step);
            if let Some(token) = &cancellation {
                tcx = tcx.with_cancellation(token.clone());
            }
            if let Some(input) = options.inputs.iter().find(|i| i.call_id == call.id) {
                tcx = tcx.with_input(input.answer.clone());
            }
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
        };
        let count = message.tool_uses().count();
        if count == 1 && self.policy != ErrorPolicy::FailFast {
            // A single call needs no machinery. Boxed: held inline, its future would
            // make this one (and the agent's step that holds it) too big for the
            // allocator's per-thread cache.
            let call = message.tool_uses().enumerate().next().expect("one call");
            let (_, result) = Box::pin(call_future(call)).await;
            record_calls(cx, options, std::slice::from_ref(&result));
            return self.result_of(message, vec![result]);
        }
        // As many as there are calls: collected from a filter, the vector would take
        // room for four futures at least.
        let mut calls = Vec::with_capacity(count);
        calls.extend(message.tool_uses().enumerate().map(call_future));
        // Unordered, so one slow call does not hold back the start of later ones; the
        // results are put back in call order below.
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
        } else {
            futures::stream::iter(calls).buffer_unordered(self.concurrency).collect().await
        };
        indexed.sort_unstable_by_key(|(index, _)| *index);
        let results: Vec<ToolCallResult> = indexed.into_iter().map(|(_, result)| result).collect();
        record_calls(cx, options, &results);
        self.result_of(message, results)
    }

    /// How the calls of `message` went: `results`, in call order.
    fn result_of(&self, message: &Message, results: Vec<ToolCallResult>) -> DelegateResult {
        let error_count = results.iter().filter(|r| r.is_error).count();
        let all_completed = results.len() == message.tool_uses().count()
            && results.iter().all(|r| r.pending.is_none() && r.input.is_none());
        DelegateResult { all_completed, error_count, results, unknown_outcome: Vec::new() }
    }

    /// The at-most-once calls of `message` that would run (a tool offered and
    /// registered, arguments that are a JSON object, an id of their own) and have
    /// no answer: neither denied nor [`answered`](CallOptions::answered).
    pub(super) fn unknown_outcome(
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
                client: false,
                input: None,
            })
            .collect()
    }

    /// One call's future: its denial, its given answer or its duplicate id's error
    /// at once, else the run of the tool. A plain function that builds the future:
    /// an `async fn` keeps each argument twice (the parameter and the local it is moved
    /// to), and the call's context is the biggest. This future is allocated for every
    /// call, and kept small enough for the allocator's per-thread cache: it holds the
    /// context once, and lends it to the tool's run.
    pub(super) fn run_one<'a>(
        &'a self,
        call: &'a ToolUse,
        cx: ToolContext,
        Batch { offered, exclusive, events }: Batch<'a>,
        duplicate: Option<&'a str>,
        denial: Option<&'a ToolDenial>,
        answer: Option<&'a ToolCallResult>,
    ) -> impl std::future::Future<Output = ToolCallResult> + Send + 'a {
        use futures::future::Either;
        if let Some(denial) = denial {
            tracing::info!(tool = %call.name, call_id = %call.id, "tool call denied");
            return Either::Left(std::future::ready(ToolCallResult::error(&call.id, &call.name, denial.result_text())));
        }
        if let Some(answer) = answer {
            tracing::info!(tool = %call.name, call_id = %call.id, "tool call answered without running it");
            return Either::Left(std::future::ready(answer.clone()));
        }
        if let Some(new_id) = duplicate {
            tracing::warn!(tool = %call.name, call_id = %call.id, new_id, "a tool call repeats the id of an earlier call");
            return Either::Left(std::future::ready(ToolCallResult::error(
                new_id,
                &call.name,
                format!(
                    "this call to `{}` was not run: its id `{}` is the id of an earlier call in the same message, \
                     and every call needs an id of its own",
                    call.name, call.id
                ),
            )));
        }
        Either::Right(async move {
            // Named after OpenTelemetry's GenAI conventions: a span `execute_tool {name}`.
            // None when nothing records it: a disabled span costs a call into the logger
            // at every enter, exit and drop while no subscriber is installed.
            let span = if tracing::level_enabled!(tracing::Level::INFO) {
                tracing::info_span!(
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
                )
            } else {
                tracing::Span::none()
            };
            // The clock is read only for someone who is told the call's duration.
            let started = (events.is_some() || !span.is_disabled()).then(Instant::now);
            if let Some(events) = events {
                events.emit(|| EventKind::ToolCallStarted { call_id: call.id.clone(), name: call.name.clone() });
            }
            // The context is lent, not moved, to the tool's run: this future holds it once.
            let mut output = self.execute(call, &cx, offered, exclusive).instrument(span.clone()).await;
            // The runtime's secrets never reach the model, the documents or the log.
            if let Some(secrets) = cx.secrets().filter(|s| !s.is_empty()) {
                redact_output(secrets, &mut output);
            }
            let duration = started.map_or(Duration::ZERO, |started| started.elapsed());
            if let Some(events) = events {
                events.emit(|| EventKind::ToolCallFinished {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    duration,
                    error: output.is_error.then(|| output.to_text().into_owned()),
                });
            }
            if !span.is_disabled() {
                span.record("duration_ms", loopstack_model::usage::as_i64(duration.as_millis()));
                span.record("outcome", if output.is_error { "error" } else { "ok" });
            }
            if output.is_error {
                span.record("otel.status_code", "ERROR");
                span.record("error.type", "tool_error");
                span.in_scope(|| tracing::warn!(content = %output.to_text(), "tool call failed"));
            }
            ToolCallResult::new(&call.id, &call.name, output)
        })
    }

    /// The run of one call's tool, with its checks, lock, timeout and panic guard. It
    /// borrows the call's context (see [`Self::run_one`]); a call run in a task of its
    /// own takes a copy.
    pub(super) async fn execute(
        &self,
        call: &ToolUse,
        cx: &ToolContext,
        offered: &[String],
        exclusive: &RwLock<()>,
    ) -> ToolOutput {
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
        let finished = if self.isolate.unwrap_or_else(in_own_task) && multi_thread() {
            // In a task of its own, so the timeout fires here even while the tool
            // blocks the worker thread it runs on: the call gets its error result on
            // time. The task is aborted (at its next await) once this future stops
            // waiting for it: on the timeout, or when dropped, as on cancellation.
            let (registry, tool, input, cx) = (self.tools.clone(), name.to_owned(), call.input.clone(), cx.clone());
            let invocation = async move { registry.call(&tool, input, &cx).await };
            let mut task = AbortOnDrop(tokio::spawn(invocation.in_current_span()));
            match tokio::time::timeout(timeout, &mut task.0).await {
                Err(_) => None,
                Ok(Ok(result)) => Some(Ok(result)),
                Ok(Err(join)) => Some(Err(join.try_into_panic().ok())),
            }
        } else {
            let invocation = self.tools.call(name, call.input.clone(), cx);
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

/// Counts the calls that ran or were refused for a runtime with metrics: not those
/// denied or answered by a person, nor those still pending (a workflow tool's run).
fn record_calls(cx: &RunContext, options: &CallOptions<'_>, results: &[ToolCallResult]) {
    #[cfg(feature = "metrics")]
    if let Some(metrics) = cx.runtime().metrics() {
        let decided = |r: &ToolCallResult| {
            options.denied.iter().any(|d| d.call_id == r.tool_use_id)
                || options.answered.iter().any(|a| a.tool_use_id == r.tool_use_id)
        };
        for result in results.iter().filter(|r| r.pending.is_none() && r.input.is_none() && !decided(r)) {
            metrics.tool_call(&result.name, result.is_error);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (cx, options, results);
}

/// What the calls of one batch share.
#[derive(Clone, Copy)]
pub(super) struct Batch<'a> {
    /// The tools offered in the turn.
    offered: &'a [String],
    /// Held shared by concurrent tools, alone by the others.
    exclusive: &'a RwLock<()>,
    /// Where tool call events go, when someone listens.
    events: Option<&'a Emitter>,
}

/// Whether a call runs in a task of its own: when it is made from a task of a
/// multi-thread runtime, where the caller's timeout can then fire on another worker
/// while the tool blocks its thread. The spawn wakes a parked worker: microseconds a
/// call, nothing next to a real tool. Outside a task
/// (the future `block_on` runs, such as the body of `#[tokio::main]`) the hand-off
/// would cost a cross-thread round trip per call, and on a current-thread runtime a
/// blocked thread holds up everything anyway: there the call runs inline.
pub(super) fn in_own_task() -> bool {
    tokio::task::try_id().is_some()
        && tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread)
}

/// Whether the current runtime has worker threads a spawned call can run on.
pub(super) fn multi_thread() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread)
}

/// A spawned call, aborted when it is no longer awaited.
pub(super) struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

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
    if let Some(value) = &mut output.structured {
        secrets.redact_value(value);
    }
}

/// What a JSON value is, as the model would say it.
pub(super) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(super) fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) { format!("{} s", ms / 1000) } else { format!("{ms} ms") }
}
