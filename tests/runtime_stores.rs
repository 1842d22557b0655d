//! Runtime behaviour that depends on the store, on each store: in memory, SQLite (a
//! file) and PostgreSQL (its own schema per test; `LOOPSTACK_DATABASE_URL`, by
//! default the local server `.ci/run` starts). Nothing sleeps: drives meet at
//! `Notify`s, and time moves by the runtimes' clocks.
//!
//! - A drive that lost its run to another leaves the run and its new driver's
//!   children alone.
//! - Steps are timestamped by the runtime's clock, which its timers read.
//! - Resuming a parent after a crash drives the children its dead drive started.
//! - A child that hangs is cancelled at its timeout, and its parent goes on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use loopstack::{
    ChildEnded, ChildOptions, Definition, END, EventKind, RunContext, RunError, RunId, RunOutcome, RunQuery, RunStatus,
    Runtime, START, Store, Timestamp, TransitionDef, TransitionError, Workflow,
};
use serde_json::{Value, json};
use tokio::sync::Notify;

// ------------------------------------------------------------------ the stores

mod common;
use common::stores::on_every_store;

// ------------------------------------------------------------------ workflows

/// start --ask--> asked ; asked --answer (wait)--> end: a child that waits.
struct Asker;

static ASKER: Definition = Definition::new(
    "asker",
    &[START, "asked", END],
    &[TransitionDef::new("ask", &[START], "asked"), TransitionDef::new("answer", &["asked"], END).wait(|| json!({}))],
);

impl Workflow for Asker {
    type State = ();
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &ASKER
    }
    fn init(&self, (): ()) {}
    fn guard(&self, _: usize, (): &()) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        _: usize,
        (): &'a mut (),
        _: &'a mut RunContext,
        _: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async { Ok(()) })
    }
}

/// Where a transition stops until the test lets it go on.
#[derive(Default)]
struct Gate {
    /// Whether the next pass stops here (once).
    armed: AtomicBool,
    reached: Notify,
    release: Notify,
}

impl Gate {
    fn armed() -> Arc<Self> {
        Arc::new(Self { armed: true.into(), ..Self::default() })
    }

    /// Stops here if armed: tells the test, then waits to be released. Whether it stopped.
    async fn pass(&self) -> bool {
        if !self.armed.swap(false, Ordering::SeqCst) {
            return false;
        }
        self.reached.notify_one();
        self.release.notified().await;
        true
    }
}

/// start --spawn--> waiting ; waiting --answered (wait)--> end. `spawn` starts an
/// `asker` child; when its gate stops it, it fails once released instead.
struct Spawner {
    gate: Arc<Gate>,
}

static SPAWNER: Definition = Definition::new(
    "spawner",
    &[START, "waiting", END],
    &[
        TransitionDef::new("spawn", &[START], "waiting"),
        TransitionDef::new("answered", &["waiting"], END).wait(|| json!({"type": "object"})),
    ],
);

impl Workflow for Spawner {
    type State = Vec<ChildEnded>;
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &SPAWNER
    }
    fn init(&self, (): ()) -> Vec<ChildEnded> {
        Vec::new()
    }
    fn guard(&self, _: usize, _: &Vec<ChildEnded>) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        t: usize,
        ended: &'a mut Vec<ChildEnded>,
        cx: &'a mut RunContext,
        payload: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            match t {
                0 if self.gate.pass().await => return Err(TransitionError::failed("the old drive's step fails")),
                0 => {
                    cx.start_child(&Asker, (), "answered").await?;
                }
                _ => ended.push(serde_json::from_value(payload.unwrap_or_default()).map_err(TransitionError::failed)?),
            }
            Ok(())
        })
    }
}

// ------------------------------------------------------------------ a lost run

