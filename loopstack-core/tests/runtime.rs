//! Routing and runtime behaviour, with a hand-written workflow (no macros), so the
//! core is tested on its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use loopstack_core::*;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Notify;

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct State {
    high: bool,
    low: bool,
    wait: bool,
    spin: bool,
    fail: bool,
    panic: bool,
    log: Vec<String>,
    approved_by: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Approval {
    approved_by: String,
}

#[derive(Serialize, Deserialize)]
struct Note {
    text: String,
}

impl DocumentType for Note {
    const TYPE: &'static str = "note";
    fn default_tags() -> &'static [&'static str] {
        &["notes"]
    }
}

/// Drops to signal that the future holding it was dropped.
struct DropFlag(Arc<AtomicBool>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct Demo {
    /// `finish` hangs once while this is set.
    hang: AtomicBool,
    started: Notify,
    dropped: Arc<AtomicBool>,
}

impl Demo {
    fn hanging() -> Self {
        Self { hang: AtomicBool::new(true), ..Self::default() }
    }
}

static DEF: Definition = Definition::new(
    "demo",
    &[START, "a", "b", "waiting", END],
    &[
        TransitionDef::new("begin", &[START], "a"),
        TransitionDef::new("low_first", &["a"], "b").guard("low"),
        TransitionDef::new("low_second", &["a"], "b").guard("low"),
        TransitionDef::new("high", &["a"], "b").priority(10).guard("high"),
        TransitionDef::new("park", &["a"], "waiting").guard("wait"),
        TransitionDef::new("approve", &["waiting"], END).wait(|| json!({"type": "object"})),
        TransitionDef::new("spin", &["b"], "b").priority(1).guard("spin"),
        TransitionDef::new("finish", &["b"], END),
    ],
);

impl Workflow for Demo {
    type State = State;
    type Input = State;

    fn definition(&self) -> &'static Definition {
        &DEF
    }

    fn init(&self, input: State) -> State {
        input
    }

    fn guard(&self, t: usize, s: &State) -> bool {
        match t {
            1 | 2 => s.low,
            3 => s.high,
            4 => s.wait,
            6 => s.spin,
            _ => true,
        }
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
                "approve" => {
                    // An await point, so two concurrent signals interleave here.
                    tokio::task::yield_now().await;
                    let a: Approval = serde_json::from_value(payload.unwrap_or(Value::Null))
                        .map_err(|e| TransitionError::InvalidPayload(e.to_string()))?;
                    if a.approved_by == "mallory" {
                        return Err(TransitionError::failed("mallory may not approve"));
                    }
                    s.approved_by = Some(a.approved_by);
                }
                "finish" if s.fail => return Err(TransitionError::failed("the finish line moved")),
                "finish" if s.panic => panic!("the finish line exploded"),
                "finish" if self.hang.swap(false, Ordering::SeqCst) => {
                    let _flag = DropFlag(self.dropped.clone());
                    self.started.notify_one();
                    std::future::pending::<()>().await;
                }
                _ => {}
            }
            Ok(())
        })
    }
}

fn state(f: impl FnOnce(&mut State)) -> State {
    let mut s = State::default();
    f(&mut s);
    s
}

#[test]
fn definition_checks_out() {
    assert_eq!(DEF.check(), Ok(()));
}

#[test]
fn priority_wins_over_declaration_order() {
    let s = state(|s| {
        s.low = true;
        s.high = true;
    });
    assert_eq!(Demo::default().next_transition("a", &s).unwrap(), Some("high"));
}

#[test]
fn ties_fire_in_declaration_order() {
    let s = state(|s| s.low = true);
    assert_eq!(Demo::default().next_transition("a", &s).unwrap(), Some("low_first"));
}

#[test]
fn false_guards_fall_through_to_the_next_transition() {
    let s = state(|s| s.wait = true);
    assert_eq!(Demo::default().next_transition("a", &s).unwrap(), Some("park"));
    // At `b`, `spin` (priority 1) is tried first; its guard is false, so `finish` fires.
    assert_eq!(Demo::default().next_transition("b", &State::default()).unwrap(), Some("finish"));
}

