//! Setting a drive up: creating, claiming or forking its run and loading what the
//! loop needs. Each way of driving a run is a function of its own, and all but a
//! start are boxed: a run in flight keeps room only for what its own mode holds
//! across an await (one future of every mode's locals was 7 KB, allocated for every
//! run started).

use std::sync::Arc;

use serde_json::value::RawValue;

use super::fork::fork_first_step;
use super::migrate::{Checked, check_run, migrate_if_needed};
use super::registry::Wake;
use super::shared::LeaseCfg;
use super::state::state_error;
use super::{Mode, RunOutcome, RunReport, Runtime};
use crate::children::{Parent, StartedChild, child_ended, parent_of};
use crate::document::{CheckedError, Document};
use crate::error::{RunError, StoreError};
use crate::store::{Claim, RunId, RunRecord, RunStatus};
use crate::workflow::{Route, Workflow};

fn invalid_status(workflow: &'static str, action: &'static str) -> impl FnOnce(StoreError) -> RunError {
    move |e| match e {
        StoreError::InvalidStatus { run_id, status } | StoreError::Finished { run_id, status } => {
            RunError::InvalidStatus { workflow, run_id, status, action }
        }
        other => RunError::Store(other),
    }
}

/// A drive ready to loop: the claimed run and where it starts.
pub(super) struct Ready<S> {
    /// All the loop needs of the claimed record.
    pub(super) run: ClaimedRun,
    pub(super) place: &'static str,
    /// Boxed: the state of an agent is some 600 bytes, and a drive's future kept it
    /// beside the loop's, which made the future too big for the allocator's
    /// per-thread cache (every run started took its slow path).
    pub(super) state: Box<S>,
    pub(super) documents: Vec<Arc<Document>>,
    /// The typed values of the documents a run just created saved (none when an
    /// earlier drive committed the checkpoint).
    pub(super) shared: crate::context::SharedValues,
    pub(super) own_signal: Option<u64>,
    /// The parent to tell when the run ends, and the signal to tell it with.
    pub(super) parent: Option<Parent>,
    /// Children to drive at the run's next wait or end that this drive did not start.
    pub(super) children: Vec<StartedChild>,
    /// Whether an earlier drive committed the checkpoint the loop starts from
    /// (every mode but `Start`).
    pub(super) taken_over: bool,
}

/// What the loop needs of a claimed run's record.
#[derive(Clone)]
pub(super) struct ClaimedRun {
    pub(super) run_id: RunId,
    /// The steps it has taken.
    pub(super) step: u64,
    /// The fencing epoch of this drive's claim.
    pub(super) epoch: u64,
    /// When it reached its place: what its timers count from.
    pub(super) place_since: crate::Timestamp,
    /// Until when the claim's lease holds, as the store has it.
    pub(super) lease_until: Option<crate::Timestamp>,
    /// The trace context its drives continue (always `None` without `otel`).
    pub(super) trace_parent: Option<String>,
}

impl<S> Ready<S> {
    /// Stored run `record`, claimed by this drive at `place` in `state`: a run an
    /// earlier drive committed, with no signal or children of this drive's yet.
    fn taken_over(
        run: ClaimedRun,
        place: &'static str,
        state: S,
        documents: Vec<Arc<Document>>,
        record: &RunRecord,
    ) -> Self {
        Self {
            run,
            place,
            state: Box::new(state),
            documents,
            shared: Vec::new(),
            own_signal: None,
            parent: parent_of(record),
            children: Vec::new(),
            taken_over: true,
        }
    }
}

fn parts(record: &RunRecord) -> ClaimedRun {
    ClaimedRun {
        run_id: record.run_id,
        step: record.step,
        epoch: record.epoch,
        place_since: record.place_since,
        lease_until: record.lease_until,
        trace_parent: record.trace_parent.clone(),
    }
}

/// The children of `parent` that are queued or running: those a dead drive of it
/// started and did not see end, for a resumed drive to drive. A running one is
/// claimed only once its lease ran out (a live driver keeps it), oldest first.
async fn left_children(store: &dyn crate::store::Store, parent: RunId) -> Result<Vec<StartedChild>, StoreError> {
    let mut query =
        crate::store::RunQuery::new().parent(parent).status(RunStatus::Queued).status(RunStatus::Running).limit(500);
    let mut children = Vec::new();
    loop {
        let page = store.list_runs(&query).await?;
        let timeout = crate::children::DEFAULT_CHILD_TIMEOUT;
        children.extend(page.runs.iter().map(|c| StartedChild { run_id: c.run_id, wake: Wake::Recover, timeout }));
        match page.next {
            Some(cursor) => query = query.before(cursor),
            None => break,
        }
    }
    // Pages list the newest first.
    children.reverse();
    Ok(children)
}

