//! Error types of the core crate.

use crate::{RunId, RunStatus, Timestamp};

/// A boxed error, the error type of transitions and the source of many typed errors.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with [`BoxError`] as its default error, the return type of transition methods.
///
/// Both parameters have defaults, so `Result` alone means `Result<(), BoxError>`.
pub type Result<T = (), E = BoxError> = std::result::Result<T, E>;

/// Why a [`Store`](crate::Store) operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No run with this id exists in the store.
    #[error("run {0} not found")]
    RunNotFound(RunId),
    /// A run with this id already exists.
    #[error("run {0} already exists")]
    RunExists(RunId),
    /// Another writer moved this run on first (optimistic concurrency).
    #[error("run {run_id} was moved on by another writer: expected it at step {expected}, found step {found}")]
    Conflict {
        /// The run.
        run_id: RunId,
        /// The step the writer expected the stored run to be at.
        expected: u64,
        /// The step the store holds.
        found: u64,
    },
    /// The run was claimed by another drive since this one claimed it: this drive's
    /// writes are refused (a fencing token).
    #[error(
        "run {run_id} was taken over by another driver: this drive holds epoch {epoch}, the run is at epoch {current}"
    )]
    Fenced {
        /// The run.
        run_id: RunId,
        /// The epoch the writer holds.
        epoch: u64,
        /// The run's epoch in the store.
        current: u64,
    },
    /// The run is completed, failed, cancelled or stopped and takes no more writes.
    #[error("run {run_id} is {status} and takes no more writes")]
    Finished {
        /// The run.
        run_id: RunId,
        /// Its final status.
        status: RunStatus,
    },
    /// A claim expected the run in another status.
    #[error("run {run_id} is {status}")]
    InvalidStatus {
        /// The run.
        run_id: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// A worker's claim found the run leased by a live driver.
    #[error("run {run_id} is leased by `{owner}` until {until}")]
    Leased {
        /// The run.
        run_id: RunId,
        /// The lease's holder.
        owner: String,
        /// When the lease runs out.
        until: Timestamp,
    },
    /// A signal arrived after the driver read the inbox; it must read it again.
    #[error("a signal arrived for run {run_id} while it was parking")]
    SignalArrived {
        /// The run.
        run_id: RunId,
    },
    /// No pending signal with this id is in the run's inbox.
    #[error("run {run_id} has no pending signal {signal}")]
    SignalNotFound {
        /// The run.
        run_id: RunId,
        /// The signal's id.
        signal: u64,
    },
    /// The run has no checkpoint at this step.
    #[error("run {run_id} has no checkpoint at step {step}")]
    CheckpointNotFound {
        /// The run.
        run_id: RunId,
        /// The step asked for.
        step: u64,
    },
    /// No schedule with this id exists in the store.
    #[error("schedule `{0}` not found")]
    ScheduleNotFound(String),
    /// A schedule with this id already exists.
    #[error("schedule `{0}` already exists")]
    ScheduleExists(String),
    /// The store keeps no schedules (a store of your own that does not implement
    /// the `*_schedule` methods of [`Store`](crate::Store)).
    #[error("this store keeps no schedules")]
    SchedulesUnsupported,
    /// The store holds data it cannot read (a wrong status name, a bad id).
    #[error("store data is corrupt: {0}")]
    Corrupt(String),
    /// The backend failed (connection, query, serialization).
    #[error("store backend error: {0}")]
    Backend(#[source] BoxError),
}

impl StoreError {
    /// Whether the error means another drive owns the run now (a lost race, a
    /// takeover): this drive stops without recording anything.
    pub fn is_lost_run(&self) -> bool {
        matches!(self, Self::Conflict { .. } | Self::Fenced { .. } | Self::Finished { .. })
    }
}

/// Why a run stopped with an error.
///
/// Every variant names the workflow and the run; a failed run is recorded in the
/// [`Store`](crate::Store) with its last committed state, so nothing the run did
/// before the failure is lost.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// No transition is enabled at a place that is not `end`, and none waits for a signal.
    #[error(
        "workflow `{workflow}` (run {run_id}) is at a dead end in place `{place}`: no transition is enabled{}",
        fmt_guards(.false_guards)
    )]
    DeadEnd {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The place the run is stuck in.
        place: &'static str,
        /// The guards that were evaluated and returned `false`.
        false_guards: Vec<&'static str>,
    },
    /// The run took more transitions than its step limit allows.
    #[error("workflow `{workflow}` (run {run_id}) exceeded its limit of {limit} transitions at place `{place}`")]
    StepLimit {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The limit that was reached.
        limit: u64,
        /// The place the run was in.
        place: &'static str,
    },
    /// A transition method returned an error. The run keeps the state of its last checkpoint.
    #[error("workflow `{workflow}` (run {run_id}): transition `{transition}` from place `{place}` failed: {source}")]
    Transition {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The transition method.
        transition: &'static str,
        /// The place the transition started from.
        place: &'static str,
        /// What the transition returned.
        #[source]
        source: BoxError,
    },
    /// The run was cancelled; it stopped at the place of its last checkpoint.
    #[error("workflow `{workflow}` (run {run_id}) was cancelled at place `{place}`")]
    Cancelled {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The place of the last checkpoint.
        place: &'static str,
    },
    /// A signal named no wait transition enabled at the run's place.
    #[error(
        "workflow `{workflow}` (run {run_id}) waits at place `{place}` for one of [{}], not for signal `{signal}`",
        .expected.join(", ")
    )]
    UnknownSignal {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The place the run waits in.
        place: &'static str,
        /// The signal that was sent.
        signal: String,
        /// The wait transitions that are enabled.
        expected: Vec<&'static str>,
    },
    /// A signal's payload did not deserialize, or (sent by name:
    /// [`Runtime::signal_by_name`](crate::Runtime::signal_by_name), the HTTP API) does
    /// not fit the JSON Schema its wait transition publishes; nothing was stored and
    /// the run is still waiting.
    #[error(
        "workflow `{workflow}` (run {run_id}): payload of signal `{signal}` is invalid: {reason}; the run is still waiting"
    )]
    InvalidSignalPayload {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The signal (wait transition) name.
        signal: &'static str,
        /// What was wrong with the payload.
        reason: String,
    },
    /// The run cannot be driven: it already ended, or it is not waiting for a signal.
    #[error("workflow `{workflow}` (run {run_id}) is {status} and cannot {action}")]
    InvalidStatus {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The run's status.
        status: crate::RunStatus,
        /// What was attempted.
        action: &'static str,
    },
    /// A run's input, given as JSON (a run started by name, a child started by a
    /// tool), does not read as the workflow's input type.
    #[error("the input of workflow `{workflow}` is invalid: {source}")]
    Input {
        /// The workflow's name.
        workflow: &'static str,
        /// Why it does not read.
        #[source]
        source: serde_json::Error,
    },
    /// [`Workflow::on_create`](crate::Workflow::on_create) failed: no run was created.
    #[error("workflow `{workflow}` could not create run {run_id}: {source}")]
    Create {
        /// The workflow's name.
        workflow: &'static str,
        /// The run it would have created.
        run_id: RunId,
        /// What `on_create` returned.
        #[source]
        source: BoxError,
    },
    /// No workflow of this name is registered with the runtime.
    #[error("no workflow named `{workflow}` is registered; registered: {}", if .registered.is_empty() { "none".to_owned() } else { .registered.join(", ") })]
    UnknownWorkflow {
        /// The name asked for.
        workflow: String,
        /// The names registered.
        registered: Vec<&'static str>,
    },
    /// The stored run belongs to another workflow, or names a place this workflow lacks.
    #[error("run {run_id} cannot be driven by workflow `{workflow}`: {reason}")]
    Mismatch {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// What does not match.
        reason: String,
    },
    /// The workflow state could not be serialized or deserialized.
    #[error("workflow `{workflow}` (run {run_id}): state (de)serialization failed: {source}")]
    State {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// The state cannot be checkpointed so that it reads back as it was: it holds a
    /// float that is NaN or infinite (JSON has no such number; serde_json writes it as
    /// `null`), arrays and objects nested more than 127 levels deep (serde_json
    /// reads no deeper), or an object that holds one key twice (a field and a
    /// flattened map holding the same key: serde_json writes both, a struct refuses
    /// them when read). Nothing that cannot be loaded is committed: after a
    /// transition, the run keeps its last checkpoint, the transition's documents are
    /// discarded and the run is failed; the initial state of a new run is refused
    /// before the run is created.
    #[error("workflow `{workflow}` (run {run_id}): {} cannot be stored: {reason}", fmt_after(*.after))]
    UnstorableState {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The transition that left the state, or `None` for the initial state.
        after: Option<&'static str>,
        /// What is wrong with it.
        reason: String,
    },
    /// The run stands at a place the workflow no longer has: its transition table
    /// changed since the run was started.
    #[error(
        "run {run_id} stands at place `{place}`, which workflow `{workflow}` no longer has: the run was started with \
         transition table {stored_hash}, this build has {current_hash}"
    )]
    DefinitionChanged {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The stored place.
        place: String,
        /// The hash stored with the run.
        stored_hash: String,
        /// The hash of this build's table.
        current_hash: String,
    },
    /// The run is of a version of its workflow that this build neither drives nor
    /// migrates from (a newer build's run, or an older one without a migration):
    /// nothing was changed, and a worker of this build never claims it.
    #[error(
        "run {run_id} of workflow `{workflow}` is of version {version}, which this build cannot drive: it drives \
         version {current}{}",
        fmt_migrates(migrates_from)
    )]
    UnsupportedVersion {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The run's version.
        version: u32,
        /// The version this build drives.
        current: u32,
        /// The versions this build migrates runs from.
        migrates_from: &'static [u32],
    },
    /// The migration of a run from an older version of its workflow failed: it
    /// returned an error, panicked, or the stored state or place did not read as the
    /// older version's. The run keeps its stored state, place and version.
    #[error(
        "run {run_id} of workflow `{workflow}` could not be migrated from version {from} to version {to}: {reason}"
    )]
    Migration {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The run's version.
        from: u32,
        /// The version it was migrated to.
        to: u32,
        /// Why it failed.
        reason: String,
    },
    /// A guard panicked while the run was routed at `place`; the run keeps its last
    /// checkpoint and is marked failed.
    #[error("workflow `{workflow}` (run {run_id}): a guard panicked at place `{place}`: {message}")]
    GuardPanicked {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The place being routed.
        place: &'static str,
        /// The panic's message.
        message: String,
    },
    /// A wait transition refused its signal by returning an error; the run is still
    /// waiting and the signal is recorded as rejected.
    #[error("workflow `{workflow}` (run {run_id}): signal `{signal}` was refused: {source}; the run is still waiting")]
    SignalRefused {
        /// The workflow's name.
        workflow: &'static str,
        /// The run.
        run_id: RunId,
        /// The signal (wait transition) name.
        signal: &'static str,
        /// What the transition returned.
        #[source]
        source: BoxError,
    },
    /// A fork was refused before anything was stored ([`Runtime::fork_with`](crate::Runtime::fork_with)).
    #[error("the fork was refused: {0}")]
    Fork(#[from] crate::fork::ForkError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn fmt_after(after: Option<&'static str>) -> String {
    match after {
        Some(t) => format!("the state left by transition `{t}`"),
        None => "the initial state".to_owned(),
    }
}

