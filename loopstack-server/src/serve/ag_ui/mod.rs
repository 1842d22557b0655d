//! `POST /ag-ui/{name}`: a registered agent or workflow, served over AG-UI 1.0.
//!
//! A thread is one run of the workflow, found again by the thread's id (its run id
//! is [`RunId::from_key`] of the workflow's name and the thread's id), so the
//! conversation lives in the store and survives the process:
//!
//! - the thread's first request starts the run: an agent (whose input is text)
//!   with the last user message; another workflow with `forwardedProps.input`, else
//!   the client's `state`, else the last user message's text;
//! - a chat agent ([`Agent::chat`](loopstack_llm::Agent::chat)) waiting for the user
//!   takes the last user message as its next one;
//! - a run that waits for a person ends the request with an interrupt outcome: one
//!   interrupt per tool call to approve (`decide_tools:<call id>`, answered with
//!   `{"approved": bool, "reason"?: string}`), per at-most-once call whose outcome a
//!   crash left unknown (`resolve_tools:<call id>`, answered with `{"approved":
//!   bool, "result"?: string}`), and per signal its place waits for (the signal's
//!   name, with its payload's JSON Schema as `responseSchema`); a timer that leaves
//!   the place is the interrupts' `expiresAt`. The next request's `resume` answers
//!   them: the calls are decided, the one signal resolved is sent with its payload
//!   (the others cancelled), and a run whose every signal is cancelled is cancelled;
//! - a request with nothing new (a client that reloaded) is answered with where the
//!   run stands: its open interrupts again, or its end.
//!
//! The events: `RUN_STARTED` (its `metadata.loopstackRunId` names the run), a step
//! per transition, the model's text, reasoning and tool calls as they stream
//! (and as stored, when they did not), each tool's result, the run's state (a
//! snapshot, then a delta per step), and `RUN_FINISHED` (with the answer as
//! `result`, the token usage per model, and the outcome) or `RUN_ERROR` (a run
//! that failed or stopped: `code` is `failed` or `stopped`; a request that could
//! not be done: `invalid`). They are the run's events, so a thread whose run a
//! worker drives is followed wherever it runs. Secrets are redacted.
//!
//! Not yet: tools the client declares (`tools`) are not offered to the model, and a
//! client cannot rejoin a stream it lost (its next request says where the run
//! stands).

use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use loopstack_core::{Definition, RunEvent, RunRecord};
use loopstack_llm::AgentPlace;
use loopstack_llm::agent::{DECIDE_TOOLS, RESOLVE_TOOLS};

use super::runs::json_body;
use super::*;
use crate::views::Waits;

mod translate;
mod wire;

use translate::Translator;
use wire::{Event, Interrupt, Outcome, ResumeStatus, RunAgentInput};

/// How often a stream that follows another driver's run reads where the run
/// stands, in case its last event was missed (a worker in another process writes
/// its events to the log only once it has seen a listener).
const SETTLE_CHECK: Duration = Duration::from_secs(1);

/// How long a stream waits for its own drive's last event after the drive returned
/// and its events were flushed to the log, before it reads the run's end from the
/// store instead: a bound, never reached while the log works.
const SETTLE_AFTER_DRIVE: Duration = Duration::from_secs(10);

/// What a request does to the thread's run.
enum Action {
    /// Starts the run with this input.
    Start(Value),
    /// Sends the signal with its payload, and drives the run on.
    Signal(String, Value),
    /// Cancels the run: every interrupt it waits on was cancelled.
    Cancel,
    /// Another driver has the run: follows it to its next wait or end.
    Follow,
    /// Nothing new: says where the run stands.
    Show,
    /// Nothing can be done: says why, in the stream.
    Refuse(String),
}

