//! What the SQLite and PostgreSQL stores share: the SQL ([`queries`]), row decoding
//! ([`rows`]), state patches, value conversions and embedded migrations; and, for the
//! stores on sqlx, the `Store` implementation itself, written once over the sqlx
//! database type as [`SqlStore<D>`] for any [`Dialect`] `D`.
//!
//! - [`dialect`]: what a sqlx database says of itself, as a trait of its database
//!   type (implemented for `sqlx::Postgres` in `crate::postgres`; the SQLite store
//!   runs on rusqlite, in `crate::sqlite`, with the same SQL).
//! - [`runs`]: creating, claiming and the fenced writes of a drive (`commit`,
//!   `set_status`, `park`), forks; [`reads`]: the reads and the signals;
//!   [`rows`]: rows into records. The event log and the schedules are
//!   `crate::events` and `crate::schedules`.
//!
//! The public stores wrap a `SqlStore` and forward the `Store` trait to it
//! ([`forward_store!`]), so their API stays their own.

#[cfg(feature = "postgres")]
use std::borrow::Cow;
#[cfg(feature = "postgres")]
use std::sync::Arc;
#[cfg(feature = "postgres")]
use std::time::Duration;

#[cfg(feature = "postgres")]
use futures::future::BoxFuture;
use loopstack_core::serde_json::value::RawValue;
use loopstack_core::{RunStatus, StoreError};
#[cfg(feature = "postgres")]
use sqlx::Pool;
#[cfg(feature = "postgres")]
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

#[cfg(feature = "postgres")]
pub(crate) mod dialect;
mod patch;
pub(crate) mod queries;
#[cfg(feature = "postgres")]
mod reads;
pub(crate) mod rows;
#[cfg(feature = "postgres")]
mod runs;

#[cfg(feature = "postgres")]
pub(crate) use dialect::Dialect;
#[cfg(feature = "sqlite")]
pub(crate) use patch::apply_patch;
pub(crate) use patch::{LastState, LastStates, StepState, plan_state};

#[cfg(feature = "postgres")]
/// The state of a SQL store over dialect `D`: its pool, its lease, the last state
/// each of its runs committed (the base of the next patch), its event wake and how
/// often a follower of its log reads it without a notification. Clones share all of it.
pub(crate) struct SqlStore<D: sqlx::Database> {
    pub(crate) pool: Pool<D>,
    pub(crate) lease: Option<Duration>,
    pub(crate) last: Arc<LastStates>,
    pub(crate) events: Arc<crate::events::EventWake>,
    pub(crate) fallback_poll: Duration,
}

#[cfg(feature = "postgres")]
impl<D: sqlx::Database> SqlStore<D> {
    pub(crate) fn new(pool: Pool<D>) -> Self {
        Self {
            pool,
            lease: Some(crate::DEFAULT_LEASE),
            last: Default::default(),
            events: Default::default(),
            fallback_poll: crate::events::POSTGRES_FALLBACK_POLL,
        }
    }

    /// Writes `name { pool, lease, last, events, fallback_poll }`, as the stores'
    /// derived `Debug` did when these were their fields.
    pub(crate) fn debug_as(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(name)
            .field("pool", &self.pool)
            .field("lease", &self.lease)
            .field("last", &self.last)
            .field("events", &self.events)
            .field("fallback_poll", &self.fallback_poll)
            .finish()
    }
}

#[cfg(feature = "postgres")]
impl<D: sqlx::Database> Clone for SqlStore<D> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            lease: self.lease,
            last: self.last.clone(),
            events: self.events.clone(),
            fallback_poll: self.fallback_poll,
        }
    }
}

