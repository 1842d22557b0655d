//! Whatever the runtime commits reads back: a state or document that would not (a
//! NaN or infinite float, nesting deeper than serde_json reads) is refused at the
//! transition, and the run keeps its last checkpoint.

use futures::future::BoxFuture;
use loopstack_core::serde_json::value::RawValue;
use loopstack_core::*;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The deepest nesting serde_json reads back.
const READ_DEPTH: usize = 127;

/// `depth` levels of arrays.
fn nested(depth: usize) -> Value {
    (0..depth).fold(json!(1), |inner, _| Value::Array(vec![inner]))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct State {
    x: f64,
    deep: Value,
    log: Vec<String>,
    /// Members written beside the fields: one named like a field writes that key twice.
    #[serde(flatten)]
    extra: std::collections::BTreeMap<String, Value>,
}

/// What `begin` does to the state, or saves.
#[derive(Debug, Clone)]
enum Poison {
    Float(f64),
    /// `deep` nested this many levels (the state's own object is one more).
    Deep(usize),
    /// A document nested this many levels.
    Document(usize),
    /// A flattened member named like the field `x`: `{"x":0.0,..,"x":2}`.
    DuplicateKey,
}

#[derive(Serialize, Deserialize)]
struct Note {
    text: String,
}
impl DocumentType for Note {
    const TYPE: &'static str = "note";
}

#[derive(Serialize, Deserialize)]
struct Blob(Value);
impl DocumentType for Blob {
    const TYPE: &'static str = "blob";
}

struct Poisoned(Poison);

static DEF: Definition = Definition::new(
    "poisoned",
    &[START, "a", "waiting", END],
    &[
        TransitionDef::new("begin", &[START], "a"),
        TransitionDef::new("park", &["a"], "waiting"),
        TransitionDef::new("approve", &["waiting"], END).wait(|| json!({})),
    ],
);

impl Workflow for Poisoned {
    type State = State;
    type Input = State;
    fn definition(&self) -> &'static Definition {
        &DEF
    }
    fn init(&self, input: State) -> State {
        input
    }
    fn guard(&self, _: usize, _: &State) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        t: usize,
        s: &'a mut State,
        cx: &'a mut RunContext,
        _: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            let name = DEF.transitions()[t].name;
            s.log.push(name.to_owned());
            cx.save(&Note { text: format!("{name} ran") }).map_err(TransitionError::failed)?;
            if name == "park" {
                match &self.0 {
                    Poison::Float(f) => s.x = *f,
                    Poison::Deep(depth) => s.deep = nested(*depth),
                    Poison::Document(depth) => {
                        cx.save(&Blob(nested(*depth))).map_err(TransitionError::failed)?;
                    }
                    Poison::DuplicateKey => {
                        s.extra.insert("x".into(), json!(2));
                    }
                }
            }
            Ok(())
        })
    }
}

/// The run failed at step 1 (after `begin`), its checkpoint reads back, and nothing
/// of `park` was kept.
async fn assert_kept_its_checkpoint(rt: &Runtime, run_id: RunId) {
    let record = rt.store().load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.step, &*record.place), (RunStatus::Failed, 1, "a"));
    let state: State = serde_json::from_str(record.state.get()).expect("the last checkpoint reads back");
    assert_eq!(state.log, ["begin"]);
    assert_eq!(rt.store().history(run_id).await.unwrap().len(), 1);
    let docs = rt.store().documents(run_id).await.unwrap();
    assert_eq!(docs.len(), 1, "the refused transition's documents are discarded");
    for doc in rt.store().document_versions(run_id).await.unwrap() {
        assert_eq!(doc.step, 1);
        doc.value().expect("every stored document reads back");
    }
}

