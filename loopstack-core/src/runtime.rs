//! The runtime that drives runs, and the context a transition sees.

use std::borrow::Cow;
use std::future::{Future, IntoFuture};
use std::sync::Arc;

use std::panic::AssertUnwindSafe;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::document::{Document, DocumentType, SaveOptions};
use crate::error::{RunError, StoreError};
use crate::store::{Checkpoint, MemoryStore, RunId, RunRecord, RunStatus, StepRecord, Store};
use crate::workflow::{END, Route, TransitionError, Workflow};

/// The default limit of transitions per run.
pub const DEFAULT_MAX_STEPS: u64 = 1_000;

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
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Runtime {
    store: Arc<dyn Store>,
    max_steps: u64,
}

impl Default for Runtime {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("max_steps", &self.max_steps).finish_non_exhaustive()
    }
}

/// How a drive of a run ended, when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// What a caller gets back from driving a run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RunReport<S> {
    /// The run's id, for [`Runtime::signal`], [`Runtime::resume`] and the store.
    pub run_id: RunId,
    /// Completed or waiting.
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
        Self { store: Arc::new(store), max_steps: DEFAULT_MAX_STEPS }
    }

    /// A runtime with a shared store.
    pub fn with_shared_store(store: Arc<dyn Store>) -> Self {
        Self { store, max_steps: DEFAULT_MAX_STEPS }
    }

    /// Sets the default step limit of runs (1,000 unless set).
    #[must_use]
    pub fn max_steps(mut self, max_steps: u64) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Starts a run of `workflow` with `input`; await the returned builder to drive it
    /// until `end`, a wait, or a failure.
    pub fn start<'a, W: Workflow>(&'a self, workflow: &'a W, input: W::Input) -> Drive<'a, W> {
        Drive::new(self, workflow, Mode::Start(input))
    }

    /// Continues a run that stopped while running (a crashed process), from its last
    /// checkpoint. A waiting run stays waiting.
    pub fn resume<'a, W: Workflow>(&'a self, workflow: &'a W, run_id: RunId) -> Drive<'a, W> {
        Drive::new(self, workflow, Mode::Resume(run_id))
    }

    /// Sends a signal to a waiting run: fires the wait transition named `signal` with
    /// `payload`, then drives the run on. A payload that does not deserialize is an
    /// error and leaves the run waiting.
    pub fn signal<'a, W: Workflow>(
        &'a self,
        workflow: &'a W,
        run_id: RunId,
        signal: impl Into<String>,
        payload: Value,
    ) -> Drive<'a, W> {
        Drive::new(self, workflow, Mode::Signal(run_id, signal.into(), payload))
    }
}

enum Mode<I> {
    Start(I),
    Resume(RunId),
    Signal(RunId, String, Value),
}

/// A run to drive; await it. Set options with its methods first.
#[must_use = "a run does nothing until awaited"]
pub struct Drive<'a, W: Workflow> {
    runtime: &'a Runtime,
    workflow: &'a W,
    mode: Mode<W::Input>,
    run_id: Option<RunId>,
    max_steps: u64,
    cancellation: Option<CancellationToken>,
}

impl<'a, W: Workflow> Drive<'a, W> {
    fn new(runtime: &'a Runtime, workflow: &'a W, mode: Mode<W::Input>) -> Self {
        Self { runtime, workflow, mode, run_id: None, max_steps: runtime.max_steps, cancellation: None }
    }

    /// Sets the step limit for this run.
    pub fn max_steps(mut self, max_steps: u64) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// Gives a new run this id (ignored when resuming or signalling).
    pub fn run_id(mut self, run_id: RunId) -> Self {
        self.run_id = Some(run_id);
        self
    }

    /// Cancels the run when `token` is cancelled: it stops at its next await, the
    /// transition in flight is dropped with everything it started, and the run is
    /// recorded as cancelled at its last checkpoint.
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.cancellation = Some(token);
        self
    }
}

impl<'a, W: Workflow> IntoFuture for Drive<'a, W> {
    type Output = Result<RunReport<W::State>, RunError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(drive(self))
    }
}

fn state_error(workflow: &'static str, run_id: RunId) -> impl FnOnce(serde_json::Error) -> RunError {
    move |source| RunError::State { workflow, run_id, source }
}

