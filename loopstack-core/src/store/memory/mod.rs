//! The in-memory store.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::value::RawValue;

use super::{
    CheckpointRecord, Claim, Fence, Inbox, Lease, NewRun, OutSignal, Park, RunId, RunPage, RunQuery, RunRecord,
    RunStatus, SignalReceipt, SignalRecord, SignalStatus, StepRecord, Store, Timestamp, WorkflowVersions, check_claim,
    check_fence,
};
use crate::document::Document;
use crate::error::StoreError;
use crate::schedule::{ScheduleFire, ScheduleRecord, ScheduledRun};

mod run;
use run::*;

/// A [`Store`] in memory: fast, and gone with the process. For tests, benchmarks
/// and runs that need not outlive their process; `loopstack-store` has SQLite and
/// PostgreSQL stores behind the same trait.
///
/// It keeps every run, with all its checkpoints, document versions and signals,
/// until [`MemoryStore::remove`] drops it, or, with
/// [`MemoryStore::keep_finished`], until more than that many finished runs
/// (completed, failed, cancelled or stopped) are held: then the runs that finished first are
/// dropped whole. Runs that have not finished (queued, running, waiting) are never
/// evicted and do not count toward the bound.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

impl MemoryStore {
    /// An empty store without a bound.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps at most `n` finished runs (completed, failed, cancelled or stopped), evicting
    /// those that finished first beyond that; unfinished runs are never evicted.
    #[must_use]
    pub fn keep_finished(self, n: usize) -> Self {
        self.lock().keep_finished = Some(n);
        self
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a run half-written: every write
        // below happens after all its checks.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many runs the store holds.
    pub fn len(&self) -> usize {
        self.lock().runs.len()
    }

    /// Whether the store holds no run.
    pub fn is_empty(&self) -> bool {
        self.lock().runs.is_empty()
    }

    /// [`Store::commit`], done at the call.
    fn commit_now(&self, cp: super::Checkpoint) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let run = inner.run(cp.run_id)?;
        let r = &run.record;
        check_fence(cp.run_id, r.status, r.epoch, r.step, cp.fence)?;
        if let Some(id) = cp.signal {
            match run.signals.get(usize::try_from(id).unwrap_or(usize::MAX).wrapping_sub(1)) {
                Some(s) if s.status == SignalStatus::Pending => {}
                _ => return Err(StoreError::SignalNotFound { run_id: cp.run_id, signal: id }),
            }
        }
        let step = cp.transition.step;
        if let Some(id) = cp.signal {
            run.signals[(id - 1) as usize].status = SignalStatus::Delivered { step };
        }
        run.record.status = cp.status;
        if let Some(migrated) = cp.migration {
            run.record.version = migrated.version;
            run.record.definition_hash = migrated.definition_hash;
        }
        if cp.lease_until.is_some() {
            run.record.lease_until = cp.lease_until;
        }
        run.advance(cp.transition, cp.state, cp.documents);
        if cp.status.is_finished() {
            run.reject_pending(super::SIGNAL_OUTLIVED_RUN);
        }
        // Under the same lock as the commit: both happen, or (refused above) neither.
        inner.notify(cp.notify);
        if cp.status.is_finished() {
            inner.finished(cp.run_id);
        }
        Ok(())
    }

    /// Removes a run and everything of it, returning whether it existed.
    pub fn remove(&self, run_id: RunId) -> bool {
        self.lock().runs.remove(&run_id).is_some()
    }
}