#[cfg(feature = "postgres")]
/// Writes `impl Store for $store`, whose field `sql` is a [`SqlStore`]: each method
/// calls the `SqlStore` method of the same name and signature.
macro_rules! forward_store {
    ($store:ty) => {
        $crate::sql::forward_store!(@impl $store;
                create_run(run: loopstack_core::NewRun) -> loopstack_core::RunRecord;
                claim(run_id: loopstack_core::RunId, claim: &loopstack_core::Claim) -> loopstack_core::RunRecord;
                commit(checkpoint: loopstack_core::Checkpoint) -> ();
                set_status(
                    run_id: loopstack_core::RunId,
                    fence: loopstack_core::Fence,
                    status: loopstack_core::RunStatus,
                    error: Option<String>,
                    notify: Option<loopstack_core::store::OutSignal>,
                ) -> ();
                park(run_id: loopstack_core::RunId, park: &loopstack_core::Park<'_>) -> ();
                claim_runnable(
                    workflows: &[loopstack_core::WorkflowVersions<'_>],
                    lease: &loopstack_core::Lease,
                    now: loopstack_core::Timestamp,
                    limit: u32,
                ) -> Vec<loopstack_core::RunRecord>;
                heartbeat(run_id: loopstack_core::RunId, epoch: u64, until: loopstack_core::Timestamp) -> ();
                release_lease(run_id: loopstack_core::RunId, epoch: u64) -> ();
                send_signal(
                    run_id: loopstack_core::RunId,
                    name: &str,
                    payload: Box<loopstack_core::serde_json::value::RawValue>,
                ) -> loopstack_core::SignalReceipt;
                inbox(run_id: loopstack_core::RunId) -> loopstack_core::Inbox;
                reject_signal(run_id: loopstack_core::RunId, epoch: u64, signal: u64, reason: &str) -> ();
                signals(run_id: loopstack_core::RunId) -> Vec<loopstack_core::SignalRecord>;
                takeovers(run_id: loopstack_core::RunId) -> Vec<loopstack_core::Takeover>;
                fork(
                    source: loopstack_core::RunId,
                    step: u64,
                    new_run: loopstack_core::RunId,
                    first: Option<loopstack_core::ForkStep>,
                ) -> loopstack_core::RunRecord;
                load_run(run_id: loopstack_core::RunId) -> loopstack_core::RunRecord;
                list_runs(query: &loopstack_core::RunQuery) -> loopstack_core::RunPage;
                count_runs(now: loopstack_core::Timestamp) -> Vec<loopstack_core::RunCount>;
                history(run_id: loopstack_core::RunId) -> Vec<loopstack_core::StepRecord>;
                checkpoint(run_id: loopstack_core::RunId, step: u64) -> loopstack_core::CheckpointRecord;
                documents(run_id: loopstack_core::RunId) -> Vec<std::sync::Arc<loopstack_core::Document>>;
                documents_at(run_id: loopstack_core::RunId, step: u64) -> Vec<std::sync::Arc<loopstack_core::Document>>;
                document_versions(run_id: loopstack_core::RunId) -> Vec<std::sync::Arc<loopstack_core::Document>>;
                document_history(run_id: loopstack_core::RunId, doc_type: &str, key: &str)
                    -> Vec<std::sync::Arc<loopstack_core::Document>>;
                create_schedule(schedule: &loopstack_core::ScheduleRecord) -> ();
                load_schedule(id: &str) -> loopstack_core::ScheduleRecord;
                list_schedules() -> Vec<loopstack_core::ScheduleRecord>;
                set_schedule_paused(id: &str, paused: bool, next_due: Option<loopstack_core::Timestamp>)
                    -> loopstack_core::ScheduleRecord;
                delete_schedule(id: &str) -> ();
                due_schedules(workflows: &[&str], now: loopstack_core::Timestamp, limit: u32)
                    -> Vec<loopstack_core::ScheduleRecord>;
                fire_schedule(fire: loopstack_core::schedule::ScheduleFire) -> bool;
                scheduled_runs(id: &str, limit: u32) -> Vec<loopstack_core::schedule::ScheduledRun>;
                append_events(origin: &str, events: &[std::sync::Arc<loopstack_core::RunEvent>]) -> ();
                read_events(after: u64, run: Option<loopstack_core::RunId>, limit: u32)
                    -> Vec<loopstack_core::store::LoggedEvent>;
                last_event_id() -> u64;
                wait_events(after: u64, max: std::time::Duration) -> ();
                prune_events(now: loopstack_core::Timestamp, retention: &loopstack_core::store::EventRetention) -> u64;
                listen_events(listener: &str, until: loopstack_core::Timestamp) -> ();
                unlisten_events(listener: &str) -> ();
                has_event_listeners(now: loopstack_core::Timestamp) -> bool;
        );
    };
    (@impl $store:ty; $($name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*) => {
        #[async_trait::async_trait]
        impl loopstack_core::Store for $store {
            $(
                async fn $name(&self, $($arg: $ty),*) -> Result<$ret, loopstack_core::StoreError> {
                    self.sql.$name($($arg),*).await
                }
            )*

            fn lease_duration(&self) -> Option<std::time::Duration> {
                self.sql.lease
            }

            fn has_event_log(&self) -> bool {
                true
            }
        }
    };
}

#[cfg(feature = "postgres")]
pub(crate) use forward_store;

#[cfg(feature = "postgres")]
pub(crate) fn backend(e: sqlx::Error) -> StoreError {
    StoreError::Backend(Box::new(e))
}

pub(crate) fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

/// Steps, epochs and ids are `u64` in Rust and `BIGINT` in SQL.
/// A run's labels as their column holds them: a JSON object, or NULL for none.
pub(crate) fn labels_column(labels: &loopstack_core::Labels) -> Result<Option<String>, StoreError> {
    if labels.is_empty() {
        return Ok(None);
    }
    loopstack_core::serde_json::to_string(labels).map(Some).map_err(|e| StoreError::Backend(e.to_string().into()))
}

pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) fn to_u64(n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| corrupt(format!("negative counter {n}")))
}

pub(crate) fn raw(text: String) -> Result<Box<RawValue>, StoreError> {
    RawValue::from_string(text).map_err(corrupt)
}

/// Statuses as `,a,b,` for `$n LIKE ('%,' || status || ',%')`: one parameter for a
/// set, the same in both dialects.
pub(crate) fn status_set(statuses: &[RunStatus]) -> String {
    let mut s = String::from(",");
    for st in statuses {
        s.push_str(st.as_str());
        s.push(',');
    }
    s
}

#[cfg(feature = "postgres")]
/// The migrations, embedded in the binary: the schema is created and upgraded on
/// first use, with no files at run time.
#[derive(Debug)]
pub(crate) struct Embedded(pub(crate) &'static [(i64, &'static str, &'static str)]);

#[cfg(feature = "postgres")]
impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> BoxFuture<'static, Result<Vec<Migration>, sqlx::error::BoxDynError>> {
        Box::pin(async move {
            Ok(self
                .0
                .iter()
                .map(|&(version, description, sql)| {
                    Migration::new(
                        version,
                        Cow::Borrowed(description),
                        MigrationType::Simple,
                        sqlx::SqlStr::from_static(sql),
                        false,
                    )
                })
                .collect())
        })
    }
}

#[cfg(feature = "postgres")]
pub(crate) async fn migrator(migrations: Embedded) -> Result<Migrator, StoreError> {
    Migrator::new(migrations).await.map_err(|e| StoreError::Backend(Box::new(e)))
}
