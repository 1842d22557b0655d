//! A worker process stopped with SIGTERM (what Kubernetes and systemd send) exits 0
//! and loses nothing: the steps in flight finish (or, past the drain timeout, are
//! abandoned), the runs' leases are given back, and another worker takes the runs
//! at once: their leases are ten minutes long here, so a worker that had to wait
//! them out would never finish within the test's guard. Every run completes with
//! each of its steps committed once. On PostgreSQL (two workers) and on a SQLite
//! file (the second worker starts when the first has gone).

use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use loopstack::prelude::*;
use loopstack::{RunQuery, RunStatus, Store, Timestamp};
use loopstack_store::SqliteStore;

mod common;
use common::worker::{QUESTION, WorkerProcess, agent, spawn_worker};

const RUNS: usize = 6;
/// Longer than any test may take: only a lease given back lets another worker in.
const LEASE_MS: &str = "600000";
/// A guard against a hang, never a timed assertion.
const GUARD: Duration = Duration::from_secs(240);

/// A worker process named `owner`, whose model takes `latency_ms` per turn and
/// whose steps in flight may take `drain_ms` to finish after SIGTERM.
fn worker(store_args: &[String], owner: &str, latency_ms: u64, drain_ms: u64) -> WorkerProcess {
    let (latency, drain) = (latency_ms.to_string(), drain_ms.to_string());
    let options = ["--owner", owner, "--lease-ms", LEASE_MS, "--model-latency-ms", &latency, "--drain-ms", &drain];
    spawn_worker(store_args, &options)
}

/// Sends SIGTERM and waits for the process to exit.
async fn terminate(process: &mut WorkerProcess) -> ExitStatus {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(process.0.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        if let Some(status) = process.0.try_wait().unwrap() {
            return status;
        }
        assert!(tokio::time::Instant::now() < deadline, "the worker did not exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls until `done` holds; a guard against a hang, not a timed assertion.
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + GUARD;
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn agent_runs(store: &dyn Store, status: Option<RunStatus>) -> Vec<loopstack::store::RunSummary> {
    let mut query = RunQuery::new().workflow("agent").limit(1000);
    if let Some(status) = status {
        query = query.status(status);
    }
    store.list_runs(&query).await.unwrap().runs
}

/// Submits the runs, lets worker `a` take them, stops it with SIGTERM, and has
/// `second` (a worker process, started once `a` has gone) finish them.
async fn stop_one_worker_and_finish_with_another(
    store: Arc<dyn Store>,
    args: &[String],
    first_latency_ms: u64,
    drain_ms: u64,
) {
    let runtime = Runtime::with_shared_store(store.clone());
    let mut ids = Vec::new();
    for _ in 0..RUNS {
        ids.push(runtime.submit(&agent(), QUESTION.into()).await.unwrap());
    }
    let mut a = worker(args, "a", first_latency_ms, drain_ms);
    until("worker a to hold every run", async || {
        let running = agent_runs(&*store, Some(RunStatus::Running)).await;
        running.len() == RUNS && running.iter().all(|r| r.lease_owner.as_deref() == Some("a"))
    })
    .await;

    let status = terminate(&mut a).await;
    assert_eq!(status.code(), Some(0), "a worker stopped with SIGTERM exits 0: {status:?}");
    // Nothing a stopped worker held is left leased to it.
    let now = Timestamp::now();
    for run in agent_runs(&*store, None).await {
        let record = store.load_run(run.run_id).await.unwrap();
        if record.status == RunStatus::Running {
            assert!(record.lease_until.is_some_and(|until| until <= now), "the lease is given back: {record:?}");
        }
    }

    let _b = worker(args, "b", 2, 25_000);
    until("worker b to finish every run", async || agent_runs(&*store, Some(RunStatus::Completed)).await.len() == RUNS)
        .await;
    for id in ids {
        let steps: Vec<(u64, String)> =
            store.history(id).await.unwrap().into_iter().map(|s| (s.step, s.transition.into_owned())).collect();
        let expected = [(1, "llm_turn"), (2, "run_tool_calls"), (3, "llm_turn"), (4, "respond")];
        assert_eq!(steps, expected.map(|(s, t)| (s, t.to_owned())), "run {id}: each step committed once");
    }
}

/// Worker `a`'s model answers in a second: SIGTERM comes while its turns are in
/// flight, and they finish and commit before it exits.
const IN_FLIGHT_MS: u64 = 1_000;
/// Worker `a`'s model never answers in the test: past a drain timeout of zero, its
/// turns are abandoned.
const NEVER_MS: u64 = 3_600_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_worker_stopped_with_sigterm_finishes_its_steps_and_hands_its_runs_over() {
    let (schema, store) = common::postgres::TestSchema::connect("sigterm_drain").await;
    stop_one_worker_and_finish_with_another(Arc::new(store), &schema.args(), IN_FLIGHT_MS, 25_000).await;
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_step_still_running_at_the_drain_timeout_is_abandoned_and_runs_elsewhere() {
    let (schema, store) = common::postgres::TestSchema::connect("sigterm_abandon").await;
    stop_one_worker_and_finish_with_another(Arc::new(store), &schema.args(), NEVER_MS, 0).await;
    schema.drop().await;
}

async fn sqlite(name: &str) -> (std::path::PathBuf, Arc<dyn Store>, Vec<String>) {
    let dir = std::env::temp_dir().join(format!("loopstack-{name}-{}", RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("runs.db");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let args = vec!["--sqlite".to_owned(), path.to_string_lossy().into_owned()];
    (dir, store, args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_worker_stopped_with_sigterm_finishes_its_steps_and_hands_its_runs_over() {
    let (dir, store, args) = sqlite("sigterm-drain").await;
    stop_one_worker_and_finish_with_another(store, &args, IN_FLIGHT_MS, 25_000).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_step_still_running_at_the_drain_timeout_is_abandoned_and_runs_elsewhere() {
    let (dir, store, args) = sqlite("sigterm-abandon").await;
    stop_one_worker_and_finish_with_another(store, &args, NEVER_MS, 0).await;
    std::fs::remove_dir_all(&dir).unwrap();
}
