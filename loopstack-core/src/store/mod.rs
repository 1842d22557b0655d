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
//! - **Finished is final.** A completed, failed or cancelled run takes no commit and no
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
mod time;

pub use event_log::{EventRetention, LoggedEvent, PRUNE_EVERY};
pub use memory::MemoryStore;
pub use time::Timestamp;

/// The id of a run: a UUID (version 7, so ids sort by creation time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub uuid::Uuid);

impl RunId {
    /// A new, unique id: the current Unix time in milliseconds, a 12-bit counter
    /// that keeps ids made in one process in creation order even within one
    /// millisecond, and 62 random bits.
    pub fn new() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        /// The last `millis << 12 | counter` handed out.
        static LAST: AtomicU64 = AtomicU64::new(0);
        let millis =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let now = millis << 12;
        // After 4,096 ids in one millisecond the clock part runs ahead a little: order
        // is kept, uniqueness never depends on it.
        let prev = LAST.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| Some(now.max(last + 1)));
        let stamp = now.max(prev.unwrap_or(0) + 1);
        let mut bytes = [0u8; 16];
        bytes[..6].copy_from_slice(&(stamp >> 12).to_be_bytes()[2..]);
        bytes[6..8].copy_from_slice(&((stamp & 0xfff) as u16).to_be_bytes());
        // The random bits come from a fast thread-local generator rather than the
        // operating system: a run id needs uniqueness, not secrecy, and a system call
        // per run is measurable in the overhead benchmark.
        bytes[8..].copy_from_slice(&fastrand::u64(..).to_le_bytes());
        Self(
            uuid::Builder::from_bytes(bytes)
                .with_variant(uuid::Variant::RFC4122)
                .with_version(uuid::Version::SortRand)
                .into_uuid(),
        )
    }
}

impl Default for RunId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::str::FromStr for RunId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Self)
    }
}

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunStatus {
    /// Created, not yet driven: a worker will claim it.
    Queued,
    /// Being driven (or it was, when its driver died: resume it).
    Running,
    /// Parked at a place until a signal arrives; held by no task.
    Waiting,
    /// Reached `end`.
    Completed,
    /// Stopped with an error; the state is that of the last checkpoint.
    Failed,
    /// Cancelled by its caller.
    Cancelled,
}

impl RunStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [Self; 6] =
        [Self::Queued, Self::Running, Self::Waiting, Self::Completed, Self::Failed, Self::Cancelled];

    /// The stable snake_case name, as stores write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the run ended: completed, failed or cancelled.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunStatus {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self, StoreError> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown run status `{s}`")))
    }
}

/// One transition a run took: a row of its history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step number, from 1.
    pub step: u64,
    /// The transition method's name.
    pub transition: Cow<'static, str>,
    /// The place it left.
    pub from: Cow<'static, str>,
    /// The place it reached.
    pub to: Cow<'static, str>,
    /// When it was committed.
    pub at: Timestamp,
}

impl StepRecord {
    /// A record of one step, committed now by the system clock.
    pub fn new(
        step: u64,
        transition: impl Into<Cow<'static, str>>,
        from: impl Into<Cow<'static, str>>,
        to: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self::at(step, transition, from, to, Timestamp::now())
    }

    /// A record of one step, committed at `at`: the runtime commits its steps at
    /// the time of its own clock ([`Runtime::clock`](crate::Runtime::clock)).
    pub fn at(
        step: u64,
        transition: impl Into<Cow<'static, str>>,
        from: impl Into<Cow<'static, str>>,
        to: impl Into<Cow<'static, str>>,
        at: Timestamp,
    ) -> Self {
        Self { step, transition: transition.into(), from: from.into(), to: to.into(), at }
    }
}

/// A stored checkpoint: a step and the state it left the run in.
#[derive(Debug, Clone)]
pub struct CheckpointRecord {
    /// The step (step 0 is the run's initial state, transition `""`).
    pub step: StepRecord,
    /// The workflow state after the step, as JSON.
    pub state: Box<RawValue>,
}

