//! The SQLite store.

use std::path::Path;
use std::str::FromStr as _;
use std::time::Duration;

use loopstack_core::{Checkpoint, NewRun, StoreError};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteQueryResult, SqliteSynchronous,
};
use sqlx::{Sqlite, Transaction};

use crate::sql::queries::{claim_runnable, due_schedules};
use crate::sql::{Dialect, SqlStore};

/// How many more times opening a store tries after a failure (another process
/// creating the same new file at the same moment).
const OPEN_ATTEMPTS: u32 = 5;

/// The SQLite migrations, in order.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "runs", include_str!("../migrations/sqlite/0001_runs.sql")),
    (2, "parent signal", include_str!("../migrations/sqlite/0002_parent_signal.sql")),
    (3, "events", include_str!("../migrations/sqlite/0003_events.sql")),
    (4, "schedules", include_str!("../migrations/sqlite/0004_schedules.sql")),
    (5, "versions", include_str!("../migrations/sqlite/0005_versions.sql")),
    (6, "trace parent", include_str!("../migrations/sqlite/0006_trace_parent.sql")),
    (7, "claim indexes", include_str!("../migrations/sqlite/0007_claim_indexes.sql")),
];

/// A [`Store`](loopstack_core::Store) in one SQLite file: the embedded default.
///
/// The file is opened in WAL mode with `synchronous = FULL` (a committed transition
/// survives a power cut), a busy timeout for the one-writer-at-a-time rule, and
/// short transactions: one per commit, never held across a model call. The schema
/// is created and migrated when the store opens.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), loopstack_core::StoreError> {
/// use loopstack_store::SqliteStore;
/// let dir = std::env::temp_dir().join(format!("loopstack-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let store = SqliteStore::open(dir.join("runs.db")).await?;
/// let runtime = loopstack_core::Runtime::with_store(store);
/// # let _ = runtime; std::fs::remove_dir_all(&dir).unwrap();
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    sql: SqlStore<Sqlite>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.sql.debug_as("SqliteStore", f)
    }
}

impl SqliteStore {
    /// Opens (or creates) the store at `path` and brings its schema up to date.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, loopstack_core::StoreError> {
        let options = SqliteConnectOptions::new().filename(path.as_ref()).create_if_missing(true);
        Self::connect_with(options, 4).await
    }

    /// A store in memory, private to this value and its clones (one connection):
    /// the SQL store's behaviour without a file, for tests.
    pub async fn memory() -> Result<Self, loopstack_core::StoreError> {
        let options = SqliteConnectOptions::from_str("sqlite::memory:").map_err(crate::sql::backend)?;
        Self::connect_with(options, 1).await
    }

    async fn connect_with(options: SqliteConnectOptions, connections: u32) -> Result<Self, loopstack_core::StoreError> {
        let options = options
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(30));
        let migrator = crate::sql::migrator(crate::sql::Embedded(MIGRATIONS)).await?;
        // Processes that create one file at once race: switching a new file to WAL
        // can find it locked, and two migrations can both read "nothing applied"
        // before either commits, so the second fails on what the first created
        // (and is rolled back). Tried again a moment later, the file is in WAL
        // mode and its migrations are applied.
        let mut attempt = 0;
        loop {
            let opened = async {
                let pool = SqlitePoolOptions::new()
                    .max_connections(connections)
                    // An in-memory database lives as long as its connection.
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .connect_with(options.clone())
                    .await
                    .map_err(crate::sql::backend)?;
                migrator.run(&pool).await.map_err(|e| loopstack_core::StoreError::Backend(Box::new(e)))?;
                Ok::<_, loopstack_core::StoreError>(pool)
            };
            match opened.await {
                Ok(pool) => return Ok(Self { sql: SqlStore::new(pool) }),
                Err(_) if attempt < OPEN_ATTEMPTS => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Sets the lease runtimes take on runs they drive (30 s unless set; `None` for
    /// none: then only an explicit resume takes over a run whose process died).
    #[must_use]
    pub fn with_lease(mut self, lease: Option<Duration>) -> Self {
        self.sql.lease = lease;
        self
    }

    /// The connection pool, for queries of your own.
    pub fn pool(&self) -> &SqlitePool {
        &self.sql.pool
    }
}

crate::sql::forward_store!(SqliteStore);

impl Dialect for Sqlite {
    const CLAIM_RUNNABLE: &'static str = claim_runnable!(
        "",
        "r.workflow IN (SELECT value FROM json_each($4))",
        "(r.workflow || ':' || r.version) IN (SELECT value FROM json_each($6))",
        " NOT INDEXED",
        " INDEXED BY runs_leased",
        " INDEXED BY runs_waking",
    );

    const DUE_SCHEDULES: &'static str = due_schedules!("r.workflow IN (SELECT value FROM json_each($4))");

    fn rows_affected(done: &SqliteQueryResult) -> u64 {
        done.rows_affected()
    }

    /// SQLite cannot modify rows in a `WITH` clause: commits take a transaction.
    async fn one_statement_commit(
        _: &SqlStore<Self>,
        _: &Checkpoint,
        _: bool,
        _: Option<&str>,
    ) -> Option<Result<bool, StoreError>> {
        None
    }

    /// Nor insert in one: a run and its first checkpoint take a transaction.
    async fn one_statement_create(_: &SqlStore<Self>, _: &NewRun, _: i64, _: i64) -> Option<Result<bool, StoreError>> {
        None
    }

    /// SQLite has one writer at a time, so ids are committed in order without a
    /// lock.
    async fn begin_append(_: &mut Transaction<'static, Self>) -> Result<(), StoreError> {
        Ok(())
    }

    /// Followers poll: nothing to notify.
    async fn end_append(_: &mut Transaction<'static, Self>, _newest: i64) -> Result<(), StoreError> {
        Ok(())
    }

    /// Waits for an append by this process, or [`SQLITE_EVENT_POLL`](crate::SQLITE_EVENT_POLL).
    async fn wait_events(store: &SqlStore<Self>, after: u64, max: Duration) {
        store.events.wait(after, max.min(crate::events::SQLITE_EVENT_POLL)).await;
    }
}
