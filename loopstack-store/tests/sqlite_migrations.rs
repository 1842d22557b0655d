//! The SQLite store on files the previous implementation (sqlx 0.8's migrator) wrote:
//! its bookkeeping (`_sqlx_migrations`, one row per migration with the SHA-384 of
//! its SQL) is read and kept, so the store applies only what is missing, and a file
//! the store created stays one sqlx's migrator accepts. That migrator is `sqlx08`,
//! which does on rusqlite what sqlx 0.8's did.

mod sqlx08;

use loopstack_core::serde_json::json;
use loopstack_core::*;
use loopstack_store::SqliteStore;

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
    ("0013_labels.sql", include_str!("../migrations/sqlite/0013_labels.sql")),
];

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("loopstack-{name}-{}-{}", std::process::id(), RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_sqlx_migrated_to_6_gets_only_the_migrations_after_6() {
    let dir = tempdir("sqlx-migrated");
    let path = dir.join("runs.db");
    let mut conn = sqlx08::open(&path);
    sqlx08::run(&mut conn, &sqlx08::migrations(&MIGRATIONS[..6])).unwrap();
    let before = sqlx08::bookkeeping(&conn);
    assert_eq!(before.len(), 6);
    // A run that store wrote, with its row and first checkpoint.
    let old = RunId::new();
    conn.execute(
        "INSERT INTO runs (run_id, workflow, status, place, step, definition_hash, epoch, place_since, created_at, \
         updated_at) VALUES ($1, 'old', 'waiting', 'start', 0, 'h', 1, 0, 0, 0)",
        [old.0],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO checkpoints (run, step, transition, to_place, state, at) \
         VALUES ((SELECT id FROM runs WHERE run_id = $1), 0, '', 'start', '{\"old\":true}', 0)",
        [old.0],
    )
    .unwrap();

    let store = SqliteStore::open(&path).await.unwrap();
    let run = store.load_run(old).await.unwrap();
    assert_eq!((run.workflow.as_ref(), run.status, run.version), ("old", RunStatus::Waiting, 1));
    assert_eq!(run.state.get(), r#"{"old":true}"#);
    // The run moves on in the new store.
    store.send_signal(old, "go", serde_json::value::to_raw_value(&json!(1)).unwrap()).await.unwrap();
    assert_eq!(store.inbox(old).await.unwrap().pending.len(), 1);

    // Migrations 1-6 kept as sqlx wrote them; the rest added as sqlx would have.
    let after = sqlx08::bookkeeping(&conn);
    assert_eq!(after.len(), MIGRATIONS.len());
    assert_eq!(after[..6], before[..]);
    let all = sqlx08::migrations(MIGRATIONS);
    assert_eq!(after[6..], sqlx08::expected(&all)[6..]);
    // sqlx's migrator finds nothing to do on it (no error, no change).
    sqlx08::run(&mut conn, &all).unwrap();
    assert_eq!(sqlx08::bookkeeping(&conn), after);
    // Opened again, the store applies nothing twice.
    drop(store);
    let again = SqliteStore::open(&path).await.unwrap();
    assert_eq!(again.load_run(old).await.unwrap().run_id, old);
    assert_eq!(sqlx08::bookkeeping(&conn), after);
    drop(conn);
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
    let mut conn = sqlx08::open(&path);
    let all = sqlx08::migrations(MIGRATIONS);
    assert_eq!(sqlx08::bookkeeping(&conn), sqlx08::expected(&all));
    sqlx08::run(&mut conn, &all).unwrap();
    assert_eq!(sqlx08::bookkeeping(&conn), sqlx08::expected(&all));
    drop(conn);
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_with_an_applied_migration_this_build_lacks_or_changed_is_refused() {
    let dir = tempdir("sqlx-mismatch");
    let path = dir.join("runs.db");
    drop(SqliteStore::open(&path).await.unwrap());
    let mut conn = sqlx08::open(&path);
    let all = sqlx08::migrations(MIGRATIONS);
    // A newer build's migration.
    conn.execute(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (1000, 'future', TRUE, x'00', 0)",
        [],
    )
    .unwrap();
    let opened = SqliteStore::open(&path).await;
    assert!(matches!(opened, Err(StoreError::Backend(_))), "{opened:?}");
    assert_eq!(sqlx08::run(&mut conn, &all), Err(sqlx08::Refused::VersionMissing(1000)));
    // Migration 2 applied with other SQL.
    conn.execute("DELETE FROM _sqlx_migrations WHERE version = 1000", []).unwrap();
    conn.execute("UPDATE _sqlx_migrations SET checksum = x'00' WHERE version = 2", []).unwrap();
    let opened = SqliteStore::open(&path).await;
    assert!(matches!(opened, Err(StoreError::Backend(_))), "{opened:?}");
    assert_eq!(sqlx08::run(&mut conn, &all), Err(sqlx08::Refused::VersionMismatch(2)));
    // A migration that failed half-way.
    conn.execute("UPDATE _sqlx_migrations SET checksum = ?1, success = FALSE WHERE version = 2", [&all[1].checksum])
        .unwrap();
    let opened = SqliteStore::open(&path).await;
    assert!(matches!(opened, Err(StoreError::Backend(_))), "{opened:?}");
    assert_eq!(sqlx08::run(&mut conn, &all), Err(sqlx08::Refused::Dirty(2)));
    drop(conn);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Schedules stored before migration 9 started a run at every due time, whatever
/// still ran: they keep doing so (`allow`), while a new one skips (its default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_stored_before_overlap_policies_keeps_allowing_overlap() {
    let dir = tempdir("overlap-migrated");
    let path = dir.join("runs.db");
    let mut conn = sqlx08::open(&path);
    sqlx08::run(&mut conn, &sqlx08::migrations(&MIGRATIONS[..8])).unwrap();
    conn.execute(
        "INSERT INTO schedules (id, workflow, input, recurrence, missed, grace_ms, paused, next_due, created_at, \
         updated_at) VALUES ('old', 'w', '{}', '{\"every\":{\"millis\":60000}}', 'skip', 60000, FALSE, 60000, 0, 0)",
        [],
    )
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
    drop(conn);
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}
