//! A signal sent by name is checked against the JSON Schema its transition
//! publishes (the one Studio builds its form from) before anything is stored: a
//! payload the schema forbids is refused with the reason, and the run goes on
//! waiting as it was.

use futures::future::BoxFuture;
use loopstack_core::*;
use serde_json::{Value, json};

/// `approve` takes `{"by": string}` and nothing else, by its schema; the transition
/// itself reads only `by`, so it would take more.
struct Strict;

static STRICT: Definition = Definition::new(
    "strict",
    &[START, "waiting", END],
    &[
        TransitionDef::new("begin", &[START], "waiting"),
        TransitionDef::new("approve", &["waiting"], END).wait(|| {
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": { "by": { "type": "string", "minLength": 1 }, "note": { "$ref": "#/$defs/note" } },
                "required": ["by"],
                "additionalProperties": false,
                "$defs": { "note": { "type": "string" } },
            })
        }),
    ],
);

impl Workflow for Strict {
    type State = Vec<String>;
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &STRICT
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
        _: &'a mut RunContext,
        payload: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            if t == 1 {
                s.push(payload.unwrap_or_default()["by"].as_str().unwrap_or_default().to_owned());
            }
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_payload_the_schema_forbids_is_refused_and_changes_nothing() {
    let rt = Runtime::new().register(Strict);
    let run_id = rt.start(&Strict, ()).await.unwrap().run_id;
    let before = rt.store().load_run(run_id).await.unwrap();
    for (bad, why) in [
        (json!({"by": "ada", "admin": true}), "admin"),
        (json!({"note": "hi"}), "by"),
        (json!({"by": ""}), "by"),
        (json!({"by": "ada", "note": 7}), "note"),
        (json!("ada"), "object"),
    ] {
        let err = rt.signal_by_name(run_id, "approve", bad.clone()).await.unwrap_err();
        assert!(
            matches!(&err, RunError::InvalidSignalPayload { signal: "approve", reason, .. } if reason.contains("JSON Schema") && reason.contains(why)),
            "{bad}: {err:?}"
        );
        assert!(err.leaves_run_waiting());
        let after = rt.store().load_run(run_id).await.unwrap();
        assert_eq!(
            (after.status, after.epoch, after.signal_seq, after.step),
            (before.status, before.epoch, before.signal_seq, before.step)
        );
        assert!(rt.store().signals(run_id).await.unwrap().is_empty(), "nothing was stored for {bad}");
    }
    // What the schema allows goes through.
    let done = rt.signal_by_name(run_id, "approve", json!({"by": "ada", "note": "ok"})).await.unwrap();
    assert_eq!(done, RunOutcome::Completed);
    let record = rt.store().load_run(run_id).await.unwrap();
    assert_eq!(record.state.get(), r#"["ada"]"#);
}
