//! Versioned workflows on every store (in memory, SQLite, PostgreSQL): two builds
//! of the `triage` workflow, version 1 and version 2 with a changed table and a
//! migration, side by side in one file as two deploys would be.
//!
//! - Runs started and parked on version 1 resume under version 2: migrated (state
//!   and place) in a fenced step of their own, then finished on version 2.
//! - A worker of version 1 never claims a run of version 2; a worker of version 2
//!   claims, migrates and drives version 1's.
//! - A migration that fails or panics loses nothing: an explicit resume changes
//!   nothing, a worker fails the run naming both versions, and a retry under a
//!   build whose migration works finishes it.
//! - A migration whose state cannot be stored (a NaN) is refused before the run is
//!   claimed; a worker that claimed such a run fails it once, with the reason.
//! - A run a migration or a fork leaves at `end` is completed in the store, and its
//!   parent told, as a transition to `end` does.
//! - A fork of a step the run does not have is refused with the fork's error.
//! - A build that can neither drive nor migrate a run's version refuses it, typed.

use std::sync::Arc;

use loopstack::prelude::*;
use loopstack::{EventKind, ForkEdits, ForkError, RunStatus, Store, Worker};
use serde_json::json;

/// The first deploy: a ticket is filed and waits at `filed` to be closed.
mod v1 {
    use loopstack::prelude::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Default, Serialize, Deserialize)]
    pub(crate) struct Ticket {
        pub(crate) title: String,
    }

    pub(crate) struct Triage;

    #[workflow(name = "triage")]
    impl Triage {
        #[transition(to = Filed)]
        async fn file(&self, ticket: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
            ticket.title = format!("{} (filed)", ticket.title);
            Ok(())
        }

        #[transition(from = Filed, to = End, wait)]
        async fn close(&self, _ticket: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
            Ok(())
        }
    }
}

/// The second deploy: `filed` became `open`, a ticket is assigned before it closes,
/// and the state has a priority. Runs of version 1 migrate.
mod v2 {
    use loopstack::prelude::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Default, Serialize, Deserialize)]
    pub(crate) struct Ticket {
        pub(crate) title: String,
        pub(crate) priority: u8,
        pub(crate) assignee: Option<String>,
    }

    #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    pub(crate) struct Assignment {
        pub(crate) to: String,
    }

    pub(crate) struct Triage;

    #[workflow(name = "triage", version = 2)]
    impl Triage {
        #[transition(to = Open)]
        async fn file(&self, ticket: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
            ticket.title = format!("{} (filed)", ticket.title);
            ticket.priority = 3;
            Ok(())
        }

        #[transition(from = Open, to = Assigned, wait)]
        async fn assign(&self, ticket: &mut Ticket, _cx: &mut RunContext, assignment: Assignment) -> Result<()> {
            ticket.assignee = Some(assignment.to);
            Ok(())
        }

        #[transition(from = Assigned, to = End)]
        async fn close(&self, _ticket: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
            Ok(())
        }

        #[migrate(from = 1)]
        fn upgrade_v1(&self, old: super::v1::Ticket, place: super::v1::TriagePlace) -> (Ticket, TriagePlace) {
            use super::v1::TriagePlace as Old;
            let place = match place {
                Old::Start => TriagePlace::Start,
                Old::Filed => TriagePlace::Open,
                Old::End => TriagePlace::End,
            };
            (Ticket { title: old.title, priority: 1, assignee: None }, place)
        }
    }

    /// Version 2 with a migration that fails: on a title it cannot read, with an
    /// error; on "panic", with a panic.
    pub(crate) struct Broken;

    #[workflow(name = "triage", version = 2)]
    impl Broken {
        #[transition(to = Open)]
        async fn file(&self, _ticket: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
            Ok(())
        }

        #[transition(from = Open, to = End, wait)]
        async fn assign(&self, _ticket: &mut Ticket, _cx: &mut RunContext, _assignment: Assignment) -> Result<()> {
            Ok(())
        }

        #[migrate(from = 1)]
        fn from_v1(old: super::v1::Ticket) -> Result<(Ticket, BrokenPlace), String> {
            if old.title.starts_with("panic") {
                panic!("the migration met {}", old.title);
            }
            Err(format!("cannot triage {:?}", old.title))
        }
    }

    /// Version 2 where a ticket filed on version 1 is closed by the migration: the
    /// run reaches `end` without a transition.
    pub(crate) struct Closing;

    #[workflow(name = "triage", version = 2)]
    impl Closing {
        #[transition(to = Open)]
        async fn file(&self, _ticket: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
            Ok(())
        }

        #[transition(from = Open, to = End, wait)]
        async fn assign(&self, _ticket: &mut Ticket, _cx: &mut RunContext, _assignment: Assignment) -> Result<()> {
            Ok(())
        }

        #[migrate(from = 1)]
        fn close_v1(old: super::v1::Ticket) -> (Ticket, ClosingPlace) {
            (Ticket { title: old.title, priority: 0, assignee: None }, ClosingPlace::End)
        }
    }

    /// A ticket scored by a model, whose score may not be a number.
    #[derive(Debug, Default, Serialize, Deserialize)]
    pub(crate) struct Scored {
        pub(crate) title: String,
        pub(crate) score: f64,
    }

    /// Version 2 whose migration makes a state that cannot be stored (a NaN).
    pub(crate) struct Unstorable;

    #[workflow(name = "triage", version = 2)]
    impl Unstorable {
        #[transition(to = Open)]
        async fn file(&self, _ticket: &mut Scored, _cx: &mut RunContext) -> Result<()> {
            Ok(())
        }

        #[transition(from = Open, to = End, wait)]
        async fn assign(&self, _ticket: &mut Scored, _cx: &mut RunContext, _assignment: Assignment) -> Result<()> {
            Ok(())
        }

        #[migrate(from = 1)]
        fn score_v1(old: super::v1::Ticket) -> (Scored, UnstorablePlace) {
            (Scored { title: old.title, score: f64::NAN }, UnstorablePlace::Open)
        }
    }
}

