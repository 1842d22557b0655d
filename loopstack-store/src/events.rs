//! The event log of the SQL stores: the `events` and `event_listeners` tables
//! (migration 3), shared by both backends, and how a follower waits for new events
//! (`Dialect::wait_events`).
//!
//! - SQLite: a follower polls the log every [`SQLITE_EVENT_POLL`] (`WHERE id > ?` on
//!   the primary key, one indexed read); appends by this process wake its own
//!   followers at once.
//! - PostgreSQL: each append notifies channel [`NOTIFY_CHANNEL`] with the newest id
//!   (a pointer: the events are read from the table, whatever their size), so
//!   followers wake at once; they poll every [`POSTGRES_FALLBACK_POLL`] too, for
//!   notifications lost while the listening connection was reconnecting.

use std::time::Duration;

use tokio::sync::watch;

/// How often a follower of a SQLite store's log reads it for events that other
/// processes appended.
#[cfg(feature = "sqlite")]
pub const SQLITE_EVENT_POLL: Duration = Duration::from_millis(100);

/// How often a follower of a PostgreSQL store's log reads it without a
/// notification, unless [`PostgresStore::with_fallback_poll`](crate::PostgresStore::with_fallback_poll)
/// sets another interval.
#[cfg(feature = "postgres")]
pub const POSTGRES_FALLBACK_POLL: Duration = Duration::from_secs(1);

/// The PostgreSQL channels appends notify, with the newest event id as payload:
/// this prefix and 16 hex digits of the MD5 of the store's schema
/// (`loopstack_events_` and those of `public`), so that stores in other schemas of
/// the database do not wake each other.
#[cfg(feature = "postgres")]
pub const NOTIFY_CHANNEL: &str = "loopstack_events";

/// The newest event id a store's followers know of (appended by this process, or
/// notified), to wake them.
#[derive(Debug)]
pub(crate) struct EventWake {
    newest: watch::Sender<u64>,
    /// Whether the PostgreSQL listening task was started.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) listening: std::sync::atomic::AtomicBool,
}

impl Default for EventWake {
    fn default() -> Self {
        Self { newest: watch::Sender::new(0), listening: std::sync::atomic::AtomicBool::new(false) }
    }
}

impl EventWake {
    /// Events up to `id` exist.
    pub(crate) fn saw(&self, id: u64) {
        self.newest.send_if_modified(|newest| {
            let newer = id > *newest;
            if newer {
                *newest = id;
            }
            newer
        });
    }

    /// Waits until an event after `after` is known of, or `max`.
    pub(crate) async fn wait(&self, after: u64, max: Duration) {
        let mut rx = self.newest.subscribe();
        let _ = tokio::time::timeout(max, rx.wait_for(|newest| *newest > after)).await;
    }
}

#[cfg(feature = "postgres")]
mod sqlx_log {
    use std::sync::Arc;
    use std::time::Duration;

    use loopstack_core::serde_json;
    use loopstack_core::store::{EventRetention, LoggedEvent};
    use loopstack_core::{RunEvent, RunId, StoreError, Timestamp};
    use sqlx::{Arguments as _, Row as _};

    use crate::sql::queries::{
        DROP_EXPIRED_LISTENERS, HAS_LISTENERS, LAST_EVENT_ID, LISTEN, PRUNE_EVENTS_BY_AGE, PRUNE_EVENTS_BY_COUNT,
        READ_EVENTS, READ_RUN_EVENTS, UNLISTEN,
    };
    use crate::sql::{Dialect, SqlStore, backend, corrupt, to_i64, to_u64};

