//! Run events: what happens inside runs as it happens, for progress output, a
//! command line following a run, or a web inspector.
//!
//! [`Runtime::subscribe`](crate::Runtime::subscribe) returns a [`RunEvents`]
//! receiver of every run the runtime drives (filter one with
//! [`RunEvents::run`]). The runtime itself reports transitions, waits and how a
//! drive ended; steps report their own work through [`RunContext::emit`]
//! (the agent reports model text as it streams, tool calls and token usage).
//!
//! # Across processes
//!
//! Over a store that keeps an event log (the SQLite and PostgreSQL stores of
//! `loopstack-store`; [`Store::has_event_log`]), a
//! subscriber also receives the events of runs that other processes (workers, a
//! command line) drive on the same store, the model's streamed text included: a
//! subscribing runtime records itself in the store's listener table (renewed
//! while it has subscribers, expiring [`LISTENER_TTL`] after it stops), each driving
//! runtime checks that table every [`LISTENER_CHECK`] in the background, and while
//! someone listens it writes its events to the log in batches; the subscriber's
//! runtime follows the log (PostgreSQL wakes it with `LISTEN`/`NOTIFY`, SQLite is
//! polled at a short interval) and hands on the events other runtimes wrote (its
//! own reached its subscribers directly, so none arrives twice). Events of one run
//! arrive in the order they were emitted. A subscriber sees another process's events
//! from at most about [`LISTENER_CHECK`] after it subscribed; to read a run's events
//! from a known point on, with ids that survive a reconnect, follow the log itself
//! with [`Runtime::follow_log`](crate::Runtime::follow_log) (what the HTTP API's
//! event stream does). The log is pruned by age and count
//! ([`EventRetention`](crate::store::EventRetention)).
//!
//! Over a store without a log (the [`MemoryStore`](crate::MemoryStore), and a
//! store of your own unless it implements one), events reach only the subscribers
//! of the process that drives the run.
//!
//! # What it costs
//!
//! Events cost nothing when nobody listens: with no subscriber here and no
//! listener in the store, emitting is one atomic load, and steps that would do
//! extra work for events (such as streaming a model's reply) check
//! [`RunContext::events_enabled`] first. Over a store with a log, a runtime that
//! drives runs reads the listener table once every [`LISTENER_CHECK`], off the
//! drive's path, and writes nothing while nobody listens.
//!
//! # Falling behind
//!
//! Events are a live view, not a record: a [`RunEvents`] subscriber that falls more
//! than [`EVENT_CAPACITY`] behind skips the oldest ([`RunEvents::recv`] reports how
//! many as [`Lagged`]), whether they came from this process or through the log. A
//! follower of the log ([`LogEvents`]) does not lag: it reads the log at its own
//! pace, and loses only events pruned before it read them. Events still queued
//! for the log when a process exits are not written. The durable record of a run is
//! its store: its history, checkpoints and documents.
//!
//! [`RunContext::emit`]: crate::RunContext::emit
//! [`RunContext::events_enabled`]: crate::RunContext::events_enabled

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::store::{RunId, RunStatus, Store, Timestamp};

mod follow;
mod log;

pub use follow::LogEvents;
pub use log::{LISTENER_CHECK, LISTENER_TTL};

/// How many events a subscriber may fall behind before it skips the oldest.
pub const EVENT_CAPACITY: usize = 4096;

/// Something that happened in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunEvent {
    /// The run.
    pub run_id: RunId,
    /// The run's workflow.
    pub workflow: Cow<'static, str>,
    /// When it happened.
    pub at: Timestamp,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

impl RunEvent {
    /// An event of run `run_id` of `workflow` at `at`: for a store of your own
    /// (reading its event log back) and for tests.
    pub fn new(run_id: RunId, workflow: impl Into<Cow<'static, str>>, at: Timestamp, kind: EventKind) -> Self {
        Self { run_id, workflow: workflow.into(), at, kind }
    }
}