#[tokio::test]
async fn a_state_holding_nan_or_infinity_is_refused_and_the_run_keeps_its_checkpoint() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let rt = Runtime::new();
        let err = rt.start(&Poisoned(Poison::Float(bad)), State::default()).await.unwrap_err();
        assert!(
            matches!(&err, RunError::UnstorableState { after: Some("park"), reason, .. } if reason.contains("float")),
            "{err:?}"
        );
        let run_id = err.run_id().unwrap();
        assert_kept_its_checkpoint(&rt, run_id).await;
        // The failed run can be retried from that checkpoint (and fails the same way).
        let again = rt.retry(&Poisoned(Poison::Float(bad)), run_id).await.unwrap_err();
        assert!(matches!(again, RunError::UnstorableState { .. }), "{again:?}");
        // With the bug fixed, it completes.
        let fixed = rt.retry(&Poisoned(Poison::Float(1.5)), run_id).await.unwrap();
        assert_eq!(fixed.outcome, RunOutcome::Waiting { place: "waiting", signals: vec!["approve"] });
    }
}

#[tokio::test]
async fn a_state_nested_deeper_than_serde_json_reads_is_refused_and_one_at_the_limit_is_kept() {
    let rt = Runtime::new();
    // The state's own object is one level: `deep` may nest 126 more.
    let report = rt.start(&Poisoned(Poison::Deep(READ_DEPTH - 1)), State::default()).await.unwrap();
    let record = rt.store().load_run(report.run_id).await.unwrap();
    let state: State = serde_json::from_str(record.state.get()).expect("a state at the limit reads back");
    assert_eq!(state.deep, nested(READ_DEPTH - 1));

    let err = rt.start(&Poisoned(Poison::Deep(READ_DEPTH)), State::default()).await.unwrap_err();
    assert!(
        matches!(&err, RunError::UnstorableState { after: Some("park"), reason, .. } if reason.contains("127 levels")),
        "{err:?}"
    );
    assert_kept_its_checkpoint(&rt, err.run_id().unwrap()).await;
}

#[tokio::test]
async fn an_initial_state_that_would_not_read_back_is_refused_before_the_run_exists() {
    let store = MemoryStore::new();
    let rt = Runtime::with_store(store.clone());
    let wf = Poisoned(Poison::Float(0.0));
    let err = rt.start(&wf, State { x: f64::NAN, ..State::default() }).await.unwrap_err();
    assert!(matches!(err, RunError::UnstorableState { after: None, .. }), "{err:?}");
    let err = rt.submit(&wf, State { deep: nested(200), ..State::default() }).await.unwrap_err();
    assert!(matches!(err, RunError::UnstorableState { after: None, .. }), "{err:?}");
    assert!(store.is_empty(), "no run was created");
}

#[tokio::test]
async fn a_document_nested_too_deep_fails_the_transition_and_nothing_of_it_is_kept() {
    let rt = Runtime::new();
    // A `Blob` is a newtype: its content is the value itself.
    let report = rt.start(&Poisoned(Poison::Document(READ_DEPTH)), State::default()).await.unwrap();
    let docs = rt.store().documents(report.run_id).await.unwrap();
    assert_eq!(docs[2].value().expect("a document at the limit reads back"), nested(READ_DEPTH));

    let err = rt.start(&Poisoned(Poison::Document(READ_DEPTH + 1)), State::default()).await.unwrap_err();
    let source = err.transition_source().map(ToString::to_string).unwrap_or_default();
    assert!(source.contains("`blob` document cannot be saved"), "{err:?}");
    assert_kept_its_checkpoint(&rt, err.run_id().unwrap()).await;
}

#[test]
fn saving_refuses_content_and_metadata_that_would_not_read_back() {
    let mut cx = RunContext::detached("unit");
    assert!(cx.save(&Blob(nested(READ_DEPTH + 1))).is_err());
    assert!(cx.save(&Blob(nested(10_000))).is_err());
    let raw = |depth: usize| RawValue::from_string(format!("{}{}", "[".repeat(depth), "]".repeat(depth))).unwrap();
    assert!(cx.save_raw("raw", raw(READ_DEPTH + 1), SaveOptions::new()).is_err());
    // Brackets inside strings are not nesting.
    let text = RawValue::from_string(format!("[\"{}\"]", "[{\\\"".repeat(500))).unwrap();
    cx.save_raw("raw", text, SaveOptions::new()).unwrap();
    cx.save_raw("raw", raw(READ_DEPTH), SaveOptions::new()).unwrap();
    // Metadata is an object: its values may nest 126 levels.
    assert!(cx.save_with(&Note { text: "m".into() }, SaveOptions::new().meta("m", nested(READ_DEPTH))).is_err());
    cx.save_with(&Note { text: "m".into() }, SaveOptions::new().meta("m", nested(READ_DEPTH - 1))).unwrap();

    #[derive(Serialize, Deserialize)]
    struct Reading {
        celsius: f32,
    }
    impl DocumentType for Reading {
        const TYPE: &'static str = "reading";
    }
    let err = cx.save(&Reading { celsius: f32::NAN }).unwrap_err();
    assert!(err.to_string().contains("`reading` document cannot be saved"), "{err}");
    // Only the documents that read back were saved.
    assert_eq!(cx.documents().len(), 3);
    for doc in cx.documents() {
        doc.value().unwrap();
    }
}

