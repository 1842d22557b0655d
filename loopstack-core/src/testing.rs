//! The store conformance suite (feature `testing`): the contract of the [`Store`]
//! trait (see [`crate::store`]) as checks a store of your own runs in one of its
//! tests. `loopstack-store` runs it over [`MemoryStore`], SQLite
//! and PostgreSQL.
//!
//! It creates runs of workflows with names of its own on the store (so give it an
//! empty one), drives some with a [`Runtime`] over it, and panics, naming the check,
//! where the store breaks the contract: commits all or nothing with their documents
//! and checkpoints, fencing and finished runs, claims and leases, signals kept and
//! delivered once, notifications in the same write, listings and paging, workers'
//! claims, retries and forks, and schedules (one run per due time, missed times
//! by policy); a store that keeps no schedules (the trait's defaults) must say so
//! with [`StoreError::SchedulesUnsupported`].
//!
//! ```
//! use std::sync::Arc;
//! use loopstack_core::testing::StoreSuite;
//!
//! // In your store's crate, with `loopstack-core = { version = "0.1", features =
//! // ["testing"] }` among its dev-dependencies, in a test:
//! // #[tokio::test(flavor = "multi_thread")]
//! # #[tokio::main(flavor = "current_thread")]
//! async fn my_store_keeps_the_contract() {
//!     let store = loopstack_core::MemoryStore::new(); // your store, empty
//!     StoreSuite::new(Arc::new(store)).run().await;
//! }
//! # fn main() { my_store_keeps_the_contract() }
//! ```
//!
//! A store whose records can be damaged from outside (a database) also passes
//! [`StoreSuite::spoil_with`] a way to make one run's stored state unreadable:
//! then the suite checks that such a run fails alone and never breaks a listing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::store::OutSignal;
use crate::*;

/// Makes the stored state of run `RunId` unreadable, as a database written by other
/// means (a bad migration, a hand edit, a newer build) can hold it.
pub type Spoil = Arc<SpoilFn>;

/// What a [`Spoil`] calls.
pub type SpoilFn = dyn Fn(RunId) -> BoxFuture<'static, ()> + Send + Sync;

/// The conformance suite over one store: [`StoreSuite::run`] runs it.
#[must_use = "the suite does nothing until `run` is awaited"]
pub struct StoreSuite {
    store: Arc<dyn Store>,
    spoil: Option<Spoil>,
}

impl std::fmt::Debug for StoreSuite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreSuite").field("spoil", &self.spoil.is_some()).finish_non_exhaustive()
    }
}

impl StoreSuite {
    /// The suite over `store`, which should hold no runs yet.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store, spoil: None }
    }

    /// Also checks runs whose stored state cannot be read, made so by `spoil`
    /// (for example an `UPDATE` that writes text that is not JSON over the run's
    /// checkpoints): a listing shows them, and a claim fails them alone, with the
    /// reason, instead of stopping at them.
    pub fn spoil_with(mut self, spoil: impl Fn(RunId) -> BoxFuture<'static, ()> + Send + Sync + 'static) -> Self {
        self.spoil = Some(Arc::new(spoil));
        self
    }

    /// Runs every check, in turn; panics at the first the store fails.
    pub async fn run(self) {
        suite(self.store, self.spoil).await;
    }
}

#[derive(Debug, Default, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct State {
    wait: bool,
    log: Vec<String>,
    approved_by: Option<String>,
    /// Floats and odd text that must survive a checkpoint exactly.
    reading: f64,
    label: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Note {
    text: String,
}

impl DocumentType for Note {
    const TYPE: &'static str = "note";
}

/// `begin` saves a note and a keyed counter; `work` updates the counter; at
/// `review` the run waits for `approve` unless `wait` is false; `approve` fails for
/// "mallory".
#[derive(Default)]
struct Review {
    /// `work` hangs once while this is set (a crash in the middle of a transition).
    hang: AtomicBool,
    started: tokio::sync::Notify,
}

static DEF: Definition = Definition::new(
    "review",
    &[START, "drafted", "review", END],
    &[
        TransitionDef::new("begin", &[START], "drafted"),
        TransitionDef::new("work", &["drafted"], "review"),
        TransitionDef::new("auto", &["review"], END).guard("no_wait"),
        TransitionDef::new("approve", &["review"], END).wait(|| json!({"type": "object"})),
    ],
);

impl Workflow for Review {
    type State = State;
    type Input = State;
    fn definition(&self) -> &'static Definition {
        &DEF
    }
    fn init(&self, s: State) -> State {
        s
    }
    fn guard(&self, t: usize, s: &State) -> bool {
        t != 2 || !s.wait
    }
    fn transition<'a>(
        &'a self,
        t: usize,
        s: &'a mut State,
        cx: &'a mut RunContext,
        payload: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            let name = DEF.transitions()[t].name;
            s.log.push(name.to_owned());
            cx.save(&Note { text: format!("{name} ran") }).map_err(TransitionError::failed)?;
            match name {
                "begin" => {
                    cx.save_with(&Note { text: "count 1".into() }, SaveOptions::new().key("count").tag("counter"))
                        .map_err(TransitionError::failed)?;
                }
                "work" => {
                    if self.hang.swap(false, Ordering::SeqCst) {
                        self.started.notify_one();
                        std::future::pending::<()>().await;
                    }
                    cx.save_with(&Note { text: "count 2".into() }, SaveOptions::new().key("count").tag("counter"))
                        .map_err(TransitionError::failed)?;
                }
                "approve" => {
                    let who = payload.as_ref().and_then(|p| p["approved_by"].as_str()).map(str::to_owned);
                    let Some(who) = who else {
                        return Err(TransitionError::InvalidPayload("`approved_by` must be a string".into()));
                    };
                    if who == "mallory" {
                        return Err(TransitionError::failed("mallory may not approve"));
                    }
                    s.approved_by = Some(who);
                }
                _ => {}
            }
            Ok(())
        })
    }
}

fn input(wait: bool) -> State {
    State {
        wait,
        reading: 2.017_351_698_988_807e285,
        label: "naïve \u{1F600} \"quoted\" \\ \u{7f}".into(),
        ..State::default()
    }
}

fn texts(docs: &[Arc<Document>]) -> Vec<String> {
    docs.iter().map(|d| d.read::<Note>().unwrap().text).collect()
}

async fn suite(store: Arc<dyn Store>, spoil: Option<Spoil>) {
    // First, while no other run of the suite waits: the filters must find exactly its runs.
    queries_filter_and_page(&store).await;
    a_run_commits_every_step_with_its_documents_and_checkpoints(&store).await;
    signals_are_kept_delivered_once_and_refusals_keep_the_run_waiting(&store).await;
    a_signal_before_the_run_parks_waits_in_the_inbox(&store).await;
    fenced_and_finished_writes_are_refused(&store).await;
    claims_respect_status_and_live_leases(&store).await;
    a_crashed_transition_runs_again_on_resume(&store).await;
    retry_and_fork(&store).await;
    a_fork_and_its_first_step_are_stored_together_or_not_at_all(&store).await;
    an_unchanged_state_reads_back_from_its_checkpoint(&store).await;
    signals_still_pending_when_a_run_ends_are_rejected(&store).await;
    workers_claim_what_can_move(&store).await;
    workers_claim_only_workflows_named_exactly(&store).await;
    workers_claim_only_the_versions_they_drive(&store).await;
    a_migration_commit_moves_the_run_to_its_version_behind_the_fence(&store).await;
    a_worker_drives_submitted_runs_and_fires_due_timers_once(&store).await;
    a_child_records_its_parent_and_the_signal_it_sends(&store).await;
    a_finished_child_tells_its_waiting_parent_in_the_same_commit(&store).await;
    a_failed_or_cancelled_child_tells_its_parent_in_the_same_status_change(&store).await;
    a_notification_for_a_finished_or_missing_run_is_dropped(&store).await;
    racing_commits_of_one_child_notify_its_parent_once(&store).await;
    a_run_keeps_the_trace_context_it_was_created_with(&store).await;
    schedules_start_each_due_time_once(&store).await;
    if let Some(spoil) = &spoil {
        a_listing_reads_no_state(&store, &**spoil).await;
        an_unreadable_run_fails_alone_when_it_is_claimed(&store, &**spoil).await;
    }
}

/// The runs of `workflow`, newest first, as a listing shows them.
async fn listed(store: &Arc<dyn Store>, workflow: &str) -> Vec<(RunId, RunStatus, Option<String>)> {
    let page = store.list_runs(&RunQuery::new().workflow(workflow)).await.unwrap();
    page.runs.iter().map(|r| (r.run_id, r.status, r.error.clone())).collect()
}

