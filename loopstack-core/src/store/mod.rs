//! Where runs, their checkpoints, documents and signals are kept.
//!
//! The [`Store`] trait is what the [`Runtime`](crate::Runtime) writes through. Its
//! contract, which every implementation keeps (the conformance tests of
//! `loopstack-store` check [`MemoryStore`] and the SQL stores against it):
//!
//! - **One commit per transition, all or nothing.** A [`Checkpoint`] carries the run
//!   row's new place, step, status and state, the transition's checkpoint row and the
//!   documents it saved; a database store writes them in one transaction.
//! - **Fencing.** Every drive of a run first [claims](Store::claim) it, which raises
//!   the run's `epoch`; every write of the drive carries that epoch and its step
//!   ([`Fence`]), and the store refuses a write whose epoch or step is stale
//!   ([`StoreError::Fenced`], [`StoreError::Conflict`]). A driver that lost its run to
//!   another (a takeover after a crash, a retry, a second signal) cannot write.
//! - **Finished is final.** A completed, failed, cancelled or stopped run takes no commit and no
//!   status change ([`StoreError::Finished`]); only a [claim](Store::claim) that
//!   expects a finished status (a retry) reopens it.
//! - **Signals are kept.** A signal is written to the run's inbox before anything
//!   acts on it, is delivered by the commit of the transition it fires (so exactly
//!   once), or is rejected with a recorded reason; a run parks as waiting only if no
//!   signal arrived since the driver last read its inbox ([`StoreError::SignalArrived`]).
//! - **Notifications go with their write.** A commit or status change may carry an
//!   [`OutSignal`] for another run (a child telling its parent it finished); the
//!   store puts it in that run's inbox in the same transaction, so both are written
//!   or neither is, and a crash between the two cannot lose it. A finished or
//!   missing target drops it; the write still succeeds.
//!
//! - **Versions.** A run keeps the version of its workflow it was created with
//!   ([`NewRun::version`], 1 by default and for rows stored before versions), a
//!   fork its source's; only a commit that carries [`Checkpoint::migration`] changes
//!   it (with the table hash, in the same write). [`Store::claim_runnable`] takes a
//!   run only if its name and version are among the worker's ([`WorkflowVersions`]).
//!
//! - **An event log, if it keeps one.** A store shared between processes may keep
//!   run events for subscribers elsewhere ([`Store::has_event_log`] and the
//!   `*_events` methods; see the [events](crate::events) module): appended in
//!   batches with ids that rise in commit order, read after an id, pruned by age
//!   and count, written only while a listener row exists. The defaults keep none.
//!
//! - **Schedules, if it keeps them.** A store may keep [schedules](crate::schedule)
//!   (the `*_schedule*` methods): a due time is moved on by a compare-and-set on the
//!   schedule's next due time, in the transaction that creates its run
//!   ([`Store::fire_schedule`]), so one due time starts one run however many
//!   workers race. The defaults keep none.
//!
//! The records a store returns ([`RunRecord`], [`StepRecord`], [`CheckpointRecord`],
//! [`SignalRecord`], [`Document`]) are plain structs with public fields, so a store
//! of your own can build them.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::document::Document;
use crate::error::StoreError;
use crate::schedule::{ScheduleFire, ScheduleRecord, ScheduledRun};

mod event_log;
mod memory;
mod query;
mod record;
mod signal;
mod time;
mod write;

pub use event_log::{EventRetention, LoggedEvent, PRUNE_EVERY};
pub use memory::MemoryStore;
pub use query::*;
pub use record::*;
pub use signal::*;
pub use time::Timestamp;
pub use write::*;