#[test]
fn metadata_given_whole_is_stored_as_its_text_and_refused_when_it_would_not_read_back() {
    #[derive(Serialize)]
    struct Review<'a> {
        reviewer: &'a str,
        score: u8,
        deep: Value,
    }
    let mut cx = RunContext::detached("unit");
    let note = Note { text: "m".into() };
    let review = Review { reviewer: "ada", score: 4, deep: nested(READ_DEPTH - 1) };
    // One level for the object, 126 for its entry: as deep as reads back.
    let doc = cx.save_with(&note, SaveOptions::new().metadata(&review)).unwrap().clone();
    assert_eq!(doc.metadata.get("reviewer"), Some(json!("ada")));
    assert_eq!(doc.metadata.read::<u8>("score").unwrap().unwrap(), 4);
    assert!(doc.metadata.as_str().starts_with(r#"{"reviewer":"ada","score":4,"deep":[[["#));
    // Entries added one at a time are added to it, and replace its own.
    let doc = cx.save_with(&note, SaveOptions::new().meta("score", 5).metadata(&review).meta("by", "bob")).unwrap();
    assert_eq!(doc.metadata.get("score"), Some(json!(5)));
    assert_eq!(doc.metadata.get("by"), Some(json!("bob")));
    assert_eq!(doc.metadata.get("reviewer"), Some(json!("ada")));

    // Only the depth is refused: a float that is not finite is written as serde_json
    // writes it, `null`, since metadata is read as JSON values.
    #[derive(Serialize)]
    struct Scored {
        score: f64,
    }
    let doc = cx.save_with(&note, SaveOptions::new().metadata(&Scored { score: f64::NAN })).unwrap();
    assert_eq!(doc.metadata.as_str(), r#"{"score":null}"#);
    let saved = cx.documents().len();
    let too_deep = Review { reviewer: "ada", score: 4, deep: nested(READ_DEPTH) };
    let err = cx.save_with(&note, SaveOptions::new().metadata(&too_deep)).unwrap_err();
    assert!(err.to_string().contains("`note` document cannot be saved: its metadata would not read back"), "{err}");
    let err = cx.save_with(&note, SaveOptions::new().metadata(&[1, 2])).unwrap_err();
    assert!(err.to_string().contains("metadata must be a JSON object"), "{err}");
    let err =
        cx.save_raw("raw", RawValue::from_string("1".into()).unwrap(), SaveOptions::new().metadata("x")).unwrap_err();
    assert!(err.to_string().contains("`raw` document cannot be saved"), "{err}");
    assert_eq!(cx.documents().len(), saved, "nothing refused was saved");
}

#[test]
fn a_secret_in_metadata_is_redacted_however_the_metadata_was_given() {
    use loopstack_core::secrets::REDACTED;
    let mut cx = RunContext::detached("unit");
    cx.runtime().secrets().register("tok_SECRET_123");
    let note = Note { text: "m".into() };
    let whole = json!({"header": "Bearer tok_SECRET_123", "nested": {"tok_SECRET_123": [1]}});
    let options = SaveOptions::new().metadata(&whole).meta("token", "tok_SECRET_123");
    let doc = cx.save_with(&note, options).unwrap();
    assert!(!doc.metadata.as_str().contains("tok_SECRET_123"), "{}", doc.metadata.as_str());
    assert_eq!(doc.metadata.get("token"), Some(json!(REDACTED)));
    assert_eq!(doc.metadata.get("header"), Some(json!(format!("Bearer {REDACTED}"))));
    assert_eq!(doc.metadata.get("nested"), Some(json!({ REDACTED: [1] })));
}

#[test]
fn reading_a_document_that_does_not_parse_is_an_error_not_a_panic() {
    let deep = RawValue::from_string(format!("{}{}", "[".repeat(5_000), "]".repeat(5_000))).unwrap();
    let doc = Document {
        seq: 0,
        doc_type: "raw".into(),
        key: None,
        version: 1,
        tags: Vec::new(),
        metadata: Default::default(),
        content: deep,
        step: 1,
    };
    assert!(doc.value().is_err());
}

#[tokio::test]
async fn a_signal_payload_nested_too_deep_is_refused_before_it_is_stored() {
    let rt = Runtime::new();
    let wf = Poisoned(Poison::Float(0.0));
    let run_id = rt.start(&wf, State::default()).await.unwrap().run_id;
    let err = rt.signal(&wf, run_id, ("approve", json!({"deep": nested(500)}))).await.unwrap_err();
    assert!(matches!(err, RunError::InvalidSignalPayload { signal: "approve", .. }), "{err:?}");
    assert!(rt.store().signals(run_id).await.unwrap().is_empty(), "nothing was stored");
    let record = rt.store().load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.step), (RunStatus::Waiting, 2));
    // The run still takes a good one.
    let report = rt.signal(&wf, run_id, ("approve", json!({"deep": nested(100)}))).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
}