#[test]
fn routing_reports_waits_dead_ends_and_unknown_places() {
    let wf = Demo::default();
    assert_eq!(wf.route("waiting", &State::default()).unwrap(), Route::Wait { signals: vec!["approve"] });
    assert_eq!(
        wf.route("a", &State::default()).unwrap(),
        Route::DeadEnd { false_guards: vec!["high", "low", "low", "wait"] }
    );
    assert_eq!(wf.route("end", &State::default()).unwrap(), Route::End);
    let err = wf.route("nowhere", &State::default()).unwrap_err();
    assert!(err.to_string().contains("has no place `nowhere`"), "{err}");
}

#[tokio::test]
async fn a_run_reaches_end_and_commits_every_step() {
    let rt = Runtime::new();
    let report = rt.start(&Demo::default(), state(|s| s.high = true)).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(report.state.log, ["begin", "high", "finish"]);
    assert_eq!(report.steps, 3);

    let record = rt.store().load_run(report.run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    assert_eq!(record.place, "end");
    let history = rt.store().history(report.run_id).await.unwrap();
    let taken: Vec<_> = history.iter().map(|h| (&*h.transition, &*h.from, &*h.to)).collect();
    assert_eq!(taken, [("begin", "start", "a"), ("high", "a", "b"), ("finish", "b", "end")]);
    assert_eq!(serde_json::from_str::<State>(record.state.get()).unwrap(), report.state);

    let docs = rt.store().documents(report.run_id).await.unwrap();
    let texts: Vec<String> = docs.iter().map(|d| d.read::<Note>().unwrap().text).collect();
    assert_eq!(texts, ["begin ran", "high ran", "finish ran"]);
    assert!(docs.iter().all(|d| d.doc_type == "note" && d.has_tag("notes")));
    assert_eq!(docs.iter().map(|d| d.step).collect::<Vec<_>>(), [1, 2, 3]);
}

#[tokio::test]
async fn a_dead_end_fails_naming_workflow_place_and_false_guards() {
    let rt = Runtime::new();
    let err = rt.start(&Demo::default(), State::default()).await.unwrap_err();
    let RunError::DeadEnd { workflow, place, ref false_guards, run_id } = err else { panic!("{err:?}") };
    assert_eq!((workflow, place), ("demo", "a"));
    assert_eq!(false_guards, &["high", "low", "low", "wait"]);
    let msg = err.to_string();
    assert!(msg.contains("`demo`") && msg.contains("place `a`") && msg.contains("high, low, low, wait"), "{msg}");
    let record = rt.store().load_run(run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Failed);
    assert_eq!(record.place, "a", "the failed run keeps its last checkpoint");
}

#[tokio::test]
async fn the_step_limit_ends_a_runaway_loop() {
    let rt = Runtime::new();
    let err = rt
        .start(
            &Demo::default(),
            state(|s| {
                s.high = true;
                s.spin = true;
            }),
        )
        .max_steps(20)
        .await
        .unwrap_err();
    let RunError::StepLimit { limit, place, run_id, .. } = err else { panic!("{err:?}") };
    assert_eq!((limit, place), (20, "b"));
    assert_eq!(rt.store().load_run(run_id).await.unwrap().step, 20);
}

#[tokio::test]
async fn the_default_step_limit_is_one_thousand() {
    let rt = Runtime::new();
    let err = rt
        .start(
            &Demo::default(),
            state(|s| {
                s.high = true;
                s.spin = true;
            }),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::StepLimit { limit: 1000, .. }), "{err:?}");
}

#[tokio::test]
async fn an_error_in_a_transition_fails_the_run_and_keeps_nothing_of_it() {
    let rt = Runtime::new();
    let err = rt
        .start(
            &Demo::default(),
            state(|s| {
                s.high = true;
                s.fail = true;
            }),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("`demo`") && msg.contains("`finish`") && msg.contains("place `b`"), "{msg}");
    assert_eq!(err.transition_source().unwrap().to_string(), "the finish line moved");
    let run_id = err.run_id().unwrap();
    let record = rt.store().load_run(run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Failed);
    assert_eq!(record.place, "b");
    assert!(record.error.unwrap().contains("the finish line moved"));
    // The failed transition's document was not committed.
    let docs = rt.store().documents(run_id).await.unwrap();
    assert_eq!(docs.len(), 2);
}