async fn drive<W: Workflow>(d: Drive<'_, W>) -> Result<RunReport<W::State>, RunError> {
    let Drive { runtime, workflow: wf, mode, run_id, max_steps, cancellation } = d;
    let def = wf.definition();
    let name = def.name();
    let store = &runtime.store;

    let (mut state, start, signal) = match mode {
        Mode::Start(input) => {
            let run_id = run_id.unwrap_or_default();
            let state = wf.init(input);
            let value = serde_json::value::to_raw_value(&state).map_err(state_error(name, run_id))?;
            store.create_run(RunRecord::new(run_id, name, value)).await?;
            (state, RunStart { run_id, place: Cow::Borrowed(crate::START), step: 0 }, None)
        }
        Mode::Resume(run_id) | Mode::Signal(run_id, ..) => {
            let record = store.load_run(run_id).await?;
            if record.workflow != name {
                return Err(RunError::Mismatch {
                    workflow: name,
                    run_id,
                    reason: format!("the run belongs to workflow `{}`", record.workflow),
                });
            }
            let state: W::State = serde_json::from_str(record.state.get()).map_err(state_error(name, run_id))?;
            let signal = match mode {
                Mode::Signal(_, signal, payload) => Some((signal, payload)),
                _ => None,
            };
            let allowed = match signal {
                Some(_) => record.status == RunStatus::Waiting,
                None => matches!(record.status, RunStatus::Running | RunStatus::Waiting),
            };
            if !allowed {
                return Err(RunError::InvalidStatus {
                    workflow: name,
                    run_id,
                    status: record.status,
                    action: if signal.is_some() { "take a signal" } else { "be resumed" },
                });
            }
            (state, RunStart { run_id, place: record.place, step: record.step }, signal)
        }
    };
    let run_id = start.run_id;
    let place =
        def.place(&start.place).map_err(|e| RunError::Mismatch { workflow: name, run_id, reason: e.to_string() })?;
    let documents = if start.step == 0 { Vec::new() } else { store.documents(run_id).await? };
    // Without `cancel_on` nothing outside the run can cancel it, so no transition needs
    // to race a cancellation future.
    let watch_cancellation = cancellation.is_some();
    let cancellation = cancellation.unwrap_or_default();
    let mut cx = RunContext::new(store.clone(), run_id, name, place, start.step, documents, cancellation);
    let span = tracing::info_span!("loopstack.run", workflow = name, run_id = %run_id);
    async move {
        let outcome = run_loop(wf, &mut state, &mut cx, signal, max_steps, watch_cancellation).await;
        match &outcome {
            Ok(RunOutcome::Completed) => tracing::info!(steps = cx.step, "run completed"),
            Ok(RunOutcome::Waiting { place, .. }) => tracing::info!(place, "run waiting"),
            // A refused signal leaves the run as it was.
            Err(RunError::InvalidSignalPayload { .. } | RunError::UnknownSignal { .. }) => {}
            // Another driver committed this run first: the run is theirs, not failed.
            Err(RunError::Store(StoreError::Conflict { .. })) => {
                tracing::warn!("another driver committed this run first; this drive stops");
            }
            Err(e) => {
                tracing::warn!(error = %e, "run failed");
                let status =
                    if matches!(e, RunError::Cancelled { .. }) { RunStatus::Cancelled } else { RunStatus::Failed };
                if let Err(store_err) = cx.store.set_status(run_id, cx.step, status, Some(e.to_string())).await {
                    tracing::error!(error = %store_err, "could not record the run's failure");
                }
            }
        }
        let outcome = outcome?;
        Ok(RunReport { run_id, outcome, state, steps: cx.step })
    }
    .instrument(span)
    .await
}

fn mismatch(workflow: &'static str, run_id: RunId) -> impl FnOnce(crate::UnknownPlace) -> RunError {
    move |e| RunError::Mismatch { workflow, run_id, reason: e.to_string() }
}

/// The text of a panic's payload (`&str` or `String`), for error messages.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Where a drive starts: the parts of the stored run it needs.
struct RunStart {
    run_id: RunId,
    place: Cow<'static, str>,
    step: u64,
}