pub(super) async fn run(
    State(app): State<App>,
    PathJson(name): PathJson<String>,
    BodyJson(body): BodyJson,
) -> Response {
    let input: RunAgentInput = match json_body(&body) {
        Ok(input) => input,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    if input.thread_id.is_empty() || input.run_id.is_empty() {
        return error(StatusCode::BAD_REQUEST, "`threadId` and `runId` must not be empty");
    }
    let Some(def) = app.runtime.definition_of(&name) else {
        return error(StatusCode::NOT_FOUND, format!("no agent or workflow named `{name}` is registered"));
    };
    let run_id = RunId::from_key(&format!("ag-ui/{name}/{}", input.thread_id));
    let store = app.runtime.store();
    let record = match store.load_run(run_id).await {
        Ok(record) => Some(record),
        Err(StoreError::RunNotFound(_)) => None,
        Err(e) => return store_error(&e),
    };
    let action = match &record {
        None => match start_input(&app.runtime, def, &input) {
            Ok(value) => Action::Start(value),
            Err(why) => return error(StatusCode::UNPROCESSABLE_ENTITY, why),
        },
        Some(record) => match plan(&app.runtime, def, record, &input) {
            Ok(action) => action,
            Err(why) => return error(StatusCode::UNPROCESSABLE_ENTITY, why),
        },
    };
    // What the client has: the conversation so far.
    let next = match &record {
        Some(_) => match store.documents(run_id).await {
            Ok(documents) => Translator::next_of(&documents),
            Err(e) => return store_error(&e),
        },
        None => 0,
    };
    // Following starts before the drive does, so no event is missed.
    let source = match Source::open(&app.runtime, run_id).await {
        Ok(source) => source,
        Err(e) => return store_error(&e),
    };
    let (sender, receiver) = tokio::sync::mpsc::channel::<String>(64);
    let known_results: Vec<String> =
        input.messages.iter().filter(|m| m.role == "tool").filter_map(|m| m.tool_call_id.clone()).collect();
    let request =
        Request { app, def, name, thread_id: input.thread_id, client_run: input.run_id, run_id, known_results };
    tokio::spawn(request.stream(action, record, next, source, sender));
    let events = futures::stream::unfold(receiver, |mut receiver| async move {
        let data = receiver.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(SseEvent::default().data(data)), receiver))
    });
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

/// The input a thread's first request starts the run with.
fn start_input(runtime: &Runtime, def: &Definition, input: &RunAgentInput) -> Result<Value, String> {
    if let Some(value) = input.forwarded_props.as_ref().and_then(|p| p.get("input")) {
        return Ok(value.clone());
    }
    let last_user = last_user_message(input);
    if loopstack_llm::agent::takes_decisions(def) {
        let prompt = last_user
            .ok_or_else(|| format!("`{}` starts with a user message, and the request has none", def.name()))?;
        let tools = client_tools(input)?;
        return Ok(if tools.is_empty() {
            Value::String(prompt)
        } else {
            json!({ "prompt": prompt, "client_tools": tools })
        });
    }
    let takes_text = runtime
        .input_schema_of(def.name())
        .is_some_and(|schema| schema.get("type").and_then(Value::as_str) == Some("string"));
    if takes_text {
        return last_user
            .map(Value::String)
            .ok_or_else(|| format!("`{}` starts with a user message, and the request has none", def.name()));
    }
    let state = input.state.as_ref().filter(|s| !s.is_null() && s.as_object().is_none_or(|o| !o.is_empty()));
    Ok(match (state, last_user) {
        (Some(state), _) => state.clone(),
        (None, Some(text)) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        (None, None) => Value::Null,
    })
}

/// The request's tools, as an agent's client tools.
fn client_tools(input: &RunAgentInput) -> Result<Vec<loopstack_llm::agent::ClientTool>, String> {
    input
        .tools
        .iter()
        .map(|tool| {
            if !loopstack_core::is_valid_tool_name(&tool.name) {
                return Err(format!(
                    "tool `{}`: a tool's name is 1 to 64 ASCII letters, digits, `_` or `-`",
                    tool.name
                ));
            }
            let parameters = tool.parameters.clone().unwrap_or_else(|| json!({ "type": "object" }));
            Ok(loopstack_llm::agent::ClientTool::new(&tool.name, &tool.description, parameters))
        })
        .collect()
}

