//! Run events: what a subscriber sees, in order, and that nothing is built when
//! nobody subscribes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use loopstack_core::*;
use serde_json::{Value, json};

/// start -> working (emits a custom event) -> waiting --approve--> end
#[derive(Default)]
struct Flow {
    /// How often the custom event was built.
    built: Arc<AtomicUsize>,
}

static DEF: Definition = Definition::new(
    "flow",
    &[START, "working", "waiting", END],
    &[
        TransitionDef::new("begin", &[START], "working"),
        TransitionDef::new("work", &["working"], "waiting"),
        TransitionDef::new("approve", &["waiting"], END).wait(|| json!({"type": "object"})),
    ],
);

impl Workflow for Flow {
    type State = u32;
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &DEF
    }
    fn init(&self, (): ()) -> u32 {
        0
    }
    fn guard(&self, _: usize, _: &u32) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        t: usize,
        state: &'a mut u32,
        cx: &'a mut RunContext,
        _: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            *state += 1;
            if t == 1 {
                cx.emit(|| {
                    self.built.fetch_add(1, Ordering::SeqCst);
                    EventKind::Custom { name: "progress".into(), data: json!({"done": 1}) }
                });
            }
            Ok(())
        })
    }
}

fn drain(events: &mut RunEvents) -> Vec<EventKind> {
    let mut kinds = Vec::new();
    while let Some(event) = events.try_recv() {
        kinds.push(event.expect("no lag").kind.clone());
    }
    kinds
}

fn started(transition: &'static str, from: &'static str, to: &'static str, step: u64) -> EventKind {
    EventKind::TransitionStarted { transition: transition.into(), from: from.into(), to: to.into(), step }
}

fn committed(transition: &'static str, from: &'static str, to: &'static str, step: u64) -> EventKind {
    EventKind::TransitionCommitted { transition: transition.into(), from: from.into(), to: to.into(), step }
}

#[tokio::test]
async fn a_subscriber_sees_transitions_custom_events_waits_and_the_end_in_order() {
    let runtime = Runtime::new();
    let flow = Flow::default();
    let mut events = runtime.subscribe();
    let report = runtime.start(&flow, ()).await.unwrap();
    assert_eq!(
        drain(&mut events),
        vec![
            started("begin", START, "working", 1),
            committed("begin", START, "working", 1),
            started("work", "working", "waiting", 2),
            EventKind::Custom { name: "progress".into(), data: json!({"done": 1}) },
            committed("work", "working", "waiting", 2),
            EventKind::Waiting { place: "waiting".into(), signals: vec!["approve".into()] },
        ]
    );
    runtime.signal(&flow, report.run_id, ("approve", json!({}))).await.unwrap();
    assert_eq!(
        drain(&mut events),
        vec![
            started("approve", "waiting", END, 3),
            committed("approve", "waiting", END, 3),
            EventKind::Finished { status: RunStatus::Completed, error: None },
        ]
    );
}

#[tokio::test]
async fn nothing_is_built_without_a_subscriber_and_dropping_one_unsubscribes() {
    let runtime = Runtime::new();
    let flow = Flow::default();
    runtime.start(&flow, ()).await.unwrap();
    assert_eq!(flow.built.load(Ordering::SeqCst), 0, "no subscriber: the event is never built");

    let events = runtime.subscribe();
    runtime.start(&flow, ()).await.unwrap();
    assert_eq!(flow.built.load(Ordering::SeqCst), 1);
    drop(events);
    runtime.start(&flow, ()).await.unwrap();
    assert_eq!(flow.built.load(Ordering::SeqCst), 1, "the only subscriber is gone");
}

#[tokio::test]
async fn a_subscription_filtered_to_one_run_skips_the_others_and_sees_a_cancel() {
    let runtime = Runtime::new();
    let flow = Flow::default();
    let first = runtime.start(&flow, ()).await.unwrap().run_id;
    let mut mine = runtime.subscribe().run(first);
    let mut all = runtime.subscribe();
    let second = runtime.start(&flow, ()).await.unwrap().run_id;
    runtime.cancel(first, "no longer needed").await.unwrap();

    let event = mine.try_recv().unwrap().unwrap();
    assert_eq!(event.run_id, first);
    assert_eq!(event.workflow, "flow");
    assert_eq!(
        event.kind,
        EventKind::Finished { status: RunStatus::Cancelled, error: Some("no longer needed".into()) }
    );
    assert!(mine.try_recv().is_none());
    let runs: Vec<RunId> = std::iter::from_fn(|| all.try_recv()).map(|e| e.unwrap().run_id).collect();
    assert_eq!(runs.iter().filter(|&&r| r == second).count(), 6, "{runs:?}");
    assert_eq!(runs.last(), Some(&first));
}

#[tokio::test]
async fn a_failed_run_reports_its_error_and_events_serialize_with_a_type_tag() {
    struct Failing;
    static FAILING: Definition = Definition::new("failing", &[START, END], &[TransitionDef::new("go", &[START], END)]);
    impl Workflow for Failing {
        type State = ();
        type Input = ();
        fn definition(&self) -> &'static Definition {
            &FAILING
        }
        fn init(&self, (): ()) {}
        fn guard(&self, _: usize, (): &()) -> bool {
            true
        }
        fn transition<'a>(
            &'a self,
            _: usize,
            (): &'a mut (),
            _: &'a mut RunContext,
            _: Option<Value>,
        ) -> BoxFuture<'a, Result<(), TransitionError>> {
            Box::pin(async { Err(TransitionError::Failed("the disk is full".into())) })
        }
    }
    let runtime = Runtime::new();
    let mut events = runtime.subscribe();
    runtime.start(&Failing, ()).await.unwrap_err();
    let kinds = drain(&mut events);
    let Some(EventKind::Finished { status: RunStatus::Failed, error: Some(error) }) = kinds.last() else {
        panic!("{kinds:?}")
    };
    assert!(error.contains("the disk is full"), "{error}");

    let json = serde_json::to_value(&kinds[0]).unwrap();
    assert_eq!(
        json,
        json!({"type": "transition_started", "transition": "go", "from": "start", "to": "end", "step": 1})
    );
    let back: EventKind = serde_json::from_value(json).unwrap();
    assert_eq!(back, kinds[0]);
}

#[tokio::test]
async fn the_stream_ends_when_the_runtime_is_gone() {
    use futures::StreamExt as _;
    let runtime = Runtime::new();
    let events = runtime.subscribe().into_stream();
    runtime.start(&Flow::default(), ()).await.unwrap();
    drop(runtime);
    let kinds: Vec<_> = events.map(|e| e.unwrap().kind.clone()).collect().await;
    assert_eq!(kinds.len(), 6, "{kinds:?}");
}
