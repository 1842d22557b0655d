//! The driver: turns a [`Drive`] into a claimed run, runs the loop, and records how
//! the drive ended.

use tracing::Instrument as _;

use super::prepare::{ClaimedRun, Prepared, Ready, prepare};
use super::run_loop::RunLoop;
use super::shared::LeaseCfg;
use super::{Drive, RunOutcome, RunReport, Runtime};
use crate::children::child_ended;
use crate::context::RunContext;
use crate::error::RunError;
use crate::events::EventKind;
use crate::store::RunStatus;
use crate::workflow::Workflow;

/// A drive's future. The drive is taken apart before the future is built, so the
/// future keeps only the parts it uses (an `async fn` would keep the whole `Drive`
/// beside them): this future is allocated for every run driven, and kept small
/// enough for the allocator's per-thread cache.
pub(super) fn drive<W: Workflow>(
    d: Drive<'_, W>,
) -> impl std::future::Future<Output = Result<RunReport<W::State>, RunError>> + Send + '_ {
    let Drive { runtime, workflow: wf, mode, run_id, max_steps, cancellation, stop, cascade } = d;
    async move {
        runtime.inner.events().prepare_drive().await;
        // Only a start's preparation is a part of the drive's future (the other modes
        // are boxed): it ends before the loop starts, so the two share their room.
        // The prepared run (and the lease) is moved into the loop's future within this
        // block: a local of the block ends with it, so the drive's future keeps no
        // room for it beside the loop's (a moved-from local of the whole body would
        // keep its space).
        let run = {
            let lease = runtime.inner.drive_lease();
            let ready = match prepare(runtime, wf, mode, run_id, lease.as_ref()).await? {
                Prepared::Ready(ready) => ready,
                Prepared::Done(report) => return Ok(*report),
            };
            run_ready(runtime, wf, ready, lease, max_steps, (cancellation, stop), cascade)
        };
        run.await
    }
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
    (cancellation, stop): (Option<tokio_util::sync::CancellationToken>, Option<tokio_util::sync::CancellationToken>),
    cascade: bool,
) -> impl std::future::Future<Output = Result<RunReport<W::State>, RunError>> + Send + 'a {
    let name = wf.definition().name();
    let Ready {
        run: ClaimedRun { run_id, step, epoch, place_since, lease_until, trace_parent },
        place,
        mut state,
        documents,
        shared,
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
    cx.keep_shared(shared);
    // No span at all when nothing records INFO spans: a disabled span still costs a
    // call into the logger at every enter, exit and drop (tracing's `log` feature,
    // which the build's axum turns on) while no subscriber is installed.
    let span = if tracing::level_enabled!(tracing::Level::INFO) {
        run_span(wf.definition(), run_id)
    } else {
        tracing::Span::none()
    };
    crate::trace::join(&span, run_id, trace_parent.as_deref());
    // Built here and moved in whole: the future keeps its fields once, not also as
    // the locals they were built from.
    let mut run_loop = RunLoop {
        wf,
        epoch,
        max_steps,
        watch_cancellation,
        stop,
        lease,
        lease_until,
        own_signal,
        place_since,
        clock: runtime.inner.clock(),
        parent,
        children,
    };
    async move {
        // Boxed: held inline, the loop's future would make this one too big for the
        // allocator's per-thread cache, and every drive's allocation would take its
        // slow path.
        let outcome = Box::pin(run_loop.run(&mut state, &mut cx)).await;
        // A function of its own: its locals share the loop's room in this future.
        let parent = run_loop.parent.as_ref();
        let outcome = end_drive(runtime, &cx, run_loop.epoch, parent, cascade, outcome).await?;
        Ok(RunReport { run_id, outcome, state: *state, steps: cx.step() })
    }
    .instrument(span)
}

/// A drive's span, named after OpenTelemetry's GenAI conventions: an agent's run is
/// an `invoke_agent {name}` operation, any other workflow's an `invoke_workflow
/// {name}` one, and the run is the conversation (`gen_ai.conversation.id`): a child
/// run has one of its own, a handoff keeps its run's.
fn run_span(table: &crate::Definition, run_id: crate::RunId) -> tracing::Span {
    let name = table.name();
    if table.is_agent() {
        tracing::info_span!(
            "loopstack.run",
            otel.name = tracing::field::display(format_args!("invoke_agent {name}")),
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = name,
            gen_ai.conversation.id = %run_id,
            workflow = name,
            run_id = %run_id
        )
    } else {
        tracing::info_span!(
            "loopstack.run",
            otel.name = tracing::field::display(format_args!("invoke_workflow {name}")),
            gen_ai.operation.name = "invoke_workflow",
            gen_ai.workflow.name = name,
            gen_ai.conversation.id = %run_id,
            workflow = name,
            run_id = %run_id
        )
    }
}