/// The results the request's tool messages give calls of the client's tools that
/// `waits` has pending: call id and text.
fn client_results(input: &RunAgentInput, waits: &Waits) -> Vec<(String, String)> {
    let pending = waits.pending.as_deref().unwrap_or_default();
    input
        .messages
        .iter()
        .filter(|m| m.role == "tool")
        .filter_map(|m| Some((m.tool_call_id.clone()?, m.text())))
        .filter(|(id, _)| pending.iter().any(|p| p.client && p.call_id == *id))
        .collect()
}

/// The text of the request's last message, when the user wrote it.
fn last_user_message(input: &RunAgentInput) -> Option<String> {
    input.messages.last().filter(|m| m.role == "user").map(wire::InputMessage::text)
}

/// Whether a run of `def` at `place` waits for work of its own (an agent's tool
/// calls that run as child runs) rather than for a person.
fn waits_on_itself(def: &Definition, place: &str) -> bool {
    loopstack_llm::agent::takes_decisions(def) && place == AgentPlace::AwaitingTools.as_str()
}

/// Whether an agent's run at `place` has answered and waits for the user's next
/// message (a chat): its request ended well, it does not need a person's decision.
fn awaits_user(def: &Definition, place: &str) -> bool {
    loopstack_llm::agent::takes_decisions(def) && place == AgentPlace::AwaitingUser.as_str()
}

/// What a request on a thread whose run exists does.
fn plan(runtime: &Runtime, def: &Definition, record: &RunRecord, input: &RunAgentInput) -> Result<Action, String> {
    let resume = input.resume.as_deref().unwrap_or_default();
    match record.status {
        RunStatus::Queued | RunStatus::Running => Ok(Action::Follow),
        RunStatus::Waiting if awaits_user(def, &record.place) => Ok(match last_user_message(input) {
            Some(text) => Action::Signal(
                loopstack_llm::agent::USER_MESSAGE.to_owned(),
                json!({ "text": text, "client_tools": client_tools(input)? }),
            ),
            None => Action::Show,
        }),
        RunStatus::Waiting if waits_on_itself(def, &record.place) => Ok(Action::Follow),
        RunStatus::Waiting => {
            let waits = Waits::of(runtime, record).map_err(|e| e.to_string())?;
            let Some(waits) = waits else {
                return Err(format!("run {} waits for nothing this build knows", record.run_id));
            };
            let results = client_results(input, &waits);
            if resume.is_empty() && results.is_empty() {
                return Ok(Action::Show);
            }
            answer(record, &waits, resume, &results)
        }
        _ if last_user_message(input).is_some() && resume.is_empty() => Ok(Action::Refuse(format!(
            "the thread's run {} ended ({}); a thread is one run of `{}`: start a new thread{}",
            record.run_id,
            record.status.as_str(),
            def.name(),
            if loopstack_llm::agent::takes_decisions(def) {
                ", or serve a chat agent (`Agent::chat(true)`), whose run waits for the next message"
            } else {
                ""
            }
        ))),
        _ => Ok(Action::Show),
    }
}