/// Keeps runs, their checkpoints, documents and signals. The module docs state the
/// contract every implementation keeps.
#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    /// Records a new run at `start`, step 0, and its step-0 checkpoint; a `running`
    /// run gets epoch 1, a `queued` one epoch 0.
    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError>;

    /// Takes a run for a drive: if its status is one of `claim.expect` (and, for a
    /// running run with `lease_expired_at`, its lease ran out), it becomes running,
    /// its epoch rises by one, its error is cleared and `claim.lease` is recorded.
    /// Returns the run as claimed.
    async fn claim(&self, run_id: RunId, claim: &Claim) -> Result<RunRecord, StoreError>;

    /// Commits one transition atomically: the run row, its checkpoint, its documents,
    /// the delivery of the signal it consumed, and the signal it sends
    /// ([`Checkpoint::notify`]: in its target's inbox as [`Store::send_signal`] would
    /// put it, unless the target is finished or missing, which drops it without
    /// failing the commit). Refused, writing nothing (no notification either), if the
    /// run finished ([`StoreError::Finished`]), was claimed since
    /// ([`StoreError::Fenced`]) or is not at `fence.step` ([`StoreError::Conflict`]).
    async fn commit(&self, checkpoint: Checkpoint) -> Result<(), StoreError>;

    /// Ends a drive without a transition: failed, cancelled or stopped with `error`, completed
    /// (a run a fork or a migration left at `end`), or running / queued to hand the
    /// run on. Refused like [`Store::commit`]. A run that becomes finished has its
    /// pending signals rejected.
    ///
    /// With `notify` (a child that ended telling its parent), the signal is
    /// put in its target's inbox in the same transaction, as [`OutSignal`] describes:
    /// both are written or, when the change is refused, neither; a finished or
    /// missing target drops it and the change still succeeds.
    async fn set_status(
        &self,
        run_id: RunId,
        fence: Fence,
        status: RunStatus,
        error: Option<String>,
        notify: Option<OutSignal>,
    ) -> Result<(), StoreError>;

    /// Parks a run as waiting for `signals` (and, with `wake_at`, for its first timer),
    /// unless a signal arrived after the inbox read whose count was `inbox_seq`
    /// ([`StoreError::SignalArrived`]: read the inbox again). Refused like
    /// [`Store::commit`].
    async fn park(&self, run_id: RunId, park: &Park<'_>) -> Result<(), StoreError>;

    /// Claims, for a worker, up to `limit` runs of `workflows` (of a listed name and
    /// one of the versions listed with it; runs of other versions are left alone)
    /// that can move now:
    /// queued runs, running runs whose lease ran out before `now` (their driver
    /// died), and waiting runs with a pending signal or a timer due by `now`. Each is
    /// claimed as [`Store::claim`] would, with `lease`; two workers never get the
    /// same run. Oldest-changed first.
    ///
    /// A claimed run the store cannot read back (its stored row or state is not
    /// what it writes) is not returned and stops nothing: it is failed with the
    /// reason, its parent told as a failed child tells it, and the others are
    /// returned. [`Store::claim`] fails such a run the same way and returns the
    /// error.
    async fn claim_runnable(
        &self,
        workflows: &[WorkflowVersions<'_>],
        lease: &Lease,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError>;

    /// Extends a drive's lease.
    async fn heartbeat(&self, run_id: RunId, epoch: u64, until: Timestamp) -> Result<(), StoreError>;

    /// Gives a drive's lease back at once: a run still `running` at `epoch` becomes
    /// runnable, so the next [`claim_runnable`](Store::claim_runnable) of any worker
    /// takes it, instead of waiting for the lease to run out. A worker that shuts down
    /// calls it for each run it stops driving. Nothing happens to a run that ended,
    /// waits, or was claimed since (its epoch moved on): the lease is no longer this
    /// drive's to give.
    ///
    /// The default does nothing, so a store that predates it still works: its runs
    /// wait out their leases.
    async fn release_lease(&self, run_id: RunId, epoch: u64) -> Result<(), StoreError> {
        let _ = (run_id, epoch);
        Ok(())
    }

    /// The run's [takeovers](Takeover), oldest first: each claim of it while another
    /// holder's lease still named it (a lease given back with
    /// [`release_lease`](Store::release_lease) is none). The default knows none.
    async fn takeovers(&self, run_id: RunId) -> Result<Vec<Takeover>, StoreError> {
        let _ = run_id;
        Ok(Vec::new())
    }

    /// Puts a signal in a run's inbox. Refused for a finished run.
    async fn send_signal(&self, run_id: RunId, name: &str, payload: Box<RawValue>)
    -> Result<SignalReceipt, StoreError>;

    /// The run's pending signals, oldest first, with its signal count.
    async fn inbox(&self, run_id: RunId) -> Result<Inbox, StoreError>;

    /// Rejects a pending signal with a reason (fenced like a commit, but allowed on
    /// a run of any status).
    async fn reject_signal(&self, run_id: RunId, epoch: u64, signal: u64, reason: &str) -> Result<(), StoreError>;

    /// Every signal the run received, oldest first.
    async fn signals(&self, run_id: RunId) -> Result<Vec<SignalRecord>, StoreError>;

    /// Starts a new run from step `step` of `source`: its state, place, history and
    /// documents as they were after that step; the new run is running at epoch 1
    /// and records where it came from. A fork is nobody's child: it copies neither
    /// `parent` nor `parent_signal`, so it never notifies the source's parent.
    ///
    /// With `first`, the fork's first step of its own (a fork's edits, see
    /// [`ForkStep`]) is written in the same transaction as the copy: the new run is
    /// at step `step + 1` with that step's place and state, or, when the fork is
    /// refused (an unknown source or step, an existing `new_run`), nothing is
    /// stored at all.
    async fn fork(
        &self,
        source: RunId,
        step: u64,
        new_run: RunId,
        first: Option<ForkStep>,
    ) -> Result<RunRecord, StoreError>;

    /// Loads a run.
    async fn load_run(&self, run_id: RunId) -> Result<RunRecord, StoreError>;

    /// Runs that pass a filter, newest first, one page: their rows, not their
    /// states, so a run whose state cannot be read is listed like any other.
    async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StoreError>;

    /// How many runs there are of each workflow in each unfinished status (queued,
    /// running, waiting), and how many of them can move at `now` (the runnable
    /// queue's depth), by workflow then status; none for a pair with no run. What
    /// the metrics read at each scrape, so a store answers it in one query.
    ///
    /// The default reads the listing a page at a time ([`count_runs_by_listing`]):
    /// right for any store, but it reads every unfinished run.
    async fn count_runs(&self, now: Timestamp) -> Result<Vec<RunCount>, StoreError> {
        count_runs_by_listing(self, now).await
    }

    /// The transitions the run took, in order, with their times.
    async fn history(&self, run_id: RunId) -> Result<Vec<StepRecord>, StoreError>;

    /// The checkpoint of one step (0 is the initial state).
    async fn checkpoint(&self, run_id: RunId, step: u64) -> Result<CheckpointRecord, StoreError>;

    /// The current version of each of the run's documents, in the order first saved.
    async fn documents(&self, run_id: RunId) -> Result<Vec<Arc<Document>>, StoreError>;

    /// The documents as they were after step `step`: each one's latest version saved
    /// at or before it.
    async fn documents_at(&self, run_id: RunId, step: u64) -> Result<Vec<Arc<Document>>, StoreError>;

    /// Every version of every document of the run, by step, then position, then
    /// version.
    async fn document_versions(&self, run_id: RunId) -> Result<Vec<Arc<Document>>, StoreError>;

    /// Every version of the run's document of type `doc_type` with this key, oldest
    /// first.
    async fn document_history(
        &self,
        run_id: RunId,
        doc_type: &str,
        key: &str,
    ) -> Result<Vec<Arc<Document>>, StoreError>;

    /// The lease a runtime takes on this store's runs while it drives them, if the
    /// store is shared between processes. `None` (the default, and
    /// [`MemoryStore`]'s) means no other process can see the runs.
    fn lease_duration(&self) -> Option<std::time::Duration> {
        None
    }

    // ------------------------------------------------------------ schedules
    //
    // The defaults keep none: `due_schedules` finds nothing, the others answer
    // `StoreError::SchedulesUnsupported`. See the `schedule` module docs.

    /// Stores a new schedule; [`StoreError::ScheduleExists`] if its id is taken.
    async fn create_schedule(&self, schedule: &ScheduleRecord) -> Result<(), StoreError> {
        let _ = schedule;
        Err(StoreError::SchedulesUnsupported)
    }

    /// Loads a schedule; [`StoreError::ScheduleNotFound`] if there is none.
    async fn load_schedule(&self, id: &str) -> Result<ScheduleRecord, StoreError> {
        let _ = id;
        Err(StoreError::SchedulesUnsupported)
    }

    /// Every schedule, by id.
    async fn list_schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        Err(StoreError::SchedulesUnsupported)
    }

    /// Pauses or resumes a schedule, and with `next_due` sets its next due time;
    /// returns it as changed.
    async fn set_schedule_paused(
        &self,
        id: &str,
        paused: bool,
        next_due: Option<Timestamp>,
    ) -> Result<ScheduleRecord, StoreError> {
        let _ = (id, paused, next_due);
        Err(StoreError::SchedulesUnsupported)
    }

    /// Deletes a schedule and its record of started runs (the runs stay).
    async fn delete_schedule(&self, id: &str) -> Result<(), StoreError> {
        let _ = id;
        Err(StoreError::SchedulesUnsupported)
    }

    /// Up to `limit` schedules of `workflows` that are not paused and are due by
    /// `now`, or hold a pending due time ([`ScheduleRecord::pending_due`]) and
    /// their last run has ended, earliest due first. Reading them takes nothing: a worker then fires
    /// each with [`Store::fire_schedule`].
    async fn due_schedules(
        &self,
        workflows: &[&str],
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        let _ = (workflows, now, limit);
        Ok(Vec::new())
    }

    /// Moves a due schedule on, all or nothing: only if it is not paused, its
    /// next due time is still `fire.due` and its pending due time `fire.pending`
    /// (a compare-and-set), and, with `fire.if_last_run_ended`, its last run has
    /// ended (or the store no longer has it), sets them to `fire.next_due` (or
    /// pauses it, when that is `None`) and `fire.next_pending`, records `fire.error`,
    /// and creates `fire.run` (queued, unless a run of that id exists) with the
    /// record of which schedule and due time started it ([`Store::scheduled_runs`]),
    /// in one transaction. `Ok(false)` when another writer moved it first, or
    /// paused or deleted it: nothing is written then.
    async fn fire_schedule(&self, fire: ScheduleFire) -> Result<bool, StoreError> {
        let _ = fire;
        Err(StoreError::SchedulesUnsupported)
    }

    /// The runs schedule `id` started, newest due time first, up to `limit`.
    async fn scheduled_runs(&self, id: &str, limit: u32) -> Result<Vec<ScheduledRun>, StoreError> {
        let _ = (id, limit);
        Err(StoreError::SchedulesUnsupported)
    }

    // ------------------------------------------------------------ the event log
    //
    // The defaults keep no log: events reach only the process that drives a run.
    // See the `event_log` module docs (re-exported types: [`LoggedEvent`],
    // [`EventRetention`]).

    /// Whether the store keeps an event log, so that run events reach subscribers
    /// in every process that shares it. `false` by default: the other `*_events`
    /// methods are then never called by the runtime.
    fn has_event_log(&self) -> bool {
        false
    }

    /// Appends `events`, written by runtime `origin`, to the log in one write, in
    /// order: their ids rise in this order, and above every id committed before.
    /// A store keeps ids in commit order, so that a reader that has read up to id N
    /// never later finds a new event below N.
    async fn append_events(&self, origin: &str, events: &[Arc<crate::RunEvent>]) -> Result<(), StoreError> {
        let _ = (origin, events);
        Ok(())
    }

    /// Up to `limit` events after id `after`, oldest first, of run `run` or of
    /// every run. Rows the store cannot read (an event kind of a newer version)
    /// are skipped.
    async fn read_events(&self, after: u64, run: Option<RunId>, limit: u32) -> Result<Vec<LoggedEvent>, StoreError> {
        let _ = (after, run, limit);
        Ok(Vec::new())
    }

    /// The id of the newest event in the log (0 when it is empty).
    async fn last_event_id(&self) -> Result<u64, StoreError> {
        Ok(0)
    }

    /// Returns when events after `after` may have been appended, or after `max`
    /// at the latest: at once on a notification (PostgreSQL's `LISTEN`), or after a
    /// short poll interval. Callers read with [`Store::read_events`] after it.
    async fn wait_events(&self, after: u64, max: std::time::Duration) -> Result<(), StoreError> {
        let _ = after;
        tokio::time::sleep(max).await;
        Ok(())
    }

    /// Deletes the events older than `retention.max_age` (by `now`) and all but the
    /// newest `retention.max_events`; returns how many it deleted.
    async fn prune_events(&self, now: Timestamp, retention: &EventRetention) -> Result<u64, StoreError> {
        let _ = (now, retention);
        Ok(0)
    }

    /// Records (or renews) that runtime `listener` follows events until `until`;
    /// drops listeners that expired.
    async fn listen_events(&self, listener: &str, until: Timestamp) -> Result<(), StoreError> {
        let _ = (listener, until);
        Ok(())
    }

    /// Removes listener `listener`.
    async fn unlisten_events(&self, listener: &str) -> Result<(), StoreError> {
        let _ = listener;
        Ok(())
    }

    /// Whether any listener, in any process, has not expired by `now`: whether
    /// runtimes should write their events to the log.
    async fn has_event_listeners(&self, now: Timestamp) -> Result<bool, StoreError> {
        let _ = now;
        Ok(false)
    }
}

/// A workflow a worker drives, for [`Store::claim_runnable`]: its name and the
/// versions of its runs the worker can drive or migrate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkflowVersions<'a> {
    /// The workflow's name.
    pub workflow: &'a str,
    /// The versions of its runs to claim.
    pub versions: &'a [u32],
}