async fn a_listing_reads_no_state(store: &Arc<dyn Store>, spoil: &SpoilFn) {
    let parent = store.create_run(NewRun::new(RunId::new(), "listed_parent", "h", json_raw(json!({})))).await.unwrap();
    let mut children = Vec::new();
    for i in 0..3 {
        let child = NewRun::new(RunId::new(), "listed", "h", json_raw(json!({ "i": i })));
        children.push(store.create_run(child.child_of(parent.run_id, "child_done").queued()).await.unwrap().run_id);
    }
    spoil(children[1]).await;
    let err = store.load_run(children[1]).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "the run's state is unreadable: {err:?}");
    // Every listing still answers, the unreadable run in it: by parent, by
    // workflow, a page at a time.
    children.reverse();
    let page = store.list_runs(&RunQuery::new().parent(parent.run_id)).await.unwrap();
    assert_eq!(page.runs.iter().map(|r| r.run_id).collect::<Vec<_>>(), children);
    assert!(page.runs.iter().all(|r| r.status == RunStatus::Queued && r.parent == Some(parent.run_id)));
    let mut query = RunQuery::new().workflow("listed").limit(1);
    let mut paged = Vec::new();
    loop {
        let page = store.list_runs(&query).await.unwrap();
        paged.extend(page.runs.iter().map(|r| r.run_id));
        match page.next {
            Some(next) => query = query.before(next),
            None => break,
        }
    }
    assert_eq!(paged, children);
}

fn json_raw(value: Value) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(&value).unwrap()
}

/// What a finishing child sends its parent in these tests.
fn child_done(parent: RunId, child: RunId, status: RunStatus) -> OutSignal {
    OutSignal::new(parent, "child_done", json_raw(json!({"child": child, "status": status})))
}

/// A run of `workflow` parked waiting for `child_done` (epoch 1, step 0, inbox 0).
async fn waiting_parent(store: &Arc<dyn Store>, workflow: &'static str) -> RunRecord {
    let parent = store.create_run(NewRun::new(RunId::new(), workflow, "h", json_raw(json!({})))).await.unwrap();
    let park = Park { fence: parent.fence(), inbox_seq: 0, signals: &["child_done"], wake_at: None };
    store.park(parent.run_id, &park).await.unwrap();
    store.load_run(parent.run_id).await.unwrap()
}

/// The last step of a child: `start` to `end`, completed.
fn finishing(child: RunId, fence: Fence) -> Checkpoint {
    let step = StepRecord::new(fence.step + 1, "finish", START, END);
    Checkpoint::new(child, fence, step, RunStatus::Completed, json_raw(json!({"done": true})))
}

async fn a_run_keeps_the_trace_context_it_was_created_with(store: &Arc<dyn Store>) {
    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let new = || NewRun::new(RunId::new(), "traced", "h", json_raw(json!({})));
    let traced = store.create_run(new().trace_parent(Some(TRACEPARENT.into()))).await.unwrap();
    assert_eq!(traced.trace_parent.as_deref(), Some(TRACEPARENT));
    assert_eq!(store.load_run(traced.run_id).await.unwrap().trace_parent.as_deref(), Some(TRACEPARENT));
    let claimed = store.claim(traced.run_id, &Claim::new([RunStatus::Running])).await.unwrap();
    assert_eq!(claimed.trace_parent.as_deref(), Some(TRACEPARENT));
    let queued = store.create_run(new().trace_parent(Some(TRACEPARENT.into())).queued()).await.unwrap();
    let lease = Lease { owner: "w".into(), until: Timestamp::now() + std::time::Duration::from_secs(30) };
    let claimed = store.claim_runnable(&v1(&["traced"]), &lease, Timestamp::now(), 10).await.unwrap();
    assert_eq!(
        claimed.iter().map(|r| (r.run_id, r.trace_parent.as_deref())).collect::<Vec<_>>(),
        [(queued.run_id, Some(TRACEPARENT))]
    );
    let listed = store.list_runs(&RunQuery::new().workflow("traced")).await.unwrap();
    assert!(listed.runs.iter().all(|r| r.trace_parent.as_deref() == Some(TRACEPARENT)), "{listed:?}");
    // None unless given; a fork is a trace of its own.
    let plain = store.create_run(new()).await.unwrap();
    assert_eq!(store.load_run(plain.run_id).await.unwrap().trace_parent, None);
    let fork = store.fork(traced.run_id, 0, RunId::new(), None).await.unwrap();
    assert_eq!(store.load_run(fork.run_id).await.unwrap().trace_parent, None);
}

async fn a_child_records_its_parent_and_the_signal_it_sends(store: &Arc<dyn Store>) {
    let parent = waiting_parent(store, "parenting").await;
    let state = json_raw(json!({}));
    let new = || NewRun::new(RunId::new(), "child_record", "h", state.clone());
    let child = store.create_run(new().child_of(parent.run_id, "child_done")).await.unwrap();
    let is_child = |r: &RunSummary| {
        assert_eq!((r.parent, r.parent_signal.as_deref()), (Some(parent.run_id), Some("child_done")), "{r:?}");
    };
    is_child(&child.summary());
    is_child(&store.load_run(child.run_id).await.unwrap().summary());
    is_child(&store.claim(child.run_id, &Claim::new([RunStatus::Running])).await.unwrap().summary());
    let queued = store.create_run(new().child_of(parent.run_id, "child_done").queued()).await.unwrap();
    let lease = Lease { owner: "w".into(), until: Timestamp::now() + std::time::Duration::from_secs(30) };
    let claimed = store.claim_runnable(&v1(&["child_record"]), &lease, Timestamp::now(), 10).await.unwrap();
    assert_eq!(claimed.iter().map(|r| r.run_id).collect::<Vec<_>>(), [queued.run_id]);
    is_child(&claimed[0].summary());
    let children = store.list_runs(&RunQuery::new().parent(parent.run_id)).await.unwrap();
    assert_eq!(children.runs.iter().map(|r| r.run_id).collect::<Vec<_>>(), [queued.run_id, child.run_id]);
    children.runs.iter().for_each(is_child);
    // `parent` alone leaves the signal unset; a plain run has neither.
    let only_parent = store.create_run(new().parent(parent.run_id)).await.unwrap();
    assert_eq!(store.load_run(only_parent.run_id).await.unwrap().parent_signal, None);
    let plain = store.load_run(store.create_run(new()).await.unwrap().run_id).await.unwrap();
    assert_eq!((plain.parent, plain.parent_signal), (None, None));
    // A fork is nobody's child.
    let fork = store.fork(child.run_id, 0, RunId::new(), None).await.unwrap();
    assert_eq!((fork.parent, fork.parent_signal.as_deref()), (None, None));
    let fork = store.load_run(fork.run_id).await.unwrap();
    assert_eq!((fork.parent, fork.parent_signal.as_deref()), (None, None));
}

async fn a_finished_child_tells_its_waiting_parent_in_the_same_commit(store: &Arc<dyn Store>) {
    let parent = waiting_parent(store, "parent_commit").await;
    let new = NewRun::new(RunId::new(), "child", "h", json_raw(json!({}))).child_of(parent.run_id, "child_done");
    let child = store.create_run(new).await.unwrap();
    let notify = child_done(parent.run_id, child.run_id, RunStatus::Completed);
    let inbox_is_empty = || async {
        assert!(store.signals(parent.run_id).await.unwrap().is_empty());
        assert_eq!(store.load_run(parent.run_id).await.unwrap().signal_seq, 0);
    };

    // Refused commits write nothing, and notify nobody: a driver taken over (fenced),
    // one at the wrong step (conflict).
    let taken = store.claim(child.run_id, &Claim::new([RunStatus::Running])).await.unwrap();
    let err = store.commit(finishing(child.run_id, child.fence()).notify(notify.clone())).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    let stale = Fence { epoch: taken.epoch, step: 4 };
    let err = store.commit(finishing(child.run_id, stale).notify(notify.clone())).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");
    inbox_is_empty().await;
    assert!(store.history(child.run_id).await.unwrap().is_empty());
    let lease = Lease { owner: "w".into(), until: Timestamp::now() + std::time::Duration::from_secs(30) };
    assert!(store.claim_runnable(&v1(&["parent_commit"]), &lease, Timestamp::now(), 10).await.unwrap().is_empty());

    // The commit that ends the child puts exactly one signal in the parent's inbox.
    store.commit(finishing(child.run_id, taken.fence()).notify(notify.clone())).await.unwrap();
    let done = store.load_run(child.run_id).await.unwrap();
    assert_eq!((done.status, done.step, &*done.place), (RunStatus::Completed, 1, END));
    let signals = store.signals(parent.run_id).await.unwrap();
    assert_eq!(signals.len(), 1, "{signals:?}");
    assert_eq!((signals[0].id, &*signals[0].name, &signals[0].status), (1, "child_done", &SignalStatus::Pending));
    assert_eq!(signals[0].payload.get(), notify.payload.get());
    let inbox = store.inbox(parent.run_id).await.unwrap();
    assert_eq!((inbox.seq, inbox.pending.len()), (1, 1));
    // A finished child takes no more commits, and notifies no more.
    let err = store.commit(finishing(child.run_id, taken.fence()).notify(notify.clone())).await.unwrap_err();
    assert!(matches!(err, StoreError::Finished { .. }), "{err:?}");
    let err = store
        .set_status(child.run_id, taken.fence(), RunStatus::Failed, Some("late".into()), Some(notify.clone()))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Finished { .. }), "{err:?}");
    assert_eq!(store.signals(parent.run_id).await.unwrap().len(), 1);

    // The parent cannot park over the news: it is claimable, and a driver that read
    // the old inbox cannot park either.
    let park = Park { fence: parent.fence(), inbox_seq: parent.signal_seq, signals: &["child_done"], wake_at: None };
    let err = store.park(parent.run_id, &park).await.unwrap_err();
    assert!(matches!(err, StoreError::SignalArrived { .. }), "{err:?}");
    let claimed = store.claim_runnable(&v1(&["parent_commit"]), &lease, Timestamp::now(), 10).await.unwrap();
    assert_eq!(claimed.iter().map(|r| r.run_id).collect::<Vec<_>>(), [parent.run_id]);
    assert_eq!(claimed[0].signal_seq, 1);
    let park = Park { fence: claimed[0].fence(), inbox_seq: 0, signals: &["child_done"], wake_at: None };
    let err = store.park(parent.run_id, &park).await.unwrap_err();
    assert!(matches!(err, StoreError::SignalArrived { .. }), "{err:?}");
    // Delivering it is an ordinary wait transition of the parent.
    let step = StepRecord::new(1, "child_done", START, END);
    let mut cp = Checkpoint::new(parent.run_id, claimed[0].fence(), step, RunStatus::Completed, json_raw(json!({})));
    cp.signal = Some(1);
    store.commit(cp).await.unwrap();
    assert_eq!(store.signals(parent.run_id).await.unwrap()[0].status, SignalStatus::Delivered { step: 1 });
}

