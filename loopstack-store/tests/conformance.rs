//! The store conformance suite (`loopstack_core::testing`, feature `testing`) run
//! against every store: `MemoryStore`, SQLite (a file, and in memory) and
//! PostgreSQL (its own schema per test run; `LOOPSTACK_DATABASE_URL`, by default the
//! local server), and what only the SQL stores have: their migrations. The
//! PostgreSQL tests fail, never skip, when the server is unreachable: `.ci/run`
//! starts it.

use std::sync::Arc;

use futures::future::BoxFuture;
use loopstack_core::serde_json::{self, Value, json};
use loopstack_core::store::OutSignal;
use loopstack_core::testing::StoreSuite;
use loopstack_core::*;
use loopstack_store::{PostgresStore, SqliteStore};

// sqlx 0.8's SQLite migrator, which wrote the previous store's files (this file
// uses only part of it).
#[allow(dead_code)]
mod sqlx08;

fn json_raw(value: Value) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(&value).unwrap()
}

/// The last step of a child: `start` to `end`, completed.
fn finishing(child: RunId, fence: Fence) -> Checkpoint {
    let step = StepRecord::new(fence.step + 1, "finish", START, END);
    Checkpoint::new(child, fence, step, RunStatus::Completed, json_raw(json!({"done": true})))
}