/// Drive A runs `spawn` and stops; drive B (another runtime) resumes the run, which
/// takes it over: B's `spawn` starts a child, which waits, and the run waits for it.
/// Then A's `spawn` fails. A's status write is refused, and nothing else of A's may
/// happen: no `Finished` event, no cancelled children, the run still B's and waiting.
async fn a_drive_that_lost_its_run_leaves_it_and_its_children_alone(store: Arc<dyn Store>) {
    let a = Runtime::with_shared_store(store.clone()).owner("a").register(Asker);
    let b = Runtime::with_shared_store(store.clone()).owner("b").register(Asker);
    let mut events = a.subscribe();
    let gate = Gate::armed();
    let run_id = RunId::new();
    let old = {
        let (a, gate) = (a.clone(), gate.clone());
        tokio::spawn(async move { a.start(&Spawner { gate }, ()).run_id(run_id).await })
    };
    gate.reached.notified().await;

    // B's own gate is not armed: its `spawn` starts the child and commits.
    let report = b.resume(&Spawner { gate: Arc::default() }, run_id).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Waiting { place: "waiting", signals: vec!["answered"] });
    let children = store.list_runs(&RunQuery::new().parent(run_id)).await.unwrap().runs;
    assert_eq!(children.len(), 1);
    let child = children[0].run_id;
    assert_eq!(children[0].status, RunStatus::Waiting);

    gate.release.notify_one();
    let err = old.await.unwrap().unwrap_err();
    assert!(matches!(&err, RunError::Store(e) if e.is_lost_run()), "A lost the run: {err}");
    let run = store.load_run(run_id).await.unwrap();
    assert_eq!((run.status, &*run.place, run.error), (RunStatus::Waiting, "waiting", None));
    assert_eq!(store.load_run(child).await.unwrap().status, RunStatus::Waiting, "B's child was left alone");
    while let Some(event) = events.try_recv() {
        let event = event.unwrap();
        assert!(!matches!(event.kind, EventKind::Finished { .. }), "A reported an end: {event:?}");
    }
}

on_every_store!(a_drive_that_lost_its_run_leaves_it_and_its_children_alone);

// ------------------------------------------------------------------ the clock

/// start --page--> paged ; paged --repage (after 15m)--> paged ;
/// paged --ack (wait)--> end. The state counts the repages.
struct Pager;

static PAGER: Definition = Definition::new(
    "pager",
    &[START, "paged", END],
    &[
        TransitionDef::new("page", &[START], "paged"),
        TransitionDef::new("repage", &["paged"], "paged").after(Duration::from_secs(15 * 60)),
        TransitionDef::new("ack", &["paged"], END).wait(|| json!({})),
    ],
);

impl Workflow for Pager {
    type State = u32;
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &PAGER
    }
    fn init(&self, (): ()) -> u32 {
        0
    }
    fn guard(&self, _: usize, _: &u32) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        t: usize,
        repages: &'a mut u32,
        _: &'a mut RunContext,
        _: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            if t == 1 {
                *repages += 1;
            }
            Ok(())
        })
    }
}

/// A runtime clock a day ahead of the system's, which moves only when the test
/// moves it: the time a timer counts from must be the runtime's, not the system's.
async fn a_self_loop_timer_fires_once_per_period_of_the_runtimes_clock(store: Arc<dyn Store>) {
    let base = Timestamp::now().as_millis() + 24 * 60 * 60 * 1000;
    let ahead = Arc::new(AtomicI64::new(0));
    let clock = {
        let ahead = ahead.clone();
        move || Timestamp::from_millis(base + ahead.load(Ordering::SeqCst))
    };
    let runtime = Runtime::with_shared_store(store.clone()).clock(clock).max_steps(10);

    let report = runtime.start(&Pager, ()).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Waiting { place: "paged", signals: vec!["ack"] });
    assert_eq!(report.state, 0, "15 minutes have not passed by the runtime's clock");
    let run = store.load_run(report.run_id).await.unwrap();
    assert_eq!(run.place_since, Timestamp::from_millis(base));

    // 16 minutes pass: the timer fires once, and the next is 15 minutes after it.
    ahead.store(16 * 60 * 1000, Ordering::SeqCst);
    let again = runtime.resume(&Pager, report.run_id).await.unwrap();
    assert_eq!((again.outcome, again.state), (RunOutcome::Waiting { place: "paged", signals: vec!["ack"] }, 1));
    let at: Vec<(String, i64)> = store
        .history(report.run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.transition.into_owned(), s.at.as_millis() - base))
        .collect();
    assert_eq!(at, [("page".to_owned(), 0), ("repage".to_owned(), 16 * 60 * 1000)]);
}