async fn a_failed_or_cancelled_child_tells_its_parent_in_the_same_status_change(store: &Arc<dyn Store>) {
    let parent = waiting_parent(store, "parent_status").await;
    for (i, status) in [RunStatus::Failed, RunStatus::Cancelled].into_iter().enumerate() {
        let new = NewRun::new(RunId::new(), "child", "h", json_raw(json!({}))).child_of(parent.run_id, "child_done");
        let child = store.create_run(new).await.unwrap();
        let notify = child_done(parent.run_id, child.run_id, status);
        // Refused (a driver taken over): no status change, no signal.
        let taken = store.claim(child.run_id, &Claim::new([RunStatus::Running])).await.unwrap();
        let err = store
            .set_status(child.run_id, child.fence(), status, Some("x".into()), Some(notify.clone()))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
        assert_eq!(store.load_run(child.run_id).await.unwrap().status, RunStatus::Running);
        assert_eq!(store.signals(parent.run_id).await.unwrap().len(), i);

        store.set_status(child.run_id, taken.fence(), status, Some("boom".into()), Some(notify.clone())).await.unwrap();
        let record = store.load_run(child.run_id).await.unwrap();
        assert_eq!((record.status, record.error.as_deref()), (status, Some("boom")));
        let signals = store.signals(parent.run_id).await.unwrap();
        assert_eq!(signals.len(), i + 1, "{signals:?}");
        let last = signals.last().unwrap();
        assert_eq!((last.id, &*last.name, last.payload.get()), (i as u64 + 1, "child_done", notify.payload.get()));
        assert_eq!(store.load_run(parent.run_id).await.unwrap().signal_seq, i as u64 + 1);
    }
    // A status change that hands the run on may notify too.
    let other = store.create_run(NewRun::new(RunId::new(), "child", "h", json_raw(json!({})))).await.unwrap();
    let notify = OutSignal::new(parent.run_id, "child_done", json_raw(json!("queued")));
    store.set_status(other.run_id, other.fence(), RunStatus::Queued, None, Some(notify)).await.unwrap();
    assert_eq!(store.signals(parent.run_id).await.unwrap().len(), 3);
    let lease = Lease { owner: "w".into(), until: Timestamp::now() + std::time::Duration::from_secs(30) };
    let claimed = store.claim_runnable(&v1(&["parent_status"]), &lease, Timestamp::now(), 10).await.unwrap();
    assert_eq!(claimed.iter().map(|r| r.run_id).collect::<Vec<_>>(), [parent.run_id]);
}

async fn a_notification_for_a_finished_or_missing_run_is_dropped(store: &Arc<dyn Store>) {
    let finished = waiting_parent(store, "parent_gone").await;
    let claimed = store.claim(finished.run_id, &Claim::new([RunStatus::Waiting])).await.unwrap();
    store.set_status(finished.run_id, claimed.fence(), RunStatus::Cancelled, Some("gone".into()), None).await.unwrap();
    let missing = RunId::new();
    for target in [finished.run_id, missing] {
        let new = NewRun::new(RunId::new(), "child", "h", json_raw(json!({}))).child_of(target, "child_done");
        let child = store.create_run(new).await.unwrap();
        let notify = child_done(target, child.run_id, RunStatus::Completed);
        store.commit(finishing(child.run_id, child.fence()).notify(notify)).await.unwrap();
        assert_eq!(store.load_run(child.run_id).await.unwrap().status, RunStatus::Completed, "the commit holds");
        let new = NewRun::new(RunId::new(), "child", "h", json_raw(json!({}))).child_of(target, "child_done");
        let child = store.create_run(new).await.unwrap();
        let notify = child_done(target, child.run_id, RunStatus::Failed);
        store.set_status(child.run_id, child.fence(), RunStatus::Failed, Some("x".into()), Some(notify)).await.unwrap();
        assert_eq!(store.load_run(child.run_id).await.unwrap().status, RunStatus::Failed, "the change holds");
    }
    let record = store.load_run(finished.run_id).await.unwrap();
    assert_eq!((record.status, record.signal_seq), (RunStatus::Cancelled, 0));
    assert!(store.signals(finished.run_id).await.unwrap().is_empty());
    let err = store.load_run(missing).await.unwrap_err();
    assert!(matches!(err, StoreError::RunNotFound(_)), "no run is made for a missing target: {err:?}");
}

async fn racing_commits_of_one_child_notify_its_parent_once(store: &Arc<dyn Store>) {
    let parent = waiting_parent(store, "parent_race").await;
    for _ in 0..8 {
        let new = NewRun::new(RunId::new(), "child", "h", json_raw(json!({}))).child_of(parent.run_id, "child_done");
        let child = store.create_run(new).await.unwrap();
        let before = store.signals(parent.run_id).await.unwrap().len();
        // Two writers of the same epoch and step: one commit wins, with its signal.
        let commit = |n: u32| {
            let store = store.clone();
            let notify = OutSignal::new(parent.run_id, "child_done", json_raw(json!({"writer": n})));
            let cp = finishing(child.run_id, child.fence()).notify(notify);
            tokio::spawn(async move { store.commit(cp).await })
        };
        let (a, b) = (commit(1), commit(2));
        let results = [a.await.unwrap(), b.await.unwrap()];
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "{results:?}");
        let err = results.iter().find_map(|r| r.as_ref().err()).unwrap();
        assert!(matches!(err, StoreError::Finished { .. } | StoreError::Conflict { .. }), "{err:?}");
        let signals = store.signals(parent.run_id).await.unwrap();
        assert_eq!(signals.len(), before + 1, "exactly one notification: {signals:?}");
        assert_eq!(store.history(child.run_id).await.unwrap().len(), 1);
    }
}

