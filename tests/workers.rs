//! Many worker processes, one store, and a worker killed with SIGKILL in the middle:
//! every run completes with exactly the documents of an uninterrupted run, and no
//! transition is committed twice.
//!
//! - PostgreSQL: 3 `examples/worker.rs` processes drive 300 agent runs; one is killed.
//! - SQLite: 1 worker drives 300 runs, is killed, and is started again.

use std::sync::Arc;
use std::time::Duration;

use loopstack::prelude::*;
use loopstack::{RunQuery, RunStatus, Store};
use loopstack_store::SqliteStore;

const RUNS: usize = 300;

mod common;
use common::worker::{QUESTION, WorkerProcess, agent};

/// A worker process whose scripted model takes `latency_ms` per turn.
fn spawn_worker(store_args: &[String], owner: &str, latency_ms: u64) -> WorkerProcess {
    let latency = latency_ms.to_string();
    let options = ["--owner", owner, "--lease-ms", "1000", "--concurrency", "8", "--model-latency-ms", &latency];
    common::worker::spawn_worker(store_args, &options)
}

/// The documents of one uninterrupted run, as (type, content) pairs.
async fn reference_documents() -> Vec<(String, String)> {
    let runtime = Runtime::new();
    let reply = agent().ask(&runtime, QUESTION).await.unwrap();
    let docs = runtime.store().documents(reply.run_id).await.unwrap();
    docs.iter().map(|d| (d.doc_type.to_string(), d.content.get().to_owned())).collect()
}

async fn count(store: &dyn Store, status: RunStatus) -> usize {
    let mut n = 0;
    let mut query = RunQuery::new().workflow("agent").status(status).limit(1000);
    loop {
        let page = store.list_runs(&query).await.unwrap();
        n += page.runs.len();
        match page.next {
            Some(next) => query = query.before(next),
            None => return n,
        }
    }
}

/// Polls until `done` holds; a guard against a hang, not a timed assertion.
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every run completed, with the reference documents, each version once, and the
/// four transitions of the loop, each once.
async fn check_runs(store: &dyn Store, ids: &[RunId]) -> usize {
    let reference = reference_documents().await;
    let mut taken_over = 0;
    for &id in ids {
        let record = store.load_run(id).await.unwrap();
        assert_eq!(record.status, RunStatus::Completed, "{record:?}");
        if record.epoch > 1 {
            taken_over += 1;
        }
        let steps: Vec<(u64, String)> =
            store.history(id).await.unwrap().into_iter().map(|s| (s.step, s.transition.into_owned())).collect();
        let names: Vec<&str> = steps.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(names, ["llm_turn", "run_tool_calls", "llm_turn", "respond"]);
        assert_eq!(steps.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [1, 2, 3, 4]);
        let docs = store.documents(id).await.unwrap();
        let docs: Vec<(String, String)> =
            docs.iter().map(|d| (d.doc_type.to_string(), d.content.get().to_owned())).collect();
        assert_eq!(docs, reference, "run {id} has the documents of an uninterrupted run");
        assert_eq!(store.document_versions(id).await.unwrap().len(), reference.len(), "nothing saved twice");
    }
    taken_over
}

async fn submit_all(store: Arc<dyn Store>) -> Vec<RunId> {
    let runtime = Runtime::with_shared_store(store);
    let agent = agent();
    let mut ids = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        ids.push(runtime.submit(&agent, QUESTION.into()).await.unwrap());
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_postgres_workers_finish_every_run_when_one_is_killed() {
    let (schema, store) = common::postgres::TestSchema::connect("workers").await;
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let ids = submit_all(shared.clone()).await;
    let args = schema.args();
    // Worker 0's model never answers in time: it holds the runs it claims (renewing
    // their leases) until it is killed, a third of the way in.
    let mut killed = spawn_worker(&args, "worker-0", 3_600_000);
    let workers: Vec<WorkerProcess> = (1..3).map(|i| spawn_worker(&args, &format!("worker-{i}"), 2)).collect();
    let held_by_0 = async || -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM runs WHERE status = 'running' AND lease_owner = 'worker-0'")
            .fetch_one(store.pool())
            .await
            .unwrap()
    };
    until("a third of the runs, and worker-0 holding some", async || {
        held_by_0().await > 0 && count(&*shared, RunStatus::Completed).await >= RUNS / 3
    })
    .await;
    killed.0.kill().unwrap(); // SIGKILL
    killed.0.wait().unwrap();
    let held = held_by_0().await;
    assert!(held > 0);

    until("every run to complete", async || count(&*shared, RunStatus::Completed).await == RUNS).await;
    drop(workers);
    let taken_over = check_runs(&*shared, &ids).await;
    assert!(taken_over as i64 >= held, "the {held} runs the killed worker held were taken over by the others");
    drop(store);
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_worker_killed_and_restarted_finishes_every_run() {
    let dir = std::env::temp_dir().join(format!("loopstack-workers-{}", RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("runs.db");
    let sqlite = SqliteStore::open(&path).await.unwrap();
    let store: Arc<dyn Store> = Arc::new(sqlite.clone());
    let ids = submit_all(store.clone()).await;
    let args = vec!["--sqlite".to_owned(), path.to_string_lossy().into_owned()];

    let mut first = spawn_worker(&args, "first", 2);
    until("a third of the runs and the worker holding one", async || {
        let held: i64 = sqlite
            .with_connection(|c| c.query_row("SELECT count(*) FROM runs WHERE status = 'running'", [], |r| r.get(0)))
            .await
            .unwrap()
            .unwrap();
        held > 0 && count(&*store, RunStatus::Completed).await >= RUNS / 3
    })
    .await;
    first.0.kill().unwrap(); // SIGKILL
    first.0.wait().unwrap();
    let held =
        store.list_runs(&RunQuery::new().workflow("agent").status(RunStatus::Running).limit(1000)).await.unwrap();
    let held: Vec<(RunId, u64)> = held.runs.iter().map(|r| (r.run_id, r.epoch)).collect();
    assert!(!held.is_empty(), "the worker died holding runs");

    let _second = spawn_worker(&args, "second", 2);
    until("every run to complete", async || count(&*store, RunStatus::Completed).await == RUNS).await;
    let taken_over = check_runs(&*store, &ids).await;
    // Each run the killed worker held was claimed again (a higher epoch) and finished.
    // (On a loaded machine a live worker may also re-claim a run of its own whose
    // lease ran out before it renewed it: that is a takeover too, so the count of
    // takeovers is at least, not exactly, the number held.)
    for (run_id, epoch) in &held {
        let record = store.load_run(*run_id).await.unwrap();
        assert!(record.epoch > *epoch, "run {run_id}, held at epoch {epoch}, was resumed: {record:?}");
    }
    assert!(taken_over >= held.len(), "{taken_over} takeovers for {} held runs", held.len());
    std::fs::remove_dir_all(&dir).unwrap();
}