/// A run as the store keeps it: one narrow row, rewritten by each commit. The
/// growing data (checkpoints, documents, signals) lives in append-only records
/// read with their own methods.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's id.
    pub run_id: RunId,
    /// The workflow's name.
    pub workflow: Cow<'static, str>,
    /// Where the run stands.
    pub status: RunStatus,
    /// The place of the last checkpoint.
    pub place: Cow<'static, str>,
    /// How many transitions the run has taken.
    pub step: u64,
    /// The workflow state of the last checkpoint, as JSON.
    pub state: Box<RawValue>,
    /// The error that failed (or cancelled) the run.
    pub error: Option<String>,
    /// The hash of the transition table the run was started (or last driven) with:
    /// [`Definition::hash`](crate::Definition::hash).
    pub definition_hash: Cow<'static, str>,
    /// The version of its workflow the run was started under, or migrated to last
    /// ([`Definition::version`](crate::Definition::version)); 1 for runs stored
    /// before versions were recorded.
    #[serde(default = "first_version")]
    pub version: u32,
    /// The run that started this one, for child runs.
    pub parent: Option<RunId>,
    /// The signal this child run sends its parent when it finishes (the wait
    /// transition of the parent that takes the child's result), as
    /// [`NewRun::child_of`] recorded it. The store only keeps it: the runtime sends
    /// it, through [`Checkpoint::notify`] or the `notify` of [`Store::set_status`].
    pub parent_signal: Option<Cow<'static, str>>,
    /// The run and step this one was forked from.
    pub forked_from: Option<(RunId, u64)>,
    /// The fencing token: raised by every [claim](Store::claim).
    pub epoch: u64,
    /// How many signals the run has received in all.
    pub signal_seq: u64,
    /// The signals (wait transitions) the run accepts while waiting.
    pub waiting_for: Vec<String>,
    /// When the run reached its place: the time its timer transitions count from.
    pub place_since: Timestamp,
    /// While waiting: when its first timer transition is due.
    pub wake_at: Option<Timestamp>,
    /// Who holds the run while it is driven, if it holds a lease.
    pub lease_owner: Option<String>,
    /// Until when that lease holds; a worker may take over a running run after it.
    pub lease_until: Option<Timestamp>,
    /// When the run was created.
    pub created_at: Timestamp,
    /// When the run row last changed.
    pub updated_at: Timestamp,
    /// The W3C `traceparent` of the span that created the run, which every drive of
    /// it continues (feature `otel` of the runtime); `None` for a run created
    /// outside a trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
}

impl RunRecord {
    /// The fence of this run as loaded: its epoch and step.
    pub fn fence(&self) -> Fence {
        Fence { epoch: self.epoch, step: self.step }
    }

    /// The run as a listing shows it, without its state.
    pub fn summary(&self) -> RunSummary {
        RunSummary {
            run_id: self.run_id,
            workflow: self.workflow.clone(),
            status: self.status,
            place: self.place.clone(),
            step: self.step,
            error: self.error.clone(),
            definition_hash: self.definition_hash.clone(),
            version: self.version,
            parent: self.parent,
            parent_signal: self.parent_signal.clone(),
            forked_from: self.forked_from,
            epoch: self.epoch,
            signal_seq: self.signal_seq,
            waiting_for: self.waiting_for.clone(),
            place_since: self.place_since,
            wake_at: self.wake_at,
            lease_owner: self.lease_owner.clone(),
            lease_until: self.lease_until,
            created_at: self.created_at,
            updated_at: self.updated_at,
            trace_parent: self.trace_parent.clone(),
        }
    }
}