#[tokio::test]
async fn wait_and_signal_with_a_typed_payload() {
    let rt = Runtime::new();
    let wf = Demo::default();
    let report = rt.start(&wf, state(|s| s.wait = true)).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Waiting { place: "waiting", signals: vec!["approve"] });
    let run_id = report.run_id;
    assert_eq!(rt.store().load_run(run_id).await.unwrap().status, RunStatus::Waiting);

    // An unknown signal is refused and the run keeps waiting.
    let err = rt.signal(&wf, run_id, ("reject", json!({}))).await.unwrap_err();
    assert!(matches!(&err, RunError::UnknownSignal { expected, .. } if expected == &["approve"]), "{err:?}");

    // A payload that does not deserialize is refused and the run keeps waiting.
    let err = rt.signal(&wf, run_id, ("approve", json!({"approved_by": 7}))).await.unwrap_err();
    assert!(matches!(&err, RunError::InvalidSignalPayload { signal: "approve", .. }), "{err:?}");
    assert!(err.to_string().contains("still waiting"));
    let record = rt.store().load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.step), (RunStatus::Waiting, "waiting", 2));
    assert_eq!(rt.store().documents(run_id).await.unwrap().len(), 2);

    let report = rt.signal(&wf, run_id, ("approve", json!({"approved_by": "ada"}))).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(report.state.approved_by.as_deref(), Some("ada"));
    assert_eq!(report.state.log, ["begin", "park", "approve"]);

    // A finished run takes no more signals.
    let err = rt.signal(&wf, run_id, ("approve", json!({"approved_by": "bob"}))).await.unwrap_err();
    assert!(matches!(err, RunError::InvalidStatus { status: RunStatus::Completed, .. }), "{err:?}");
}

#[tokio::test]
async fn cancelling_stops_the_run_at_the_next_await_and_drops_its_work() {
    let rt = Runtime::new();
    let wf = Demo::hanging();
    let token = CancellationToken::new();
    let run_id = RunId::new();
    let run = rt.start(&wf, state(|s| s.high = true)).run_id(run_id).cancel_on(token.clone());
    let (result, ()) = tokio::join!(run.into_future(), async {
        wf.started.notified().await;
        assert!(!wf.dropped.load(Ordering::SeqCst));
        token.cancel();
    });
    let err = result.unwrap_err();
    assert!(matches!(err, RunError::Cancelled { place: "b", .. }), "{err:?}");
    assert!(wf.dropped.load(Ordering::SeqCst), "the transition's future was dropped");
    let record = rt.store().load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.step), (RunStatus::Cancelled, "b", 2));
    // A cancelled run is finished.
    let err = rt.resume(&wf, run_id).await.unwrap_err();
    assert!(matches!(err, RunError::InvalidStatus { status: RunStatus::Cancelled, .. }), "{err:?}");
}

#[tokio::test]
async fn a_crashed_run_resumes_from_its_last_checkpoint() {
    let rt = Runtime::new();
    let wf = Demo::hanging();
    let run_id = RunId::new();
    // A crash: the driving future is dropped mid-transition, and the run stays
    // `running` at its last checkpoint.
    {
        let run = rt.start(&wf, state(|s| s.high = true)).run_id(run_id).into_future();
        tokio::select! {
            _ = run => panic!("the run cannot finish while `finish` hangs"),
            () = wf.started.notified() => {}
        }
    }
    assert!(wf.dropped.load(Ordering::SeqCst));
    let record = rt.store().load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.step), (RunStatus::Running, "b", 2));

    // Another runtime over the same store picks the run up where it stopped.
    let other = Runtime::with_shared_store(rt.store().clone());
    let report = other.resume(&wf, run_id).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(report.state.log, ["begin", "high", "finish"]);
    let docs = other.store().documents(run_id).await.unwrap();
    let texts: Vec<String> = docs.iter().map(|d| d.read::<Note>().unwrap().text).collect();
    assert_eq!(texts, ["begin ran", "high ran", "finish ran"], "no document was lost or doubled");
}

#[tokio::test]
async fn a_run_of_another_workflow_is_refused() {
    struct Other;
    static ODEF: Definition = Definition::new("other", &[START, END], &[TransitionDef::new("go", &[START], END)]);
    impl Workflow for Other {
        type State = State;
        type Input = State;
        fn definition(&self) -> &'static Definition {
            &ODEF
        }
        fn init(&self, s: State) -> State {
            s
        }
        fn guard(&self, _: usize, _: &State) -> bool {
            true
        }
        fn transition<'a>(
            &'a self,
            _: usize,
            _: &'a mut State,
            _: &'a mut RunContext,
            _: Option<Value>,
        ) -> BoxFuture<'a, Result<(), TransitionError>> {
            Box::pin(async { Ok(()) })
        }
    }
    let rt = Runtime::new();
    let report = rt.start(&Demo::default(), state(|s| s.wait = true)).await.unwrap();
    let err = rt.resume(&Other, report.run_id).await.unwrap_err();
    assert!(matches!(err, RunError::Mismatch { .. }), "{err:?}");
    assert!(err.to_string().contains("belongs to workflow `demo`"), "{err}");
}

