//! `LlmDelegateToolCalls`: one result per call, in order, and every failure kind
//! turned into a result the model sees.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loopstack_core::{RunContext, Tool, ToolContext, ToolError, ToolOptions, ToolOutput, ToolRegistry};
use loopstack_llm::{ContentBlock, LlmDelegateToolCalls, Message, Role, ToolResult, ToolUse};
use serde_json::{Value, json};

/// A hand-written tool whose behaviour is picked by its name.
struct Probe {
    name: &'static str,
    options: ToolOptions,
    active: Arc<AtomicUsize>,
    max_seen: Arc<AtomicUsize>,
    barrier: Option<Arc<tokio::sync::Barrier>>,
    notify: Arc<tokio::sync::Notify>,
}

impl Probe {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            options: ToolOptions::new(),
            active: Arc::default(),
            max_seen: Arc::default(),
            barrier: None,
            notify: Arc::default(),
        }
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct CityArgs {
    city: String,
}

#[async_trait::async_trait]
impl Tool for Probe {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "A probe."
    }
    fn input_schema(&self) -> Value {
        loopstack_core::tool_input_schema::<CityArgs>()
    }
    fn options(&self) -> ToolOptions {
        self.options
    }
    async fn call(&self, args: Value, _cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: CityArgs = loopstack_core::parse_tool_arguments(self.name, args)?;
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_seen.fetch_max(now, Ordering::SeqCst);
        if let Some(b) = &self.barrier {
            b.wait().await;
        }
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        self.active.fetch_sub(1, Ordering::SeqCst);
        match self.name {
            "waiter" => {
                self.notify.notified().await;
                Ok(ToolOutput::text("woken"))
            }
            "notifier" => {
                self.notify.notify_one();
                Ok(ToolOutput::text("notified"))
            }
            "failing" => Err(ToolError::new(format!("no data for {}", args.city))),
            "panicking" => panic!("sensor exploded"),
            "hanging" => std::future::pending().await,
            "structured" => Ok(ToolOutput::json(json!({"city": args.city, "celsius": 14}))),
            _ => Ok(ToolOutput::text(format!("Sunny in {}", args.city))),
        }
    }
}

fn assistant(calls: Vec<ToolUse>) -> Message {
    Message { role: Role::Assistant, content: calls.into_iter().map(ContentBlock::ToolUse).collect() }
}

fn call(id: &str, name: &str, input: Value) -> ToolUse {
    ToolUse::new(id, name, input)
}

