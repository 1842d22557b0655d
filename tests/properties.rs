//! Property tests of hostile input, against the in-memory store, SQLite and PostgreSQL
//! (the server of `LOOPSTACK_DATABASE_URL`, by default the local one `.ci/run` starts;
//! the tests fail, never skip, without it):
//!
//! - random JSON (any depth up to ~200, floats of every kind, unicode, big integers)
//!   as state, document content, metadata and tool arguments either round-trips
//!   exactly through a checkpoint, or is refused with an error; never a panic, never
//!   a checkpoint that does not load;
//! - random sequences of cancel, signal (valid, invalid payload, unknown name,
//!   refused) and resume (by the runtime that started the run, or by a fresh one, as
//!   after a restart) on one run keep the store's invariants after every step.
//!
//! Every case is a run of its own (a fresh run id), so each store is shared by all
//! the cases of a test: PostgreSQL gets one schema per test function, dropped at its
//! end, and fewer cases, as its round trips cost more.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use loopstack_core::serde_json::{self, Value, json};
use loopstack_core::*;
use loopstack_llm::{ContentBlock, LlmDelegateToolCalls, Message, Role, ToolUse};
use loopstack_store::SqliteStore;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

mod common;

/// Cases per test on the in-memory store and on SQLite.
const CASES: u32 = 128;
/// Cases per test on PostgreSQL, whose every query is a round trip to the server.
const PG_CASES: u32 = 32;

fn config(cases: u32) -> Config {
    Config { cases, failure_persistence: None, ..Config::default() }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Runs `test` on each store in turn (memory, SQLite, PostgreSQL), with the number of
/// cases to run on it; each store is shared by all of that test's cases. The
/// PostgreSQL schema is dropped even when `test` fails, and a failure names the store.
fn on_each_store(rt: &tokio::runtime::Runtime, tag: &str, test: impl Fn(&Arc<dyn Store>, u32) -> Result<(), String>) {
    let sqlite = rt.block_on(SqliteStore::memory()).expect("an in-memory SQLite store");
    for (name, store) in [("memory", Arc::new(MemoryStore::new()) as Arc<dyn Store>), ("sqlite", Arc::new(sqlite))] {
        test(&store, CASES).unwrap_or_else(|e| panic!("{name} store: {e}"));
    }
    let (schema, pg) = rt.block_on(common::postgres::TestSchema::connect(&format!("prop_{tag}")));
    let store: Arc<dyn Store> = Arc::new(pg.clone());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test(&store, PG_CASES)));
    drop(store);
    rt.block_on(async {
        pg.pool().close().await;
        schema.drop().await;
    });
    match result {
        Ok(result) => result.unwrap_or_else(|e| panic!("postgres store: {e}")),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

// ---------------------------------------------------------------------------------
// Random JSON through a checkpoint

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(-0.0),
        Just(f64::MAX),
        Just(f64::MIN),
        Just(f64::MIN_POSITIVE),
        Just(5e-324),
        Just(2.017351698988807e285),
        -1e-300..1e-300f64,
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        // A JSON value holds only finite floats.
        float().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        any::<String>().prop_map(Value::String),
    ]
}

/// A small random value wrapped in 0 to 200 levels of arrays and objects, so both
/// sides of serde_json's read limit are well covered.
fn json_value() -> impl Strategy<Value = Value> {
    let shallow = leaf().prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    (shallow, 0usize..=200, any::<u64>(), any::<String>()).prop_map(|(mut v, depth, kinds, key)| {
        for i in 0..depth {
            v = if kinds.rotate_left(i as u32) & 1 == 0 {
                Value::Array(vec![v])
            } else {
                Value::Object([(key.clone(), v)].into_iter().collect())
            };
        }
        v
    })
}

#[derive(Debug, Clone)]
struct Case {
    state: Value,
    floats: Vec<f64>,
    content: Value,
    meta: Value,
    args: Value,
}

