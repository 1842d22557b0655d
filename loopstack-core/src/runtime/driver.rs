//! The driver: turns a [`Drive`] into a claimed run, runs the loop, and records how
//! the drive ended.

use std::sync::Arc;

use serde_json::value::RawValue;
use tracing::Instrument as _;

use super::fork::fork_first_step;
use super::migrate::{Checked, check_run, migrate_if_needed};
use super::registry::Wake;
use super::run_loop::RunLoop;
use super::shared::LeaseCfg;
use super::state::{checkpoint_state, state_error};
use super::{Drive, Mode, RunOutcome, RunReport, Runtime};
use crate::children::{Parent, StartedChild, child_ended, parent_of};
use crate::context::RunContext;
use crate::document::{CheckedError, Document};
use crate::error::{RunError, StoreError};
use crate::events::EventKind;
use crate::store::{Claim, NewRun, RunId, RunRecord, RunStatus};
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
struct Ready<S> {
    /// All the loop needs of the claimed record.
    run: ClaimedRun,
    place: &'static str,
    state: S,
    documents: Vec<Arc<Document>>,
    own_signal: Option<u64>,
    /// The parent to tell when the run ends, and the signal to tell it with.
    parent: Option<Parent>,
    /// Children to drive at the run's next wait or end that this drive did not start.
    children: Vec<StartedChild>,
    /// Whether an earlier drive committed the checkpoint the loop starts from
    /// (every mode but `Start`).
    taken_over: bool,
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
    /// The trace context its drives continue (always `None` without `otel`).
    pub(super) trace_parent: Option<String>,
}

