//! The SQLite store, on rusqlite: one connection on a thread of its own
//! ([`conn`]), the writes ([`writes`]), the reads and signals ([`reads`]), the event
//! log and schedules ([`log`]). The SQL, the row decoding and the state patches are
//! the ones the PostgreSQL store shares (`crate::sql`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use loopstack_core::schedule::{ScheduleFire, ScheduledRun};
use loopstack_core::serde_json::{self, value::RawValue};
use loopstack_core::store::{EventRetention, LoggedEvent, OutSignal};
use loopstack_core::{
    Checkpoint, CheckpointRecord, Claim, Document, Fence, ForkStep, Inbox, Lease, NewRun, Park, RunEvent, RunId,
    RunPage, RunQuery, RunRecord, RunStatus, ScheduleRecord, SignalReceipt, SignalRecord, StepRecord, StoreError,
    Timestamp, WorkflowVersions,
};
use rusqlite::Connection;

use crate::events::EventWake;
use crate::sql::queries::{claim_runnable, due_schedules};
use crate::sql::{LastStates, corrupt, to_i64};

mod conn;
mod log;
mod reads;
mod writes;

use reads::Docs;

/// The SQLite migrations, in order: `(version, description, sql)`, recorded as
/// sqlx's migrator records them (see `conn::migrate`).
const MIGRATIONS: &[conn::Migration] = &[
    (1, "runs", include_str!("../../migrations/sqlite/0001_runs.sql")),
    (2, "parent signal", include_str!("../../migrations/sqlite/0002_parent_signal.sql")),
    (3, "events", include_str!("../../migrations/sqlite/0003_events.sql")),
    (4, "schedules", include_str!("../../migrations/sqlite/0004_schedules.sql")),
    (5, "versions", include_str!("../../migrations/sqlite/0005_versions.sql")),
    (6, "trace parent", include_str!("../../migrations/sqlite/0006_trace_parent.sql")),
    (7, "claim indexes", include_str!("../../migrations/sqlite/0007_claim_indexes.sql")),
    (8, "lean run indexes", include_str!("../../migrations/sqlite/0008_lean_run_indexes.sql")),
    (9, "schedule overlap", include_str!("../../migrations/sqlite/0009_schedule_overlap.sql")),
    (11, "takeovers", include_str!("../../migrations/sqlite/0011_takeovers.sql")),
    (12, "holder", include_str!("../../migrations/sqlite/0012_holder.sql")),
    (13, "labels", include_str!("../../migrations/sqlite/0013_labels.sql")),
];

/// The worker's claim in SQLite's words: no row locks (one writer at a time), the
/// workflow tests over `json_each`, and the indexes named (SQLite keeps no
/// statistics, see migration 7).
const CLAIM_RUNNABLE: &str = claim_runnable!(
    "",
    "r.workflow IN (SELECT value FROM json_each($4))",
    "(r.workflow || ':' || r.version) IN (SELECT value FROM json_each($6))",
    " NOT INDEXED",
    " INDEXED BY runs_leased",
    " INDEXED BY runs_waking",
    ("IN (", ")"),
);

const DUE_SCHEDULES: &str = due_schedules!("r.workflow IN (SELECT value FROM json_each($4))");

/// A [`Store`](loopstack_core::Store) in one SQLite file: the embedded default.
///
/// The file is opened in WAL mode with `synchronous = FULL` (a committed transition
/// survives a power cut), a busy timeout for the one-writer-at-a-time rule, and
/// short transactions: one per commit, never held across a model call. The schema
/// is created and migrated when the store opens; several processes may open one
/// file at once.
///
/// The connection lives on a thread of its own, which runs the store's requests
/// one at a time (each a whole transaction), so the async runtime never waits on
/// SQLite or the disk. Clones share it.
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
    inner: Arc<Inner>,
    lease: Option<Duration>,
}

/// What clones of a store share.
struct Inner {
    db: conn::Db,
    path: Option<PathBuf>,
    /// The last state each run committed (the base of the next patch).
    last: Arc<LastStates>,
    events: EventWake,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .field("lease", &self.lease)
            .field("last", &self.inner.last)
            .field("events", &self.inner.events)
            .finish()
    }
}

