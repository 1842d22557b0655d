//! The conversations of frontend protocols: AG-UI's threads ([`ag_ui`]) and the AI
//! SDK's chats ([`ai_sdk`]). A conversation is one run of an agent or workflow,
//! found again by its id (the run's id is [`RunId::from_key`] of the protocol, the
//! workflow's name and the conversation's id), so it lives in the store and
//! survives the process. Each request acts on the run (starts it, sends it a
//! signal, or follows the drive another process has) and streams what happens from
//! the run's events and stored documents ([`translate`]), in AG-UI's vocabulary
//! ([`wire`]), which each protocol encodes as its own.

use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use loopstack_core::{Definition, RunEvent, RunRecord};
use loopstack_llm::AgentPlace;
use loopstack_llm::agent::{DECIDE_TOOLS, RESOLVE_TOOLS};

use super::*;
use crate::views::Waits;

#[cfg(feature = "a2a")]
pub(super) mod a2a;
pub(super) mod ag_ui;
pub(super) mod ai_sdk;
mod translate;
mod wire;

use translate::Translator;
use wire::{Event, Interrupt, Outcome};

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

/// How a protocol writes the stream: each event as zero or more JSON values, each
/// sent as one Server-Sent Event's data.
trait Encoder: Send + 'static {
    /// The values `event` is written as.
    fn encode(&mut self, event: Event, out: &mut Vec<Value>);

    /// The data of an event that ends the stream, after the last one, if any.
    fn end(&self) -> Option<&'static str> {
        None
    }
}

/// The conversation's run, `None` when it has not started; a store that fails is
/// answered with its error.
async fn conversation(runtime: &Runtime, run_id: RunId) -> Result<Option<RunRecord>, Box<Response>> {
    match runtime.store().load_run(run_id).await {
        Ok(record) => Ok(Some(record)),
        Err(StoreError::RunNotFound(_)) => Ok(None),
        Err(e) => Err(Box::new(store_error(&e))),
    }
}

/// Where the conversation of run `run_id` starts for the client (after what it has:
/// the messages stored so far, when the run exists), and its events from now on.
async fn follow(runtime: &Runtime, run_id: RunId, exists: bool) -> Result<(u64, Source), StoreError> {
    let next = if exists { Translator::next_of(&runtime.store().documents(run_id).await?) } else { 0 };
    // Following starts before the drive does, so no event is missed.
    Ok((next, Source::open(runtime, run_id).await?))
}

