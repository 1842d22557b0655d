//! The driver: turns a [`Drive`] into a claimed run, runs the loop, and records how
//! the drive ended.

use std::sync::Arc;

use serde_json::value::RawValue;
use tracing::Instrument as _;

use super::run_loop::{LeaseCfg, RunLoop};
use super::{Drive, Mode, RunOutcome, RunReport, Runtime};
use crate::context::RunContext;
use crate::document::{CheckedError, Document};
use crate::error::{RunError, StoreError};
use crate::events::EventKind;
use crate::store::{Claim, Lease, NewRun, RunId, RunRecord, RunStatus};
use crate::workflow::{Route, Workflow};

pub(super) fn state_error(workflow: &'static str, run_id: RunId) -> impl FnOnce(serde_json::Error) -> RunError {
    move |source| RunError::State { workflow, run_id, source }
}

/// Serializes a state to checkpoint, refusing one that would not read back
/// ([`RunError::UnstorableState`]); `after` is the transition that left it.
pub(super) fn checkpoint_state<S: serde::Serialize>(
    state: &S,
    workflow: &'static str,
    run_id: RunId,
    after: Option<&'static str>,
) -> Result<Box<RawValue>, RunError> {
    crate::document::to_checked_raw_value(state).map_err(|e| match e {
        CheckedError::Unreadable(why, _) => {
            RunError::UnstorableState { workflow, run_id, after, reason: why.to_string() }
        }
        CheckedError::Serialize(source) => RunError::State { workflow, run_id, source },
    })
}

/// Checks that a stored run can be driven by `wf`: its workflow, its place (naming
/// both table hashes when the place is gone) and its state.
fn check_run<W: Workflow>(wf: &W, record: &RunRecord) -> Result<(&'static str, W::State), RunError> {
    let def = wf.definition();
    let (name, run_id) = (def.name(), record.run_id);
    if record.workflow != name {
        return Err(RunError::Mismatch {
            workflow: name,
            run_id,
            reason: format!("the run belongs to workflow `{}`", record.workflow),
        });
    }
    let place = def.place(&record.place).map_err(|e| {
        if record.definition_hash == def.hash() {
            RunError::Mismatch { workflow: name, run_id, reason: e.to_string() }
        } else {
            RunError::DefinitionChanged {
                workflow: name,
                run_id,
                place: record.place.to_string(),
                stored_hash: record.definition_hash.to_string(),
                current_hash: def.hash().to_owned(),
            }
        }
    })?;
    let state = serde_json::from_str(record.state.get()).map_err(state_error(name, run_id))?;
    Ok((place, state))
}

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
    /// The run's id, step, epoch and when it reached its place: all the loop needs of
    /// the claimed record.
    run: (RunId, u64, u64, crate::Timestamp),
    place: &'static str,
    state: S,
    documents: Vec<Arc<Document>>,
    own_signal: Option<u64>,
    /// The parent to tell when the run ends, and the signal to tell it with.
    parent: Option<Parent>,
}

/// A child run's parent and the name of the signal its end is sent as.
pub(super) type Parent = (RunId, String);

fn parts(record: &RunRecord) -> (RunId, u64, u64, crate::Timestamp) {
    (record.run_id, record.step, record.epoch, record.place_since)
}

