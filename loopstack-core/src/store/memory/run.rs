//! What the memory store keeps: its runs, each with its checkpoints, documents and
//! signals, and the bookkeeping that drops finished runs past the bound.

use super::*;

#[derive(Debug, Default)]
pub(super) struct Inner {
    /// Boxed: the table keeps spare slots (up to half of it after it grows), and an
    /// unboxed slot is the size of a whole run record.
    pub(super) runs: HashMap<RunId, Box<MemRun>>,
    /// Finished runs, oldest-finished first, when a bound is set.
    pub(super) finished: VecDeque<RunId>,
    pub(super) keep_finished: Option<usize>,
    /// Schedules by id, with the runs each started (oldest due first).
    pub(super) schedules: std::collections::BTreeMap<String, (ScheduleRecord, Vec<ScheduledRun>)>,
}

#[derive(Debug)]
pub(super) struct MemRun {
    pub(super) record: RunRecord,
    /// One entry per step, from step 0, in order.
    pub(super) checkpoints: Vec<MemCheckpoint>,
    /// The current version of each document, by `seq`.
    pub(super) current: Vec<Arc<Document>>,
    /// Every version, in the order saved.
    pub(super) versions: Vec<Arc<Document>>,
    pub(super) signals: Vec<SignalRecord>,
    /// Its takeovers, oldest first.
    pub(super) takeovers: Vec<super::super::Takeover>,
}

/// A checkpoint as kept in memory: the place it left is the one the step before
/// reached, and its state is the next entry's when `None` (the last entry's is the
/// run's current state), so an unchanged state is never copied.
#[derive(Debug, Clone)]
pub(super) struct MemCheckpoint {
    pub(super) step: u64,
    pub(super) transition: Cow<'static, str>,
    pub(super) to: Cow<'static, str>,
    pub(super) at: Timestamp,
    pub(super) state: Option<Box<RawValue>>,
}

impl MemRun {
    /// Records a claim by `by` at `at` as a takeover when another holder's lease
    /// still names the run (one given back ends at 0, and is no takeover); returns
    /// whose lease it was. Called before the claim overwrites the lease.
    pub(super) fn note_takeover(&mut self, by: Option<&str>, at: Timestamp) -> Option<String> {
        let r = &self.record;
        if r.status != RunStatus::Running {
            return None;
        }
        let (Some(from), Some(until)) = (&r.lease_owner, r.lease_until) else { return None };
        if until.as_millis() <= 0 {
            return None;
        }
        let takeover = super::super::Takeover::new(at, from.clone(), until, by.map(str::to_owned), r.epoch + 1);
        self.takeovers.push(takeover);
        Some(from.clone())
    }

    pub(super) fn checkpoint_index(&self, step: u64) -> Option<usize> {
        self.checkpoints.binary_search_by_key(&step, |c| c.step).ok()
    }

    /// The step record of entry `i`.
    pub(super) fn step_record(&self, i: usize) -> StepRecord {
        let c = &self.checkpoints[i];
        let from = if i == 0 { Cow::Borrowed("") } else { self.checkpoints[i - 1].to.clone() };
        StepRecord { step: c.step, transition: c.transition.clone(), from, to: c.to.clone(), at: c.at }
    }

    /// The state after entry `i`.
    pub(super) fn state_at(&self, i: usize) -> &RawValue {
        self.checkpoints[i..].iter().find_map(|c| c.state.as_deref()).unwrap_or(&self.record.state)
    }

    /// Takes step `t` to `state`, saving `documents`: the run's step, place and
    /// state, and a checkpoint entry.
    pub(super) fn advance(&mut self, t: StepRecord, state: Box<RawValue>, documents: Vec<Arc<Document>>) {
        self.apply_documents(documents);
        let r = &mut self.record;
        r.step = t.step;
        r.place = t.to.clone();
        // The state before moves into the previous entry, unless it did not change.
        let before = std::mem::replace(&mut r.state, state);
        if before.get() != r.state.get()
            && let Some(last) = self.checkpoints.last_mut()
        {
            last.state = Some(before);
        }
        self.record.updated_at = t.at;
        self.record.place_since = t.at;
        self.checkpoints.push(MemCheckpoint {
            step: t.step,
            transition: t.transition,
            to: t.to,
            at: t.at,
            state: None,
        });
    }