impl<'a> WorkflowVersions<'a> {
    /// Runs of `workflow` of one of `versions`.
    pub fn new(workflow: &'a str, versions: &'a [u32]) -> Self {
        Self { workflow, versions }
    }

    /// Runs of `workflow` of version 1, the version of every workflow that does not
    /// name one.
    pub fn first(workflow: &'a str) -> Self {
        Self { workflow, versions: &[1] }
    }

    /// Whether `run` is of this workflow and one of these versions.
    pub fn matches(&self, workflow: &str, version: u32) -> bool {
        self.workflow == workflow && self.versions.contains(&version)
    }

    /// The JSON array the SQL stores compare against: one `"name:version"` string
    /// per version (unambiguous: the version, after the last `:`, is all digits).
    pub fn keys(workflows: &[Self]) -> Vec<String> {
        workflows.iter().flat_map(|w| w.versions.iter().map(move |v| format!("{}:{v}", w.workflow))).collect()
    }
}

/// The transition name of the step that migrates a run from version `from` of its
/// workflow to version `to`, as its history shows it: `migrate v1 -> v2`. A name no
/// transition method can have.
pub fn migration_step_name(from: u32, to: u32) -> String {
    format!("migrate v{from} -> v{to}")
}

/// The versions a step named by [`migration_step_name`] migrated between, or `None`
/// for any other step.
pub fn parse_migration_step(transition: &str) -> Option<(u32, u32)> {
    let (from, to) = transition.strip_prefix("migrate v")?.split_once(" -> v")?;
    Some((from.parse().ok()?, to.parse().ok()?))
}