// ------------------------------------------------------------------ the stores

mod common;
use common::stores::on_every_store;

/// A runtime of one build over the shared store.
fn build<W: Workflow>(store: &Arc<dyn Store>, _build: W) -> Runtime {
    Runtime::with_shared_store(store.clone())
}

fn assignment(to: &str) -> v2::TriageSignal {
    v2::TriageSignal::Assign(v2::Assignment { to: to.into() })
}

// ------------------------------------------------------------------ scenarios

async fn parked_on_v1_resumes_and_finishes_on_v2(store: Arc<dyn Store>) {
    let old = Runtime::with_shared_store(store.clone());
    let mut parked = Vec::new();
    for title in ["printer", "coffee"] {
        let report = old.start(&v1::Triage, v1::Ticket { title: title.into() }).await.unwrap();
        assert_eq!(report.outcome, RunOutcome::Waiting { place: "filed", signals: vec!["close"] });
        let record = store.load_run(report.run_id).await.unwrap();
        assert_eq!((record.version, &*record.definition_hash), (1, v1::Triage.definition().hash()));
        parked.push(report.run_id);
    }
    assert_ne!(v1::Triage.definition().hash(), v2::Triage.definition().hash(), "the deploy changed the table");

    // The new deploy: a typed signal of version 2 for a run parked on version 1.
    let new = Runtime::with_shared_store(store.clone());
    let mut events = new.subscribe().run(parked[0]);
    let report = new.signal(&v2::Triage, parked[0], assignment("ada")).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    // Watchers see the migration commit as a step, before the signal's transition.
    let mut committed = Vec::new();
    while let Some(event) = events.try_recv() {
        if let EventKind::TransitionCommitted { transition, from, to, step } = &event.unwrap().kind {
            committed.push((transition.to_string(), from.to_string(), to.to_string(), *step));
        }
    }
    let commit = |t: &str, f: &str, to: &str, n: u64| (t.to_owned(), f.to_owned(), to.to_owned(), n);
    assert_eq!(
        committed,
        [
            commit("migrate v1 -> v2", "filed", "open", 2),
            commit("assign", "open", "assigned", 3),
            commit("close", "assigned", "end", 4)
        ]
    );
    assert_eq!(report.state.title, "printer (filed)", "the old state came along");
    assert_eq!((report.state.priority, report.state.assignee.as_deref()), (1, Some("ada")));
    let record = store.load_run(parked[0]).await.unwrap();
    assert_eq!((record.status, record.version), (RunStatus::Completed, 2));
    assert_eq!(&*record.definition_hash, v2::Triage.definition().hash());
    let steps: Vec<(String, String, String)> = store
        .history(parked[0])
        .await
        .unwrap()
        .iter()
        .map(|s| (s.transition.to_string(), s.from.to_string(), s.to.to_string()))
        .collect();
    let step = |t: &str, f: &str, to: &str| (t.to_owned(), f.to_owned(), to.to_owned());
    assert_eq!(
        steps,
        [
            step("file", "start", "filed"),
            step("migrate v1 -> v2", "filed", "open"),
            step("assign", "open", "assigned"),
            step("close", "assigned", "end"),
        ]
    );
    // The migration's checkpoint holds the migrated state.
    let migrated = store.checkpoint(parked[0], 2).await.unwrap();
    let migrated: v2::Ticket = serde_json::from_str(migrated.state.get()).unwrap();
    assert_eq!((migrated.title.as_str(), migrated.priority, migrated.assignee), ("printer (filed)", 1, None));

    // A plain resume migrates too, and leaves the run waiting at its new place.
    let report = new.resume(&v2::Triage, parked[1]).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Waiting { place: "open", signals: vec!["assign"] });
    let record = store.load_run(parked[1]).await.unwrap();
    assert_eq!((record.version, &*record.place, record.step), (2, "open", 2));
    let report = new.signal(&v2::Triage, parked[1], assignment("grace")).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
}
on_every_store!(parked_on_v1_resumes_and_finishes_on_v2);