impl SqliteStore {
    /// Opens (or creates) the store at `path` and brings its schema up to date.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::start(Some(path.as_ref().to_owned())).await
    }

    /// A store in memory, private to this value and its clones (one connection):
    /// the SQL store's behaviour without a file, for tests.
    pub async fn memory() -> Result<Self, StoreError> {
        Self::start(None).await
    }

    async fn start(path: Option<PathBuf>) -> Result<Self, StoreError> {
        let db = conn::Db::open(path.clone(), MIGRATIONS).await?;
        let inner = Inner { db, path, last: Default::default(), events: EventWake::default() };
        Ok(Self { inner: Arc::new(inner), lease: Some(crate::DEFAULT_LEASE) })
    }

    /// Sets the lease runtimes take on runs they drive (30 s unless set; `None` for
    /// none: then only an explicit resume takes over a run whose process died).
    #[must_use]
    pub fn with_lease(mut self, lease: Option<Duration>) -> Self {
        self.lease = lease;
        self
    }

    /// Runs `f` on the store's connection, on its thread, for queries of your own
    /// (between the store's requests, never inside one), and returns what it
    /// returns. `f` runs to its end before the store's next request: keep it short.
    /// The store's own prepared statements are finalized while `f` has the
    /// connection and prepared again after it, so this is for occasional use, not
    /// for every step.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), loopstack_core::StoreError> {
    /// let store = loopstack_store::SqliteStore::memory().await?;
    /// let runs: i64 = store
    ///     .with_connection(|c| c.query_row("SELECT count(*) FROM runs", [], |r| r.get(0)))
    ///     .await?
    ///     .map_err(|e| loopstack_core::StoreError::Backend(Box::new(e)))?;
    /// assert_eq!(runs, 0);
    /// # Ok(()) }
    /// ```
    pub async fn with_connection<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        F: FnOnce(&mut Connection) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.inner.db.call_connection(f).await
    }

    /// Runs one of the store's requests on its connection.
    async fn call<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        F: FnOnce(&conn::Conn<'_>, &LastStates) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        let last = self.inner.last.clone();
        self.inner.db.call(move |conn| f(conn, &last)).await?
    }
}