async fn run_loop<W: Workflow>(
    wf: &W,
    state: &mut W::State,
    cx: &mut RunContext,
    mut signal: Option<(String, Value)>,
    max_steps: u64,
    watch_cancellation: bool,
) -> Result<RunOutcome, RunError> {
    let def = wf.definition();
    let name = def.name();
    let run_id = cx.run_id;
    loop {
        let from = cx.place;
        let (index, payload) = if let Some((sig, payload)) = signal.take() {
            let route = def.route(from, |i| wf.guard(i, state)).map_err(mismatch(name, run_id))?;
            let signals = match route {
                Route::Wait { signals } => signals,
                _ => Vec::new(),
            };
            match signals.iter().find(|s| **s == sig) {
                Some(s) => (def.transition(s).expect("a routed transition exists").0, Some(payload)),
                None => {
                    return Err(RunError::UnknownSignal {
                        workflow: name,
                        run_id,
                        place: from,
                        signal: sig,
                        expected: signals,
                    });
                }
            }
        } else {
            match def.route(from, |i| wf.guard(i, state)).map_err(mismatch(name, run_id))? {
                Route::End => return Ok(RunOutcome::Completed),
                Route::Fire { index, .. } => (index, None),
                Route::Wait { signals } => {
                    cx.store.set_status(run_id, cx.step, RunStatus::Waiting, None).await?;
                    return Ok(RunOutcome::Waiting { place: from, signals });
                }
                Route::DeadEnd { false_guards } => {
                    return Err(RunError::DeadEnd { workflow: name, run_id, place: from, false_guards });
                }
            }
        };
        if cx.cancellation.is_cancelled() {
            return Err(RunError::Cancelled { workflow: name, run_id, place: from });
        }
        if cx.step >= max_steps {
            return Err(RunError::StepLimit { workflow: name, run_id, limit: max_steps, place: from });
        }
        let t = &def.transitions()[index];
        let step = cx.step + 1;
        let span = tracing::info_span!("loopstack.transition", transition = t.name, from, to = t.to, step);
        let token = watch_cancellation.then(|| cx.cancellation.clone());
        let transition = AssertUnwindSafe(wf.transition(index, state, cx, payload).instrument(span.clone()));
        let finished = match &token {
            Some(token) => cancellable(token, transition.catch_unwind()).await,
            None => Some(transition.catch_unwind().await),
        };
        let result = match finished {
            None => None,
            Some(Ok(result)) => Some(result),
            // A panicking transition fails its run like an error does; the task lives on.
            Some(Err(panic)) => Some(Err(TransitionError::Failed(
                format!("the transition panicked: {}", panic_message(panic.as_ref())).into(),
            ))),
        };
        match result {
            None => {
                cx.rollback();
                return Err(RunError::Cancelled { workflow: name, run_id, place: from });
            }
            Some(Err(TransitionError::InvalidPayload(reason))) => {
                cx.rollback();
                return Err(RunError::InvalidSignalPayload { workflow: name, run_id, signal: t.name, reason });
            }
            Some(Err(TransitionError::Failed(source))) => {
                cx.rollback();
                return Err(RunError::Transition { workflow: name, run_id, transition: t.name, place: from, source });
            }
            Some(Ok(())) => {}
        }
        let value = serde_json::value::to_raw_value(&*state).map_err(state_error(name, run_id))?;
        let status = if t.to == END { RunStatus::Completed } else { RunStatus::Running };
        let checkpoint = Checkpoint {
            run_id,
            step,
            transition: StepRecord::new(step, t.name, from, t.to),
            place: Cow::Borrowed(t.to),
            status,
            state: value,
            documents: std::mem::take(&mut cx.pending),
        };
        cx.store.commit(checkpoint).await?;
        cx.committed(step, t.to);
        span.in_scope(|| tracing::debug!("transition committed"));
    }
}

/// What a transition method can reach: the run's documents, its id and place, and
/// its cancellation.
///
/// Documents saved during a transition are visible to later reads of the same
/// transition at once, and reach the store together with the new state when the
/// transition completes. If the transition fails, none of them are kept.
pub struct RunContext {
    store: Arc<dyn Store>,
    run_id: RunId,
    workflow: &'static str,
    place: &'static str,
    step: u64,
    docs: Vec<Arc<Document>>,
    committed_len: usize,
    undo: Vec<(usize, Arc<Document>)>,
    pending: Vec<Arc<Document>>,
    cancellation: CancellationToken,
}

impl std::fmt::Debug for RunContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("run_id", &self.run_id)
            .field("workflow", &self.workflow)
            .field("place", &self.place)
            .field("step", &self.step)
            .field("documents", &self.docs.len())
            .finish_non_exhaustive()
    }
}

impl RunContext {
    fn new(
        store: Arc<dyn Store>,
        run_id: RunId,
        workflow: &'static str,
        place: &'static str,
        step: u64,
        docs: Vec<Arc<Document>>,
        cancellation: CancellationToken,
    ) -> Self {
        let committed_len = docs.len();
        Self {
            store,
            run_id,
            workflow,
            place,
            step,
            docs,
            committed_len,
            undo: Vec::new(),
            pending: Vec::new(),
            cancellation,
        }
    }