/// A run as [`Store::list_runs`] lists it: its [`RunRecord`] without the state.
///
/// A listing reads the run rows alone, so it answers however large, and whatever,
/// the listed runs' states are (one that cannot be read fails only the reads of that
/// run: [`Store::load_run`], [`Store::checkpoint`]). Read the state of a listed run
/// with [`Store::load_run`] or [`Store::checkpoint`] at its `step`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSummary {
    /// The run's id.
    pub run_id: RunId,
    /// The workflow's name.
    pub workflow: Cow<'static, str>,
    /// Where the run stands.
    pub status: RunStatus,
    /// The place of the last checkpoint.
    pub place: Cow<'static, str>,
    /// How many transitions the run has taken.
    pub step: u64,
    /// The error that failed (or cancelled) the run.
    pub error: Option<String>,
    /// The hash of the transition table the run was started (or last driven) with.
    pub definition_hash: Cow<'static, str>,
    /// The version of its workflow the run was started under, or migrated to last.
    #[serde(default = "first_version")]
    pub version: u32,
    /// The run that started this one, for child runs.
    pub parent: Option<RunId>,
    /// The signal this child run sends its parent when it finishes
    /// ([`RunRecord::parent_signal`]).
    pub parent_signal: Option<Cow<'static, str>>,
    /// The run and step this one was forked from.
    pub forked_from: Option<(RunId, u64)>,
    /// The fencing token: raised by every [claim](Store::claim).
    pub epoch: u64,
    /// How many signals the run has received in all.
    pub signal_seq: u64,
    /// The signals (wait transitions) the run accepts while waiting.
    pub waiting_for: Vec<String>,
    /// When the run reached its place.
    pub place_since: Timestamp,
    /// While waiting: when its first timer transition is due.
    pub wake_at: Option<Timestamp>,
    /// Who holds the run while it is driven, if it holds a lease.
    pub lease_owner: Option<String>,
    /// Until when that lease holds.
    pub lease_until: Option<Timestamp>,
    /// When the run was created.
    pub created_at: Timestamp,
    /// When the run row last changed.
    pub updated_at: Timestamp,
    /// The W3C `traceparent` of the span that created the run, which every drive of
    /// it continues (feature `otel` of the runtime); `None` for a run created
    /// outside a trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
}

impl RunSummary {
    /// The fence of this run as listed: its epoch and step.
    pub fn fence(&self) -> Fence {
        Fence { epoch: self.epoch, step: self.step }
    }

    /// The full record, with the state of the run's latest checkpoint: what a store
    /// that reads the two apart returns from [`Store::load_run`].
    pub fn with_state(self, state: Box<RawValue>) -> RunRecord {
        RunRecord {
            run_id: self.run_id,
            workflow: self.workflow,
            status: self.status,
            place: self.place,
            step: self.step,
            state,
            error: self.error,
            definition_hash: self.definition_hash,
            version: self.version,
            parent: self.parent,
            parent_signal: self.parent_signal,
            forked_from: self.forked_from,
            epoch: self.epoch,
            signal_seq: self.signal_seq,
            waiting_for: self.waiting_for,
            place_since: self.place_since,
            wake_at: self.wake_at,
            lease_owner: self.lease_owner,
            lease_until: self.lease_until,
            created_at: self.created_at,
            updated_at: self.updated_at,
            trace_parent: self.trace_parent,
        }
    }
}

impl From<&RunRecord> for RunSummary {
    fn from(record: &RunRecord) -> Self {
        record.summary()
    }
}

/// A run to create.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NewRun {
    /// The run's id.
    pub run_id: RunId,
    /// The workflow's name.
    pub workflow: Cow<'static, str>,
    /// The hash of the workflow's transition table.
    pub definition_hash: Cow<'static, str>,
    /// The version of the workflow it starts under (1 unless [`NewRun::version`] says).
    pub version: u32,
    /// The initial state, as JSON.
    pub state: Box<RawValue>,
    /// [`RunStatus::Running`] for a run its creator drives at once (epoch 1), or
    /// [`RunStatus::Queued`] for one a worker will claim (epoch 0).
    pub status: RunStatus,
    /// The parent run, for child runs.
    pub parent: Option<RunId>,
    /// The signal the child sends its parent when it finishes, for child runs.
    pub parent_signal: Option<Cow<'static, str>>,
    /// The lease the creator holds while it drives.
    pub lease: Option<Lease>,
    /// The W3C `traceparent` its drives continue ([`RunRecord::trace_parent`]).
    pub trace_parent: Option<String>,
}

impl NewRun {
    /// A run that its creator drives at once.
    pub fn new(
        run_id: RunId,
        workflow: impl Into<Cow<'static, str>>,
        definition_hash: impl Into<Cow<'static, str>>,
        state: Box<RawValue>,
    ) -> Self {
        Self {
            run_id,
            workflow: workflow.into(),
            definition_hash: definition_hash.into(),
            version: 1,
            state,
            status: RunStatus::Running,
            parent: None,
            parent_signal: None,
            lease: None,
            trace_parent: None,
        }
    }

    /// Starts it under version `version` of its workflow.
    #[must_use]
    pub fn version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Makes it a queued run, for a worker to claim.
    #[must_use]
    pub fn queued(mut self) -> Self {
        self.status = RunStatus::Queued;
        self
    }