fn offered(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn every_failure_becomes_a_result_in_call_order() {
    let mut hanging = Probe::new("hanging");
    hanging.options = ToolOptions::new().timeout(Duration::from_millis(50));
    let tools = ToolRegistry::new()
        .with(Probe::new("weather"))
        .unwrap()
        .with(Probe::new("structured"))
        .unwrap()
        .with(Probe::new("failing"))
        .unwrap()
        .with(Probe::new("panicking"))
        .unwrap()
        .with(hanging)
        .unwrap()
        .with(Probe::new("secret"))
        .unwrap();
    let delegate = LlmDelegateToolCalls::new(tools);
    let offered = offered(&["weather", "structured", "failing", "panicking", "hanging"]);
    let message = assistant(vec![
        call("c0", "weather", json!({"city": "Berlin", "mood": "ignored"})),
        call("c1", "structured", json!({"city": "Oslo"})),
        call("c2", "no_such_tool", json!({})),
        call("c3", "secret", json!({"city": "x"})),
        ToolUse::from_raw_arguments("c4", "weather", r#"{"city": "Par"#),
        call("c5", "weather", json!({"city": 7})),
        call("c6", "weather", json!({})),
        call("c7", "failing", json!({"city": "Rome"})),
        call("c8", "panicking", json!({"city": "Lima"})),
        call("c9", "hanging", json!({"city": "Quito"})),
    ]);
    let mut cx = RunContext::detached("test");
    let result = delegate.call(&mut cx, &message, &offered).await.unwrap();

    let got: Vec<(&str, bool, &str)> =
        result.results.iter().map(|r| (r.tool_use_id.as_str(), r.is_error, r.content.as_str())).collect();
    let names = "weather, structured, failing, panicking, hanging";
    let expected: Vec<(&str, bool, String)> = vec![
        ("c0", false, "Sunny in Berlin".into()),
        ("c1", false, r#"{"celsius":14,"city":"Oslo"}"#.into()),
        ("c2", true, format!("unknown tool `no_such_tool`; the available tools are: {names}")),
        ("c3", true, format!("unknown tool `secret`; the available tools are: {names}")),
        (
            "c4",
            true,
            "the arguments of this call to `weather` are not valid JSON (EOF while parsing a string at line 1 column 13); call the tool again with a JSON object".into(),
        ),
        ("c5", true, "invalid arguments for tool `weather` at `city`: invalid type: integer `7`, expected a string".into()),
        ("c6", true, "invalid arguments for tool `weather`: missing field `city`".into()),
        ("c7", true, "no data for Rome".into()),
        ("c8", true, "tool `panicking` failed: it panicked: sensor exploded".into()),
        ("c9", true, "tool `hanging` timed out after 50 ms".into()),
    ];
    let expected: Vec<(&str, bool, &str)> = expected.iter().map(|(a, b, c)| (*a, *b, c.as_str())).collect();
    assert_eq!(got, expected);
    assert_eq!(result.error_count, 8);
    assert!(result.all_completed);

    // One tool-result message document with every result, in order.
    let docs = cx.documents();
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].doc_type, "llm_message");
    assert!(docs[0].has_tag("conversation"));
    let saved: Message = docs[0].read().unwrap();
    assert_eq!(saved.role, Role::User);
    let saved: Vec<ToolResult> = saved.tool_results_iter().cloned().collect();
    assert_eq!(saved.len(), 10);
    assert_eq!(saved[0], ToolResult { tool_use_id: "c0".into(), content: "Sunny in Berlin".into(), is_error: false });
    assert!(saved[9].is_error);
}

#[tokio::test]
async fn calls_run_concurrently_by_default() {
    // Both calls wait on one barrier: they can only finish if they run at once.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let mut probe = Probe::new("weather");
    probe.barrier = Some(barrier);
    probe.options = ToolOptions::new().timeout(Duration::from_secs(10));
    let max_seen = probe.max_seen.clone();
    let delegate = LlmDelegateToolCalls::new(ToolRegistry::new().with(probe).unwrap());
    let message =
        assistant(vec![call("a", "weather", json!({"city": "A"})), call("b", "weather", json!({"city": "B"}))]);
    let result = delegate.run(&RunContext::detached("t"), &message, &offered(&["weather"])).await;
    assert_eq!(result.error_count, 0, "{result:?}");
    assert_eq!(max_seen.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_concurrency_limit_and_exclusive_tools_are_respected() {
    let probe = Probe::new("weather");
    let max_seen = probe.max_seen.clone();
    let delegate = LlmDelegateToolCalls::new(ToolRegistry::new().with(probe).unwrap()).concurrency(1);
    let message = assistant((0..4).map(|i| call(&format!("c{i}"), "weather", json!({"city": "X"}))).collect());
    let result = delegate.run(&RunContext::detached("t"), &message, &offered(&["weather"])).await;
    assert_eq!(result.results.len(), 4);
    assert_eq!(max_seen.load(Ordering::SeqCst), 1);

    // A tool that opts out of concurrency runs alone, even beside concurrent tools.
    let active = Arc::new(AtomicUsize::new(0));
    let mut solo = Probe::new("solo");
    solo.options = ToolOptions::new().concurrent(false);
    solo.active = active.clone();
    let solo_max = solo.max_seen.clone();
    let mut other = Probe::new("weather");
    other.active = active.clone();
    let other_max = other.max_seen.clone();
    let delegate = LlmDelegateToolCalls::new(ToolRegistry::new().with(solo).unwrap().with(other).unwrap());
    let message = assistant(vec![
        call("w0", "weather", json!({"city": "A"})),
        call("w1", "weather", json!({"city": "B"})),
        call("s0", "solo", json!({"city": "C"})),
        call("w2", "weather", json!({"city": "D"})),
        call("w3", "weather", json!({"city": "E"})),
    ]);
    let result = delegate.run(&RunContext::detached("t"), &message, &offered(&["weather", "solo"])).await;
    assert_eq!(result.error_count, 0);
    assert_eq!(
        result.results.iter().map(|r| r.tool_use_id.as_str()).collect::<Vec<_>>(),
        ["w0", "w1", "s0", "w2", "w3"]
    );
    assert_eq!(solo_max.load(Ordering::SeqCst), 1, "the exclusive tool never ran beside another call");
    assert!(other_max.load(Ordering::SeqCst) >= 2, "the concurrent calls still overlapped");
}

#[test]
fn zero_timeout_means_a_day() {
    let opts = ToolOptions::new().timeout(Duration::ZERO);
    assert_eq!(opts.effective_timeout(Duration::from_secs(30)), Duration::from_secs(86_400));
    assert_eq!(ToolOptions::new().effective_timeout(Duration::from_secs(30)), Duration::from_secs(30));
}

#[tokio::test]
async fn a_slow_call_does_not_hold_back_later_ones() {
    // Two slots. The waiter blocks until the third call runs; with results held in
    // order inside the limit, the finished second call would keep the third from
    // starting and the waiter would time out.
    let notify = Arc::new(tokio::sync::Notify::new());
    let mut waiter = Probe::new("waiter");
    waiter.notify = notify.clone();
    waiter.options = ToolOptions::new().timeout(Duration::from_secs(10));
    let mut notifier = Probe::new("notifier");
    notifier.notify = notify;
    let tools = ToolRegistry::new().with(waiter).unwrap().with(notifier).unwrap().with(Probe::new("weather")).unwrap();
    let delegate = LlmDelegateToolCalls::new(tools).concurrency(2);
    let message = assistant(vec![
        call("w", "waiter", json!({"city": "A"})),
        call("f", "weather", json!({"city": "B"})),
        call("n", "notifier", json!({"city": "C"})),
    ]);
    let result = delegate.run(&RunContext::detached("t"), &message, &offered(&["waiter", "weather", "notifier"])).await;
    let got: Vec<(&str, &str)> = result.results.iter().map(|r| (r.tool_use_id.as_str(), r.content.as_str())).collect();
    assert_eq!(got, [("w", "woken"), ("f", "Sunny in B"), ("n", "notified")]);
}