    /// A context outside any runtime, over a fresh in-memory run: for unit tests of
    /// code that takes a `&mut RunContext`. Documents saved here are never committed.
    pub fn detached(workflow: &'static str) -> Self {
        Self::new(
            Arc::new(MemoryStore::new()),
            RunId::new(),
            workflow,
            crate::START,
            0,
            Vec::new(),
            CancellationToken::new(),
        )
    }

    fn committed(&mut self, step: u64, place: &'static str) {
        self.step = step;
        self.place = place;
        self.committed_len = self.docs.len();
        self.undo.clear();
    }

    fn rollback(&mut self) {
        self.docs.truncate(self.committed_len);
        for (i, doc) in self.undo.drain(..).rev() {
            self.docs[i] = doc;
        }
        self.pending.clear();
    }

    /// The run's id.
    pub fn run_id(&self) -> RunId {
        self.run_id
    }

    /// The workflow's name.
    pub fn workflow(&self) -> &'static str {
        self.workflow
    }

    /// The place the running transition left from.
    pub fn place(&self) -> &'static str {
        self.place
    }

    /// How many transitions completed before this one.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Cancelled when the run is cancelled.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancellation
    }

    /// The store the run is kept in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Saves a typed document with the type's default tags.
    pub fn save<T: DocumentType>(&mut self, doc: &T) -> Result<&Arc<Document>, serde_json::Error> {
        self.save_with(doc, SaveOptions::new())
    }

    /// Saves a typed document with a key, tags and metadata.
    pub fn save_with<T: DocumentType>(
        &mut self,
        doc: &T,
        options: SaveOptions,
    ) -> Result<&Arc<Document>, serde_json::Error> {
        let content = serde_json::value::to_raw_value(doc)?;
        let mut options = options;
        for tag in T::default_tags().iter().rev() {
            if !options.tags.iter().any(|t| t == tag) {
                options.tags.insert(0, Cow::Borrowed(*tag));
            }
        }
        Ok(self.save_raw(T::TYPE, content, options))
    }

    /// Saves an untyped document whose content is already JSON.
    pub fn save_raw(
        &mut self,
        doc_type: impl Into<Cow<'static, str>>,
        content: Box<RawValue>,
        options: SaveOptions,
    ) -> &Arc<Document> {
        let doc_type = doc_type.into();
        let SaveOptions { key, tags, metadata } = options;
        let existing = key
            .as_ref()
            .and_then(|k| self.docs.iter().position(|d| d.key.as_ref() == Some(k) && d.doc_type == doc_type));
        let (seq, version) = match existing {
            Some(i) => (self.docs[i].seq, self.docs[i].version + 1),
            None => (self.next_seq(), 1),
        };
        let doc = Arc::new(Document { seq, doc_type, key, version, tags, metadata, content, step: self.step + 1 });
        self.pending.push(doc.clone());
        match existing {
            Some(i) => {
                let old = std::mem::replace(&mut self.docs[i], doc);
                if i < self.committed_len {
                    self.undo.push((i, old));
                }
                &self.docs[i]
            }
            None => {
                self.docs.push(doc);
                self.docs.last().expect("just pushed")
            }
        }
    }

    fn next_seq(&self) -> u64 {
        self.docs.len() as u64
    }

    /// The run's documents (current versions, in the order first saved), including
    /// those this transition saved so far.
    pub fn documents(&self) -> &[Arc<Document>] {
        &self.docs
    }

    /// The run's documents of type `T`, read as `T`, in order.
    pub fn documents_of<T: DocumentType>(&self) -> Result<Vec<T>, serde_json::Error> {
        self.docs.iter().filter(|d| d.doc_type == T::TYPE).map(|d| d.read()).collect()
    }

    /// The most recent document of type `T`.
    pub fn latest<T: DocumentType>(&self) -> Option<Result<T, serde_json::Error>> {
        self.docs.iter().rev().find(|d| d.doc_type == T::TYPE).map(|d| d.read())
    }

    /// The current document of type `T` with this key.
    pub fn get<T: DocumentType>(&self, key: &str) -> Option<Result<T, serde_json::Error>> {
        self.docs.iter().find(|d| d.doc_type == T::TYPE && d.key.as_deref() == Some(key)).map(|d| d.read())
    }
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

impl From<StoreError> for TransitionError {
    fn from(e: StoreError) -> Self {
        Self::Failed(Box::new(e))
    }
}
