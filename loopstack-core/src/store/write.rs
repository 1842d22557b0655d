//! What a drive writes: claims, leases, fences, checkpoints, a fork's first step.

use super::*;

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
/// that is finished (completed, failed, cancelled or stopped) or does not exist drops the
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