/// What happened in a run. Serialized with a `type` tag in snake case
/// (`{"type": "text_delta", "text": "..."}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A transition began; it commits as `step`.
    TransitionStarted {
        /// The transition.
        transition: Cow<'static, str>,
        /// The place it leaves.
        from: Cow<'static, str>,
        /// The place it reaches.
        to: Cow<'static, str>,
        /// The step it commits as.
        step: u64,
    },
    /// A transition's step was committed to the store.
    TransitionCommitted {
        /// The transition.
        transition: Cow<'static, str>,
        /// The place it left.
        from: Cow<'static, str>,
        /// The place the run is at now.
        to: Cow<'static, str>,
        /// The step committed.
        step: u64,
    },
    /// A piece of a model's reply, as the provider streamed it.
    TextDelta {
        /// The text.
        text: String,
    },
    /// A piece of what a model reasoned before it answered, as the provider streamed
    /// it (on models that show their reasoning, or a summary of it).
    ReasoningDelta {
        /// The text.
        text: String,
    },
    /// A piece of a tool call's arguments, as the model writes them in a streamed
    /// reply: the first piece of each call (with empty `partial_json`) says the call
    /// began; joined in order, the pieces are the call's arguments as JSON text. The
    /// call runs later, as [`EventKind::ToolCallStarted`].
    ToolCallDelta {
        /// The call's id.
        call_id: String,
        /// The tool.
        name: String,
        /// The next piece of the arguments' JSON text.
        partial_json: String,
    },
    /// A tool call began.
    ToolCallStarted {
        /// The call's id.
        call_id: String,
        /// The tool.
        name: String,
    },
    /// A tool call finished, with its result or error.
    ToolCallFinished {
        /// The call's id.
        call_id: String,
        /// The tool.
        name: String,
        /// How long it ran.
        #[serde(with = "millis")]
        duration: Duration,
        /// The error result's text when the call failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Tokens a model turn used.
    Usage {
        /// The provider.
        provider: String,
        /// The model.
        model: String,
        /// Input tokens.
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
        /// Input tokens read from the provider's prompt cache.
        #[serde(default)]
        cache_read_input_tokens: u64,
        /// Input tokens written to the provider's prompt cache.
        #[serde(default)]
        cache_creation_input_tokens: u64,
        /// Output tokens spent reasoning (counted in `output_tokens` too).
        #[serde(default, skip_serializing_if = "is_zero")]
        reasoning_output_tokens: u64,
    },
    /// Something a step reports that has no kind of its own.
    Custom {
        /// What it is.
        name: Cow<'static, str>,
        /// Its data.
        data: serde_json::Value,
    },
    /// The run waits for one of `signals` (or a timer).
    Waiting {
        /// The place.
        place: Cow<'static, str>,
        /// The wait transitions that take a signal there.
        signals: Vec<Cow<'static, str>>,
    },
    /// The drive ended: the run completed, failed, was cancelled or stopped.
    Finished {
        /// How the run stands.
        status: RunStatus,
        /// The error, when it failed or was cancelled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// The broadcast channel of a runtime's events, made by the first subscriber: its
/// [`EVENT_CAPACITY`] slots are 128 KB that a runtime nobody subscribes to does not
/// allocate. The hub and its log link share it.
type Channel = Arc<std::sync::OnceLock<broadcast::Sender<Arc<RunEvent>>>>;

/// The runtime's event channel; clones share it.
#[derive(Clone)]
pub(crate) struct EventHub {
    sender: Channel,
    /// Live [`RunEvents`] receivers, plus one while the store's listener table says
    /// someone elsewhere listens: checked before anything is built or sent. Apart
    /// from the sender, so receivers see the channel close when the last runtime
    /// clone is gone.
    subscribers: Arc<AtomicUsize>,
    /// The link to the store's event log, if it keeps one.
    log: Option<Arc<log::LogLink>>,
}

impl EventHub {
    pub(crate) fn new(store: &Arc<dyn Store>) -> Self {
        let sender = Channel::default();
        let subscribers = Arc::new(AtomicUsize::new(0));
        let log = store
            .has_event_log()
            .then(|| Arc::new(log::LogLink::new(store.clone(), sender.clone(), subscribers.clone())));
        Self { sender, subscribers, log }
    }

    /// Whether anyone listens, here or (through the store's log) elsewhere.
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.subscribers.load(Ordering::Relaxed) > 0
    }

    /// Sends an event built by `kind`, which runs only when someone listens.
    #[inline]
    pub(crate) fn emit(&self, run_id: RunId, workflow: &'static str, kind: impl FnOnce() -> EventKind) {
        if self.enabled() {
            self.send(RunEvent { run_id, workflow: Cow::Borrowed(workflow), at: Timestamp::now(), kind: kind() });
        }
    }

    #[cold]
    pub(crate) fn send(&self, event: RunEvent) {
        let event = Arc::new(event);
        if let Some(log) = &self.log {
            log.offer(&event);
        }
        // No channel, or an error: no receiver here, nobody to tell.
        if let Some(sender) = self.sender.get() {
            let _ = sender.send(event);
        }
    }

    /// A drive begins: over a store with a log, makes sure the publisher runs (it
    /// checks for listeners elsewhere); the first drive checks itself, once. While
    /// the publisher runs, a clock read and an atomic load.
    #[inline]
    pub(crate) async fn prepare_drive(&self) {
        if let Some(log) = &self.log {
            log.prepare_drive().await;
        }
    }

    /// Over a store with a log: makes sure the publisher runs, without waiting.
    #[inline]
    pub(crate) fn keep_publishing(&self) {
        if let Some(log) = &self.log {
            log.ensure_publisher();
        }
    }

    /// Writes the events queued for the log so far.
    pub(crate) async fn flush(&self) {
        if let Some(log) = &self.log {
            log.flush().await;
        }
    }

    pub(crate) fn subscribe(&self) -> RunEvents {
        self.subscribers.fetch_add(1, Ordering::Relaxed);
        let receiver = self.sender.get_or_init(|| broadcast::channel(EVENT_CAPACITY).0).subscribe();
        let followers = self.log.as_ref().map(|log| {
            log.followers.fetch_add(1, Ordering::AcqRel);
            log.ensure_follower();
            log.followers.clone()
        });
        RunEvents { receiver, subscribers: self.subscribers.clone(), followers, run: None }
    }

    /// A follower of the log from after `after` (from its newest event when
    /// `None`); `None` when the store keeps no log.
    pub(crate) async fn follow_log(
        &self,
        run: Option<RunId>,
        after: Option<u64>,
    ) -> Result<Option<LogEvents>, crate::StoreError> {
        let Some(log) = &self.log else { return Ok(None) };
        // Listening before it returns: a drive that starts after it publishes.
        log.listen_now().await?;
        let cursor = match after {
            Some(after) => after,
            None => log.store().last_event_id().await?,
        };
        Ok(Some(LogEvents::new(log, run, cursor)))
    }
}

impl std::fmt::Debug for EventHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventHub").field("subscribers", &self.subscribers.load(Ordering::Relaxed)).finish()
    }
}

