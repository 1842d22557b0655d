//! The runtime that drives runs: its public face ([`Runtime`], [`Drive`]), the
//! driver that claims and finishes a drive (`driver`) and the loop of transitions
//! (`run_loop`).

use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::{RunError, StoreError};
use crate::store::{Claim, MemoryStore, RunId, RunStatus, Store};
use crate::workflow::{IntoSignal, Workflow};

mod builder;
mod by_name;
mod cancel;
mod driver;
mod fork;
mod migrate;
mod prepare;
pub(crate) mod registry;
mod run_loop;
mod schedules;
mod shared;
mod state;
mod worker;

use cancel::{cancel_children, wake_parent};
pub(crate) use shared::Clock;
use shared::Shared;
pub(crate) use state::create;

pub use builder::Drive;
pub(crate) use builder::Mode;
pub use worker::{DEFAULT_DRAIN_TIMEOUT, SCHEDULE_CHECK, Worker};

/// The default limit of transitions per drive.
pub const DEFAULT_MAX_STEPS: u64 = 1_000;
/// How many child runs a drive drives at once unless set.
pub const DEFAULT_CHILD_CONCURRENCY: usize = 8;

/// Drives workflow runs and keeps them in a [`Store`].
///
/// Cloning is cheap; clones share the store.
///
/// ```
/// # use loopstack_core::*;
/// # async fn demo<W: Workflow>(wf: W, input: W::Input) -> Result<(), RunError> {
/// let runtime = Runtime::new(); // an in-memory store
/// let report = runtime.start(&wf, input).max_steps(50).await?;
/// match report.outcome {
///     RunOutcome::Completed => println!("done after {} steps", report.steps),
///     RunOutcome::Waiting { place, signals } => println!("waiting at {place} for {signals:?}"),
///     other => println!("{other:?}"),
/// }
/// # Ok(()) }
/// ```
///
/// # Durability
///
/// Every transition is committed to the store with its state and documents, so a run
/// whose process dies resumes from its last checkpoint ([`Runtime::resume`]). The
/// transition that was running when the process died runs again: transitions run
/// at least once, their commits happen exactly once. A tool with a side effect that
/// must happen once uses [`ToolContext::idempotency_key`](crate::ToolContext::idempotency_key).
#[derive(Clone)]
pub struct Runtime {
    /// One allocation: a clone (each run context holds one) is one reference count.
    /// Private to the runtime's modules, which reach it through its methods.
    inner: Arc<Shared>,
}

impl Default for Runtime {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("max_steps", &self.inner.max_steps())
            .field("owner", &self.inner.owner())
            .field("lease", &self.inner.lease_duration())
            .field("workflows", self.inner.registry())
            .finish_non_exhaustive()
    }
}

/// How a drive of a run ended, when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunOutcome {
    /// The run reached `end`.
    Completed,
    /// The run waits at `place` for one of `signals`.
    Waiting {
        /// The place.
        place: &'static str,
        /// The wait transitions that accept a signal.
        signals: Vec<&'static str>,
    },
    /// The signal was stored in the run's inbox, but another driver holds the run;
    /// that driver delivers it when the run waits where the signal is enabled (or
    /// records it as rejected).
    Queued {
        /// The signal's id in the run's inbox.
        signal: u64,
    },
    /// The drive stopped between two steps because its process shuts down
    /// ([`Drive::stop_on`], a [`Worker`] draining): the run is still running, its
    /// lease given back, and the next worker that looks for work continues it.
    Released,
    /// A transition stopped the run ([`RunContext::stop`](crate::RunContext::stop)):
    /// it is [`RunStatus::Stopped`] at its last checkpoint, with `reason` as its
    /// error, and nothing of the stopping step is stored. The report's state is the
    /// one the stopping transition left, for the caller to read why; the store keeps
    /// the checkpoint's, which a retry starts from.
    Stopped {
        /// Why, as the transition said it.
        reason: String,
    },
}

/// What a caller gets back from driving a run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunReport<S> {
    /// The run's id, for [`Runtime::signal`], [`Runtime::resume`] and the store.
    pub run_id: RunId,
    /// Completed, waiting, or (for a signal) queued.
    pub outcome: RunOutcome,
    /// The state after the last transition: the run's result.
    pub state: S,
    /// How many transitions the run has taken in all.
    pub steps: u64,
}

