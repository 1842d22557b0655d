//! The loop of one drive: route, run a transition, commit, until the run ends, waits
//! or fails.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt as _;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::RunOutcome;
use super::state::{checkpoint_state, state_error};
use crate::children::{Parent, StartedChild, child_ended};
use crate::context::RunContext;
use crate::error::{RunError, StoreError};
use crate::events::EventKind;
use crate::store::{Checkpoint, Fence, Park, RunId, RunStatus, SignalRecord, StepRecord, Store, Timestamp};
use crate::workflow::{END, Route, TransitionError, Workflow};

/// Routes at `place`, turning a panicking guard into an error instead of an unwind.
pub(super) fn route<W: Workflow>(wf: &W, place: &str, state: &W::State, run_id: RunId) -> Result<Route, RunError> {
    guarded(wf, place, run_id, || wf.definition().route(place, |i| wf.guard(i, state)))
}

/// The timer transitions enabled at `place`, guards evaluated as in [`route`], with
/// the delays the workflow gives them ([`Workflow::timer`]): only a run waiting at a
/// place with timers asks.
fn timers<W: Workflow>(
    wf: &W,
    place: &str,
    state: &W::State,
    run_id: RunId,
) -> Result<Vec<(usize, Duration)>, RunError> {
    let def = wf.definition();
    // A timer without a delay would leave the run waiting for a wake that never
    // comes: a hand-written workflow that does not give a computed timer's.
    let mut missing = None;
    let timers = guarded(wf, place, run_id, || {
        def.timers_with(
            place,
            |i| wf.guard(i, state),
            |i| {
                let delay = wf.timer(i, state);
                if delay.is_none() {
                    missing.get_or_insert(i);
                }
                delay
            },
        )
    })?;
    match missing {
        None => Ok(timers),
        Some(i) => {
            let t = &def.transitions()[i];
            let reason = format!(
                "timer transition `{}` takes its delay from `{}`, and the workflow's `Workflow::timer` gives none",
                t.name,
                t.after_fn.unwrap_or("the table")
            );
            Err(RunError::Mismatch { workflow: def.name(), run_id, reason })
        }
    }
}

fn guarded<W: Workflow, T>(
    wf: &W,
    place: &str,
    run_id: RunId,
    f: impl FnOnce() -> Result<T, crate::UnknownPlace>,
) -> Result<T, RunError> {
    let def = wf.definition();
    let name = def.name();
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(route)) => Ok(route),
        Ok(Err(unknown)) => Err(RunError::Mismatch { workflow: name, run_id, reason: unknown.to_string() }),
        Err(panic) => Err(RunError::GuardPanicked {
            workflow: name,
            run_id,
            place: def.place(place).unwrap_or(crate::START),
            message: super::panic_message(panic.as_ref()),
        }),
    }
}

/// Why a transition did not finish.
enum Interrupted {
    Cancelled,
    /// The lease could not be renewed because another driver took the run.
    Lost(StoreError),
}

/// Awaits a transition, racing the run's cancellation (if watched) and renewing the
/// lease (if held) while it runs. No timer exists unless a lease is held, and the
/// future that renews it is boxed: the common path stays small, since this future
/// is built once per transition.
async fn supervise<F: Future + Send>(
    fut: F,
    token: Option<&CancellationToken>,
    heartbeat: Option<Heartbeat<'_>>,
) -> Result<F::Output, Interrupted>
where
    F::Output: Send,
{
    // Boxed but the first: only a run that can be cancelled or holds a lease pays
    // for the futures that watch it (a cancellation's is 216 bytes, and would sit in
    // every run's future).
    match (heartbeat, token) {
        (None, None) => Ok(fut.await),
        (None, Some(token)) => Box::pin(super::cancellable(token, fut)).await.ok_or(Interrupted::Cancelled),
        (Some(heartbeat), token) => Box::pin(with_heartbeat(fut, token, heartbeat)).await,
    }
}

