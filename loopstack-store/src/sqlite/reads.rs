//! The SQLite store's reads (a run with its state, listings, history, checkpoints,
//! documents) and signals (sending, the inbox, rejecting), run on its connection's
//! thread.

use std::sync::Arc;

use loopstack_core::{
    CheckpointRecord, Document, Inbox, RunCount, RunId, RunPage, RunQuery, RunRecord, RunSummary, SignalReceipt,
    SignalRecord, StepRecord, StoreError, Timestamp,
};

use super::conn::{Conn, exec, query, query_one, write};
use crate::sql::queries::{
    ALL_SIGNALS, CHECKPOINT_CHAIN, COUNT_RUNS, DOCUMENT_HISTORY, DOCUMENT_VERSIONS, DOCUMENTS_AT, HISTORY,
    INSERT_SIGNAL, LIST_RUNS, NEXT_SIGNAL, PENDING_SIGNALS, REJECT_SIGNAL, RUN_EXISTS, SELECT_RUN, SIGNAL_SEQ,
    TAKEOVERS,
};
use crate::sql::rows::{self, Cols as _};
use crate::sql::{corrupt, raw, status_set, to_i64, to_u64};

pub(super) fn load(conn: &Conn<'_>, run_id: RunId) -> Result<RunRecord, StoreError> {
    let record = query_one(conn, SELECT_RUN, &[&run_id.0], |r| rows::summary(r))?;
    with_state(conn, record.ok_or(StoreError::RunNotFound(run_id))?)
}

/// A run's row with its state: that of its latest checkpoint.
pub(super) fn with_state(conn: &Conn<'_>, run: RunSummary) -> Result<RunRecord, StoreError> {
    match chain(conn, run.run_id, run.step)? {
        Some((_, state)) => Ok(run.with_state(raw(state)?)),
        None => Err(corrupt(format!("run {} has no checkpoint {}", run.run_id, run.step))),
    }
}

/// The step record and state of checkpoint `step`: its chain's full state with the
/// patches after it applied.
fn chain(conn: &Conn<'_>, run_id: RunId, step: u64) -> Result<Option<(StepRecord, String)>, StoreError> {
    let rows = query(conn, CHECKPOINT_CHAIN, &[&run_id.0, &to_i64(step)], |r| {
        Ok((rows::step(r)?, r.text_opt("state")?, r.text_opt("state_patch")?))
    })?;
    let mut state: Option<String> = None;
    let mut found = None;
    for (record, full, patch) in rows {
        state = match (full, patch, state) {
            (Some(full), _, _) => Some(full),
            (None, Some(patch), Some(base)) => Some(crate::sql::apply_patch(&base, &patch)?),
            (None, None, base) => base,
            (None, Some(_), None) => return Err(corrupt("a state patch without a base")),
        };
        found = Some(record);
    }
    match (found, state) {
        (Some(record), Some(state)) if record.step == step => Ok(Some((record, state))),
        _ => Ok(None),
    }
}

pub(super) fn exists(conn: &Conn<'_>, run_id: RunId) -> Result<(), StoreError> {
    let found = query_one(conn, RUN_EXISTS, &[&run_id.0], |_| Ok(()))?;
    found.ok_or(StoreError::RunNotFound(run_id))
}

/// Which documents [`documents`] reads.
pub(super) enum Docs {
    /// The latest version of each, as of a step.
    At(u64),
    /// Every version.
    Versions,
    /// Every version of one type and key.
    History(String, String),
}

pub(super) fn documents(conn: &Conn<'_>, run_id: RunId, which: &Docs) -> Result<Vec<Arc<Document>>, StoreError> {
    let docs = match which {
        Docs::At(step) => query(conn, DOCUMENTS_AT, &[&run_id.0, &to_i64(*step)], |r| rows::document(r)),
        Docs::Versions => query(conn, DOCUMENT_VERSIONS, &[&run_id.0], |r| rows::document(r)),
        Docs::History(doc_type, key) => {
            query(conn, DOCUMENT_HISTORY, &[&run_id.0, doc_type, key], |r| rows::document(r))
        }
    }?;
    if docs.is_empty() {
        exists(conn, run_id)?;
    }
    Ok(docs)
}

pub(super) fn send_signal(
    conn: &Conn<'_>,
    run_id: RunId,
    name: &str,
    payload: &str,
) -> Result<SignalReceipt, StoreError> {
    let tx = write(conn)?;
    let next =
        query_one(&tx, NEXT_SIGNAL, &[&run_id.0], |r| Ok((r.int("signal_seq")?, r.text("status")?, r.int("id")?)))?;
    let Some((id, status, run)) = next else {
        drop(tx);
        let current = load(conn, run_id)?;
        return Err(StoreError::Finished { run_id, status: current.status });
    };
    let now = Timestamp::now().as_millis();
    exec(&tx, INSERT_SIGNAL, &[&run, &id, &name, &payload, &now])?;
    tx.commit()?;
    Ok(SignalReceipt { id: to_u64(id)?, status: status.parse()? })
}

