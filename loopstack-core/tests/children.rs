//! Child runs: a parent starts children, waits for them durably, and goes on with
//! each child's end; a waiting child keeps its parent waiting; failures and
//! cancellations reach the parent; cancelling a parent cancels its children.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use loopstack_core::*;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ------------------------------------------------------------------ the child

/// start -> (work | ask) ; ask waits for "answer" ; work fails when told to.
#[derive(Default)]
struct Child {
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
struct Task {
    n: u32,
    ask: bool,
    fail: bool,
    answer: Option<String>,
}

static CHILD: Definition = Definition::new(
    "child",
    &[START, "asked", END],
    &[
        TransitionDef::new("ask", &[START], "asked").priority(1).guard("asks"),
        TransitionDef::new("work", &[START], END),
        TransitionDef::new("answer", &["asked"], END).wait(|| json!({"type": "string"})),
    ],
);

impl Workflow for Child {
    type State = Task;
    type Input = Task;
    fn definition(&self) -> &'static Definition {
        &CHILD
    }
    fn init(&self, input: Task) -> Task {
        input
    }
    fn guard(&self, t: usize, task: &Task) -> bool {
        t != 0 || task.ask
    }
    fn transition<'a>(
        &'a self,
        t: usize,
        task: &'a mut Task,
        _cx: &'a mut RunContext,
        payload: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::task::yield_now().await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            match t {
                1 if task.fail => return Err(TransitionError::Failed(format!("task {} failed", task.n).into())),
                1 => task.n *= 10,
                2 => task.answer = payload.and_then(|p| p.as_str().map(str::to_owned)),
                _ => {}
            }
            Ok(())
        })
    }
}

// ------------------------------------------------------------------ the parent

/// start --spawn--> waiting ; waiting --child_done (wait)--> waiting ;
/// waiting --finish [all_done]--> end
#[derive(Default)]
struct Parent {
    /// `spawn` stops once after starting its children, tells `stopped` and never
    /// goes on: the test drops the drive there, as when the process dies.
    hang_once: Arc<std::sync::atomic::AtomicBool>,
    stopped: Arc<tokio::sync::Notify>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Plan {
    tasks: Vec<Task>,
    children: Vec<RunId>,
    ended: Vec<ChildEnded>,
}

static PARENT: Definition = Definition::new(
    "parent",
    &[START, "waiting", END],
    &[
        TransitionDef::new("spawn", &[START], "waiting"),
        TransitionDef::new("finish", &["waiting"], END).guard("all_done"),
        TransitionDef::new("child_done", &["waiting"], "waiting").wait(|| json!({"type": "object"})),
    ],
);

impl Workflow for Parent {
    type State = Plan;
    type Input = Vec<Task>;
    fn definition(&self) -> &'static Definition {
        &PARENT
    }
    fn init(&self, tasks: Vec<Task>) -> Plan {
        Plan { tasks, ..Plan::default() }
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
                    for task in plan.tasks.clone() {
                        plan.children.push(cx.start_child(&Child::default(), task, "child_done").await?);
                    }
                    if self.hang_once.swap(false, Ordering::SeqCst) {
                        self.stopped.notify_one();
                        std::future::pending::<()>().await;
                    }
                }
                2 => {
                    let ended: ChildEnded = serde_json::from_value(payload.unwrap_or_default())
                        .map_err(|e| TransitionError::InvalidPayload(e.to_string()))?;
                    plan.ended.push(ended);
                }
                _ => {}
            }
            Ok(())
        })
    }
}

fn task(n: u32) -> Task {
    Task { n, ..Task::default() }
}

fn runtime_with(child: Child) -> Runtime {
    Runtime::new().register(child).register(Parent::default())
}

#[tokio::test]
async fn a_parent_drives_its_children_and_goes_on_with_each_childs_end() {
    let child = Child::default();
    let max = child.max_in_flight.clone();
    let runtime = runtime_with(child).child_concurrency(2);
    let report = runtime.start(&Parent::default(), (1..=5).map(task).collect()).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    let plan = report.state;
    assert_eq!(plan.ended.len(), 5);
    let mut outputs: Vec<u32> = plan.ended.iter().map(|e| e.output_as::<Task>().unwrap().n).collect();
    outputs.sort_unstable();
    assert_eq!(outputs, [10, 20, 30, 40, 50]);
    assert!(plan.ended.iter().all(|e| e.completed() && e.workflow == "child" && e.error.is_none()));
    assert!(max.load(Ordering::SeqCst) <= 2, "at most two children at once");

    // The run queries list the children, each recording its parent.
    let children = runtime.store().list_runs(&RunQuery::new().parent(report.run_id)).await.unwrap().runs;
    assert_eq!(children.len(), 5);
    assert!(children.iter().all(|c| c.parent == Some(report.run_id) && c.status == RunStatus::Completed));
}

