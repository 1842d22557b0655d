//! The SQLite store's writes, run on its connection's thread: creating and claiming
//! runs, the fenced writes of a drive (`commit`, `set_status`, `park`, `heartbeat`)
//! and forks. The statements are the shared ones (`crate::sql::queries`).

use std::sync::Arc;

use loopstack_core::serde_json;
use loopstack_core::store::{OutSignal, check_claim, check_fence};
use loopstack_core::{
    Checkpoint, Claim, Document, Fence, ForkStep, NewRun, RunId, RunRecord, RunStatus, RunSummary, StepRecord,
    StoreError, Timestamp,
};

use super::conn::{Conn, exec, exec_raw, is_unique_violation, query, query_one, write};
use super::reads::{checkpoint, exists, load, with_state};
use crate::sql::queries::{
    CLAIM, COMMIT_CHECKPOINT, COMMIT_RUN, COMMIT_STEP, DELIVER_SIGNAL, FORK_CHECKPOINTS, FORK_DOCUMENTS, FORK_RUN,
    HAS_PENDING, HEARTBEAT, INSERT_CHECKPOINT, INSERT_DOCUMENT, INSERT_RUN, INSERT_SIGNAL, MIGRATE_RUN, NEXT_SIGNAL,
    PARK, REJECT_PENDING, RELEASE_LEASE, SET_STATUS,
};
use crate::sql::rows::{self, Cols as _};
use crate::sql::{LastState, LastStates, corrupt, status_set, to_i64};

/// The reason a finished run's pending signals are rejected with.
const ENDED: &str = loopstack_core::store::SIGNAL_OUTLIVED_RUN;

/// Why a fenced write matched no row.
pub(super) fn fence_error(conn: &Conn<'_>, run_id: RunId, fence: Fence) -> StoreError {
    match load(conn, run_id) {
        Ok(r) => match check_fence(run_id, r.status, r.epoch, r.step, fence) {
            Err(e) => e,
            Ok(()) => StoreError::SignalArrived { run_id },
        },
        Err(e) => e,
    }
}

/// Puts a write's [`OutSignal`] in its target's inbox, as `send_signal` does; a
/// finished or missing target drops it.
fn notify(conn: &Conn<'_>, signal: Option<&OutSignal>) -> Result<(), StoreError> {
    let Some(signal) = signal else { return Ok(()) };
    let next = query_one(conn, NEXT_SIGNAL, &[&signal.run_id.0], |r| Ok((r.int("signal_seq")?, r.int("id")?)))?;
    let Some((id, run)) = next else { return Ok(()) };
    let now = Timestamp::now().as_millis();
    exec(conn, INSERT_SIGNAL, &[&run, &id, &signal.name, &signal.payload.get(), &now])?;
    Ok(())
}

/// Creates a run, its step-0 checkpoint and the documents it starts with (in the
/// caller's transaction); `false` (writing nothing) if the run exists.
pub(super) fn insert_run(conn: &Conn<'_>, run: &NewRun, epoch: i64, now: i64) -> Result<bool, StoreError> {
    let owner = run.lease.as_ref().map(|l| l.owner.as_str());
    let until = run.lease.as_ref().map(|l| l.until.as_millis());
    let parent = run.parent.map(|p| p.0);
    let version = i64::from(run.version);
    let labels = crate::sql::labels_column(&run.labels)?;
    let done = exec(
        conn,
        INSERT_RUN,
        &[
            &run.run_id.0,
            &run.workflow,
            &run.status.as_str(),
            &run.definition_hash,
            &parent,
            &epoch,
            &owner,
            &until,
            &now,
            &run.parent_signal,
            &version,
            &run.trace_parent,
            &labels,
        ],
    )?;
    if done == 0 {
        return Ok(false);
    }
    exec(conn, INSERT_CHECKPOINT, &[&run.run_id.0, &0_i64, &"", &loopstack_core::START, &run.state.get(), &now])?;
    insert_documents(conn, run.run_id, &run.documents)?;
    Ok(true)
}

pub(super) fn create_run(conn: &Conn<'_>, last: &LastStates, run: NewRun) -> Result<RunRecord, StoreError> {
    let now = Timestamp::now().as_millis();
    let epoch: i64 = i64::from(run.status != RunStatus::Queued);
    let tx = write(conn)?;
    if !insert_run(&tx, &run, epoch, now)? {
        return Err(StoreError::RunExists(run.run_id));
    }
    tx.commit()?;
    let at = Timestamp::from_millis(now);
    let base = LastState { epoch: epoch as u64, step: 0, state: Arc::from(run.state.get()), chain: 0 };
    last.set(run.run_id, Some(base));
    Ok(run.into_record(epoch as u64, at))
}