on_every_store!(a_self_loop_timer_fires_once_per_period_of_the_runtimes_clock);

// ------------------------------------------------------------------ resume after a crash

/// start --work--> end; its gate stops `work` (as a process that dies there).
struct Worker {
    gate: Arc<Gate>,
}

static WORKER: Definition = Definition::new("worker", &[START, END], &[TransitionDef::new("work", &[START], END)]);

impl Workflow for Worker {
    type State = u32;
    type Input = u32;
    fn definition(&self) -> &'static Definition {
        &WORKER
    }
    fn init(&self, n: u32) -> u32 {
        n
    }
    fn guard(&self, _: usize, _: &u32) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        _: usize,
        n: &'a mut u32,
        _: &'a mut RunContext,
        _: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            self.gate.pass().await;
            *n *= 10;
            Ok(())
        })
    }
}

/// start --spawn--> waiting ; waiting --done (wait)--> waiting ;
/// waiting --finish [all ended]--> end: a parent of two `worker` children.
struct Parent;

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Plan {
    children: Vec<RunId>,
    ended: Vec<ChildEnded>,
}

static PARENT: Definition = Definition::new(
    "parent",
    &[START, "waiting", END],
    &[
        TransitionDef::new("spawn", &[START], "waiting"),
        TransitionDef::new("finish", &["waiting"], END).guard("all_ended"),
        TransitionDef::new("done", &["waiting"], "waiting").wait(|| json!({"type": "object"})),
    ],
);

impl Workflow for Parent {
    type State = Plan;
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &PARENT
    }
    fn init(&self, (): ()) -> Plan {
        Plan::default()
    }
    fn guard(&self, t: usize, plan: &Plan) -> bool {
        t != 1 || plan.ended.len() == plan.children.len()
    }
    fn transition<'a>(
        &'a self,
        t: usize,
        plan: &'a mut Plan,
        cx: &'a mut RunContext,
        payload: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            match t {
                0 => {
                    for n in [1, 2] {
                        plan.children.push(cx.start_child(&Worker { gate: Arc::default() }, n, "done").await?);
                    }
                }
                2 => plan
                    .ended
                    .push(serde_json::from_value(payload.unwrap_or_default()).map_err(TransitionError::failed)?),
                _ => {}
            }
            Ok(())
        })
    }
}

/// The first process drives the parent, which starts two children and drives them
/// when it waits; it dies while the first child's step runs (its task is gone), so
/// one child is left running without a driver and the other queued. A second
/// process (a runtime over the same store, an hour later by its clock: the dead
/// one's leases ran out) resumes the parent: it drives both children, as the dead
/// drive would have, and goes on with their ends.
async fn resuming_a_parent_drives_the_children_its_dead_drive_started(store: Arc<dyn Store>) {
    let gate = Gate::armed();
    let first = Runtime::with_shared_store(store.clone())
        .child_concurrency(1)
        .register_shared(Arc::new(Worker { gate: gate.clone() }));
    let run_id = RunId::new();
    let dead = {
        let first = first.clone();
        tokio::spawn(async move { first.start(&Parent, ()).run_id(run_id).await })
    };
    gate.reached.notified().await;
    dead.abort();
    assert!(dead.await.unwrap_err().is_cancelled());
    let children = store.list_runs(&RunQuery::new().parent(run_id)).await.unwrap().runs;
    let mut statuses: Vec<RunStatus> = children.iter().map(|c| c.status).collect();
    statuses.sort_by_key(|s| s.as_str());
    assert_eq!(statuses, [RunStatus::Queued, RunStatus::Running]);

    let hour_later = move || Timestamp::from_millis(Timestamp::now().as_millis() + 60 * 60 * 1000);
    let second = Runtime::with_shared_store(store.clone()).clock(hour_later).register(Worker { gate: Arc::default() });
    let report = second.resume(&Parent, run_id).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    let mut outputs: Vec<u32> = report.state.ended.iter().map(|e| e.output_as::<u32>().unwrap()).collect();
    outputs.sort_unstable();
    assert_eq!(outputs, [10, 20]);
    for child in report.state.children {
        let steps = store.history(child).await.unwrap();
        assert_eq!(steps.len(), 1, "each child's step committed once");
    }
}