#[tokio::test]
async fn a_waiting_child_keeps_its_parent_waiting_until_it_ends() {
    let runtime = runtime_with(Child::default());
    let tasks = vec![task(1), Task { n: 2, ask: true, ..Task::default() }];
    let report = runtime.start(&Parent::default(), tasks).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Waiting { place: "waiting", signals: vec!["child_done"] });
    assert_eq!(report.state.ended.len(), 1);
    let asking = report.state.children[1];
    assert_eq!(runtime.store().load_run(asking).await.unwrap().status, RunStatus::Waiting);

    // The child's answer ends it, and its end wakes the parent, which completes.
    let answered = runtime.signal(&Child::default(), asking, ("answer", json!("yes"))).await.unwrap();
    assert_eq!(answered.outcome, RunOutcome::Completed);
    let parent = runtime.store().load_run(report.run_id).await.unwrap();
    assert_eq!(parent.status, RunStatus::Completed);
    let plan: Plan = serde_json::from_str(parent.state.get()).unwrap();
    let last = plan.ended.last().unwrap();
    assert_eq!((last.child, last.output_as::<Task>().unwrap().answer.as_deref()), (asking, Some("yes")));
}

#[tokio::test]
async fn a_parent_over_a_shared_store_is_woken_by_a_new_runtime() {
    // As after a restart: a second runtime, with nothing in memory, over the same store.
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let first = Runtime::with_shared_store(store.clone()).register(Child::default()).register(Parent::default());
    let report = first.start(&Parent::default(), vec![Task { n: 7, ask: true, ..Task::default() }]).await.unwrap();
    let asking = report.state.children[0];
    drop(first);

    let second = Runtime::with_shared_store(store.clone()).register(Child::default()).register(Parent::default());
    second.signal(&Child::default(), asking, ("answer", json!("later"))).await.unwrap();
    assert_eq!(store.load_run(report.run_id).await.unwrap().status, RunStatus::Completed);
}

#[tokio::test]
async fn a_failed_child_reaches_its_parent_with_its_error() {
    let runtime = runtime_with(Child::default());
    let report =
        runtime.start(&Parent::default(), vec![task(1), Task { n: 2, fail: true, ..Task::default() }]).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    let failed = report.state.ended.iter().find(|e| !e.completed()).unwrap();
    assert_eq!(failed.status, RunStatus::Failed);
    assert!(failed.error.as_deref().unwrap().contains("task 2 failed"), "{failed:?}");
    assert_eq!(failed.output, None);
}

#[tokio::test]
async fn cancelling_a_parent_cancels_its_children_and_cancelling_a_child_tells_its_parent() {
    let runtime = runtime_with(Child::default());
    let ask = |n| Task { n, ask: true, ..Task::default() };
    let report = runtime.start(&Parent::default(), vec![ask(1), ask(2)]).await.unwrap();
    runtime.cancel(report.run_id, "no longer needed").await.unwrap();
    for child in &report.state.children {
        let record = runtime.store().load_run(*child).await.unwrap();
        assert_eq!(record.status, RunStatus::Cancelled);
        assert_eq!(record.error.as_deref(), Some("the parent run was cancelled"));
    }

    let report = runtime.start(&Parent::default(), vec![ask(3)]).await.unwrap();
    runtime.cancel(report.state.children[0], "the reviewer left").await.unwrap();
    let parent = runtime.store().load_run(report.run_id).await.unwrap();
    assert_eq!(parent.status, RunStatus::Completed, "the parent was woken and went on");
    let plan: Plan = serde_json::from_str(parent.state.get()).unwrap();
    assert_eq!(plan.ended[0].status, RunStatus::Cancelled);
    assert_eq!(plan.ended[0].error.as_deref(), Some("the reviewer left"));
}

#[tokio::test]
async fn children_wait_queued_for_a_worker_that_has_their_workflow() {
    // Without the child's workflow registered, children stay queued for a worker.
    let runtime = Runtime::new().register(Parent::default());
    let report = runtime.start(&Parent::default(), vec![task(1), task(2)]).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Waiting { place: "waiting", signals: vec!["child_done"] });
    let queued = runtime.store().list_runs(&RunQuery::new().parent(report.run_id)).await.unwrap().runs;
    assert_eq!(queued.len(), 2);
    assert!(queued.iter().all(|c| c.status == RunStatus::Queued));

    // A worker that has the child drives them; their ends wake the parent.
    let worker = Worker::new(runtime.clone().register(Child::default()));
    assert_eq!(worker.run_once().await.unwrap(), 2);
    assert_eq!(runtime.store().load_run(report.run_id).await.unwrap().status, RunStatus::Completed);
}

