//! Rows into records: a run's row, a step, a document, a signal.

use std::borrow::Cow;
use std::sync::Arc;

use loopstack_core::serde_json;
use loopstack_core::{Document, RunId, RunSummary, SignalRecord, SignalStatus, StepRecord, StoreError, Timestamp};
use sqlx::Row as _;

use super::{Dialect, SqlStore, corrupt, raw, to_u64};

impl<D> SqlStore<D>
where
    D: Dialect,
    for<'s> &'s str: sqlx::ColumnIndex<D::Row>,
    for<'r> i64: sqlx::Decode<'r, D> + sqlx::Type<D>,
    for<'r> String: sqlx::Decode<'r, D> + sqlx::Type<D>,
    for<'r> uuid::Uuid: sqlx::Decode<'r, D> + sqlx::Type<D>,
{
    /// A run's row, without its state.
    pub(super) fn summary_from_row(row: &D::Row) -> Result<RunSummary, StoreError> {
        let get_err = |e: sqlx::Error| corrupt(e);
        let status: String = row.try_get("status").map_err(get_err)?;
        let waiting: String = row.try_get("waiting_for").map_err(get_err)?;
        let forked_from: Option<uuid::Uuid> = row.try_get("forked_from").map_err(get_err)?;
        let forked_step: Option<i64> = row.try_get("forked_step").map_err(get_err)?;
        let parent: Option<uuid::Uuid> = row.try_get("parent").map_err(get_err)?;
        let lease_until: Option<i64> = row.try_get("lease_until").map_err(get_err)?;
        let wake_at: Option<i64> = row.try_get("wake_at").map_err(get_err)?;
        let mut record = RunSummary {
            run_id: RunId(row.try_get("run_id").map_err(get_err)?),
            workflow: Cow::Owned(row.try_get("workflow").map_err(get_err)?),
            status: status.parse()?,
            place: Cow::Owned(row.try_get("place").map_err(get_err)?),
            step: to_u64(row.try_get("step").map_err(get_err)?)?,
            error: row.try_get("error").map_err(get_err)?,
            definition_hash: Cow::Owned(row.try_get("definition_hash").map_err(get_err)?),
            version: u32::try_from(row.try_get::<i64, _>("version").map_err(get_err)?)
                .map_err(|_| corrupt("a run's version is out of range"))?,
            parent: parent.map(RunId),
            parent_signal: row.try_get::<Option<String>, _>("parent_signal").map_err(get_err)?.map(Cow::Owned),
            forked_from: None,
            epoch: to_u64(row.try_get("epoch").map_err(get_err)?)?,
            signal_seq: to_u64(row.try_get("signal_seq").map_err(get_err)?)?,
            waiting_for: serde_json::from_str(&waiting).map_err(corrupt)?,
            place_since: Timestamp::from_millis(row.try_get("place_since").map_err(get_err)?),
            wake_at: wake_at.map(Timestamp::from_millis),
            lease_owner: row.try_get("lease_owner").map_err(get_err)?,
            lease_until: lease_until.map(Timestamp::from_millis),
            created_at: Timestamp::from_millis(row.try_get("created_at").map_err(get_err)?),
            updated_at: Timestamp::from_millis(row.try_get("updated_at").map_err(get_err)?),
            trace_parent: row.try_get("trace_parent").map_err(get_err)?,
        };
        if let (Some(id), Some(step)) = (forked_from, forked_step) {
            record.forked_from = Some((RunId(id), to_u64(step)?));
        }
        Ok(record)
    }

    pub(super) fn step_from_row(row: &D::Row) -> Result<StepRecord, StoreError> {
        let get_err = |e: sqlx::Error| corrupt(e);
        let transition: String = row.try_get("transition").map_err(get_err)?;
        let from: String = row.try_get("from_place").map_err(get_err)?;
        let to: String = row.try_get("to_place").map_err(get_err)?;
        let mut step = StepRecord::new(to_u64(row.try_get("step").map_err(get_err)?)?, transition, from, to);
        step.at = Timestamp::from_millis(row.try_get("at").map_err(get_err)?);
        Ok(step)
    }

    pub(super) fn document_from_row(row: &D::Row) -> Result<Arc<Document>, StoreError> {
        let get_err = |e: sqlx::Error| corrupt(e);
        let tags: String = row.try_get("tags").map_err(get_err)?;
        let metadata: String = row.try_get("metadata").map_err(get_err)?;
        let version: i64 = row.try_get("version").map_err(get_err)?;
        Ok(Arc::new(Document {
            seq: to_u64(row.try_get("seq").map_err(get_err)?)?,
            doc_type: Cow::Owned(row.try_get("doc_type").map_err(get_err)?),
            key: row.try_get("doc_key").map_err(get_err)?,
            version: u32::try_from(version).map_err(corrupt)?,
            tags: serde_json::from_str(&tags).map_err(corrupt)?,
            metadata: serde_json::from_str(&metadata).map_err(corrupt)?,
            content: raw(row.try_get("content").map_err(get_err)?)?,
            step: to_u64(row.try_get("step").map_err(get_err)?)?,
        }))
    }

    pub(super) fn signal_from_row(row: &D::Row) -> Result<SignalRecord, StoreError> {
        let get_err = |e: sqlx::Error| corrupt(e);
        let status: String = row.try_get("status").map_err(get_err)?;
        let step: Option<i64> = row.try_get("step").map_err(get_err)?;
        let reason: Option<String> = row.try_get("reason").map_err(get_err)?;
        let status = match status.as_str() {
            "pending" => SignalStatus::Pending,
            "delivered" => SignalStatus::Delivered { step: to_u64(step.unwrap_or_default())? },
            "rejected" => SignalStatus::Rejected { reason: reason.unwrap_or_default() },
            other => return Err(corrupt(format!("unknown signal status `{other}`"))),
        };
        Ok(SignalRecord {
            id: to_u64(row.try_get("id").map_err(get_err)?)?,
            name: row.try_get("name").map_err(get_err)?,
            payload: raw(row.try_get("payload").map_err(get_err)?)?,
            status,
            received_at: Timestamp::from_millis(row.try_get("received_at").map_err(get_err)?),
        })
    }
}