/// What renewing a drive's lease needs.
struct Heartbeat<'a> {
    store: &'a dyn Store,
    run_id: RunId,
    epoch: u64,
    lease: Duration,
    clock: &'a super::Clock,
}

async fn with_heartbeat<F: Future>(
    fut: F,
    token: Option<&CancellationToken>,
    Heartbeat { store, run_id, epoch, lease, clock }: Heartbeat<'_>,
) -> Result<F::Output, Interrupted> {
    let mut fut = std::pin::pin!(fut);
    let cancelled = async {
        match token {
            Some(token) => token.cancelled().await,
            None => std::future::pending().await,
        }
    };
    let mut cancelled = std::pin::pin!(cancelled);
    loop {
        tokio::select! {
            biased;
            () = &mut cancelled => return Err(Interrupted::Cancelled),
            r = &mut fut => return Ok(r),
            () = tokio::time::sleep(lease / 3) => {
                match store.heartbeat(run_id, epoch, clock.now() + lease).await {
                    Ok(()) => {}
                    Err(e @ StoreError::Fenced { .. }) => return Err(Interrupted::Lost(e)),
                    // A missed renewal is not fatal: the next one, or the commit, renews it.
                    Err(e) => tracing::warn!(error = %e, "could not renew the run's lease"),
                }
            }
        }
    }
}

/// What a wait comes to ([`RunLoop::wait`]).
enum Waited {
    /// A transition fires: its index, and a signal's payload and inbox id.
    Fire(usize, Option<Value>, Option<u64>),
    /// The route is read again: children were driven, or a signal came while parking.
    Again,
    /// The run parked, or this drive's own signal was refused: the loop's outcome.
    Done(Result<RunOutcome, RunError>),
}

pub(super) struct RunLoop<'a, W> {
    pub(super) wf: &'a W,
    pub(super) epoch: u64,
    pub(super) max_steps: u64,
    pub(super) watch_cancellation: bool,
    /// Once cancelled, the drive stops before its next step ([`Drive::stop_on`](super::Drive::stop_on)).
    pub(super) stop: Option<CancellationToken>,
    pub(super) lease: Option<super::shared::LeaseCfg>,
    /// Until when the lease holds, as this drive last wrote it (a heartbeat may have
    /// moved it on since): what a commit renews it from.
    pub(super) lease_until: Option<Timestamp>,
    /// The inbox id of the signal this drive was started for: tried first, and its
    /// refusal is this drive's error.
    pub(super) own_signal: Option<u64>,
    /// When the run reached its current place: what its timers count from.
    pub(super) place_since: Timestamp,
    pub(super) clock: &'a super::Clock,
    /// The parent to tell, in the commit that ends the run.
    pub(super) parent: Option<Parent>,
    /// Children this drive started and has not driven yet (for a resumed run, also
    /// those its dead drive left queued or running).
    pub(super) children: Vec<StartedChild>,
}