impl Runtime {
    /// A runtime with an in-memory store.
    pub fn new() -> Self {
        Self::with_store(MemoryStore::new())
    }

    /// A runtime with the given store.
    pub fn with_store(store: impl Store) -> Self {
        Self::with_shared_store(Arc::new(store))
    }

    /// A runtime with a shared store.
    pub fn with_shared_store(store: Arc<dyn Store>) -> Self {
        Self { inner: Arc::new(Shared::new(store)) }
    }

    /// Sets the default step limit of a drive (1,000 unless set): how many
    /// transitions one start, resume, signal or retry may take.
    #[must_use]
    pub fn max_steps(mut self, max_steps: u64) -> Self {
        Arc::make_mut(&mut self.inner).set_max_steps(max_steps);
        self
    }

    /// Sets how long this runtime's hold on a run it drives lasts without renewal
    /// (the store's default unless set; `None` takes no lease). The runtime renews
    /// it with every commit and, while a transition runs, every third of it.
    #[must_use]
    pub fn lease(mut self, lease: Option<Duration>) -> Self {
        Arc::make_mut(&mut self.inner).set_lease(lease);
        self
    }

    /// Names this runtime in the leases it takes, which listings show as the holder
    /// of a running run: `host:pid:random` unless set (the host's name, the process
    /// id, and a random suffix that tells two runtimes of one process apart).
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.inner).set_owner(owner.into().into());
        self
    }

    /// Sets the clock of timer transitions, leases and the timestamps of steps (the
    /// system clock unless set): for tests that let hours pass at once.
    #[must_use]
    pub fn clock(mut self, clock: impl Fn() -> crate::Timestamp + Send + Sync + 'static) -> Self {
        Arc::make_mut(&mut self.inner).set_clock(Clock::new(clock));
        self
    }

    /// Records this runtime's drives, steps and claims, and the model and tool calls
    /// of its agents, in `metrics` ([`metrics`](crate::metrics); feature `metrics`).
    /// A runtime without it records nothing and pays nothing for metrics.
    #[cfg(feature = "metrics")]
    #[must_use]
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Self {
        Arc::make_mut(&mut self.inner).set_metrics(metrics);
        self
    }

    /// Where this runtime records its metrics ([`Runtime::with_metrics`]), if anywhere.
    #[cfg(feature = "metrics")]
    pub fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        self.inner.metrics()
    }

    /// The current time by this runtime's clock.
    pub fn now(&self) -> crate::Timestamp {
        self.inner.now()
    }

    /// Registers `workflow` by its name: this runtime then drives its runs where it
    /// meets them without being handed the workflow, as child runs
    /// ([`RunContext::start_child`](crate::RunContext::start_child)) and as parents
    /// woken by their children; and it can start one by name
    /// ([`Runtime::submit_by_name`]). A [`Worker`] over this runtime drives them too.
    ///
    /// # Panics
    ///
    /// When a workflow of the same name is registered already: the second would
    /// silently replace the first, and runs of the first would resume under the
    /// second's table, prompt and tools. [`Runtime::try_register`] returns the
    /// error instead.
    #[must_use]
    #[track_caller]
    pub fn register<W: Workflow>(self, workflow: W) -> Self
    where
        W::Input: serde::de::DeserializeOwned,
    {
        self.register_shared(Arc::new(workflow))
    }

    /// Registers `workflow` as [`Runtime::register`] does, refusing a name that
    /// is taken with [`RegistryError::DuplicateWorkflow`](crate::RegistryError::DuplicateWorkflow).
    ///
    /// ```
    /// use loopstack_core::{RegistryError, Runtime};
    /// # use loopstack_core::*;
    /// # use futures::future::BoxFuture;
    /// # struct Counter;
    /// # static DEFINITION: Definition = Definition::new("counter", &[START, END], &[TransitionDef::new("go", &[START], END)]);
    /// # impl Workflow for Counter {
    /// #     type State = u32;
    /// #     type Input = u32;
    /// #     fn definition(&self) -> &'static Definition { &DEFINITION }
    /// #     fn init(&self, input: u32) -> u32 { input }
    /// #     fn guard(&self, _: usize, _: &u32) -> bool { true }
    /// #     fn transition<'a>(&'a self, _: usize, _: &'a mut u32, _: &'a mut RunContext, _: Option<serde_json::Value>)
    /// #         -> BoxFuture<'a, Result<(), TransitionError>> { Box::pin(async { Ok(()) }) }
    /// # }
    /// let runtime = Runtime::new().try_register(Counter)?;
    /// let err = runtime.try_register(Counter).unwrap_err();
    /// assert!(matches!(err, RegistryError::DuplicateWorkflow { ref name, .. } if name == "counter"));
    /// # Ok::<(), RegistryError>(())
    /// ```
    pub fn try_register<W: Workflow>(self, workflow: W) -> Result<Self, crate::RegistryError>
    where
        W::Input: serde::de::DeserializeOwned,
    {
        self.try_register_shared(Arc::new(workflow))
    }

    /// Registers a shared workflow; see [`Runtime::register`].
    ///
    /// # Panics
    ///
    /// When a workflow of the same name is registered already (see [`Runtime::register`]).
    #[must_use]
    #[track_caller]
    pub fn register_shared<W: Workflow>(self, workflow: Arc<W>) -> Self
    where
        W::Input: serde::de::DeserializeOwned,
    {
        match self.try_register_shared(workflow) {
            Ok(runtime) => runtime,
            Err(e) => panic!("{e}"),
        }
    }

    /// Registers a shared workflow, refusing a name that is taken; see
    /// [`Runtime::try_register`].
    pub fn try_register_shared<W: Workflow>(mut self, workflow: Arc<W>) -> Result<Self, crate::RegistryError>
    where
        W::Input: serde::de::DeserializeOwned,
    {
        Arc::make_mut(&mut self.inner).register(workflow, Some(serde_json::from_value))?;
        Ok(self)
    }

    /// Registers a workflow whose input does not read from JSON: it cannot be
    /// started by name.
    pub(crate) fn register_opaque<W: Workflow>(&mut self, workflow: Arc<W>) {
        if self.inner.workflow(workflow.definition().name()).is_some() {
            // Registered with its JSON input already: keep that.
            return;
        }
        // Checked above: the name is free.
        let _ = Arc::make_mut(&mut self.inner).register(workflow, None);
    }

    /// The names of the registered workflows, sorted.
    pub fn workflows(&self) -> Vec<&'static str> {
        self.inner.registry().names()
    }

    /// The transition table of the registered workflow `workflow`: its places,
    /// transitions, wait transitions with their payload schemas, and diagram.
    pub fn definition_of(&self, workflow: &str) -> Option<&'static crate::Definition> {
        self.inner.workflow(workflow).map(|w| w.definition())
    }

    /// The JSON Schema of a registered workflow's input ([`Workflow::input_schema`]),
    /// if it is registered and has one.
    pub fn input_schema_of(&self, workflow: &str) -> Option<Value> {
        self.inner.workflow(workflow).and_then(|w| w.input_schema())
    }

    /// Whether a workflow of this name is registered.
    pub fn is_registered(&self, workflow: &str) -> bool {
        self.inner.workflow(workflow).is_some()
    }

    /// Sets how many child runs one drive drives at once (8 unless set; at least 1).
    #[must_use]
    pub fn child_concurrency(mut self, concurrency: usize) -> Self {
        Arc::make_mut(&mut self.inner).set_child_concurrency(concurrency);
        self
    }

    /// The secret values (API keys, tokens) kept out of what runs record: register
    /// one with `runtime.secrets().register(key)`; clones of the runtime share them.
    /// Every occurrence is replaced by `[redacted]` in documents (content and
    /// metadata) and states before they are committed, in the errors recorded with
    /// failed or cancelled runs and refused signals, in the runtime's logs and
    /// events of them, and in tool results and the warnings logged for failed
    /// calls. Signal payloads are stored as sent. A secret is found as registered
    /// and as serde_json escapes it; JSON written by other means with other escapes
    /// (`\u0073k-...`) is not searched.
    pub fn secrets(&self) -> &crate::secrets::Secrets {
        self.inner.secrets()
    }

    /// A state or document's JSON with the runtime's secrets redacted.
    pub(crate) fn redact(&self, value: Box<serde_json::value::RawValue>) -> Box<serde_json::value::RawValue> {
        let secrets = self.inner.secrets();
        if secrets.is_empty() { value } else { crate::secrets::redact_raw(secrets, value) }
    }

    /// Subscribes to the events of every run this runtime (or a clone of it)
    /// drives from now on: transitions, model text as it streams, tool calls,
    /// usage, waits and how each drive ended. See [`events`](crate::events).
    ///
    /// Over a store with an event log, this includes the runs that other processes
    /// drive on the same store, from about [`LISTENER_CHECK`](crate::events::LISTENER_CHECK)
    /// after subscribing (call it within a tokio runtime).
    pub fn subscribe(&self) -> crate::RunEvents {
        self.inner.events().subscribe()
    }

    /// Writes the events this runtime queued for the store's event log so far (a
    /// background task writes them in batches): call it before a process that drove
    /// runs exits, so that listeners elsewhere get its last events. Nothing to do
    /// while nobody listens, or over a store without a log.
    pub async fn flush_events(&self) {
        self.inner.events().flush().await;
    }

    /// Follows the store's event log: the events of run `run` (or of every run) that
    /// any runtime sharing the store emits, this one's included, each with its id in
    /// the log, after id `after` (from now on when `None`). Resuming with the
    /// [`cursor`](crate::events::LogEvents::cursor) of an earlier follower loses and
    /// repeats nothing. `Ok(None)` when the store keeps no log
    /// ([`Store::has_event_log`]): then use [`Runtime::subscribe`], which sees this
    /// process's drives only. See [`events`](crate::events).
    pub async fn follow_log(
        &self,
        run: Option<RunId>,
        after: Option<u64>,
    ) -> Result<Option<crate::events::LogEvents>, StoreError> {
        self.inner.events().follow_log(run, after).await
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        self.inner.store()
    }

    /// The run events' subscribers, for the contexts of the runs this runtime drives.
    #[inline]
    pub(crate) fn events(&self) -> &crate::events::EventHub {
        self.inner.events()
    }

    /// Starts a run of `workflow` with `input`; await the returned builder to drive it
    /// until `end`, a wait, or a failure.
    pub fn start<'a, W: Workflow>(&'a self, workflow: &'a W, input: W::Input) -> Drive<'a, W> {
        Drive::new(self, workflow, Mode::Start(input, crate::Labels::new()))
    }

    /// Continues a run from its last checkpoint: one whose process died while it
    /// ran, or a queued one. It takes the run over from any other driver (whose
    /// writes are then refused). A waiting run stays waiting, unless a signal is in
    /// its inbox or a timer is due. The run's children that the dead drive left
    /// queued, or running once their lease ran out, are driven as the drive that
    /// started them would have (when the run next waits or ends).
    pub fn resume<'a, W: Workflow>(&'a self, workflow: &'a W, run_id: RunId) -> Drive<'a, W> {
        Drive::new(self, workflow, Mode::Resume(run_id))
    }

    /// Restarts a failed, cancelled or stopped run from its last checkpoint: after a
    /// provider outage, a fixed bug, a raised limit. The step limit counts from here.
    pub fn retry<'a, W: Workflow>(&'a self, workflow: &'a W, run_id: RunId) -> Drive<'a, W> {
        Drive::new(self, workflow, Mode::Retry(run_id))
    }

    /// Starts a new run from step `step` of run `source` (its state, place and
    /// documents as they were after that step) and drives it: time travel, to try
    /// another path from a past point. The new run's id is the report's. A step the
    /// source does not have is refused with [`RunError::Fork`]
    /// ([`ForkError::UnknownStep`](crate::fork::ForkError::UnknownStep)).
    pub fn fork<'a, W: Workflow>(&'a self, workflow: &'a W, source: RunId, step: u64) -> Drive<'a, W> {
        Drive::new(self, workflow, Mode::Fork(source, step, None))
    }

    /// Forks as [`Runtime::fork`] does, with `edits` applied first: a replaced
    /// state, another system prompt or model for an agent's turns (see
    /// [`fork`](crate::fork)). The edits are the fork's first step of its own
    /// (transition [`FORK_TRANSITION`](crate::fork::FORK_TRANSITION)), so the fork's
    /// report counts one step more than `step`. Edits that do not fit (a step the
    /// source does not have, a state that does not read as the workflow's, a system
    /// prompt for a workflow without model turns) are refused with
    /// [`RunError::Fork`] before anything is stored.
    pub fn fork_with<'a, W: Workflow>(
        &'a self,
        workflow: &'a W,
        source: RunId,
        step: u64,
        edits: crate::ForkEdits,
    ) -> Drive<'a, W> {
        Drive::new(self, workflow, Mode::Fork(source, step, Some(Box::new(edits))))
    }

    /// Forks run `source` of a registered workflow at `step` with `edits` and drives
    /// the fork, as [`Runtime::fork_with`] does without the workflow's type: for
    /// command lines and HTTP callers. The fork gets id `fork`; returns how its
    /// drive ended.
    pub async fn fork_by_name(
        &self,
        source: RunId,
        step: u64,
        edits: crate::ForkEdits,
        fork: RunId,
    ) -> Result<RunOutcome, RunError> {
        let record = self.inner.store().load_run(source).await?;
        self.registered(&record.workflow)?.fork(self, source, step, edits, fork).await
    }

    /// Sends a signal to a run: stores it in the run's inbox, then, if the run is
    /// waiting, fires the wait transition it names with its payload and drives the
    /// run on. `signal` is the workflow's generated `<Type>Signal` enum (checked at
    /// compile time) or a `(name, payload)` pair:
    ///
    /// ```
    /// # use loopstack_core::*;
    /// # async fn demo<W: Workflow>(rt: &Runtime, wf: &W, run_id: RunId) -> Result<(), RunError> {
    /// rt.signal(wf, run_id, ("approve", serde_json::json!({"approved_by": "ada"}))).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// A signal the workflow does not have, or one that is not enabled where the run
    /// waits, is an error and nothing is stored. A payload that does not deserialize,
    /// or a wait transition that returns an error, refuses the signal: the run keeps
    /// waiting, the signal is recorded as rejected, and the caller gets the error. If
    /// another driver holds the run, the signal waits in the inbox
    /// ([`RunOutcome::Queued`]) and is delivered exactly once.
    pub fn signal<'a, W: Workflow>(
        &'a self,
        workflow: &'a W,
        run_id: RunId,
        signal: impl IntoSignal<W>,
    ) -> Drive<'a, W> {
        Drive::new(self, workflow, Mode::Signal(run_id, signal.into_signal()))
    }

    /// Creates a run of `workflow` with `input` and returns its id at once, without
    /// driving it: a [`Worker`] over the same store claims and drives it. Await its
    /// outcome with [`Runtime::wait_for`], or poll [`Store::load_run`].
    pub async fn submit<W: Workflow>(&self, workflow: &W, input: W::Input) -> Result<RunId, RunError> {
        let run_id = RunId::new();
        let created = state::create(self, workflow, input, run_id)?;
        self.inner.store().create_run(crate::trace::traced(created.new.queued())).await?;
        Ok(run_id)
    }

    /// Waits until a run is no longer queued or running (it completed, failed, was
    /// cancelled or stopped, or waits for a signal), checking the store every `poll`; returns
    /// the run as it then is.
    pub async fn wait_for(&self, run_id: RunId, poll: Duration) -> Result<crate::RunRecord, StoreError> {
        loop {
            let record = self.inner.store().load_run(run_id).await?;
            if !matches!(record.status, RunStatus::Queued | RunStatus::Running) {
                return Ok(record);
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// Drives a run a worker has claimed.
    pub(crate) fn drive_claimed<'a, W: Workflow>(&'a self, workflow: &'a W, record: crate::RunRecord) -> Drive<'a, W> {
        Drive::new(self, workflow, Mode::Claimed(Box::new(record)))
    }
}

/// The text of a panic's payload (`&str` or `String`), for error messages.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Runs a future, returning `None` if `token` is cancelled first. Dropping the future
/// drops everything it started.
pub async fn cancellable<F: Future>(token: &CancellationToken, fut: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        () = token.cancelled() => None,
        r = fut => Some(r),
    }
}

impl From<StoreError> for crate::TransitionError {
    fn from(e: StoreError) -> Self {
        Self::Failed(Box::new(e))
    }
}
