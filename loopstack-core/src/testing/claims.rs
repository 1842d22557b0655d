//! What workers claim: runnable runs, their versions, exact names; timers.

use super::*;

pub(super) async fn workers_claim_what_can_move(store: &Arc<dyn Store>) {
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

/// The unfinished runs are counted by workflow and status, with those a worker
/// could claim at the time asked about: as `claim_runnable` finds them, before and
/// after a claim.
pub(super) async fn runs_are_counted_by_workflow_and_status(store: &Arc<dyn Store>) {
    let now = Timestamp::now();
    let secs = std::time::Duration::from_secs;
    let new = |workflow: &'static str| NewRun::new(RunId::new(), workflow, "h", json_raw(json!({})));
    let lease = |until| Lease { owner: "gone".into(), until };
    let counts = |counts: Vec<RunCount>| -> Vec<(String, RunStatus, u64, u64)> {
        let ours = counts.into_iter().filter(|c| c.workflow.starts_with("counted"));
        ours.map(|c| (c.workflow, c.status, c.runs, c.runnable)).collect()
    };
    for _ in 0..2 {
        store.create_run(new("counted").queued()).await.unwrap();
    }
    store.create_run(new("counted_too").queued()).await.unwrap();
    store.create_run(new("counted").lease(lease(Timestamp::from_millis(now.as_millis() - 1000)))).await.unwrap();
    store.create_run(new("counted").lease(lease(now + secs(60)))).await.unwrap();
    let mut parked = Vec::new();
    for wake_at in [None, None, Some(Timestamp::from_millis(now.as_millis() - 1)), Some(now + secs(3600))] {
        let run = store.create_run(new("counted")).await.unwrap();
        let park = Park { fence: run.fence(), inbox_seq: 0, signals: &["approve"], wake_at };
        store.park(run.run_id, &park).await.unwrap();
        parked.push(run);
    }
    store.send_signal(parked[1].run_id, "approve", json_raw(json!({}))).await.unwrap();
    // A finished run is not counted.
    let done = store.create_run(new("counted")).await.unwrap();
    store.set_status(done.run_id, done.fence(), RunStatus::Completed, None, None).await.unwrap();
    let c = |w: &str, status, runs, runnable| (w.to_owned(), status, runs, runnable);
    assert_eq!(
        counts(store.count_runs(now).await.unwrap()),
        [
            c("counted", RunStatus::Queued, 2, 2),
            c("counted", RunStatus::Running, 2, 1),
            c("counted", RunStatus::Waiting, 4, 2),
            c("counted_too", RunStatus::Queued, 1, 1),
        ],
        "queued runs, a lease that ran out, a pending signal and a due timer can move"
    );
    let mine = Lease { owner: "w".into(), until: now + secs(30) };
    let claimed = store.claim_runnable(&v1(&["counted"]), &mine, now, 100).await.unwrap();
    assert_eq!(claimed.len(), 5);
    assert_eq!(
        counts(store.count_runs(now).await.unwrap()),
        [
            c("counted", RunStatus::Running, 6, 0),
            c("counted", RunStatus::Waiting, 2, 0),
            c("counted_too", RunStatus::Queued, 1, 1),
        ],
        "claimed, under a live lease"
    );
    // The leases run out: those runs can move again.
    let later = now + secs(45);
    let running = counts(store.count_runs(later).await.unwrap());
    assert_eq!(running[0], c("counted", RunStatus::Running, 6, 5), "at {later:?}");
}

/// A run keeps the version it was created with (1 by default), in its record, its
/// listing and its forks; a worker claims a run only with its name and one of the
/// versions listed with it, so the runs of a version it cannot drive stay as they
/// were (a newer build's, during a rollout).
pub(super) async fn workers_claim_only_the_versions_they_drive(store: &Arc<dyn Store>) {
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
pub(super) async fn a_migration_commit_moves_the_run_to_its_version_behind_the_fence(store: &Arc<dyn Store>) {
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
pub(super) async fn workers_claim_only_workflows_named_exactly(store: &Arc<dyn Store>) {
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
pub(super) struct Timed;

pub(super) static TIMED: Definition = Definition::new(
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

pub(super) async fn a_worker_drives_submitted_runs_and_fires_due_timers_once(store: &Arc<dyn Store>) {
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

/// A commit moves the run to the status it names, whatever status it had, and keeps
/// the lease it had unless it renews it; a run whose kept lease runs out is claimed
/// (stores may write the common step, running to running under the same lease,
/// another way: this is what both ways must do).
pub(super) async fn a_commit_sets_its_status_and_keeps_or_renews_the_lease(store: &Arc<dyn Store>) {
    let now = Timestamp::now();
    let secs = std::time::Duration::from_secs;
    let until = now + secs(60);
    let new = NewRun::new(RunId::new(), "leased commits", "h", json_raw(json!({"n": 0})));
    let run = store.create_run(new.lease(Lease { owner: "w".into(), until })).await.unwrap();
    let mut fence = run.fence();
    for step in 1..=2_u64 {
        let record = StepRecord::new(step, "work", "ready", "ready");
        store
            .commit(Checkpoint::new(run.run_id, fence, record, RunStatus::Running, json_raw(json!({"n": step}))))
            .await
            .unwrap();
        fence.step = step;
        let read = store.load_run(run.run_id).await.unwrap();
        assert_eq!((read.status, read.step, &*read.place), (RunStatus::Running, step, "ready"));
        assert_eq!((read.lease_owner.as_deref(), read.lease_until), (Some("w"), Some(until)), "the lease is kept");
    }
    let later = until + secs(60);
    let mut renewing = Checkpoint::new(
        run.run_id,
        fence,
        StepRecord::new(3, "work", "ready", "ready"),
        RunStatus::Running,
        json_raw(json!({"n": 3})),
    );
    renewing.lease_until = Some(later);
    store.commit(renewing).await.unwrap();
    fence.step = 3;
    assert_eq!(store.load_run(run.run_id).await.unwrap().lease_until, Some(later), "the lease is renewed");
    let other = Lease { owner: "other".into(), until: later + secs(30) };
    let names = v1(&["leased commits"]);
    assert!(store.claim_runnable(&names, &other, until + secs(1), 10).await.unwrap().is_empty(), "a live lease");
    let claimed = store.claim_runnable(&names, &other, later + secs(1), 10).await.unwrap();
    assert_eq!(claimed.iter().map(|r| (r.run_id, r.step)).collect::<Vec<_>>(), [(run.run_id, 3)], "lease ran out");
    let late = Checkpoint::new(run.run_id, fence, StepRecord::new(4, "work", "ready", "ready"), RunStatus::Running, {
        json_raw(json!({"n": 4}))
    });
    let err = store.commit(late).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "the driver whose lease ran out is fenced: {err:?}");

    // A queued run committed as running becomes running, and one committed as
    // waiting becomes waiting.
    let queued = store.create_run(NewRun::new(RunId::new(), "queued commits", "h", json_raw(json!({}))).queued());
    let queued = queued.await.unwrap();
    let mut fence = queued.fence();
    for (step, status) in [(1_u64, RunStatus::Running), (2, RunStatus::Waiting), (3, RunStatus::Running)] {
        let record = StepRecord::new(step, "work", "ready", "ready");
        store.commit(Checkpoint::new(queued.run_id, fence, record, status, json_raw(json!({})))).await.unwrap();
        fence.step = step;
        let read = store.load_run(queued.run_id).await.unwrap();
        assert_eq!((read.status, read.step), (status, step), "step {step}");
    }
}

/// A drive that stops (its worker shuts down) gives its lease back: the run is
/// claimable at once, by a worker whose clock is behind too. A release from an
/// older epoch, or of a run that is no longer running, gives nothing back.
pub(super) async fn a_released_lease_is_claimed_at_once(store: &Arc<dyn Store>) {
    let now = Timestamp::now();
    let hour = std::time::Duration::from_secs(3600);
    let state = serde_json::value::to_raw_value(&json!({})).unwrap();
    let lease = |owner: &str| Lease { owner: owner.into(), until: now + hour };
    let new = || NewRun::new(RunId::new(), "released", "h", state.clone()).lease(lease("worker-a"));
    let held = store.create_run(new()).await.unwrap();
    let ended = store.create_run(new()).await.unwrap();
    store.set_status(ended.run_id, ended.fence(), RunStatus::Completed, None, None).await.unwrap();
    let workflows = v1(&["released"]);
    assert!(store.claim_runnable(&workflows, &lease("worker-b"), now, 10).await.unwrap().is_empty(), "leases hold");

    store.release_lease(held.run_id, held.epoch - 1).await.unwrap();
    store.release_lease(ended.run_id, ended.epoch).await.unwrap();
    assert!(
        store.claim_runnable(&workflows, &lease("worker-b"), now, 10).await.unwrap().is_empty(),
        "nothing given back"
    );
    assert_eq!(store.load_run(ended.run_id).await.unwrap().status, RunStatus::Completed);

    store.release_lease(held.run_id, held.epoch).await.unwrap();
    let behind = Timestamp::from_millis(now.as_millis() - 60_000);
    let taken = store.claim_runnable(&workflows, &lease("worker-b"), behind, 10).await.unwrap();
    assert_eq!(taken.iter().map(|r| (r.run_id, r.epoch)).collect::<Vec<_>>(), [(held.run_id, held.epoch + 1)]);
    assert_eq!(taken[0].lease_owner.as_deref(), Some("worker-b"));
    assert_eq!(held.held_since, None, "a run created running is held since it was created");
    assert_eq!(taken[0].held_since, Some(behind), "held since the claim");
    assert_eq!(store.load_run(held.run_id).await.unwrap().held_since, Some(behind));

    // The first drive's late release does not give away the lease of the worker that took over.
    store.release_lease(held.run_id, held.epoch).await.unwrap();
    assert!(store.claim_runnable(&workflows, &lease("worker-c"), now, 10).await.unwrap().is_empty());
}

/// A claim of a running run whose lease still names another holder is a takeover
/// the store keeps: from whom, until when, by whom, at which epoch. A lease given
/// back, a queued run's claim and a waiting run's are none.
pub(super) async fn takeovers_are_recorded_and_a_released_lease_is_none(store: &Arc<dyn Store>) {
    let now = Timestamp::now();
    let secs = std::time::Duration::from_secs;
    let state = serde_json::value::to_raw_value(&json!({})).unwrap();
    let lease = |owner: &str, until| Lease { owner: owner.into(), until };
    let held = NewRun::new(RunId::new(), "taken", "h", state.clone()).lease(lease("worker-a", now + secs(60)));
    let held = store.create_run(held).await.unwrap();
    let queued = store.create_run(NewRun::new(RunId::new(), "taken", "h", state.clone()).queued()).await.unwrap();
    assert!(store.takeovers(held.run_id).await.unwrap().is_empty());

    // worker-a dies; once its lease ran out, worker-b takes the run over.
    let later = now + secs(61);
    let taken = store.claim_runnable(&v1(&["taken"]), &lease("worker-b", later + secs(30)), later, 10).await.unwrap();
    assert_eq!(taken.len(), 2, "the run whose lease ran out and the queued one");
    let taken_from = |id: RunId| taken.iter().find(|r| r.run_id == id).unwrap().taken_from.clone();
    assert_eq!(taken_from(held.run_id).as_deref(), Some("worker-a"), "the claim says whose lease it took over");
    assert_eq!(taken_from(queued.run_id), None);
    let takeovers = store.takeovers(held.run_id).await.unwrap();
    assert_eq!(takeovers.len(), 1, "{takeovers:?}");
    let t = &takeovers[0];
    assert_eq!(
        (t.from.as_str(), t.lease_until, t.by.as_deref(), t.epoch),
        ("worker-a", now + secs(60), Some("worker-b"), 2)
    );
    assert!(store.takeovers(queued.run_id).await.unwrap().is_empty(), "a queued run's claim is no takeover");

    // worker-b shuts down and gives the lease back: worker-c's claim is no takeover.
    store.release_lease(held.run_id, 2).await.unwrap();
    let claim = Claim::new([RunStatus::Running]).lease(lease("worker-c", later + secs(30))).only_expired(later);
    let released = store.claim(held.run_id, &claim).await.unwrap();
    assert_eq!((released.epoch, released.taken_from), (3, None));
    // Taken by hand while worker-c's lease holds (`resume --take-over`): a takeover.
    let by_hand = Claim::new([RunStatus::Running]).lease(lease("operator", later + secs(30)));
    let by_hand = store.claim(held.run_id, &by_hand).await.unwrap();
    assert_eq!(by_hand.taken_from.as_deref(), Some("worker-c"));
    assert_eq!(store.load_run(held.run_id).await.unwrap().taken_from.as_deref(), Some("worker-c"));
    let takeovers = store.takeovers(held.run_id).await.unwrap();
    let summary: Vec<(&str, Option<&str>, u64)> =
        takeovers.iter().map(|t| (t.from.as_str(), t.by.as_deref(), t.epoch)).collect();
    assert_eq!(summary, [("worker-a", Some("worker-b"), 2), ("worker-c", Some("operator"), 4)]);
    let err = store.takeovers(RunId::new()).await.unwrap_err();
    assert!(matches!(err, StoreError::RunNotFound(_)), "{err:?}");
}
