//! Schedules over the durable stores, two workers to a store (each with its own
//! connection pool, as two processes would have): every due time starts exactly
//! one run, whichever worker gets there first, and a schedule outlives the process
//! that stored it. SQLite (one file opened twice) and PostgreSQL (one schema, two
//! pools; `LOOPSTACK_DATABASE_URL`, by default the local server `.ci/run` starts:
//! the test fails, never skips, without it). Nothing sleeps: time moves by the
//! runtimes' clock.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use loopstack::prelude::*;
use loopstack::schedule::{Schedule, scheduled_run_id};
use loopstack::{RunQuery, RunStatus, Store, Timestamp, Worker};
use loopstack_store::SqliteStore;
use serde::{Deserialize, Serialize};

mod common;

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
struct Tick {
    team: String,
    done: bool,
}

struct Ticking;

#[workflow(name = "tick", input = Tick)]
impl Ticking {
    #[transition(to = End)]
    async fn run(&self, tick: &mut Tick, _cx: &mut RunContext) -> Result<()> {
        tick.done = true;
        Ok(())
    }
}

const MINUTE: i64 = 60_000;

/// A clock `ahead` milliseconds past the system's.
fn clock(ahead: &Arc<AtomicI64>) -> impl Fn() -> Timestamp + Send + Sync + 'static {
    let ahead = ahead.clone();
    move || Timestamp::from_millis(Timestamp::now().as_millis() + ahead.load(Ordering::SeqCst))
}

/// Two workers, each over its own opening of one store, racing on 20 due times of
/// a schedule; then the store opened again (a restart) still has it, and starts
/// its next due time once.
async fn two_workers_start_one_run_per_due_time(open: impl AsyncFn() -> Arc<dyn Store>) {
    let ahead = Arc::new(AtomicI64::new(0));
    let (first, second) = (open().await, open().await);
    let a = Runtime::with_shared_store(first.clone()).clock(clock(&ahead)).owner("a").register(Ticking);
    let b = Runtime::with_shared_store(second.clone()).clock(clock(&ahead)).owner("b").register(Ticking);
    let input = serde_json::json!({ "team": "ops", "done": false });
    let stored =
        a.schedule("every-minute", "tick", input, Schedule::every(Duration::from_secs(60)).unwrap()).await.unwrap();

    let (worker_a, worker_b) = (Worker::new(a.clone()), Worker::new(b.clone()));
    for minute in 1..=20 {
        ahead.store(minute * MINUTE, Ordering::SeqCst);
        let (x, y) = tokio::join!(worker_a.run_once(), worker_b.run_once());
        x.unwrap();
        y.unwrap();
    }
    let dues: Vec<Timestamp> =
        (1..=20).map(|m| stored.created_at + Duration::from_millis((m * MINUTE) as u64)).collect();
    let recorded = first.scheduled_runs("every-minute", 100).await.unwrap();
    let recorded_dues: BTreeSet<Timestamp> = recorded.iter().map(|r| r.due).collect();
    assert_eq!(recorded.len(), 20, "one run per due time");
    assert_eq!(recorded_dues, dues.iter().copied().collect::<BTreeSet<_>>());
    let runs = first.list_runs(&RunQuery::new().workflow("tick").limit(100)).await.unwrap().runs;
    assert_eq!(runs.len(), 20, "no due time started two runs");
    for due in &dues {
        let id = scheduled_run_id("every-minute", stored.created_at, *due);
        let run = first.load_run(id).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "a worker drove the run of {due}");
        assert!(run.state.get().contains(r#""team":"ops""#), "the schedule's input: {}", run.state.get());
    }

    // A restart: the runtimes and store openings are gone; a new one finds the schedule.
    drop((worker_a, worker_b, a, b, first, second));
    let store = open().await;
    let again = store.load_schedule("every-minute").await.unwrap();
    assert_eq!(again.next_due, stored.created_at + Duration::from_millis((21 * MINUTE) as u64));
    assert_eq!(again.last_due, dues.last().copied());
    let restarted = Runtime::with_shared_store(store.clone()).clock(clock(&ahead)).register(Ticking);
    ahead.store(21 * MINUTE, Ordering::SeqCst);
    let worker = Worker::new(restarted);
    worker.run_once().await.unwrap();
    worker.run_once().await.unwrap();
    assert_eq!(store.scheduled_runs("every-minute", 100).await.unwrap().len(), 21);
    assert_eq!(store.list_runs(&RunQuery::new().workflow("tick").limit(100)).await.unwrap().runs.len(), 21);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_two_workers_start_one_run_per_due_time() {
    let path = std::env::temp_dir().join(format!("loopstack-schedules-{}.db", loopstack::RunId::new()));
    let open = async || -> Arc<dyn Store> {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).await.unwrap());
        store
    };
    two_workers_start_one_run_per_due_time(open).await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_two_workers_start_one_run_per_due_time() {
    let schema = common::postgres::TestSchema::new("schedules");
    let open = async || -> Arc<dyn Store> {
        let store: Arc<dyn Store> = Arc::new(schema.store().await);
        store
    };
    two_workers_start_one_run_per_due_time(open).await;
    schema.drop().await;
}
