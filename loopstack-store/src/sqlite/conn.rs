//! The SQLite store's connection: one rusqlite connection on a thread of its own,
//! which runs the store's requests (boxed closures, sent over a channel, each
//! answered on a oneshot) one after the other, so the async runtime never blocks on
//! SQLite or the disk. Also how statements bind their numbered `$n` parameters, and
//! how the connection is set up and its schema migrated.

use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use loopstack_core::StoreError;
use rusqlite::types::ToSql;
use rusqlite::{Connection, Row, Statement};
use sha2::{Digest as _, Sha384};

/// A request: runs on the connection's thread, with the store's statements
/// ([`Conn`]) or, for [`SqliteStore::with_connection`](super::SqliteStore::with_connection),
/// with the connection itself.
enum Job {
    Request(Box<dyn FnOnce(&Conn<'_>) + Send>),
    Connection(Box<dyn FnOnce(&mut Connection) + Send>),
}

/// How many more times opening a store tries after a failure (another process
/// creating the same new file at the same moment).
const OPEN_ATTEMPTS: u32 = 5;

/// How long a statement waits for another connection's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The handle of a connection's thread: requests go in, the thread ends when the
/// last handle is dropped (closing the connection).
#[derive(Debug)]
pub(super) struct Db {
    jobs: mpsc::Sender<Job>,
}

impl Db {
    /// Starts the thread, opens the database there (`None`: in memory), sets it up
    /// and brings its schema up to date; `migrations` are `(version, description,
    /// sql)` in order.
    pub(super) async fn open(path: Option<PathBuf>, migrations: &'static [Migration]) -> Result<Self, StoreError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (opened, ready) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("loopstack-sqlite".to_owned())
            .spawn(move || {
                let conn = open_and_migrate(path.as_deref(), migrations);
                let mut conn = match conn {
                    Ok(conn) => {
                        let _ = opened.send(Ok(()));
                        conn
                    }
                    Err(e) => {
                        let _ = opened.send(Err(e));
                        return;
                    }
                };
                // Each job catches its own request's panic (see `call`). The
                // statements borrow the connection: a job that takes the connection
                // itself runs once they are finalized, and they are prepared again.
                loop {
                    let statements = Conn::new(&conn);
                    let lend = loop {
                        match queue.recv() {
                            Ok(Job::Request(job)) => job(&statements),
                            Ok(Job::Connection(job)) => break job,
                            Err(_) => return,
                        }
                    };
                    drop(statements);
                    lend(&mut conn);
                }
            })
            .map_err(|e| StoreError::Backend(Box::new(e)))?;
        ready.await.map_err(|_| closed())??;
        Ok(Self { jobs })
    }

    /// Runs `f` with the store's statements and returns what it returns.
    pub(super) async fn call<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        F: FnOnce(&Conn<'_>) -> R + Send + 'static,
        R: Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = Job::Request(Box::new(move |conn| {
            // A request that panics is answered with the panic: the thread, and
            // the store, go on (its transaction, if any, rolled back as it unwound).
            let _ = tx.send(std::panic::catch_unwind(AssertUnwindSafe(|| f(conn))));
        }));
        self.answer(job, rx).await
    }

    /// Runs `f` on the connection itself and returns what it returns.
    pub(super) async fn call_connection<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        F: FnOnce(&mut Connection) -> R + Send + 'static,
        R: Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = Job::Connection(Box::new(move |conn| {
            let _ = tx.send(std::panic::catch_unwind(AssertUnwindSafe(|| f(conn))));
        }));
        self.answer(job, rx).await
    }

    async fn answer<R>(
        &self,
        job: Job,
        rx: tokio::sync::oneshot::Receiver<std::thread::Result<R>>,
    ) -> Result<R, StoreError> {
        self.jobs.send(job).map_err(|_| closed())?;
        match rx.await.map_err(|_| closed())? {
            Ok(answer) => Ok(answer),
            Err(panic) => Err(StoreError::Backend(
                format!("a request to the SQLite store panicked: {}", loopstack_core::panic_message(&*panic)).into(),
            )),
        }
    }
}

fn closed() -> StoreError {
    StoreError::Backend("the SQLite store's connection thread stopped".into())
}

pub(super) fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(Box::new(e))
}

