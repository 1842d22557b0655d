//! Workers: processes that drive whatever runs of their workflows can move.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::Runtime;
use crate::error::{RunError, StoreError};
use crate::store::{RunId, RunRecord, WorkflowVersions};
use crate::workflow::Workflow;

/// How often a running [`Worker`] looks for due schedules.
pub const SCHEDULE_CHECK: Duration = Duration::from_secs(1);

/// How long a [`Worker`] that shuts down lets the steps in flight finish
/// ([`Worker::drain_timeout`]) unless set: under the 30 s that Kubernetes and
/// systemd wait after SIGTERM before they kill a process.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

/// Drives the runs of its registered workflows that can move: queued runs (from
/// [`Runtime::submit`]), runs whose driver died (their lease ran out), and waiting
/// runs with a signal in their inbox or a timer due. It also starts the due times
/// of the [schedules](crate::schedule) of its workflows, as queued runs it then
/// drives (looking for them at most every [`SCHEDULE_CHECK`] while it runs).
///
/// Run several workers on one PostgreSQL store (in one process or many): each claim
/// takes a run with a lease and raises its fencing epoch, so a run is driven by one
/// worker at a time, and a worker that stalls past its lease cannot commit over the
/// one that took its run over. With SQLite, run one worker per file.
///
/// A worker shuts down gracefully when the token [`Worker::run`] watches is
/// cancelled (the command line's `worker` and `serve` cancel it on SIGTERM and
/// Ctrl-C): it claims nothing more, lets each step in flight finish and commit (up
/// to its [drain timeout](Worker::drain_timeout)), starts no next step, and gives
/// the leases of the runs it drove back at once, so that another worker continues
/// them on its next look for work instead of after the lease. A step still running
/// at the timeout is abandoned as if the process had died there: its run is taken
/// over and the step runs again (a tool with `effect = "at_most_once"` does not: its
/// outcome is then unknown and a person resolves it).
///
/// ```no_run
/// # use loopstack_core::*;
/// # async fn demo<W: Workflow>(runtime: Runtime, wf: W, shutdown: CancellationToken) -> Result<(), StoreError> {
/// Worker::new(runtime).register(wf).concurrency(16).run(shutdown).await
/// # }
/// ```
pub struct Worker {
    runtime: Runtime,
    concurrency: usize,
    poll: Duration,
    drain: Duration,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("workflows", &self.runtime.workflows())
            .field("concurrency", &self.concurrency)
            .field("poll", &self.poll)
            .field("drain", &self.drain)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker driving runs with `runtime` (its store, lease and step limit, and
    /// the workflows registered with it), up to 8 at once, looking for work every
    /// 200 ms while idle.
    pub fn new(runtime: Runtime) -> Self {
        Self { runtime, concurrency: 8, poll: Duration::from_millis(200), drain: DEFAULT_DRAIN_TIMEOUT }
    }

    /// Drives runs of `workflow`, found by its definition's name. It is registered
    /// with the worker's runtime, which then also drives its child runs and wakes
    /// its parents ([`Runtime::register`]); a workflow whose input reads from JSON
    /// can be registered there directly, to be started by name too.
    #[must_use]
    pub fn register<W: Workflow>(mut self, workflow: W) -> Self {
        self.runtime.register_opaque(Arc::new(workflow));
        self
    }

    /// Drives runs of a shared `workflow`.
    #[must_use]
    pub fn register_shared<W: Workflow>(mut self, workflow: Arc<W>) -> Self {
        self.runtime.register_opaque(workflow);
        self
    }

    /// How many runs this worker drives at once (at least 1).
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// How long an idle worker waits before it looks for work again.
    #[must_use]
    pub fn poll_interval(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// How long the steps in flight may take to finish once the worker shuts down
    /// ([`DEFAULT_DRAIN_TIMEOUT`] unless set); past it they are abandoned and their
    /// runs' leases given back. Zero abandons them at once.
    #[must_use]
    pub fn drain_timeout(mut self, drain: Duration) -> Self {
        self.drain = drain;
        self
    }

    /// Claims what can move now, up to `limit` runs.
    async fn claim(&self, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        // Each workflow's own version and those it migrates from: runs of any other
        // version (a newer build's, during a rollout) are left to the workers that
        // can drive them.
        let versions: Vec<(&'static str, Vec<u32>)> = self.runtime.inner.registry().versions();
        let workflows: Vec<WorkflowVersions<'_>> =
            versions.iter().map(|(name, versions)| WorkflowVersions::new(name, versions)).collect();
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        let lease = self.runtime.inner.worker_lease();
        #[cfg(feature = "metrics")]
        let started = self.runtime.inner.metrics().map(|_| std::time::Instant::now());
        let claimed = self.runtime.inner.store().claim_runnable(&workflows, &lease, self.runtime.now(), limit).await;
        #[cfg(feature = "metrics")]
        if let (Some(metrics), Some(started)) = (self.runtime.inner.metrics(), started) {
            metrics.claim(started.elapsed(), claimed.as_ref().map_or(0, Vec::len));
        }
        for record in claimed.iter().flatten() {
            log_claim(record);
        }
        claimed
    }

    /// Starts the schedules' due times, then claims and drives, to their next wait
    /// or end, the runs that can move now; returns how many it drove. For tests and
    /// cron-style use.
    pub async fn run_once(&self) -> Result<usize, StoreError> {
        self.runtime.start_due_schedules().await?;
        let claimed = self.claim(self.concurrency).await?;
        let count = claimed.len();
        let drives = claimed.into_iter().map(|record| self.drive(record, None));
        futures::future::join_all(drives).await;
        Ok(count)
    }

    /// Drives a claimed run until it waits, ends, or (once `stop` is cancelled)
    /// finishes the step in flight.
    async fn drive(&self, record: RunRecord, stop: Option<CancellationToken>) {
        let Some(workflow) = self.runtime.inner.workflow(&record.workflow).cloned() else { return };
        let (run_id, fence) = (record.run_id, record.fence());
        let (parent, name) = (crate::children::parent_of(&record), record.workflow.clone());
        match workflow.drive_claimed(&self.runtime, record, stop).await {
            Ok(_) => {}
            // A run this build cannot drive (its place is gone, its state no longer
            // reads) would otherwise be claimed again at every lease: it fails with
            // the reason, and `retry` picks it up under a build that can. Like any
            // failed run, it tells its parent and takes its children with it.
            // A migration that failed fails the run the same way, its stored state
            // kept for a retry under a build whose migration works.
            Err(
                e @ (RunError::Mismatch { .. }
                | RunError::DefinitionChanged { .. }
                | RunError::State { .. }
                | RunError::Migration { .. }),
            ) => {
                let error = self.runtime.secrets().redact(&e.to_string()).into_owned();
                tracing::warn!(run_id = %run_id, %error, "this build cannot drive the run");
                let status = crate::store::RunStatus::Failed;
                let notify = parent
                    .as_ref()
                    .and_then(|p| crate::children::child_ended(p, run_id, &name, status, None, Some(error.clone())));
                match self.runtime.inner.store().set_status(run_id, fence, status, Some(error), notify).await {
                    Ok(()) => {
                        super::cancel_children(&self.runtime, run_id, "the parent run failed").await;
                        if let Some(parent) = parent {
                            Box::pin(super::wake_parent(&self.runtime, parent.run_id)).await;
                        }
                    }
                    Err(store_err) => {
                        tracing::warn!(run_id = %run_id, error = %store_err, "could not record the failure")
                    }
                }
            }
            // The run recorded its own failure; the worker goes on.
            Err(e) => {
                tracing::info!(run_id = %run_id, error = %self.runtime.secrets().redact(&e.to_string()), "a drive ended with an error")
            }
        }
    }

    /// Drives runs until `shutdown` is cancelled, then shuts down gracefully: the
    /// steps in flight finish (up to the [drain timeout](Worker::drain_timeout)) and
    /// the leases of their runs are given back. A store error while looking for work
    /// is logged and retried.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), StoreError> {
        let span = tracing::info_span!("loopstack.worker", owner = %self.runtime.inner.owner());
        Arc::new(self).serve(shutdown).instrument(span).await
    }

    async fn serve(self: Arc<Self>, shutdown: CancellationToken) -> Result<(), StoreError> {
        let worker = self;
        let mut inflight: JoinSet<()> = JoinSet::new();
        // The run and lease epoch each drive in flight holds, by task: what a drive
        // abandoned at the drain timeout gives back.
        let mut held: HashMap<tokio::task::Id, (RunId, u64)> = HashMap::new();
        let mut schedules_checked: Option<std::time::Instant> = None;
        loop {
            if !shutdown.is_cancelled() && schedules_checked.is_none_or(|at| at.elapsed() >= SCHEDULE_CHECK) {
                schedules_checked = Some(std::time::Instant::now());
                if let Err(e) = worker.runtime.start_due_schedules().await {
                    tracing::warn!(error = %e, "could not start due schedules");
                }
            }
            // Over a store with an event log: keep checking whether anyone listens,
            // so that the first events of a claimed run are published too.
            worker.runtime.inner.events().keep_publishing();
            let free = worker.concurrency.saturating_sub(inflight.len());
            let mut claimed_any = false;
            if free > 0 && !shutdown.is_cancelled() {
                match worker.claim(free).await {
                    Ok(claimed) => {
                        claimed_any = !claimed.is_empty();
                        for record in claimed {
                            let worker = worker.clone();
                            let held_lease = (record.run_id, record.epoch);
                            let stop = Some(shutdown.clone());
                            let task = inflight.spawn(async move { worker.drive(record, stop).await });
                            held.insert(task.id(), held_lease);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "could not look for runs"),
                }
            }
            if shutdown.is_cancelled() {
                worker.drain(inflight, held).await;
                worker.runtime.inner.events().flush().await;
                return Ok(());
            }
            if claimed_any && inflight.len() < worker.concurrency {
                continue;
            }
            tokio::select! {
                () = shutdown.cancelled() => {}
                Some(joined) = inflight.join_next_with_id(), if !inflight.is_empty() => {
                    held.remove(&joined_id(&joined));
                }
                () = tokio::time::sleep(worker.poll) => {}
            }
            while let Some(joined) = inflight.try_join_next_with_id() {
                held.remove(&joined_id(&joined));
            }
        }
    }

    /// Lets the drives in flight finish their steps, up to the drain timeout, then
    /// abandons the rest and gives their leases back.
    async fn drain(&self, mut inflight: JoinSet<()>, mut held: HashMap<tokio::task::Id, (RunId, u64)>) {
        if !inflight.is_empty() {
            tracing::info!(runs = inflight.len(), timeout = ?self.drain, "shutting down: the steps in flight finish");
        }
        let deadline = tokio::time::sleep(self.drain);
        let mut deadline = std::pin::pin!(deadline);
        while !inflight.is_empty() {
            tokio::select! {
                Some(joined) = inflight.join_next_with_id() => {
                    held.remove(&joined_id(&joined));
                }
                () = &mut deadline => break,
            }
        }
        if inflight.is_empty() {
            return;
        }
        inflight.abort_all();
        // A drive that finished before its abort took effect holds nothing: only the
        // aborted ones are abandoned.
        while let Some(joined) = inflight.join_next_with_id().await {
            if let Ok((id, ())) = joined {
                held.remove(&id);
            }
        }
        let store = self.runtime.inner.store();
        for (run_id, epoch) in held.into_values() {
            tracing::warn!(run_id = %run_id, "a step still ran at the drain timeout: abandoned, the run's lease given back");
            // A release fails only with the store; the lease then runs out as after a crash.
            if let Err(e) = store.release_lease(run_id, epoch).await {
                tracing::warn!(run_id = %run_id, error = %e, "could not give the run's lease back");
            }
        }
    }
}

/// Logs a claim: a takeover as a warning that names the holder whose lease ran out.
fn log_claim(record: &RunRecord) {
    let (run_id, workflow, step, epoch) = (record.run_id, &*record.workflow, record.step, record.epoch);
    match &record.taken_from {
        Some(from) => tracing::warn!(
            run_id = %run_id,
            workflow,
            step,
            epoch,
            from = %from,
            "took over a run whose holder's lease ran out"
        ),
        None => tracing::info!(run_id = %run_id, workflow, step, epoch, "claimed a run"),
    }
}

/// The task of a drive that ended (or was aborted).
fn joined_id(joined: &Result<(tokio::task::Id, ()), tokio::task::JoinError>) -> tokio::task::Id {
    match joined {
        Ok((id, ())) => *id,
        Err(e) => e.id(),
    }
}