/// The action a request's resume entries ask of a run that waits.
fn answer(
    record: &RunRecord,
    waits: &Waits,
    resume: &[wire::ResumeEntry],
    results: &[(String, String)],
) -> Result<Action, String> {
    let open = interrupts(record, waits);
    let ids: Vec<&str> = open.iter().map(|i| i.id.as_str()).collect();
    for entry in resume {
        if !ids.contains(&entry.interrupt_id.as_str()) {
            return Err(format!(
                "interrupt `{}` is not open on run {}; the open ones: {}",
                entry.interrupt_id,
                record.run_id,
                ids.join(", ")
            ));
        }
    }
    if let Some(missing) = ids.iter().find(|id| !resume.iter().any(|e| e.interrupt_id == **id)) {
        return Err(format!("interrupt `{missing}` is not answered: a resume answers every open interrupt"));
    }
    if let Some(pending) = waits.pending.as_ref().filter(|p| !p.is_empty()) {
        let signal = if waits.outcome_unknown { RESOLVE_TOOLS } else { DECIDE_TOOLS };
        let mut decisions = Vec::with_capacity(pending.len());
        for call in pending {
            if call.client {
                // Answered by the client's tool message, or still waiting for it.
                if let Some((_, text)) = results.iter().find(|(id, _)| *id == call.call_id) {
                    decisions.push(json!({ "call_id": call.call_id, "approved": true, "result": text }));
                }
                continue;
            }
            let id = format!("{signal}:{}", call.call_id);
            let entry = resume.iter().find(|e| e.interrupt_id == id).expect("every interrupt is answered");
            decisions.push(decision(&call.call_id, entry)?);
        }
        return Ok(Action::Signal(signal.to_owned(), json!({ "decisions": decisions })));
    }
    let resolved: Vec<&wire::ResumeEntry> = resume.iter().filter(|e| e.status == ResumeStatus::Resolved).collect();
    match resolved.as_slice() {
        [] => Ok(Action::Cancel),
        [entry] => {
            let payload = entry.payload.clone().unwrap_or(Value::Null);
            let transition = waits.signals.iter().find(|t| t.name == entry.interrupt_id).expect("an open signal");
            if let Some(schema) = transition.payload_schema.map(|f| f()) {
                let schema = loopstack_core::schema::CompiledSchema::compile(schema)?;
                schema.check(&payload, "the payload")?;
            }
            Ok(Action::Signal(entry.interrupt_id.clone(), payload))
        }
        _ => Err(format!(
            "the run goes on by one signal, and {} were resolved: resolve one and cancel the others",
            resolved.len()
        )),
    }
}

/// A decision on call `call_id` from its resume entry: a cancelled interrupt denies it.
fn decision(call_id: &str, entry: &wire::ResumeEntry) -> Result<Value, String> {
    if entry.status == ResumeStatus::Cancelled {
        return Ok(json!({ "call_id": call_id, "approved": false, "reason": "the user cancelled the call" }));
    }
    let payload = entry.payload.clone().unwrap_or(Value::Null);
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer {
        approved: bool,
        #[serde(default)]
        reason: Option<String>,
        #[serde(default)]
        result: Option<String>,
    }
    let answer: Answer = serde_json::from_value(payload).map_err(|e| {
        format!(
            "the answer to `{}` is not {{\"approved\": bool, \"reason\"?: string, \"result\"?: string}}: {e}",
            entry.interrupt_id
        )
    })?;
    let reason = match (answer.approved, answer.reason) {
        (false, None) => Some("the user denied the call".to_owned()),
        (_, reason) => reason,
    };
    Ok(json!({ "call_id": call_id, "approved": answer.approved, "reason": reason, "result": answer.result }))
}

/// What a waiting run asks of a person, as interrupts.
fn interrupts(record: &RunRecord, waits: &Waits) -> Vec<Interrupt> {
    let expires_at = (!waits.timers.is_empty()).then(|| waits.wake_at.map(|t| t.to_string())).flatten();
    if let Some(pending) = waits.pending.as_ref().filter(|p| !p.is_empty()) {
        let (signal, reason) = if waits.outcome_unknown {
            (RESOLVE_TOOLS, "tool_outcome_unknown")
        } else {
            (DECIDE_TOOLS, "tool_approval")
        };
        return pending
            .iter()
            .filter(|call| !call.client)
            .map(|call| Interrupt {
                id: format!("{signal}:{}", call.call_id),
                reason,
                message: if waits.outcome_unknown {
                    format!(
                        "The call of `{}` with {} stopped mid-call, and it runs at most once: did it happen? \
                         Give its result, or approve running it again.",
                        call.name, call.arguments
                    )
                } else {
                    format!("Approve the call of `{}` with {}?", call.name, call.arguments)
                },
                tool_call_id: Some(call.call_id.clone()),
                response_schema: Some(decision_schema(waits.outcome_unknown)),
                expires_at: expires_at.clone(),
            })
            .collect();
    }
    waits
        .signals
        .iter()
        .filter(|t| ![DECIDE_TOOLS, RESOLVE_TOOLS].contains(&t.name))
        .map(|t| Interrupt {
            id: t.name.to_owned(),
            reason: "signal",
            message: format!("The run waits at `{}` for the signal `{}`.", record.place, t.name),
            tool_call_id: None,
            response_schema: t.payload_schema.map(|f| f()).filter(Value::is_object),
            expires_at: expires_at.clone(),
        })
        .collect()
}

