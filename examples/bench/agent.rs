//! The conversation both sides run: the framework's agent with the scripted model, and
//! the hand-written loop over `serde_json` values it is measured against.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use loopstack::llm::{
    Agent, AskError, ChatRequest, ChatResponse, ContentBlock, LlmError, Message, Role, ScriptedModel, StopReason,
    ToolUse, Usage,
};
use loopstack::prelude::*;
use loopstack::{MemoryStore, Runtime, Store};
use serde_json::{Value, json};

use crate::Workload;
use crate::measure::Subject;

pub(crate) const QUESTION: &str = "What is the weather in Berlin?";
pub(crate) const TOOL_TEXT: &str = "Mostly sunny, 14C, rain in the afternoon.";
pub(crate) const ANSWER: &str = "It is mostly sunny in Berlin.";
const FANOUT: usize = 64;

impl Workload {
    fn model_latency(self) -> Option<Duration> {
        (self == Self::W2).then(|| Duration::from_millis(20))
    }
    fn tool_latency(self) -> Option<Duration> {
        (self == Self::W3).then(|| Duration::from_millis(50))
    }
    pub(crate) fn calls_per_run(self) -> usize {
        if self == Self::W3 { FANOUT } else { 1 }
    }
}

/// Arguments of `get_weather`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WeatherArgs {
    /// City or location name
    location: String,
}

/// The `get_weather` tool of the benchmark: counts its calls, may await a latency.
struct WeatherTool {
    calls: Arc<AtomicU64>,
    latency: Option<Duration>,
}

/// Retrieve weather information.
#[tool(name = "get_weather")]
impl WeatherTool {
    async fn handle(&self, args: WeatherArgs) -> Result<String, ToolError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Some(latency) = self.latency {
            tokio::time::sleep(latency).await;
        }
        if args.location.is_empty() {
            return Err(ToolError::new("empty location"));
        }
        Ok(TOOL_TEXT.to_owned())
    }
}

/// The stateless model: turn 1 for a conversation that ends with the question, turn 2
/// for one that ends with the expected tool results.
fn decide(request: &ChatRequest, fanout: usize) -> Result<ChatResponse, LlmError> {
    let fail = |message: String| LlmError::Script { model: request.model.clone(), message };
    let last = request.messages.last().ok_or_else(|| fail("empty conversation".into()))?;
    let usage = Usage::new(50, 10);
    if last.role == Role::User && last.text() == QUESTION {
        let content = (0..fanout)
            .map(|i| {
                let location = if fanout == 1 { "Berlin".to_owned() } else { format!("City{i}") };
                ContentBlock::ToolUse(ToolUse::new(format!("call_{i}"), "get_weather", json!({ "location": location })))
            })
            .collect();
        return Ok(ChatResponse::new(Message { role: Role::Assistant, content }, StopReason::ToolUse, usage, "bench"));
    }
    let results: Vec<_> = last.tool_results_iter().collect();
    let expected = results.len() == fanout
        && results
            .iter()
            .enumerate()
            .all(|(i, r)| !r.is_error && r.content == TOOL_TEXT && r.tool_use_id == format!("call_{i}"));
    if !expected {
        return Err(fail(format!("unexpected tool results: {results:?}")));
    }
    Ok(ChatResponse::new(Message::assistant(ANSWER), StopReason::EndTurn, usage, "bench"))
}

pub(crate) struct Framework {
    pub(crate) agent: Arc<Agent>,
    pub(crate) runtime: Runtime,
    /// The in-memory store the finished runs are dropped from (W1-W3); `None` when
    /// the runs are kept in a database (W4).
    store: Option<MemoryStore>,
    model: ScriptedModel,
    tool_calls: Arc<AtomicU64>,
}

impl Framework {
    pub(crate) fn new(w: Workload) -> Self {
        let fanout = w.calls_per_run();
        let mut model = ScriptedModel::from_fn(move |req| decide(req, fanout)).record_requests(false);
        if let Some(latency) = w.model_latency() {
            model = model.latency(latency);
        }
        let tool_calls = Arc::new(AtomicU64::new(0));
        let tool = WeatherTool { calls: tool_calls.clone(), latency: w.tool_latency() };
        let tools = ToolRegistry::new().with(tool).expect("one tool");
        // Default settings: tools run concurrently (up to 64 at once) without tuning.
        let agent = Agent::new(model.clone(), "bench", tools);
        let store = MemoryStore::new();
        Self {
            agent: Arc::new(agent),
            runtime: Runtime::with_store(store.clone()),
            store: Some(store),
            model,
            tool_calls,
        }
    }

    /// The W1 loop over a durable store.
    pub(crate) fn durable(w: Workload, store: Arc<dyn Store>) -> Self {
        let mut fw = Self::new(w);
        fw.runtime = Runtime::with_shared_store(store);
        fw.store = None;
        fw
    }

    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.model.calls(), self.tool_calls.load(Ordering::Relaxed))
    }

    fn run(&self) -> impl std::future::Future<Output = Result<(), String>> + Send + 'static {
        let (agent, runtime, store) = (self.agent.clone(), self.runtime.clone(), self.store.clone());
        async move {
            let reply = agent.ask(&runtime, QUESTION).await.map_err(|e: AskError| e.to_string())?;
            // A long-running service drops finished runs from an in-memory store.
            if let Some(store) = store {
                store.remove(reply.run_id);
            }
            if reply.text == ANSWER { Ok(()) } else { Err(format!("wrong answer: {}", reply.text)) }
        }
    }
}