/// Whether `e` is a unique or primary key violation.
pub(super) fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
    )
}

/// The connection as the store's requests use it, with its statements: each
/// prepared once, the first time it runs, and found again by the address of its SQL
/// (every statement of the store is a `&'static str`), with the argument each of its
/// parameters takes. rusqlite's statement cache would hash the whole SQL twice per
/// execution and copy it once.
pub(super) struct Conn<'c> {
    conn: &'c Connection,
    statements: RefCell<Vec<Slot<'c>>>,
}

/// A statement of [`Conn`]: `held` is `None` while it runs.
struct Slot<'c> {
    sql: (usize, usize),
    held: Option<Prepared<'c>>,
}

struct Prepared<'c> {
    stmt: Statement<'c>,
    /// For each parameter, the index of the argument it takes.
    args: Box<[usize]>,
}

impl<'c> Conn<'c> {
    fn new(conn: &'c Connection) -> Self {
        Self { conn, statements: RefCell::new(Vec::new()) }
    }

    /// The statement `sql`, its parameters bound as sqlx binds them: `$n` (and `?n`)
    /// takes `args[n - 1]`, a bare `?` the argument of its position.
    fn prepared(&self, sql: &'static str, args: &[&dyn ToSql]) -> rusqlite::Result<Held<'_, 'c>> {
        let key = (sql.as_ptr() as usize, sql.len());
        let mut slots = self.statements.borrow_mut();
        let slot = match slots.iter().position(|s| s.sql == key) {
            Some(i) => i,
            None => {
                slots.push(Slot { sql: key, held: None });
                slots.len() - 1
            }
        };
        // Taken while it runs; a statement run again inside its own run (a read
        // inside a read of the same rows) is prepared anew.
        let taken = slots[slot].held.take();
        drop(slots);
        let mut prepared = match taken {
            Some(prepared) => prepared,
            None => self.prepare(sql)?,
        };
        for (i, &arg) in prepared.args.iter().enumerate() {
            let value = args.get(arg).ok_or(rusqlite::Error::InvalidParameterCount(arg + 1, args.len()))?;
            prepared.stmt.raw_bind_parameter(i + 1, value)?;
        }
        Ok(Held { conn: self, slot, prepared: Some(prepared) })
    }

    fn prepare(&self, sql: &str) -> rusqlite::Result<Prepared<'c>> {
        let stmt = self.conn.prepare_with_flags(sql, rusqlite::PrepFlags::SQLITE_PREPARE_PERSISTENT)?;
        let args = (1..=stmt.parameter_count())
            .map(|i| {
                stmt.parameter_name(i)
                    .and_then(|name| name.strip_prefix('$').or_else(|| name.strip_prefix('?')))
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or(i)
                    .wrapping_sub(1)
            })
            .collect();
        Ok(Prepared { stmt, args })
    }
}

#[cfg(test)]
impl<'c> Conn<'c> {
    pub(super) fn for_test(conn: &'c Connection) -> Self {
        Self::new(conn)
    }
}

impl std::ops::Deref for Conn<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

/// A statement of [`Conn`] while it runs: given back when dropped.
struct Held<'a, 'c> {
    conn: &'a Conn<'c>,
    slot: usize,
    prepared: Option<Prepared<'c>>,
}

impl<'c> std::ops::Deref for Held<'_, 'c> {
    type Target = Statement<'c>;
    fn deref(&self) -> &Statement<'c> {
        &self.prepared.as_ref().expect("held until dropped").stmt
    }
}

impl<'c> std::ops::DerefMut for Held<'_, 'c> {
    fn deref_mut(&mut self) -> &mut Statement<'c> {
        &mut self.prepared.as_mut().expect("held until dropped").stmt
    }
}

impl Drop for Held<'_, '_> {
    fn drop(&mut self) {
        let mut slots = self.conn.statements.borrow_mut();
        let slot = &mut slots[self.slot].held;
        if slot.is_none() {
            *slot = self.prepared.take();
        }
    }
}