async fn workers_claim_what_can_move(store: &Arc<dyn Store>) {
    let now = Timestamp::now();
    let secs = std::time::Duration::from_secs;
    let state = serde_json::value::to_raw_value(&json!({})).unwrap();
    let new = |lease: Option<Lease>| {
        let run = NewRun::new(RunId::new(), "claimable", "h", state.clone());
        match lease {
            Some(l) => run.lease(l),
            None => run,
        }
    };
    let lease = |until| Lease { owner: "gone".into(), until };
    let queued = store.create_run(new(None).queued()).await.unwrap();
    assert_eq!((queued.status, queued.epoch), (RunStatus::Queued, 0));
    let dead = store.create_run(new(Some(lease(Timestamp::from_millis(now.as_millis() - 1000))))).await.unwrap();
    let live = store.create_run(new(Some(lease(now + secs(60))))).await.unwrap();
    let mut parked = Vec::new();
    for wake_at in [None, None, Some(Timestamp::from_millis(now.as_millis() - 1)), Some(now + secs(3600))] {
        let run = store.create_run(new(None)).await.unwrap();
        let park = Park { fence: run.fence(), inbox_seq: 0, signals: &["approve"], wake_at };
        store.park(run.run_id, &park).await.unwrap();
        parked.push(run.run_id);
    }
    let payload = serde_json::value::to_raw_value(&json!({"approved_by": "ada"})).unwrap();
    store.send_signal(parked[1], "approve", payload).await.unwrap();
    let (signalled, due) = (parked[1], parked[2]);

    let mine = Lease { owner: "worker-b".into(), until: now + secs(30) };
    let first = store.claim_runnable(&v1(&["claimable"]), &mine, now, 2).await.unwrap();
    let rest = store.claim_runnable(&v1(&["claimable"]), &mine, now, 100).await.unwrap();
    assert_eq!(first.len(), 2, "the limit holds");
    let mut claimed: Vec<RunId> = first.iter().chain(&rest).map(|r| r.run_id).collect();
    claimed.sort();
    let mut expected = vec![queued.run_id, dead.run_id, signalled, due];
    expected.sort();
    assert_eq!(claimed, expected, "queued, lease expired, signalled and due; not live, idle or later");
    for r in first.iter().chain(&rest) {
        assert_eq!((r.status, r.lease_owner.as_deref(), r.wake_at), (RunStatus::Running, Some("worker-b"), None));
    }
    assert_eq!(first.iter().chain(&rest).find(|r| r.run_id == queued.run_id).unwrap().epoch, 1);
    assert!(store.claim_runnable(&v1(&["claimable"]), &mine, now, 100).await.unwrap().is_empty(), "claimed once");
    assert!(store.claim_runnable(&v1(&["other"]), &mine, now + secs(7200), 100).await.unwrap().is_empty());
    assert_eq!(store.load_run(live.run_id).await.unwrap().lease_owner.as_deref(), Some("gone"));
}

/// A run keeps the version it was created with (1 by default), in its record, its
/// listing and its forks; a worker claims a run only with its name and one of the
/// versions listed with it, so the runs of a version it cannot drive stay as they
/// were (a newer build's, during a rollout).
async fn workers_claim_only_the_versions_they_drive(store: &Arc<dyn Store>) {
    let new = |version: u32| NewRun::new(RunId::new(), "versioned", "h", json_raw(json!({}))).version(version).queued();
    let default = store.create_run(NewRun::new(RunId::new(), "versioned", "h", json_raw(json!({}))).queued()).await;
    let v1 = default.unwrap();
    let v2 = store.create_run(new(2)).await.unwrap();
    let v3 = store.create_run(new(3)).await.unwrap();
    assert_eq!((v1.version, v2.version, v3.version), (1, 2, 3), "as created");
    assert_eq!(store.load_run(v2.run_id).await.unwrap().version, 2, "as loaded");
    let listed = store.list_runs(&RunQuery::new().workflow("versioned")).await.unwrap();
    let mut versions: Vec<u32> = listed.runs.iter().map(|r| r.version).collect();
    versions.sort_unstable();
    assert_eq!(versions, [1, 2, 3], "as listed");

    let now = Timestamp::now();
    let lease = Lease { owner: "w".into(), until: now + std::time::Duration::from_secs(30) };
    // A worker of version 2 that migrates from 1 takes both, never version 3.
    let claimed = store.claim_runnable(&[WorkflowVersions::new("versioned", &[2, 1])], &lease, now, 100).await;
    let mut claimed: Vec<RunId> = claimed.unwrap().iter().map(|r| r.run_id).collect();
    claimed.sort();
    assert_eq!(claimed, [v1.run_id, v2.run_id]);
    let newer = store.load_run(v3.run_id).await.unwrap();
    assert_eq!((newer.status, newer.epoch), (RunStatus::Queued, 0), "the newer version's run is left alone");
    // The version goes with the name: version 3 of another workflow takes nothing.
    let other = [WorkflowVersions::new("versioned_other", &[3]), WorkflowVersions::first("versioned")];
    assert!(store.claim_runnable(&other, &lease, now, 100).await.unwrap().is_empty());
    let claimed = store.claim_runnable(&[WorkflowVersions::new("versioned", &[3])], &lease, now, 100).await.unwrap();
    assert_eq!(claimed.iter().map(|r| (r.run_id, r.version)).collect::<Vec<_>>(), [(v3.run_id, 3)]);

    let fork = store.fork(v3.run_id, 0, RunId::new(), None).await.unwrap();
    assert_eq!(fork.version, 3, "a fork is of its source's version");
}

/// A migration's commit moves the run row to its new version and table hash with the
/// step, all or nothing: a stale fence writes neither.
async fn a_migration_commit_moves_the_run_to_its_version_behind_the_fence(store: &Arc<dyn Store>) {
    let run = store.create_run(NewRun::new(RunId::new(), "migrating", "old", json_raw(json!({"n": 1})))).await.unwrap();
    let claimed = store.claim(run.run_id, &Claim::new([RunStatus::Running])).await.unwrap();
    let step = StepRecord::new(1, crate::store::migration_step_name(1, 2), START, "ready");
    let migrated = crate::store::Migrated { version: 2, definition_hash: "new".into() };
    let cp = |fence| {
        Checkpoint::new(run.run_id, fence, step.clone(), RunStatus::Running, json_raw(json!({"count": 1})))
            .migrate(migrated.clone())
    };
    let err = store.commit(cp(run.fence())).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    let before = store.load_run(run.run_id).await.unwrap();
    assert_eq!(
        (before.version, &*before.definition_hash, before.step),
        (1, "old", 0),
        "a refused migration writes nothing"
    );

    store.commit(cp(claimed.fence())).await.unwrap();
    let after = store.load_run(run.run_id).await.unwrap();
    assert_eq!((after.version, &*after.definition_hash, &*after.place, after.step), (2, "new", "ready", 1));
    assert_eq!(after.state.get(), r#"{"count":1}"#);
    let history = store.history(run.run_id).await.unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!((&*history[0].transition, &*history[0].from, &*history[0].to), ("migrate v1 -> v2", START, "ready"));
    // Later commits keep the version.
    let next = StepRecord::new(2, "finish", "ready", END);
    let fence = Fence { epoch: claimed.epoch, step: 1 };
    store.commit(Checkpoint::new(run.run_id, fence, next, RunStatus::Completed, json_raw(json!({})))).await.unwrap();
    assert_eq!(store.load_run(run.run_id).await.unwrap().version, 2);
}

/// Workflow names are matched exactly: `_` and `%` (`LIKE` wildcards) and `,` in a
/// stored name never make a worker claim a run of a workflow it does not have.
async fn workers_claim_only_workflows_named_exactly(store: &Arc<dyn Store>) {
    let names = ["wild_card", "wild%", "comma,name", "back\\slash"];
    let mut runs = Vec::new();
    for name in names {
        let run = NewRun::new(RunId::new(), name, "h", json_raw(json!({}))).queued();
        runs.push(store.create_run(run).await.unwrap().run_id);
    }
    let now = Timestamp::now();
    let lease = Lease { owner: "w".into(), until: now + std::time::Duration::from_secs(30) };
    let others = ["wildXcard", "wildcat", "comma", "name", "back\\\\slash", "backXslash"];
    let claimed = store.claim_runnable(&v1(&others), &lease, now, 100).await.unwrap();
    assert!(
        claimed.is_empty(),
        "runs of other workflows: {:?}",
        claimed.iter().map(|r| &r.workflow).collect::<Vec<_>>()
    );
    for (name, run_id) in names.iter().zip(&runs) {
        assert_eq!(store.load_run(*run_id).await.unwrap().status, RunStatus::Queued, "{name}");
    }
    let mut claimed: Vec<RunId> =
        store.claim_runnable(&v1(&names), &lease, now, 100).await.unwrap().iter().map(|r| r.run_id).collect();
    claimed.sort();
    runs.sort();
    assert_eq!(claimed, runs);
}

/// A workflow that waits for approval for an hour, then expires.
struct Timed;

static TIMED: Definition = Definition::new(
    "timed",
    &[START, "waiting", "expired", END],
    &[
        TransitionDef::new("begin", &[START], "waiting"),
        TransitionDef::new("approve", &["waiting"], END).wait(|| json!({"type": "object"})),
        TransitionDef::new("expire", &["waiting"], "expired").after(std::time::Duration::from_secs(3600)),
        TransitionDef::new("close", &["expired"], END),
    ],
);

impl Workflow for Timed {
    type State = Vec<String>;
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &TIMED
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
            log.push(TIMED.transitions()[t].name.to_owned());
            Ok(())
        })
    }
}