impl<W: Workflow> RunLoop<'_, W> {
    /// The lease a commit at `at` writes: renewed once a sixth of it has passed
    /// (`None` keeps it). A transition's heartbeat renews it a third of the lease
    /// after the transition starts, so it holds under a live drive even when one
    /// renewal fails; the commits of a short run leave it, and the store's index of
    /// leases, as they are.
    fn renewed_lease(&self, at: Timestamp) -> Option<Timestamp> {
        let lease = self.lease.as_ref()?;
        let fresh = at + (lease.duration - lease.duration / 6);
        self.lease_until.is_none_or(|until| until < fresh).then(|| at + lease.duration)
    }

    pub(super) async fn run(&mut self, state: &mut W::State, cx: &mut RunContext) -> Result<RunOutcome, RunError> {
        let wf = self.wf;
        let def = wf.definition();
        let name = def.name();
        let run_id = cx.run_id();
        let first_step = cx.step();
        // The error of this drive's own signal, once it was refused; returned when
        // the run has parked again.
        // Boxed: it is rare, and the loop's future holds it across every step.
        let mut own_error: Option<Box<RunError>> = None;
        loop {
            let from = cx.place();
            let fence = Fence { epoch: self.epoch, step: cx.step() };
            // A statement of its own: as the `match`'s scrutinee, the `?`'s result would
            // be a temporary held across every await of the arms, in every run's future.
            let routed = route(wf, from, state, run_id)?;
            let (index, payload, signal) = match routed {
                Route::End => {
                    // A drive that commits a transition to `end` completes the run in
                    // that commit; one that starts there (a fork of a finished run's
                    // last step, a migration to `End`) finds it running, and
                    // completes it here as that commit would.
                    if cx.step() == first_step {
                        // Boxed: few drives start at `end`.
                        Box::pin(self.complete(state, cx, fence)).await?;
                    }
                    // Children started and not waited for still run to their end or
                    // first wait here, rather than stay queued without a driver.
                    if !self.children.is_empty() {
                        let children = std::mem::take(&mut self.children);
                        // Boxed: only runs that start children drive them, and its
                        // future would otherwise sit in every run's.
                        Box::pin(self.drive_children(cx, children)).await?;
                    }
                    return Ok(RunOutcome::Completed);
                }
                Route::Fire { index, .. } => (index, None, None),
                Route::DeadEnd { false_guards } => {
                    return Err(RunError::DeadEnd { workflow: name, run_id, place: from, false_guards });
                }
                Route::Wait { signals } => {
                    // Boxed: waits are rare, and what a wait holds would otherwise sit
                    // in every run's future, waiting or not.
                    match Box::pin(self.wait(state, cx, from, fence, signals, &mut own_error)).await? {
                        Waited::Fire(index, payload, signal) => (index, payload, signal),
                        Waited::Again => continue,
                        Waited::Done(outcome) => return outcome,
                    }
                }
            };
            if cx.existing_cancellation().is_some_and(CancellationToken::is_cancelled) {
                return Err(RunError::Cancelled { workflow: name, run_id, place: from });
            }
            if self.stop.as_ref().is_some_and(CancellationToken::is_cancelled) {
                return Ok(RunOutcome::Released);
            }
            if cx.step() - first_step >= self.max_steps {
                return Err(RunError::StepLimit { workflow: name, run_id, limit: self.max_steps, place: from });
            }
            let t = &def.transitions()[index];
            let step = cx.step() + 1;
            // None when nothing records it (see `driver::run_ready`).
            let span = if tracing::level_enabled!(tracing::Level::INFO) {
                tracing::info_span!("loopstack.transition", transition = t.name, from, to = t.to, step)
            } else {
                tracing::Span::none()
            };
            cx.emit(|| EventKind::TransitionStarted {
                transition: t.name.into(),
                from: from.into(),
                to: t.to.into(),
                step,
            });
            let token = self.watch_cancellation.then(|| cx.cancellation().clone());
            // The store handle is cloned only when a lease is renewed during the transition.
            let store = self.lease.as_ref().map(|l| (cx.runtime().store().clone(), l.duration));
            let heartbeat = store.as_ref().map(|(store, lease)| Heartbeat {
                store: store.as_ref(),
                run_id,
                epoch: self.epoch,
                lease: *lease,
                clock: self.clock,
            });
            // The clock is read only for a runtime that records how long steps take.
            #[cfg(feature = "metrics")]
            let started = cx.runtime().inner.metrics().map(|_| std::time::Instant::now());
            let transition = AssertUnwindSafe(wf.transition(index, state, cx, payload).instrument(span.clone()));
            let result = match supervise(transition.catch_unwind(), token.as_ref(), heartbeat).await {
                Ok(Ok(result)) => result,
                // A panicking transition fails its run like an error does; the task lives on.
                Ok(Err(panic)) => Err(TransitionError::Failed(
                    format!("the transition panicked: {}", super::panic_message(panic.as_ref())).into(),
                )),
                Err(Interrupted::Cancelled) => {
                    cx.rollback();
                    return Err(RunError::Cancelled { workflow: name, run_id, place: from });
                }
                Err(Interrupted::Lost(e)) => {
                    cx.rollback();
                    return Err(e.into());
                }
            };
            #[cfg(feature = "metrics")]
            if let (Some(metrics), Some(started)) = (cx.runtime().inner.metrics(), started) {
                metrics.step(name, t.name, started.elapsed());
            }
            if let Err(err) = result {
                cx.rollback();
                let Some(id) = signal else {
                    let source = match err {
                        TransitionError::Failed(source) => source,
                        TransitionError::InvalidPayload(reason) => reason.into(),
                    };
                    return Err(RunError::Transition {
                        workflow: name,
                        run_id,
                        transition: t.name,
                        place: from,
                        source,
                    });
                };
                // A wait transition that fails refuses its signal: the run keeps waiting,
                // from its checkpoint's state (the transition may have changed it before
                // it failed, and a later signal of this drive must not commit that).
                // Read back from the store: this path is rare, the common one keeps no copy.
                // The record is a local of this block: the loop's future keeps no room
                // for it while the signal is rejected below.
                *state = {
                    let record = cx.runtime().store().load_run(run_id).await?;
                    serde_json::from_str(record.state.get()).map_err(state_error(name, run_id))?
                };
                let error = match err {
                    TransitionError::InvalidPayload(reason) => {
                        RunError::InvalidSignalPayload { workflow: name, run_id, signal: t.name, reason }
                    }
                    TransitionError::Failed(source) => {
                        RunError::SignalRefused { workflow: name, run_id, signal: t.name, source }
                    }
                };
                let reason = cx.runtime().inner.redact_text(&error.to_string()).into_owned();
                cx.runtime().store().reject_signal(run_id, self.epoch, id, &reason).await?;
                if self.own_signal == Some(id) {
                    own_error = Some(Box::new(error));
                }
                continue;
            }
            if let Some(reason) = cx.take_stop() {
                // Boxed: few steps stop their run.
                return Box::pin(self.stopped(cx, signal, reason)).await;
            }
            let value = match checkpoint_state(&*state, name, run_id, Some(t.name)) {
                Ok(value) => cx.runtime().redact(value),
                Err(e) => {
                    // Nothing of the step is committed: the run keeps its last checkpoint.
                    cx.rollback();
                    return Err(e);
                }
            };
            let status = if t.to == END { RunStatus::Completed } else { RunStatus::Running };
            let notify = match &self.parent {
                Some(parent) if t.to == END => child_ended(parent, run_id, name, status, Some(&value), None),
                _ => None,
            };
            // The runtime's clock, which the timers of the place it reaches count by.
            let at = self.clock.now();
            let renewed = self.renewed_lease(at);
            // The checkpoint is a local of the block that builds the commit: the
            // loop's future keeps no room for it while the commit is awaited.
            let commit = {
                let record = StepRecord::at(step, t.name, from, t.to, at);
                let mut checkpoint = Checkpoint::new(run_id, fence, record, status, value);
                checkpoint.notify = notify;
                checkpoint.documents = cx.take_pending();
                checkpoint.signal = signal;
                checkpoint.lease_until = renewed;
                cx.runtime().store().commit(checkpoint)
            };
            commit.await?;
            if renewed.is_some() {
                self.lease_until = renewed;
            }
            for child in cx.take_children() {
                // A transition that runs again after a crash finds the children it
                // started before, which a resumed drive already has.
                if !self.children.iter().any(|known| known.run_id == child.run_id) {
                    self.children.push(child);
                }
            }
            cx.committed(step, t.to);
            cx.emit(|| EventKind::TransitionCommitted {
                transition: t.name.into(),
                from: from.into(),
                to: t.to.into(),
                step,
            });
            self.place_since = at;
            if signal.is_some() && signal == self.own_signal {
                self.own_signal = None;
            }
            span.in_scope(|| tracing::debug!("transition committed"));
        }
    }

    /// Stops run `cx` at its last checkpoint, as its transition asked
    /// ([`RunContext::stop`]): nothing of the step is committed, and the signal it
    /// delivered, if any, is taken as rejected with the reason. The driver records
    /// the run's status.
    async fn stopped(
        &mut self,
        cx: &mut RunContext,
        signal: Option<u64>,
        reason: Box<str>,
    ) -> Result<RunOutcome, RunError> {
        cx.rollback();
        let reason = cx.runtime().inner.redact_text(&reason).into_owned();
        if let Some(id) = signal {
            cx.runtime().store().reject_signal(cx.run_id(), self.epoch, id, &reason).await?;
            if self.own_signal == Some(id) {
                self.own_signal = None;
            }
        }
        Ok(RunOutcome::Stopped { reason })
    }

    /// Completes run `cx`, which stands at `end` without a transition of this drive's
    /// taking it there: the store's status, and its parent told, as the commit of a
    /// transition to `end` does.
    async fn complete(&self, state: &W::State, cx: &RunContext, fence: Fence) -> Result<(), RunError> {
        let (name, run_id) = (self.wf.definition().name(), cx.run_id());
        let notify = match &self.parent {
            Some(parent) => {
                let value = cx.runtime().redact(checkpoint_state(state, name, run_id, None)?);
                child_ended(parent, run_id, name, RunStatus::Completed, Some(&value), None)
            }
            None => None,
        };
        cx.runtime().store().set_status(run_id, fence, RunStatus::Completed, None, notify).await?;
        Ok(())
    }

    /// Waits at place `from` for one of `signals` or a timer: a transition to fire
    /// (a due timer, or the first signal picked from the inbox), the route to read
    /// again, or the run parked (the loop's outcome).
    async fn wait(
        &mut self,
        state: &W::State,
        cx: &mut RunContext,
        from: &'static str,
        fence: Fence,
        signals: Vec<&'static str>,
        own_error: &mut Option<Box<RunError>>,
    ) -> Result<Waited, RunError> {
        let wf = self.wf;
        let def = wf.definition();
        let name = def.name();
        let run_id = cx.run_id();
        let timers = timers(wf, from, state, run_id)?;
        let now = self.clock.now();
        let due = timers.iter().map(|&(i, after)| (i, self.place_since + after)).find(|&(_, at)| at <= now);
        let wake_at = timers.iter().map(|&(_, after)| self.place_since + after).min();
        let inbox = cx.runtime().store().inbox(run_id).await?;
        let picked =
            self.pick_signal(cx.runtime().store().as_ref(), run_id, from, &signals, inbox.pending, own_error).await?;
        match (picked, due) {
            // The earlier event wins: a timer that came due before the signal arrived.
            (Some(s), Some((index, at))) if at < s.received_at => Ok(Waited::Fire(index, None, None)),
            (Some(s), _) => {
                let index = def.transition(&s.name).expect("a picked signal names a transition").0;
                let payload: Value = serde_json::from_str(s.payload.get()).map_err(state_error(name, run_id))?;
                Ok(Waited::Fire(index, Some(payload), Some(s.id)))
            }
            (None, Some((index, _))) => Ok(Waited::Fire(index, None, None)),
            (None, None) if !self.children.is_empty() => {
                // Drive the children this drive started before waiting for
                // them: their ends arrive in the inbox, read again next.
                let children = std::mem::take(&mut self.children);
                Box::pin(self.drive_children(cx, children)).await?;
                Ok(Waited::Again)
            }
            (None, None) => {
                let park = Park { fence, inbox_seq: inbox.seq, signals: &signals, wake_at };
                match cx.runtime().store().park(run_id, &park).await {
                    Ok(()) => {
                        cx.emit(|| EventKind::Waiting {
                            place: from.into(),
                            signals: signals.iter().map(|&s| s.into()).collect(),
                        });
                        Ok(Waited::Done(match own_error.take() {
                            Some(e) => Err(*e),
                            None => Ok(RunOutcome::Waiting { place: from, signals }),
                        }))
                    }
                    // A signal arrived while parking: read the inbox again.
                    Err(StoreError::SignalArrived { .. }) => Ok(Waited::Again),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Drives the children this drive started, renewing the parent's lease and
    /// watching its cancellation meanwhile, as a transition does.
    async fn drive_children(&self, cx: &mut RunContext, children: Vec<StartedChild>) -> Result<(), RunError> {
        let (name, run_id, from) = (self.wf.definition().name(), cx.run_id(), cx.place());
        let token = self.watch_cancellation.then(|| cx.cancellation().clone());
        let store = self.lease.as_ref().map(|l| (cx.runtime().store().clone(), l.duration));
        let heartbeat = store.as_ref().map(|(store, lease)| Heartbeat {
            store: store.as_ref(),
            run_id,
            epoch: self.epoch,
            lease: *lease,
            clock: self.clock,
        });
        let runtime = cx.runtime().clone();
        match supervise(Box::pin(drive_children(&runtime, children)), token.as_ref(), heartbeat).await {
            Ok(()) => Ok(()),
            Err(Interrupted::Cancelled) => Err(RunError::Cancelled { workflow: name, run_id, place: from }),
            Err(Interrupted::Lost(e)) => Err(e.into()),
        }
    }

    /// Picks the signal to deliver at a wait: this drive's own signal first, then
    /// the inbox in order of arrival. Signals not enabled here are rejected.
    async fn pick_signal(
        &mut self,
        store: &dyn Store,
        run_id: RunId,
        place: &'static str,
        enabled: &[&'static str],
        mut pending: Vec<SignalRecord>,
        own_error: &mut Option<Box<RunError>>,
    ) -> Result<Option<SignalRecord>, RunError> {
        if let Some(pos) = self.own_signal.and_then(|own| pending.iter().position(|s| s.id == own)) {
            let own = pending.remove(pos);
            pending.insert(0, own);
        }
        for s in pending {
            if enabled.contains(&s.name.as_str()) {
                return Ok(Some(s));
            }
            let error = RunError::UnknownSignal {
                workflow: self.wf.definition().name(),
                run_id,
                place,
                signal: s.name.clone(),
                expected: enabled.to_vec(),
            };
            store.reject_signal(run_id, self.epoch, s.id, &error.to_string()).await?;
            if self.own_signal == Some(s.id) {
                self.own_signal = None;
                *own_error = Some(Box::new(error));
            }
        }
        Ok(None)
    }
}

/// Drives the children a drive started, whose workflows the runtime has, up to its
/// child concurrency at once, each to its end or first wait. A child another driver
/// took is left to it; a failed child recorded its failure and told its parent.
async fn drive_children(runtime: &super::Runtime, children: Vec<StartedChild>) {
    use futures::StreamExt as _;
    let drives = children.into_iter().map(|StartedChild { run_id: child, wake, timeout }| async move {
        let record = match runtime.store().load_run(child).await {
            Ok(record) => record,
            Err(e) => return tracing::warn!(child = %child, error = %e, "could not load a child run"),
        };
        let Some(wf) = runtime.inner.workflow(&record.workflow) else {
            return tracing::debug!(child = %child, workflow = %record.workflow, "not registered here; a worker drives it");
        };
        let Ok(driven) = tokio::time::timeout(timeout, wf.wake(runtime, child, wake, false)).await else {
            return runtime.time_out_child(child, timeout).await;
        };
        match driven {
            // Another driver holds it, or it ended: it is not this drive's to drive.
            Ok(_) | Err(RunError::InvalidStatus { .. } | RunError::Store(StoreError::Leased { .. })) => {}
            Err(e) => tracing::info!(child = %child, error = %runtime.inner.redact_text(&e.to_string()), "a child run ended with an error"),
        }
    });
    futures::stream::iter(drives).buffer_unordered(runtime.inner.child_concurrency()).collect::<Vec<()>>().await;
}