#[async_trait::async_trait]
impl loopstack_core::Store for SqliteStore {
    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        self.call(move |c, last| writes::create_run(c, last, run)).await
    }

    async fn claim(&self, run_id: RunId, claim: &Claim) -> Result<RunRecord, StoreError> {
        let claim = claim.clone();
        self.call(move |c, _| writes::claim(c, run_id, &claim)).await
    }

    async fn commit(&self, checkpoint: Checkpoint) -> Result<(), StoreError> {
        self.call(move |c, last| writes::commit(c, last, checkpoint)).await
    }

    async fn set_status(
        &self,
        run_id: RunId,
        fence: Fence,
        status: RunStatus,
        error: Option<String>,
        notify: Option<OutSignal>,
    ) -> Result<(), StoreError> {
        self.call(move |c, _| writes::set_status(c, run_id, fence, status, error, notify)).await
    }

    async fn park(&self, run_id: RunId, park: &Park<'_>) -> Result<(), StoreError> {
        let parked = writes::Parked {
            fence: park.fence,
            inbox_seq: to_i64(park.inbox_seq),
            signals: serde_json::to_string(park.signals).map_err(corrupt)?,
            wake_at: park.wake_at.map(Timestamp::as_millis),
        };
        self.call(move |c, _| writes::park(c, run_id, &parked)).await
    }

    async fn claim_runnable(
        &self,
        workflows: &[WorkflowVersions<'_>],
        lease: &Lease,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let names: Vec<&str> = workflows.iter().map(|w| w.workflow).collect();
        let claim = writes::ClaimRunnable {
            owner: lease.owner.clone(),
            until: lease.until.as_millis(),
            now: now.as_millis(),
            names: serde_json::to_string(&names).map_err(corrupt)?,
            limit: i64::from(limit),
            keys: serde_json::to_string(&WorkflowVersions::keys(workflows)).map_err(corrupt)?,
        };
        self.call(move |c, _| writes::claim_runnable(c, &claim)).await
    }

    async fn heartbeat(&self, run_id: RunId, epoch: u64, until: Timestamp) -> Result<(), StoreError> {
        self.call(move |c, _| writes::heartbeat(c, run_id, epoch, until)).await
    }

    async fn release_lease(&self, run_id: RunId, epoch: u64) -> Result<(), StoreError> {
        self.call(move |c, _| writes::release_lease(c, run_id, epoch)).await
    }

    async fn send_signal(
        &self,
        run_id: RunId,
        name: &str,
        payload: Box<RawValue>,
    ) -> Result<SignalReceipt, StoreError> {
        let name = name.to_owned();
        self.call(move |c, _| reads::send_signal(c, run_id, &name, payload.get())).await
    }

    async fn inbox(&self, run_id: RunId) -> Result<Inbox, StoreError> {
        self.call(move |c, _| reads::inbox(c, run_id)).await
    }

    async fn reject_signal(&self, run_id: RunId, epoch: u64, signal: u64, reason: &str) -> Result<(), StoreError> {
        let reason = reason.to_owned();
        self.call(move |c, _| reads::reject_signal(c, run_id, epoch, signal, &reason)).await
    }

    async fn signals(&self, run_id: RunId) -> Result<Vec<SignalRecord>, StoreError> {
        self.call(move |c, _| reads::signals(c, run_id)).await
    }

    async fn takeovers(&self, run_id: RunId) -> Result<Vec<loopstack_core::Takeover>, StoreError> {
        self.call(move |c, _| reads::takeovers(c, run_id)).await
    }

    async fn fork(
        &self,
        source: RunId,
        step: u64,
        new_run: RunId,
        first: Option<ForkStep>,
    ) -> Result<RunRecord, StoreError> {
        self.call(move |c, last| writes::fork(c, last, source, step, new_run, first)).await
    }

    async fn load_run(&self, run_id: RunId) -> Result<RunRecord, StoreError> {
        self.call(move |c, _| reads::load(c, run_id)).await
    }

    async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
        let query = query.clone();
        self.call(move |c, _| reads::list_runs(c, &query)).await
    }

    async fn count_runs(&self, now: Timestamp) -> Result<Vec<loopstack_core::RunCount>, StoreError> {
        self.call(move |c, _| reads::count_runs(c, now)).await
    }

    async fn history(&self, run_id: RunId) -> Result<Vec<StepRecord>, StoreError> {
        self.call(move |c, _| reads::history(c, run_id)).await
    }

    async fn checkpoint(&self, run_id: RunId, step: u64) -> Result<CheckpointRecord, StoreError> {
        self.call(move |c, _| reads::checkpoint(c, run_id, step)).await
    }

    async fn documents(&self, run_id: RunId) -> Result<Vec<Arc<Document>>, StoreError> {
        self.call(move |c, _| reads::documents(c, run_id, &Docs::At(i64::MAX as u64))).await
    }

    async fn documents_at(&self, run_id: RunId, step: u64) -> Result<Vec<Arc<Document>>, StoreError> {
        self.call(move |c, _| reads::documents(c, run_id, &Docs::At(step))).await
    }

    async fn document_versions(&self, run_id: RunId) -> Result<Vec<Arc<Document>>, StoreError> {
        self.call(move |c, _| reads::documents(c, run_id, &Docs::Versions)).await
    }

    async fn document_history(
        &self,
        run_id: RunId,
        doc_type: &str,
        key: &str,
    ) -> Result<Vec<Arc<Document>>, StoreError> {
        let which = Docs::History(doc_type.to_owned(), key.to_owned());
        self.call(move |c, _| reads::documents(c, run_id, &which)).await
    }

    fn lease_duration(&self) -> Option<Duration> {
        self.lease
    }

    async fn create_schedule(&self, schedule: &ScheduleRecord) -> Result<(), StoreError> {
        let schedule = schedule.clone();
        self.call(move |c, _| log::create_schedule(c, &schedule)).await
    }

    async fn load_schedule(&self, id: &str) -> Result<ScheduleRecord, StoreError> {
        let id = id.to_owned();
        self.call(move |c, _| log::load_schedule(c, &id)).await
    }

    async fn list_schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        self.call(move |c, _| log::list_schedules(c)).await
    }

    async fn set_schedule_paused(
        &self,
        id: &str,
        paused: bool,
        next_due: Option<Timestamp>,
    ) -> Result<ScheduleRecord, StoreError> {
        let id = id.to_owned();
        self.call(move |c, _| log::set_schedule_paused(c, &id, paused, next_due)).await
    }

    async fn delete_schedule(&self, id: &str) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.call(move |c, _| log::delete_schedule(c, &id)).await
    }

    async fn due_schedules(
        &self,
        workflows: &[&str],
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        let names = serde_json::to_string(workflows).map_err(corrupt)?;
        self.call(move |c, _| log::due_schedules(c, &names, now, limit)).await
    }

    async fn fire_schedule(&self, fire: ScheduleFire) -> Result<bool, StoreError> {
        self.call(move |c, _| log::fire_schedule(c, &fire)).await
    }

    async fn scheduled_runs(&self, id: &str, limit: u32) -> Result<Vec<ScheduledRun>, StoreError> {
        let id = id.to_owned();
        self.call(move |c, _| log::scheduled_runs(c, &id, limit)).await
    }

    fn has_event_log(&self) -> bool {
        true
    }

    async fn append_events(&self, origin: &str, events: &[Arc<RunEvent>]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let mut rows = Vec::with_capacity(events.len());
        for event in events {
            rows.push((event.run_id, event.at.as_millis(), serde_json::to_string(&**event).map_err(corrupt)?));
        }
        let origin = origin.to_owned();
        let newest = self.call(move |c, _| log::append_events(c, &origin, &rows)).await?;
        self.inner.events.saw(u64::try_from(newest).unwrap_or(0));
        Ok(())
    }

    async fn read_events(&self, after: u64, run: Option<RunId>, limit: u32) -> Result<Vec<LoggedEvent>, StoreError> {
        self.call(move |c, _| log::read_events(c, after, run, limit)).await
    }

    async fn last_event_id(&self) -> Result<u64, StoreError> {
        self.call(move |c, _| log::last_event_id(c)).await
    }

    /// Waits for an append by this process, or `loopstack_store::SQLITE_EVENT_POLL`.
    async fn wait_events(&self, after: u64, max: Duration) -> Result<(), StoreError> {
        self.inner.events.wait(after, max.min(crate::events::SQLITE_EVENT_POLL)).await;
        Ok(())
    }

    async fn prune_events(&self, now: Timestamp, retention: &EventRetention) -> Result<u64, StoreError> {
        let retention = *retention;
        self.call(move |c, _| log::prune_events(c, now, &retention)).await
    }

    async fn listen_events(&self, listener: &str, until: Timestamp) -> Result<(), StoreError> {
        let listener = listener.to_owned();
        self.call(move |c, _| log::listen_events(c, &listener, until)).await
    }

    async fn unlisten_events(&self, listener: &str) -> Result<(), StoreError> {
        let listener = listener.to_owned();
        self.call(move |c, _| log::unlisten_events(c, &listener)).await
    }

    async fn has_event_listeners(&self, now: Timestamp) -> Result<bool, StoreError> {
        self.call(move |c, _| log::has_event_listeners(c, now)).await
    }
}

