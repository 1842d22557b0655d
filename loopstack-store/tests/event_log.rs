//! The SQL stores' event log (migration 3): appends keep their order and ids rise
//! across writers, reads filter by run and page by id, retention prunes by count
//! and age without ever handing out an id twice, listener rows expire, a follower
//! that fell behind reads everything from the log, and on PostgreSQL a second
//! connection pool (another process, as far as the database knows) is woken by the
//! notification, with no fallback poll to hide a lost one. On a SQLite file and on PostgreSQL (a schema per test).

use std::sync::Arc;
use std::time::Duration;

use loopstack_core::store::EventRetention;
use loopstack_core::{EventKind, RunEvent, RunId, Runtime, Store, Timestamp};
use loopstack_store::{PostgresStore, SqliteStore};

/// Generous: these wait for conditions, never for time.
const DEADLINE: Duration = Duration::from_secs(60);

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

async fn postgres(name: &str) -> (PostgresStore, String, String) {
    let (url, schema) = pg_schema(name);
    let store = PostgresStore::connect_schema(&url, &schema).await.unwrap_or_else(|e| {
        panic!("PostgreSQL at {url} is needed for this test (`.ci/run` starts it; set LOOPSTACK_DATABASE_URL): {e}")
    });
    (store, url, schema)
}

/// A test's schema, dropped with everything in it.
async fn drop_schema(url: &str, schema: &str) {
    PostgresStore::drop_schema(url, schema).await.unwrap();
}

fn delta(run: RunId, text: &str) -> Arc<RunEvent> {
    Arc::new(RunEvent::new(run, "wf", Timestamp::now(), EventKind::TextDelta { text: text.into() }))
}

fn texts(events: &[loopstack_core::store::LoggedEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match &e.event.kind {
            EventKind::TextDelta { text } => text.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

/// The log's contract, on any store that keeps one.
async fn log_contract(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    assert!(a.has_event_log());
    assert_eq!(a.last_event_id().await.unwrap(), 0);
    let (r1, r2) = (RunId::new(), RunId::new());
    // Two writers (two pools on one database), interleaved batches.
    a.append_events("a", &[delta(r1, "a1"), delta(r2, "a2"), delta(r1, "a3")]).await.unwrap();
    b.append_events("b", &[delta(r1, "b1")]).await.unwrap();
    a.append_events("a", &[delta(r1, "a4")]).await.unwrap();
    let all = b.read_events(0, None, 100).await.unwrap();
    assert_eq!(texts(&all), ["a1", "a2", "a3", "b1", "a4"]);
    assert!(all.windows(2).all(|w| w[0].id < w[1].id), "ids rise in append order");
    assert_eq!(all[3].origin, "b");
    assert_eq!(all[0].event.run_id, r1);
    assert_eq!(a.last_event_id().await.unwrap(), all[4].id);
    // By run, and a page at a time after a cursor.
    assert_eq!(texts(&a.read_events(0, Some(r1), 100).await.unwrap()), ["a1", "a3", "b1", "a4"]);
    assert_eq!(texts(&a.read_events(all[1].id, Some(r1), 2).await.unwrap()), ["a3", "b1"]);
    assert!(a.read_events(all[4].id, None, 100).await.unwrap().is_empty());

    // Retention by count keeps the newest; by age drops the old; ids go on rising.
    let pruned = a.prune_events(Timestamp::now(), &EventRetention { max_age: DEADLINE, max_events: 2 }).await.unwrap();
    assert_eq!(pruned, 3);
    assert_eq!(texts(&a.read_events(0, None, 100).await.unwrap()), ["b1", "a4"]);
    let later = Timestamp::now() + Duration::from_secs(7200);
    let pruned = a.prune_events(later, &EventRetention::default()).await.unwrap();
    assert_eq!(pruned, 2);
    assert!(a.read_events(0, None, 100).await.unwrap().is_empty());
    a.append_events("a", &[delta(r1, "after")]).await.unwrap();
    let after = a.read_events(0, None, 100).await.unwrap();
    assert!(after[0].id > all[4].id, "an id is never handed out twice");

    // Listeners: a row counts until it expires or is removed.
    let now = Timestamp::now();
    assert!(!a.has_event_listeners(now).await.unwrap());
    b.listen_events("follower", now + Duration::from_secs(10)).await.unwrap();
    assert!(a.has_event_listeners(now).await.unwrap());
    assert!(!a.has_event_listeners(now + Duration::from_secs(11)).await.unwrap(), "expired");
    b.unlisten_events("follower").await.unwrap();
    assert!(!a.has_event_listeners(now).await.unwrap());
}

/// A follower of the log that starts far behind (5,000 events, more than a
/// subscriber's channel holds) reads every one, in order, none twice.
async fn a_late_follower_reads_everything(store: Arc<dyn Store>) {
    let run = RunId::new();
    let start = store.last_event_id().await.unwrap();
    for chunk in 0..10 {
        let batch: Vec<_> = (0..500).map(|i| delta(run, &(chunk * 500 + i).to_string())).collect();
        store.append_events("w", &batch).await.unwrap();
    }
    let runtime = Runtime::with_shared_store(store);
    let mut log = runtime.follow_log(Some(run), Some(start)).await.unwrap().expect("the store keeps a log");
    for i in 0..5000 {
        let event = tokio::time::timeout(DEADLINE, log.recv()).await.unwrap().unwrap();
        assert!(matches!(&event.event.kind, EventKind::TextDelta { text } if *text == i.to_string()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keeps_an_event_log() {
    let dir = tempdir("event-log");
    let a = SqliteStore::open(dir.join("runs.db")).await.unwrap();
    let b = SqliteStore::open(dir.join("runs.db")).await.unwrap();
    log_contract(Arc::new(a.clone()), Arc::new(b)).await;
    a_late_follower_reads_everything(Arc::new(a)).await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keeps_an_event_log_and_notifies_other_connections() {
    let (a, url, schema) = postgres("event_log").await;
    let b = PostgresStore::connect_schema(&url, &schema).await.unwrap();
    log_contract(Arc::new(a.clone()), Arc::new(b.clone())).await;
    a_late_follower_reads_everything(Arc::new(a.clone())).await;

    // A follower on another pool is woken by the append's notification, and by
    // nothing else: its fallback poll never comes, so if NOTIFY did not reach it the
    // wait would never return and the deadline would fail the test. Its first wait
    // starts its LISTEN connection, which an append made before it is up does not
    // reach, so appends go on (paced, not timed) until one wakes the follower.
    let follower = b.with_fallback_poll(Duration::MAX);
    let newest = follower.last_event_id().await.unwrap();
    let run = RunId::new();
    let appends = tokio::spawn({
        let a = a.clone();
        async move {
            let mut pace = tokio::time::interval(Duration::from_millis(50));
            loop {
                pace.tick().await;
                a.append_events("a", &[delta(run, "ping")]).await.unwrap();
            }
        }
    });
    let woke = tokio::time::timeout(DEADLINE, follower.wait_events(newest, Duration::MAX)).await;
    appends.abort();
    assert!(woke.is_ok(), "no notification woke the follower");
    assert!(!follower.read_events(newest, Some(run), 10).await.unwrap().is_empty(), "woken for the append");
    drop_schema(&url, &schema).await;
}
