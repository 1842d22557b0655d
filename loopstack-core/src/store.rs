//! Where runs and their documents are kept.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::document::Document;
use crate::error::StoreError;

/// The id of a run: a UUID (version 7, so ids sort by creation time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub uuid::Uuid);

impl RunId {
    /// A new, unique id: the current Unix time in milliseconds and 74 random bits.
    pub fn new() -> Self {
        // The random bits come from a fast thread-local generator rather than the
        // operating system: a run id needs uniqueness, not secrecy, and a system call per
        // run is measurable in the overhead benchmark.
        let millis =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let mut random = [0u8; 10];
        random[..8].copy_from_slice(&fastrand::u64(..).to_le_bytes());
        random[8..].copy_from_slice(&fastrand::u16(..).to_le_bytes());
        Self(uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid())
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
    /// Being driven by a runtime.
    Running,
    /// Parked at a place until a signal arrives.
    Waiting,
    /// Reached `end`.
    Completed,
    /// Stopped with an error; the state is that of the last checkpoint.
    Failed,
    /// Cancelled by its caller.
    Cancelled,
}

impl RunStatus {
    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the run can no longer change.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One transition a run took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StepRecord {
    /// The step number, from 1.
    pub step: u64,
    /// The transition method's name.
    pub transition: Cow<'static, str>,
    /// The place it left.
    pub from: Cow<'static, str>,
    /// The place it reached.
    pub to: Cow<'static, str>,
}

impl StepRecord {
    /// A record of one step.
    pub fn new(
        step: u64,
        transition: impl Into<Cow<'static, str>>,
        from: impl Into<Cow<'static, str>>,
        to: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self { step, transition: transition.into(), from: from.into(), to: to.into() }
    }
}

/// A run as the store keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunRecord {
    /// The run's id.
    pub run_id: RunId,
    /// The workflow's name.
    pub workflow: String,
    /// Where the run stands.
    pub status: RunStatus,
    /// The place of the last checkpoint.
    pub place: Cow<'static, str>,
    /// How many transitions the run has taken.
    pub step: u64,
    /// The workflow state of the last checkpoint, as JSON.
    pub state: Box<RawValue>,
    /// The error that failed the run, if it failed.
    pub error: Option<String>,
    /// The transitions taken, in order.
    pub history: Vec<StepRecord>,
}

impl RunRecord {
    /// A new run at `start`, step 0.
    pub fn new(run_id: RunId, workflow: impl Into<String>, state: Box<RawValue>) -> Self {
        Self {
            run_id,
            workflow: workflow.into(),
            status: RunStatus::Running,
            place: Cow::Borrowed(crate::START),
            step: 0,
            state,
            error: None,
            history: Vec::new(),
        }
    }
}

/// What one transition commits, all or nothing: its documents, the new state, place,
/// step and status.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The run.
    pub run_id: RunId,
    /// The step being written; the store holds `step - 1` or refuses with
    /// [`StoreError::Conflict`].
    pub step: u64,
    /// The transition taken.
    pub transition: StepRecord,
    /// The place reached.
    pub place: Cow<'static, str>,
    /// The status after the step.
    pub status: RunStatus,
    /// The state after the step, as JSON.
    pub state: Box<RawValue>,
    /// The documents the transition saved, in order (new documents and new versions).
    pub documents: Vec<Arc<Document>>,
}

/// Keeps runs and their documents.
///
/// A transition's documents and its new state arrive together in one [`Checkpoint`],
/// so a database-backed store commits them in one transaction: after a crash a run
/// resumes from a checkpoint whose documents are all there, and none of a failed
/// transition's documents are.
#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    /// Records a new run.
    async fn create_run(&self, run: RunRecord) -> Result<(), StoreError>;

    /// Commits one transition atomically.
    async fn commit(&self, checkpoint: Checkpoint) -> Result<(), StoreError>;

    /// Changes a run's status without a transition (waiting, failed, cancelled), if
    /// the stored run is still at `step`; otherwise another driver has moved it on and
    /// the store refuses with [`StoreError::Conflict`].
    async fn set_status(
        &self,
        run_id: RunId,
        step: u64,
        status: RunStatus,
        error: Option<String>,
    ) -> Result<(), StoreError>;

    /// Loads a run.
    async fn load_run(&self, run_id: RunId) -> Result<RunRecord, StoreError>;

    /// The current version of each of the run's documents, in the order first saved.
    async fn documents(&self, run_id: RunId) -> Result<Vec<Arc<Document>>, StoreError>;

    /// Every version of the run's document of type `doc_type` with this key, oldest
    /// first.
    async fn document_history(
        &self,
        run_id: RunId,
        doc_type: &str,
        key: &str,
    ) -> Result<Vec<Arc<Document>>, StoreError>;
}