/// Runs a statement that returns no rows; how many rows it changed.
pub(super) fn exec(conn: &Conn<'_>, sql: &'static str, args: &[&dyn ToSql]) -> Result<usize, StoreError> {
    exec_raw(conn, sql, args).map_err(backend)
}

/// [`exec`], with the driver's error.
pub(super) fn exec_raw(conn: &Conn<'_>, sql: &'static str, args: &[&dyn ToSql]) -> rusqlite::Result<usize> {
    conn.prepared(sql, args)?.raw_execute()
}

/// Runs a query and reads each row with `f`.
pub(super) fn query<T>(
    conn: &Conn<'_>,
    sql: &'static str,
    args: &[&dyn ToSql],
    f: impl FnMut(&Row<'_>) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut stmt = conn.prepared(sql, args).map_err(backend)?;
    read_rows(&mut stmt, f)
}

/// [`query`] for SQL built at run time, its parameters bare `?`s: prepared through
/// rusqlite's cache, which keys statements by their text.
pub(super) fn query_text<T>(
    conn: &Conn<'_>,
    sql: &str,
    args: &[&dyn ToSql],
    f: impl FnMut(&Row<'_>) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).map_err(backend)?;
    for (i, value) in args.iter().enumerate() {
        stmt.raw_bind_parameter(i + 1, value).map_err(backend)?;
    }
    read_rows(&mut stmt, f)
}

/// Runs the bound statement `stmt` and reads each row with `f`.
fn read_rows<T>(
    stmt: &mut Statement<'_>,
    mut f: impl FnMut(&Row<'_>) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(backend)? {
        out.push(f(row)?);
    }
    Ok(out)
}

/// Runs a query and reads its first row, if any, with `f`.
pub(super) fn query_one<T>(
    conn: &Conn<'_>,
    sql: &'static str,
    args: &[&dyn ToSql],
    f: impl FnOnce(&Row<'_>) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    let mut stmt = conn.prepared(sql, args).map_err(backend)?;
    let mut rows = stmt.raw_query();
    match rows.next().map_err(backend)? {
        Some(row) => f(row).map(Some),
        None => Ok(None),
    }
}

/// A write transaction: `BEGIN IMMEDIATE` takes the write lock first (waiting for
/// it up to the busy timeout), so no read in it is ever upgraded into a deadlock.
/// Rolled back when dropped uncommitted. Its `BEGIN`, `COMMIT` and `ROLLBACK` are
/// prepared once, as the statements are.
pub(super) fn write<'a, 'c>(conn: &'a Conn<'c>) -> Result<Tx<'a, 'c>, StoreError> {
    exec(conn, "BEGIN IMMEDIATE", &[])?;
    Ok(Tx { conn })
}

/// A transaction [`write`] began.
pub(super) struct Tx<'a, 'c> {
    conn: &'a Conn<'c>,
}

impl Tx<'_, '_> {
    pub(super) fn commit(self) -> Result<(), StoreError> {
        // A failed `COMMIT` may leave the transaction open: the drop rolls it back.
        exec(self.conn, "COMMIT", &[]).map(drop)
    }
}

impl<'c> std::ops::Deref for Tx<'_, 'c> {
    type Target = Conn<'c>;
    fn deref(&self) -> &Conn<'c> {
        self.conn
    }
}

impl Drop for Tx<'_, '_> {
    fn drop(&mut self) {
        if !self.conn.is_autocommit() {
            let _ = exec(self.conn, "ROLLBACK", &[]);
        }
    }
}

/// A migration: its version, description and SQL.
pub(super) type Migration = (i64, &'static str, &'static str);

fn open_and_migrate(path: Option<&std::path::Path>, migrations: &[Migration]) -> Result<Connection, StoreError> {
    // Processes that create one file at once race: switching a new file to WAL can
    // find it locked (the migrations themselves take turns, in a write
    // transaction). Tried again a moment later, the file is in WAL mode.
    let mut attempt = 0;
    loop {
        match open_once(path, migrations) {
            Ok(conn) => return Ok(conn),
            Err(e) if attempt < OPEN_ATTEMPTS && is_busy(&e) => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(20 * u64::from(attempt)));
            }
            Err(e) => return Err(e),
        }
    }
}

