//! The SQLite store's event log (`events`, `event_listeners`) and schedules
//! (`schedules`, `schedule_runs`), run on its connection's thread. How followers
//! wait is `crate::events`; the schedules' compare-and-set is described in
//! `crate::schedules`'s terms: one due time starts one run, writers take turns.

use loopstack_core::schedule::{ScheduleFire, ScheduledRun};
use loopstack_core::serde_json;
use loopstack_core::store::{EventRetention, LoggedEvent};
use loopstack_core::{RunId, ScheduleRecord, StoreError, Timestamp};
use rusqlite::ToSql;

use super::conn::{Conn, exec, query, query_one, query_text, write};
use super::writes::insert_run;
use crate::sql::queries::{
    DELETE_SCHEDULE, DELETE_SCHEDULE_RUNS, DROP_EXPIRED_LISTENERS, FIRE_SCHEDULE, HAS_LISTENERS, INSERT_SCHEDULE,
    INSERT_SCHEDULED_RUN, LAST_EVENT_ID, LIST_SCHEDULES, LISTEN, PAUSE_SCHEDULE, PRUNE_EVENTS_BY_AGE,
    PRUNE_EVENTS_BY_COUNT, READ_EVENTS, READ_RUN_EVENTS, SCHEDULED_RUNS, SELECT_SCHEDULE, UNLISTEN,
};
use crate::sql::rows::{self, Cols as _};
use crate::sql::{corrupt, to_i64, to_u64};

/// Appends events (`(run, at, event as JSON)`) in one `INSERT` and one transaction
/// (SQLite has one writer at a time, so ids are committed in order); the newest id.
pub(super) fn append_events(conn: &Conn<'_>, origin: &str, events: &[(RunId, i64, String)]) -> Result<i64, StoreError> {
    let mut sql = String::from("INSERT INTO events (run_id, origin, at, event) VALUES ");
    let mut args: Vec<&dyn ToSql> = Vec::with_capacity(events.len() * 4);
    let origin: &dyn ToSql = &origin;
    for (i, (run_id, at, event)) in events.iter().enumerate() {
        sql.push_str(if i == 0 { "(?, ?, ?, ?)" } else { ", (?, ?, ?, ?)" });
        args.extend([&run_id.0 as &dyn ToSql, origin, at, event]);
    }
    sql.push_str(" RETURNING id");
    let tx = write(conn)?;
    // Bare `?`s: the arguments in order.
    let ids = query_text(&tx, &sql, &args, |r| r.int("id"))?;
    tx.commit()?;
    Ok(ids.into_iter().max().unwrap_or(0))
}

pub(super) fn read_events(
    conn: &Conn<'_>,
    after: u64,
    run: Option<RunId>,
    limit: u32,
) -> Result<Vec<LoggedEvent>, StoreError> {
    let (after, limit) = (to_i64(after), i64::from(limit));
    let read = |r: &rusqlite::Row<'_>| Ok((to_u64(r.int("id")?)?, r.text("origin")?, r.text("event")?));
    let rows = match run {
        Some(run) => query(conn, READ_RUN_EVENTS, &[&run.0, &after, &limit], read),
        None => query(conn, READ_EVENTS, &[&after, &limit], read),
    }?;
    let mut events = Vec::with_capacity(rows.len());
    for (id, origin, text) in rows {
        match serde_json::from_str(&text) {
            Ok(event) => events.push(LoggedEvent { id, origin, event }),
            Err(e) => tracing::debug!(id, error = %e, "skipped an event this build cannot read"),
        }
    }
    Ok(events)
}

pub(super) fn last_event_id(conn: &Conn<'_>) -> Result<u64, StoreError> {
    let id = query_one(conn, LAST_EVENT_ID, &[], |r| r.get::<_, Option<i64>>(0).map_err(corrupt))?;
    to_u64(id.flatten().unwrap_or(0))
}

pub(super) fn prune_events(conn: &Conn<'_>, now: Timestamp, retention: &EventRetention) -> Result<u64, StoreError> {
    let oldest = now.as_millis().saturating_sub(i64::try_from(retention.max_age.as_millis()).unwrap_or(i64::MAX));
    let by_age = exec(conn, PRUNE_EVENTS_BY_AGE, &[&oldest])?;
    let by_count = exec(conn, PRUNE_EVENTS_BY_COUNT, &[&to_i64(retention.max_events)])?;
    Ok((by_age + by_count) as u64)
}

pub(super) fn listen_events(conn: &Conn<'_>, listener: &str, until: Timestamp) -> Result<(), StoreError> {
    exec(conn, DROP_EXPIRED_LISTENERS, &[&Timestamp::now().as_millis()])?;
    exec(conn, LISTEN, &[&listener, &until.as_millis()])?;
    Ok(())
}

pub(super) fn unlisten_events(conn: &Conn<'_>, listener: &str) -> Result<(), StoreError> {
    exec(conn, UNLISTEN, &[&listener])?;
    Ok(())
}