/// A subscription to run events; see the [module docs](self). Dropping it
/// unsubscribes.
///
/// ```
/// use loopstack_core::{EventKind, Runtime};
/// # use loopstack_core::*;
/// # struct Noop;
/// # static DEF: Definition = Definition::new("noop", &[START, END], &[TransitionDef::new("go", &[START], END)]);
/// # impl Workflow for Noop {
/// #     type State = (); type Input = ();
/// #     fn definition(&self) -> &'static Definition { &DEF }
/// #     fn init(&self, _: ()) {}
/// #     fn guard(&self, _: usize, _: &()) -> bool { true }
/// #     fn transition<'a>(&'a self, _: usize, _: &'a mut (), _: &'a mut RunContext, _: Option<serde_json::Value>)
/// #         -> BoxFuture<'a, Result<(), TransitionError>> { Box::pin(async { Ok(()) }) }
/// # }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let runtime = Runtime::new();
/// let mut events = runtime.subscribe();
/// let report = runtime.start(&Noop, ()).await?;
/// let mut kinds = Vec::new();
/// while let Some(Ok(event)) = events.try_recv() {
///     assert_eq!(event.run_id, report.run_id);
///     kinds.push(event.kind.clone());
/// }
/// assert!(matches!(kinds.first(), Some(EventKind::TransitionStarted { .. })));
/// assert!(matches!(kinds.last(), Some(EventKind::Finished { .. })));
/// # Ok::<(), RunError>(()) }).unwrap();
/// ```
pub struct RunEvents {
    receiver: broadcast::Receiver<Arc<RunEvent>>,
    subscribers: Arc<AtomicUsize>,
    /// The log's follower count, over a store with a log.
    followers: Option<Arc<AtomicUsize>>,
    run: Option<RunId>,
}

