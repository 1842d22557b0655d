//! The SQLite store on files the previous implementation (sqlx's migrator) wrote:
//! its bookkeeping (`_sqlx_migrations`, one row per migration with the SHA-384 of
//! its SQL) is read and kept, so the store applies only what is missing, and a file
//! the store created stays one sqlx's migrator accepts.

use loopstack_core::serde_json::json;
use loopstack_core::*;
use loopstack_store::SqliteStore;
use sqlx::Row as _;

/// The SQLite migrations as the previous store embedded them: file names give
/// sqlx's migrator the same versions and descriptions (`0002_parent_signal.sql`:
/// 2, "parent signal").
const MIGRATIONS: &[(&str, &str)] = &[
    ("0001_runs.sql", include_str!("../migrations/sqlite/0001_runs.sql")),
    ("0002_parent_signal.sql", include_str!("../migrations/sqlite/0002_parent_signal.sql")),
    ("0003_events.sql", include_str!("../migrations/sqlite/0003_events.sql")),
    ("0004_schedules.sql", include_str!("../migrations/sqlite/0004_schedules.sql")),
    ("0005_versions.sql", include_str!("../migrations/sqlite/0005_versions.sql")),
    ("0006_trace_parent.sql", include_str!("../migrations/sqlite/0006_trace_parent.sql")),
    ("0007_claim_indexes.sql", include_str!("../migrations/sqlite/0007_claim_indexes.sql")),
    ("0008_lean_run_indexes.sql", include_str!("../migrations/sqlite/0008_lean_run_indexes.sql")),
    ("0009_schedule_overlap.sql", include_str!("../migrations/sqlite/0009_schedule_overlap.sql")),
    ("0011_takeovers.sql", include_str!("../migrations/sqlite/0011_takeovers.sql")),
    ("0012_holder.sql", include_str!("../migrations/sqlite/0012_holder.sql")),
];

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("loopstack-{name}-{}-{}", std::process::id(), RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A directory with the first `n` migrations, for sqlx's migrator.
fn migrations(dir: &std::path::Path, n: usize) -> std::path::PathBuf {
    let dir = dir.join(format!("migrations-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, sql) in &MIGRATIONS[..n] {
        std::fs::write(dir.join(name), sql).unwrap();
    }
    dir
}

async fn sqlx_pool(path: &std::path::Path) -> sqlx::SqlitePool {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
    sqlx::SqlitePool::connect_with(options).await.unwrap()
}

/// `(version, description, success, checksum)` of each applied migration.
async fn bookkeeping(pool: &sqlx::SqlitePool) -> Vec<(i64, String, bool, Vec<u8>)> {
    sqlx::query("SELECT version, description, success, checksum FROM _sqlx_migrations ORDER BY version")
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_sqlx_migrated_to_6_gets_only_the_migrations_after_6() {
    let dir = tempdir("sqlx-migrated");
    let path = dir.join("runs.db");
    let pool = sqlx_pool(&path).await;
    let six = migrations(&dir, 6);
    sqlx::migrate::Migrator::new(six.as_path()).await.unwrap().run(&pool).await.unwrap();
    let before = bookkeeping(&pool).await;
    assert_eq!(before.len(), 6);
    // A run that store wrote, with its row and first checkpoint.
    let old = RunId::new();
    sqlx::query(
        "INSERT INTO runs (run_id, workflow, status, place, step, definition_hash, epoch, place_since, created_at, \
         updated_at) VALUES ($1, 'old', 'waiting', 'start', 0, 'h', 1, 0, 0, 0)",
    )
    .bind(old.0)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO checkpoints (run, step, transition, to_place, state, at) \
         VALUES ((SELECT id FROM runs WHERE run_id = $1), 0, '', 'start', '{\"old\":true}', 0)",
    )
    .bind(old.0)
    .execute(&pool)
    .await
    .unwrap();

    let store = SqliteStore::open(&path).await.unwrap();
    let run = store.load_run(old).await.unwrap();
    assert_eq!((run.workflow.as_ref(), run.status, run.version), ("old", RunStatus::Waiting, 1));
    assert_eq!(run.state.get(), r#"{"old":true}"#);
    // The run moves on in the new store.
    store.send_signal(old, "go", serde_json::value::to_raw_value(&json!(1)).unwrap()).await.unwrap();
    assert_eq!(store.inbox(old).await.unwrap().pending.len(), 1);

    // Migrations 1-6 kept as sqlx wrote them; the rest added as sqlx would have.
    let after = bookkeeping(&pool).await;
    assert_eq!(after.len(), MIGRATIONS.len());
    assert_eq!(after[..6], before[..]);
    let all = migrations(&dir, MIGRATIONS.len());
    let migrator = sqlx::migrate::Migrator::new(all.as_path()).await.unwrap();
    let expected: Vec<_> =
        migrator.iter().map(|m| (m.version, m.description.to_string(), true, m.checksum.to_vec())).collect();
    assert_eq!(after[6..], expected[6..]);
    // sqlx's migrator finds nothing to do on it (no error, no change).
    migrator.run(&pool).await.unwrap();
    assert_eq!(bookkeeping(&pool).await, after);
    // Opened again, the store applies nothing twice.
    drop(store);
    let again = SqliteStore::open(&path).await.unwrap();
    assert_eq!(again.load_run(old).await.unwrap().run_id, old);
    assert_eq!(bookkeeping(&pool).await, after);
    pool.close().await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_the_store_created_is_one_sqlx_migrator_accepts() {
    let dir = tempdir("store-created");
    let path = dir.join("runs.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let run = store
        .create_run(NewRun::new(RunId::new(), "w", "h", serde_json::value::to_raw_value(&json!({})).unwrap()))
        .await;
    run.unwrap();
    let pool = sqlx_pool(&path).await;
    let all = migrations(&dir, MIGRATIONS.len());
    let migrator = sqlx::migrate::Migrator::new(all.as_path()).await.unwrap();
    let expected: Vec<_> =
        migrator.iter().map(|m| (m.version, m.description.to_string(), true, m.checksum.to_vec())).collect();
    assert_eq!(bookkeeping(&pool).await, expected);
    migrator.run(&pool).await.unwrap();
    assert_eq!(bookkeeping(&pool).await, expected);
    pool.close().await;
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_with_an_applied_migration_this_build_lacks_or_changed_is_refused() {
    let dir = tempdir("sqlx-mismatch");
    let path = dir.join("runs.db");
    drop(SqliteStore::open(&path).await.unwrap());
    let pool = sqlx_pool(&path).await;
    // A newer build's migration.
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (1000, 'future', TRUE, x'00', 0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let opened = SqliteStore::open(&path).await;
    assert!(matches!(opened, Err(StoreError::Backend(_))), "{opened:?}");
    // Migration 2 applied with other SQL.
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = 1000").execute(&pool).await.unwrap();
    sqlx::query("UPDATE _sqlx_migrations SET checksum = x'00' WHERE version = 2").execute(&pool).await.unwrap();
    let opened = SqliteStore::open(&path).await;
    assert!(matches!(opened, Err(StoreError::Backend(_))), "{opened:?}");
    pool.close().await;
    std::fs::remove_dir_all(dir).unwrap();
}

/// Schedules stored before migration 9 started a run at every due time, whatever
/// still ran: they keep doing so (`allow`), while a new one skips (its default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_stored_before_overlap_policies_keeps_allowing_overlap() {
    let dir = tempdir("overlap-migrated");
    let path = dir.join("runs.db");
    let pool = sqlx_pool(&path).await;
    let eight = migrations(&dir, 8);
    sqlx::migrate::Migrator::new(eight.as_path()).await.unwrap().run(&pool).await.unwrap();
    sqlx::query(
        "INSERT INTO schedules (id, workflow, input, recurrence, missed, grace_ms, paused, next_due, created_at, \
         updated_at) VALUES ('old', 'w', '{}', '{\"every\":{\"millis\":60000}}', 'skip', 60000, FALSE, 60000, 0, 0)",
    )
    .execute(&pool)
    .await
    .unwrap();

    let store = SqliteStore::open(&path).await.unwrap();
    let old = store.load_schedule("old").await.unwrap();
    assert_eq!((old.overlap, old.pending_due), (schedule::Overlap::Allow, None));
    let new = ScheduleRecord::new(
        "new".into(),
        "w".into(),
        serde_json::value::to_raw_value(&json!({})).unwrap(),
        schedule::Recurrence::Every { millis: 60_000 },
        schedule::Missed::Skip,
        60_000,
        false,
        Timestamp::from_millis(60_000),
        Timestamp::from_millis(0),
    );
    store.create_schedule(&new).await.unwrap();
    assert_eq!(store.load_schedule("new").await.unwrap().overlap, schedule::Overlap::Skip);
    pool.close().await;
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}