/// Records how the loop of run `cx` ended: the run's failure or stop (and its
/// children's cancellation), the events, and the wake of a parent that waits for it. The loop's
/// outcome, or the error of a drive that lost the run meanwhile.
async fn end_drive(
    runtime: &Runtime,
    cx: &RunContext,
    epoch: u64,
    parent: Option<&crate::children::Parent>,
    cascade: bool,
    mut outcome: Result<RunOutcome, RunError>,
) -> Result<RunOutcome, RunError> {
    // Whether this drive's write of the run's failure was refused: then the run
    // did not end, and nothing else of its end may happen (its children, and
    // the events, may be another driver's by now).
    let mut end_refused = false;
    let mut lost = None;
    match &outcome {
        Ok(RunOutcome::Completed) => {
            tracing::info!(steps = cx.step(), "run completed");
            cx.emit(|| EventKind::Finished { status: RunStatus::Completed, error: None });
        }
        Ok(RunOutcome::Waiting { place, .. }) => tracing::info!(place, "run waiting"),
        // Boxed: only a drive that stops for a shutdown takes this path.
        Ok(RunOutcome::Released) => Box::pin(release(runtime, cx, epoch)).await,
        Ok(RunOutcome::Stopped { reason }) => {
            tracing::info!(%reason, "run stopped");
            // Boxed: as a failure's.
            let end = record_end(runtime, cx, epoch, parent, RunStatus::Stopped, reason.clone());
            (end_refused, lost) = Box::pin(end).await;
        }
        Ok(_) => {}
        // A refused signal leaves the run waiting; the loop parked it again.
        Err(
            RunError::InvalidSignalPayload { .. } | RunError::UnknownSignal { .. } | RunError::SignalRefused { .. },
        ) => {
            let error = outcome.as_ref().err().map(ToString::to_string).unwrap_or_default();
            tracing::info!(error = %runtime.inner.redact_text(&error), "signal refused");
        }
        // Another driver owns this run now: the run is theirs, not failed.
        Err(RunError::Store(e)) if e.is_lost_run() => {
            tracing::warn!(error = %e, "another driver owns this run; this drive stops");
        }
        Err(e) => {
            // Boxed: only a failed run takes this path, and its locals (the error's
            // text, the store's write, the parent's signal) would sit in every drive's
            // future.
            (end_refused, lost) = Box::pin(record_failure(runtime, cx, epoch, parent, e)).await;
        }
    }
    if let Some(lost) = lost {
        outcome = Err(RunError::Store(lost));
    }
    // A child that ended in a drive of its own wakes its parent, if this runtime
    // has the parent's workflow; a parent that drives its children itself reads
    // their ends from its inbox.
    let ended = !end_refused
        && (matches!(&outcome, Ok(RunOutcome::Completed | RunOutcome::Stopped { .. }))
            || matches!(&outcome, Err(e) if !e.leaves_run_waiting() && !matches!(e, RunError::Store(s) if s.is_lost_run())));
    if cascade
        && ended
        && let Some(parent) = parent
    {
        Box::pin(super::wake_parent(runtime, parent.run_id)).await;
    }
    #[cfg(feature = "metrics")]
    if let Some(metrics) = runtime.inner.metrics() {
        metrics.drive_ended(cx.workflow(), crate::metrics::drive_outcome(&outcome));
    }
    outcome
}

/// Gives back the lease of run `cx`, whose drive stopped between two steps, so that
/// the next worker to look for work takes the run at once.
async fn release(runtime: &Runtime, cx: &RunContext, epoch: u64) {
    tracing::info!(step = cx.step(), "the drive stops between two steps; the run's lease is given back");
    if let Err(e) = runtime.inner.store().release_lease(cx.run_id(), epoch).await {
        // The lease then runs out as after a crash: the run waits for it, and is not lost.
        tracing::warn!(error = %e, "could not give the run's lease back");
    }
}

/// Records the failure `e` of run `cx`'s drive (its children are cancelled with it):
/// whether the store refused the write, and the error of a drive that lost the run.
async fn record_failure(
    runtime: &Runtime,
    cx: &RunContext,
    epoch: u64,
    parent: Option<&crate::children::Parent>,
    e: &RunError,
) -> (bool, Option<crate::error::StoreError>) {
    let error = runtime.inner.redact_text(&e.to_string()).into_owned();
    tracing::warn!(%error, "run failed");
    let status = if matches!(e, RunError::Cancelled { .. }) { RunStatus::Cancelled } else { RunStatus::Failed };
    record_end(runtime, cx, epoch, parent, status, error).await
}

/// Records that run `cx` ended at its last checkpoint with `status` (failed,
/// cancelled or stopped) and `error`, telling its parent and cancelling its
/// children: whether the store refused the write, and the error of a drive that
/// lost the run.
async fn record_end(
    runtime: &Runtime,
    cx: &RunContext,
    epoch: u64,
    parent: Option<&crate::children::Parent>,
    status: RunStatus,
    error: String,
) -> (bool, Option<crate::error::StoreError>) {
    let run_id = cx.run_id();
    let fence = crate::store::Fence { epoch, step: cx.step() };
    let notify = parent.and_then(|p| child_ended(p, run_id, cx.workflow(), status, None, Some(error.clone())));
    match runtime.inner.store().set_status(run_id, fence, status, Some(error.clone()), notify).await {
        Ok(()) => {
            cx.emit(|| EventKind::Finished { status, error: Some(error) });
            // Its children go with it.
            // Boxed: only a failed run has it, and its future would sit in every run's.
            Box::pin(super::cancel_children(runtime, run_id, "the parent run ended")).await;
            (false, None)
        }
        // Another driver owns the run now: that is this drive's outcome.
        Err(store_err) if store_err.is_lost_run() => {
            tracing::warn!(error = %store_err, "another driver owns this run; this drive stops");
            (true, Some(store_err))
        }
        Err(store_err) => {
            tracing::error!(error = %store_err, "could not record the run's failure");
            (true, None)
        }
    }
}
