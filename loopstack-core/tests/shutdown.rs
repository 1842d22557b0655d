//! A worker that shuts down (SIGTERM in a deployment) loses nothing and holds
//! nothing: the step in flight finishes and commits, no next step starts, and the
//! run's lease is given back, so another worker continues it at once instead of
//! after the lease. A step still running at the drain timeout is abandoned: it
//! commits nothing, and runs again under the worker that takes the run over.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use loopstack_core::*;
use serde_json::Value;
use tokio::sync::Notify;

/// `begin`, then `work`, which waits until released while `hold` is set, then `finish`.
#[derive(Default)]
struct Job {
    started: Notify,
    release: Notify,
    hold: AtomicBool,
}

static DEF: Definition = Definition::new(
    "job",
    &[START, "busy", "done", END],
    &[
        TransitionDef::new("begin", &[START], "busy"),
        TransitionDef::new("work", &["busy"], "done"),
        TransitionDef::new("finish", &["done"], END),
    ],
);

impl Workflow for Job {
    type State = Vec<String>;
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &DEF
    }
    fn init(&self, (): ()) -> Vec<String> {
        Vec::new()
    }
    fn guard(&self, _: usize, _: &Vec<String>) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        t: usize,
        log: &'a mut Vec<String>,
        _: &'a mut RunContext,
        _: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            if t == 1 && self.hold.swap(false, Ordering::SeqCst) {
                self.started.notify_one();
                self.release.notified().await;
            }
            log.push(DEF.transitions()[t].name.to_owned());
            Ok(())
        })
    }
}

/// A run of `job` submitted to a new memory store, and a worker `a` driving it with
/// `drain` as its drain timeout, `work` in flight.
async fn worker_in_a_step(
    drain: Duration,
) -> (Arc<dyn Store>, Arc<Job>, RunId, CancellationToken, tokio::task::JoinHandle<Result<(), StoreError>>) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let job = Arc::new(Job { hold: AtomicBool::new(true), ..Job::default() });
    let runtime = Runtime::with_shared_store(store.clone()).owner("a");
    let run_id = runtime.submit(&*job, ()).await.unwrap();
    let shutdown = CancellationToken::new();
    let worker = Worker::new(runtime).register_shared(job.clone()).drain_timeout(drain);
    let running = tokio::spawn(worker.run(shutdown.clone()));
    job.started.notified().await;
    (store, job, run_id, shutdown, running)
}

/// The transitions the run committed, in order.
async fn history(store: &Arc<dyn Store>, run_id: RunId) -> Vec<String> {
    store.history(run_id).await.unwrap().into_iter().map(|s| s.transition.into_owned()).collect()
}

/// Another worker takes the run: at once, since its lease was given back (the
/// lease `a` took has most of its 30 s left), and drives it to its end.
async fn another_worker_finishes(store: &Arc<dyn Store>, job: &Arc<Job>, run_id: RunId) {
    let b = Runtime::with_shared_store(store.clone()).owner("b");
    let driven = Worker::new(b).register_shared(job.clone()).run_once().await.unwrap();
    assert_eq!(driven, 1, "the released run is claimed at once");
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    assert_eq!(record.epoch, 2, "taken over once");
    let state: Vec<String> = serde_json::from_str(record.state.get()).unwrap();
    assert_eq!(state, ["begin", "work", "finish"], "each transition ran into the state once");
    assert_eq!(history(store, run_id).await, ["begin", "work", "finish"], "each committed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_shuts_down_finishes_the_step_in_flight_and_gives_its_run_back() {
    let (store, job, run_id, shutdown, running) = worker_in_a_step(Duration::from_secs(3600)).await;
    shutdown.cancel();
    job.release.notify_one();
    running.await.unwrap().unwrap();

    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.step, record.place.as_ref()), (RunStatus::Running, 2, "done"));
    assert_eq!(history(&store, run_id).await, ["begin", "work"], "`work` committed, `finish` never started");
    assert!(record.lease_until.is_some_and(|until| until <= Timestamp::now()), "the lease is given back: {record:?}");
    another_worker_finishes(&store, &job, run_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_still_running_at_the_drain_timeout_is_abandoned_and_runs_again_elsewhere() {
    let (store, job, run_id, shutdown, running) = worker_in_a_step(Duration::ZERO).await;
    shutdown.cancel();
    // `work` never finishes in this worker: the timeout abandons it.
    running.await.unwrap().unwrap();

    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.step, record.place.as_ref()), (RunStatus::Running, 1, "busy"));
    assert_eq!(history(&store, run_id).await, ["begin"], "the abandoned step committed nothing");
    assert!(record.lease_until.is_some_and(|until| until <= Timestamp::now()), "the lease is given back: {record:?}");
    another_worker_finishes(&store, &job, run_id).await;
}