pub(super) fn parent_of(record: &RunRecord) -> Option<Parent> {
    let signal: &str = record.parent_signal.as_deref()?;
    Some((record.parent?, signal.to_owned()))
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
            let parent_of = (parent, signal.to_owned());
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

/// The signal that tells a child's parent how it ended.
pub(super) fn child_ended(
    parent: &Parent,
    child: RunId,
    workflow: &str,
    status: RunStatus,
    output: Option<&RawValue>,
    error: Option<String>,
) -> Option<crate::store::OutSignal> {
    let output = output.and_then(|raw| serde_json::from_str(raw.get()).ok());
    let ended = crate::ChildEnded { child, workflow: workflow.to_owned(), status, output, error };
    let payload = serde_json::value::to_raw_value(&ended).ok()?;
    Some(crate::store::OutSignal::new(parent.0, parent.1.clone(), payload))
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
    let store = &runtime.inner.store;
    let new_lease = || lease.map(|l| Lease { owner: l.owner.to_string(), until: runtime.now() + l.duration });
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
            let mut new = NewRun::new(run_id, name, def.hash(), value);
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
            let (place, state) = check_run(wf, &record)?;
            let documents = store.documents(id).await?;
            Ready { run: parts(&record), place, state, documents, own_signal: None, parent: parent_of(&record) }
        }
        Mode::Claimed(record) => {
            let (place, state) = check_run(wf, &record)?;
            let documents = store.documents(record.run_id).await?;
            Ready { run: parts(&record), place, state, documents, own_signal: None, parent: parent_of(&record) }
        }
        Mode::Fork(source, step) => {
            check_run(wf, &store.load_run(source).await?)?;
            let record = store.fork(source, step, run_id.unwrap_or_default()).await?;
            let (place, state) = check_run(wf, &record)?;
            let documents = store.documents(record.run_id).await?;
            Ready { run: parts(&record), place, state, documents, own_signal: None, parent: parent_of(&record) }
        }
        Mode::Signal(id, signal) => {
            let (signal, payload) = signal.map_err(state_error(name, id))?;
            let signal = signal.into_owned();
            let stored = store.load_run(id).await?;
            let (place, state) = check_run(wf, &stored)?;
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
                    let (place, state) = check_run(wf, &record)?;
                    let documents = store.documents(id).await?;
                    let parent = parent_of(&record);
                    Ready { run: parts(&record), place, state, documents, own_signal: Some(receipt.id), parent }
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
    let name = wf.definition().name();
    let lease = runtime.inner.lease.map(|duration| LeaseCfg { owner: runtime.inner.owner.clone(), duration });
    let ready = match prepare(runtime, wf, mode, run_id, lease.as_ref()).await? {
        Prepared::Ready(ready) => ready,
        Prepared::Done(report) => return Ok(report),
    };
    let Ready { run: (run_id, step, epoch, place_since), place, mut state, documents, own_signal, parent } = ready;
    // Without `cancel_on` nothing outside the run can cancel it, so no transition needs
    // to race a cancellation future.
    let watch_cancellation = cancellation.is_some();
    let cancellation = cancellation.unwrap_or_default();
    let mut cx = RunContext::new(run_id, name, (place, step), documents, cancellation, runtime.clone());
    let span = tracing::info_span!("loopstack.run", workflow = name, run_id = %run_id);
    async move {
        let run_loop = RunLoop {
            wf,
            epoch,
            max_steps,
            watch_cancellation,
            lease: lease.as_ref(),
            own_signal,
            place_since,
            clock: &runtime.inner.clock,
            parent: parent.as_ref(),
            children: Vec::new(),
        };
        let outcome = run_loop.run(&mut state, &mut cx).await;
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
                tracing::info!(error = %runtime.inner.secrets.redact(&error), "signal refused");
            }
            // Another driver owns this run now: the run is theirs, not failed.
            Err(RunError::Store(e)) if e.is_lost_run() => {
                tracing::warn!(error = %e, "another driver owns this run; this drive stops");
            }
            Err(e) => {
                let error = runtime.inner.secrets.redact(&e.to_string()).into_owned();
                tracing::warn!(%error, "run failed");
                let status =
                    if matches!(e, RunError::Cancelled { .. }) { RunStatus::Cancelled } else { RunStatus::Failed };
                let fence = crate::store::Fence { epoch, step: cx.step };
                let notify = parent.as_ref().and_then(|p| child_ended(p, run_id, name, status, None, Some(error.clone())));
                if let Err(store_err) = cx.runtime.inner.store.set_status(run_id, fence, status, Some(error), notify).await {
                    tracing::error!(error = %store_err, "could not record the run's failure");
                }
                cx.emit(|| EventKind::Finished { status, error: Some(runtime.inner.secrets.redact(&e.to_string()).into_owned()) });
                // Its children go with it.
                super::cancel_children(runtime, run_id, "the parent run ended").await;
            }
        }
        // A child that ended in a drive of its own wakes its parent, if this runtime
        // has the parent's workflow; a parent that drives its children itself reads
        // their ends from its inbox.
        let ended = matches!(&outcome, Ok(RunOutcome::Completed))
            || matches!(&outcome, Err(e) if !e.leaves_run_waiting() && !matches!(e, RunError::Store(s) if s.is_lost_run()));
        if cascade && ended && let Some((parent_id, _)) = &parent {
            Box::pin(super::wake_parent(runtime, *parent_id)).await;
        }
        let outcome = outcome?;
        Ok(RunReport { run_id, outcome, state, steps: cx.step })
    }
    .instrument(span)
    .await
}