/// The workflow version a run's state had after step `step`, read from its history:
/// the version the first migration after that step migrated from, or `current` when
/// no migration came after it.
pub fn version_at_step(history: &[StepRecord], step: u64, current: u32) -> u32 {
    history
        .iter()
        .filter(|s| s.step > step)
        .find_map(|s| parse_migration_step(&s.transition).map(|(from, _)| from))
        .unwrap_or(current)
}

/// The version of runs stored before versions were recorded.
fn first_version() -> u32 {
    1
}

/// The checks of a fenced write, shared by the stores: the run is not finished, its
/// epoch and step match.
pub fn check_fence(run_id: RunId, status: RunStatus, epoch: u64, step: u64, fence: Fence) -> Result<(), StoreError> {
    if status.is_finished() {
        return Err(StoreError::Finished { run_id, status });
    }
    if epoch != fence.epoch {
        return Err(StoreError::Fenced { run_id, epoch: fence.epoch, current: epoch });
    }
    if step != fence.step {
        return Err(StoreError::Conflict { run_id, expected: fence.step, found: step });
    }
    Ok(())
}

/// The reason stores record for a signal still pending when its run finishes.
pub const SIGNAL_OUTLIVED_RUN: &str = "the run ended before the signal was delivered";

/// Whether a worker may claim `run` at `now` ([`Store::claim_runnable`]), given
/// whether it has a pending signal.
pub fn is_runnable(run: &RunRecord, now: Timestamp, has_pending_signal: bool) -> bool {
    match run.status {
        RunStatus::Queued => true,
        RunStatus::Running => run.lease_until.is_some_and(|until| until <= now),
        RunStatus::Waiting => has_pending_signal || run.wake_at.is_some_and(|at| at <= now),
        _ => false,
    }
}

/// The checks of a claim, shared by the stores.
pub fn check_claim(run: &RunRecord, claim: &Claim) -> Result<(), StoreError> {
    if !claim.expect.contains(&run.status) {
        return Err(StoreError::InvalidStatus { run_id: run.run_id, status: run.status });
    }
    if let (RunStatus::Running, Some(now)) = (run.status, claim.lease_expired_at)
        && run.lease_until.is_some_and(|until| until > now)
    {
        return Err(StoreError::Leased {
            run_id: run.run_id,
            owner: run.lease_owner.clone().unwrap_or_default(),
            until: run.lease_until.unwrap_or(now),
        });
    }
    Ok(())
}
