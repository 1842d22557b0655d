//! Leases: a drive renews its lease while a long transition runs, so no worker takes
//! the run over; once the driver is gone and its lease ran out, a worker does, and
//! the old driver could not write any more; a worker that shuts down gives its
//! leases back, so another takes its runs at once. Time is moved by hand (tokio's
//! paused clock for the renewal timer, the runtime's clock for lease times): nothing
//! sleeps.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use loopstack_core::*;
use serde_json::Value;
use tokio::sync::Notify;

const LEASE: Duration = Duration::from_secs(30);

/// `begin`, then `work`, which waits until released, then `finish`.
#[derive(Default)]
struct Slow {
    started: Notify,
    release: Notify,
    hold: AtomicBool,
}

static DEF: Definition = Definition::new(
    "slow",
    &[START, "busy", "done", END],
    &[
        TransitionDef::new("begin", &[START], "busy"),
        TransitionDef::new("work", &["busy"], "done"),
        TransitionDef::new("finish", &["done"], END),
    ],
);

impl Workflow for Slow {
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

/// The system clock plus an offset the test moves.
fn clock(ahead: &Arc<AtomicI64>) -> impl Fn() -> Timestamp + Send + Sync + 'static {
    let ahead = ahead.clone();
    move || Timestamp::from_millis(Timestamp::now().as_millis() + ahead.load(Ordering::SeqCst))
}

/// Yields until `done` holds; panics if it never does.
async fn until(mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..10_000 {
        if done().await {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the condition never held");
}

#[tokio::test(start_paused = true)]
async fn a_long_transition_renews_its_lease_and_no_worker_takes_the_run() {
    let ahead = Arc::new(AtomicI64::new(0));
    let store = MemoryStore::new();
    let rt = Runtime::with_store(store.clone()).lease(Some(LEASE)).clock(clock(&ahead));
    let wf = Arc::new(Slow { hold: true.into(), ..Slow::default() });
    let run_id = RunId::new();
    let drive = {
        let (rt, wf) = (rt.clone(), wf.clone());
        tokio::spawn(async move { rt.start(&*wf, ()).run_id(run_id).await })
    };
    wf.started.notified().await;
    let first = store.load_run(run_id).await.unwrap().lease_until.expect("a lease while driven");

    // 40 seconds pass, past the lease as first taken: the renewal timer (every 10 s)
    // fires and moves the lease on.
    ahead.store(40_000, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(40)).await;
    until(async || store.load_run(run_id).await.unwrap().lease_until.is_some_and(|l| l > first + LEASE)).await;
    let lease = Lease { owner: "other".into(), until: rt.now() + LEASE };
    let taken =
        store.claim_runnable(&[loopstack_core::WorkflowVersions::first("slow")], &lease, rt.now(), 10).await.unwrap();
    assert!(taken.is_empty(), "a live lease keeps workers off the run");

    wf.release.notify_one();
    let report = drive.await.unwrap().unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(store.load_run(run_id).await.unwrap().epoch, 1, "never taken over");
}

#[tokio::test(start_paused = true)]
async fn when_the_driver_is_gone_a_worker_takes_the_run_once_its_lease_ran_out() {
    let ahead = Arc::new(AtomicI64::new(0));
    let store = MemoryStore::new();
    let rt = Runtime::with_store(store.clone()).lease(Some(LEASE)).clock(clock(&ahead));
    let wf = Arc::new(Slow { hold: true.into(), ..Slow::default() });
    let run_id = RunId::new();
    let drive = {
        let (rt, wf) = (rt.clone(), wf.clone());
        tokio::spawn(async move { rt.start(&*wf, ()).run_id(run_id).await })
    };
    wf.started.notified().await;
    // The driver dies mid-transition (its task is gone, as with a killed process).
    drive.abort();
    assert!(drive.await.unwrap_err().is_cancelled());
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.step), (RunStatus::Running, "busy", 1));

    // The worker that takes the run over holds it in `work` too, so the run is still
    // running, under the newer epoch, when the old driver tries to write.
    let taker = Arc::new(Slow { hold: true.into(), ..Slow::default() });
    let worker = Worker::new(Runtime::with_store(store.clone()).lease(Some(LEASE)).clock(clock(&ahead)))
        .register_shared(taker.clone());
    assert_eq!(worker.run_once().await.unwrap(), 0, "the lease is still live");
    ahead.store(31_000, Ordering::SeqCst);
    let worker = Arc::new(worker);
    let taking = tokio::spawn({
        let worker = worker.clone();
        async move { worker.run_once().await }
    });
    taker.started.notified().await;
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.epoch), (RunStatus::Running, "busy", 2));

    // The old driver's epoch can no longer write: its commit is fenced, not merely
    // refused because the run has ended.
    let state = serde_json::value::to_raw_value(&Vec::<String>::new()).unwrap();
    let stale = Checkpoint::new(
        run_id,
        Fence { epoch: 1, step: 1 },
        StepRecord::new(2, "work", "busy", "done"),
        RunStatus::Running,
        state,
    );
    let err = store.commit(stale).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced { epoch: 1, current: 2, .. }), "{err:?}");

    taker.release.notify_one();
    assert_eq!(taking.await.unwrap().unwrap(), 1, "the lease ran out");
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.epoch), (RunStatus::Completed, 2));
    let steps: Vec<String> =
        store.history(run_id).await.unwrap().into_iter().map(|s| s.transition.into_owned()).collect();
    assert_eq!(steps, ["begin", "work", "finish"], "the interrupted transition ran again, once; the stale one never");
}