/// A client tool from a protocol's declaration of it.
fn client_tool(
    name: &str,
    description: &str,
    parameters: Option<&Value>,
) -> Result<loopstack_llm::agent::ClientTool, String> {
    if !loopstack_core::is_valid_tool_name(name) {
        return Err(format!("tool `{name}`: a tool's name is 1 to 64 ASCII letters, digits, `_` or `-`"));
    }
    let parameters = parameters.cloned().unwrap_or_else(|| json!({ "type": "object" }));
    Ok(loopstack_llm::agent::ClientTool::new(name, description, parameters))
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
            .map(|call| match &call.input {
                // A call that ran and asks a person for input: the form is its schema.
                Some(input) => Interrupt {
                    id: format!("{signal}:{}", call.call_id),
                    reason: "input_required",
                    message: input.message.clone(),
                    tool_call_id: Some(call.call_id.clone()),
                    response_schema: Some(input.schema.clone()),
                    expires_at: expires_at.clone(),
                },
                None => Interrupt {
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
                },
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
    /// The labels a run this request starts carries: the protocol's conversation.
    labels: loopstack_core::Labels,
}

impl Request {
    /// Acts on the run and answers with the stream of what happens, encoded by
    /// `encoder`.
    fn respond(
        self,
        action: Action,
        record: Option<RunRecord>,
        next: u64,
        source: Source,
        encoder: impl Encoder,
    ) -> Sse<impl futures::Stream<Item = Result<SseEvent, std::convert::Infallible>>> {
        let receiver = self.spawn(action, record, next, source, encoder);
        let events = futures::stream::unfold(receiver, |mut receiver| async move {
            let data = receiver.recv().await?;
            Some((Ok(SseEvent::default().data(data)), receiver))
        });
        Sse::new(events).keep_alive(KeepAlive::default())
    }

    /// Acts on the run in a task of its own, which sends the encoded events to the
    /// receiver until the run settles or the receiver is dropped (the run's drive
    /// goes on without it).
    fn spawn(
        self,
        action: Action,
        record: Option<RunRecord>,
        next: u64,
        source: Source,
        encoder: impl Encoder,
    ) -> tokio::sync::mpsc::Receiver<String> {
        let (sender, receiver) = tokio::sync::mpsc::channel::<String>(64);
        let sender = Sender { sender, encoder: Box::new(encoder) };
        tokio::spawn(self.stream(action, record, next, source, sender));
        receiver
    }

    async fn stream(
        self,
        action: Action,
        record: Option<RunRecord>,
        next: u64,
        mut source: Source,
        mut sender: Sender,
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
        if !self.send(&mut sender, &mut out).await {
            return;
        }
        let runtime = self.app.runtime.clone();
        let run_id = self.run_id;
        let mut drive = match action {
            Action::Start(value) => {
                let name = self.name.clone();
                let labels = self.labels.clone();
                Some(tokio::spawn(async move { runtime.start_labeled_by_name(&name, value, run_id, labels).await }))
            }
            Action::Signal(signal, payload) => {
                Some(tokio::spawn(async move { runtime.signal_by_name(run_id, &signal, payload).await }))
            }
            Action::Cancel => {
                if let Err(e) = runtime.cancel(run_id, "every interrupt was cancelled by an AG-UI client").await {
                    return self.fail(&mut sender, &mut translator, e.to_string(), "invalid").await;
                }
                return self.finish(&mut sender, &mut translator).await;
            }
            Action::Follow => {
                // What the turn stored before the stream joined it, at once.
                translator.joined();
                if let (Some(record), Ok(documents)) = (&record, self.app.runtime.store().documents(run_id).await) {
                    let mut out = Vec::new();
                    translator.messages(record.step, &documents, &mut out);
                    if !self.send(&mut sender, &mut out).await {
                        return;
                    }
                }
                None
            }
            Action::Show => return self.finish(&mut sender, &mut translator).await,
            Action::Refuse(why) => return self.fail(&mut sender, &mut translator, why, "invalid").await,
        };
        let check = tokio::time::sleep(SETTLE_CHECK);
        tokio::pin!(check);
        loop {
            tokio::select! {
                event = source.next() => {
                    let Some(event) = event else { break };
                    if !self.event(&event, &mut translator, &mut sender).await {
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
                            return self.fail(&mut sender, &mut translator, e.to_string(), "invalid").await;
                        }
                    }
                }
                () = &mut check, if drive.is_none() => {
                    // The drive is over (or elsewhere): a run that stands still ends
                    // the stream even if its last event was missed.
                    match self.app.runtime.store().load_run(run_id).await {
                        Ok(record) if self.settled(&record) => break,
                        Ok(_) => check.as_mut().reset(tokio::time::Instant::now() + SETTLE_CHECK),
                        Err(e) => return self.fail(&mut sender, &mut translator, e.to_string(), "store").await,
                    }
                }
            }
        }
        self.finish(&mut sender, &mut translator).await;
    }

    /// Translates `event` and sends what it makes; `false` when the client left.
    async fn event(&self, event: &RunEvent, translator: &mut Translator, sender: &mut Sender) -> bool {
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
    async fn finish(&self, sender: &mut Sender, translator: &mut Translator) {
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
    async fn fail(&self, sender: &mut Sender, translator: &mut Translator, message: String, code: &'static str) {
        let mut out = Vec::new();
        translator.end(&mut out);
        out.push(Event::RunError { message, code });
        self.send(sender, &mut out).await;
    }

    /// Sends `out`'s events, encoded and redacted, and empties it; `false` when the
    /// client left.
    async fn send(&self, sender: &mut Sender, out: &mut Vec<Event>) -> bool {
        let mut values = Vec::new();
        for event in out.drain(..) {
            let last = matches!(event, Event::RunFinished { .. } | Event::RunError { .. });
            sender.encoder.encode(event, &mut values);
            for mut value in values.drain(..) {
                self.app.runtime.secrets().redact_value(&mut value);
                if sender.sender.send(value.to_string()).await.is_err() {
                    return false;
                }
            }
            if let Some(end) = sender.encoder.end().filter(|_| last)
                && sender.sender.send(end.to_owned()).await.is_err()
            {
                return false;
            }
        }
        true
    }
}

/// Where a request's stream goes, and how it is written.
struct Sender {
    sender: tokio::sync::mpsc::Sender<String>,
    encoder: Box<dyn Encoder>,
}
