//! Rows into records: a run's row, a step, a document, a signal, a schedule. Written
//! once over [`Cols`], the columns of a row by name, which both drivers' rows give:
//! rusqlite's for the SQLite store, sqlx's (through [`Sx`]) for PostgreSQL.

use std::borrow::Cow;
use std::sync::Arc;

use loopstack_core::serde_json;
use loopstack_core::{
    Document, RunId, RunRecord, RunSummary, ScheduleRecord, SignalRecord, SignalStatus, StepRecord, StoreError,
    Takeover, Timestamp,
};

use super::{corrupt, raw, to_u64};

/// The runs a worker's claim read, one by one. A run that cannot be read fails
/// alone and the others are driven; a read the database failed leaves its run to
/// come back when the lease runs out, and is the claim's error only when no run was
/// read. The SQLite and PostgreSQL stores share this policy.
pub(crate) struct ClaimedReads {
    runs: Vec<RunRecord>,
    failed: Option<StoreError>,
}

impl ClaimedReads {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self { runs: Vec::with_capacity(n), failed: None }
    }

    /// Takes one claimed run's read; the error of a run that does not read (a
    /// corrupt row), for the caller to fail that run with.
    pub(crate) fn push(&mut self, read: Result<RunRecord, StoreError>) -> Option<StoreError> {
        match read {
            Ok(run) => self.runs.push(run),
            Err(e @ StoreError::Corrupt(_)) => return Some(e),
            Err(e) => {
                tracing::warn!(error = %e, "could not read a claimed run");
                self.failed.get_or_insert(e);
            }
        }
        None
    }

    /// The runs read, or the first failure when none was.
    pub(crate) fn finish(self) -> Result<Vec<RunRecord>, StoreError> {
        match self.failed {
            Some(e) if self.runs.is_empty() => Err(e),
            _ => Ok(self.runs),
        }
    }
}

/// A row's columns by name, as the types the schema uses; a column of another type
/// is [`StoreError::Corrupt`].
pub(crate) trait Cols {
    fn int(&self, column: &str) -> Result<i64, StoreError>;
    fn int_opt(&self, column: &str) -> Result<Option<i64>, StoreError>;
    fn text(&self, column: &str) -> Result<String, StoreError>;
    fn text_opt(&self, column: &str) -> Result<Option<String>, StoreError>;
    fn uuid(&self, column: &str) -> Result<uuid::Uuid, StoreError>;
    fn uuid_opt(&self, column: &str) -> Result<Option<uuid::Uuid>, StoreError>;
    fn flag(&self, column: &str) -> Result<bool, StoreError>;
}

/// A sqlx row as [`Cols`].
#[cfg(feature = "postgres")]
pub(crate) struct Sx<'a, R>(pub(crate) &'a R);

#[cfg(feature = "postgres")]
impl<R> Cols for Sx<'_, R>
where
    R: sqlx::Row,
    for<'s> &'s str: sqlx::ColumnIndex<R>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> bool: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> uuid::Uuid: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    fn int(&self, column: &str) -> Result<i64, StoreError> {
        self.0.try_get(column).map_err(corrupt)
    }
    fn int_opt(&self, column: &str) -> Result<Option<i64>, StoreError> {
        self.0.try_get(column).map_err(corrupt)
    }
    fn text(&self, column: &str) -> Result<String, StoreError> {
        self.0.try_get(column).map_err(corrupt)
    }
    fn text_opt(&self, column: &str) -> Result<Option<String>, StoreError> {
        self.0.try_get(column).map_err(corrupt)
    }
    fn uuid(&self, column: &str) -> Result<uuid::Uuid, StoreError> {
        self.0.try_get(column).map_err(corrupt)
    }
    fn uuid_opt(&self, column: &str) -> Result<Option<uuid::Uuid>, StoreError> {
        self.0.try_get(column).map_err(corrupt)
    }
    fn flag(&self, column: &str) -> Result<bool, StoreError> {
        self.0.try_get(column).map_err(corrupt)
    }
}

