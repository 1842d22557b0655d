//! A refused signal leaves nothing behind: not in the store, and not in the state a
//! later signal of the same drive commits.

use futures::future::BoxFuture;
use loopstack_core::*;
use serde_json::{Value, json};

/// `approve` records who tried before it checks them, and refuses "mallory".
struct Gate;

static GATE: Definition = Definition::new(
    "gate",
    &[START, "waiting", END],
    &[
        TransitionDef::new("begin", &[START], "waiting"),
        TransitionDef::new("approve", &["waiting"], END).wait(|| json!({})),
    ],
);

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
        _: &'a mut RunContext,
        payload: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            if t == 1 {
                let who = payload.unwrap_or_default()["by"].as_str().unwrap_or_default().to_owned();
                s.push(format!("tried {who}"));
                if who == "mallory" {
                    return Err(TransitionError::failed("mallory may not approve"));
                }
            }
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_refused_signal_leaves_no_trace_in_the_state_a_later_signal_commits() {
    let rt = Runtime::new();
    let run_id = rt.start(&Gate, ()).await.unwrap().run_id;
    // Hold the run as another driver would, so both signals wait in the inbox and one
    // drive handles them in turn.
    rt.store().claim(run_id, &Claim::new([RunStatus::Waiting])).await.unwrap();
    for by in ["mallory", "ada"] {
        let queued = rt.signal(&Gate, run_id, ("approve", json!({ "by": by }))).await.unwrap();
        assert!(matches!(queued.outcome, RunOutcome::Queued { .. }), "{queued:?}");
    }
    let report = rt.resume(&Gate, run_id).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(report.state, ["tried ada"], "the refused transition's change is gone");
    let record = rt.store().load_run(run_id).await.unwrap();
    assert_eq!(record.state.get(), r#"["tried ada"]"#);
    let signals = rt.store().signals(run_id).await.unwrap();
    assert!(matches!(&signals[0].status, SignalStatus::Rejected { reason } if reason.contains("mallory")));
    assert_eq!(signals[1].status, SignalStatus::Delivered { step: 2 });
}