/// The answer a tool call's interrupt takes.
fn decision_schema(outcome_unknown: bool) -> Value {
    let mut schema = json!({
        "type": "object",
        "properties": {
            "approved": { "type": "boolean", "description": "Whether the call may run." },
            "reason": { "type": "string", "description": "Why; the model reads a denial's reason." },
        },
        "required": ["approved"],
        "additionalProperties": false,
    });
    if outcome_unknown {
        schema["properties"]["approved"]["description"] = json!("Whether the call runs again.");
        schema["properties"]["result"] =
            json!({ "type": "string", "description": "What the call did, as its result: it is not run again." });
    }
    schema
}

/// Where the run's events come from: the store's log, which every process writes,
/// or (a store without one) this process's drives.
enum Source {
    Log(loopstack_core::events::LogEvents),
    Live(loopstack_core::RunEvents),
}

impl Source {
    async fn open(runtime: &Runtime, run_id: RunId) -> Result<Self, StoreError> {
        Ok(match runtime.follow_log(Some(run_id), None).await? {
            Some(log) => Self::Log(log),
            None => Self::Live(runtime.subscribe().run(run_id)),
        })
    }

    /// The next event; `None` when the source failed or closed.
    async fn next(&mut self) -> Option<Arc<RunEvent>> {
        match self {
            Self::Log(log) => log.recv().await.ok().map(|logged| Arc::new(logged.event)),
            Self::Live(events) => loop {
                // A subscriber that fell behind lost events: what the store holds is
                // read at each commit, so only streamed pieces are missed.
                if let Ok(event) = events.recv().await? {
                    return Some(event);
                }
            },
        }
    }
}

/// One request's stream.
struct Request {
    app: App,
    def: &'static Definition,
    name: String,
    thread_id: String,
    client_run: String,
    run_id: RunId,
    /// The calls whose results the client sent.
    known_results: Vec<String>,
}