#[tokio::test]
async fn keyed_documents_replace_in_place_and_keep_history() {
    struct Keyed;
    static KDEF: Definition = Definition::new(
        "keyed",
        &[START, "one", END],
        &[TransitionDef::new("first", &[START], "one"), TransitionDef::new("second", &["one"], END)],
    );
    impl Workflow for Keyed {
        type State = ();
        type Input = ();
        fn definition(&self) -> &'static Definition {
            &KDEF
        }
        fn init(&self, (): ()) {}
        fn guard(&self, _: usize, (): &()) -> bool {
            true
        }
        fn transition<'a>(
            &'a self,
            t: usize,
            _: &'a mut (),
            cx: &'a mut RunContext,
            _: Option<Value>,
        ) -> BoxFuture<'a, Result<(), TransitionError>> {
            Box::pin(async move {
                let save = |cx: &mut RunContext, key: &str, text: &str| {
                    cx.save_with(&Note { text: text.into() }, SaveOptions::new().key(key).tag("t").meta("by", t))
                        .map(|_| ())
                        .map_err(TransitionError::failed)
                };
                if t == 0 {
                    save(cx, "plan", "draft")?;
                    save(cx, "other", "x")?;
                    save(cx, "plan", "draft 2")?; // replaced within the same transition
                } else {
                    assert_eq!(cx.get::<Note>("plan").unwrap().unwrap().text, "draft 2");
                    save(cx, "plan", "final")?;
                    assert_eq!(cx.documents_of::<Note>().unwrap().len(), 2);
                }
                Ok(())
            })
        }
    }
    let rt = Runtime::new();
    let report = rt.start(&Keyed, ()).await.unwrap();
    let docs = rt.store().documents(report.run_id).await.unwrap();
    let current: Vec<(Option<&str>, String, u32)> =
        docs.iter().map(|d| (d.key.as_deref(), d.read::<Note>().unwrap().text, d.version)).collect();
    assert_eq!(current, [(Some("plan"), "final".into(), 3), (Some("other"), "x".into(), 1)]);
    assert_eq!(docs[0].metadata.get("by"), Some(json!(1)));
    assert!(docs[0].has_tag("notes") && docs[0].has_tag("t"));
    let history = rt.store().document_history(report.run_id, "note", "plan").await.unwrap();
    let versions: Vec<(u32, String)> = history.iter().map(|d| (d.version, d.read::<Note>().unwrap().text)).collect();
    assert_eq!(versions, [(1, "draft".into()), (2, "draft 2".into()), (3, "final".into())]);
}

#[test]
fn mermaid_draws_the_table() {
    let m = Demo::default().mermaid();
    assert!(m.starts_with("stateDiagram-v2\n"));
    assert!(m.contains("    [*] --> a: begin\n"));
    assert!(m.contains("    a --> b: high [high] (priority 10)\n"));
    assert!(m.contains("    waiting --> [*]: approve (wait)\n"));
    assert!(m.contains("    b --> b: spin [spin] (priority 1)\n"));
}

#[test]
fn check_reports_shadowing_and_unreachable_places() {
    static BAD: Definition = Definition::new(
        "bad",
        &[START, "a", "island", "trap", END],
        &[
            TransitionDef::new("go", &[START], "a"),
            TransitionDef::new("always", &["a"], END),
            TransitionDef::new("never", &["a"], "trap").guard("g"),
            TransitionDef::new("stuck", &["trap"], "trap"),
        ],
    );
    let errors = BAD.check().unwrap_err();
    assert!(errors.contains(&"place `island` cannot be reached from `start`".to_owned()), "{errors:?}");
    assert!(errors.contains(&"`end` cannot be reached from place `trap`".to_owned()), "{errors:?}");
    assert!(
        errors.contains(
            &"transition `never` from `a` can never fire: `always` has no guard and is tried first".to_owned()
        ),
        "{errors:?}"
    );
}