#[tokio::test]
async fn a_worker_fails_a_run_whose_place_its_build_no_longer_has() {
    let store = MemoryStore::new();
    let run_id = RunId::new();
    let state = serde_json::value::to_raw_value(&Vec::<String>::new()).unwrap();
    // A run an older build of `slow` queued at a place this build does not have.
    let run = store.create_run(NewRun::new(run_id, "slow", "0123456789abcdef", state.clone())).await.unwrap();
    let step = StepRecord::new(1, "gone", START, "nowhere");
    store.commit(Checkpoint::new(run_id, run.fence(), step, RunStatus::Running, state)).await.unwrap();
    store.set_status(run_id, Fence { epoch: 1, step: 1 }, RunStatus::Queued, None, None).await.unwrap();

    let worker = Worker::new(Runtime::with_store(store.clone())).register(Slow::default());
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Failed, "failed, not claimed again at every lease");
    let error = record.error.unwrap();
    assert!(error.contains("`nowhere`") && error.contains("0123456789abcdef") && error.contains(DEF.hash()), "{error}");
    assert_eq!(worker.run_once().await.unwrap(), 0);
}

/// Each step reads the run's lease as committed so far, then moves the runtime's
/// clock on by its number of seconds: `three` (3 s), `four` (4 s), `one` (1 s).
struct Ticking {
    ahead: Arc<AtomicI64>,
}

static TICKING: Definition = Definition::new(
    "ticking",
    &[START, "a", "b", END],
    &[
        TransitionDef::new("three", &[START], "a"),
        TransitionDef::new("four", &["a"], "b"),
        TransitionDef::new("one", &["b"], END),
    ],
);