fn case() -> impl Strategy<Value = Case> {
    (json_value(), prop::collection::vec(float(), 0..4), json_value(), json_value(), json_value())
        .prop_map(|(state, floats, content, meta, args)| Case { state, floats, content, meta, args })
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct State {
    value: Value,
    floats: Vec<f64>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Blob(Value);
impl DocumentType for Blob {
    const TYPE: &'static str = "blob";
}

/// Echoes its arguments as JSON.
struct Echo;

#[async_trait::async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Echoes its arguments."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::json(args))
    }
}

/// `begin` puts the case into the state, a document (content and metadata) and a
/// tool call it runs; then the run waits at `a`.
struct Carrier {
    case: Case,
    delegate: LlmDelegateToolCalls,
}

static CARRIER: Definition = Definition::new(
    "carrier",
    &[START, "a", END],
    &[TransitionDef::new("begin", &[START], "a"), TransitionDef::new("go", &["a"], END).wait(|| json!({}))],
);

fn call_message(args: &Value) -> Message {
    Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(ToolUse::new("c1", "echo", args.clone()))] }
}

impl Workflow for Carrier {
    type State = State;
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &CARRIER
    }
    fn init(&self, (): ()) -> State {
        State::default()
    }
    fn guard(&self, _: usize, _: &State) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        _: usize,
        s: &'a mut State,
        cx: &'a mut RunContext,
        _: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            let c = &self.case;
            s.value = c.state.clone();
            s.floats = c.floats.clone();
            cx.save_with(&Blob(c.content.clone()), SaveOptions::new().meta("m", c.meta.clone()))
                .map_err(TransitionError::failed)?;
            let message = call_message(&c.args);
            cx.save(&message).map_err(TransitionError::failed)?;
            self.delegate.call(cx, &message, &["echo".to_owned()]).await.map_err(TransitionError::failed)?;
            Ok(())
        })
    }
}

/// Whether serde_json reads the text of `v` back (the oracle).
fn reads_back<T: serde::Serialize + serde::de::DeserializeOwned>(v: &T) -> bool {
    serde_json::to_string(v).is_ok_and(|text| serde_json::from_str::<T>(&text).is_ok())
}

fn text(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap()
}

/// How many cases a store accepted and refused, so a run shows both sides were tried.
#[derive(Default)]
struct Outcomes {
    accepted: AtomicUsize,
    refused: AtomicUsize,
}

impl Outcomes {
    fn get(&self) -> (usize, usize) {
        (self.accepted.load(Ordering::Relaxed), self.refused.load(Ordering::Relaxed))
    }
}