async fn a_worker_drives_submitted_runs_and_fires_due_timers_once(store: &Arc<dyn Store>) {
    use std::sync::atomic::AtomicI64;
    // A clock that can jump ahead: no test waits for an hour, or sleeps at all.
    let ahead = Arc::new(AtomicI64::new(0));
    let clock = || {
        let ahead = ahead.clone();
        move || Timestamp::from_millis(Timestamp::now().as_millis() + ahead.load(Ordering::SeqCst))
    };
    let rt = Runtime::with_shared_store(store.clone()).clock(clock());
    let worker = Worker::new(rt.clone()).register(Review::default()).register(Timed);

    // Submitted runs come back at once, queued, and the worker drives them.
    let submitted = [rt.submit(&Review::default(), input(false)).await.unwrap(), rt.submit(&Timed, ()).await.unwrap()];
    for id in submitted {
        assert_eq!(store.load_run(id).await.unwrap().status, RunStatus::Queued);
    }
    assert!(worker.run_once().await.unwrap() >= 2);
    assert_eq!(store.load_run(submitted[0]).await.unwrap().status, RunStatus::Completed);
    let timed = store.load_run(submitted[1]).await.unwrap();
    assert_eq!((timed.status, &*timed.place), (RunStatus::Waiting, "waiting"));
    assert_eq!(timed.wake_at, Some(timed.place_since + std::time::Duration::from_secs(3600)));
    let outcome = rt.wait_for(submitted[1], std::time::Duration::from_millis(10)).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Waiting);

    // Not due yet: nothing moves. Two hours later the timer fires, once.
    let before = store.history(submitted[1]).await.unwrap().len();
    worker.run_once().await.unwrap();
    assert_eq!(store.history(submitted[1]).await.unwrap().len(), before);
    // Two hours later, and a restart: a new runtime and worker over the same store
    // find the due timer and fire it, once.
    drop(worker);
    ahead.store(2 * 3600 * 1000, Ordering::SeqCst);
    let restarted = Runtime::with_shared_store(store.clone()).clock(clock());
    let worker = Worker::new(restarted).register(Review::default()).register(Timed);
    worker.run_once().await.unwrap();
    worker.run_once().await.unwrap();
    let record = store.load_run(submitted[1]).await.unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    let steps: Vec<String> =
        store.history(submitted[1]).await.unwrap().into_iter().map(|s| s.transition.into_owned()).collect();
    assert_eq!(steps, ["begin", "expire", "close"], "the timer fired exactly once");
}

async fn an_unchanged_state_reads_back_from_its_checkpoint(store: &Arc<dyn Store>) {
    let run_id = RunId::new();
    let first = serde_json::value::to_raw_value(&json!({"n": 1})).unwrap();
    let second = serde_json::value::to_raw_value(&json!({"n": 2})).unwrap();
    let run = store.create_run(NewRun::new(run_id, "review", DEF.hash(), first.clone())).await.unwrap();
    let mut fence = run.fence();
    // Steps 1 and 2 keep the initial state, step 3 changes it, step 4 keeps that.
    for (step, state) in [(1, &first), (2, &first), (3, &second), (4, &second)] {
        let record = StepRecord::new(step, "work", "drafted", "drafted");
        store.commit(Checkpoint::new(run_id, fence, record, RunStatus::Running, state.clone())).await.unwrap();
        fence.step = step;
    }
    for (step, want) in [(0, &first), (1, &first), (2, &first), (3, &second), (4, &second)] {
        let cp = store.checkpoint(run_id, step).await.unwrap();
        assert_eq!((cp.step.step, cp.state.get()), (step, want.get()), "step {step}");
    }
    let fork = store.fork(run_id, 2, RunId::new(), None).await.unwrap();
    assert_eq!((fork.step, fork.state.get()), (2, first.get()));
    assert_eq!(store.load_run(run_id).await.unwrap().state.get(), second.get());

    // A long run of small changes to a larger state: every checkpoint reads back
    // exactly, however stores keep them (SQL stores keep patches, in bounded chains).
    let pad = "x".repeat(200);
    let mut states = Vec::new();
    for step in 5..=60_u64 {
        let state = serde_json::value::to_raw_value(&json!({"n": step, "pad": pad, "odd": step % 2 == 1})).unwrap();
        let record = StepRecord::new(step, "work", "drafted", "drafted");
        store.commit(Checkpoint::new(run_id, fence, record, RunStatus::Running, state.clone())).await.unwrap();
        fence.step = step;
        states.push((step, state));
    }
    for (step, state) in &states {
        assert_eq!(store.checkpoint(run_id, *step).await.unwrap().state.get(), state.get(), "step {step}");
    }
    let fork = store.fork(run_id, 33, RunId::new(), None).await.unwrap();
    assert_eq!(fork.state.get(), states[28].1.get());
    assert_eq!(store.checkpoint(fork.run_id, 33).await.unwrap().state.get(), states[28].1.get());
}

async fn a_run_commits_every_step_with_its_documents_and_checkpoints(store: &Arc<dyn Store>) {
    let rt = Runtime::with_shared_store(store.clone());
    let report = rt.start(&Review::default(), input(false)).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    let run_id = report.run_id;
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.step, record.epoch), (RunStatus::Completed, "end", 3, 1));
    assert_eq!(record.definition_hash, DEF.hash());
    let state: State = serde_json::from_str(record.state.get()).unwrap();
    assert_eq!(state, report.state);
    assert_eq!(state.reading.to_bits(), 2.017_351_698_988_807e285_f64.to_bits(), "floats round-trip exactly");
    assert_eq!(state.label, input(false).label);

    let history = store.history(run_id).await.unwrap();
    let taken: Vec<_> = history.iter().map(|h| (h.step, &*h.transition, &*h.from, &*h.to)).collect();
    assert_eq!(
        taken,
        [(1, "begin", "start", "drafted"), (2, "work", "drafted", "review"), (3, "auto", "review", "end")]
    );
    assert!(history.windows(2).all(|w| w[0].at <= w[1].at));
    let zero = store.checkpoint(run_id, 0).await.unwrap();
    assert_eq!(serde_json::from_str::<State>(zero.state.get()).unwrap(), input(false));
    let two: State = serde_json::from_str(store.checkpoint(run_id, 2).await.unwrap().state.get()).unwrap();
    assert_eq!(two.log, ["begin", "work"]);

    let docs = store.documents(run_id).await.unwrap();
    assert_eq!(texts(&docs), ["begin ran", "count 2", "work ran", "auto ran"]);
    assert_eq!(docs[1].version, 2);
    assert_eq!(docs[1].tags, ["counter"]);
    assert_eq!(texts(&store.documents_at(run_id, 1).await.unwrap()), ["begin ran", "count 1"]);
    let history = store.document_history(run_id, "note", "count").await.unwrap();
    assert_eq!(history.iter().map(|d| (d.version, d.step)).collect::<Vec<_>>(), [(1, 1), (2, 2)]);
    assert_eq!(store.document_versions(run_id).await.unwrap().len(), 5);
}

async fn signals_are_kept_delivered_once_and_refusals_keep_the_run_waiting(store: &Arc<dyn Store>) {
    let rt = Runtime::with_shared_store(store.clone());
    let wf = Review::default();
    let report = rt.start(&wf, input(true)).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Waiting { place: "review", signals: vec!["approve"] });
    let run_id = report.run_id;
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.waiting_for.as_slice()), (RunStatus::Waiting, ["approve".to_owned()].as_slice()));
    assert_eq!(record.lease_until, None, "a waiting run holds no lease");

    // Unknown: refused, nothing stored.
    let err = rt.signal(&wf, run_id, ("reject", json!({}))).await.unwrap_err();
    assert!(matches!(err, RunError::UnknownSignal { .. }), "{err:?}");
    assert!(store.signals(run_id).await.unwrap().is_empty());
    // A bad payload and a refusing transition: recorded as rejected, the run waits.
    let err = rt.signal(&wf, run_id, ("approve", json!({"approved_by": 7}))).await.unwrap_err();
    assert!(matches!(err, RunError::InvalidSignalPayload { .. }), "{err:?}");
    let err = rt.signal(&wf, run_id, ("approve", json!({"approved_by": "mallory"}))).await.unwrap_err();
    assert!(matches!(err, RunError::SignalRefused { .. }), "{err:?}");
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.step), (RunStatus::Waiting, 2));
    assert_eq!(store.documents(run_id).await.unwrap().len(), 3, "refused transitions saved nothing");

    let done = rt.signal(&wf, run_id, ("approve", json!({"approved_by": "ada"}))).await.unwrap();
    assert_eq!(done.outcome, RunOutcome::Completed);
    assert_eq!(done.state.approved_by.as_deref(), Some("ada"));
    let signals = store.signals(run_id).await.unwrap();
    let statuses: Vec<_> = signals.iter().map(|s| (s.id, s.status.clone())).collect();
    assert!(matches!(&statuses[0].1, SignalStatus::Rejected { reason } if reason.contains("invalid")), "{statuses:?}");
    assert!(matches!(&statuses[1].1, SignalStatus::Rejected { reason } if reason.contains("mallory")), "{statuses:?}");
    assert_eq!(statuses[2], (3, SignalStatus::Delivered { step: 3 }));
    assert_eq!(signals[2].payload.get(), r#"{"approved_by":"ada"}"#);
    // A finished run takes no more signals.
    let err = store.send_signal(run_id, "approve", serde_json::value::to_raw_value(&json!({})).unwrap()).await;
    assert!(matches!(err, Err(StoreError::Finished { status: RunStatus::Completed, .. })), "{err:?}");
}