async fn a_fork_from_before_a_migration_migrates_too(store: Arc<dyn Store>) {
    let old = Runtime::with_shared_store(store.clone());
    let parked = old.start(&v1::Triage, v1::Ticket { title: "printer".into() }).await.unwrap().run_id;
    let new = Runtime::with_shared_store(store.clone());
    new.signal(&v2::Triage, parked, assignment("ada")).await.unwrap();
    assert_eq!(store.load_run(parked).await.unwrap().step, 4, "file, migrate, assign, close");

    // Step 1 is version 1's checkpoint: the fork starts at version 1 and migrates.
    let fork = new.fork(&v2::Triage, parked, 1).await.unwrap();
    assert_eq!(fork.outcome, RunOutcome::Waiting { place: "open", signals: vec!["assign"] });
    assert_eq!((fork.state.title.as_str(), fork.state.priority), ("printer (filed)", 1));
    let record = store.load_run(fork.run_id).await.unwrap();
    assert_eq!((record.version, &*record.definition_hash, record.step), (2, v2::Triage.definition().hash(), 2));
    let last = store.history(fork.run_id).await.unwrap().pop().unwrap();
    assert_eq!((&*last.transition, &*last.from, &*last.to), ("migrate v1 -> v2", "filed", "open"));
    let report = new.signal(&v2::Triage, fork.run_id, assignment("grace")).await.unwrap();
    assert_eq!((report.outcome, report.state.assignee.as_deref()), (RunOutcome::Completed, Some("grace")));

    // Edits apply to the migrated state, in the fork's one step of its own.
    let edits = ForkEdits::new().state(json!({"title": "scanner", "priority": 2, "assignee": null}));
    let fork = new.fork_with(&v2::Triage, parked, 1, edits).await.unwrap();
    assert_eq!(fork.outcome, RunOutcome::Waiting { place: "open", signals: vec!["assign"] });
    assert_eq!((fork.state.title.as_str(), fork.state.priority), ("scanner", 2));
    let steps: Vec<(String, String, String)> = store
        .history(fork.run_id)
        .await
        .unwrap()
        .iter()
        .map(|s| (s.transition.to_string(), s.from.to_string(), s.to.to_string()))
        .collect();
    let step = |t: &str, f: &str, to: &str| (t.to_owned(), f.to_owned(), to.to_owned());
    assert_eq!(steps, [step("file", "start", "filed"), step("fork_edits", "filed", "open")]);
    assert_eq!(store.load_run(fork.run_id).await.unwrap().version, 2);
    let docs = store.documents(fork.run_id).await.unwrap();
    let said: loopstack::ForkRecord =
        docs.iter().find(|d| d.doc_type == loopstack::fork::FORK_DOCUMENT).unwrap().read().unwrap();
    assert_eq!(said.changes, ["state replaced", "migrated from version 1 to 2"]);
    // A state that does not read as version 2's is refused before anything is stored.
    let before = store.list_runs(&Default::default()).await.unwrap().runs.len();
    let err = new.fork_with(&v2::Triage, parked, 1, ForkEdits::new().state(json!({"title": 7}))).await.unwrap_err();
    assert!(matches!(err, RunError::Fork(_)), "{err}");
    assert_eq!(store.list_runs(&Default::default()).await.unwrap().runs.len(), before);

    // From a step after the migration, the fork is of version 2 from the start.
    let fork = new.fork(&v2::Triage, parked, 3).await.unwrap();
    assert_eq!(fork.outcome, RunOutcome::Completed);
    assert!(
        store
            .history(fork.run_id)
            .await
            .unwrap()
            .iter()
            .filter(|s| s.step > 3)
            .all(|s| !s.transition.starts_with("migrate"))
    );
}
on_every_store!(a_fork_from_before_a_migration_migrates_too);

