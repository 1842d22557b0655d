//! The in-memory store's bound on finished runs, and keyed documents at scale.

use futures::future::BoxFuture;
use loopstack_core::*;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// `START -> a -> END` (both run at once), or `START -> waiting` for a signal when the
/// input says so.
struct Flow;

static DEF: Definition = Definition::new(
    "flow",
    &[START, "a", "waiting", END],
    &[
        TransitionDef::new("park", &[START], "waiting").priority(1).guard("wait"),
        TransitionDef::new("first", &[START], "a"),
        TransitionDef::new("second", &["a"], END),
        TransitionDef::new("go", &["waiting"], END).wait(|| json!({})),
    ],
);

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Input {
    wait: bool,
    /// How many keyed documents each of `first` and `second` saves.
    keys: usize,
    fail: bool,
}

#[derive(Serialize, Deserialize)]
struct Counter {
    n: usize,
    pass: u8,
}
impl DocumentType for Counter {
    const TYPE: &'static str = "counter";
}

#[derive(Serialize, Deserialize)]
struct Other;
impl DocumentType for Other {
    const TYPE: &'static str = "other";
}

impl Workflow for Flow {
    type State = Input;
    type Input = Input;
    fn definition(&self) -> &'static Definition {
        &DEF
    }
    fn init(&self, input: Input) -> Input {
        input
    }
    fn guard(&self, t: usize, s: &Input) -> bool {
        t != 0 || s.wait
    }
    fn transition<'a>(
        &'a self,
        t: usize,
        s: &'a mut Input,
        cx: &'a mut RunContext,
        _: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            let pass = match DEF.transitions()[t].name {
                "first" => 1,
                "second" if s.fail => return Err(TransitionError::failed("failed on purpose")),
                "second" => 2,
                _ => return Ok(()),
            };
            for n in 0..s.keys {
                cx.save_with(&Counter { n, pass }, SaveOptions::new().key(format!("k{n}")))
                    .map_err(TransitionError::failed)?;
            }
            if pass == 1 && s.keys > 0 {
                // The same key under another type is another document.
                cx.save_with(&Other, SaveOptions::new().key("k0")).map_err(TransitionError::failed)?;
                // Saved again within the transition: one document, version 2.
                cx.save_with(&Counter { n: 0, pass }, SaveOptions::new().key("k0")).map_err(TransitionError::failed)?;
            }
            Ok(())
        })
    }
}