#[tokio::test]
async fn a_state_that_writes_one_key_twice_is_refused_and_the_run_keeps_its_checkpoint() {
    let rt = Runtime::new();
    let err = rt.start(&Poisoned(Poison::DuplicateKey), State::default()).await.unwrap_err();
    assert!(
        matches!(&err, RunError::UnstorableState { after: Some("park"), reason, .. } if reason.contains("`x` twice")),
        "{err:?}"
    );
    let run_id = err.run_id().unwrap();
    assert_kept_its_checkpoint(&rt, run_id).await;
    // The run is failed at its last good checkpoint, and a build without the bug
    // retries it from there and takes its signal.
    let fixed = rt.retry(&Poisoned(Poison::Float(1.5)), run_id).await.unwrap();
    assert_eq!(fixed.outcome, RunOutcome::Waiting { place: "waiting", signals: vec!["approve"] });
    let done = rt.signal(&Poisoned(Poison::Float(1.5)), run_id, ("approve", json!({}))).await.unwrap();
    assert_eq!(done.outcome, RunOutcome::Completed);
}

#[test]
fn documents_and_payloads_that_write_one_key_twice_are_refused() {
    #[derive(Serialize, Deserialize)]
    struct Doubled {
        a: u32,
        #[serde(flatten)]
        rest: std::collections::BTreeMap<String, u32>,
    }
    impl DocumentType for Doubled {
        const TYPE: &'static str = "doubled";
    }
    let mut cx = RunContext::detached("unit");
    let err = cx.save(&Doubled { a: 0, rest: [("a".to_owned(), 2)].into() }).unwrap_err();
    assert!(err.to_string().contains("`doubled` document cannot be saved"), "{err}");
    // Nested objects too, and raw JSON text that holds a key twice.
    let nested = std::collections::BTreeMap::from([("inner", Doubled { a: 0, rest: [("a".to_owned(), 2)].into() })]);
    assert!(cx.save(&Blob(serde_json::to_value(&nested).unwrap())).is_ok(), "a Value keeps one of them");
    let raw = RawValue::from_string(r#"{"k":{"a":1,"a":2}}"#.to_owned()).unwrap();
    assert!(cx.save_raw("raw", raw, SaveOptions::new()).is_err());
    // The same key in different objects is fine.
    cx.save(&Doubled { a: 0, rest: [("b".to_owned(), 2)].into() }).unwrap();
    let raw = RawValue::from_string(r#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#.to_owned()).unwrap();
    cx.save_raw("raw", raw, SaveOptions::new()).unwrap();
    assert_eq!(cx.documents().len(), 3);
}