async fn check_case(store: &Arc<dyn Store>, case: Case, seen: &Outcomes) -> Result<(), TestCaseError> {
    let doc_ok = reads_back(&Blob(case.content.clone()))
        && reads_back(&json!({"m": case.meta}))
        && reads_back(&call_message(&case.args));
    let state_ok = case.floats.iter().all(|f| f.is_finite()) && reads_back(&json!({"value": case.state}));
    let rt = Runtime::with_shared_store(store.clone());
    let delegate = LlmDelegateToolCalls::new(ToolRegistry::new().with(Echo).unwrap());
    let wf = Carrier { case: case.clone(), delegate };
    let run_id = RunId::new();
    let result = rt.start(&wf, ()).run_id(run_id).await;
    let record = store.load_run(run_id).await.expect("the run exists");
    match result {
        Ok(report) => {
            prop_assert!(doc_ok && state_ok, "accepted what does not read back: {case:?}");
            seen.accepted.fetch_add(1, Ordering::Relaxed);
            prop_assert_eq!(&report.outcome, &RunOutcome::Waiting { place: "a", signals: vec!["go"] });
            // A fresh runtime resumes the run: the checkpoint loads.
            let resumed = Runtime::with_shared_store(store.clone()).resume(&wf, run_id).await.expect("resumes");
            prop_assert_eq!(resumed.steps, 1);
            let stored: State = serde_json::from_str(record.state.get()).expect("the state reads back");
            for state in [&resumed.state, &stored] {
                prop_assert_eq!(text(&state.value), text(&case.state));
                let bits = |f: &[f64]| f.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                prop_assert_eq!(bits(&state.floats), bits(&case.floats), "floats exactly");
            }
            let docs = store.documents(run_id).await.unwrap();
            prop_assert_eq!(docs.len(), 3);
            for doc in &docs {
                prop_assert!(doc.value().is_ok(), "every document reads back");
            }
            prop_assert_eq!(docs[0].value().map(|v| text(&v)).unwrap(), text(&case.content));
            prop_assert_eq!(text(&docs[0].metadata.get("m").unwrap_or_default()), text(&case.meta));
            let message: Message = docs[1].read().expect("the call message reads back");
            let Some(ContentBlock::ToolUse(call)) = message.content.first() else {
                return Err(TestCaseError::fail("the call is kept"));
            };
            prop_assert_eq!(text(&call.input), text(&case.args));
        }
        Err(err) => {
            prop_assert!(!(doc_ok && state_ok), "refused what reads back: {err}");
            seen.refused.fetch_add(1, Ordering::Relaxed);
            if doc_ok {
                prop_assert!(matches!(err, RunError::UnstorableState { after: Some("begin"), .. }), "{err:?}");
            } else {
                let source = err.transition_source().map(ToString::to_string).unwrap_or_default();
                prop_assert!(source.contains("cannot be saved"), "{err:?}");
            }
            // Nothing of the refused step was committed, and what is stored loads.
            prop_assert_eq!((record.status, record.step), (RunStatus::Failed, 0));
            prop_assert!(serde_json::from_str::<State>(record.state.get()).is_ok());
            prop_assert!(store.documents(run_id).await.unwrap().is_empty());
            prop_assert!(store.history(run_id).await.unwrap().is_empty());
        }
    }
    Ok(())
}

/// `v` in `depth` levels of arrays and objects, alternating.
fn nest(mut v: Value, depth: usize) -> Value {
    for i in 0..depth {
        v = if i % 2 == 0 { json!([v]) } else { json!({ "k": v }) };
    }
    v
}

/// Fixed cases every store runs before the random ones: the corners the issue names
/// (exact floats, unicode with NUL and astral characters, the largest integers, depths
/// on both sides of serde_json's read limit, non-finite floats), so each store is
/// seen to accept and to refuse whatever the random cases happen to be.
fn corner_cases() -> Vec<Case> {
    let unicode = "z\u{fc}rich \u{0} \u{1F980} \u{202E}rtl \u{FEFF} \u{10FFFF} \\\"\n\t";
    let plain = Case {
        state: json!({ unicode: unicode, "max": u64::MAX, "min": i64::MIN, "f": 2.017351698988807e285 }),
        floats: vec![-0.0, 5e-324, f64::MIN_POSITIVE, f64::MAX, f64::MIN, 2.017351698988807e285, 0.1 + 0.2],
        content: json!([unicode, 1e-300, -0.0, {"": null, unicode: [true, false]}]),
        meta: json!(unicode),
        args: json!({ "city": unicode, "n": 5e-324 }),
    };
    let mut cases = vec![plain.clone()];
    for f in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        cases.push(Case { floats: vec![1.5, f], ..plain.clone() });
    }
    for depth in (120..=132).step_by(3).chain([200]) {
        cases.push(Case { state: nest(json!(unicode), depth), ..plain.clone() });
        cases.push(Case { content: nest(json!(1e-300), depth), ..plain.clone() });
        cases.push(Case { meta: nest(json!([]), depth), ..plain.clone() });
        cases.push(Case { args: nest(json!({}), depth), ..plain.clone() });
    }
    cases
}

#[test]
fn random_json_round_trips_through_a_checkpoint_or_is_refused() {
    let rt = rt();
    let random = Outcomes::default();
    on_each_store(&rt, "json", |store, cases| {
        let corners = Outcomes::default();
        for case in corner_cases() {
            rt.block_on(check_case(store, case.clone(), &corners)).map_err(|e| format!("{e}\n{case:?}"))?;
        }
        let (accepted, refused) = corners.get();
        if accepted == 0 || refused == 0 {
            return Err(format!("the corner cases were {accepted} accepted, {refused} refused"));
        }
        let mut runner = TestRunner::new(config(cases));
        runner.run(&case(), |case| rt.block_on(check_case(store, case, &random))).map_err(|e| e.to_string())
    });
    let (accepted, refused) = random.get();
    assert!(accepted >= 10 && refused >= 10, "both outcomes were tried: {accepted} accepted, {refused} refused");
}