#[tokio::test]
async fn a_panicking_transition_fails_its_run_not_the_task() {
    let rt = Runtime::new();
    let err = rt
        .start(
            &Demo::default(),
            state(|s| {
                s.high = true;
                s.panic = true;
            }),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::Transition { transition: "finish", place: "b", .. }), "{err:?}");
    assert!(err.to_string().contains("the transition panicked: the finish line exploded"), "{err}");
    let record = rt.store().load_run(err.run_id().unwrap()).await.unwrap();
    assert_eq!((record.status, &*record.place), (RunStatus::Failed, "b"));
}

#[tokio::test]
async fn of_two_concurrent_signals_one_is_delivered_and_the_other_never() {
    let rt = Runtime::new();
    let wf = Demo::default();
    let run_id = rt.start(&wf, state(|s| s.wait = true)).await.unwrap().run_id;
    let (a, b) = tokio::join!(
        rt.signal(&wf, run_id, ("approve", json!({"approved_by": "ada"}))).into_future(),
        rt.signal(&wf, run_id, ("approve", json!({"approved_by": "bob"}))).into_future(),
    );
    let completed = [&a, &b].iter().filter(|r| matches!(r, Ok(r) if r.outcome == RunOutcome::Completed)).count();
    assert_eq!(completed, 1, "exactly one signal drives the run: {a:?} {b:?}");
    // The other was queued behind the winner's drive, or came after the run ended.
    let other = if matches!(&a, Ok(r) if r.outcome == RunOutcome::Completed) { &b } else { &a };
    match other {
        Ok(r) => assert!(matches!(r.outcome, RunOutcome::Queued { .. }), "{r:?}"),
        Err(e) => assert!(matches!(e, RunError::InvalidStatus { status: RunStatus::Completed, .. }), "{e:?}"),
    }
    let record = rt.store().load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.error.as_deref()), (RunStatus::Completed, None));
    assert_eq!(rt.store().history(run_id).await.unwrap().len(), 3);
    let signals = rt.store().signals(run_id).await.unwrap();
    let delivered = signals.iter().filter(|s| matches!(s.status, SignalStatus::Delivered { step: 3 })).count();
    assert_eq!(delivered, 1, "{signals:?}");
    assert!(signals.iter().all(|s| s.status != SignalStatus::Pending), "{signals:?}");
}

#[tokio::test]
async fn a_wait_transition_that_fails_refuses_the_signal_and_the_run_keeps_waiting() {
    let rt = Runtime::new();
    let wf = Demo::default();
    let run_id = rt.start(&wf, state(|s| s.wait = true)).await.unwrap().run_id;
    let err = rt.signal(&wf, run_id, ("approve", json!({"approved_by": "mallory"}))).await.unwrap_err();
    assert!(matches!(&err, RunError::SignalRefused { signal: "approve", .. }), "{err:?}");
    assert_eq!(err.transition_source().unwrap().to_string(), "mallory may not approve");
    let record = rt.store().load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.step), (RunStatus::Waiting, "waiting", 2));
    assert_eq!(rt.store().documents(run_id).await.unwrap().len(), 2, "the refused transition saved nothing");
    let signals = rt.store().signals(run_id).await.unwrap();
    assert!(matches!(&signals[0].status, SignalStatus::Rejected { reason } if reason.contains("mallory")));

    // The run still takes a good signal.
    let report = rt.signal(&wf, run_id, ("approve", json!({"approved_by": "ada"}))).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(report.state.approved_by.as_deref(), Some("ada"));
}

#[tokio::test]
async fn a_signal_sent_before_the_run_parks_is_delivered_when_it_does() {
    let rt = Runtime::new();
    let wf = Demo::default();
    let run_id = rt.start(&wf, state(|s| s.wait = true)).await.unwrap().run_id;
    // Take the run as another driver would (a resume), so it is `running` while the
    // signal arrives.
    let claimed = rt.store().claim(run_id, &Claim::new([RunStatus::Waiting])).await.unwrap();
    assert_eq!(claimed.status, RunStatus::Running);
    let queued = rt.signal(&wf, run_id, ("approve", json!({"approved_by": "ada"}))).await.unwrap();
    assert!(matches!(queued.outcome, RunOutcome::Queued { signal: 1 }), "{queued:?}");
    // That driver died; resuming delivers the stored signal exactly once.
    let report = rt.resume(&wf, run_id).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(report.state.approved_by.as_deref(), Some("ada"));
    let signals = rt.store().signals(run_id).await.unwrap();
    assert_eq!(signals.len(), 1);
    assert_eq!(signals[0].status, SignalStatus::Delivered { step: 3 });
}

