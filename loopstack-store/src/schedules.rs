//! The schedules of the SQL stores: the `schedules` and `schedule_runs` tables
//! (migration 4), shared by both backends.
//!
//! A due time is moved on by one `UPDATE ... WHERE id = $1 AND next_due = $2 AND
//! NOT paused` (and the pending due time as read, and with an overlap policy that
//! the last run has ended), in the transaction that inserts its run (`ON CONFLICT DO NOTHING`,
//! on an id derived from the schedule and the due time): on PostgreSQL a second
//! worker's update waits for the first's row lock and then matches nothing; on
//! SQLite writers take turns. Either way one due time starts one run.

use loopstack_core::serde_json;
use loopstack_core::{StoreError, Timestamp};

use crate::sql::queries::{
    DELETE_SCHEDULE, DELETE_SCHEDULE_RUNS, FIRE_SCHEDULE, INSERT_SCHEDULE, INSERT_SCHEDULED_RUN, LIST_SCHEDULES,
    PAUSE_SCHEDULE, SCHEDULED_RUNS, SELECT_SCHEDULE,
};
use crate::sql::{Dialect, SqlStore, backend, corrupt, to_i64};

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
    pub(crate) async fn create_schedule(&self, s: &loopstack_core::ScheduleRecord) -> Result<(), StoreError> {
        let done = sqlx::query(INSERT_SCHEDULE)
            .bind(&s.id)
            .bind(&s.workflow)
            .bind(s.input.get())
            .bind(serde_json::to_string(&s.recurrence).map_err(corrupt)?)
            .bind(s.missed.as_str())
            .bind(to_i64(s.grace_ms))
            .bind(s.paused)
            .bind(s.next_due.as_millis())
            .bind(s.created_at.as_millis())
            .bind(s.overlap.as_str())
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        if D::rows_affected(&done) == 0 {
            return Err(StoreError::ScheduleExists(s.id.clone()));
        }
        Ok(())
    }

    pub(crate) async fn load_schedule(&self, id: &str) -> Result<loopstack_core::ScheduleRecord, StoreError> {
        let row = sqlx::query(SELECT_SCHEDULE).bind(id).fetch_optional(&self.pool).await.map_err(backend)?;
        row.map(|r| Self::schedule_from_row(&r)).transpose()?.ok_or_else(|| StoreError::ScheduleNotFound(id.to_owned()))
    }

    pub(crate) async fn list_schedules(&self) -> Result<Vec<loopstack_core::ScheduleRecord>, StoreError> {
        let rows = sqlx::query(LIST_SCHEDULES).fetch_all(&self.pool).await.map_err(backend)?;
        rows.iter().map(Self::schedule_from_row).collect()
    }

    pub(crate) async fn set_schedule_paused(
        &self,
        id: &str,
        paused: bool,
        next_due: Option<Timestamp>,
    ) -> Result<loopstack_core::ScheduleRecord, StoreError> {
        let row = sqlx::query(PAUSE_SCHEDULE)
            .bind(id)
            .bind(paused)
            .bind(next_due.map(Timestamp::as_millis))
            .bind(Timestamp::now().as_millis())
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?;
        row.map(|r| Self::schedule_from_row(&r)).transpose()?.ok_or_else(|| StoreError::ScheduleNotFound(id.to_owned()))
    }

    pub(crate) async fn delete_schedule(&self, id: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let done = sqlx::query(DELETE_SCHEDULE).bind(id).execute(&mut *tx).await.map_err(backend)?;
        if D::rows_affected(&done) == 0 {
            return Err(StoreError::ScheduleNotFound(id.to_owned()));
        }
        sqlx::query(DELETE_SCHEDULE_RUNS).bind(id).execute(&mut *tx).await.map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        Ok(())
    }

    pub(crate) async fn due_schedules(
        &self,
        workflows: &[&str],
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<loopstack_core::ScheduleRecord>, StoreError> {
        let names = serde_json::to_string(workflows).map_err(corrupt)?;
        let rows = sqlx::query(D::DUE_SCHEDULES)
            .bind(now.as_millis())
            .bind(i64::from(limit))
            .bind(now.as_millis())
            .bind(names)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        // One that cannot be read is left out, and stops none of the others.
        Ok(rows
            .iter()
            .filter_map(|row| {
                Self::schedule_from_row(row)
                    .map_err(|e| tracing::warn!(error = %e, "skipped a schedule this build cannot read"))
                    .ok()
            })
            .collect())
    }

    pub(crate) async fn fire_schedule(&self, fire: loopstack_core::schedule::ScheduleFire) -> Result<bool, StoreError> {
        let now = Timestamp::now().as_millis();
        let (at, run_id) = match &fire.run {
            Some((at, run)) => (Some(at.as_millis()), Some(run.run_id.0)),
            None => (None, None),
        };
        let mut tx = self.pool.begin().await.map_err(backend)?;
        let moved = sqlx::query(FIRE_SCHEDULE)
            .bind(&fire.schedule)
            .bind(fire.due.as_millis())
            .bind(fire.next_due.map(Timestamp::as_millis))
            .bind(at)
            .bind(run_id)
            .bind(fire.error.as_deref())
            .bind(now)
            .bind(fire.pending.map(Timestamp::as_millis))
            .bind(fire.next_pending.map(Timestamp::as_millis))
            .bind(fire.if_last_run_ended)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        if D::rows_affected(&moved) == 0 {
            // Moved on, paused or deleted by another writer: nothing to do.
            return Ok(false);
        }
        if let Some((at, run)) = &fire.run {
            // A run of this id exists only if this due time started it already.
            Self::insert_run(&mut tx, run, 0, now).await?;
            sqlx::query(INSERT_SCHEDULED_RUN)
                .bind(&fire.schedule)
                .bind(at.as_millis())
                .bind(run.run_id.0)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)?;
        Ok(true)
    }

    pub(crate) async fn scheduled_runs(
        &self,
        id: &str,
        limit: u32,
    ) -> Result<Vec<loopstack_core::schedule::ScheduledRun>, StoreError> {
        let rows =
            sqlx::query(SCHEDULED_RUNS).bind(id).bind(i64::from(limit)).fetch_all(&self.pool).await.map_err(backend)?;
        if rows.is_empty() {
            self.load_schedule(id).await?;
        }
        rows.iter().map(Self::scheduled_run_from_row).collect()
    }
}