/// Events a slow subscriber skipped: it fell more than [`EVENT_CAPACITY`] behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} run events were skipped: the subscriber fell behind")]
pub struct Lagged(pub u64);

impl RunEvents {
    /// Only the events of `run_id`.
    #[must_use]
    pub fn run(mut self, run_id: RunId) -> Self {
        self.run = Some(run_id);
        self
    }

    fn wanted(&self, event: &RunEvent) -> bool {
        self.run.is_none_or(|id| id == event.run_id)
    }

    /// The next event; `None` once the runtime and all its clones are gone, and
    /// `Some(Err(Lagged))` when events were skipped (the next call goes on with the
    /// oldest kept).
    pub async fn recv(&mut self) -> Option<Result<Arc<RunEvent>, Lagged>> {
        loop {
            match self.receiver.recv().await {
                Ok(event) if self.wanted(&event) => return Some(Ok(event)),
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(n)) => return Some(Err(Lagged(n))),
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The next event if one is ready, without waiting.
    pub fn try_recv(&mut self) -> Option<Result<Arc<RunEvent>, Lagged>> {
        loop {
            match self.receiver.try_recv() {
                Ok(event) if self.wanted(&event) => return Some(Ok(event)),
                Ok(_) => {}
                Err(broadcast::error::TryRecvError::Lagged(n)) => return Some(Err(Lagged(n))),
                Err(_) => return None,
            }
        }
    }

    /// The events as a stream.
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<Arc<RunEvent>, Lagged>> + Send + Unpin {
        Box::pin(futures::stream::unfold(self, |mut events| async move {
            let next = events.recv().await?;
            Some((next, events))
        }))
    }
}

impl Drop for RunEvents {
    fn drop(&mut self) {
        self.subscribers.fetch_sub(1, Ordering::Relaxed);
        if let Some(followers) = &self.followers {
            followers.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl std::fmt::Debug for RunEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunEvents").field("run", &self.run).finish_non_exhaustive()
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    fn started(step: u64) -> impl FnOnce() -> EventKind {
        move || EventKind::TransitionStarted { transition: "go".into(), from: "start".into(), to: "end".into(), step }
    }

    /// A runtime nobody subscribes to makes no channel; the first subscriber makes
    /// it, and what is sent from then on reaches it, also through a clone of the hub.
    #[test]
    fn the_channel_is_made_by_the_first_subscriber() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let hub = EventHub::new(&store);
        let run_id = RunId::new();
        hub.emit(run_id, "w", started(1));
        hub.send(RunEvent { run_id, workflow: Cow::Borrowed("w"), at: Timestamp::now(), kind: started(2)() });
        assert!(hub.sender.get().is_none(), "no subscriber, no channel");

        let mut events = hub.clone().subscribe();
        assert!(hub.sender.get().is_some());
        hub.emit(run_id, "w", started(3));
        let event = events.try_recv().expect("an event").expect("not lagged");
        assert!(matches!(event.kind, EventKind::TransitionStarted { step: 3, .. }), "{event:?}");
        assert!(events.try_recv().is_none(), "the events before it were sent to nobody");
    }
}