pub(super) fn inbox(conn: &Conn<'_>, run_id: RunId) -> Result<Inbox, StoreError> {
    // The count first: a signal arriving between the two reads makes the count
    // stale, so parking fails and the driver reads again.
    let seq = query_one(conn, SIGNAL_SEQ, &[&run_id.0], |r| r.int("signal_seq"))?;
    let seq = seq.ok_or(StoreError::RunNotFound(run_id))?;
    let pending = query(conn, PENDING_SIGNALS, &[&run_id.0], |r| rows::signal(r))?;
    Ok(Inbox { pending, seq: to_u64(seq)? })
}

pub(super) fn reject_signal(
    conn: &Conn<'_>,
    run_id: RunId,
    epoch: u64,
    signal: u64,
    reason: &str,
) -> Result<(), StoreError> {
    let done = exec(conn, REJECT_SIGNAL, &[&run_id.0, &to_i64(epoch), &to_i64(signal), &reason])?;
    if done == 0 {
        let current = load(conn, run_id)?;
        if current.epoch != epoch {
            return Err(StoreError::Fenced { run_id, epoch, current: current.epoch });
        }
        return Err(StoreError::SignalNotFound { run_id, signal });
    }
    Ok(())
}

pub(super) fn signals(conn: &Conn<'_>, run_id: RunId) -> Result<Vec<SignalRecord>, StoreError> {
    let signals = query(conn, ALL_SIGNALS, &[&run_id.0], |r| rows::signal(r))?;
    if signals.is_empty() {
        exists(conn, run_id)?;
    }
    Ok(signals)
}

pub(super) fn takeovers(conn: &Conn<'_>, run_id: RunId) -> Result<Vec<loopstack_core::Takeover>, StoreError> {
    let takeovers = query(conn, TAKEOVERS, &[&run_id.0], |r| rows::takeover(r))?;
    if takeovers.is_empty() {
        exists(conn, run_id)?;
    }
    Ok(takeovers)
}

pub(super) fn list_runs(conn: &Conn<'_>, q: &RunQuery) -> Result<RunPage, StoreError> {
    let size = q.page_size();
    let (statuses, parent) = (status_set(&q.status), q.parent.map(|p| p.0));
    let (after, before) = (q.created_after.map(Timestamp::as_millis), q.created_before.map(Timestamp::as_millis));
    let (cursor, limit) = (q.before.map(|b| b.0), i64::from(size) + 1);
    let (label, value) = (q.label.as_ref().map(|l| l.0.as_str()), q.label.as_ref().map(|l| l.1.as_str()));
    let args: [&dyn rusqlite::ToSql; 10] = [
        &q.workflow.as_deref(),
        &statuses,
        &q.place.as_deref(),
        &parent,
        &after,
        &before,
        &cursor,
        &limit,
        &label,
        &value,
    ];
    // The rows alone: a listing never reads a state.
    let mut runs = query(conn, LIST_RUNS, &args, |r| rows::summary(r))?;
    let next = if runs.len() > size as usize {
        runs.truncate(size as usize);
        runs.last().map(|r| r.run_id)
    } else {
        None
    };
    Ok(RunPage { runs, next })
}

pub(super) fn count_runs(conn: &Conn<'_>, now: Timestamp) -> Result<Vec<RunCount>, StoreError> {
    query(conn, COUNT_RUNS, &[&now.as_millis()], |r| {
        Ok(RunCount::new(
            r.text("workflow")?,
            r.text("status")?.parse()?,
            to_u64(r.int("runs")?)?,
            to_u64(r.int("runnable")?)?,
        ))
    })
}

pub(super) fn history(conn: &Conn<'_>, run_id: RunId) -> Result<Vec<StepRecord>, StoreError> {
    let steps = query(conn, HISTORY, &[&run_id.0], |r| rows::step(r))?;
    if steps.is_empty() {
        exists(conn, run_id)?;
    }
    // Step 0 (the initial state) only gives step 1 the place it left.
    Ok(steps.into_iter().skip(1).collect())
}

pub(super) fn checkpoint(conn: &Conn<'_>, run_id: RunId, step: u64) -> Result<CheckpointRecord, StoreError> {
    match chain(conn, run_id, step)? {
        Some((step, state)) => Ok(CheckpointRecord { step, state: raw(state)? }),
        None => {
            exists(conn, run_id)?;
            Err(StoreError::CheckpointNotFound { run_id, step })
        }
    }
}