#[tokio::test]
async fn a_panicking_guard_fails_the_run_instead_of_unwinding() {
    struct Boom;
    static BOOM: Definition = Definition::new(
        "boom",
        &[START, "a", END],
        &[TransitionDef::new("go", &[START], "a"), TransitionDef::new("out", &["a"], END).guard("explodes")],
    );
    impl Workflow for Boom {
        type State = u32;
        type Input = u32;
        fn definition(&self) -> &'static Definition {
            &BOOM
        }
        fn init(&self, n: u32) -> u32 {
            n
        }
        fn guard(&self, t: usize, _: &u32) -> bool {
            if t == 1 {
                panic!("the guard blew up");
            }
            true
        }
        fn transition<'a>(
            &'a self,
            _: usize,
            _: &'a mut u32,
            _: &'a mut RunContext,
            _: Option<Value>,
        ) -> BoxFuture<'a, Result<(), TransitionError>> {
            Box::pin(async { Ok(()) })
        }
    }
    let rt = Runtime::new();
    let err = rt.start(&Boom, 0).await.unwrap_err();
    assert!(matches!(&err, RunError::GuardPanicked { place: "a", message, .. } if message == "the guard blew up"));
    let record = rt.store().load_run(err.run_id().unwrap()).await.unwrap();
    assert_eq!((record.status, &*record.place), (RunStatus::Failed, "a"));
    assert!(record.error.unwrap().contains("the guard blew up"));
}

#[tokio::test]
async fn retry_restarts_a_failed_run_from_its_last_checkpoint() {
    let rt = Runtime::new();
    let wf = Demo::default();
    let err = rt
        .start(
            &wf,
            state(|s| {
                s.high = true;
                s.fail = true;
            }),
        )
        .await
        .unwrap_err();
    let run_id = err.run_id().unwrap();
    // Resuming a failed run is refused; retrying it is what restarts it.
    let refused = rt.resume(&wf, run_id).await.unwrap_err();
    assert!(matches!(refused, RunError::InvalidStatus { status: RunStatus::Failed, .. }), "{refused:?}");
    // It fails again the same way (the state still says `fail`), at the same place,
    // and its first two documents are still the only ones.
    let again = rt.retry(&wf, run_id).await.unwrap_err();
    assert!(matches!(again, RunError::Transition { transition: "finish", .. }), "{again:?}");
    assert_eq!(rt.store().documents(run_id).await.unwrap().len(), 2);
    // A retried run counts its steps from the retry: a limit of 1 is enough to end.
    let ok = Runtime::new();
    let wf2 = Demo::hanging();
    let run_id = RunId::new();
    let token = CancellationToken::new();
    let run = ok.start(&wf2, state(|s| s.high = true)).run_id(run_id).cancel_on(token.clone());
    let (result, ()) = tokio::join!(run.into_future(), async {
        wf2.started.notified().await;
        token.cancel();
    });
    assert!(matches!(result.unwrap_err(), RunError::Cancelled { place: "b", .. }));
    assert_eq!(ok.store().load_run(run_id).await.unwrap().status, RunStatus::Cancelled);
    let report = ok.retry(&wf2, run_id).max_steps(1).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(report.state.log, ["begin", "high", "finish"]);
    assert_eq!(report.steps, 3);
}

#[tokio::test]
async fn the_step_limit_counts_the_steps_of_one_drive() {
    let rt = Runtime::new();
    let wf = Demo::default();
    let run_id = rt.start(&wf, state(|s| s.wait = true)).max_steps(2).await.unwrap().run_id;
    // Two steps to park, then one more after the signal: each drive has its own budget.
    let report = rt.signal(&wf, run_id, ("approve", json!({"approved_by": "ada"}))).max_steps(1).await.unwrap();
    assert_eq!((report.outcome, report.steps), (RunOutcome::Completed, 3));
}