/// A run a claim took, as its row came back: decoded, and the few columns that
/// failing it needs if it cannot be read.
struct Taken {
    summary: Result<RunSummary, StoreError>,
    run_id: Option<uuid::Uuid>,
    fence: Option<Fence>,
    parent: Option<uuid::Uuid>,
    parent_signal: Option<String>,
    workflow: String,
}

impl Taken {
    fn from_row(row: &rusqlite::Row<'_>) -> Result<Self, StoreError> {
        let fence = match (row.int("epoch"), row.int("step")) {
            (Ok(epoch), Ok(step)) => Some(Fence { epoch: epoch as u64, step: step as u64 }),
            _ => None,
        };
        Ok(Self {
            summary: rows::summary(row),
            run_id: row.uuid("run_id").ok(),
            fence,
            parent: row.uuid_opt("parent").ok().flatten(),
            parent_signal: row.text_opt("parent_signal").ok().flatten(),
            workflow: row.text("workflow").unwrap_or_default(),
        })
    }

    /// The run with its state.
    fn read(&mut self, conn: &Conn<'_>) -> Result<RunRecord, StoreError> {
        let summary = std::mem::replace(&mut self.summary, Err(corrupt("read twice")))?;
        with_state(conn, summary)
    }

    /// Fails a run this store just claimed but cannot read (`why`: its row or its
    /// state is not what a store writes): failed with the reason, its lease dropped
    /// and its pending signals rejected, and its parent told as a failed child tells
    /// it. So it neither stops the claim of the runs after it nor stays running under
    /// a lease nobody renews; `retry` takes it up once it reads again.
    fn fail(&self, conn: &Conn<'_>, why: &StoreError) {
        let Some(run_id) = self.run_id.map(RunId) else {
            return tracing::warn!(%why, "a claimed run has no readable id");
        };
        let Some(fence) = self.fence else {
            return tracing::warn!(run_id = %run_id, %why, "a claimed run has no readable fence");
        };
        let error = format!("the run cannot be read: {why}");
        tracing::warn!(run_id = %run_id, %error, "failing a run that cannot be read");
        let notify = match (self.parent, &self.parent_signal) {
            (Some(parent), Some(signal)) => {
                let ended = loopstack_core::ChildEnded::new(
                    run_id,
                    self.workflow.clone(),
                    RunStatus::Failed,
                    None,
                    Some(error.clone()),
                );
                serde_json::value::to_raw_value(&ended)
                    .ok()
                    .map(|payload| OutSignal::new(RunId(parent), signal.clone(), payload))
            }
            _ => None,
        };
        if let Err(e) = set_status(conn, run_id, fence, RunStatus::Failed, Some(error), notify) {
            tracing::warn!(run_id = %run_id, error = %e, "could not fail a run that cannot be read");
        }
    }
}

pub(super) fn claim(conn: &Conn<'_>, run_id: RunId, claim: &Claim) -> Result<RunRecord, StoreError> {
    let owner = claim.lease.as_ref().map(|l| l.owner.as_str());
    let until = claim.lease.as_ref().map(|l| l.until.as_millis());
    let now = Timestamp::now().as_millis();
    let expect = status_set(&claim.expect);
    let expired = claim.lease_expired_at.map(Timestamp::as_millis);
    let taken = query_one(conn, CLAIM, &[&run_id.0, &owner, &until, &now, &expect, &expired], Taken::from_row)?;
    match taken {
        Some(mut taken) => match taken.read(conn) {
            Ok(run) => Ok(run),
            // Claimed but unreadable: failed, not left running with nobody driving it.
            Err(e @ StoreError::Corrupt(_)) => {
                taken.fail(conn, &e);
                Err(e)
            }
            Err(e) => Err(e),
        },
        None => {
            let current = load(conn, run_id)?;
            check_claim(&current, claim)?;
            // It changed between the two statements: report it as taken.
            Err(StoreError::InvalidStatus { run_id, status: current.status })
        }
    }
}

/// The parameters of the worker's claim, made on the caller's side.
pub(super) struct ClaimRunnable {
    pub(super) owner: String,
    pub(super) until: i64,
    pub(super) now: i64,
    pub(super) names: String,
    pub(super) limit: i64,
    pub(super) keys: String,
}