impl Workflow for Ticking {
    /// The lease each step found, in milliseconds of the runtime's clock.
    type State = Vec<i64>;
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &TICKING
    }
    fn init(&self, (): ()) -> Vec<i64> {
        Vec::new()
    }
    fn guard(&self, _: usize, _: &Vec<i64>) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        t: usize,
        seen: &'a mut Vec<i64>,
        cx: &'a mut RunContext,
        _: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            let record = cx.runtime().store().load_run(cx.run_id()).await?;
            seen.push(record.lease_until.expect("a lease while driven").as_millis());
            let seconds = [3, 4, 1][t];
            self.ahead.fetch_add(seconds * 1000, Ordering::SeqCst);
            Ok(())
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_commit_renews_the_lease_once_a_sixth_of_it_has_passed() {
    let ahead = Arc::new(AtomicI64::new(0));
    let store = MemoryStore::new();
    // A fixed clock the steps move: the system clock would move between reads.
    let start = Timestamp::now().as_millis();
    let clock = {
        let ahead = ahead.clone();
        move || Timestamp::from_millis(start + ahead.load(Ordering::SeqCst))
    };
    let rt = Runtime::with_store(store.clone()).lease(Some(LEASE)).clock(clock);
    let report = rt.start(&Ticking { ahead: ahead.clone() }, ()).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    let lease = LEASE.as_millis() as i64;
    // Taken at 0 s, until 30 s. `three` commits at 3 s, with 27 s of the lease left:
    // kept. `four` commits at 7 s, 23 s left, less than five sixths: renewed to 37 s.
    // `one` commits at 8 s, 29 s left: kept.
    assert_eq!(report.state, [start + lease, start + lease, start + 7_000 + lease]);
    let last = store.load_run(report.run_id).await.unwrap();
    assert_eq!(last.lease_until.map(Timestamp::as_millis), Some(start + 7_000 + lease), "{last:?}");
}

// A worker that shuts down (SIGTERM in a deployment) loses nothing and holds
// nothing: the step in flight finishes and commits, no next step starts, and the
// run's lease is given back, so another worker continues it at once instead of
// after the lease. A step still running at the drain timeout is abandoned: it
// commits nothing, and runs again under the worker that takes the run over.

/// A run of `slow` submitted to a new memory store, and a worker `a` driving it with
/// `drain` as its drain timeout, `work` in flight.
async fn worker_in_a_step(
    drain: Duration,
) -> (Arc<dyn Store>, Arc<Slow>, RunId, CancellationToken, tokio::task::JoinHandle<Result<(), StoreError>>) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let job = Arc::new(Slow { hold: AtomicBool::new(true), ..Slow::default() });
    let runtime = Runtime::with_shared_store(store.clone()).owner("a");
    let run_id = runtime.submit(&*job, ()).await.unwrap();
    let shutdown = CancellationToken::new();
    let worker = Worker::new(runtime).register_shared(job.clone()).drain_timeout(drain);
    let running = tokio::spawn(worker.run(shutdown.clone()));
    job.started.notified().await;
    (store, job, run_id, shutdown, running)
}

/// The transitions the run committed, in order.
async fn committed(store: &Arc<dyn Store>, run_id: RunId) -> Vec<String> {
    store.history(run_id).await.unwrap().into_iter().map(|s| s.transition.into_owned()).collect()
}

/// Another worker takes the run: at once, since its lease was given back (the
/// lease `a` took has most of its 30 s left), and drives it to its end.
async fn another_worker_finishes(store: &Arc<dyn Store>, job: &Arc<Slow>, run_id: RunId) {
    let b = Runtime::with_shared_store(store.clone()).owner("b");
    let driven = Worker::new(b).register_shared(job.clone()).run_once().await.unwrap();
    assert_eq!(driven, 1, "the released run is claimed at once");
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    assert_eq!(record.epoch, 2, "taken over once");
    let state: Vec<String> = serde_json::from_str(record.state.get()).unwrap();
    assert_eq!(state, ["begin", "work", "finish"], "each transition ran into the state once");
    assert_eq!(committed(store, run_id).await, ["begin", "work", "finish"], "each committed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_shuts_down_finishes_the_step_in_flight_and_gives_its_run_back() {
    let (store, job, run_id, shutdown, running) = worker_in_a_step(Duration::from_secs(3600)).await;
    shutdown.cancel();
    job.release.notify_one();
    running.await.unwrap().unwrap();

    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.step, record.place.as_ref()), (RunStatus::Running, 2, "done"));
    assert_eq!(committed(&store, run_id).await, ["begin", "work"], "`work` committed, `finish` never started");
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
    assert_eq!(committed(&store, run_id).await, ["begin"], "the abandoned step committed nothing");
    assert!(record.lease_until.is_some_and(|until| until <= Timestamp::now()), "the lease is given back: {record:?}");
    another_worker_finishes(&store, &job, run_id).await;
}