    /// Records its parent run.
    #[must_use]
    pub fn parent(mut self, parent: RunId) -> Self {
        self.parent = Some(parent);
        self
    }

    /// Makes it a child of `parent` that, when it finishes, tells its parent with
    /// the signal `signal` ([`RunRecord::parent_signal`]).
    #[must_use]
    pub fn child_of(mut self, parent: RunId, signal: impl Into<Cow<'static, str>>) -> Self {
        self.parent = Some(parent);
        self.parent_signal = Some(signal.into());
        self
    }

    /// Sets the creator's lease.
    #[must_use]
    pub fn lease(mut self, lease: Lease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Records the W3C `traceparent` its drives continue.
    #[must_use]
    pub fn trace_parent(mut self, traceparent: Option<String>) -> Self {
        self.trace_parent = traceparent;
        self
    }
}

/// A driver's hold on a run: who, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The holder, such as a worker's id.
    pub owner: String,
    /// When the lease runs out unless renewed.
    pub until: Timestamp,
}

/// What a write of a drive must match in the stored run: the epoch of its claim and
/// the step it last committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// The epoch of the drive's claim.
    pub epoch: u64,
    /// The step the run is at.
    pub step: u64,
}

/// What [`Store::park`] writes.
#[derive(Debug, Clone, Copy)]
pub struct Park<'a> {
    /// The drive's fence.
    pub fence: Fence,
    /// The inbox count the driver read.
    pub inbox_seq: u64,
    /// The signals the run waits for.
    pub signals: &'a [&'a str],
    /// When its first timer is due, if it has one.
    pub wake_at: Option<Timestamp>,
}

/// A request to drive a run, for [`Store::claim`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Claim {
    /// The statuses the run may be in; anything else is [`StoreError::InvalidStatus`].
    pub expect: Vec<RunStatus>,
    /// The lease to take, if any.
    pub lease: Option<Lease>,
    /// When set, a running run is claimed only if its lease ran out before this
    /// time (workers); when unset, the claim takes a running run over (an explicit
    /// resume after a crash), and fencing stops the old driver.
    pub lease_expired_at: Option<Timestamp>,
}

impl Claim {
    /// A claim of a run in one of `expect`, without a lease.
    pub fn new(expect: impl Into<Vec<RunStatus>>) -> Self {
        Self { expect: expect.into(), lease: None, lease_expired_at: None }
    }

    /// Takes a lease.
    #[must_use]
    pub fn lease(mut self, lease: Lease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Claims a running run only if its lease ran out before `now`.
    #[must_use]
    pub fn only_expired(mut self, now: Timestamp) -> Self {
        self.lease_expired_at = Some(now);
        self
    }
}

/// What one transition commits, all or nothing.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The run.
    pub run_id: RunId,
    /// The drive's epoch and the step before this one; the store refuses a stale one.
    pub fence: Fence,
    /// The transition taken; its `step` is `fence.step + 1`.
    pub transition: StepRecord,
    /// The status after the step: running, or completed at `end`.
    pub status: RunStatus,
    /// The state after the step, as JSON.
    pub state: Box<RawValue>,
    /// The documents the transition saved, in order (new documents and new versions).
    pub documents: Vec<Arc<Document>>,
    /// The inbox signal this transition delivered, for a wait transition.
    pub signal: Option<u64>,
    /// The drive's lease, renewed by the commit.
    pub lease_until: Option<Timestamp>,
    /// A signal for another run, such as a finishing child's for its parent, put in
    /// that run's inbox in the same transaction as the commit ([`OutSignal`]): both
    /// are written, or, when the commit is refused, neither.
    pub notify: Option<OutSignal>,
    /// For the step that migrates a run to another version of its workflow: the
    /// version and table hash the run row takes with the commit.
    pub migration: Option<Migrated>,
}

/// A fork's first step of its own, written by [`Store::fork`] in the transaction
/// that copies the source, so that a fork never exists without it: how the runtime
/// stores a fork's edits (transition [`FORK_TRANSITION`](crate::fork::FORK_TRANSITION),
/// from the checkpoint's place to the same place, with the edited state and the
/// [`FORK_DOCUMENT`](crate::fork::FORK_DOCUMENT) that records the edits).
///
/// It is written as a [`Checkpoint`] of the new run would be (at epoch 1, status
/// running), without a fence to check: the run is new.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ForkStep {
    /// The step; its `step` is the forked step plus one.
    pub transition: StepRecord,
    /// The fork's state after the step, as JSON.
    pub state: Box<RawValue>,
    /// The documents the step saves, numbered after the ones the fork copies.
    pub documents: Vec<Arc<Document>>,
    /// The version and table the step moves the fork to, when the forked step is of
    /// an older version than the workflow's (a fork from before its source's
    /// migration): the fork is then never stored at a version its state is not of.
    pub migration: Option<Migrated>,
}