/// A [`Store`] in memory: fast, and gone with the process.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    runs: Arc<Mutex<HashMap<RunId, MemRun>>>,
}

#[derive(Debug)]
struct MemRun {
    record: RunRecord,
    current: Vec<Arc<Document>>,
    versions: Vec<Arc<Document>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<RunId, MemRun>> {
        // A panic while holding the lock cannot leave a run half-written: every write
        // below is a single push or assignment after all checks.
        self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many runs the store holds.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the store holds no run.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Removes a run and its documents, returning whether it existed.
    pub fn remove(&self, run_id: RunId) -> bool {
        self.lock().remove(&run_id).is_some()
    }
}

#[async_trait::async_trait]
impl Store for MemoryStore {
    async fn create_run(&self, run: RunRecord) -> Result<(), StoreError> {
        let mut runs = self.lock();
        if runs.contains_key(&run.run_id) {
            return Err(StoreError::RunExists(run.run_id));
        }
        runs.insert(run.run_id, MemRun { record: run, current: Vec::new(), versions: Vec::new() });
        Ok(())
    }

    async fn commit(&self, cp: Checkpoint) -> Result<(), StoreError> {
        let mut runs = self.lock();
        let run = runs.get_mut(&cp.run_id).ok_or(StoreError::RunNotFound(cp.run_id))?;
        if run.record.step + 1 != cp.step {
            return Err(StoreError::Conflict { run_id: cp.run_id, expected: cp.step - 1, found: run.record.step });
        }
        for doc in cp.documents {
            let existing = doc.key.as_ref().and_then(|key| {
                run.current.iter().position(|d| d.key.as_ref() == Some(key) && d.doc_type == doc.doc_type)
            });
            match existing {
                Some(i) => run.current[i] = doc.clone(),
                None => run.current.push(doc.clone()),
            }
            run.versions.push(doc);
        }
        let r = &mut run.record;
        r.step = cp.step;
        r.place = cp.place;
        r.status = cp.status;
        r.state = cp.state;
        r.history.push(cp.transition);
        Ok(())
    }

    async fn set_status(
        &self,
        run_id: RunId,
        step: u64,
        status: RunStatus,
        error: Option<String>,
    ) -> Result<(), StoreError> {
        let mut runs = self.lock();
        let run = runs.get_mut(&run_id).ok_or(StoreError::RunNotFound(run_id))?;
        if run.record.step != step {
            return Err(StoreError::Conflict { run_id, expected: step, found: run.record.step });
        }
        run.record.status = status;
        run.record.error = error;
        Ok(())
    }

    async fn load_run(&self, run_id: RunId) -> Result<RunRecord, StoreError> {
        self.lock().get(&run_id).map(|r| r.record.clone()).ok_or(StoreError::RunNotFound(run_id))
    }

    async fn documents(&self, run_id: RunId) -> Result<Vec<Arc<Document>>, StoreError> {
        self.lock().get(&run_id).map(|r| r.current.clone()).ok_or(StoreError::RunNotFound(run_id))
    }

    async fn document_history(
        &self,
        run_id: RunId,
        doc_type: &str,
        key: &str,
    ) -> Result<Vec<Arc<Document>>, StoreError> {
        let runs = self.lock();
        let run = runs.get(&run_id).ok_or(StoreError::RunNotFound(run_id))?;
        Ok(run.versions.iter().filter(|d| d.doc_type == doc_type && d.key.as_deref() == Some(key)).cloned().collect())
    }
}