    pub(super) fn apply_documents(&mut self, documents: Vec<Arc<Document>>) {
        for doc in documents {
            // `seq` is the document's position in the run: a new document is the next
            // one, a new version replaces its own; no search by key.
            let seq = usize::try_from(doc.seq).unwrap_or(usize::MAX);
            if seq < self.current.len() {
                self.current[seq] = doc.clone();
            } else {
                self.current.push(doc.clone());
            }
            self.versions.push(doc);
        }
    }

    /// Puts a signal in the inbox: the next id, the signal count raised.
    pub(super) fn push_signal(&mut self, name: String, payload: Box<RawValue>) -> u64 {
        self.record.signal_seq += 1;
        let id = self.record.signal_seq;
        self.signals.push(SignalRecord {
            id,
            name,
            payload,
            status: SignalStatus::Pending,
            received_at: Timestamp::now(),
        });
        id
    }

    pub(super) fn reject_pending(&mut self, reason: &str) {
        for s in &mut self.signals {
            if s.status == SignalStatus::Pending {
                s.status = SignalStatus::Rejected { reason: reason.to_owned() };
            }
        }
    }
}

impl Inner {
    pub(super) fn create_run(&mut self, mut run: NewRun) -> Result<RunRecord, StoreError> {
        if self.runs.contains_key(&run.run_id) {
            return Err(StoreError::RunExists(run.run_id));
        }
        let now = Timestamp::now();
        let (run_id, epoch) = (run.run_id, u64::from(run.status != RunStatus::Queued));
        let documents = std::mem::take(&mut run.documents);
        let record = run.into_record(epoch, now);
        let mut stored = Box::new(MemRun {
            record: record.clone(),
            checkpoints: vec![step_zero(now)],
            current: Vec::new(),
            versions: Vec::new(),
            signals: Vec::new(),
            takeovers: Vec::new(),
        });
        stored.apply_documents(documents);
        self.runs.insert(run_id, stored);
        Ok(record)
    }
}

impl Inner {
    pub(super) fn run(&mut self, run_id: RunId) -> Result<&mut MemRun, StoreError> {
        self.runs.get_mut(&run_id).map(|r| &mut **r).ok_or(StoreError::RunNotFound(run_id))
    }

    /// Whether a schedule's last run `run` has ended: none, or one this store no
    /// longer has, has.
    pub(super) fn has_ended(&self, run: Option<RunId>) -> bool {
        run.and_then(|id| self.runs.get(&id)).is_none_or(|r| r.record.status.is_finished())
    }

    pub(super) fn get(&self, run_id: RunId) -> Result<&MemRun, StoreError> {
        self.runs.get(&run_id).map(|r| &**r).ok_or(StoreError::RunNotFound(run_id))
    }

    /// Delivers a write's [`OutSignal`] as `send_signal` would; a finished or
    /// missing target drops it.
    pub(super) fn notify(&mut self, signal: Option<OutSignal>) {
        let Some(signal) = signal else { return };
        if let Some(target) = self.runs.get_mut(&signal.run_id)
            && !target.record.status.is_finished()
        {
            target.push_signal(signal.name.into_owned(), signal.payload);
        }
    }

    pub(super) fn finished(&mut self, run_id: RunId) {
        let Some(keep) = self.keep_finished else { return };
        // A retried run that finishes again counts from its last finish.
        self.finished.retain(|&id| id != run_id);
        self.finished.push_back(run_id);
        while self.finished.len() > keep {
            if let Some(old) = self.finished.pop_front() {
                // A retried run may have been reopened since; only finished ones go.
                if self.runs.get(&old).is_some_and(|r| r.record.status.is_finished()) {
                    self.runs.remove(&old);
                }
            }
        }
    }
}

pub(super) fn step_zero(at: Timestamp) -> MemCheckpoint {
    MemCheckpoint { step: 0, transition: Cow::Borrowed(""), to: Cow::Borrowed(crate::START), at, state: None }
}