impl ForkStep {
    /// A first step with its state, saving no documents.
    pub fn new(transition: StepRecord, state: Box<RawValue>) -> Self {
        Self { transition, state, documents: Vec::new(), migration: None }
    }

    /// Moves the fork to `migrated`'s version and table with the step.
    #[must_use]
    pub fn migrate(mut self, migrated: Migrated) -> Self {
        self.migration = Some(migrated);
        self
    }

    /// Saves `document` with the step.
    #[must_use]
    pub fn document(mut self, document: Arc<Document>) -> Self {
        self.documents.push(document);
        self
    }
}

/// The version and table a run moves to with a migration's commit
/// ([`Checkpoint::migration`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// The version the run is of after the commit.
    pub version: u32,
    /// The hash of that version's table.
    pub definition_hash: Cow<'static, str>,
}

impl Checkpoint {
    /// A checkpoint of one transition.
    pub fn new(run_id: RunId, fence: Fence, transition: StepRecord, status: RunStatus, state: Box<RawValue>) -> Self {
        Self {
            run_id,
            fence,
            transition,
            status,
            state,
            documents: Vec::new(),
            signal: None,
            lease_until: None,
            notify: None,
            migration: None,
        }
    }

    /// Moves the run to another version of its workflow with the commit
    /// ([`Checkpoint::migration`]).
    #[must_use]
    pub fn migrate(mut self, migrated: Migrated) -> Self {
        self.migration = Some(migrated);
        self
    }

    /// Sends `signal` to another run with the commit ([`Checkpoint::notify`]).
    #[must_use]
    pub fn notify(mut self, signal: OutSignal) -> Self {
        self.notify = Some(signal);
        self
    }

    /// The step being written.
    pub fn step(&self) -> u64 {
        self.transition.step
    }
}

/// A signal that a write sends to another run's inbox, in the same transaction as
/// the write: how a child run tells its parent that it finished, so that a crash
/// between the two can never lose the news.
///
/// Set as [`Checkpoint::notify`] or passed to [`Store::set_status`]. The store puts
/// it in the inbox of `run_id` exactly as [`Store::send_signal`] would (the next
/// inbox id, the run's [`signal_seq`](RunRecord::signal_seq) raised, so a waiting run
/// becomes claimable and a driver that parks it over the old count gets
/// [`StoreError::SignalArrived`]), or not at all when the write is refused. A target
/// that is finished (completed, failed or cancelled) or does not exist drops the
/// signal silently, and the write still succeeds: a parent that ended has nothing to
/// wait for.
#[derive(Debug, Clone)]
pub struct OutSignal {
    /// The run whose inbox receives it, such as the parent.
    pub run_id: RunId,
    /// The wait transition it names.
    pub name: Cow<'static, str>,
    /// Its payload, as JSON.
    pub payload: Box<RawValue>,
}

impl OutSignal {
    /// A signal `name` with `payload` for run `run_id`.
    pub fn new(run_id: RunId, name: impl Into<Cow<'static, str>>, payload: Box<RawValue>) -> Self {
        Self { run_id, name: name.into(), payload }
    }
}

/// Where a signal in a run's inbox stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
#[non_exhaustive]
pub enum SignalStatus {
    /// Received, not yet acted on.
    Pending,
    /// Fired its wait transition, committed as `step`.
    Delivered {
        /// The step that delivered it.
        step: u64,
    },
    /// Refused, with the reason; the run went on as if it had not arrived.
    Rejected {
        /// Why.
        reason: String,
    },
}

/// A signal in a run's inbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SignalRecord {
    /// Its number in the run's inbox, from 1, in order of arrival.
    pub id: u64,
    /// The wait transition it names.
    pub name: String,
    /// Its payload, as JSON.
    pub payload: Box<RawValue>,
    /// Where it stands.
    pub status: SignalStatus,
    /// When it arrived.
    pub received_at: Timestamp,
}