async fn workers_claim_only_the_versions_they_can_drive(store: Arc<dyn Store>) {
    let old = build(&store, v1::Triage);
    let new = build(&store, v2::Triage);
    let newer_run = new.submit(&v2::Triage, v2::Ticket { title: "laptop".into(), ..Default::default() }).await.unwrap();
    let older_run = old.submit(&v1::Triage, v1::Ticket { title: "desk".into() }).await.unwrap();
    assert_eq!(store.load_run(newer_run).await.unwrap().version, 2);

    // The old deploy's worker takes its own run and leaves version 2's alone.
    assert_eq!(Worker::new(old.clone()).register(v1::Triage).run_once().await.unwrap(), 1);
    let newer = store.load_run(newer_run).await.unwrap();
    assert_eq!((newer.status, newer.epoch, newer.step), (RunStatus::Queued, 0, 0), "not claimed by version 1");
    let older = store.load_run(older_run).await.unwrap();
    assert_eq!((older.status, older.version, &*older.place), (RunStatus::Waiting, 1, "filed"));
    assert!(Worker::new(old.clone()).register(v1::Triage).run_once().await.unwrap() == 0, "nothing else to take");

    // A signal for the parked run of version 1 makes it claimable; the new deploy's
    // worker takes both runs, migrating the old one before its signal is delivered.
    store
        .send_signal(older_run, "assign", serde_json::value::to_raw_value(&json!({"to": "ada"})).unwrap())
        .await
        .unwrap();
    assert_eq!(Worker::new(new.clone()).register(v2::Triage).run_once().await.unwrap(), 2);
    let older = store.load_run(older_run).await.unwrap();
    assert_eq!((older.status, older.version), (RunStatus::Completed, 2));
    let older = store.checkpoint(older_run, older.step).await.unwrap();
    let ticket: v2::Ticket = serde_json::from_str(older.state.get()).unwrap();
    assert_eq!(ticket.assignee.as_deref(), Some("ada"));
    let newer = store.load_run(newer_run).await.unwrap();
    assert_eq!((newer.status, newer.version, &*newer.place), (RunStatus::Waiting, 2, "open"));

    // Version 1's build refuses the run of version 2 outright, and changes nothing.
    let err = old.resume(&v1::Triage, newer_run).await.unwrap_err();
    let RunError::UnsupportedVersion { version: 2, current: 1, migrates_from: [], .. } = &err else {
        panic!("{err:?}")
    };
    assert!(err.to_string().contains("is of version 2, which this build cannot drive"), "{err}");
    let after = store.load_run(newer_run).await.unwrap();
    assert_eq!((after.status, after.epoch), (newer.status, newer.epoch));
}
on_every_store!(workers_claim_only_the_versions_they_can_drive);