/// The baseline's model: a trait object over JSON messages.
pub(crate) trait BaseModel: Send + Sync {
    fn chat<'a>(&'a self, messages: &'a [Value]) -> BoxFuture<'a, Result<Value, String>>;
}

pub(crate) struct BaseScripted {
    latency: Option<Duration>,
    fanout: usize,
    calls: AtomicU64,
}

impl BaseModel for BaseScripted {
    fn chat<'a>(&'a self, messages: &'a [Value]) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(async move {
            if let Some(l) = self.latency {
                tokio::time::sleep(l).await;
            }
            self.calls.fetch_add(1, Ordering::Relaxed);
            let last = messages.last().ok_or("empty conversation")?;
            let usage = json!({"input_tokens": 50, "output_tokens": 10});
            if last["role"] == "user" && last["content"][0]["text"] == QUESTION {
                let calls: Vec<Value> = (0..self.fanout)
                    .map(|i| {
                        let location = if self.fanout == 1 { "Berlin".to_owned() } else { format!("City{i}") };
                        json!({"type": "tool_use", "id": format!("call_{i}"), "name": "get_weather", "input": {"location": location}})
                    })
                    .collect();
                return Ok(
                    json!({"message": {"role": "assistant", "content": calls}, "stop_reason": "tool_use", "usage": usage}),
                );
            }
            let results = last["content"].as_array().ok_or("no tool results")?;
            let expected = results.len() == self.fanout
                && results
                    .iter()
                    .enumerate()
                    .all(|(i, r)| r["content"] == TOOL_TEXT && r["tool_use_id"] == format!("call_{i}"));
            if !expected {
                return Err("unexpected tool results".to_owned());
            }
            Ok(
                json!({"message": {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}, "stop_reason": "end_turn", "usage": usage}),
            )
        })
    }
}

pub(crate) type BaseTool = Box<dyn Fn(Value) -> BoxFuture<'static, Result<String, String>> + Send + Sync>;

pub(crate) struct Baseline {
    pub(crate) model: Arc<BaseScripted>,
    pub(crate) tools: Arc<HashMap<String, BaseTool>>,
    tool_calls: Arc<AtomicU64>,
}

impl Baseline {
    pub(crate) fn new(w: Workload) -> Self {
        let tool_calls = Arc::new(AtomicU64::new(0));
        let counter = tool_calls.clone();
        let latency = w.tool_latency();
        let weather: BaseTool = Box::new(move |args: Value| {
            counter.fetch_add(1, Ordering::Relaxed);
            Box::pin(async move {
                if let Some(l) = latency {
                    tokio::time::sleep(l).await;
                }
                args["location"].as_str().ok_or("missing location")?;
                Ok(TOOL_TEXT.to_owned())
            })
        });
        let tools = HashMap::from([("get_weather".to_owned(), weather)]);
        let model = BaseScripted { latency: w.model_latency(), fanout: w.calls_per_run(), calls: AtomicU64::new(0) };
        Self { model: Arc::new(model), tools: Arc::new(tools), tool_calls }
    }

    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.model.calls.load(Ordering::Relaxed), self.tool_calls.load(Ordering::Relaxed))
    }

    fn run(&self) -> impl std::future::Future<Output = Result<(), String>> + Send + 'static {
        let (model, tools) = (self.model.clone(), self.tools.clone());
        async move {
            let mut messages = vec![json!({"role": "user", "content": [{"type": "text", "text": QUESTION}]})];
            loop {
                let mut reply = model.chat(&messages).await?;
                let stop = reply["stop_reason"].clone();
                let message = reply["message"].take();
                let calls: Vec<(String, String, Value)> = message["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == "tool_use")
                    .map(|b| {
                        (
                            b["id"].as_str().unwrap_or_default().to_owned(),
                            b["name"].as_str().unwrap_or_default().to_owned(),
                            b["input"].clone(),
                        )
                    })
                    .collect();
                messages.push(message);
                if stop != "tool_use" {
                    let text = messages.last().and_then(|m| m["content"][0]["text"].as_str()).unwrap_or_default();
                    return if text == ANSWER { Ok(()) } else { Err(format!("wrong answer: {text}")) };
                }
                let results = futures::future::join_all(calls.into_iter().map(|(id, name, input)| {
                    let tools = tools.clone();
                    async move {
                        let out = match tools.get(&name) {
                            Some(tool) => tool(input).await,
                            None => Err(format!("unknown tool {name}")),
                        };
                        let (content, is_error) = match out {
                            Ok(t) => (t, false),
                            Err(e) => (e, true),
                        };
                        json!({"type": "tool_result", "tool_use_id": id, "content": content, "is_error": is_error})
                    }
                }))
                .await;
                messages.push(json!({"role": "user", "content": results}));
            }
        }
    }
}

impl Subject for Framework {
    fn run_one(&self) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(self.run())
    }
    fn counts(&self) -> (u64, u64) {
        Self::counts(self)
    }
}
impl Subject for Baseline {
    fn run_one(&self) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(self.run())
    }
    fn counts(&self) -> (u64, u64) {
        Self::counts(self)
    }
}