async fn a_signal_before_the_run_parks_waits_in_the_inbox(store: &Arc<dyn Store>) {
    let rt = Runtime::with_shared_store(store.clone());
    let wf = Review::default();
    let run_id = rt.start(&wf, input(true)).await.unwrap().run_id;
    // Another driver takes the run (as a resume would) and so holds it `running`.
    let claimed = store.claim(run_id, &Claim::new([RunStatus::Waiting])).await.unwrap();
    let queued = rt.signal(&wf, run_id, ("approve", json!({"approved_by": "ada"}))).await.unwrap();
    assert_eq!(queued.outcome, RunOutcome::Queued { signal: 1 });
    // That driver cannot park over the signal it has not read.
    let park = Park { fence: claimed.fence(), inbox_seq: claimed.signal_seq, signals: &["approve"], wake_at: None };
    let err = store.park(run_id, &park).await.unwrap_err();
    assert!(matches!(err, StoreError::SignalArrived { .. }), "{err:?}");
    let inbox = store.inbox(run_id).await.unwrap();
    assert_eq!((inbox.seq, inbox.pending.len()), (1, 1));
    // Resuming delivers it, once.
    let report = rt.resume(&wf, run_id).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(report.state.approved_by.as_deref(), Some("ada"));
    assert_eq!(store.signals(run_id).await.unwrap()[0].status, SignalStatus::Delivered { step: 3 });
    assert!(store.inbox(run_id).await.unwrap().pending.is_empty());
}

async fn fenced_and_finished_writes_are_refused(store: &Arc<dyn Store>) {
    let rt = Runtime::with_shared_store(store.clone());
    let wf = Review::default();
    let run_id = rt.start(&wf, input(true)).await.unwrap().run_id;
    let first = store.claim(run_id, &Claim::new([RunStatus::Waiting])).await.unwrap();
    let second = store.claim(run_id, &Claim::new([RunStatus::Running])).await.unwrap();
    assert_eq!(second.epoch, first.epoch + 1);
    let state = serde_json::value::to_raw_value(&input(true)).unwrap();
    let cp = |fence: Fence| {
        Checkpoint::new(
            run_id,
            fence,
            StepRecord::new(fence.step + 1, "approve", "review", END),
            RunStatus::Completed,
            state.clone(),
        )
    };
    // The first driver was taken over: its commit is refused and writes nothing.
    let err = store.commit(cp(first.fence())).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Fenced { epoch, current, .. } if epoch == first.epoch && current == second.epoch)
    );
    let err = store.commit(cp(Fence { epoch: second.epoch, step: 1 })).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict { expected: 1, found: 2, .. }), "{err:?}");
    assert_eq!(store.history(run_id).await.unwrap().len(), 2);
    // The live driver fails the run; nothing revives it.
    store.set_status(run_id, second.fence(), RunStatus::Failed, Some("boom".into()), None).await.unwrap();
    let err = store.commit(cp(second.fence())).await.unwrap_err();
    assert!(matches!(err, StoreError::Finished { status: RunStatus::Failed, .. }), "{err:?}");
    let err = store.set_status(run_id, second.fence(), RunStatus::Running, None, None).await.unwrap_err();
    assert!(matches!(err, StoreError::Finished { .. }), "{err:?}");
    let park = Park { fence: second.fence(), inbox_seq: 0, signals: &["approve"], wake_at: None };
    let err = store.park(run_id, &park).await.unwrap_err();
    assert!(matches!(err, StoreError::Finished { .. }), "{err:?}");
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.step, record.error.as_deref()), (RunStatus::Failed, 2, Some("boom")));
}

async fn claims_respect_status_and_live_leases(store: &Arc<dyn Store>) {
    let run_id = RunId::new();
    let state = serde_json::value::to_raw_value(&input(false)).unwrap();
    let now = Timestamp::now();
    let lease = Lease { owner: "worker-a".into(), until: now + std::time::Duration::from_secs(60) };
    let created = store.create_run(NewRun::new(run_id, "review", DEF.hash(), state).lease(lease)).await.unwrap();
    assert_eq!(
        (created.status, created.epoch, created.lease_owner.as_deref()),
        (RunStatus::Running, 1, Some("worker-a"))
    );
    let err = store.create_run(NewRun::new(run_id, "review", DEF.hash(), created.state.clone())).await.unwrap_err();
    assert!(matches!(err, StoreError::RunExists(id) if id == run_id));
    // A worker may not take a run whose lease is live...
    let worker = Claim::new([RunStatus::Running]).only_expired(now);
    let err = store.claim(run_id, &worker).await.unwrap_err();
    assert!(matches!(&err, StoreError::Leased { owner, .. } if owner == "worker-a"), "{err:?}");
    // ...but may once it ran out.
    let later = Claim::new([RunStatus::Running]).only_expired(now + std::time::Duration::from_secs(61));
    let taken = store.claim(run_id, &later).await.unwrap();
    assert_eq!(taken.epoch, 2);
    store.heartbeat(run_id, 2, now + std::time::Duration::from_secs(5)).await.unwrap();
    let err = store.heartbeat(run_id, 1, now).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced { epoch: 1, current: 2, .. }), "{err:?}");
    let err = store.claim(run_id, &Claim::new([RunStatus::Failed])).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidStatus { status: RunStatus::Running, .. }), "{err:?}");
    let err = store.load_run(RunId::new()).await.unwrap_err();
    assert!(matches!(err, StoreError::RunNotFound(_)));
}

async fn a_crashed_transition_runs_again_on_resume(store: &Arc<dyn Store>) {
    let rt = Runtime::with_shared_store(store.clone());
    let wf = Review { hang: AtomicBool::new(true), ..Review::default() };
    let run_id = RunId::new();
    {
        let run = rt.start(&wf, input(false)).run_id(run_id).into_future();
        tokio::select! {
            _ = run => panic!("the run cannot finish while `work` hangs"),
            () = wf.started.notified() => {}
        }
    }
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.step), (RunStatus::Running, "drafted", 1));
    let report = Runtime::with_shared_store(store.clone()).resume(&wf, run_id).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(report.state.log, ["begin", "work", "auto"], "the interrupted transition ran again from its checkpoint");
    assert_eq!(texts(&store.documents(run_id).await.unwrap()), ["begin ran", "count 2", "work ran", "auto ran"]);
}

async fn retry_and_fork(store: &Arc<dyn Store>) {
    let rt = Runtime::with_shared_store(store.clone());
    let wf = Review::default();
    let run_id = rt.start(&wf, input(true)).await.unwrap().run_id;
    rt.cancel(run_id, "changed my mind").await.unwrap();
    assert_eq!(store.load_run(run_id).await.unwrap().status, RunStatus::Cancelled);
    let retried = rt.retry(&wf, run_id).await.unwrap();
    assert_eq!(retried.outcome, RunOutcome::Waiting { place: "review", signals: vec!["approve"] });
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.error.as_deref()), (RunStatus::Waiting, None));

    let fork = rt.fork(&wf, run_id, 1).await.unwrap();
    assert_ne!(fork.run_id, run_id);
    assert_eq!(fork.outcome, RunOutcome::Waiting { place: "review", signals: vec!["approve"] });
    assert_eq!(fork.state.log, ["begin", "work"]);
    let record = store.load_run(fork.run_id).await.unwrap();
    assert_eq!(record.forked_from, Some((run_id, 1)));
    assert_eq!(texts(&store.documents(fork.run_id).await.unwrap()), ["begin ran", "count 2", "work ran"]);
    assert_eq!(store.history(fork.run_id).await.unwrap().len(), 2);
    let err = store.fork(run_id, 7, RunId::new(), None).await.unwrap_err();
    assert!(matches!(err, StoreError::CheckpointNotFound { step: 7, .. }), "{err:?}");
}