async fn exists(store: &MemoryStore, run_id: RunId) -> bool {
    match store.load_run(run_id).await {
        Ok(_) => true,
        Err(StoreError::RunNotFound(_)) => false,
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn keep_finished_drops_the_oldest_finished_runs_and_never_an_unfinished_one() {
    let store = MemoryStore::new().keep_finished(2);
    let rt = Runtime::with_store(store.clone());
    let waiting = Input { wait: true, ..Input::default() };
    let w1 = rt.start(&Flow, waiting.clone()).await.unwrap().run_id;
    let mut done = Vec::new();
    for _ in 0..2 {
        done.push(rt.start(&Flow, Input::default()).await.unwrap().run_id);
    }
    let w2 = rt.start(&Flow, waiting.clone()).await.unwrap().run_id;
    assert_eq!(store.len(), 4, "two finished runs are within the bound");

    // A third finished run (a failed one counts) evicts the oldest-finished.
    let failed = rt.start(&Flow, Input { fail: true, ..Input::default() }).await.unwrap_err().run_id().unwrap();
    assert!(!exists(&store, done[0]).await, "the oldest finished run is gone");
    assert!(exists(&store, done[1]).await && exists(&store, failed).await);
    assert!(exists(&store, w1).await && exists(&store, w2).await, "waiting runs are kept");

    // Runs that finish later, by a signal or a cancellation, count from when they finished.
    rt.signal(&Flow, w1, ("go", json!({}))).await.unwrap();
    assert!(!exists(&store, done[1]).await);
    rt.cancel(w2, "no longer needed").await.unwrap();
    assert!(!exists(&store, failed).await);
    assert!(exists(&store, w1).await && exists(&store, w2).await);
    assert_eq!(store.len(), 2);

    // Many runs later the store still holds two, and every waiting run.
    let mut waiting_runs = Vec::new();
    for i in 0..50 {
        if i % 10 == 0 {
            waiting_runs.push(rt.start(&Flow, waiting.clone()).await.unwrap().run_id);
        }
        rt.start(&Flow, Input::default()).await.unwrap();
    }
    assert_eq!(store.len(), 2 + waiting_runs.len());
    for run_id in waiting_runs {
        assert_eq!(store.load_run(run_id).await.unwrap().status, RunStatus::Waiting);
    }
}

#[tokio::test]
async fn without_a_bound_the_memory_store_keeps_every_run() {
    let store = MemoryStore::new();
    let rt = Runtime::with_store(store.clone());
    for _ in 0..20 {
        rt.start(&Flow, Input::default()).await.unwrap();
    }
    assert_eq!(store.len(), 20);
}

#[tokio::test]
async fn sixteen_thousand_keyed_saves_keep_one_current_document_per_key() {
    const KEYS: usize = 16_000;
    let store = MemoryStore::new();
    let rt = Runtime::with_store(store.clone());
    let report = rt.start(&Flow, Input { keys: KEYS, ..Input::default() }).await.unwrap();
    assert_eq!(report.steps, 2);

    let docs = store.documents(report.run_id).await.unwrap();
    assert_eq!(docs.len(), KEYS + 1, "one document per key and type");
    for (i, doc) in docs.iter().enumerate() {
        assert_eq!(doc.seq, i as u64, "in the order first saved");
    }
    let counters: Vec<_> = docs.iter().filter(|d| d.is::<Counter>()).collect();
    assert_eq!(counters.len(), KEYS);
    for (n, doc) in counters.iter().enumerate() {
        let c: Counter = doc.read().unwrap();
        assert_eq!((doc.key.as_deref(), c.n, c.pass, doc.step), (Some(&*format!("k{n}")), n, 2, 2));
        // Saved once by each transition, `k0` twice by the first.
        assert_eq!(doc.version, if n == 0 { 3 } else { 2 }, "k{n}");
    }
    let other = docs.iter().find(|d| d.is::<Other>()).unwrap();
    assert_eq!((other.key.as_deref(), other.version, other.step, other.seq), (Some("k0"), 1, 1, KEYS as u64));
    let versions = store.document_versions(report.run_id).await.unwrap();
    assert_eq!(versions.len(), 2 * KEYS + 2);
    // The documents as of step 1: the first transition's versions.
    let at_one = store.documents_at(report.run_id, 1).await.unwrap();
    assert_eq!(at_one.len(), KEYS + 1);
    assert!(at_one.iter().filter(|d| d.is::<Counter>()).all(|d| d.step == 1 && d.read::<Counter>().unwrap().pass == 1));
}

/// A run retried after it failed and then finished again counts as the newest
/// finished run: its entry from the first finish must not evict it (with two runs and
/// a bound of two).
#[tokio::test]
async fn a_retried_run_counts_from_its_last_finish() {
    let store = MemoryStore::new().keep_finished(2);
    let rt = Runtime::with_store(store.clone());
    let a = rt.start(&Flow, Input { fail: true, ..Input::default() }).await.unwrap_err().run_id().unwrap();
    let b = rt.start(&Flow, Input::default()).await.unwrap().run_id;
    rt.retry(&Flow, a).await.unwrap_err();
    assert!(exists(&store, a).await, "a finished last");
    assert!(exists(&store, b).await, "b within bound");
}

fn raw(value: Value) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(&value).unwrap()
}

/// A child's last commit, from `start` to `end`, telling `parent`.
fn finishing(child: &RunRecord, parent: RunId) -> Checkpoint {
    let step = StepRecord::new(1, "finish", START, END);
    Checkpoint::new(child.run_id, child.fence(), step, RunStatus::Completed, raw(json!({})))
        .notify(store::OutSignal::new(parent, "child_done", raw(json!({"child": child.run_id}))))
}

/// With a bound of no finished runs, a child is evicted by the very commit that ends
/// it: its notification still reaches its waiting parent, which is never evicted.
/// A parent evicted after it finished is a missing run: the notification is dropped.
#[tokio::test]
async fn a_child_evicted_as_it_finishes_still_tells_its_parent() {
    let store = MemoryStore::new().keep_finished(0);
    let parent = store.create_run(NewRun::new(RunId::new(), "parent", "h", raw(json!({})))).await.unwrap();
    let park = Park { fence: parent.fence(), inbox_seq: 0, signals: &["child_done"], wake_at: None };
    store.park(parent.run_id, &park).await.unwrap();
    let new = || NewRun::new(RunId::new(), "child", "h", raw(json!({}))).child_of(parent.run_id, "child_done");
    let child = store.create_run(new()).await.unwrap();
    store.commit(finishing(&child, parent.run_id)).await.unwrap();
    assert!(!exists(&store, child.run_id).await, "the finished child is evicted");
    let inbox = store.inbox(parent.run_id).await.unwrap();
    assert_eq!((inbox.seq, inbox.pending.len(), &*inbox.pending[0].name), (1, 1, "child_done"));

    // The parent ends (and is evicted); a later child's news has nowhere to go.
    let claimed = store.claim(parent.run_id, &Claim::new([RunStatus::Waiting])).await.unwrap();
    store.set_status(parent.run_id, claimed.fence(), RunStatus::Cancelled, None, None).await.unwrap();
    assert!(!exists(&store, parent.run_id).await);
    let late = store.create_run(new()).await.unwrap();
    store.commit(finishing(&late, parent.run_id)).await.unwrap();
    assert!(!exists(&store, parent.run_id).await, "a dropped notification makes no run");
    assert!(store.is_empty());
}
