//! What a sqlx database must say of itself for [`SqlStore`], as a trait of its sqlx
//! database type: a few statements with the dialect's own words in them, the writes
//! it can do in one statement, and how the event log orders appends and wakes its
//! followers. Everything else is [`SqlStore`], written once over any `D: Dialect`.
//!
//! PostgreSQL (`sqlx::Postgres`, in `crate::postgres`) is the one implementation.
//! The SQLite store left sqlx for rusqlite, where one connection on a thread of its
//! own spares each store call a pool and an async hand-off per statement; it shares the SQL
//! ([`queries`](super::queries), filling the same statement macros with its words),
//! the row decoding and the state patches, not this trait.

use std::future::Future;
use std::time::Duration;

use loopstack_core::{Checkpoint, NewRun, StoreError};
use sqlx::{Database, Transaction};

use super::SqlStore;

/// A SQL dialect the stores speak. Private: the public stores are
/// [`SqliteStore`](crate::SqliteStore) and [`PostgresStore`](crate::PostgresStore).
///
/// The shared code needs more of sqlx than this trait can promise (a bound on a
/// type other than `Self` is not implied by `D: Dialect`), so each generic impl
/// block of [`SqlStore`] restates the same `where` clause: an executor for
/// `&mut D::Connection`, arguments for `D::Arguments`, and encoding, decoding and
/// column lookup for the handful of types the schema uses (`i64`, `bool`,
/// `String` and `&str`, `uuid::Uuid`).
pub(crate) trait Dialect: Database {
    /// The worker's claim ([`claim_runnable!`](super::queries::claim_runnable)):
    /// its lock clause and its tests that a workflow name and a `workflow:version`
    /// key are in a JSON array parameter.
    const CLAIM_RUNNABLE: &'static str;

    /// The due schedules ([`due_schedules!`](super::queries::due_schedules)), with
    /// the same workflow test as [`Dialect::CLAIM_RUNNABLE`].
    const DUE_SCHEDULES: &'static str;

    /// How many rows a statement changed (sqlx has no trait for it).
    fn rows_affected(done: &Self::QueryResult) -> u64;

    /// Commits `cp` in one statement (one round trip, atomic on its own), with its
    /// state stored as the shared commit decided (`unchanged`: no state column;
    /// `patch`: a patch of the last state); `Ok(false)` when the fence did not
    /// hold. `None` where the dialect cannot: the commit takes a transaction.
    /// Only asked for a commit that delivers, sends and migrates nothing.
    fn one_statement_commit(
        store: &SqlStore<Self>,
        cp: &Checkpoint,
        unchanged: bool,
        patch: Option<&str>,
    ) -> impl Future<Output = Option<Result<bool, StoreError>>> + Send;

    /// Creates `run` and its step-0 checkpoint in one statement; `Ok(false)` if the
    /// run exists. `None` where the dialect cannot: creation takes a transaction.
    fn one_statement_create(
        store: &SqlStore<Self>,
        run: &NewRun,
        epoch: i64,
        now: i64,
    ) -> impl Future<Output = Option<Result<bool, StoreError>>> + Send;

    /// Starts an append to the event log in `tx`, so that ids are committed in the
    /// order they are handed out ("events after id N" never misses a smaller id
    /// committed later).
    fn begin_append(tx: &mut Transaction<'static, Self>) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Ends an append whose newest id is `newest`, before `tx` commits.
    fn end_append(
        tx: &mut Transaction<'static, Self>,
        newest: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Waits until the log may hold an event after `after`, at most `max`.
    fn wait_events(store: &SqlStore<Self>, after: u64, max: Duration) -> impl Future<Output = ()> + Send;
}
