//! The overhead benchmark: what the framework itself costs per run, measured with the
//! scripted model through the public API (the ready-made agent loop), against a plain
//! hand-written tokio loop (`--baseline`).
//!
//! ```text
//! cargo run --release --example bench -- --workload W1 [--n 2000] [--warmup 50]
//! cargo run --release --example bench -- --workload W1 --baseline
//! cargo run --release --example bench -- --workload W2 --compare   # both, one process each, plus ratios
//! ```
//!
//! One run: the user asks `What is the weather in Berlin?`; model turn 1 asks for
//! `get_weather {"location":"Berlin"}` (W3: 64 calls at once); the tool answers; model
//! turn 2 answers `It is mostly sunny in Berlin.`. The model is stateless: it decides
//! from the conversation and checks the tool results it receives.
//!
//! - W1: sequential, no latency: runs/s and microseconds per run.
//! - W2: each model turn awaits 20 ms; N runs started at once: wall time, peak RSS and
//!   memory per in-flight run.
//! - W3: 64 tool calls per run, each awaiting 50 ms: median wall time per run.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use loopstack::llm::{
    Agent, AgentError, ChatRequest, ChatResponse, ContentBlock, LlmError, Message, Role, ScriptedModel, StopReason,
    ToolUse, Usage,
};
use loopstack::prelude::*;
use loopstack::{MemoryStore, Runtime};
use serde_json::{Value, json};

const QUESTION: &str = "What is the weather in Berlin?";
const TOOL_TEXT: &str = "Mostly sunny, 14C, rain in the afternoon.";
const ANSWER: &str = "It is mostly sunny in Berlin.";
const FANOUT: usize = 64;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Workload {
    W1,
    W2,
    W3,
}

impl Workload {
    fn model_latency(self) -> Option<Duration> {
        (self == Self::W2).then(|| Duration::from_millis(20))
    }
    fn tool_latency(self) -> Option<Duration> {
        (self == Self::W3).then(|| Duration::from_millis(50))
    }
    fn calls_per_run(self) -> usize {
        if self == Self::W3 { FANOUT } else { 1 }
    }
    fn defaults(self) -> (usize, usize) {
        match self {
            Self::W1 => (2000, 50),
            Self::W2 => (2000, 20),
            Self::W3 => (20, 2),
        }
    }
}

struct Args {
    workload: Workload,
    n: usize,
    warmup: usize,
    baseline: bool,
    compare: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut workload = None;
    let (mut n, mut warmup, mut baseline, mut compare) = (None, None, false, false);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--workload" => {
                workload = Some(match value()?.to_ascii_uppercase().as_str() {
                    "W1" => Workload::W1,
                    "W2" => Workload::W2,
                    "W3" => Workload::W3,
                    other => return Err(format!("unknown workload `{other}`; use W1, W2 or W3")),
                })
            }
            "--n" => n = Some(value()?.parse().map_err(|e| format!("--n: {e}"))?),
            "--warmup" => warmup = Some(value()?.parse().map_err(|e| format!("--warmup: {e}"))?),
            "--baseline" => baseline = true,
            "--compare" => compare = true,
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    let workload = workload.ok_or("usage: bench --workload W1|W2|W3 [--n N] [--warmup K] [--baseline | --compare]")?;
    let (dn, dw) = workload.defaults();
    Ok(Args { workload, n: n.unwrap_or(dn), warmup: warmup.unwrap_or(dw), baseline, compare })
}

// ---------------------------------------------------------------- the framework side

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

struct Framework {
    agent: Arc<Agent>,
    runtime: Runtime,
    store: MemoryStore,
    model: ScriptedModel,
    tool_calls: Arc<AtomicU64>,
}

impl Framework {
    fn new(w: Workload) -> Self {
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
        Self { agent: Arc::new(agent), runtime: Runtime::with_store(store.clone()), store, model, tool_calls }
    }

    fn counts(&self) -> (u64, u64) {
        (self.model.calls(), self.tool_calls.load(Ordering::Relaxed))
    }

    fn run(&self) -> impl std::future::Future<Output = Result<(), String>> + Send + 'static {
        let (agent, runtime, store) = (self.agent.clone(), self.runtime.clone(), self.store.clone());
        async move {
            let reply = agent.ask(&runtime, QUESTION).await.map_err(|e: AgentError| e.to_string())?;
            // A long-running service drops finished runs from an in-memory store.
            store.remove(reply.run_id);
            if reply.text == ANSWER { Ok(()) } else { Err(format!("wrong answer: {}", reply.text)) }
        }
    }
}

// ---------------------------------------------------------------- the baseline

/// The baseline's model: a trait object over JSON messages.
trait BaseModel: Send + Sync {
    fn chat<'a>(&'a self, messages: &'a [Value]) -> BoxFuture<'a, Result<Value, String>>;
}