/// A run's pending signals and its signal count when they were read, for
/// [`Store::park`].
#[derive(Debug, Clone, Default)]
pub struct Inbox {
    /// The pending signals, oldest first.
    pub pending: Vec<SignalRecord>,
    /// The run's [`signal_seq`](RunRecord::signal_seq) at the read.
    pub seq: u64,
}

/// What [`Store::send_signal`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalReceipt {
    /// The signal's id in the run's inbox.
    pub id: u64,
    /// The run's status when the signal was stored.
    pub status: RunStatus,
}

/// A filter over runs, for [`Store::list_runs`]: newest first, a page at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunQuery {
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// Only runs in one of these statuses (any when empty).
    pub status: Vec<RunStatus>,
    /// Only runs at this place.
    pub place: Option<String>,
    /// Only children of this run.
    pub parent: Option<RunId>,
    /// Only runs created at or after this time.
    pub created_after: Option<Timestamp>,
    /// Only runs created before this time.
    pub created_before: Option<Timestamp>,
    /// Only runs older than this one (the previous page's [`RunPage::next`]).
    pub before: Option<RunId>,
    /// The page size, 1 to 1,000 (50 by default).
    pub limit: u32,
}

impl Default for RunQuery {
    fn default() -> Self {
        Self {
            workflow: None,
            status: Vec::new(),
            place: None,
            parent: None,
            created_after: None,
            created_before: None,
            before: None,
            limit: 50,
        }
    }
}

impl RunQuery {
    /// Every run, 50 a page.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only runs of `workflow`.
    #[must_use]
    pub fn workflow(mut self, workflow: impl Into<String>) -> Self {
        self.workflow = Some(workflow.into());
        self
    }

    /// Only runs in `status` (call again to allow several).
    #[must_use]
    pub fn status(mut self, status: RunStatus) -> Self {
        self.status.push(status);
        self
    }

    /// Only runs at `place`.
    #[must_use]
    pub fn place(mut self, place: impl Into<String>) -> Self {
        self.place = Some(place.into());
        self
    }

    /// Only children of `parent`.
    #[must_use]
    pub fn parent(mut self, parent: RunId) -> Self {
        self.parent = Some(parent);
        self
    }

    /// Only runs created in `[after, before)`.
    #[must_use]
    pub fn created_between(mut self, after: Option<Timestamp>, before: Option<Timestamp>) -> Self {
        self.created_after = after;
        self.created_before = before;
        self
    }

    /// The page after the one that returned `next`.
    #[must_use]
    pub fn before(mut self, next: RunId) -> Self {
        self.before = Some(next);
        self
    }

    /// The page size, clamped to 1..=1000.
    #[must_use]
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// The page size as stores apply it.
    pub fn page_size(&self) -> u32 {
        self.limit.clamp(1, 1000)
    }

    /// Whether `run` passes the filter (the paging cursor aside); what every store's
    /// query must agree with.
    pub fn matches(&self, run: &RunRecord) -> bool {
        self.workflow.as_ref().is_none_or(|w| *w == run.workflow)
            && (self.status.is_empty() || self.status.contains(&run.status))
            && self.place.as_ref().is_none_or(|p| *p == run.place)
            && self.parent.is_none_or(|p| run.parent == Some(p))
            && self.created_after.is_none_or(|t| run.created_at >= t)
            && self.created_before.is_none_or(|t| run.created_at < t)
    }
}

/// One page of runs, newest first.
#[derive(Debug, Clone)]
pub struct RunPage {
    /// The runs, without their states.
    pub runs: Vec<RunSummary>,
    /// Pass to [`RunQuery::before`] for the next page; `None` on the last.
    pub next: Option<RunId>,
}

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

    /// Ends a drive without a transition: failed or cancelled with `error`, or
    /// running / queued to hand the run on. Refused like [`Store::commit`]. A run that
    /// becomes finished has its pending signals rejected.
    ///
    /// With `notify` (a failed or cancelled child telling its parent), the signal is
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
    /// `now`, earliest due first. Reading them takes nothing: a worker then fires
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

    /// Moves a due schedule on, all or nothing: only if it is not paused and its
    /// next due time is still `fire.due` (a compare-and-set), sets it to
    /// `fire.next_due` (or pauses it, when that is `None`), records `fire.error`,
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