async fn a_fork_and_its_first_step_are_stored_together_or_not_at_all(store: &Arc<dyn Store>) {
    let raw = |v: Value| serde_json::value::to_raw_value(&v).unwrap();
    let note = |seq: u64, step: u64, doc_type: &'static str, text: &str| {
        Arc::new(Document {
            seq,
            doc_type: doc_type.into(),
            key: None,
            version: 1,
            tags: Vec::new(),
            metadata: Default::default(),
            content: raw(json!({ "text": text })),
            step,
        })
    };
    let run_id = RunId::new();
    let run = store.create_run(NewRun::new(run_id, "review", DEF.hash(), raw(json!({"n": 0})))).await.unwrap();
    let mut begin = Checkpoint::new(
        run_id,
        run.fence(),
        StepRecord::new(1, "begin", START, "drafted"),
        RunStatus::Running,
        raw(json!({"n": 1})),
    );
    begin.documents.push(note(0, 1, "note", "begin ran"));
    store.commit(begin).await.unwrap();
    let work = StepRecord::new(2, "work", "drafted", "review");
    let fence = Fence { epoch: run.epoch, step: 1 };
    store.commit(Checkpoint::new(run_id, fence, work, RunStatus::Running, raw(json!({"n": 2})))).await.unwrap();

    // The edits' step: step 2 of the fork, at the place step 1 reached, with a document.
    let edited = raw(json!({"n": 1, "edited": true}));
    let first = || {
        let t = StepRecord::new(2, crate::fork::FORK_TRANSITION, "drafted", "drafted");
        ForkStep::new(t, edited.clone()).document(note(1, 2, crate::fork::FORK_DOCUMENT, "the edits"))
    };
    let fork_id = RunId::new();
    let fork = store.fork(run_id, 1, fork_id, Some(first())).await.unwrap();
    let at = |r: &RunRecord| (r.status, r.step, r.place.clone().into_owned(), r.epoch, r.state.get().to_owned());
    let want = (RunStatus::Running, 2, "drafted".to_owned(), 1, edited.get().to_owned());
    assert_eq!(at(&fork), want, "the fork as returned is after its first step");
    let stored = store.load_run(fork_id).await.unwrap();
    assert_eq!(at(&stored), want, "the fork as stored is after its first step");
    assert_eq!(stored.forked_from, Some((run_id, 1)));
    let history: Vec<_> = store
        .history(fork_id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.step, s.transition.into_owned(), s.from.into_owned(), s.to.into_owned()))
        .collect();
    assert_eq!(
        history,
        [
            (1, "begin".into(), START.into(), "drafted".into()),
            (2, crate::fork::FORK_TRANSITION.into(), "drafted".into(), "drafted".into())
        ]
    );
    assert_eq!(store.checkpoint(fork_id, 1).await.unwrap().state.get(), r#"{"n":1}"#);
    assert_eq!(store.checkpoint(fork_id, 2).await.unwrap().state.get(), edited.get());
    let docs = store.documents(fork_id).await.unwrap();
    assert_eq!(texts(&docs), ["begin ran", "the edits"]);
    assert_eq!(docs[1].doc_type, crate::fork::FORK_DOCUMENT);
    assert_eq!(texts(&store.documents(run_id).await.unwrap()), ["begin ran"], "the source keeps its own");
    // The fork goes on from its first step, behind the fence it returned.
    let next = StepRecord::new(3, "work", "drafted", "review");
    store.commit(Checkpoint::new(fork_id, fork.fence(), next, RunStatus::Running, raw(json!({"n": 3})))).await.unwrap();
    assert_eq!(store.load_run(fork_id).await.unwrap().step, 3);

    // A refused fork stores nothing: neither the copy nor the step.
    let refused = RunId::new();
    let err = store.fork(run_id, 7, refused, Some(first())).await.unwrap_err();
    assert!(matches!(err, StoreError::CheckpointNotFound { step: 7, .. }), "{err:?}");
    let err = store.fork(RunId::new(), 1, refused, Some(first())).await.unwrap_err();
    assert!(matches!(err, StoreError::RunNotFound(_)), "{err:?}");
    assert!(matches!(store.load_run(refused).await, Err(StoreError::RunNotFound(id)) if id == refused));
    let err = store.fork(run_id, 1, fork_id, Some(first())).await.unwrap_err();
    assert!(matches!(err, StoreError::RunExists(id) if id == fork_id), "{err:?}");
    assert_eq!(store.load_run(fork_id).await.unwrap().step, 3, "an existing run is left as it was");
    assert_eq!(store.history(fork_id).await.unwrap().len(), 3);
    assert_eq!(store.history(run_id).await.unwrap().len(), 2, "the source is left as it was");
}

async fn queries_filter_and_page(store: &Arc<dyn Store>) {
    let rt = Runtime::with_shared_store(store.clone());
    let wf = Review::default();
    let t0 = Timestamp::now();
    let mut waiting = Vec::new();
    for i in 0..5 {
        let report = rt.start(&wf, input(i % 2 == 0)).await.unwrap();
        if i % 2 == 0 {
            waiting.push(report.run_id);
        }
    }
    let query = RunQuery::new().workflow("review").status(RunStatus::Waiting).place("review");
    let all = store.list_runs(&query.clone().created_between(Some(t0), None).limit(100)).await.unwrap();
    let ids: Vec<RunId> = all.runs.iter().map(|r| r.run_id).collect();
    waiting.reverse();
    assert_eq!(ids, waiting, "newest first");
    assert!(all.runs.iter().all(|r| r.waiting_for == ["approve"]));
    // Two a page.
    let first = store.list_runs(&query.clone().created_between(Some(t0), None).limit(2)).await.unwrap();
    assert_eq!(first.runs.len(), 2);
    let next = first.next.expect("a second page");
    let second = store.list_runs(&query.clone().created_between(Some(t0), None).limit(2).before(next)).await.unwrap();
    assert_eq!(second.runs.iter().map(|r| r.run_id).collect::<Vec<_>>(), &waiting[2..]);
    assert_eq!(second.next, None);
    let none = store.list_runs(&RunQuery::new().workflow("no_such_workflow")).await.unwrap();
    assert!(none.runs.is_empty() && none.next.is_none());
}

async fn signals_still_pending_when_a_run_ends_are_rejected(store: &Arc<dyn Store>) {
    let rt = Runtime::with_shared_store(store.clone());
    let run_id = rt.start(&Review::default(), input(true)).await.unwrap().run_id;
    let claimed = store.claim(run_id, &Claim::new([RunStatus::Waiting])).await.unwrap();
    let payload = serde_json::value::to_raw_value(&json!({"approved_by": "ada"})).unwrap();
    store.send_signal(run_id, "approve", payload).await.unwrap();
    // The driver ends the run another way, with a document, before it reads its inbox.
    let state = serde_json::value::to_raw_value(&input(true)).unwrap();
    let mut cp = Checkpoint::new(
        run_id,
        claimed.fence(),
        StepRecord::new(3, "auto", "review", END),
        RunStatus::Completed,
        state,
    );
    let note = Document {
        seq: 3,
        doc_type: "note".into(),
        key: None,
        version: 1,
        tags: vec!["closing".into()],
        metadata: serde_json::Map::new(),
        content: serde_json::value::to_raw_value(&Note { text: "closed".into() }).unwrap(),
        step: 3,
    };
    cp.documents = vec![Arc::new(note)];
    store.commit(cp).await.unwrap();
    let signals = store.signals(run_id).await.unwrap();
    assert!(
        matches!(&signals[0].status, SignalStatus::Rejected { reason } if reason == crate::store::SIGNAL_OUTLIVED_RUN),
        "{signals:?}"
    );
    let docs = store.documents(run_id).await.unwrap();
    assert_eq!(docs.len(), 4);
    assert_eq!(docs[3].tags, ["closing"]);
    assert_eq!(store.load_run(run_id).await.unwrap().status, RunStatus::Completed);
}

async fn an_unreadable_run_fails_alone_when_it_is_claimed(store: &Arc<dyn Store>, spoil: &SpoilFn) {
    let parent = waiting_parent(store, "spoiled_parent").await;
    // The unreadable run is the oldest, so the claim meets it first.
    let new = |input: Value| NewRun::new(RunId::new(), "spoiled", "h", json_raw(input)).queued();
    let bad = store.create_run(new(json!({"bad": true})).child_of(parent.run_id, "child_done")).await.unwrap().run_id;
    let good = [
        store.create_run(new(json!({"good": 1}))).await.unwrap().run_id,
        store.create_run(new(json!({"good": 2}))).await.unwrap().run_id,
    ];
    spoil(bad).await;
    let now = Timestamp::now();
    let lease = Lease { owner: "w".into(), until: now + std::time::Duration::from_secs(30) };
    let claimed = store.claim_runnable(&v1(&["spoiled"]), &lease, now, 10).await.unwrap();
    let mut ids: Vec<RunId> = claimed.iter().map(|r| r.run_id).collect();
    ids.sort();
    assert_eq!(ids, good, "the readable runs are claimed, with their states");
    assert!(claimed.iter().all(|r| r.state.get().contains("good")));
    // The unreadable one failed, with the reason, and holds no lease.
    let runs = listed(store, "spoiled").await;
    let (_, status, error) = runs.iter().find(|r| r.0 == bad).unwrap();
    assert_eq!(*status, RunStatus::Failed);
    assert!(error.as_deref().is_some_and(|e| e.contains("cannot be read")), "{error:?}");
    assert!(store.claim_runnable(&v1(&["spoiled"]), &lease, now, 10).await.unwrap().is_empty(), "nothing is left");
    // Its parent hears that it failed, as of any failed child.
    let signals = store.signals(parent.run_id).await.unwrap();
    assert_eq!(signals.len(), 1, "{signals:?}");
    let ended: ChildEnded = serde_json::from_str(signals[0].payload.get()).unwrap();
    assert_eq!((ended.child, ended.status, &*signals[0].name), (bad, RunStatus::Failed, "child_done"));

    // A claim of one such run (a resume, a cancel) fails it too, rather than
    // leaving it running with nobody driving it.
    let bad = store.create_run(new(json!({"bad": 2}))).await.unwrap().run_id;
    spoil(bad).await;
    let err = store.claim(bad, &Claim::new([RunStatus::Queued])).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    let runs = listed(store, "spoiled").await;
    assert_eq!(runs[0].0, bad);
    assert_eq!(runs[0].1, RunStatus::Failed);
}

