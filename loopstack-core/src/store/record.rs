//! What the store keeps of a run: its id, status, record and summary, its steps.

use super::*;

/// A run's labels: names and values its starter gave it ([`NewRun::labels`]), kept
/// with the run for filters and accounting (a tenant; the conversation a protocol
/// started it in). Empty for most runs, which then pay nothing for them.
pub type Labels = std::collections::BTreeMap<String, String>;

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

    /// The id a caller's own key names: the same key gives the same id, so a caller
    /// that names its runs (an AG-UI thread, say) finds the run it started instead
    /// of starting another. A UUID of version 8 from a 128-bit FNV-1a hash of the
    /// key, like a child run's ([`child_run_id`](crate::children::child_run_id)): it names runs,
    /// it does not guard them (keys chosen to collide name one run; access to runs
    /// is the API's token's to guard), and it does not sort by time as
    /// [`RunId::new`]'s do.
    ///
    /// ```
    /// use loopstack_core::RunId;
    ///
    /// assert_eq!(RunId::from_key("ag-ui/support/thread-1"), RunId::from_key("ag-ui/support/thread-1"));
    /// assert_ne!(RunId::from_key("ag-ui/support/thread-1"), RunId::from_key("ag-ui/support/thread-2"));
    /// ```
    pub fn from_key(key: &str) -> Self {
        let mut hash = crate::fnv::Fnv1a::<u128>::default();
        hash.bytes(key.as_bytes());
        Self(
            uuid::Builder::from_bytes(hash.finish().to_be_bytes())
                .with_variant(uuid::Variant::RFC4122)
                .with_version(uuid::Version::Custom)
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
    /// Stopped by the workflow before a step a limit or a safety check forbids (an
    /// agent's turn, token, cost or tool-call budget, a model that repeats its
    /// calls), without an answer: [`RunRecord::error`] says why. Like a failed run
    /// it stands at its last checkpoint, so a retry after raising the limit takes
    /// that step again ([`RunContext::stop`](crate::RunContext::stop)).
    Stopped,
}

impl RunStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [Self; 7] =
        [Self::Queued, Self::Running, Self::Waiting, Self::Completed, Self::Failed, Self::Cancelled, Self::Stopped];

    /// The stable snake_case name, as stores write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Stopped => "stopped",
        }
    }

    /// Whether the run ended: completed, failed, cancelled or stopped.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled | Self::Stopped)
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
    /// The error that failed (or cancelled) the run, or why it stopped.
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
    /// When the run's holder took it ([`Store::claim`] or
    /// [`Store::claim_runnable`]); `None` for a run not claimed since it was created
    /// (one created running is held since [`created_at`](Self::created_at)). Read it
    /// beside [`lease_owner`](Self::lease_owner), while the run is running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_since: Option<Timestamp>,
    /// Whose lease the holder took the run over from, when its claim was a
    /// [takeover](Takeover) (the lease still named another holder); `None` for any
    /// other claim. [`Store::takeovers`] keeps every takeover; this is the last
    /// claim's, for the worker that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_from: Option<String>,
    /// What the run's starter labelled it with ([`NewRun::labels`]): a tenant, the
    /// conversation of a protocol that started it. Set at creation, never changed;
    /// a fork keeps its source's.
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
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
            held_since: self.held_since,
            taken_from: self.taken_from.clone(),
            labels: self.labels.clone(),
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
    /// The error that failed (or cancelled) the run, or why it stopped.
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
    /// When the run's holder took it ([`Store::claim`] or
    /// [`Store::claim_runnable`]); `None` for a run not claimed since it was created
    /// (one created running is held since [`created_at`](Self::created_at)). Read it
    /// beside [`lease_owner`](Self::lease_owner), while the run is running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_since: Option<Timestamp>,
    /// Whose lease the holder took the run over from, when its claim was a
    /// [takeover](Takeover) (the lease still named another holder); `None` for any
    /// other claim. [`Store::takeovers`] keeps every takeover; this is the last
    /// claim's, for the worker that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_from: Option<String>,
    /// What the run's starter labelled it with ([`NewRun::labels`]): a tenant, the
    /// conversation of a protocol that started it. Set at creation, never changed;
    /// a fork keeps its source's.
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
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
            held_since: self.held_since,
            taken_from: self.taken_from,
            labels: self.labels,
        }
    }
}

impl From<&RunRecord> for RunSummary {
    fn from(record: &RunRecord) -> Self {
        record.summary()
    }
}

/// A takeover of a run: a drive claimed it while another holder's lease still named
/// it (the holder died or hung, and its lease ran out; or `resume --take-over` took
/// it by hand). A lease given back ([`Store::release_lease`]) is no takeover.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Takeover {
    /// When the run was taken over (the claim's time).
    pub at: Timestamp,
    /// Who held it: the name in the lease that was taken over.
    pub from: String,
    /// Until when that lease held.
    pub lease_until: Timestamp,
    /// Who took it over, if its claim named a holder.
    pub by: Option<String>,
    /// The run's epoch from the takeover on.
    pub epoch: u64,
}

impl Takeover {
    /// A takeover at `at` from `from`, whose lease held until `lease_until`, by `by`,
    /// raising the run's epoch to `epoch`.
    pub fn new(at: Timestamp, from: impl Into<String>, lease_until: Timestamp, by: Option<String>, epoch: u64) -> Self {
        Self { at, from: from.into(), lease_until, by, epoch }
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
    /// The documents it starts with, saved at step 0 in the transaction that creates
    /// it ([`Workflow::on_create`](crate::Workflow::on_create)): each with its `seq`
    /// from 0 in order, and `step` 0.
    pub documents: Vec<Arc<Document>>,
    /// Its labels ([`RunRecord::labels`]).
    pub labels: Labels,
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
            documents: Vec::new(),
            labels: Labels::new(),
        }
    }

    /// Gives it the documents it starts with ([`NewRun::documents`]).
    #[must_use]
    pub fn documents(mut self, documents: Vec<Arc<Document>>) -> Self {
        self.documents = documents;
        self
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

    /// Labels it ([`RunRecord::labels`]).
    #[must_use]
    pub fn labels(mut self, labels: Labels) -> Self {
        self.labels = labels;
        self
    }

    /// Records the W3C `traceparent` its drives continue.
    #[must_use]
    pub fn trace_parent(mut self, traceparent: Option<String>) -> Self {
        self.trace_parent = traceparent;
        self
    }

    /// The record of the run as created: at step 0 and the start place, with
    /// `epoch` (raised by each claim; a store gives a run it creates running the
    /// epoch of its first claim) and `at` as its creation time. What a store's
    /// [`Store::create_run`] returns.
    pub fn into_record(self, epoch: u64, at: Timestamp) -> RunRecord {
        let lease_owner = self.lease.as_ref().map(|l| l.owner.clone());
        RunRecord {
            run_id: self.run_id,
            workflow: self.workflow,
            status: self.status,
            place: Cow::Borrowed(crate::START),
            step: 0,
            state: self.state,
            error: None,
            definition_hash: self.definition_hash,
            version: self.version,
            parent: self.parent,
            parent_signal: self.parent_signal,
            forked_from: None,
            epoch,
            signal_seq: 0,
            waiting_for: Vec::new(),
            place_since: at,
            wake_at: None,
            lease_owner,
            lease_until: self.lease.map(|l| l.until),
            created_at: at,
            updated_at: at,
            trace_parent: self.trace_parent,
            held_since: None,
            taken_from: None,
            labels: self.labels,
        }
    }
}