/// What a finishing child sends its parent.
fn child_done(parent: RunId, child: RunId, status: RunStatus) -> OutSignal {
    OutSignal::new(parent, "child_done", json_raw(json!({"child": child, "status": status})))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_keeps_the_contract() {
    StoreSuite::new(Arc::new(MemoryStore::new())).run().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_keeps_the_contract() {
    let dir = tempdir("conformance");
    let store = SqliteStore::open(dir.join("runs.db")).await.unwrap();
    StoreSuite::new(Arc::new(store.clone())).spoil_with(spoil_sqlite(&store)).run().await;
    // Reopening the file finds everything (and migrates nothing twice).
    let again = SqliteStore::open(dir.join("runs.db")).await.unwrap();
    assert!(!again.list_runs(&RunQuery::new()).await.unwrap().runs.is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_opening_one_new_sqlite_file_at_once_both_open_it() {
    // Two processes (here two pools) that create the same file at the same moment:
    // both migrations start on an empty database, one waits for the other's lock.
    let dir = tempdir("first-open");
    for i in 0..20 {
        let path = dir.join(format!("runs-{i}.db"));
        let (a, b, c) = tokio::join!(SqliteStore::open(&path), SqliteStore::open(&path), SqliteStore::open(&path));
        for store in [a, b, c] {
            let store = store.unwrap_or_else(|e| panic!("opening {} at once: {e}", path.display()));
            assert!(store.list_runs(&RunQuery::new()).await.unwrap().runs.is_empty());
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_store_keeps_the_contract() {
    let store = SqliteStore::memory().await.unwrap();
    StoreSuite::new(Arc::new(store.clone())).spoil_with(spoil_sqlite(&store)).run().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_keeps_the_contract() {
    let (url, schema) = pg_schema("conformance");
    let store = PostgresStore::connect_schema(&url, &schema).await.unwrap_or_else(|e| {
        panic!("PostgreSQL at {url} is needed for this test (`.ci/run` starts it; set LOOPSTACK_DATABASE_URL): {e}")
    });
    let pool = store.pool().clone();
    let spoil = move |run_id: RunId| -> BoxFuture<'static, ()> {
        let pool = pool.clone();
        Box::pin(async move {
            sqlx::query(SPOIL).bind(run_id.0).execute(&pool).await.unwrap();
        })
    };
    StoreSuite::new(Arc::new(store.clone())).spoil_with(spoil).run().await;
    // A second store on the same schema sees the same runs.
    let again = PostgresStore::connect_schema(&url, &schema).await.unwrap();
    assert!(!again.list_runs(&RunQuery::new()).await.unwrap().runs.is_empty());
    drop_schema(&url, &schema).await;
}

/// `drop_schema` removes what `connect_schema` made, with the runs in it; a store
/// still connected to it gets errors; a second drop is not an error; and a name
/// that would need quoting is refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_a_store_made_is_dropped_with_its_runs() {
    let (url, schema) = pg_schema("dropped");
    let store = PostgresStore::connect_schema(&url, &schema).await.unwrap_or_else(|e| {
        panic!("PostgreSQL at {url} is needed for this test (`.ci/run` starts it; set LOOPSTACK_DATABASE_URL): {e}")
    });
    let exists = async || -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1")
            .bind(&schema)
            .fetch_one(store.pool())
            .await
            .unwrap()
    };
    assert_eq!(exists().await, 1);
    PostgresStore::drop_schema(&url, &schema).await.unwrap();
    assert_eq!(exists().await, 0);
    assert!(store.list_runs(&RunQuery::new()).await.is_err(), "its tables are gone");
    PostgresStore::drop_schema(&url, &schema).await.unwrap();

    for bad in ["", "public; DROP TABLE runs", "a-b", "\"x\""] {
        let err = PostgresStore::drop_schema(&url, bad).await.unwrap_err();
        assert!(err.to_string().contains("ASCII letters, digits and underscores"), "{bad}: {err}");
    }
}

/// Writes a state that is not JSON over a run's checkpoints.
const SPOIL: &str = "UPDATE checkpoints SET state = '{\"unreadable' WHERE state IS NOT NULL \
    AND run = (SELECT id FROM runs WHERE run_id = $1)";

fn spoil_sqlite(store: &SqliteStore) -> impl Fn(RunId) -> BoxFuture<'static, ()> + Send + Sync + 'static {
    let store = store.clone();
    move |run_id: RunId| -> BoxFuture<'static, ()> {
        let store = store.clone();
        Box::pin(async move {
            store.with_connection(move |c| c.execute(SPOIL, [run_id.0])).await.unwrap().unwrap();
        })
    }
}

/// A connection still writing when the schema is dropped: it holds one table and
/// then asks for another that the drop has taken, a deadlock PostgreSQL breaks by
/// aborting one of the two. Tried with the tables in both orders, so that in one of
/// them the drop waits on the writer's table after taking the other: whichever is
/// aborted, the drop goes through (tried again when it was the one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_is_dropped_though_a_connection_still_writing_deadlocks_with_it() {
    for (first, second) in [("runs", "documents"), ("documents", "runs")] {
        let (url, schema) = pg_schema("deadlock");
        let store = PostgresStore::connect_schema(&url, &schema).await.unwrap_or_else(|e| {
            panic!("PostgreSQL at {url} is needed for this test (`.ci/run` starts it; set LOOPSTACK_DATABASE_URL): {e}")
        });
        let pool = store.pool().clone();
        let mut writer = pool.begin().await.unwrap();
        let lock = |table: &str| format!("LOCK TABLE {schema}.{table} IN ROW EXCLUSIVE MODE");
        sqlx::query(sqlx::AssertSqlSafe(lock(first))).execute(&mut *writer).await.unwrap();
        let drop = tokio::spawn({
            let (url, schema) = (url.clone(), schema.clone());
            async move { PostgresStore::drop_schema(&url, &schema).await }
        });
        // Until the drop waits on the writer's lock (a condition polled, each look a
        // query; the bound only keeps a broken build from hanging the suite).
        let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
            AND query LIKE 'DROP SCHEMA IF EXISTS ' || $1 || '%'";
        let mut looks = 0;
        while sqlx::query_scalar::<_, i64>(waiting).bind(&schema).fetch_one(&pool).await.unwrap() == 0 {
            looks += 1;
            assert!(looks < 100_000, "the drop never waited on the writer's lock");
            tokio::task::yield_now().await;
        }
        // Either this lock waits on the drop (a deadlock: one of the two is aborted) or
        // the drop had not reached this table yet.
        let _ = sqlx::query(sqlx::AssertSqlSafe(lock(second))).execute(&mut *writer).await;
        let _ = writer.rollback().await;
        drop.await.unwrap().unwrap_or_else(|e| panic!("{first} then {second}: the drop failed: {e}"));
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1")
            .bind(&schema)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(left, 0, "{first} then {second}: the schema is gone");
        pool.close().await;
    }
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("loopstack-{name}-{}-{}", std::process::id(), RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn pg_schema(name: &str) -> (String, String) {
    let url = std::env::var("LOOPSTACK_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    (url, format!("loopstack_test_{name}_{}", RunId::new().0.simple()))
}

/// A test's schema, dropped with everything in it.
async fn drop_schema(url: &str, schema: &str) {
    PostgresStore::drop_schema(url, schema).await.unwrap();
}

/// A run as a store of the first schema (migration 0001 only) wrote it.
const OLD_RUN: &str = "INSERT INTO runs (run_id, workflow, status, place, step, definition_hash, parent, epoch, \
    place_since, created_at, updated_at) VALUES ($1, 'old', 'waiting', 'start', 0, 'h', $2, 1, 0, 0, 0)";
const OLD_CHECKPOINT: &str = "INSERT INTO checkpoints (run, step, transition, to_place, state, at) \
    VALUES ((SELECT id FROM runs WHERE run_id = $1), 0, '', 'start', '{\"old\":true}', 0)";

/// Writes PostgreSQL's `0001_runs.sql` into a directory of its own, for a migrator
/// that knows only the first schema.
fn first_postgres_migration(dir: &std::path::Path) -> std::path::PathBuf {
    let migrations = dir.join("migrations-postgres");
    std::fs::create_dir_all(&migrations).unwrap();
    std::fs::write(migrations.join("0001_runs.sql"), include_str!("../migrations/postgres/0001_runs.sql")).unwrap();
    migrations
}

/// What a store opened on a database of the first schema must find: the old run,
/// with no parent signal, and room for new runs that have one.
async fn an_old_run_reads_back_after_the_upgrade(store: &dyn Store, old: RunId, parent: RunId) {
    let run = store.load_run(old).await.unwrap();
    assert_eq!((run.parent, run.parent_signal.as_deref(), run.state.get()), (Some(parent), None, r#"{"old":true}"#));
    let child = NewRun::new(RunId::new(), "new", "h", json_raw(json!({}))).child_of(old, "child_done");
    let child = store.create_run(child).await.unwrap();
    assert_eq!(store.load_run(child.run_id).await.unwrap().parent_signal.as_deref(), Some("child_done"));
    store
        .commit(finishing(child.run_id, child.fence()).notify(child_done(old, child.run_id, RunStatus::Completed)))
        .await
        .unwrap();
    assert_eq!(store.inbox(old).await.unwrap().seq, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_database_of_the_first_schema_is_migrated() {
    let dir = tempdir("upgrade");
    let mut conn = sqlx08::open(&dir.join("runs.db"));
    let first = sqlx08::migrations(&[("0001_runs.sql", include_str!("../migrations/sqlite/0001_runs.sql"))]);
    sqlx08::run(&mut conn, &first).unwrap();
    let (old, parent) = (RunId::new(), RunId::new());
    conn.execute(OLD_RUN, [old.0, parent.0]).unwrap();
    conn.execute(OLD_CHECKPOINT, [old.0]).unwrap();
    drop(conn);
    let store = SqliteStore::open(dir.join("runs.db")).await.unwrap();
    an_old_run_reads_back_after_the_upgrade(&store, old, parent).await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_of_the_first_schema_is_migrated() {
    use std::str::FromStr as _;
    let (url, schema) = pg_schema("upgrade");
    let dir = tempdir("upgrade");
    let migrations = first_postgres_migration(&dir);
    let options = sqlx::postgres::PgConnectOptions::from_str(&url).unwrap();
    let pool = sqlx::PgPool::connect_with(options.clone()).await.unwrap_or_else(|e| {
        panic!("PostgreSQL at {url} is needed for this test (`.ci/run` starts it; set LOOPSTACK_DATABASE_URL): {e}")
    });
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&pool).await.unwrap();
    pool.close().await;
    let pool = sqlx::PgPool::connect_with(options.options([("search_path", &*schema)])).await.unwrap();
    sqlx::migrate::Migrator::new(migrations.as_path()).await.unwrap().run(&pool).await.unwrap();
    let (old, parent) = (RunId::new(), RunId::new());
    sqlx::query(OLD_RUN).bind(old.0).bind(parent.0).execute(&pool).await.unwrap();
    sqlx::query(OLD_CHECKPOINT).bind(old.0).execute(&pool).await.unwrap();
    pool.close().await;
    let store = PostgresStore::connect_schema(&url, &schema).await.unwrap();
    an_old_run_reads_back_after_the_upgrade(&store, old, parent).await;
    drop_schema(&url, &schema).await;
    std::fs::remove_dir_all(dir).unwrap();
}
