//! The event log of the SQL stores: the `events` and `event_listeners` tables
//! (migration 3), shared by both backends as a macro over the sqlx database type,
//! and how a follower waits for new events.
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
/// notification.
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

/// Writes the event log's part of the `Store` impl of `$store` (whose `events`
/// field is an `Arc<EventWake>`) as inherent methods `log_*`; `$store` provides
/// `begin_append` and `end_append` (the backend's lock and notification).
macro_rules! sql_events {
    ($store:ident, $db:ty) => {
        impl $store {
            async fn log_append(
                &self,
                origin: &str,
                events: &[std::sync::Arc<loopstack_core::RunEvent>],
            ) -> Result<(), loopstack_core::StoreError> {
                use crate::sql::{backend, corrupt};
                if events.is_empty() {
                    return Ok(());
                }
                let mut rows = Vec::with_capacity(events.len());
                for event in events {
                    rows.push((event.run_id.0, event.at.as_millis(), serde_json::to_string(&**event).map_err(corrupt)?));
                }
                let mut tx = self.pool.begin().await.map_err(backend)?;
                Self::begin_append(&mut tx).await?;
                let mut insert = sqlx::QueryBuilder::<$db>::new("INSERT INTO events (run_id, origin, at, event) ");
                insert.push_values(rows, |mut b, (run_id, at, event)| {
                    b.push_bind(run_id).push_bind(origin).push_bind(at).push_bind(event);
                });
                insert.push(" RETURNING id");
                let ids: Vec<i64> = insert.build_query_scalar().fetch_all(&mut *tx).await.map_err(backend)?;
                let newest = ids.into_iter().max().unwrap_or(0);
                Self::end_append(&mut tx, newest).await?;
                tx.commit().await.map_err(backend)?;
                self.events.saw(u64::try_from(newest).unwrap_or(0));
                Ok(())
            }

            async fn log_read(
                &self,
                after: u64,
                run: Option<loopstack_core::RunId>,
                limit: u32,
            ) -> Result<Vec<loopstack_core::store::LoggedEvent>, loopstack_core::StoreError> {
                use crate::sql::{backend, corrupt, to_i64, to_u64};
                use sqlx::Row as _;
                let rows = match run {
                    Some(run) => sqlx::query(
                        "SELECT id, origin, event FROM events WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3",
                    )
                    .bind(run.0)
                    .bind(to_i64(after))
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await,
                    None => sqlx::query("SELECT id, origin, event FROM events WHERE id > $1 ORDER BY id LIMIT $2")
                        .bind(to_i64(after))
                        .bind(i64::from(limit))
                        .fetch_all(&self.pool)
                        .await,
                }
                .map_err(backend)?;
                let mut events = Vec::with_capacity(rows.len());
                for row in rows {
                    let id = to_u64(row.try_get("id").map_err(corrupt)?)?;
                    let text: String = row.try_get("event").map_err(corrupt)?;
                    match serde_json::from_str(&text) {
                        Ok(event) => {
                            events.push(loopstack_core::store::LoggedEvent {
                                id,
                                origin: row.try_get("origin").map_err(corrupt)?,
                                event,
                            });
                        }
                        Err(e) => tracing::debug!(id, error = %e, "skipped an event this build cannot read"),
                    }
                }
                Ok(events)
            }

            async fn log_last_id(&self) -> Result<u64, loopstack_core::StoreError> {
                let id: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM events")
                    .fetch_one(&self.pool)
                    .await
                    .map_err(crate::sql::backend)?;
                crate::sql::to_u64(id.unwrap_or(0))
            }

            async fn log_prune(
                &self,
                now: loopstack_core::Timestamp,
                retention: &loopstack_core::store::EventRetention,
            ) -> Result<u64, loopstack_core::StoreError> {
                use crate::sql::{backend, to_i64};
                let oldest = now.as_millis().saturating_sub(i64::try_from(retention.max_age.as_millis()).unwrap_or(i64::MAX));
                let by_age =
                    sqlx::query("DELETE FROM events WHERE at < $1").bind(oldest).execute(&self.pool).await.map_err(backend)?;
                let by_count = sqlx::query("DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - $1")
                    .bind(to_i64(retention.max_events))
                    .execute(&self.pool)
                    .await
                    .map_err(backend)?;
                Ok(by_age.rows_affected() + by_count.rows_affected())
            }

            async fn log_listen(&self, listener: &str, until: loopstack_core::Timestamp) -> Result<(), loopstack_core::StoreError> {
                use crate::sql::backend;
                let now = loopstack_core::Timestamp::now().as_millis();
                sqlx::query("DELETE FROM event_listeners WHERE until < $1")
                    .bind(now)
                    .execute(&self.pool)
                    .await
                    .map_err(backend)?;
                sqlx::query(
                    "INSERT INTO event_listeners (listener, until) VALUES ($1, $2) \
                     ON CONFLICT (listener) DO UPDATE SET until = excluded.until",
                )
                .bind(listener)
                .bind(until.as_millis())
                .execute(&self.pool)
                .await
                .map_err(backend)?;
                Ok(())
            }

            async fn log_unlisten(&self, listener: &str) -> Result<(), loopstack_core::StoreError> {
                sqlx::query("DELETE FROM event_listeners WHERE listener = $1")
                    .bind(listener)
                    .execute(&self.pool)
                    .await
                    .map_err(crate::sql::backend)?;
                Ok(())
            }

            async fn log_has_listeners(&self, now: loopstack_core::Timestamp) -> Result<bool, loopstack_core::StoreError> {
                let found: Option<i64> = sqlx::query_scalar("SELECT CAST(1 AS BIGINT) FROM event_listeners WHERE until > $1 LIMIT 1")
                    .bind(now.as_millis())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(crate::sql::backend)?;
                Ok(found.is_some())
            }
        }
    };
}

pub(crate) use sql_events;