#[cfg(test)]
mod tests {
    use crate::sql::queries::{
        COMMIT_CHECKPOINT, COMMIT_RUN, COMMIT_STEP, DELIVER_SIGNAL, HAS_PENDING, HEARTBEAT, INSERT_CHECKPOINT,
        INSERT_DOCUMENT, INSERT_RUN, PARK, RELEASE_LEASE, SELECT_RUN, SET_STATUS,
    };

    /// A statement run again while it runs (a read inside a read of its rows) is
    /// prepared anew; both see their own arguments, and the first is kept after.
    #[test]
    fn a_statement_runs_inside_its_own_run() {
        let raw = super::conn::open_for_test(super::MIGRATIONS);
        let conn = super::conn::Conn::for_test(&raw);
        const PAIRS: &str = "SELECT value FROM json_each($1)";
        let outer = super::conn::query(&conn, PAIRS, &[&"[1, 2]"], |row| {
            let n: i64 = row.get(0).unwrap();
            let inner = super::conn::query(&conn, PAIRS, &[&format!("[{}, {}]", n * 10, n * 100)], |r| {
                Ok(r.get::<_, i64>(0).unwrap())
            })?;
            Ok((n, inner))
        })
        .unwrap();
        assert_eq!(outer, [(1, vec![10, 100]), (2, vec![20, 200])]);
        let again = super::conn::query(&conn, PAIRS, &[&"[3]"], |r| Ok(r.get::<_, i64>(0).unwrap())).unwrap();
        assert_eq!(again, [3]);
    }