// ---------------------------------------------------------------------------------
// Random cancel / signal / resume sequences on one run

/// `START -> waiting`, where `approve` takes `{"approved_by": name}` and refuses
/// "mallory".
struct Gate;

static GATE: Definition = Definition::new(
    "gate",
    &[START, "waiting", END],
    &[
        TransitionDef::new("begin", &[START], "waiting"),
        TransitionDef::new("approve", &["waiting"], END).wait(|| json!({"type": "object"})),
    ],
);

#[derive(serde::Serialize, serde::Deserialize)]
struct Note {
    step: u64,
}
impl DocumentType for Note {
    const TYPE: &'static str = "note";
}

#[derive(serde::Deserialize)]
struct Approval {
    approved_by: String,
}

impl Workflow for Gate {
    type State = Vec<String>;
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &GATE
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
        s: &'a mut Vec<String>,
        cx: &'a mut RunContext,
        payload: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            cx.save(&Note { step: cx.step() + 1 }).map_err(TransitionError::failed)?;
            if t == 1 {
                let a: Approval = serde_json::from_value(payload.unwrap_or_default())
                    .map_err(|e| TransitionError::InvalidPayload(e.to_string()))?;
                if a.approved_by == "mallory" {
                    return Err(TransitionError::failed("mallory may not approve"));
                }
                s.push(a.approved_by);
            }
            Ok(())
        })
    }
}

#[derive(Debug, Clone)]
enum Op {
    Cancel,
    Approve(String),
    InvalidPayload,
    UnknownSignal,
    Refused,
    Resume,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => Just(Op::Cancel),
        // Any unicode (NUL, astral, bidi controls) as the approver, kept in state and signal.
        2 => any::<String>().prop_filter("not mallory", |n| n != "mallory").prop_map(Op::Approve),
        2 => Just(Op::InvalidPayload),
        2 => Just(Op::UnknownSignal),
        2 => Just(Op::Refused),
        2 => Just(Op::Resume),
    ]
}

/// An op, and whether a fresh runtime on the same store performs it (as after a
/// restart) rather than the one that started the run.
fn ops() -> impl Strategy<Value = Vec<(Op, bool)>> {
    prop::collection::vec((op(), any::<bool>()), 1..10)
}