pub(super) fn has_event_listeners(conn: &Conn<'_>, now: Timestamp) -> Result<bool, StoreError> {
    Ok(query_one(conn, HAS_LISTENERS, &[&now.as_millis()], |_| Ok(()))?.is_some())
}

pub(super) fn create_schedule(conn: &Conn<'_>, s: &ScheduleRecord) -> Result<(), StoreError> {
    let recurrence = serde_json::to_string(&s.recurrence).map_err(corrupt)?;
    let (grace, due, created) = (to_i64(s.grace_ms), s.next_due.as_millis(), s.created_at.as_millis());
    let args: [&dyn ToSql; 10] = [
        &s.id,
        &s.workflow,
        &s.input.get(),
        &recurrence,
        &s.missed.as_str(),
        &grace,
        &s.paused,
        &due,
        &created,
        &s.overlap.as_str(),
    ];
    if exec(conn, INSERT_SCHEDULE, &args)? == 0 {
        return Err(StoreError::ScheduleExists(s.id.clone()));
    }
    Ok(())
}

pub(super) fn load_schedule(conn: &Conn<'_>, id: &str) -> Result<ScheduleRecord, StoreError> {
    let found = query_one(conn, SELECT_SCHEDULE, &[&id], |r| rows::schedule(r))?;
    found.ok_or_else(|| StoreError::ScheduleNotFound(id.to_owned()))
}

pub(super) fn list_schedules(conn: &Conn<'_>) -> Result<Vec<ScheduleRecord>, StoreError> {
    query(conn, LIST_SCHEDULES, &[], |r| rows::schedule(r))
}

pub(super) fn set_schedule_paused(
    conn: &Conn<'_>,
    id: &str,
    paused: bool,
    next_due: Option<Timestamp>,
) -> Result<ScheduleRecord, StoreError> {
    let (due, now) = (next_due.map(Timestamp::as_millis), Timestamp::now().as_millis());
    let found = query_one(conn, PAUSE_SCHEDULE, &[&id, &paused, &due, &now], |r| rows::schedule(r))?;
    found.ok_or_else(|| StoreError::ScheduleNotFound(id.to_owned()))
}

pub(super) fn delete_schedule(conn: &Conn<'_>, id: &str) -> Result<(), StoreError> {
    let tx = write(conn)?;
    if exec(&tx, DELETE_SCHEDULE, &[&id])? == 0 {
        return Err(StoreError::ScheduleNotFound(id.to_owned()));
    }
    exec(&tx, DELETE_SCHEDULE_RUNS, &[&id])?;
    tx.commit()
}

pub(super) fn due_schedules(
    conn: &Conn<'_>,
    names: &str,
    now: Timestamp,
    limit: u32,
) -> Result<Vec<ScheduleRecord>, StoreError> {
    let (now, limit) = (now.as_millis(), i64::from(limit));
    // One that cannot be read is left out, and stops none of the others.
    let found = query(conn, super::DUE_SCHEDULES, &[&now, &limit, &now, &names], |r| {
        Ok(rows::schedule(r).map_err(|e| tracing::warn!(error = %e, "skipped a schedule this build cannot read")).ok())
    })?;
    Ok(found.into_iter().flatten().collect())
}

pub(super) fn fire_schedule(conn: &Conn<'_>, fire: &ScheduleFire) -> Result<bool, StoreError> {
    let now = Timestamp::now().as_millis();
    let (at, run_id) = match &fire.run {
        Some((at, run)) => (Some(at.as_millis()), Some(run.run_id.0)),
        None => (None, None),
    };
    let tx = write(conn)?;
    let (due, next) = (fire.due.as_millis(), fire.next_due.map(Timestamp::as_millis));
    let (pending, next_pending) = (fire.pending.map(Timestamp::as_millis), fire.next_pending.map(Timestamp::as_millis));
    let args: [&dyn ToSql; 10] = [
        &fire.schedule,
        &due,
        &next,
        &at,
        &run_id,
        &fire.error.as_deref(),
        &now,
        &pending,
        &next_pending,
        &fire.if_last_run_ended,
    ];
    let moved = exec(&tx, FIRE_SCHEDULE, &args)?;
    if moved == 0 {
        // Moved on, paused or deleted by another writer: nothing to do.
        return Ok(false);
    }
    if let Some((at, run)) = &fire.run {
        // A run of this id exists only if this due time started it already.
        insert_run(&tx, run, 0, now)?;
        exec(&tx, INSERT_SCHEDULED_RUN, &[&fire.schedule, &at.as_millis(), &run.run_id.0])?;
    }
    tx.commit()?;
    Ok(true)
}

pub(super) fn scheduled_runs(conn: &Conn<'_>, id: &str, limit: u32) -> Result<Vec<ScheduledRun>, StoreError> {
    let runs = query(conn, SCHEDULED_RUNS, &[&id, &i64::from(limit)], |r| rows::scheduled_run(r))?;
    if runs.is_empty() {
        load_schedule(conn, id)?;
    }
    Ok(runs)
}
