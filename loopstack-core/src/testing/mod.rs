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
//! and overlapping runs by policy, a due time moved one period at most); a store that
//! keeps no schedules (the trait's defaults) must say so
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

mod children;
mod claims;
mod runs;
mod schedules;

use children::*;
use claims::*;
use runs::*;
use schedules::*;

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
    /// `work` stops the run ([`RunContext::stop`]) after saving its documents.
    stop_at_work: bool,
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
                    if self.stop_at_work {
                        cx.stop(STOP_REASON);
                    }
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

/// Why `work` stops a run of a [`Review`] with `stop_at_work`.
const STOP_REASON: &str = "the budget of 1 step was spent";

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
    a_stopped_run_stands_at_its_last_checkpoint_until_retried(&store).await;
    a_fork_and_its_first_step_are_stored_together_or_not_at_all(&store).await;
    an_unchanged_state_reads_back_from_its_checkpoint(&store).await;
    a_run_is_created_with_its_documents_or_not_at_all(&store).await;
    signals_still_pending_when_a_run_ends_are_rejected(&store).await;
    workers_claim_what_can_move(&store).await;
    runs_are_counted_by_workflow_and_status(&store).await;
    a_released_lease_is_claimed_at_once(&store).await;
    takeovers_are_recorded_and_a_released_lease_is_none(&store).await;
    a_commit_sets_its_status_and_keeps_or_renews_the_lease(&store).await;
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
    a_run_keeps_its_labels_and_a_fork_inherits_them(&store).await;
    schedules_start_each_due_time_once(&store).await;
    overlapping_due_times_follow_the_schedules_policy(&store).await;
    a_clock_far_ahead_moves_a_schedule_one_period_at_most(&store).await;
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