impl Request {
    async fn stream(
        self,
        action: Action,
        record: Option<RunRecord>,
        next: u64,
        mut source: Source,
        sender: tokio::sync::mpsc::Sender<String>,
    ) {
        let mut translator = Translator::new(self.run_id, next);
        translator.known_results(self.known_results.clone());
        let mut out = vec![Event::RunStarted {
            thread_id: self.thread_id.clone(),
            run_id: self.client_run.clone(),
            protocol_version: wire::PROTOCOL_VERSION,
            metadata: json!({ "loopstackRunId": self.run_id }),
        }];
        if let Some(record) = &record {
            translator.state(crate::views::raw(&record.state), &mut out);
        }
        if !self.send(&sender, &mut out).await {
            return;
        }
        let runtime = self.app.runtime.clone();
        let run_id = self.run_id;
        let mut drive = match action {
            Action::Start(value) => {
                let name = self.name.clone();
                Some(tokio::spawn(async move { runtime.start_by_name(&name, value, run_id).await }))
            }
            Action::Signal(signal, payload) => {
                Some(tokio::spawn(async move { runtime.signal_by_name(run_id, &signal, payload).await }))
            }
            Action::Cancel => {
                if let Err(e) = runtime.cancel(run_id, "every interrupt was cancelled by an AG-UI client").await {
                    return self.fail(&sender, &mut translator, e.to_string(), "invalid").await;
                }
                return self.finish(&sender, &mut translator).await;
            }
            Action::Follow => None,
            Action::Show => return self.finish(&sender, &mut translator).await,
            Action::Refuse(why) => return self.fail(&sender, &mut translator, why, "invalid").await,
        };
        let check = tokio::time::sleep(SETTLE_CHECK);
        tokio::pin!(check);
        loop {
            tokio::select! {
                event = source.next() => {
                    let Some(event) = event else { break };
                    if !self.event(&event, &mut translator, &sender).await {
                        return;
                    }
                    if self.ends(&event) {
                        break;
                    }
                }
                driven = async { drive.as_mut().expect("polled only while driving").await }, if drive.is_some() => {
                    drive = None;
                    // The drive's last events are on their way through the log.
                    self.app.runtime.flush_events().await;
                    check.as_mut().reset(tokio::time::Instant::now() + SETTLE_AFTER_DRIVE);
                    let driven = driven.unwrap_or_else(|join| {
                        Err(RunError::Store(StoreError::Backend(format!("the drive's task failed: {join}").into())))
                    });
                    if let Err(e) = driven
                        && !matches!(e, RunError::InvalidStatus { .. } | RunError::Store(StoreError::Leased { .. }))
                    {
                        // A run that failed is answered as it stands; a request that
                        // could not be done changed nothing, and says why.
                        let failed = matches!(
                            self.app.runtime.store().load_run(run_id).await.map(|r| r.status),
                            Ok(RunStatus::Failed | RunStatus::Stopped | RunStatus::Cancelled)
                        );
                        if !failed {
                            return self.fail(&sender, &mut translator, e.to_string(), "invalid").await;
                        }
                    }
                }
                () = &mut check, if drive.is_none() => {
                    // The drive is over (or elsewhere): a run that stands still ends
                    // the stream even if its last event was missed.
                    match self.app.runtime.store().load_run(run_id).await {
                        Ok(record) if self.settled(&record) => break,
                        Ok(_) => check.as_mut().reset(tokio::time::Instant::now() + SETTLE_CHECK),
                        Err(e) => return self.fail(&sender, &mut translator, e.to_string(), "store").await,
                    }
                }
            }
        }
        self.finish(&sender, &mut translator).await;
    }

    /// Translates `event` and sends what it makes; `false` when the client left.
    async fn event(
        &self,
        event: &RunEvent,
        translator: &mut Translator,
        sender: &tokio::sync::mpsc::Sender<String>,
    ) -> bool {
        let mut out = Vec::new();
        translator.event(&event.kind, &mut out);
        if let loopstack_core::EventKind::TransitionCommitted { step, .. } = &event.kind {
            let store = self.app.runtime.store();
            if let (Ok(documents), Ok(record)) = (store.documents(self.run_id).await, store.load_run(self.run_id).await)
            {
                translator.committed(*step, &documents, crate::views::raw(&record.state), &mut out);
            }
        }
        self.send(sender, &mut out).await
    }

    /// Whether `event` ends the request: the run's drive ended, or it waits for a
    /// person (not for its own tool calls).
    fn ends(&self, event: &RunEvent) -> bool {
        match &event.kind {
            loopstack_core::EventKind::Finished { .. } => true,
            loopstack_core::EventKind::Waiting { place, .. } => !waits_on_itself(self.def, place),
            _ => false,
        }
    }

    fn settled(&self, record: &RunRecord) -> bool {
        match record.status {
            RunStatus::Queued | RunStatus::Running => false,
            RunStatus::Waiting => !waits_on_itself(self.def, &record.place),
            _ => true,
        }
    }