pub(super) fn claim_runnable(conn: &Conn<'_>, c: &ClaimRunnable) -> Result<Vec<RunRecord>, StoreError> {
    let args: [&dyn rusqlite::ToSql; 6] = [&c.owner, &c.until, &c.now, &c.names, &c.limit, &c.keys];
    let taken = query(conn, super::CLAIM_RUNNABLE, &args, Taken::from_row)?;
    let mut reads = rows::ClaimedReads::with_capacity(taken.len());
    for mut taken in taken {
        if let Some(unreadable) = reads.push(taken.read(conn)) {
            taken.fail(conn, &unreadable);
        }
    }
    reads.finish()
}

pub(super) fn commit(conn: &Conn<'_>, last: &LastStates, cp: Checkpoint) -> Result<(), StoreError> {
    let step = cp.transition.step;
    let base = last.get(cp.run_id, cp.fence.epoch, cp.fence.step);
    let next = cp.state.get();
    let plan = crate::sql::plan_state(base.as_ref(), next);
    let tx = write(conn)?;
    if !write_step(&tx, cp.run_id, cp.fence, &cp.transition, cp.status, plan.state(next), cp.lease_until)? {
        drop(tx);
        return Err(fence_error(conn, cp.run_id, cp.fence));
    }
    if let Some(migrated) = &cp.migration {
        let version = i64::from(migrated.version);
        exec(&tx, MIGRATE_RUN, &[&cp.run_id.0, &to_i64(cp.fence.epoch), &version, &migrated.definition_hash])?;
    }
    insert_documents(&tx, cp.run_id, &cp.documents)?;
    if let Some(id) = cp.signal {
        let done = exec(&tx, DELIVER_SIGNAL, &[&cp.run_id.0, &to_i64(id), &to_i64(step)])?;
        if done == 0 {
            return Err(StoreError::SignalNotFound { run_id: cp.run_id, signal: id });
        }
    }
    if cp.status.is_finished() {
        reject_pending(&tx, cp.run_id)?;
    }
    // Last, after the run row: a run that notifies itself as it finishes drops the
    // signal, as a finished target does.
    notify(&tx, cp.notify.as_ref())?;
    tx.commit()?;
    let next = (!cp.status.is_finished()).then(|| LastState {
        epoch: cp.fence.epoch,
        step,
        state: Arc::from(next),
        chain: plan.chain,
    });
    last.set(cp.run_id, next);
    Ok(())
}

/// Writes step `t` of run `run_id` behind `fence` (in the caller's transaction): its
/// checkpoint and the run row's step, place, status and lease. `false` (with part
/// of it written: roll back) when the fence does not hold.
fn write_step(
    conn: &Conn<'_>,
    run_id: RunId,
    fence: Fence,
    t: &StepRecord,
    status: RunStatus,
    state: crate::sql::StepState<'_>,
    lease_until: Option<Timestamp>,
) -> Result<bool, StoreError> {
    let (epoch, from, to, at) = (to_i64(fence.epoch), to_i64(fence.step), to_i64(t.step), t.at.as_millis());
    let done = exec_raw(
        conn,
        COMMIT_CHECKPOINT,
        &[&run_id.0, &epoch, &from, &to, &t.transition, &t.to, &state.state, &at, &state.unchanged, &state.patch],
    );
    let fenced = match done {
        Ok(done) => done == 0,
        // Two writers of one epoch and step: the second loses.
        Err(e) if is_unique_violation(&e) => true,
        Err(e) => return Err(super::conn::backend(e)),
    };
    if fenced {
        return Ok(false);
    }
    // The checkpoint's insert checked the fence: the row is there, unfinished. Most
    // steps leave it running under the lease it has, and write only its step.
    if status == RunStatus::Running
        && lease_until.is_none()
        && exec(conn, COMMIT_STEP, &[&run_id.0, &epoch, &from, &to, &t.to, &at])? != 0
    {
        return Ok(true);
    }
    let until = lease_until.map(Timestamp::as_millis);
    let done = exec(conn, COMMIT_RUN, &[&run_id.0, &epoch, &from, &to, &t.to, &status.as_str(), &at, &until])?;
    Ok(done != 0)
}

/// Rejects the pending signals of run `run_id`, which ended (in the caller's
/// transaction): first asked whether it has any, as most runs end with none and the
/// update costs a temporary B-tree even then.
fn reject_pending(conn: &Conn<'_>, run_id: RunId) -> Result<(), StoreError> {
    if query_one(conn, HAS_PENDING, &[&run_id.0], |_| Ok(()))?.is_some() {
        exec(conn, REJECT_PENDING, &[&run_id.0, &ENDED])?;
    }
    Ok(())
}