/// Sends `parent` the end of each of its children that ended without the parent
/// receiving it (the parent was failed or cancelled then): a retried parent then
/// sees every child's end, and none twice.
async fn redeliver_child_ends(store: &dyn crate::store::Store, parent: RunId) -> Result<(), StoreError> {
    let received: std::collections::HashSet<RunId> = store
        .signals(parent)
        .await?
        .into_iter()
        .filter(|s| !matches!(s.status, crate::store::SignalStatus::Rejected { .. }))
        .filter_map(|s| serde_json::from_str::<crate::ChildEnded>(s.payload.get()).ok())
        .map(|ended| ended.child)
        .collect();
    let mut query = crate::store::RunQuery::new().parent(parent).limit(500);
    loop {
        let page = store.list_runs(&query).await?;
        for child in &page.runs {
            let Some(signal) = child.parent_signal.as_deref() else { continue };
            if !child.status.is_finished() || received.contains(&child.run_id) {
                continue;
            }
            // A listing holds no states: a completed child's output is read here.
            let output = match child.status {
                RunStatus::Completed => Some(store.checkpoint(child.run_id, child.step).await?.state),
                _ => None,
            };
            let parent_of = Parent { run_id: parent, signal: signal.to_owned() };
            if let Some(out) = child_ended(
                &parent_of,
                child.run_id,
                &child.workflow,
                child.status,
                output.as_deref(),
                child.error.clone(),
            ) {
                store.send_signal(parent, &out.name, out.payload).await?;
            }
        }
        match page.next {
            Some(cursor) => query = query.before(cursor),
            None => return Ok(()),
        }
    }
}

/// What setting a drive up gives: a claimed run to loop, or (for a queued signal) the
/// report at once.
#[expect(
    clippy::large_enum_variant,
    reason = "`Ready` is what nearly every drive gets: boxed, it would cost each an allocation"
)]
pub(super) enum Prepared<S> {
    Ready(Ready<S>),
    /// Boxed: the report holds the state (some 600 bytes for an agent), and every
    /// start's result would be moved at that size.
    Done(Box<RunReport<S>>),
}

/// Sets a drive up: creates, claims or forks the run and loads what the loop needs.
pub(super) async fn prepare<W: Workflow>(
    runtime: &Runtime,
    wf: &W,
    mode: Mode<W::Input>,
    run_id: Option<RunId>,
    lease: Option<&LeaseCfg>,
) -> Result<Prepared<W::State>, RunError> {
    let ready = match mode {
        Mode::Start(input, labels) => start(runtime, wf, input, labels, run_id, lease).await?,
        Mode::Resume(id) => Box::pin(take_over(runtime, wf, id, Takeover::Resume, lease)).await?,
        Mode::Retry(id) => Box::pin(take_over(runtime, wf, id, Takeover::Retry, lease)).await?,
        Mode::Wake(id) => Box::pin(take_over(runtime, wf, id, Takeover::Wake, lease)).await?,
        Mode::Recover(id) => Box::pin(take_over(runtime, wf, id, Takeover::Recover, lease)).await?,
        Mode::Claimed(record) => Box::pin(claimed(runtime, wf, *record, lease)).await?,
        Mode::Fork(source, step, edits) => Box::pin(fork(runtime, wf, source, step, edits, run_id)).await?,
        Mode::Signal(id, signal) => return Box::pin(signal_run(runtime, wf, id, signal, lease)).await,
    };
    Ok(Prepared::Ready(ready))
}

/// The lease a claim by this runtime takes now, if its drives hold leases.
fn new_lease(runtime: &Runtime, lease: Option<&LeaseCfg>) -> Option<crate::store::Lease> {
    lease.map(|l| l.from(runtime.now()))
}

/// A claim of a run in one of the statuses `expect`, with this runtime's lease.
fn claim(runtime: &Runtime, lease: Option<&LeaseCfg>, expect: &[RunStatus]) -> Claim {
    let claim = Claim::new(expect.to_vec());
    match new_lease(runtime, lease) {
        Some(l) => claim.lease(l),
        None => claim,
    }
}