async fn check_ops(store: &Arc<dyn Store>, ops: Vec<(Op, bool)>) -> Result<(), TestCaseError> {
    let first = Runtime::with_shared_store(store.clone());
    let run_id = first.start(&Gate, ()).await.expect("starts").run_id;
    // The model: where the run should stand, and how many signals were stored.
    let mut status = RunStatus::Waiting;
    let mut stored_signals = 0usize;
    let mut last_step = 1;
    let mut finished: Option<(RunStatus, u64, String, Option<String>)> = None;
    for (op, fresh) in ops {
        let fresh = fresh.then(|| Runtime::with_shared_store(store.clone()));
        let rt = fresh.as_ref().unwrap_or(&first);
        let waiting = status == RunStatus::Waiting;
        match &op {
            Op::Cancel => {
                let r = rt.cancel(run_id, "by the test").await;
                prop_assert_eq!(r.is_ok(), waiting, "{:?}", r);
                if waiting {
                    status = RunStatus::Cancelled;
                }
            }
            Op::Approve(name) => {
                let r = rt.signal(&Gate, run_id, ("approve", json!({"approved_by": name}))).await;
                if waiting {
                    let report = r.expect("a valid signal is delivered");
                    prop_assert_eq!(&report.outcome, &RunOutcome::Completed);
                    prop_assert_eq!(&report.state, &vec![name.clone()]);
                    status = RunStatus::Completed;
                    stored_signals += 1;
                } else {
                    prop_assert!(matches!(r, Err(RunError::InvalidStatus { .. })), "{:?}", r.err());
                }
            }
            Op::InvalidPayload | Op::Refused => {
                let payload = match op {
                    Op::Refused => json!({"approved_by": "mallory"}),
                    _ => json!({"approved_by": 7}),
                };
                let r = rt.signal(&Gate, run_id, ("approve", payload)).await;
                match (waiting, &r, &op) {
                    (true, Err(RunError::InvalidSignalPayload { .. }), Op::InvalidPayload)
                    | (true, Err(RunError::SignalRefused { .. }), Op::Refused) => stored_signals += 1,
                    (false, Err(RunError::InvalidStatus { .. }), _) => {}
                    _ => prop_assert!(false, "{op:?} while {status}: {:?}", r.err()),
                }
            }
            Op::UnknownSignal => {
                let r = rt.signal(&Gate, run_id, ("reject", json!({}))).await;
                match (waiting, &r) {
                    (true, Err(RunError::UnknownSignal { .. })) | (false, Err(RunError::InvalidStatus { .. })) => {}
                    _ => prop_assert!(false, "unknown signal while {status}: {:?}", r.err()),
                }
            }
            Op::Resume => {
                let r = rt.resume(&Gate, run_id).await;
                if waiting {
                    let report = r.expect("a waiting run resumes");
                    prop_assert!(matches!(report.outcome, RunOutcome::Waiting { .. }), "{:?}", report.outcome);
                } else {
                    prop_assert!(matches!(r, Err(RunError::InvalidStatus { .. })), "{:?}", r.err());
                }
            }
        }

        // The store's invariants after every op.
        let record = store.load_run(run_id).await.unwrap();
        prop_assert_eq!(record.status, status, "after {:?} (fresh runtime: {})", op, fresh.is_some());
        prop_assert!(record.step >= last_step, "the step never decreases");
        last_step = record.step;
        prop_assert_eq!(record.step, if status == RunStatus::Completed { 2 } else { 1 });
        prop_assert_eq!(store.history(run_id).await.unwrap().len() as u64, record.step);
        let docs = store.document_versions(run_id).await.unwrap();
        let steps: Vec<u64> = docs.iter().map(|d| d.step).collect();
        prop_assert_eq!(steps, (1..=record.step).collect::<Vec<_>>(), "documents of committed steps only");
        for doc in &docs {
            prop_assert_eq!(doc.read::<Note>().unwrap().step, doc.step);
        }
        let snapshot = (record.status, record.step, record.state.get().to_owned(), record.error.clone());
        match &finished {
            Some(before) => prop_assert_eq!(before, &snapshot, "a finished run never changes"),
            None if status.is_finished() => finished = Some(snapshot),
            None => {}
        }
        let signals = store.signals(run_id).await.unwrap();
        prop_assert_eq!(signals.len(), stored_signals, "only signals that can be delivered are stored");
        let delivered: Vec<&SignalRecord> =
            signals.iter().filter(|s| matches!(s.status, SignalStatus::Delivered { .. })).collect();
        if status == RunStatus::Completed {
            prop_assert_eq!(delivered.len(), 1, "{:?}", signals);
            prop_assert_eq!(&delivered[0].status, &SignalStatus::Delivered { step: 2 });
        } else {
            prop_assert!(delivered.is_empty(), "{:?}", signals);
        }
        for s in &signals {
            if s.status == SignalStatus::Pending {
                prop_assert_eq!(record.status, RunStatus::Waiting, "a signal is pending only while the run waits");
            }
        }
    }
    Ok(())
}

#[test]
fn random_cancel_signal_and_resume_sequences_keep_the_store_consistent() {
    let rt = rt();
    on_each_store(&rt, "ops", |store, cases| {
        let mut runner = TestRunner::new(config(cases));
        runner.run(&ops(), |ops| rt.block_on(check_ops(store, ops))).map_err(|e| e.to_string())
    });
}