/// Inserts the documents a step wrote, for run `run_id` (in the caller's
/// transaction).
fn insert_documents(conn: &Conn<'_>, run_id: RunId, documents: &[Arc<Document>]) -> Result<(), StoreError> {
    for doc in documents {
        let tags = serde_json::to_string(&doc.tags).map_err(corrupt)?;
        let (seq, version, step) = (to_i64(doc.seq), i64::from(doc.version), to_i64(doc.step));
        exec(
            conn,
            INSERT_DOCUMENT,
            &[
                &run_id.0,
                &seq,
                &version,
                &doc.doc_type,
                &doc.key,
                &tags,
                &doc.metadata.as_str(),
                &doc.content.get(),
                &step,
            ],
        )?;
    }
    Ok(())
}

pub(super) fn set_status(
    conn: &Conn<'_>,
    run_id: RunId,
    fence: Fence,
    status: RunStatus,
    error: Option<String>,
    notify_signal: Option<OutSignal>,
) -> Result<(), StoreError> {
    let tx = write(conn)?;
    let now = Timestamp::now().as_millis();
    let (epoch, step) = (to_i64(fence.epoch), to_i64(fence.step));
    let done = exec(&tx, SET_STATUS, &[&run_id.0, &epoch, &step, &status.as_str(), &error, &now])?;
    if done == 0 {
        drop(tx);
        return Err(fence_error(conn, run_id, fence));
    }
    if status.is_finished() {
        reject_pending(&tx, run_id)?;
    }
    notify(&tx, notify_signal.as_ref())?;
    tx.commit()
}

/// A park's values, made on the caller's side.
pub(super) struct Parked {
    pub(super) fence: Fence,
    pub(super) inbox_seq: i64,
    pub(super) signals: String,
    pub(super) wake_at: Option<i64>,
}

pub(super) fn park(conn: &Conn<'_>, run_id: RunId, p: &Parked) -> Result<(), StoreError> {
    let now = Timestamp::now().as_millis();
    let (epoch, step) = (to_i64(p.fence.epoch), to_i64(p.fence.step));
    let done = exec(conn, PARK, &[&run_id.0, &epoch, &step, &p.inbox_seq, &p.signals, &now, &p.wake_at])?;
    if done == 0 {
        // Not fenced and not finished: the signal count moved.
        return Err(fence_error(conn, run_id, p.fence));
    }
    Ok(())
}

pub(super) fn release_lease(conn: &Conn<'_>, run_id: RunId, epoch: u64) -> Result<(), StoreError> {
    exec(conn, RELEASE_LEASE, &[&run_id.0, &to_i64(epoch)])?;
    Ok(())
}

pub(super) fn heartbeat(conn: &Conn<'_>, run_id: RunId, epoch: u64, until: Timestamp) -> Result<(), StoreError> {
    let done = exec(conn, HEARTBEAT, &[&run_id.0, &to_i64(epoch), &until.as_millis()])?;
    if done == 0 {
        let current = load(conn, run_id)?;
        return Err(StoreError::Fenced { run_id, epoch, current: current.epoch });
    }
    Ok(())
}

pub(super) fn fork(
    conn: &Conn<'_>,
    last: &LastStates,
    source: RunId,
    step: u64,
    new_run: RunId,
    first: Option<ForkStep>,
) -> Result<RunRecord, StoreError> {
    exists(conn, source)?;
    if exists(conn, new_run).is_ok() {
        return Err(StoreError::RunExists(new_run));
    }
    let copied = checkpoint(conn, source, step)?;
    let tx = write(conn)?;
    let (at, now) = (to_i64(step), Timestamp::now().as_millis());
    exec(&tx, FORK_RUN, &[&source.0, &new_run.0, &copied.step.to, &at, &now])?;
    for sql in [FORK_CHECKPOINTS, FORK_DOCUMENTS] {
        exec(&tx, sql, &[&source.0, &new_run.0, &at])?;
    }
    // The first step of its own as a commit of the new run writes it, in the copy's
    // transaction: the fork is stored with it or not at all.
    if let Some(first) = &first {
        let fence = Fence { epoch: 1, step };
        let state = crate::sql::StepState { state: first.state.get(), unchanged: false, patch: None };
        if !write_step(&tx, new_run, fence, &first.transition, RunStatus::Running, state, None)? {
            return Err(corrupt(format!("fork {new_run} changed while it was written")));
        }
        if let Some(migrated) = &first.migration {
            let version = i64::from(migrated.version);
            exec(&tx, MIGRATE_RUN, &[&new_run.0, &1_i64, &version, &migrated.definition_hash])?;
        }
        insert_documents(&tx, new_run, &first.documents)?;
    }
    tx.commit()?;
    if let Some(first) = first {
        let state = Arc::from(first.state.get());
        last.set(new_run, Some(LastState { epoch: 1, step: first.transition.step, state, chain: 0 }));
    }
    load(conn, new_run)
}