#[cfg(feature = "sqlite")]
impl Cols for rusqlite::Row<'_> {
    fn int(&self, column: &str) -> Result<i64, StoreError> {
        self.get(column).map_err(corrupt)
    }
    fn int_opt(&self, column: &str) -> Result<Option<i64>, StoreError> {
        self.get(column).map_err(corrupt)
    }
    fn text(&self, column: &str) -> Result<String, StoreError> {
        self.get(column).map_err(corrupt)
    }
    fn text_opt(&self, column: &str) -> Result<Option<String>, StoreError> {
        self.get(column).map_err(corrupt)
    }
    fn uuid(&self, column: &str) -> Result<uuid::Uuid, StoreError> {
        self.get(column).map_err(corrupt)
    }
    fn uuid_opt(&self, column: &str) -> Result<Option<uuid::Uuid>, StoreError> {
        self.get(column).map_err(corrupt)
    }
    fn flag(&self, column: &str) -> Result<bool, StoreError> {
        self.get(column).map_err(corrupt)
    }
}

/// A run's row, without its state.
pub(crate) fn summary(row: &impl Cols) -> Result<RunSummary, StoreError> {
    let status = row.text("status")?;
    let waiting = row.text("waiting_for")?;
    let forked_from = row.uuid_opt("forked_from")?;
    let forked_step = row.int_opt("forked_step")?;
    let mut record = RunSummary {
        run_id: RunId(row.uuid("run_id")?),
        workflow: Cow::Owned(row.text("workflow")?),
        status: status.parse()?,
        place: Cow::Owned(row.text("place")?),
        step: to_u64(row.int("step")?)?,
        error: row.text_opt("error")?,
        definition_hash: Cow::Owned(row.text("definition_hash")?),
        version: u32::try_from(row.int("version")?).map_err(|_| corrupt("a run's version is out of range"))?,
        parent: row.uuid_opt("parent")?.map(RunId),
        parent_signal: row.text_opt("parent_signal")?.map(Cow::Owned),
        forked_from: None,
        epoch: to_u64(row.int("epoch")?)?,
        signal_seq: to_u64(row.int("signal_seq")?)?,
        waiting_for: serde_json::from_str(&waiting).map_err(corrupt)?,
        place_since: Timestamp::from_millis(row.int("place_since")?),
        wake_at: row.int_opt("wake_at")?.map(Timestamp::from_millis),
        lease_owner: row.text_opt("lease_owner")?,
        lease_until: row.int_opt("lease_until")?.map(Timestamp::from_millis),
        created_at: Timestamp::from_millis(row.int("created_at")?),
        updated_at: Timestamp::from_millis(row.int("updated_at")?),
        trace_parent: row.text_opt("trace_parent")?,
        held_since: row.int_opt("held_since")?.map(Timestamp::from_millis),
        taken_from: row.text_opt("taken_from")?,
        labels: match row.text_opt("labels")? {
            Some(labels) => serde_json::from_str(&labels).map_err(corrupt)?,
            None => loopstack_core::Labels::new(),
        },
    };
    if let (Some(id), Some(step)) = (forked_from, forked_step) {
        record.forked_from = Some((RunId(id), to_u64(step)?));
    }
    Ok(record)
}

pub(crate) fn step(row: &impl Cols) -> Result<StepRecord, StoreError> {
    let transition = row.text("transition")?;
    let from = row.text("from_place")?;
    let to = row.text("to_place")?;
    let mut step = StepRecord::new(to_u64(row.int("step")?)?, transition, from, to);
    step.at = Timestamp::from_millis(row.int("at")?);
    Ok(step)
}

pub(crate) fn document(row: &impl Cols) -> Result<Arc<Document>, StoreError> {
    let tags = row.text("tags")?;
    let metadata = row.text("metadata")?;
    Ok(Arc::new(Document {
        seq: to_u64(row.int("seq")?)?,
        doc_type: Cow::Owned(row.text("doc_type")?),
        key: row.text_opt("doc_key")?,
        version: u32::try_from(row.int("version")?).map_err(corrupt)?,
        tags: serde_json::from_str(&tags).map_err(corrupt)?,
        metadata: loopstack_core::Metadata::from_json(metadata).map_err(corrupt)?,
        content: raw(row.text("content")?)?,
        step: to_u64(row.int("step")?)?,
    }))
}

pub(crate) fn takeover(row: &impl Cols) -> Result<Takeover, StoreError> {
    Ok(Takeover::new(
        Timestamp::from_millis(row.int("at")?),
        row.text("from_owner")?,
        Timestamp::from_millis(row.int("lease_until")?),
        row.text_opt("by_owner")?,
        to_u64(row.int("epoch")?)?,
    ))
}