#[async_trait::async_trait]
impl Store for MemoryStore {
    // As `commit`: a ready future, holding the record and not the new run.
    fn create_run<'life0, 'async_trait>(
        &'life0 self,
        run: NewRun,
    ) -> Pin<Box<dyn Future<Output = Result<RunRecord, StoreError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(std::future::ready(self.lock().create_run(run)))
    }

    async fn claim(&self, run_id: RunId, claim: &Claim) -> Result<RunRecord, StoreError> {
        let mut inner = self.lock();
        let run = inner.run(run_id)?;
        check_claim(&run.record, claim)?;
        let now = Timestamp::now();
        let taken_from = run.note_takeover(claim.lease.as_ref().map(|l| l.owner.as_str()), now);
        let r = &mut run.record;
        r.status = RunStatus::Running;
        r.epoch += 1;
        r.error = None;
        r.waiting_for.clear();
        r.wake_at = None;
        r.lease_owner = claim.lease.as_ref().map(|l| l.owner.clone());
        r.lease_until = claim.lease.as_ref().map(|l| l.until);
        r.updated_at = now;
        r.held_since = Some(now);
        r.taken_from = taken_from;
        Ok(r.clone())
    }

    async fn claim_runnable(
        &self,
        workflows: &[WorkflowVersions<'_>],
        lease: &Lease,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let mut inner = self.lock();
        let mut runnable: Vec<&mut MemRun> = inner
            .runs
            .values_mut()
            .map(|r| &mut **r)
            .filter(|r| {
                let pending = r.signals.iter().any(|s| s.status == SignalStatus::Pending);
                workflows.iter().any(|w| w.matches(&r.record.workflow, r.record.version))
                    && super::is_runnable(&r.record, now, pending)
            })
            .collect();
        runnable.sort_by_key(|r| (r.record.updated_at, r.record.run_id));
        Ok(runnable
            .into_iter()
            .take(limit as usize)
            .map(|run| {
                let taken_from = run.note_takeover(Some(&lease.owner), now);
                let r = &mut run.record;
                r.status = RunStatus::Running;
                r.epoch += 1;
                r.error = None;
                r.waiting_for.clear();
                r.wake_at = None;
                r.lease_owner = Some(lease.owner.clone());
                r.lease_until = Some(lease.until);
                r.updated_at = now;
                r.held_since = Some(now);
                r.taken_from = taken_from;
                r.clone()
            })
            .collect())
    }

    // Written out as `async_trait` would write it, around a future that is ready:
    // the memory store does its work at the call, and its future holds the result
    // only, where an `async fn`'s would hold (and copy in) the checkpoint.
    fn commit<'life0, 'async_trait>(
        &'life0 self,
        cp: super::Checkpoint,
    ) -> Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(std::future::ready(self.commit_now(cp)))
    }

    async fn set_status(
        &self,
        run_id: RunId,
        fence: Fence,
        status: RunStatus,
        error: Option<String>,
        notify: Option<OutSignal>,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let run = inner.run(run_id)?;
        let r = &mut run.record;
        check_fence(run_id, r.status, r.epoch, r.step, fence)?;
        r.status = status;
        r.error = error;
        r.updated_at = Timestamp::now();
        r.lease_owner = None;
        r.lease_until = None;
        if status.is_finished() {
            run.reject_pending(super::SIGNAL_OUTLIVED_RUN);
        }
        // Under the same lock as the change: both happen, or (refused above) neither.
        inner.notify(notify);
        if status.is_finished() {
            inner.finished(run_id);
        }
        Ok(())
    }

    async fn park(&self, run_id: RunId, park: &Park<'_>) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let r = &mut inner.run(run_id)?.record;
        check_fence(run_id, r.status, r.epoch, r.step, park.fence)?;
        if r.signal_seq != park.inbox_seq {
            return Err(StoreError::SignalArrived { run_id });
        }
        r.status = RunStatus::Waiting;
        r.waiting_for = park.signals.iter().map(|s| (*s).to_owned()).collect();
        r.wake_at = park.wake_at;
        r.lease_owner = None;
        r.lease_until = None;
        r.updated_at = Timestamp::now();
        Ok(())
    }

    async fn heartbeat(&self, run_id: RunId, epoch: u64, until: Timestamp) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let r = &mut inner.run(run_id)?.record;
        if r.epoch != epoch {
            return Err(StoreError::Fenced { run_id, epoch, current: r.epoch });
        }
        r.lease_until = Some(until);
        Ok(())
    }

    async fn takeovers(&self, run_id: RunId) -> Result<Vec<super::Takeover>, StoreError> {
        Ok(self.lock().run(run_id)?.takeovers.clone())
    }

    async fn release_lease(&self, run_id: RunId, epoch: u64) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let r = &mut inner.run(run_id)?.record;
        if r.epoch == epoch && r.status == RunStatus::Running {
            r.lease_until = Some(Timestamp::from_millis(0));
        }
        Ok(())
    }

    async fn send_signal(
        &self,
        run_id: RunId,
        name: &str,
        payload: Box<RawValue>,
    ) -> Result<SignalReceipt, StoreError> {
        let mut inner = self.lock();
        let run = inner.run(run_id)?;
        if run.record.status.is_finished() {
            return Err(StoreError::Finished { run_id, status: run.record.status });
        }
        let id = run.push_signal(name.to_owned(), payload);
        Ok(SignalReceipt { id, status: run.record.status })
    }

    async fn inbox(&self, run_id: RunId) -> Result<Inbox, StoreError> {
        let inner = self.lock();
        let run = inner.get(run_id)?;
        let pending = run.signals.iter().filter(|s| s.status == SignalStatus::Pending).cloned().collect();
        Ok(Inbox { pending, seq: run.record.signal_seq })
    }

    async fn reject_signal(&self, run_id: RunId, epoch: u64, signal: u64, reason: &str) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let run = inner.run(run_id)?;
        if run.record.epoch != epoch {
            return Err(StoreError::Fenced { run_id, epoch, current: run.record.epoch });
        }
        match run.signals.get_mut(usize::try_from(signal).unwrap_or(usize::MAX).wrapping_sub(1)) {
            Some(s) if s.status == SignalStatus::Pending => {
                s.status = SignalStatus::Rejected { reason: reason.to_owned() };
                Ok(())
            }
            _ => Err(StoreError::SignalNotFound { run_id, signal }),
        }
    }

    async fn signals(&self, run_id: RunId) -> Result<Vec<SignalRecord>, StoreError> {
        Ok(self.lock().get(run_id)?.signals.clone())
    }

    async fn fork(
        &self,
        source: RunId,
        step: u64,
        new_run: RunId,
        first: Option<super::ForkStep>,
    ) -> Result<RunRecord, StoreError> {
        let mut inner = self.lock();
        if inner.runs.contains_key(&new_run) {
            return Err(StoreError::RunExists(new_run));
        }
        let src = inner.get(source)?;
        let last = src.checkpoint_index(step).ok_or(StoreError::CheckpointNotFound { run_id: source, step })?;
        let mut checkpoints: Vec<MemCheckpoint> = src.checkpoints[..=last].to_vec();
        // States the copied prefix shared with later steps of the source become its own.
        for (i, c) in checkpoints.iter_mut().enumerate() {
            c.state = (i < last).then(|| src.state_at(i).to_owned());
        }
        let checkpoint = CheckpointRecord { step: src.step_record(last), state: src.state_at(last).to_owned() };
        let now = Timestamp::now();
        let record = RunRecord {
            run_id: new_run,
            workflow: src.record.workflow.clone(),
            status: RunStatus::Running,
            place: checkpoint.step.to.clone(),
            step,
            state: checkpoint.state.clone(),
            error: None,
            definition_hash: src.record.definition_hash.clone(),
            version: src.record.version,
            // A fork is nobody's child (see `Store::fork`).
            parent: None,
            parent_signal: None,
            forked_from: Some((source, step)),
            epoch: 1,
            signal_seq: 0,
            waiting_for: Vec::new(),
            place_since: checkpoint.step.at,
            wake_at: None,
            lease_owner: None,
            lease_until: None,
            created_at: now,
            updated_at: now,
            // A fork is a trace of its own.
            trace_parent: None,
            held_since: None,
            taken_from: None,
            // A fork is the same tenant's, in the same conversation.
            labels: src.record.labels.clone(),
        };
        let mut run = MemRun {
            record,
            checkpoints,
            current: Vec::new(),
            versions: Vec::new(),
            signals: Vec::new(),
            takeovers: Vec::new(),
        };
        run.apply_documents(src.versions.iter().filter(|d| d.step <= step).cloned().collect());
        // Under the same lock as the copy: both are stored, or (refused above) neither.
        if let Some(first) = first {
            if let Some(migrated) = first.migration {
                run.record.version = migrated.version;
                run.record.definition_hash = migrated.definition_hash;
            }
            run.advance(first.transition, first.state, first.documents);
        }
        let record = run.record.clone();
        inner.runs.insert(new_run, Box::new(run));
        Ok(record)
    }

    async fn load_run(&self, run_id: RunId) -> Result<RunRecord, StoreError> {
        Ok(self.lock().get(run_id)?.record.clone())
    }

    async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
        let inner = self.lock();
        let mut runs: Vec<&RunRecord> = inner
            .runs
            .values()
            .map(|r| &r.record)
            .filter(|r| query.before.is_none_or(|b| r.run_id < b) && query.matches(r))
            .collect();
        runs.sort_unstable_by_key(|r| std::cmp::Reverse(r.run_id));
        let size = query.page_size() as usize;
        let next = (runs.len() > size).then(|| runs[size - 1].run_id);
        Ok(RunPage { runs: runs.into_iter().take(size).map(RunRecord::summary).collect(), next })
    }

    async fn history(&self, run_id: RunId) -> Result<Vec<StepRecord>, StoreError> {
        let inner = self.lock();
        let run = inner.get(run_id)?;
        Ok((1..run.checkpoints.len()).map(|i| run.step_record(i)).collect())
    }

    async fn checkpoint(&self, run_id: RunId, step: u64) -> Result<CheckpointRecord, StoreError> {
        let inner = self.lock();
        let run = inner.get(run_id)?;
        let i = run.checkpoint_index(step).ok_or(StoreError::CheckpointNotFound { run_id, step })?;
        Ok(CheckpointRecord { step: run.step_record(i), state: run.state_at(i).to_owned() })
    }

    async fn documents(&self, run_id: RunId) -> Result<Vec<Arc<Document>>, StoreError> {
        Ok(self.lock().get(run_id)?.current.clone())
    }

    async fn documents_at(&self, run_id: RunId, step: u64) -> Result<Vec<Arc<Document>>, StoreError> {
        let inner = self.lock();
        let run = inner.get(run_id)?;
        let mut current: Vec<Arc<Document>> = Vec::new();
        for doc in run.versions.iter().filter(|d| d.step <= step) {
            match usize::try_from(doc.seq) {
                Ok(seq) if seq < current.len() => current[seq] = doc.clone(),
                _ => current.push(doc.clone()),
            }
        }
        Ok(current)
    }

    async fn document_versions(&self, run_id: RunId) -> Result<Vec<Arc<Document>>, StoreError> {
        let mut versions = self.lock().get(run_id)?.versions.clone();
        versions.sort_by_key(|d| (d.step, d.seq, d.version));
        Ok(versions)
    }

    async fn document_history(
        &self,
        run_id: RunId,
        doc_type: &str,
        key: &str,
    ) -> Result<Vec<Arc<Document>>, StoreError> {
        let inner = self.lock();
        let run = inner.get(run_id)?;
        Ok(run.versions.iter().filter(|d| d.doc_type == doc_type && d.key.as_deref() == Some(key)).cloned().collect())
    }

    async fn create_schedule(&self, schedule: &ScheduleRecord) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if inner.schedules.contains_key(&schedule.id) {
            return Err(StoreError::ScheduleExists(schedule.id.clone()));
        }
        inner.schedules.insert(schedule.id.clone(), (schedule.clone(), Vec::new()));
        Ok(())
    }

    async fn load_schedule(&self, id: &str) -> Result<ScheduleRecord, StoreError> {
        let inner = self.lock();
        inner.schedules.get(id).map(|(s, _)| s.clone()).ok_or_else(|| StoreError::ScheduleNotFound(id.to_owned()))
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        Ok(self.lock().schedules.values().map(|(s, _)| s.clone()).collect())
    }

    async fn set_schedule_paused(
        &self,
        id: &str,
        paused: bool,
        next_due: Option<Timestamp>,
    ) -> Result<ScheduleRecord, StoreError> {
        let mut inner = self.lock();
        let (schedule, _) = inner.schedules.get_mut(id).ok_or_else(|| StoreError::ScheduleNotFound(id.to_owned()))?;
        schedule.paused = paused;
        if let Some(next_due) = next_due {
            schedule.next_due = next_due;
        }
        schedule.updated_at = Timestamp::now();
        Ok(schedule.clone())
    }

    async fn delete_schedule(&self, id: &str) -> Result<(), StoreError> {
        let mut inner = self.lock();
        inner.schedules.remove(id).map(|_| ()).ok_or_else(|| StoreError::ScheduleNotFound(id.to_owned()))
    }

    async fn due_schedules(
        &self,
        workflows: &[&str],
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        let inner = self.lock();
        let mut due: Vec<ScheduleRecord> = inner
            .schedules
            .values()
            .map(|(s, _)| s)
            .filter(|s| !s.paused && workflows.contains(&s.workflow.as_str()))
            .filter(|s| s.next_due <= now || (s.pending_due.is_some() && inner.has_ended(s.last_run)))
            .cloned()
            .collect();
        due.sort_by_key(|s| s.next_due);
        due.truncate(limit as usize);
        Ok(due)
    }

    async fn fire_schedule(&self, fire: ScheduleFire) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        match inner.schedules.get(&fire.schedule) {
            Some((s, _))
                if !s.paused
                    && s.next_due == fire.due
                    && s.pending_due == fire.pending
                    && (!fire.if_last_run_ended || inner.has_ended(s.last_run)) => {}
            _ => return Ok(false),
        }
        // The run first: it is the one write here that can fail.
        let started = match fire.run {
            Some((at, run)) => {
                let run_id = run.run_id;
                match inner.create_run(run) {
                    Ok(_) | Err(StoreError::RunExists(_)) => Some((at, run_id)),
                    Err(e) => return Err(e),
                }
            }
            None => None,
        };
        let Some((schedule, runs)) = inner.schedules.get_mut(&fire.schedule) else { return Ok(false) };
        match fire.next_due {
            Some(next) => schedule.next_due = next,
            None => schedule.paused = true,
        }
        if let Some((due, run_id)) = started {
            schedule.last_due = Some(due);
            schedule.last_run = Some(run_id);
            if !runs.iter().any(|r| r.due == due) {
                runs.push(ScheduledRun { schedule: fire.schedule.clone(), due, run_id });
            }
        }
        schedule.pending_due = fire.next_pending;
        schedule.last_error = fire.error;
        schedule.updated_at = Timestamp::now();
        Ok(true)
    }

    async fn scheduled_runs(&self, id: &str, limit: u32) -> Result<Vec<ScheduledRun>, StoreError> {
        let inner = self.lock();
        let (_, runs) = inner.schedules.get(id).ok_or_else(|| StoreError::ScheduleNotFound(id.to_owned()))?;
        Ok(runs.iter().rev().take(limit as usize).cloned().collect())
    }
}