on_every_store!(resuming_a_parent_drives_the_children_its_dead_drive_started);

// ------------------------------------------------------------------ a child that hangs

/// start --hang--> end: a step that never returns.
struct Hang;

static HANG: Definition = Definition::new("hang", &[START, END], &[TransitionDef::new("hang", &[START], END)]);

impl Workflow for Hang {
    type State = ();
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &HANG
    }
    fn init(&self, (): ()) {}
    fn guard(&self, _: usize, (): &()) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        _: usize,
        (): &'a mut (),
        _: &'a mut RunContext,
        _: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(std::future::pending())
    }
}

/// start --spawn--> waiting ; waiting --ended (wait)--> end: a parent of one `hang`
/// child with a short timeout.
struct Impatient;

static IMPATIENT: Definition = Definition::new(
    "impatient",
    &[START, "waiting", END],
    &[
        TransitionDef::new("spawn", &[START], "waiting"),
        TransitionDef::new("ended", &["waiting"], END).wait(|| json!({"type": "object"})),
    ],
);

/// The hanging child's bound. Its step never returns, so whenever the timer fires
/// the outcome is the same: nothing here depends on how fast the machine is.
const CHILD_TIMEOUT: Duration = Duration::from_millis(50);

impl Workflow for Impatient {
    type State = Option<ChildEnded>;
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &IMPATIENT
    }
    fn init(&self, (): ()) -> Option<ChildEnded> {
        None
    }
    fn guard(&self, _: usize, _: &Option<ChildEnded>) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        t: usize,
        ended: &'a mut Option<ChildEnded>,
        cx: &'a mut RunContext,
        payload: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            if t == 0 {
                cx.start_child_with(&Hang, (), "ended", ChildOptions::new().timeout(CHILD_TIMEOUT)).await?;
            } else {
                *ended = serde_json::from_value(payload.unwrap_or_default()).map_err(TransitionError::failed)?;
            }
            Ok(())
        })
    }
}

/// The parent's drive drives its child, whose step hangs: at the child's timeout
/// the child is cancelled, and the parent gets its end, marked as timed out.
async fn a_child_that_hangs_is_cancelled_at_its_timeout_and_its_parent_goes_on(store: Arc<dyn Store>) {
    let runtime = Runtime::with_shared_store(store.clone()).register(Hang);
    let report = runtime.start(&Impatient, ()).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    let ended = report.state.expect("the parent got its child's end");
    assert_eq!((ended.status, ended.timed_out, &*ended.workflow), (RunStatus::Cancelled, true, "hang"));
    let error = ended.error.unwrap();
    assert!(error.contains("timed out after 50ms"), "{error}");
    let child = store.load_run(ended.child).await.unwrap();
    assert_eq!((child.status, child.step), (RunStatus::Cancelled, 0));
    assert_eq!(child.error.as_deref(), Some(&*error));
}

on_every_store!(a_child_that_hangs_is_cancelled_at_its_timeout_and_its_parent_goes_on);