async fn a_failed_migration_loses_nothing(store: Arc<dyn Store>) {
    let old = Runtime::with_shared_store(store.clone());
    let run = old.start(&v1::Triage, v1::Ticket { title: "scanner".into() }).await.unwrap().run_id;
    let stored = store.load_run(run).await.unwrap();

    // An explicit resume under the broken build: a typed error, the run as it was.
    let broken = build(&store, v2::Broken);
    let err = broken.resume(&v2::Broken, run).await.unwrap_err();
    let RunError::Migration { from: 1, to: 2, reason, .. } = &err else { panic!("{err:?}") };
    assert_eq!(reason, r#"cannot triage "scanner (filed)""#);
    assert!(err.to_string().contains("could not be migrated from version 1 to version 2"), "{err}");
    let after = store.load_run(run).await.unwrap();
    assert_eq!((after.status, after.version, after.epoch, after.step), (stored.status, 1, stored.epoch, stored.step));

    // Its worker, which claimed the run, fails it with the reason; the state of
    // version 1 stays.
    store.send_signal(run, "assign", serde_json::value::to_raw_value(&json!({"to": "ada"})).unwrap()).await.unwrap();
    assert_eq!(Worker::new(broken.clone()).register(v2::Broken).run_once().await.unwrap(), 1);
    let failed = store.load_run(run).await.unwrap();
    assert_eq!((failed.status, failed.version, &*failed.place), (RunStatus::Failed, 1, "filed"));
    assert!(failed.error.as_deref().unwrap().contains("from version 1 to version 2: cannot triage"), "{failed:?}");
    assert_eq!(failed.state.get(), stored.state.get());

    // A retry under a build whose migration works finishes it.
    let fixed = Runtime::with_shared_store(store.clone());
    let report = fixed.retry(&v2::Triage, run).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Waiting { place: "open", signals: vec!["assign"] });
    let report = fixed.signal(&v2::Triage, run, assignment("ada")).await.unwrap();
    assert_eq!((report.outcome, report.state.title.as_str()), (RunOutcome::Completed, "scanner (filed)"));

    // A migration that panics is an error too, and the run stays as it was.
    let run = old.start(&v1::Triage, v1::Ticket { title: "panic".into() }).await.unwrap().run_id;
    let err = broken.resume(&v2::Broken, run).await.unwrap_err();
    let RunError::Migration { reason, .. } = &err else { panic!("{err:?}") };
    assert_eq!(reason, "the migration panicked: the migration met panic (filed)");
    assert_eq!(store.load_run(run).await.unwrap().status, RunStatus::Waiting);
}
on_every_store!(a_failed_migration_loses_nothing);

/// A migration whose state cannot be stored (a NaN) is refused before the run is
/// claimed: the signal is refused, and the run waits on version 1 as it was, with
/// nothing in its inbox. A worker that claimed it fails it once, with the reason.
async fn a_migration_to_an_unstorable_state_strands_nothing(store: Arc<dyn Store>) {
    let old = Runtime::with_shared_store(store.clone());
    let run = old.start(&v1::Triage, v1::Ticket { title: "scale".into() }).await.unwrap().run_id;
    let stored = store.load_run(run).await.unwrap();

    let new = build(&store, v2::Unstorable);
    let assign = v2::UnstorableSignal::Assign(v2::Assignment { to: "ada".into() });
    let err = new.signal(&v2::Unstorable, run, assign).await.unwrap_err();
    let RunError::Migration { from: 1, to: 2, reason, .. } = &err else { panic!("{err:?}") };
    assert!(reason.contains("cannot be stored") && reason.contains("float"), "{reason}");
    let err = new.resume(&v2::Unstorable, run).await.unwrap_err();
    assert!(matches!(err, RunError::Migration { .. }), "{err:?}");
    let after = store.load_run(run).await.unwrap();
    assert_eq!(
        (after.status, after.version, after.epoch, after.step, after.lease_until),
        (RunStatus::Waiting, 1, stored.epoch, stored.step, None)
    );
    assert!(store.inbox(run).await.unwrap().pending.is_empty(), "the signal was refused, not stored");

    // A signal stored past this build (by another one's API) makes the run claimable.
    store.send_signal(run, "assign", serde_json::value::to_raw_value(&json!({"to": "ada"})).unwrap()).await.unwrap();
    let worker = Worker::new(new.clone()).register(v2::Unstorable);
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let failed = store.load_run(run).await.unwrap();
    assert_eq!((failed.status, failed.version, failed.lease_until), (RunStatus::Failed, 1, None));
    assert!(failed.error.as_deref().unwrap().contains("from version 1 to version 2: the migrated state"), "{failed:?}");
    assert_eq!(failed.state.get(), stored.state.get());
    assert_eq!(worker.run_once().await.unwrap(), 0, "a failed run is not claimed again");
}
on_every_store!(a_migration_to_an_unstorable_state_strands_nothing);

