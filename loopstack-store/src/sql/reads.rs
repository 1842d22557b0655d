//! The reads (a run with its state, listings, history, checkpoints, documents) and
//! the signals (sending, the inbox, rejecting).

use std::sync::Arc;

use loopstack_core::serde_json::value::RawValue;
use loopstack_core::{
    CheckpointRecord, Document, Inbox, RunCount, RunId, RunPage, RunQuery, RunRecord, RunSummary, SignalReceipt,
    SignalRecord, StepRecord, StoreError, Timestamp,
};
use sqlx::Row as _;

use super::queries::run_columns;
use super::queries::{
    ALL_SIGNALS, CHECKPOINT_CHAIN, COUNT_RUNS, DOCUMENT_HISTORY, DOCUMENT_VERSIONS, DOCUMENTS_AT, HISTORY,
    INSERT_SIGNAL, NEXT_SIGNAL, PENDING_SIGNALS, REJECT_SIGNAL, RUN_EXISTS, SELECT_RUN, SIGNAL_SEQ, TAKEOVERS,
};
use super::{Dialect, SqlStore, backend, corrupt, raw, to_i64, to_u64};

impl<D> SqlStore<D>
where
    D: Dialect,
    for<'c> &'c mut D::Connection: sqlx::Executor<'c, Database = D>,
    D::Arguments: sqlx::IntoArguments<D>,
    for<'s> &'s str: sqlx::ColumnIndex<D::Row> + sqlx::Encode<'s, D> + sqlx::Type<D>,
    for<'r> i64: sqlx::Encode<'r, D> + sqlx::Decode<'r, D> + sqlx::Type<D>,
    for<'r> bool: sqlx::Encode<'r, D> + sqlx::Decode<'r, D> + sqlx::Type<D>,
    for<'r> String: sqlx::Encode<'r, D> + sqlx::Decode<'r, D> + sqlx::Type<D>,
    for<'r> uuid::Uuid: sqlx::Encode<'r, D> + sqlx::Decode<'r, D> + sqlx::Type<D>,
    for<'r> Option<i64>: sqlx::Encode<'r, D>,
    for<'r> Option<String>: sqlx::Encode<'r, D>,
    for<'r> Option<uuid::Uuid>: sqlx::Encode<'r, D>,
    for<'s> Option<&'s str>: sqlx::Encode<'s, D>,
{
    pub(super) async fn load(&self, run_id: RunId) -> Result<RunRecord, StoreError> {
        let row = sqlx::query(SELECT_RUN).bind(run_id.0).fetch_optional(&self.pool).await.map_err(backend)?;
        let record = row.map(|r| Self::summary_from_row(&r)).transpose()?.ok_or(StoreError::RunNotFound(run_id))?;
        self.with_state(record).await
    }

    /// A run's row with its state: that of its latest checkpoint.
    pub(super) async fn with_state(&self, run: RunSummary) -> Result<RunRecord, StoreError> {
        match self.chain(run.run_id, run.step).await? {
            Some((_, state)) => Ok(run.with_state(raw(state)?)),
            None => Err(corrupt(format!("run {} has no checkpoint {}", run.run_id, run.step))),
        }
    }

    /// The step record and state of checkpoint `step`: its chain's full state with
    /// the patches after it applied.
    async fn chain(&self, run_id: RunId, step: u64) -> Result<Option<(StepRecord, String)>, StoreError> {
        let rows = sqlx::query(CHECKPOINT_CHAIN)
            .bind(run_id.0)
            .bind(to_i64(step))
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        let mut state: Option<String> = None;
        for row in &rows {
            let full: Option<String> = row.try_get("state").map_err(corrupt)?;
            let patch: Option<String> = row.try_get("state_patch").map_err(corrupt)?;
            state = match (full, patch, state) {
                (Some(full), _, _) => Some(full),
                (None, Some(patch), Some(base)) => Some(super::patch::apply_patch(&base, &patch)?),
                (None, None, base) => base,
                (None, Some(_), None) => return Err(corrupt("a state patch without a base")),
            };
        }
        match (rows.last(), state) {
            (Some(row), Some(state)) if row.try_get::<i64, _>("step").map_err(corrupt)? == to_i64(step) => {
                Ok(Some((Self::step_from_row(row)?, state)))
            }
            _ => Ok(None),
        }
    }

    pub(super) async fn exists(&self, run_id: RunId) -> Result<(), StoreError> {
        let row = sqlx::query(RUN_EXISTS).bind(run_id.0).fetch_optional(&self.pool).await.map_err(backend)?;
        row.map(|_| ()).ok_or(StoreError::RunNotFound(run_id))
    }

    async fn fetch_documents(
        &self,
        sql: &'static str,
        run_id: RunId,
        step: Option<u64>,
        key: Option<(&str, &str)>,
    ) -> Result<Vec<Arc<Document>>, StoreError> {
        let mut q = sqlx::query(sql).bind(run_id.0);
        if let Some(step) = step {
            q = q.bind(to_i64(step));
        }
        if let Some((doc_type, key)) = key {
            q = q.bind(doc_type.to_owned()).bind(key.to_owned());
        }
        let rows = q.fetch_all(&self.pool).await.map_err(backend)?;
        if rows.is_empty() {
            self.exists(run_id).await?;
        }
        rows.iter().map(Self::document_from_row).collect()
    }

    pub(crate) async fn send_signal(
        &self,
        run_id: RunId,
        name: &str,
        payload: Box<RawValue>,
    ) -> Result<SignalReceipt, StoreError> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let row = sqlx::query(NEXT_SIGNAL).bind(run_id.0).fetch_optional(&mut *tx).await.map_err(backend)?;
        let Some(row) = row else {
            drop(tx);
            let current = self.load(run_id).await?;
            return Err(StoreError::Finished { run_id, status: current.status });
        };
        let id: i64 = row.try_get("signal_seq").map_err(corrupt)?;
        let status: String = row.try_get("status").map_err(corrupt)?;
        let run: i64 = row.try_get("id").map_err(corrupt)?;
        sqlx::query(INSERT_SIGNAL)
            .bind(run)
            .bind(id)
            .bind(name)
            .bind(payload.get())
            .bind(Timestamp::now().as_millis())
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        Ok(SignalReceipt { id: to_u64(id)?, status: status.parse()? })
    }

    pub(crate) async fn inbox(&self, run_id: RunId) -> Result<Inbox, StoreError> {
        // The count first: a signal arriving between the two reads makes the count
        // stale, so parking fails and the driver reads again.
        let row = sqlx::query(SIGNAL_SEQ).bind(run_id.0).fetch_optional(&self.pool).await.map_err(backend)?;
        let seq: i64 = row.ok_or(StoreError::RunNotFound(run_id))?.try_get("signal_seq").map_err(corrupt)?;
        let rows = sqlx::query(PENDING_SIGNALS).bind(run_id.0).fetch_all(&self.pool).await.map_err(backend)?;
        let pending = rows.iter().map(Self::signal_from_row).collect::<Result<_, _>>()?;
        Ok(Inbox { pending, seq: to_u64(seq)? })
    }

    pub(crate) async fn reject_signal(
        &self,
        run_id: RunId,
        epoch: u64,
        signal: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        let done = sqlx::query(REJECT_SIGNAL)
            .bind(run_id.0)
            .bind(to_i64(epoch))
            .bind(to_i64(signal))
            .bind(reason)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        if D::rows_affected(&done) == 0 {
            let current = self.load(run_id).await?;
            if current.epoch != epoch {
                return Err(StoreError::Fenced { run_id, epoch, current: current.epoch });
            }
            return Err(StoreError::SignalNotFound { run_id, signal });
        }
        Ok(())
    }

    pub(crate) async fn signals(&self, run_id: RunId) -> Result<Vec<SignalRecord>, StoreError> {
        let rows = sqlx::query(ALL_SIGNALS).bind(run_id.0).fetch_all(&self.pool).await.map_err(backend)?;
        if rows.is_empty() {
            self.exists(run_id).await?;
        }
        rows.iter().map(Self::signal_from_row).collect()
    }

    pub(crate) async fn takeovers(&self, run_id: RunId) -> Result<Vec<loopstack_core::Takeover>, StoreError> {
        let rows = sqlx::query(TAKEOVERS).bind(run_id.0).fetch_all(&self.pool).await.map_err(backend)?;
        if rows.is_empty() {
            self.exists(run_id).await?;
        }
        rows.iter().map(Self::takeover_from_row).collect()
    }

    pub(crate) async fn load_run(&self, run_id: RunId) -> Result<RunRecord, StoreError> {
        self.load(run_id).await
    }

    pub(crate) async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
        let size = query.page_size();
        // Only the filters the query sets, so each combination gets a plan of its
        // own: written as `($1 IS NULL OR status = $1) AND ...`, one generic plan
        // served them all and could use no index, so a page filtered by status
        // read the runs of every other status first.
        let mut sql = String::from(concat!("SELECT ", run_columns!(), " FROM runs WHERE TRUE"));
        let mut params = 0;
        let mut next = || {
            params += 1;
            format!("${params}")
        };
        // The placeholders first, then the values bound in the same order.
        if query.workflow.is_some() {
            sql += " AND workflow = ";
            sql += &next();
        }
        if !query.status.is_empty() {
            let list: Vec<String> = query.status.iter().map(|_| next()).collect();
            sql += &format!(" AND status IN ({})", list.join(", "));
        }
        for (set, clause) in [
            (query.place.is_some(), " AND place = "),
            (query.parent.is_some(), " AND parent = "),
            (query.created_after.is_some(), " AND created_at >= "),
            (query.created_before.is_some(), " AND created_at < "),
            (query.before.is_some(), " AND run_id < "),
        ] {
            if set {
                sql += clause;
                sql += &next();
            }
        }
        if query.label.is_some() {
            // The labels are a JSON object's text (NULL for none).
            let (name, value) = (next(), next());
            sql += &format!(" AND labels IS NOT NULL AND (labels::jsonb ->> {name}) = {value}");
        }
        sql += " ORDER BY run_id DESC LIMIT ";
        sql += &next();
        // Only placeholders were written into `sql`; the values are bound.
        let mut select = sqlx::query(sqlx::AssertSqlSafe(sql));
        if let Some(workflow) = &query.workflow {
            select = select.bind(workflow.as_str());
        }
        for status in &query.status {
            select = select.bind(status.as_str());
        }
        if let Some(place) = &query.place {
            select = select.bind(place.as_str());
        }
        if let Some(parent) = query.parent {
            select = select.bind(parent.0);
        }
        if let Some(after) = query.created_after {
            select = select.bind(after.as_millis());
        }
        if let Some(before) = query.created_before {
            select = select.bind(before.as_millis());
        }
        if let Some(cursor) = query.before {
            select = select.bind(cursor.0);
        }
        if let Some((name, value)) = &query.label {
            select = select.bind(name.as_str()).bind(value.as_str());
        }
        let rows = select.bind(i64::from(size) + 1).fetch_all(&self.pool).await.map_err(backend)?;
        // The rows alone: a listing never reads a state.
        let mut runs = rows.iter().take(size as usize).map(Self::summary_from_row).collect::<Result<Vec<_>, _>>()?;
        let next = if rows.len() > size as usize {
            runs.truncate(size as usize);
            runs.last().map(|r| r.run_id)
        } else {
            None
        };
        Ok(RunPage { runs, next })
    }

    pub(crate) async fn count_runs(&self, now: Timestamp) -> Result<Vec<RunCount>, StoreError> {
        use super::rows::Cols as _;
        let rows = sqlx::query(COUNT_RUNS).bind(now.as_millis()).fetch_all(&self.pool).await.map_err(backend)?;
        rows.iter()
            .map(|row| {
                let row = super::rows::Sx(row);
                let (runs, runnable) = (to_u64(row.int("runs")?)?, to_u64(row.int("runnable")?)?);
                Ok(RunCount::new(row.text("workflow")?, row.text("status")?.parse()?, runs, runnable))
            })
            .collect()
    }

    pub(crate) async fn history(&self, run_id: RunId) -> Result<Vec<StepRecord>, StoreError> {
        let rows = sqlx::query(HISTORY).bind(run_id.0).fetch_all(&self.pool).await.map_err(backend)?;
        if rows.is_empty() {
            self.exists(run_id).await?;
        }
        // Step 0 (the initial state) only gives step 1 the place it left.
        rows.iter().skip(1).map(Self::step_from_row).collect()
    }

    pub(crate) async fn checkpoint(&self, run_id: RunId, step: u64) -> Result<CheckpointRecord, StoreError> {
        match self.chain(run_id, step).await? {
            Some((step, state)) => Ok(CheckpointRecord { step, state: raw(state)? }),
            None => {
                self.exists(run_id).await?;
                Err(StoreError::CheckpointNotFound { run_id, step })
            }
        }
    }

    pub(crate) async fn documents(&self, run_id: RunId) -> Result<Vec<Arc<Document>>, StoreError> {
        self.fetch_documents(DOCUMENTS_AT, run_id, Some(i64::MAX as u64), None).await
    }

    pub(crate) async fn documents_at(&self, run_id: RunId, step: u64) -> Result<Vec<Arc<Document>>, StoreError> {
        self.fetch_documents(DOCUMENTS_AT, run_id, Some(step), None).await
    }

    pub(crate) async fn document_versions(&self, run_id: RunId) -> Result<Vec<Arc<Document>>, StoreError> {
        self.fetch_documents(DOCUMENT_VERSIONS, run_id, None, None).await
    }

    pub(crate) async fn document_history(
        &self,
        run_id: RunId,
        doc_type: &str,
        key: &str,
    ) -> Result<Vec<Arc<Document>>, StoreError> {
        self.fetch_documents(DOCUMENT_HISTORY, run_id, None, Some((doc_type, key))).await
    }
}