/// The workflows `names`, version 1 each, for [`Store::claim_runnable`].
fn v1<'a>(names: &'a [&'a str]) -> Vec<WorkflowVersions<'a>> {
    names.iter().map(|n| WorkflowVersions::first(n)).collect()
}

async fn schedules_start_each_due_time_once(store: &Arc<dyn Store>) {
    use std::sync::atomic::AtomicI64;
    use std::time::Duration;

    use crate::schedule::{Missed, Schedule, ScheduleError, ScheduleFire, scheduled_run_id};

    const HOUR: i64 = 3600 * 1000;
    let probe = Schedule::every(Duration::from_secs(3600))
        .unwrap()
        .record("probe".into(), "review".into(), json_raw(json!({})), Timestamp::now())
        .unwrap();
    match store.create_schedule(&probe).await {
        Ok(()) => store.delete_schedule("probe").await.expect("a stored schedule can be deleted"),
        Err(StoreError::SchedulesUnsupported) => {
            let due = store.due_schedules(&["review"], Timestamp::from_millis(i64::MAX), 10).await.unwrap();
            assert!(due.is_empty(), "a store without schedules finds none due");
            return;
        }
        Err(e) => panic!("storing a schedule: {e}"),
    }

    // Two runtimes over the store (two workers), on one clock that jumps ahead.
    let ahead = Arc::new(AtomicI64::new(0));
    let clock = || {
        let ahead = ahead.clone();
        move || Timestamp::from_millis(Timestamp::now().as_millis() + ahead.load(Ordering::SeqCst))
    };
    let a = Runtime::with_shared_store(store.clone()).clock(clock()).register(Review::default());
    let b = Runtime::with_shared_store(store.clone()).clock(clock()).register(Review::default());
    let input_json = serde_json::to_value(input(false)).unwrap();
    let hourly = || Schedule::every(Duration::from_secs(3600)).unwrap();

    // Bad requests are typed errors and store nothing.
    let err = a.schedule("bad workflow", "review", input_json.clone(), hourly()).await.unwrap_err();
    assert!(matches!(err, ScheduleError::InvalidId(_)), "{err}");
    let err = a.schedule("s1", "no-such-workflow", input_json.clone(), hourly()).await.unwrap_err();
    assert!(matches!(err, ScheduleError::UnknownWorkflow { .. }), "{err}");
    let err = a.schedule("s1", "review", json!({"wait": "not a bool"}), hourly()).await.unwrap_err();
    assert!(matches!(err, ScheduleError::Input { .. }), "{err}");
    assert!(store.list_schedules().await.unwrap().is_empty(), "refused schedules store nothing");

    let stored = a.schedule("s1", "review", input_json.clone(), hourly()).await.unwrap();
    let t0 = stored.created_at;
    assert_eq!(stored.next_due, t0 + Duration::from_secs(3600));
    let err = b.schedule("s1", "review", input_json.clone(), hourly()).await.unwrap_err();
    assert!(matches!(err, ScheduleError::Store(StoreError::ScheduleExists(ref id)) if id == "s1"), "{err}");
    let loaded = store.load_schedule("s1").await.unwrap();
    assert_eq!(
        (loaded.next_due, &loaded.recurrence, loaded.missed, loaded.paused),
        (stored.next_due, &stored.recurrence, Missed::Skip, false)
    );
    assert_eq!(loaded.input.get(), stored.input.get());

    // Not due yet: nothing starts.
    assert!(a.start_due_schedules().await.unwrap().is_empty());

    // Due: both workers look at once; one run starts, with the derived id.
    for hour in 1..=3 {
        ahead.store(hour * HOUR, Ordering::SeqCst);
        let (x, y) = tokio::join!(a.start_due_schedules(), b.start_due_schedules());
        let started: Vec<RunId> = x.unwrap().into_iter().chain(y.unwrap()).collect();
        let due = t0 + Duration::from_millis((hour * HOUR) as u64);
        assert_eq!(started, [scheduled_run_id("s1", t0, due)], "hour {hour}: one run for one due time");
        let run = store.load_run(started[0]).await.unwrap();
        assert_eq!((run.status, &*run.workflow), (RunStatus::Queued, "review"));
        let s = store.load_schedule("s1").await.unwrap();
        assert_eq!(
            (s.last_due, s.last_run, s.next_due),
            (Some(due), Some(started[0]), due + Duration::from_secs(3600))
        );
        // Looking again at the same time starts nothing.
        assert!(a.start_due_schedules().await.unwrap().is_empty());
    }
    let runs = store.scheduled_runs("s1", 10).await.unwrap();
    assert_eq!(runs.len(), 3, "each started run is recorded with its schedule and due time");
    assert_eq!(runs[0].due, t0 + Duration::from_millis(3 * HOUR as u64), "newest first");
    assert!(runs.iter().all(|r| r.schedule == "s1" && r.run_id == scheduled_run_id("s1", t0, r.due)));

    // The compare-and-set itself: of two writers that read one due time, one moves it.
    let s = store.load_schedule("s1").await.unwrap();
    let fire = || ScheduleFire::new("s1", s.next_due, Some(s.next_due + Duration::from_secs(3600)));
    let (x, y) = tokio::join!(store.fire_schedule(fire()), store.fire_schedule(fire()));
    assert_eq!([x.unwrap(), y.unwrap()].iter().filter(|moved| **moved).count(), 1);
    assert_eq!(store.load_schedule("s1").await.unwrap().next_due, s.next_due + Duration::from_secs(3600));

    // Paused: nothing starts; resumed: next due after now, the paused times not started.
    let paused = a.pause_schedule("s1").await.unwrap();
    assert!(paused.paused);
    ahead.store(10 * HOUR, Ordering::SeqCst);
    assert!(a.start_due_schedules().await.unwrap().is_empty(), "a paused schedule starts nothing");
    let resumed = a.resume_schedule("s1").await.unwrap();
    assert!(!resumed.paused);
    assert!(resumed.next_due > a.now() && resumed.next_due <= a.now() + Duration::from_secs(3600));
    assert!(a.start_due_schedules().await.unwrap().is_empty());

    // Missed times: found five hours late, `Skip` starts nothing, `CatchUpOnce` one run.
    ahead.store(0, Ordering::SeqCst);
    let skip = a.schedule("skip", "review", input_json.clone(), hourly()).await.unwrap();
    let catch_up =
        a.schedule("catch-up", "review", input_json.clone(), hourly().missed(Missed::CatchUpOnce)).await.unwrap();
    ahead.store(5 * HOUR + 20 * 60 * 1000, Ordering::SeqCst);
    let started = a.start_due_schedules().await.unwrap();
    let latest = catch_up.created_at + Duration::from_millis(5 * HOUR as u64);
    assert_eq!(started, [scheduled_run_id("catch-up", catch_up.created_at, latest)], "one run for the missed times");
    assert_eq!(store.load_schedule("catch-up").await.unwrap().last_due, Some(latest));
    let skipped = store.load_schedule("skip").await.unwrap();
    assert_eq!(skipped.last_run, None, "skipped times start nothing");
    assert_eq!(
        skipped.next_due,
        skip.created_at + Duration::from_millis(6 * HOUR as u64),
        "on to the next time to come"
    );
    assert!(store.scheduled_runs("skip", 10).await.unwrap().is_empty());

    // Listed by id; a worker drives what a schedule started.
    let ids: Vec<String> = store.list_schedules().await.unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(ids, ["catch-up", "s1", "skip"]);
    let worker = Worker::new(a.clone());
    worker.run_once().await.unwrap();
    assert_eq!(store.load_run(started[0]).await.unwrap().status, RunStatus::Completed);

    // Deleted: gone, with its record of runs; its runs stay.
    for id in ["s1", "skip", "catch-up"] {
        a.delete_schedule(id).await.unwrap();
    }
    assert!(matches!(store.load_schedule("s1").await, Err(StoreError::ScheduleNotFound(_))));
    assert!(matches!(a.delete_schedule("s1").await, Err(ScheduleError::Store(StoreError::ScheduleNotFound(_)))));
    assert!(matches!(a.pause_schedule("s1").await, Err(ScheduleError::Store(StoreError::ScheduleNotFound(_)))));
    assert!(matches!(store.scheduled_runs("s1", 10).await, Err(StoreError::ScheduleNotFound(_))));
    assert!(store.load_run(runs[0].run_id).await.is_ok());
    assert!(
        !store.fire_schedule(ScheduleFire::new("s1", s.next_due, None)).await.unwrap(),
        "a deleted schedule does not fire"
    );
}