/// A migration that maps a parked run to `End` completes it in the store and tells
/// its parent, as a transition to `end` does.
async fn a_migration_to_end_completes_the_run_and_tells_its_parent(store: Arc<dyn Store>) {
    // A ticket waiting for its sub-ticket, which is of version 1 and parked.
    let old = Runtime::with_shared_store(store.clone()).register(v1::Triage);
    let parent = old.start(&v1::Triage, v1::Ticket { title: "desk".into() }).await.unwrap().run_id;
    let child = RunId::new();
    old.create_child(parent, child, "triage", json!({"title": "printer"}), "close").await.unwrap();
    let parked = old.resume(&v1::Triage, child).await.unwrap();
    assert_eq!(parked.outcome, RunOutcome::Waiting { place: "filed", signals: vec!["close"] });

    let new = build(&store, v2::Closing);
    let report = new.resume(&v2::Closing, child).await.unwrap();
    assert_eq!((report.outcome, report.steps), (RunOutcome::Completed, 2));
    let record = store.load_run(child).await.unwrap();
    assert_eq!(
        (record.status, record.version, &*record.place, record.lease_until),
        (RunStatus::Completed, 2, "end", None)
    );
    let told: Vec<loopstack::ChildEnded> = store
        .inbox(parent)
        .await
        .unwrap()
        .pending
        .iter()
        .map(|s| serde_json::from_str(s.payload.get()).unwrap())
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!((told[0].child, told[0].status), (child, RunStatus::Completed));
    assert_eq!(told[0].output_as::<v2::Ticket>().unwrap().title, "printer (filed)");
}
on_every_store!(a_migration_to_end_completes_the_run_and_tells_its_parent);

/// A fork of a finished run's last step stands at `end`: it is completed, in the
/// store too, with edits (a step of its own, from `end` to `end`) or without.
async fn a_fork_of_a_finished_runs_last_step_is_completed(store: Arc<dyn Store>) {
    let runtime = Runtime::with_shared_store(store.clone());
    let run = runtime.start(&v1::Triage, v1::Ticket { title: "mouse".into() }).await.unwrap().run_id;
    let done = runtime.signal(&v1::Triage, run, v1::TriageSignal::Close).await.unwrap();
    assert_eq!((done.outcome, done.steps), (RunOutcome::Completed, 2));

    let plain = runtime.fork(&v1::Triage, run, 2).await.unwrap();
    let edits = ForkEdits::new().state(json!({"title": "keyboard"}));
    let edited = runtime.fork_with(&v1::Triage, run, 2, edits).await.unwrap();
    for (fork, title) in [(plain, "mouse (filed)"), (edited, "keyboard")] {
        assert_eq!((fork.outcome, fork.state.title.as_str()), (RunOutcome::Completed, title));
        let record = store.load_run(fork.run_id).await.unwrap();
        assert_eq!((record.status, &*record.place, record.lease_until), (RunStatus::Completed, "end", None));
    }
    assert_eq!(Worker::new(runtime.clone()).register(v1::Triage).run_once().await.unwrap(), 0, "nothing to drive");
}
on_every_store!(a_fork_of_a_finished_runs_last_step_is_completed);

/// A fork of a step the run does not have is refused with the fork's error, with
/// edits or without, and stores nothing.
async fn a_fork_of_a_step_the_run_does_not_have_is_refused(store: Arc<dyn Store>) {
    let runtime = Runtime::with_shared_store(store.clone());
    let run = runtime.start(&v1::Triage, v1::Ticket { title: "lamp".into() }).await.unwrap().run_id;
    let before = store.list_runs(&Default::default()).await.unwrap().runs.len();
    let plain = runtime.fork(&v1::Triage, run, 7).await.unwrap_err();
    let edited = runtime.fork_with(&v1::Triage, run, 7, ForkEdits::new().state(json!({"title": "x"}))).await;
    for err in [plain, edited.unwrap_err()] {
        let RunError::Fork(ForkError::UnknownStep { run_id, step: 7, last: 1 }) = err else { panic!("{err:?}") };
        assert_eq!(run_id, run);
    }
    assert_eq!(store.list_runs(&Default::default()).await.unwrap().runs.len(), before);
}
on_every_store!(a_fork_of_a_step_the_run_does_not_have_is_refused);

/// A run of version 1 under a version 2 without a migration from it: refused, typed.
#[tokio::test]
async fn a_version_nothing_migrates_is_refused() {
    struct Fresh;
    #[workflow(name = "triage", version = 2)]
    impl Fresh {
        #[transition(to = End)]
        async fn done(&self, _t: &mut v2::Ticket, _cx: &mut RunContext) -> Result<()> {
            Ok(())
        }
    }
    let runtime = Runtime::new();
    let run = runtime.start(&v1::Triage, v1::Ticket::default()).await.unwrap().run_id;
    let err = runtime.resume(&Fresh, run).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "run {run} of workflow `triage` is of version 1, which this build cannot drive: it drives version 2, and \
             migrates from no other version"
        )
    );
    assert_eq!(Fresh.definition().migrates_from(), &[] as &[u32]);
    assert_eq!((v2::Triage.definition().version(), v2::Triage.definition().migrates_from()), (2, &[1][..]));
}