/// A new run of `wf` on `input`.
async fn start<W: Workflow>(
    runtime: &Runtime,
    wf: &W,
    input: W::Input,
    labels: crate::Labels,
    run_id: Option<RunId>,
    lease: Option<&LeaseCfg>,
) -> Result<Ready<W::State>, RunError> {
    let store = runtime.inner.store();
    let run_id = run_id.unwrap_or_default();
    let super::state::Created { state, new, shared } = super::state::create(runtime, wf, input, run_id)?;
    let documents = new.documents.clone();
    let mut new = crate::trace::traced(new.labels(labels));
    if let Some(l) = new_lease(runtime, lease) {
        new = new.lease(l);
    }
    let record = store.create_run(new).await?;
    Ok(Ready {
        run: parts(&record),
        place: crate::START,
        state,
        documents,
        shared,
        own_signal: None,
        parent: None,
        children: Vec::new(),
        taken_over: false,
    })
}

/// How a stored run is taken over: the modes of [`take_over`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Takeover {
    Resume,
    Retry,
    Wake,
    Recover,
}

/// Stored run `id` resumed, retried, woken or recovered (`how` says which).
async fn take_over<W: Workflow>(
    runtime: &Runtime,
    wf: &W,
    id: RunId,
    how: Takeover,
    lease: Option<&LeaseCfg>,
) -> Result<Ready<W::State>, RunError> {
    let def = wf.definition();
    let name = def.name();
    let store = runtime.inner.store();
    let (expect, action): (&[RunStatus], _) = match how {
        Takeover::Retry => (&[RunStatus::Failed, RunStatus::Cancelled, RunStatus::Stopped], "be retried"),
        Takeover::Wake => (&[RunStatus::Queued, RunStatus::Waiting], "be woken"),
        _ => (&[RunStatus::Queued, RunStatus::Running, RunStatus::Waiting], "be resumed"),
    };
    // Check before claiming, so a run this build cannot drive is left as it was.
    check_run(wf, &store.load_run(id).await?)?;
    let retry = how == Takeover::Retry;
    let resume = matches!(how, Takeover::Resume | Takeover::Recover);
    let mut request = claim(runtime, lease, expect);
    if how == Takeover::Recover {
        request = request.only_expired(runtime.now());
    }
    let record = store.claim(id, &request).await.map_err(invalid_status(name, action))?;
    if retry {
        // Children that ended while the run was failed or cancelled told a
        // finished run; their ends are sent again, once.
        redeliver_child_ends(store.as_ref(), id).await?;
    }
    let checked = check_run(wf, &record)?;
    let mut run = parts(&record);
    migrate_if_needed(runtime, wf, &mut run, &record, &checked, lease).await?;
    let Checked { place, state, .. } = checked;
    let documents = store.documents(id).await?;
    // A drive that died left the children it started queued, or running
    // without a driver: this one drives them, as the dead one would have.
    let children = if resume { left_children(store.as_ref(), id).await? } else { Vec::new() };
    Ok(Ready { children, ..Ready::taken_over(run, place, state, documents, &record) })
}

/// A run a worker claimed already.
async fn claimed<W: Workflow>(
    runtime: &Runtime,
    wf: &W,
    record: RunRecord,
    lease: Option<&LeaseCfg>,
) -> Result<Ready<W::State>, RunError> {
    let store = runtime.inner.store();
    let checked = check_run(wf, &record)?;
    let mut run = parts(&record);
    migrate_if_needed(runtime, wf, &mut run, &record, &checked, lease).await?;
    let Checked { place, state, .. } = checked;
    let documents = store.documents(record.run_id).await?;
    Ok(Ready::taken_over(run, place, state, documents, &record))
}