    /// A request that takes the connection itself (`with_connection`) runs between
    /// the store's, whose statements are prepared again after it.
    #[tokio::test]
    async fn the_store_goes_on_after_a_request_that_takes_the_connection() {
        let store = super::SqliteStore::memory().await.unwrap();
        let first =
            store.with_connection(|c| c.query_row("SELECT count(*) FROM runs", [], |r| r.get::<_, i64>(0))).await;
        assert_eq!(first.unwrap().unwrap(), 0);
        let run_id = loopstack_core::RunId::new();
        let missing = <super::SqliteStore as loopstack_core::Store>::load_run(&store, run_id).await;
        assert!(matches!(missing, Err(loopstack_core::StoreError::RunNotFound(id)) if id == run_id));
        let made = store.with_connection(|c| c.execute_batch("CREATE TABLE extra (x INTEGER)")).await;
        assert!(made.unwrap().is_ok());
        let missing = <super::SqliteStore as loopstack_core::Store>::load_run(&store, run_id).await;
        assert!(matches!(missing, Err(loopstack_core::StoreError::RunNotFound(id)) if id == run_id));
    }

    /// The commit of a step that keeps a run running under its lease writes the run
    /// row alone: no index entry of it (SQLite rewrites an index's entry when an
    /// `UPDATE` sets a column the index holds or its `WHERE` reads, even unchanged).
    #[test]
    fn the_commit_of_a_running_step_writes_no_index_of_the_runs() {
        let conn = super::conn::open_for_test(super::MIGRATIONS);
        let index_writes = |sql: &str| -> usize {
            let mut stmt = conn.prepare(&format!("EXPLAIN {sql}")).unwrap();
            let mut rows = stmt.raw_query();
            let mut writes = 0;
            while let Some(row) = rows.next().unwrap() {
                writes += usize::from(matches!(row.get::<_, String>(1).unwrap().as_str(), "IdxInsert" | "IdxDelete"));
            }
            writes
        };
        assert_eq!(index_writes(COMMIT_STEP), 0, "{COMMIT_STEP}");
        // The statement for every other commit does rewrite index entries (the lease's,
        // the queued runs', the waiting runs'): the test reads what it means to.
        assert!(index_writes(COMMIT_RUN) >= 3, "{COMMIT_RUN}");
    }

    /// The statements of every run's steps build no temporary B-tree per execution
    /// (`OpenEphemeral`: SQLite's way with `x IN (a, b, c)` and `NOT IN`), which
    /// cost each commit a page cache of its own, opened, zeroed and closed. (Sending
    /// a signal does: `RETURNING` buffers its row in one.)
    #[test]
    fn the_statements_of_a_step_build_no_temporary_b_tree() {
        let conn = super::conn::open_for_test(super::MIGRATIONS);
        for (name, sql) in [
            ("INSERT_RUN", INSERT_RUN),
            ("INSERT_CHECKPOINT", INSERT_CHECKPOINT),
            ("SELECT_RUN", SELECT_RUN),
            ("COMMIT_CHECKPOINT", COMMIT_CHECKPOINT),
            ("COMMIT_RUN", COMMIT_RUN),
            ("COMMIT_STEP", COMMIT_STEP),
            ("INSERT_DOCUMENT", INSERT_DOCUMENT),
            ("SET_STATUS", SET_STATUS),
            ("PARK", PARK),
            ("HEARTBEAT", HEARTBEAT),
            ("RELEASE_LEASE", RELEASE_LEASE),
            ("DELIVER_SIGNAL", DELIVER_SIGNAL),
            ("HAS_PENDING", HAS_PENDING),
        ] {
            let mut stmt = conn.prepare(&format!("EXPLAIN {sql}")).unwrap();
            // Unbound parameters are NULL: the program is the same.
            let mut rows = stmt.raw_query();
            let mut opcodes: Vec<String> = Vec::new();
            while let Some(row) = rows.next().unwrap() {
                opcodes.push(row.get(1).unwrap());
            }
            assert!(opcodes.iter().any(|op| op == "Halt"), "{name}: not a program: {opcodes:?}");
            assert!(!opcodes.iter().any(|op| op == "OpenEphemeral"), "{name} builds a temporary B-tree: {sql}");
        }
    }
}
