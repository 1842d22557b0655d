//! Parents and children, and the trace context a run keeps.

use super::*;

pub(super) async fn a_run_keeps_the_trace_context_it_was_created_with(store: &Arc<dyn Store>) {
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

pub(super) async fn a_run_keeps_its_labels_and_a_fork_inherits_them(store: &Arc<dyn Store>) {
    let labels: Labels =
        [("tenant".to_owned(), "acme \"eu\"".to_owned()), ("a2a.context".to_owned(), "ctx-1".to_owned())].into();
    let new = || NewRun::new(RunId::new(), "labelled", "h", json_raw(json!({})));
    let labelled = store.create_run(new().labels(labels.clone())).await.unwrap();
    assert_eq!(labelled.labels, labels);
    assert_eq!(store.load_run(labelled.run_id).await.unwrap().labels, labels);
    let claimed = store.claim(labelled.run_id, &Claim::new([RunStatus::Running])).await.unwrap();
    assert_eq!(claimed.labels, labels);
    let queued = store.create_run(new().labels(labels.clone()).queued()).await.unwrap();
    let lease = Lease { owner: "w".into(), until: Timestamp::now() + std::time::Duration::from_secs(30) };
    let claimed = store.claim_runnable(&v1(&["labelled"]), &lease, Timestamp::now(), 10).await.unwrap();
    assert_eq!(claimed.iter().map(|r| (r.run_id, &r.labels)).collect::<Vec<_>>(), [(queued.run_id, &labels)]);
    let listed = store.list_runs(&RunQuery::new().workflow("labelled")).await.unwrap();
    assert!(listed.runs.iter().all(|r| r.labels == labels), "{listed:?}");
    // Listed by a label: the runs that carry it, not those with another value or none.
    let other = store.create_run(new().labels([("tenant".to_owned(), "globex".to_owned())].into())).await.unwrap();
    let acme = RunQuery::new().workflow("labelled").label("tenant", "acme \"eu\"");
    let found: Vec<RunId> = store.list_runs(&acme).await.unwrap().runs.iter().map(|r| r.run_id).collect();
    assert_eq!(found, [queued.run_id, labelled.run_id]);
    let globex = store.list_runs(&RunQuery::new().label("tenant", "globex")).await.unwrap();
    assert_eq!(globex.runs.iter().map(|r| r.run_id).collect::<Vec<_>>(), [other.run_id]);
    assert!(store.list_runs(&RunQuery::new().label("nobody", "x")).await.unwrap().runs.is_empty());
    // None unless given; a fork is its source's tenant's, in its conversation.
    let plain = store.create_run(new()).await.unwrap();
    assert!(store.load_run(plain.run_id).await.unwrap().labels.is_empty());
    let fork = store.fork(labelled.run_id, 0, RunId::new(), None).await.unwrap();
    assert_eq!(store.load_run(fork.run_id).await.unwrap().labels, labels);
}

pub(super) async fn a_child_records_its_parent_and_the_signal_it_sends(store: &Arc<dyn Store>) {
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

pub(super) async fn a_finished_child_tells_its_waiting_parent_in_the_same_commit(store: &Arc<dyn Store>) {
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

pub(super) async fn a_failed_or_cancelled_child_tells_its_parent_in_the_same_status_change(store: &Arc<dyn Store>) {
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

pub(super) async fn a_notification_for_a_finished_or_missing_run_is_dropped(store: &Arc<dyn Store>) {
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

pub(super) async fn racing_commits_of_one_child_notify_its_parent_once(store: &Arc<dyn Store>) {
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