fn parts(record: &RunRecord) -> ClaimedRun {
    ClaimedRun {
        run_id: record.run_id,
        step: record.step,
        epoch: record.epoch,
        place_since: record.place_since,
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
enum Prepared<S> {
    Ready(Ready<S>),
    Done(RunReport<S>),
}

/// Sets a drive up: creates, claims or forks the run and loads what the loop needs.
/// A function of its own, so its locals and the loop's never share the drive's
/// future: each run in flight holds only the larger of the two.
async fn prepare<W: Workflow>(
    runtime: &Runtime,
    wf: &W,
    mode: Mode<W::Input>,
    run_id: Option<RunId>,
    lease: Option<&LeaseCfg>,
) -> Result<Prepared<W::State>, RunError> {
    let def = wf.definition();
    let name = def.name();
    let store = runtime.inner.store();
    let new_lease = || lease.map(|l| l.from(runtime.now()));
    let claim = |expect: &[RunStatus]| {
        let claim = Claim::new(expect.to_vec());
        match new_lease() {
            Some(l) => claim.lease(l),
            None => claim,
        }
    };
    let ready = match mode {
        Mode::Start(input) => {
            let run_id = run_id.unwrap_or_default();
            let state = wf.init(input);
            let value = runtime.redact(checkpoint_state(&state, name, run_id, None)?);
            let mut new = crate::trace::traced(NewRun::new(run_id, name, def.hash(), value).version(def.version()));
            if let Some(l) = new_lease() {
                new = new.lease(l);
            }
            let record = store.create_run(new).await?;
            Ready {
                run: parts(&record),
                place: crate::START,
                state,
                documents: Vec::new(),
                own_signal: None,
                parent: None,
                children: Vec::new(),
                taken_over: false,
            }
        }
        Mode::Resume(id) | Mode::Retry(id) | Mode::Wake(id) | Mode::Recover(id) => {
            let (expect, action): (&[RunStatus], _) = match mode {
                Mode::Retry(_) => (&[RunStatus::Failed, RunStatus::Cancelled], "be retried"),
                Mode::Wake(_) => (&[RunStatus::Queued, RunStatus::Waiting], "be woken"),
                _ => (&[RunStatus::Queued, RunStatus::Running, RunStatus::Waiting], "be resumed"),
            };
            // Check before claiming, so a run this build cannot drive is left as it was.
            check_run(wf, &store.load_run(id).await?)?;
            let retry = matches!(mode, Mode::Retry(_));
            let resume = matches!(mode, Mode::Resume(_) | Mode::Recover(_));
            let mut request = claim(expect);
            if matches!(mode, Mode::Recover(_)) {
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
            Ready {
                run,
                place,
                state,
                documents,
                own_signal: None,
                parent: parent_of(&record),
                children,
                taken_over: true,
            }
        }
        Mode::Claimed(record) => {
            let checked = check_run(wf, &record)?;
            let mut run = parts(&record);
            migrate_if_needed(runtime, wf, &mut run, &record, &checked, lease).await?;
            let Checked { place, state, .. } = checked;
            let documents = store.documents(record.run_id).await?;
            Ready {
                run,
                place,
                state,
                documents,
                own_signal: None,
                parent: parent_of(&record),
                children: Vec::new(),
                taken_over: true,
            }
        }
        Mode::Fork(source, step, edits) => {
            let stored = store.load_run(source).await?;
            check_run(wf, &stored)?;
            // Edits are checked before anything is stored.
            let step = match edits.as_ref().and_then(|e| e.keep_messages) {
                Some(keep) => crate::fork::step_keeping(&store.documents(source).await?, source, step, keep)?,
                None => step,
            };
            // A checkpoint from before a migration of the source holds the state of
            // the version it was taken under: the fork's first step migrates it.
            let version = if wf.definition().migrates_from().is_empty() {
                stored.version
            } else {
                crate::store::version_at_step(&store.history(source).await?, step, stored.version)
            };
            let edits = edits.filter(|e| !e.is_empty());
            let first = if edits.is_some() || version != wf.definition().version() {
                Some(Box::pin(fork_first_step(runtime, wf, &stored, step, version, edits.map(|e| *e))).await?)
            } else {
                None
            };
            // The copy and its first step in one write: never a fork without its
            // edits, nor one stored at a version its state is not of.
            let record = store.fork(source, step, run_id.unwrap_or_default(), first).await?;
            let Checked { place, state, .. } = check_run(wf, &record)?;
            let run = parts(&record);
            let documents = store.documents(record.run_id).await?;
            Ready {
                run,
                place,
                state,
                documents,
                own_signal: None,
                parent: parent_of(&record),
                children: Vec::new(),
                taken_over: true,
            }
        }
        Mode::Signal(id, signal) => {
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
            match store.claim(id, &claim(&[RunStatus::Waiting])).await {
                Ok(record) => {
                    let checked = check_run(wf, &record)?;
                    let mut run = parts(&record);
                    migrate_if_needed(runtime, wf, &mut run, &record, &checked, lease).await?;
                    let Checked { place, state, .. } = checked;
                    let documents = store.documents(id).await?;
                    let parent = parent_of(&record);
                    Ready {
                        run,
                        place,
                        state,
                        documents,
                        own_signal: Some(receipt.id),
                        parent,
                        children: Vec::new(),
                        taken_over: true,
                    }
                }
                // Another driver holds the run (or it has not parked yet): the signal
                // waits in its inbox for that driver.
                Err(StoreError::InvalidStatus { .. }) => {
                    return Ok(Prepared::Done(RunReport {
                        run_id: id,
                        outcome: RunOutcome::Queued { signal: receipt.id },
                        state,
                        steps: stored.step,
                    }));
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    Ok(Prepared::Ready(ready))
}

pub(super) async fn drive<W: Workflow>(d: Drive<'_, W>) -> Result<RunReport<W::State>, RunError> {
    let Drive { runtime, workflow: wf, mode, run_id, max_steps, cancellation, cascade } = d;
    runtime.inner.events().prepare_drive().await;
    let lease = runtime.inner.drive_lease();
    // Boxed: the preparation's locals (a claimed record, a state per arm) would
    // otherwise stay in the drive's future, in every run in flight, for its whole life.
    // The prepared run is moved into the loop's future within this block: a local
    // of the block ends with it, so the drive's future keeps no room for it beside
    // the loop's (a moved-from local of the whole body would keep its space).
    let run = {
        let ready = match Box::pin(prepare(runtime, wf, mode, run_id, lease.as_ref())).await? {
            Prepared::Ready(ready) => ready,
            Prepared::Done(report) => return Ok(report),
        };
        run_ready(runtime, wf, ready, lease, max_steps, cancellation, cascade)
    };
    run.await
}

/// The loop of a prepared drive and how it ended. A plain function that builds the
/// future: the run's state and context are locals of that future only, never of
/// `drive`'s, so no run in flight keeps room for them twice.
fn run_ready<'a, W: Workflow>(
    runtime: &'a Runtime,
    wf: &'a W,
    ready: Ready<W::State>,
    lease: Option<LeaseCfg>,
    max_steps: u64,
    cancellation: Option<tokio_util::sync::CancellationToken>,
    cascade: bool,
) -> impl std::future::Future<Output = Result<RunReport<W::State>, RunError>> + Send + 'a {
    let name = wf.definition().name();
    let Ready {
        run: ClaimedRun { run_id, step, epoch, place_since, trace_parent },
        place,
        mut state,
        documents,
        own_signal,
        parent,
        children,
        taken_over,
    } = ready;
    // Without `cancel_on` nothing outside the run can cancel it, so no transition needs
    // to race a cancellation future.
    let watch_cancellation = cancellation.is_some();
    let mut cx = RunContext::new(run_id, name, (place, step), documents, cancellation, runtime.clone());
    if taken_over {
        cx = cx.taken_over();
    }
    let span = tracing::info_span!(
        "loopstack.run",
        otel.name = tracing::field::display(format_args!("run {name}")),
        workflow = name,
        run_id = %run_id
    );
    crate::trace::join(&span, run_id, trace_parent.as_deref());
    async move {
        let run_loop = RunLoop {
            wf,
            epoch,
            max_steps,
            watch_cancellation,
            lease: lease.as_ref(),
            own_signal,
            place_since,
            clock: runtime.inner.clock(),
            parent: parent.as_ref(),
            children,
        };
        let mut outcome = run_loop.run(&mut state, &mut cx).await;
        // Whether this drive's write of the run's failure was refused: then the run
        // did not end, and nothing else of its end may happen (its children, and
        // the events, may be another driver's by now).
        let mut end_refused = false;
        let mut lost = None;
        match &outcome {
            Ok(RunOutcome::Completed) => {
                tracing::info!(steps = cx.step, "run completed");
                cx.emit(|| EventKind::Finished { status: RunStatus::Completed, error: None });
            }
            Ok(RunOutcome::Waiting { place, .. }) => tracing::info!(place, "run waiting"),
            Ok(_) => {}
            // A refused signal leaves the run waiting; the loop parked it again.
            Err(RunError::InvalidSignalPayload { .. } | RunError::UnknownSignal { .. } | RunError::SignalRefused { .. }) => {
                let error = outcome.as_ref().err().map(ToString::to_string).unwrap_or_default();
                tracing::info!(error = %runtime.inner.redact_text(&error), "signal refused");
            }
            // Another driver owns this run now: the run is theirs, not failed.
            Err(RunError::Store(e)) if e.is_lost_run() => {
                tracing::warn!(error = %e, "another driver owns this run; this drive stops");
            }
            Err(e) => {
                let error = runtime.inner.redact_text(&e.to_string()).into_owned();
                tracing::warn!(%error, "run failed");
                let status =
                    if matches!(e, RunError::Cancelled { .. }) { RunStatus::Cancelled } else { RunStatus::Failed };
                let fence = crate::store::Fence { epoch, step: cx.step };
                let notify = parent.as_ref().and_then(|p| child_ended(p, run_id, name, status, None, Some(error.clone())));
                match runtime.inner.store().set_status(run_id, fence, status, Some(error), notify).await {
                    Ok(()) => {
                        cx.emit(|| EventKind::Finished { status, error: Some(runtime.inner.redact_text(&e.to_string()).into_owned()) });
                        // Its children go with it.
                        // Boxed: only a failed run has it, and its future would sit in every run's.
                        Box::pin(super::cancel_children(runtime, run_id, "the parent run ended")).await;
                    }
                    // Another driver owns the run now: that is this drive's outcome.
                    Err(store_err) if store_err.is_lost_run() => {
                        tracing::warn!(error = %store_err, "another driver owns this run; this drive stops");
                        (end_refused, lost) = (true, Some(store_err));
                    }
                    Err(store_err) => {
                        tracing::error!(error = %store_err, "could not record the run's failure");
                        end_refused = true;
                    }
                }
            }
        }
        if let Some(lost) = lost {
            outcome = Err(RunError::Store(lost));
        }
        // A child that ended in a drive of its own wakes its parent, if this runtime
        // has the parent's workflow; a parent that drives its children itself reads
        // their ends from its inbox.
        let ended = !end_refused
            && (matches!(&outcome, Ok(RunOutcome::Completed))
                || matches!(&outcome, Err(e) if !e.leaves_run_waiting() && !matches!(e, RunError::Store(s) if s.is_lost_run())));
        if cascade && ended && let Some(parent) = &parent {
            Box::pin(super::wake_parent(runtime, parent.run_id)).await;
        }
        let outcome = outcome?;
        Ok(RunReport { run_id, outcome, state, steps: cx.step })
    }
    .instrument(span)
}
