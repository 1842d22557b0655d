//! The schedules of the SQL stores: the `schedules` and `schedule_runs` tables
//! (migration 4), shared by both backends as a macro over the sqlx database type.
//!
//! A due time is moved on by one `UPDATE ... WHERE id = $1 AND next_due = $2 AND
//! NOT paused`, in the transaction that inserts its run (`ON CONFLICT DO NOTHING`,
//! on an id derived from the schedule and the due time): on PostgreSQL a second
//! worker's update waits for the first's row lock and then matches nothing; on
//! SQLite writers take turns. Either way one due time starts one run.

/// The columns of a schedule row.
pub(crate) const SCHEDULE_COLUMNS: &str = "id, workflow, input, recurrence, missed, grace_ms, paused, next_due, \
     last_due, last_run, last_error, created_at, updated_at";

/// Writes the schedules' part of the `Store` impl of `$store` as inherent methods
/// `sched_*`; `$workflow_in` is the dialect's "`r.workflow` is one of the names in
/// the JSON array `$4`".
macro_rules! sql_schedules {
    ($store:ident, $db:ty, $workflow_in:literal) => {
        crate::sql::sql_static!(SELECT_SCHEDULE = "SELECT ", crate::schedules::SCHEDULE_COLUMNS, " FROM schedules WHERE id = $1");
        crate::sql::sql_static!(LIST_SCHEDULES = "SELECT ", crate::schedules::SCHEDULE_COLUMNS, " FROM schedules ORDER BY id");
        // `$3` is unused but for its place: the dialect's workflow test names `$4`.
        crate::sql::sql_static!(DUE_SCHEDULES = "SELECT ", crate::schedules::SCHEDULE_COLUMNS,
            " FROM schedules r WHERE NOT r.paused AND r.next_due <= $1 AND r.next_due <= $3 AND ", $workflow_in,
            " ORDER BY r.next_due LIMIT $2");
        crate::sql::sql_static!(PAUSE_SCHEDULE = "UPDATE schedules SET paused = $2, next_due = COALESCE($3, next_due), \
            updated_at = $4 WHERE id = $1 RETURNING ", crate::schedules::SCHEDULE_COLUMNS);
        const INSERT_SCHEDULE: &str = "INSERT INTO schedules (id, workflow, input, recurrence, missed, grace_ms, \
            paused, next_due, last_due, last_run, last_error, created_at, updated_at) \
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, NULL, NULL, $9, $9) ON CONFLICT (id) DO NOTHING";
        // The compare-and-set: only the writer that read `next_due = $2` moves it.
        const FIRE_SCHEDULE: &str = "UPDATE schedules SET next_due = COALESCE($3, next_due), \
            paused = ($3 IS NULL), last_due = COALESCE($4, last_due), last_run = COALESCE($5, last_run), \
            last_error = $6, updated_at = $7 WHERE id = $1 AND next_due = $2 AND NOT paused";
        const INSERT_SCHEDULED_RUN: &str = "INSERT INTO schedule_runs (schedule, due, run_id) VALUES ($1, $2, $3) \
            ON CONFLICT (schedule, due) DO NOTHING";
        const SCHEDULED_RUNS: &str = "SELECT schedule, due, run_id FROM schedule_runs WHERE schedule = $1 \
            ORDER BY due DESC LIMIT $2";

        fn schedule_from_row(row: &DbRow) -> Result<loopstack_core::ScheduleRecord, StoreError> {
            use loopstack_core::schedule::{Missed, Recurrence};
            let get_err = |e: sqlx::Error| corrupt(e);
            let recurrence: String = row.try_get("recurrence").map_err(get_err)?;
            let recurrence: Recurrence = serde_json::from_str(&recurrence).map_err(corrupt)?;
            let missed: String = row.try_get("missed").map_err(get_err)?;
            let missed: Missed = missed.parse().map_err(corrupt)?;
            let last_due: Option<i64> = row.try_get("last_due").map_err(get_err)?;
            let last_run: Option<uuid::Uuid> = row.try_get("last_run").map_err(get_err)?;
            let mut record = loopstack_core::ScheduleRecord::new(
                row.try_get("id").map_err(get_err)?,
                row.try_get("workflow").map_err(get_err)?,
                raw(row.try_get("input").map_err(get_err)?)?,
                recurrence,
                missed,
                to_u64(row.try_get("grace_ms").map_err(get_err)?)?,
                row.try_get("paused").map_err(get_err)?,
                Timestamp::from_millis(row.try_get("next_due").map_err(get_err)?),
                Timestamp::from_millis(row.try_get("created_at").map_err(get_err)?),
            );
            record.last_due = last_due.map(Timestamp::from_millis);
            record.last_run = last_run.map(RunId);
            record.last_error = row.try_get("last_error").map_err(get_err)?;
            record.updated_at = Timestamp::from_millis(row.try_get("updated_at").map_err(get_err)?);
            Ok(record)
        }

        impl $store {
            async fn sched_create(&self, s: &loopstack_core::ScheduleRecord) -> Result<(), StoreError> {
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
                    .execute(&self.pool)
                    .await
                    .map_err(backend)?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::ScheduleExists(s.id.clone()));
                }
                Ok(())
            }

            async fn sched_load(&self, id: &str) -> Result<loopstack_core::ScheduleRecord, StoreError> {
                let row = sqlx::query(&SELECT_SCHEDULE).bind(id).fetch_optional(&self.pool).await.map_err(backend)?;
                row.map(|r| schedule_from_row(&r)).transpose()?.ok_or_else(|| StoreError::ScheduleNotFound(id.to_owned()))
            }

            async fn sched_list(&self) -> Result<Vec<loopstack_core::ScheduleRecord>, StoreError> {
                let rows = sqlx::query(&LIST_SCHEDULES).fetch_all(&self.pool).await.map_err(backend)?;
                rows.iter().map(schedule_from_row).collect()
            }

            async fn sched_pause(
                &self,
                id: &str,
                paused: bool,
                next_due: Option<Timestamp>,
            ) -> Result<loopstack_core::ScheduleRecord, StoreError> {
                let row = sqlx::query(&PAUSE_SCHEDULE)
                    .bind(id)
                    .bind(paused)
                    .bind(next_due.map(Timestamp::as_millis))
                    .bind(Timestamp::now().as_millis())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(backend)?;
                row.map(|r| schedule_from_row(&r)).transpose()?.ok_or_else(|| StoreError::ScheduleNotFound(id.to_owned()))
            }

            async fn sched_delete(&self, id: &str) -> Result<(), StoreError> {
                let mut tx = self.pool.begin().await.map_err(backend)?;
                let done =
                    sqlx::query("DELETE FROM schedules WHERE id = $1").bind(id).execute(&mut *tx).await.map_err(backend)?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::ScheduleNotFound(id.to_owned()));
                }
                sqlx::query("DELETE FROM schedule_runs WHERE schedule = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                tx.commit().await.map_err(backend)?;
                Ok(())
            }

            async fn sched_due(
                &self,
                workflows: &[&str],
                now: Timestamp,
                limit: u32,
            ) -> Result<Vec<loopstack_core::ScheduleRecord>, StoreError> {
                let names = serde_json::to_string(workflows).map_err(corrupt)?;
                let rows = sqlx::query(&DUE_SCHEDULES)
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
                        schedule_from_row(row)
                            .map_err(|e| tracing::warn!(error = %e, "skipped a schedule this build cannot read"))
                            .ok()
                    })
                    .collect())
            }

            async fn sched_fire(&self, fire: loopstack_core::schedule::ScheduleFire) -> Result<bool, StoreError> {
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
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                if moved.rows_affected() == 0 {
                    // Moved on, paused or deleted by another writer: nothing to do.
                    return Ok(false);
                }
                if let Some((at, run)) = &fire.run {
                    // A run of this id exists only if this due time started it already.
                    insert_run(&mut tx, run, 0, now).await?;
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

            async fn sched_runs(
                &self,
                id: &str,
                limit: u32,
            ) -> Result<Vec<loopstack_core::schedule::ScheduledRun>, StoreError> {
                let rows =
                    sqlx::query(SCHEDULED_RUNS).bind(id).bind(i64::from(limit)).fetch_all(&self.pool).await.map_err(backend)?;
                if rows.is_empty() {
                    self.sched_load(id).await?;
                }
                rows.iter()
                    .map(|row| {
                        Ok(loopstack_core::schedule::ScheduledRun {
                            schedule: row.try_get("schedule").map_err(corrupt)?,
                            due: Timestamp::from_millis(row.try_get("due").map_err(corrupt)?),
                            run_id: RunId(row.try_get("run_id").map_err(corrupt)?),
                        })
                    })
                    .collect()
            }
        }
    };
}

pub(crate) use sql_schedules;