/// A fork of run `source` at `step`, with its edits.
async fn fork<W: Workflow>(
    runtime: &Runtime,
    wf: &W,
    source: RunId,
    step: u64,
    edits: Option<Box<crate::ForkEdits>>,
    run_id: Option<RunId>,
) -> Result<Ready<W::State>, RunError> {
    let def = wf.definition();
    let store = runtime.inner.store();
    let stored = store.load_run(source).await?;
    check_run(wf, &stored)?;
    // Edits are checked before anything is stored.
    let step = match edits.as_ref().and_then(|e| e.keep_messages) {
        Some(keep) => crate::fork::step_keeping(&store.documents(source).await?, source, step, keep)?,
        None => step,
    };
    // A checkpoint from before a migration of the source holds the state of
    // the version it was taken under: the fork's first step migrates it.
    let version = if def.migrates_from().is_empty() {
        stored.version
    } else {
        crate::store::version_at_step(&store.history(source).await?, step, stored.version)
    };
    let edits = edits.filter(|e| !e.is_empty());
    let first = if edits.is_some() || version != def.version() {
        Some(Box::pin(fork_first_step(runtime, wf, &stored, step, version, edits.map(|e| *e))).await?)
    } else {
        None
    };
    // The copy and its first step in one write: never a fork without its
    // edits, nor one stored at a version its state is not of.
    let record = store.fork(source, step, run_id.unwrap_or_default(), first).await.map_err(|e| match e {
        StoreError::CheckpointNotFound { run_id, step } if run_id == source => {
            RunError::from(crate::fork::ForkError::UnknownStep { run_id, step, last: stored.step })
        }
        other => other.into(),
    })?;
    let Checked { place, state, .. } = check_run(wf, &record)?;
    let run = parts(&record);
    let documents = store.documents(record.run_id).await?;
    Ok(Ready::taken_over(run, place, state, documents, &record))
}

/// A signal for run `id`: delivered by this drive when it claims the waiting run,
/// else left in the run's inbox for the driver that holds it.
async fn signal_run<W: Workflow>(
    runtime: &Runtime,
    wf: &W,
    id: RunId,
    signal: Result<(std::borrow::Cow<'static, str>, serde_json::Value), serde_json::Error>,
    lease: Option<&LeaseCfg>,
) -> Result<Prepared<W::State>, RunError> {
    let def = wf.definition();
    let name = def.name();
    let store = runtime.inner.store();
    let (signal, payload) = signal.map_err(state_error(name, id))?;
    let signal = signal.into_owned();
    let stored = store.load_run(id).await?;
    let Checked { place, state, .. } = check_run(wf, &stored)?;
    if stored.status.is_finished() {
        return Err(RunError::InvalidStatus {
            workflow: name,
            run_id: id,
            status: stored.status,
            action: "take a signal",
        });
    }
    // Refuse what can never be delivered before storing anything.
    let enabled: Vec<&'static str> = if stored.status == RunStatus::Waiting {
        match super::run_loop::route(wf, place, &state, id)? {
            Route::Wait { signals } => signals,
            _ => Vec::new(),
        }
    } else {
        def.transitions().iter().filter(|t| t.wait).map(|t| t.name).collect()
    };
    if !enabled.contains(&signal.as_str()) {
        return Err(RunError::UnknownSignal { workflow: name, run_id: id, place, signal, expected: enabled });
    }
    // A payload that does not fit the transition is refused before it is stored.
    if let Some((_, t)) = def.transition(&signal)
        && let Some(check) = t.payload_check
        && let Err(reason) = check(&payload)
    {
        return Err(RunError::InvalidSignalPayload { workflow: name, run_id: id, signal: t.name, reason });
    }
    // A payload that would not read back is refused before it is stored.
    let raw: Box<RawValue> = crate::document::to_checked_raw_value(&payload).map_err(|e| match e {
        CheckedError::Unreadable(why, _) => RunError::InvalidSignalPayload {
            workflow: name,
            run_id: id,
            signal: enabled.iter().copied().find(|s| *s == signal).unwrap_or("?"),
            reason: why.to_string(),
        },
        CheckedError::Serialize(source) => RunError::State { workflow: name, run_id: id, source },
    })?;
    let receipt = store.send_signal(id, &signal, raw).await.map_err(invalid_status(name, "take a signal"))?;
    let ready = match store.claim(id, &claim(runtime, lease, &[RunStatus::Waiting])).await {
        Ok(record) => {
            let checked = check_run(wf, &record)?;
            let mut run = parts(&record);
            migrate_if_needed(runtime, wf, &mut run, &record, &checked, lease).await?;
            let Checked { place, state, .. } = checked;
            let documents = store.documents(id).await?;
            Ready { own_signal: Some(receipt.id), ..Ready::taken_over(run, place, state, documents, &record) }
        }
        // Another driver holds the run (or it has not parked yet): the signal
        // waits in its inbox for that driver.
        Err(StoreError::InvalidStatus { .. }) => {
            return Ok(Prepared::Done(Box::new(RunReport {
                run_id: id,
                outcome: RunOutcome::Queued { signal: receipt.id },
                state,
                steps: stored.step,
            })));
        }
        Err(e) => return Err(e.into()),
    };
    Ok(Prepared::Ready(ready))
}