    /// Sends what the store holds that the stream has not said, and how the run
    /// stands: its answer, its interrupts, or its error.
    async fn finish(&self, sender: &tokio::sync::mpsc::Sender<String>, translator: &mut Translator) {
        let store = self.app.runtime.store();
        let (documents, record) = match (store.documents(self.run_id).await, store.load_run(self.run_id).await) {
            (Ok(documents), Ok(record)) => (documents, record),
            (Err(e), _) | (_, Err(e)) => return self.fail(sender, translator, e.to_string(), "store").await,
        };
        let mut out = Vec::new();
        translator.committed(u64::MAX, &documents, crate::views::raw(&record.state), &mut out);
        let usage = translator.take_usage();
        let finished = |result: Option<Value>, outcome: Outcome| Event::RunFinished {
            thread_id: self.thread_id.clone(),
            run_id: self.client_run.clone(),
            result,
            outcome,
            usage: usage.clone(),
        };
        let last = match record.status {
            RunStatus::Completed => {
                let (output, is_error) = crate::views::output(&self.app.runtime, &record);
                if is_error {
                    Event::RunError { message: crate::views::text(&output), code: "failed" }
                } else {
                    finished(Some(output), Outcome::Success { pending_tool_call_ids: Vec::new() })
                }
            }
            RunStatus::Waiting if awaits_user(self.def, &record.place) => {
                finished(None, Outcome::Success { pending_tool_call_ids: Vec::new() })
            }
            RunStatus::Waiting => match Waits::of(&self.app.runtime, &record) {
                Ok(Some(waits)) => {
                    let interrupts = interrupts(&record, &waits);
                    // Calls of the client's tools, for the client to answer: the run
                    // has done its part.
                    let client: Vec<String> = waits
                        .pending
                        .iter()
                        .flatten()
                        .filter(|call| call.client)
                        .map(|call| call.call_id.clone())
                        .collect();
                    if interrupts.is_empty() && !client.is_empty() {
                        finished(None, Outcome::Success { pending_tool_call_ids: client })
                    } else if interrupts.is_empty() {
                        let due = record.wake_at.map_or_else(|| "no time".to_owned(), |t| t.to_string());
                        Event::RunError {
                            message: format!(
                                "run {} waits at `{}` for a timer due at {due}",
                                self.run_id, record.place
                            ),
                            code: "waiting",
                        }
                    } else {
                        finished(None, Outcome::Interrupt { interrupts })
                    }
                }
                Ok(None) => Event::RunError {
                    message: format!("run {} waits at `{}`, which this build does not know", self.run_id, record.place),
                    code: "waiting",
                },
                Err(e) => Event::RunError { message: e.to_string(), code: "waiting" },
            },
            RunStatus::Cancelled => finished(None, Outcome::Cancelled),
            RunStatus::Failed | RunStatus::Stopped => Event::RunError {
                message: record.error.clone().unwrap_or_else(|| "no reason was recorded".to_owned()),
                code: if record.status == RunStatus::Failed { "failed" } else { "stopped" },
            },
            _ => Event::RunError {
                message: format!("run {} is driven elsewhere and has not reached a wait or its end", self.run_id),
                code: "running",
            },
        };
        translator.end(&mut out);
        out.push(last);
        self.send(sender, &mut out).await;
    }

    /// Ends the stream with `RUN_ERROR`.
    async fn fail(
        &self,
        sender: &tokio::sync::mpsc::Sender<String>,
        translator: &mut Translator,
        message: String,
        code: &'static str,
    ) {
        let mut out = Vec::new();
        translator.end(&mut out);
        out.push(Event::RunError { message, code });
        self.send(sender, &mut out).await;
    }

    /// Sends `out`'s events, redacted, and empties it; `false` when the client left.
    async fn send(&self, sender: &tokio::sync::mpsc::Sender<String>, out: &mut Vec<Event>) -> bool {
        for event in out.drain(..) {
            let mut value = serde_json::to_value(&event).unwrap_or(Value::Null);
            self.app.runtime.secrets().redact_value(&mut value);
            if sender.send(value.to_string()).await.is_err() {
                return false;
            }
        }
        true
    }
}