struct BaseScripted {
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

type BaseTool = Box<dyn Fn(Value) -> BoxFuture<'static, Result<String, String>> + Send + Sync>;

struct Baseline {
    model: Arc<BaseScripted>,
    tools: Arc<HashMap<String, BaseTool>>,
    tool_calls: Arc<AtomicU64>,
}

impl Baseline {
    fn new(w: Workload) -> Self {
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

    fn counts(&self) -> (u64, u64) {
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

// ---------------------------------------------------------------- measuring

trait Subject {
    fn run_one(&self) -> BoxFuture<'static, Result<(), String>>;
    fn counts(&self) -> (u64, u64);
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

/// Resident set size and its peak, in kB, from /proc (Linux).
fn rss_kb() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets the kernel's peak-RSS mark to the current RSS.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

async fn measure(args: &Args, subject: &dyn Subject) -> Value {
    let w = args.workload;
    let mut errors = Vec::new();
    for _ in 0..args.warmup {
        if let Err(e) = subject.run_one().await {
            errors.push(e);
        }
    }
    let before = subject.counts();
    let (rss_before, _) = rss_kb();
    reset_peak_rss();
    let started = Instant::now();
    let mut walls = Vec::new();
    match w {
        Workload::W1 | Workload::W3 => {
            for _ in 0..args.n {
                let t = Instant::now();
                if let Err(e) = subject.run_one().await {
                    errors.push(e);
                }
                walls.push(t.elapsed());
            }
        }
        Workload::W2 => {
            let handles: Vec<_> = (0..args.n).map(|_| tokio::spawn(subject.run_one())).collect();
            for h in handles {
                match h.await {
                    Ok(Err(e)) => errors.push(e),
                    Err(e) => errors.push(e.to_string()),
                    Ok(Ok(())) => {}
                }
            }
        }
    }
    let wall = started.elapsed();
    let (_, peak) = rss_kb();
    let after = subject.counts();
    let (model_calls, tool_calls) = (after.0 - before.0, after.1 - before.1);
    let n = args.n as u64;
    let ok = errors.is_empty() && model_calls == 2 * n && tool_calls == n * w.calls_per_run() as u64;
    if let Some(e) = errors.first() {
        eprintln!("{} runs failed; first error: {e}", errors.len());
    }
    let mut out = json!({
        "framework": if args.baseline { "baseline" } else { "loopstack" },
        "version": env!("CARGO_PKG_VERSION"),
        "workload": format!("{w:?}"),
        "n": args.n,
        "wall_s": round(wall.as_secs_f64(), 4),
        "runs_per_s": round(args.n as f64 / wall.as_secs_f64(), 1),
        "rss_before_mb": round(rss_before as f64 / 1024.0, 2),
        "peak_rss_mb": round(peak as f64 / 1024.0, 2),
        "model_calls": model_calls,
        "tool_calls": tool_calls,
        "ok": ok,
    });
    match w {
        Workload::W1 => out["us_per_run"] = json!(round(wall.as_secs_f64() * 1e6 / args.n as f64, 2)),
        Workload::W2 => {
            out["kb_per_inflight_run"] = json!(round(peak.saturating_sub(rss_before) as f64 / args.n as f64, 2))
        }
        Workload::W3 => {
            walls.sort();
            let median = walls.get(walls.len() / 2).copied().unwrap_or_default();
            out["wall_ms"] = json!(round(median.as_secs_f64() * 1e3, 2));
        }
    }
    out
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// Runs the framework and the baseline in one child process each, so neither's memory
/// colours the other's, and prints both lines and their ratios.
fn compare(args: &Args) -> ExitCode {
    let exe = std::env::current_exe().expect("own path");
    let mut lines = Vec::new();
    for baseline in [true, false] {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args([
            "--workload",
            &format!("{:?}", args.workload),
            "--n",
            &args.n.to_string(),
            "--warmup",
            &args.warmup.to_string(),
        ]);
        if baseline {
            cmd.arg("--baseline");
        }
        let out = match cmd.output() {
            Ok(out) => out,
            Err(e) => {
                eprintln!("could not run {}: {e}", exe.display());
                return ExitCode::FAILURE;
            }
        };
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        println!("{line}");
        lines.push(serde_json::from_str::<Value>(&line).unwrap_or(Value::Null));
    }
    let (base, fw) = (&lines[0], &lines[1]);
    let ratio = |k: &str| match (fw[k].as_f64(), base[k].as_f64()) {
        (Some(a), Some(b)) if b > 0.0 => json!(round(a / b, 2)),
        _ => Value::Null,
    };
    let key = match args.workload {
        Workload::W1 => "us_per_run",
        Workload::W2 => "kb_per_inflight_run",
        Workload::W3 => "wall_ms",
    };
    println!(
        "{}",
        json!({"workload": format!("{:?}", args.workload), "ratio": key, "framework_over_baseline": ratio(key)})
    );
    if fw["ok"] == true && base["ok"] == true { ExitCode::SUCCESS } else { ExitCode::from(2) }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    if args.compare {
        return compare(&args);
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    let out = rt.block_on(async {
        if args.baseline {
            measure(&args, &Baseline::new(args.workload)).await
        } else {
            measure(&args, &Framework::new(args.workload)).await
        }
    });
    println!("{out}");
    if out["ok"] == true { ExitCode::SUCCESS } else { ExitCode::from(2) }
}