#[tokio::test]
async fn fork_starts_a_new_run_from_a_past_checkpoint_with_its_documents() {
    let rt = Runtime::new();
    let wf = Demo::default();
    let source = rt.start(&wf, state(|s| s.high = true)).await.unwrap();
    let fork = rt.fork(&wf, source.run_id, 2).await.unwrap();
    assert_ne!(fork.run_id, source.run_id);
    assert_eq!(fork.outcome, RunOutcome::Completed);
    assert_eq!(fork.state.log, ["begin", "high", "finish"]);
    let record = rt.store().load_run(fork.run_id).await.unwrap();
    assert_eq!(record.forked_from, Some((source.run_id, 2)));
    let docs = rt.store().documents(fork.run_id).await.unwrap();
    assert_eq!(
        docs.iter().map(|d| (d.step, d.read::<Note>().unwrap().text)).collect::<Vec<_>>(),
        [(1, "begin ran".to_owned()), (2, "high ran".to_owned()), (3, "finish ran".to_owned())]
    );
    let history = rt.store().history(fork.run_id).await.unwrap();
    assert_eq!(history.iter().map(|h| &*h.transition).collect::<Vec<_>>(), ["begin", "high", "finish"]);
    // A step the source never reached is the fork's error, naming the last one.
    let err = rt.fork(&wf, source.run_id, 9).await.unwrap_err();
    assert!(matches!(err, RunError::Fork(ForkError::UnknownStep { step: 9, last: 3, .. })), "{err:?}");
}

#[tokio::test]
async fn cancel_ends_a_waiting_run_and_refuses_later_signals() {
    let rt = Runtime::new();
    let wf = Demo::default();
    let run_id = rt.start(&wf, state(|s| s.wait = true)).await.unwrap().run_id;
    rt.cancel(run_id, "nobody will approve this").await.unwrap();
    let record = rt.store().load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.error.as_deref()), (RunStatus::Cancelled, Some("nobody will approve this")));
    let err = rt.signal(&wf, run_id, ("approve", json!({"approved_by": "ada"}))).await.unwrap_err();
    assert!(matches!(err, RunError::InvalidStatus { status: RunStatus::Cancelled, .. }), "{err:?}");
}

#[tokio::test]
async fn a_run_at_a_place_the_table_lost_names_the_place_and_both_hashes() {
    let rt = Runtime::new();
    let wf = Demo::default();
    let run_id = rt.start(&wf, state(|s| s.wait = true)).await.unwrap().run_id;
    // The same workflow name, a table without the `waiting` place: a later build.
    struct Later;
    static LATER: Definition = Definition::new("demo", &[START, END], &[TransitionDef::new("begin", &[START], END)]);
    impl Workflow for Later {
        type State = State;
        type Input = State;
        fn definition(&self) -> &'static Definition {
            &LATER
        }
        fn init(&self, s: State) -> State {
            s
        }
        fn guard(&self, _: usize, _: &State) -> bool {
            true
        }
        fn transition<'a>(
            &'a self,
            _: usize,
            _: &'a mut State,
            _: &'a mut RunContext,
            _: Option<Value>,
        ) -> BoxFuture<'a, Result<(), TransitionError>> {
            Box::pin(async { Ok(()) })
        }
    }
    let err = rt.resume(&Later, run_id).await.unwrap_err();
    let RunError::DefinitionChanged { ref place, ref stored_hash, ref current_hash, .. } = err else {
        panic!("{err:?}")
    };
    assert_eq!(place, "waiting");
    assert_eq!(stored_hash, DEF.hash());
    assert_eq!(current_hash, LATER.hash());
    assert_ne!(stored_hash, current_hash);
    let msg = err.to_string();
    assert!(msg.contains("`waiting`") && msg.contains(DEF.hash()) && msg.contains(LATER.hash()), "{msg}");
    // The run was left as it was.
    assert_eq!(rt.store().load_run(run_id).await.unwrap().status, RunStatus::Waiting);
}

#[test]
fn the_table_hash_is_stable_and_tells_tables_apart() {
    // Pins the hash: runs store the hash of their table, and a different value for the
    // same table would make every waiting run look changed (`DefinitionChanged`), so
    // this literal (computed once from the code) must never change.
    assert_eq!(DEF.hash(), "c0e750e57ddc3705");
    let same = Definition::new("demo", DEF.places(), DEF.transitions());
    assert_eq!(same.hash(), DEF.hash());
    let other = Definition::new("demo", DEF.places(), &DEF.transitions()[..7]);
    assert_ne!(other.hash(), DEF.hash());
}