pub(crate) fn signal(row: &impl Cols) -> Result<SignalRecord, StoreError> {
    let status = row.text("status")?;
    let step = row.int_opt("step")?;
    let reason = row.text_opt("reason")?;
    let status = match status.as_str() {
        "pending" => SignalStatus::Pending,
        "delivered" => SignalStatus::Delivered { step: to_u64(step.unwrap_or_default())? },
        "rejected" => SignalStatus::Rejected { reason: reason.unwrap_or_default() },
        other => return Err(corrupt(format!("unknown signal status `{other}`"))),
    };
    Ok(SignalRecord {
        id: to_u64(row.int("id")?)?,
        name: row.text("name")?,
        payload: raw(row.text("payload")?)?,
        status,
        received_at: Timestamp::from_millis(row.int("received_at")?),
    })
}

pub(crate) fn schedule(row: &impl Cols) -> Result<ScheduleRecord, StoreError> {
    use loopstack_core::schedule::{Missed, Recurrence};
    let recurrence: Recurrence = serde_json::from_str(&row.text("recurrence")?).map_err(corrupt)?;
    let missed: Missed = row.text("missed")?.parse().map_err(corrupt)?;
    let mut record = ScheduleRecord::new(
        row.text("id")?,
        row.text("workflow")?,
        raw(row.text("input")?)?,
        recurrence,
        missed,
        to_u64(row.int("grace_ms")?)?,
        row.flag("paused")?,
        Timestamp::from_millis(row.int("next_due")?),
        Timestamp::from_millis(row.int("created_at")?),
    );
    record.overlap = row.text("overlap")?.parse().map_err(corrupt)?;
    record.pending_due = row.int_opt("pending_due")?.map(Timestamp::from_millis);
    record.last_due = row.int_opt("last_due")?.map(Timestamp::from_millis);
    record.last_run = row.uuid_opt("last_run")?.map(RunId);
    record.last_error = row.text_opt("last_error")?;
    record.updated_at = Timestamp::from_millis(row.int("updated_at")?);
    Ok(record)
}

/// A scheduled run's row.
pub(crate) fn scheduled_run(row: &impl Cols) -> Result<loopstack_core::schedule::ScheduledRun, StoreError> {
    Ok(loopstack_core::schedule::ScheduledRun {
        schedule: row.text("schedule")?,
        due: Timestamp::from_millis(row.int("due")?),
        run_id: RunId(row.uuid("run_id")?),
    })
}

/// The decoders as the sqlx code calls them, on a dialect's rows.
#[cfg(feature = "postgres")]
impl<D> super::SqlStore<D>
where
    D: super::Dialect,
    for<'s> &'s str: sqlx::ColumnIndex<D::Row>,
    for<'r> i64: sqlx::Decode<'r, D> + sqlx::Type<D>,
    for<'r> bool: sqlx::Decode<'r, D> + sqlx::Type<D>,
    for<'r> String: sqlx::Decode<'r, D> + sqlx::Type<D>,
    for<'r> uuid::Uuid: sqlx::Decode<'r, D> + sqlx::Type<D>,
{
    pub(crate) fn summary_from_row(row: &D::Row) -> Result<RunSummary, StoreError> {
        summary(&Sx(row))
    }

    pub(crate) fn step_from_row(row: &D::Row) -> Result<StepRecord, StoreError> {
        step(&Sx(row))
    }

    pub(crate) fn document_from_row(row: &D::Row) -> Result<Arc<Document>, StoreError> {
        document(&Sx(row))
    }

    pub(crate) fn signal_from_row(row: &D::Row) -> Result<SignalRecord, StoreError> {
        signal(&Sx(row))
    }

    pub(crate) fn takeover_from_row(row: &D::Row) -> Result<Takeover, StoreError> {
        takeover(&Sx(row))
    }

    pub(crate) fn schedule_from_row(row: &D::Row) -> Result<ScheduleRecord, StoreError> {
        schedule(&Sx(row))
    }

    pub(crate) fn scheduled_run_from_row(row: &D::Row) -> Result<loopstack_core::schedule::ScheduledRun, StoreError> {
        scheduled_run(&Sx(row))
    }
}