fn fmt_guards(guards: &[&'static str]) -> String {
    if guards.is_empty() { String::new() } else { format!(" (guards that were false: {})", guards.join(", ")) }
}

impl RunError {
    /// The run this error belongs to, when it names one.
    pub fn run_id(&self) -> Option<RunId> {
        match self {
            Self::DeadEnd { run_id, .. }
            | Self::StepLimit { run_id, .. }
            | Self::Transition { run_id, .. }
            | Self::Cancelled { run_id, .. }
            | Self::UnknownSignal { run_id, .. }
            | Self::InvalidSignalPayload { run_id, .. }
            | Self::InvalidStatus { run_id, .. }
            | Self::Mismatch { run_id, .. }
            | Self::DefinitionChanged { run_id, .. }
            | Self::UnsupportedVersion { run_id, .. }
            | Self::Migration { run_id, .. }
            | Self::GuardPanicked { run_id, .. }
            | Self::SignalRefused { run_id, .. }
            | Self::State { run_id, .. }
            | Self::UnstorableState { run_id, .. } => Some(*run_id),
            // A run `on_create` refused was never created.
            Self::Store(_)
            | Self::Input { .. }
            | Self::UnknownWorkflow { .. }
            | Self::Fork(_)
            | Self::Create { .. } => None,
        }
    }

    /// Whether the run still waits after this error: a signal that was refused
    /// (unknown, not enabled, a payload that does not read, a wait transition that
    /// failed) leaves the run as it was.
    pub fn leaves_run_waiting(&self) -> bool {
        matches!(self, Self::InvalidSignalPayload { .. } | Self::UnknownSignal { .. } | Self::SignalRefused { .. })
    }

    /// The error a transition returned, when this is a [`RunError::Transition`].
    ///
    /// Use it to downcast a typed error of your own (or of the LLM layer):
    /// `err.transition_source().and_then(|e| e.downcast_ref::<MyError>())`.
    pub fn transition_source(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            Self::Transition { source, .. } | Self::SignalRefused { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

/// `, and migrates from versions 1, 2`, or from no other version.
fn fmt_migrates(from: &[u32]) -> String {
    match from {
        [] => ", and migrates from no other version".to_owned(),
        [one] => format!(", and migrates from version {one}"),
        more => {
            let list: Vec<String> = more.iter().map(u32::to_string).collect();
            format!(", and migrates from versions {}", list.join(", "))
        }
    }
}