#[tokio::test]
async fn a_transition_that_runs_again_after_a_crash_finds_its_children_instead_of_starting_them_twice() {
    let runtime = runtime_with(Child::default());
    let parent = Parent::default();
    parent.hang_once.store(true, Ordering::SeqCst);
    let run_id = RunId::new();
    // The drive dies inside `spawn`, after the children were created: it is dropped
    // once `spawn` says it got there, so nothing of the step is committed.
    tokio::select! {
        biased;
        end = runtime.start(&parent, vec![task(1), task(2)]).run_id(run_id) => panic!("the drive ended: {end:?}"),
        () = parent.stopped.notified() => {}
    }
    let created = runtime.store().list_runs(&RunQuery::new().parent(run_id)).await.unwrap().runs;
    assert_eq!(created.len(), 2);

    // Resumed, `spawn` runs again and finds the same two children.
    let report = runtime.resume(&parent, run_id).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    let mut ids = report.state.children.clone();
    ids.sort();
    let mut first: Vec<RunId> = created.iter().map(|c| c.run_id).collect();
    first.sort();
    assert_eq!(ids, first);
    assert_eq!(runtime.store().list_runs(&RunQuery::new().parent(run_id)).await.unwrap().runs.len(), 2);
    assert_eq!(report.state.ended.len(), 2);
}

#[tokio::test]
async fn runs_start_by_name_with_json_input() {
    let runtime = runtime_with(Child::default());
    assert_eq!(runtime.workflows(), ["child", "parent"]);
    let id = runtime.submit_by_name("child", json!({"n": 4, "ask": false, "fail": false})).await.unwrap();
    assert_eq!(runtime.drive_by_name(id).await.unwrap(), RunOutcome::Completed);
    let err = runtime.submit_by_name("child", json!({"n": "four"})).await.unwrap_err();
    assert!(matches!(err, RunError::Input { workflow: "child", .. }), "{err}");
    let err = runtime.submit_by_name("nope", json!({})).await.unwrap_err();
    assert_eq!(err.to_string(), "no workflow named `nope` is registered; registered: child, parent");
}

#[test]
fn a_shared_value_is_the_current_documents_after_a_keyed_replacement() {
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Note(String);
    impl DocumentType for Note {
        const TYPE: &'static str = "note";
    }
    let mut cx = RunContext::detached("test");
    cx.save_shared(Arc::new(Note("first".into())), SaveOptions::new().key("k")).unwrap();
    cx.save_shared(Arc::new(Note("second".into())), SaveOptions::new().key("k")).unwrap();
    let current = cx.documents().iter().find(|d| d.key.as_deref() == Some("k")).unwrap().clone();
    assert_eq!(*cx.read_shared::<Note>(&current).unwrap(), Note("second".into()));
    // A document saved without sharing is read from its content.
    cx.save(&Note("plain".into())).unwrap();
    let plain = cx.documents().last().unwrap().clone();
    assert_eq!(*cx.read_shared::<Note>(&plain).unwrap(), Note("plain".into()));
}

#[tokio::test]
async fn a_retried_parent_receives_the_ends_its_children_had_while_it_was_cancelled() {
    let runtime = runtime_with(Child::default());
    let ask = |n| Task { n, ask: true, ..Task::default() };
    let report = runtime.start(&Parent::default(), vec![task(1), ask(2)]).await.unwrap();
    assert_eq!(report.state.ended.len(), 1, "the first child ended and was delivered");
    // Cancelled, the parent takes its waiting child with it; that child's end finds
    // a finished parent.
    runtime.cancel(report.run_id, "paused").await.unwrap();
    let retried = runtime.retry(&Parent::default(), report.run_id).await.unwrap();
    assert_eq!(retried.outcome, RunOutcome::Completed);
    let ended = &retried.state.ended;
    assert_eq!(ended.len(), 2, "each child's end once: {ended:?}");
    assert_eq!(ended[1].status, RunStatus::Cancelled);
    assert_eq!(ended[1].child, report.state.children[1]);
}

#[tokio::test]
async fn a_transition_reads_its_childs_record_and_no_other_run() {
    let mut cx = RunContext::detached("parent");
    let child = cx.start_child(&Child::default(), task(3), "child_done").await.unwrap();
    let record = cx.child_run(child).await.unwrap();
    assert_eq!((record.parent, record.status, &*record.workflow), (Some(cx.run_id()), RunStatus::Queued, "child"));

    // A run that is not its child reads as not found, as one that does not exist.
    let other = cx.runtime().submit(&Child::default(), task(4)).await.unwrap();
    assert!(matches!(cx.child_run(other).await, Err(StoreError::RunNotFound(id)) if id == other));
    let missing = RunId::new();
    assert!(matches!(cx.child_run(missing).await, Err(StoreError::RunNotFound(id)) if id == missing));
}
