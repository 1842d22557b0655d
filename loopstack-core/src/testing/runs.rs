//! Commits, signals, fences, claims, retries, forks, queries, unreadable runs.

use super::*;

pub(super) async fn an_unchanged_state_reads_back_from_its_checkpoint(store: &Arc<dyn Store>) {
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

pub(super) async fn a_run_commits_every_step_with_its_documents_and_checkpoints(store: &Arc<dyn Store>) {
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

pub(super) async fn signals_are_kept_delivered_once_and_refusals_keep_the_run_waiting(store: &Arc<dyn Store>) {
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

pub(super) async fn a_signal_before_the_run_parks_waits_in_the_inbox(store: &Arc<dyn Store>) {
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

pub(super) async fn fenced_and_finished_writes_are_refused(store: &Arc<dyn Store>) {
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

pub(super) async fn claims_respect_status_and_live_leases(store: &Arc<dyn Store>) {
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

pub(super) async fn a_crashed_transition_runs_again_on_resume(store: &Arc<dyn Store>) {
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

pub(super) async fn retry_and_fork(store: &Arc<dyn Store>) {
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

pub(super) async fn a_stopped_run_stands_at_its_last_checkpoint_until_retried(store: &Arc<dyn Store>) {
    let rt = Runtime::with_shared_store(store.clone());
    let report = rt.start(&Review { stop_at_work: true, ..Review::default() }, input(false)).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Stopped { reason: STOP_REASON.into() });
    let run_id = report.run_id;
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!(
        (record.status, &*record.place, record.step, record.error.as_deref()),
        (RunStatus::Stopped, "drafted", 1, Some(STOP_REASON))
    );
    let docs = store.documents(run_id).await.unwrap();
    assert_eq!(texts(&docs), ["begin ran", "count 1"], "nothing of the stopping step is stored");
    // A stopped run is finished: no commit reaches it...
    let work = StepRecord::new(2, "work", "drafted", "review");
    let err = store
        .commit(Checkpoint::new(run_id, record.fence(), work, RunStatus::Running, record.state.clone()))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Finished { status: RunStatus::Stopped, .. }), "{err:?}");
    // ...and a listing tells it apart.
    let stopped = store.list_runs(&RunQuery::new().workflow("review").status(RunStatus::Stopped)).await.unwrap();
    assert_eq!(stopped.runs.iter().map(|r| r.run_id).collect::<Vec<_>>(), [run_id]);
    // A retry, once the limit no longer holds, takes the stopped step again.
    let retried = rt.retry(&Review::default(), run_id).await.unwrap();
    assert_eq!(
        (retried.outcome, retried.state.log),
        (RunOutcome::Completed, vec!["begin".into(), "work".into(), "auto".into()])
    );
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.error.as_deref()), (RunStatus::Completed, None));
}

pub(super) async fn a_fork_and_its_first_step_are_stored_together_or_not_at_all(store: &Arc<dyn Store>) {
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

pub(super) async fn queries_filter_and_page(store: &Arc<dyn Store>) {
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
    // Several statuses: runs in any of them; a time bound before them: none of them.
    let mut finished = Vec::new();
    for run in store.list_runs(&RunQuery::new().workflow("review").created_between(Some(t0), None)).await.unwrap().runs
    {
        if run.status != RunStatus::Waiting {
            finished.push(run.status);
        }
    }
    assert_eq!(finished.len(), 2, "the runs that did not wait: {finished:?}");
    let either = RunQuery::new().workflow("review").status(RunStatus::Waiting).status(finished[0]).status(finished[1]);
    let listed = store.list_runs(&either.created_between(Some(t0), None).limit(100)).await.unwrap();
    assert_eq!(listed.runs.len(), 5, "waiting and {finished:?}");
    let earlier = store.list_runs(&RunQuery::new().workflow("review").created_between(None, Some(t0))).await.unwrap();
    assert!(earlier.runs.iter().all(|r| !ids.contains(&r.run_id) && r.created_at < t0));
}

pub(super) async fn signals_still_pending_when_a_run_ends_are_rejected(store: &Arc<dyn Store>) {
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
        metadata: crate::Metadata::new(),
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

pub(super) async fn an_unreadable_run_fails_alone_when_it_is_claimed(store: &Arc<dyn Store>, spoil: &SpoilFn) {
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

pub(super) async fn a_run_is_created_with_its_documents_or_not_at_all(store: &Arc<dyn Store>) {
    let raw = |v: Value| serde_json::value::to_raw_value(&v).unwrap();
    let note = |seq: u64, text: &str| {
        Arc::new(Document {
            seq,
            doc_type: "note".into(),
            key: None,
            version: 1,
            tags: vec!["conversation".into()],
            metadata: Default::default(),
            content: raw(json!({ "text": text })),
            step: 0,
        })
    };
    let docs = vec![note(0, "the prompt"), note(1, "an attachment")];
    for queued in [false, true] {
        let run_id = RunId::new();
        let new = NewRun::new(run_id, "review", DEF.hash(), raw(json!({"n": 0}))).documents(docs.clone());
        let new = if queued { new.queued() } else { new };
        let run = store.create_run(new).await.unwrap();
        assert_eq!(run.step, 0);
        let stored = store.documents(run_id).await.unwrap();
        assert_eq!(texts(&stored), ["the prompt", "an attachment"], "queued: {queued}");
        assert!(stored.iter().all(|d| d.step == 0 && d.version == 1 && d.tags == ["conversation"]));
        assert_eq!(texts(&store.documents_at(run_id, 0).await.unwrap()), ["the prompt", "an attachment"]);
        assert_eq!(store.document_versions(run_id).await.unwrap().len(), 2);

        // Creating it again is refused and writes nothing: its documents stay as they were.
        let again = NewRun::new(run_id, "review", DEF.hash(), raw(json!({"n": 9}))).documents(vec![note(0, "other")]);
        assert!(matches!(store.create_run(again).await, Err(StoreError::RunExists(id)) if id == run_id));
        assert_eq!(texts(&store.documents(run_id).await.unwrap()), ["the prompt", "an attachment"]);

        // A fork from step 0 starts with them.
        let fork = store.fork(run_id, 0, RunId::new(), None).await.unwrap();
        assert_eq!(texts(&store.documents(fork.run_id).await.unwrap()), ["the prompt", "an attachment"]);
    }
}