    impl<D> SqlStore<D>
    where
        D: Dialect,
        for<'c> &'c mut D::Connection: sqlx::Executor<'c, Database = D>,
        D::Arguments: sqlx::IntoArguments<D>,
        for<'s> &'s str: sqlx::ColumnIndex<D::Row> + sqlx::Encode<'s, D> + sqlx::Type<D>,
        usize: sqlx::ColumnIndex<D::Row>,
        for<'r> i64: sqlx::Encode<'r, D> + sqlx::Decode<'r, D> + sqlx::Type<D>,
        for<'r> String: sqlx::Encode<'r, D> + sqlx::Decode<'r, D> + sqlx::Type<D>,
        for<'r> uuid::Uuid: sqlx::Encode<'r, D> + sqlx::Decode<'r, D> + sqlx::Type<D>,
        for<'r> Option<i64>: sqlx::Encode<'r, D>,
        for<'r> Option<String>: sqlx::Encode<'r, D>,
        for<'r> Option<uuid::Uuid>: sqlx::Encode<'r, D>,
        for<'s> Option<&'s str>: sqlx::Encode<'s, D>,
    {
        pub(crate) async fn append_events(&self, origin: &str, events: &[Arc<RunEvent>]) -> Result<(), StoreError> {
            if events.is_empty() {
                return Ok(());
            }
            let mut rows = Vec::with_capacity(events.len());
            for event in events {
                rows.push((event.run_id.0, event.at.as_millis(), serde_json::to_string(&**event).map_err(corrupt)?));
            }
            // The statement sqlx's `QueryBuilder::push_values` writes, built by hand: a
            // builder's arguments cannot be borrowed generically for its whole life.
            let mut sql = String::from("INSERT INTO events (run_id, origin, at, event) VALUES ");
            let mut args = D::Arguments::default();
            for (i, (run_id, at, event)) in rows.into_iter().enumerate() {
                sql.push_str(if i == 0 { "(" } else { ", (" });
                args.add(run_id).map_err(StoreError::Backend)?;
                args.format_placeholder(&mut sql).map_err(corrupt)?;
                sql.push_str(", ");
                args.add(origin).map_err(StoreError::Backend)?;
                args.format_placeholder(&mut sql).map_err(corrupt)?;
                sql.push_str(", ");
                args.add(at).map_err(StoreError::Backend)?;
                args.format_placeholder(&mut sql).map_err(corrupt)?;
                sql.push_str(", ");
                args.add(event).map_err(StoreError::Backend)?;
                args.format_placeholder(&mut sql).map_err(corrupt)?;
                sql.push(')');
            }
            sql.push_str(" RETURNING id");
            let mut tx = self.pool.begin().await.map_err(backend)?;
            D::begin_append(&mut tx).await?;
            // Only placeholders were written into `sql`; the values are bound.
            let insert = sqlx::query_scalar_with(sqlx::AssertSqlSafe(sql), args);
            let ids: Vec<i64> = insert.fetch_all(&mut *tx).await.map_err(backend)?;
            let newest = ids.into_iter().max().unwrap_or(0);
            D::end_append(&mut tx, newest).await?;
            tx.commit().await.map_err(backend)?;
            self.events.saw(u64::try_from(newest).unwrap_or(0));
            Ok(())
        }

        pub(crate) async fn read_events(
            &self,
            after: u64,
            run: Option<RunId>,
            limit: u32,
        ) -> Result<Vec<LoggedEvent>, StoreError> {
            let rows = match run {
                Some(run) => {
                    sqlx::query(READ_RUN_EVENTS)
                        .bind(run.0)
                        .bind(to_i64(after))
                        .bind(i64::from(limit))
                        .fetch_all(&self.pool)
                        .await
                }
                None => sqlx::query(READ_EVENTS).bind(to_i64(after)).bind(i64::from(limit)).fetch_all(&self.pool).await,
            }
            .map_err(backend)?;
            let mut events = Vec::with_capacity(rows.len());
            for row in rows {
                let id = to_u64(row.try_get("id").map_err(corrupt)?)?;
                let text: String = row.try_get("event").map_err(corrupt)?;
                match serde_json::from_str(&text) {
                    Ok(event) => {
                        events.push(LoggedEvent { id, origin: row.try_get("origin").map_err(corrupt)?, event });
                    }
                    Err(e) => tracing::debug!(id, error = %e, "skipped an event this build cannot read"),
                }
            }
            Ok(events)
        }

        pub(crate) async fn last_event_id(&self) -> Result<u64, StoreError> {
            let id: Option<i64> = sqlx::query_scalar(LAST_EVENT_ID).fetch_one(&self.pool).await.map_err(backend)?;
            to_u64(id.unwrap_or(0))
        }

        pub(crate) async fn wait_events(&self, after: u64, max: Duration) -> Result<(), StoreError> {
            D::wait_events(self, after, max).await;
            Ok(())
        }

        pub(crate) async fn prune_events(&self, now: Timestamp, retention: &EventRetention) -> Result<u64, StoreError> {
            let oldest =
                now.as_millis().saturating_sub(i64::try_from(retention.max_age.as_millis()).unwrap_or(i64::MAX));
            let by_age = sqlx::query(PRUNE_EVENTS_BY_AGE).bind(oldest).execute(&self.pool).await.map_err(backend)?;
            let by_count = sqlx::query(PRUNE_EVENTS_BY_COUNT)
                .bind(to_i64(retention.max_events))
                .execute(&self.pool)
                .await
                .map_err(backend)?;
            Ok(D::rows_affected(&by_age) + D::rows_affected(&by_count))
        }

        pub(crate) async fn listen_events(&self, listener: &str, until: Timestamp) -> Result<(), StoreError> {
            let now = Timestamp::now().as_millis();
            sqlx::query(DROP_EXPIRED_LISTENERS).bind(now).execute(&self.pool).await.map_err(backend)?;
            sqlx::query(LISTEN).bind(listener).bind(until.as_millis()).execute(&self.pool).await.map_err(backend)?;
            Ok(())
        }

        pub(crate) async fn unlisten_events(&self, listener: &str) -> Result<(), StoreError> {
            sqlx::query(UNLISTEN).bind(listener).execute(&self.pool).await.map_err(backend)?;
            Ok(())
        }

        pub(crate) async fn has_event_listeners(&self, now: Timestamp) -> Result<bool, StoreError> {
            let found: Option<i64> = sqlx::query_scalar(HAS_LISTENERS)
                .bind(now.as_millis())
                .fetch_optional(&self.pool)
                .await
                .map_err(backend)?;
            Ok(found.is_some())
        }
    }
}