/// A connection to a new database in memory, its schema migrated.
#[cfg(test)]
pub(super) fn open_for_test(migrations: &[Migration]) -> Connection {
    open_once(None, migrations).expect("an in-memory database opens")
}

/// Whether `e` is SQLite's "busy" or "locked": another connection holds the lock.
fn is_busy(e: &StoreError) -> bool {
    let StoreError::Backend(e) = e else { return false };
    matches!(
        e.downcast_ref::<rusqlite::Error>().and_then(rusqlite::Error::sqlite_error_code),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn open_once(path: Option<&std::path::Path>, migrations: &[Migration]) -> Result<Connection, StoreError> {
    let mut conn = match path {
        Some(path) => Connection::open(path),
        None => Connection::open_in_memory(),
    }
    .map_err(backend)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(backend)?;
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0)).map_err(backend)?;
    conn.pragma_update(None, "synchronous", "FULL").map_err(backend)?;
    conn.pragma_update(None, "foreign_keys", "ON").map_err(backend)?;
    conn.set_prepared_statement_cache_capacity(64);
    migrate(&mut conn, migrations)?;
    Ok(conn)
}

/// sqlx's migration bookkeeping, as `sqlx::migrate::Migrator` keeps it on SQLite (the
/// previous implementation of this store, and so every file it wrote): a row per
/// applied migration with the SHA-384 of its SQL. A file stays interchangeable
/// between the two.
const MIGRATIONS_TABLE: &str = "
CREATE TABLE IF NOT EXISTS _sqlx_migrations (
    version BIGINT PRIMARY KEY,
    description TEXT NOT NULL,
    installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    success BOOLEAN NOT NULL,
    checksum BLOB NOT NULL,
    execution_time BIGINT NOT NULL
);";

/// Applies the migrations the file lacks, in one write transaction (so processes
/// opening one new file at once take turns, and the second finds them applied). As
/// sqlx's migrator: a failed (dirty) migration, an applied one this build does not
/// know (the file is newer) or one whose SQL changed since it was applied are errors.
fn migrate(conn: &mut Connection, migrations: &[Migration]) -> Result<(), StoreError> {
    let error = |what: String| StoreError::Backend(what.into());
    let conn = Conn::new(conn);
    let tx = write(&conn)?;
    tx.execute_batch(MIGRATIONS_TABLE).map_err(backend)?;
    let dirty = query_one(
        &tx,
        "SELECT version FROM _sqlx_migrations WHERE success = false ORDER BY version LIMIT 1",
        &[],
        |r| r.int("version"),
    )?;
    if let Some(version) = dirty {
        return Err(error(format!("migration {version} is partially applied; fix and remove it manually")));
    }
    let applied = query(&tx, "SELECT version, checksum FROM _sqlx_migrations ORDER BY version", &[], |r| {
        Ok((r.get::<_, i64>(0).map_err(backend)?, r.get::<_, Vec<u8>>(1).map_err(backend)?))
    })?;
    for (version, checksum) in &applied {
        match migrations.iter().find(|m| m.0 == *version) {
            None => return Err(error(format!("migration {version} was applied but is missing in this build"))),
            Some(&(_, _, sql)) if Sha384::digest(sql.as_bytes()).as_slice() != checksum.as_slice() => {
                return Err(error(format!("migration {version} was applied with other SQL than this build's")));
            }
            Some(_) => {}
        }
    }
    for &(version, description, sql) in migrations {
        if applied.iter().any(|(v, _)| *v == version) {
            continue;
        }
        let started = Instant::now();
        tx.execute_batch(sql).map_err(|e| error(format!("migration {version} failed: {e}")))?;
        let checksum = Sha384::digest(sql.as_bytes()).to_vec();
        let nanos = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
        exec(
            &tx,
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES ($1, $2, TRUE, $3, $4)",
            &[&version, &description, &checksum, &nanos],
        )?;
    }
    tx.commit()
}

use crate::sql::rows::Cols as _;
