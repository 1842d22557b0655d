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
//! - `--keyed [--n N]`: N keyed document saves in one transition (16,000 by default)
//!   and the same keys again in the next, through the in-memory store: milliseconds
//!   each (a save finds its key in an index, so both grow linearly).
//! - W4: the W1 loop with every transition checkpointed to a database
//!   (`--store sqlite|postgres`; PostgreSQL at `LOOPSTACK_DATABASE_URL`, by default the
//!   local server): runs/s, microseconds per run, and rows and bytes the database grew
//!   by per run. Its baseline writes, per step, one plain sqlx transaction that updates
//!   a run row and inserts the step's new documents, at the same durability settings
//!   (SQLite WAL with synchronous=FULL; PostgreSQL synchronous commit).

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use loopstack::llm::{
    Agent, AskError, ChatRequest, ChatResponse, ContentBlock, LlmError, Message, Role, ScriptedModel, StopReason,
    ToolUse, Usage,
};
use loopstack::prelude::*;
use loopstack::{Definition, END, MemoryStore, RunId, Runtime, START, Store, TransitionDef, TransitionError};
use loopstack_store::{PostgresStore, SqliteStore};
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
    W4,
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
            Self::W4 => (500, 20),
        }
    }
}

struct Args {
    workload: Workload,
    n: usize,
    warmup: usize,
    baseline: bool,
    compare: bool,
    store: DbKind,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum DbKind {
    Sqlite,
    Postgres,
}

fn parse_args() -> Result<Args, String> {
    let mut workload = None;
    let (mut n, mut warmup, mut baseline, mut compare) = (None, None, false, false);
    let mut store = DbKind::Sqlite;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--workload" => {
                workload = Some(match value()?.to_ascii_uppercase().as_str() {
                    "W1" => Workload::W1,
                    "W2" => Workload::W2,
                    "W3" => Workload::W3,
                    "W4" => Workload::W4,
                    other => return Err(format!("unknown workload `{other}`; use W1, W2, W3 or W4")),
                })
            }
            "--n" => n = Some(value()?.parse().map_err(|e| format!("--n: {e}"))?),
            "--warmup" => warmup = Some(value()?.parse().map_err(|e| format!("--warmup: {e}"))?),
            "--baseline" => baseline = true,
            "--compare" => compare = true,
            "--store" => {
                store = match value()?.as_str() {
                    "sqlite" => DbKind::Sqlite,
                    "postgres" => DbKind::Postgres,
                    other => return Err(format!("unknown store `{other}`; use sqlite or postgres")),
                }
            }
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    let workload = workload.ok_or(
        "usage: bench --workload W1|W2|W3|W4 [--n N] [--warmup K] [--baseline | --compare] [--store sqlite|postgres]",
    )?;
    let (dn, dw) = workload.defaults();
    Ok(Args { workload, n: n.unwrap_or(dn), warmup: warmup.unwrap_or(dw), baseline, compare, store })
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
    /// The in-memory store the finished runs are dropped from (W1-W3); `None` when
    /// the runs are kept in a database (W4).
    store: Option<MemoryStore>,
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
        Self {
            agent: Arc::new(agent),
            runtime: Runtime::with_store(store.clone()),
            store: Some(store),
            model,
            tool_calls,
        }
    }

    /// The W1 loop over a durable store.
    fn durable(w: Workload, store: Arc<dyn Store>) -> Self {
        let mut fw = Self::new(w);
        fw.runtime = Runtime::with_shared_store(store);
        fw.store = None;
        fw
    }

    fn counts(&self) -> (u64, u64) {
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

async fn measure(args: &Args, subject: &dyn Subject, db: Option<&Db>) -> Value {
    let w = args.workload;
    let mut errors = Vec::new();
    for _ in 0..args.warmup {
        if let Err(e) = subject.run_one().await {
            errors.push(e);
        }
    }
    let before = subject.counts();
    let db_before = match db {
        Some(db) => match db.size().await {
            Ok(size) => Some(size),
            Err(e) => {
                errors.push(format!("could not measure the database: {e}"));
                None
            }
        },
        None => None,
    };
    let (rss_before, _) = rss_kb();
    reset_peak_rss();
    let started = Instant::now();
    let mut walls = Vec::new();
    match w {
        Workload::W1 | Workload::W3 | Workload::W4 => {
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
    let growth = match (db, db_before) {
        (Some(db), Some(before)) => Some(db.size().await.map(|after| (after.0 - before.0, after.1 - before.1))),
        _ => None,
    };
    let n = args.n as u64;
    let mut ok = errors.is_empty() && model_calls == 2 * n && tool_calls == n * w.calls_per_run() as u64;
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
        Workload::W4 => {
            out["us_per_run"] = json!(round(wall.as_secs_f64() * 1e6 / args.n as f64, 2));
            out["store"] = json!(format!("{:?}", args.store).to_lowercase());
            match growth {
                Some(Ok((rows, bytes))) => {
                    out["rows_per_run"] = json!(round(rows as f64 / args.n as f64, 2));
                    out["db_bytes_per_run"] = json!(round(bytes as f64 / args.n as f64, 1));
                }
                Some(Err(e)) => {
                    eprintln!("could not measure the database: {e}");
                    ok = false;
                }
                None => ok = false,
            }
            out["ok"] = json!(ok);
        }
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
            "--store",
            if args.store == DbKind::Postgres { "postgres" } else { "sqlite" },
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
        Workload::W1 | Workload::W4 => "us_per_run",
        Workload::W2 => "kb_per_inflight_run",
        Workload::W3 => "wall_ms",
    };
    println!(
        "{}",
        json!({"workload": format!("{:?}", args.workload), "ratio": key, "framework_over_baseline": ratio(key)})
    );
    if fw["ok"] == true && base["ok"] == true { ExitCode::SUCCESS } else { ExitCode::from(2) }
}

/// Keyed saves: a workflow whose two transitions each save `keys` documents by key.
struct Keyed {
    keys: usize,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Counter {
    n: usize,
}

impl DocumentType for Counter {
    const TYPE: &'static str = "counter";
}

static KEYED: Definition = Definition::new(
    "keyed",
    &[START, "once", END],
    &[TransitionDef::new("first", &[START], "once"), TransitionDef::new("again", &["once"], END)],
);

impl Workflow for Keyed {
    type State = ();
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &KEYED
    }
    fn init(&self, (): ()) {}
    fn guard(&self, _: usize, (): &()) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        t: usize,
        (): &'a mut (),
        cx: &'a mut RunContext,
        _: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            let started = Instant::now();
            for n in 0..self.keys {
                cx.save_with(&Counter { n }, SaveOptions::new().key(format!("key-{n}")))
                    .map_err(TransitionError::failed)?;
            }
            eprintln!(
                "{}: {} keyed saves in {:.1} ms",
                KEYED.transitions()[t].name,
                self.keys,
                started.elapsed().as_secs_f64() * 1e3
            );
            Ok(())
        })
    }
}

fn keyed(keys: usize) -> ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let store = MemoryStore::new();
    let runtime = Runtime::with_store(store.clone());
    let started = Instant::now();
    let report = rt.block_on(runtime.start(&Keyed { keys }, ()).into_future());
    let wall = started.elapsed();
    let ok = match &report {
        Ok(report) => rt
            .block_on(store.documents(report.run_id))
            .is_ok_and(|docs| docs.len() == keys && docs.iter().all(|d| d.version == 2)),
        Err(_) => false,
    };
    println!("{}", json!({"workload": "keyed", "keys": keys, "wall_ms": round(wall.as_secs_f64() * 1e3, 1), "ok": ok}));
    if ok { ExitCode::SUCCESS } else { ExitCode::from(2) }
}

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--keyed") {
        let n = std::env::args().skip_while(|a| a != "--n").nth(1).and_then(|n| n.parse().ok()).unwrap_or(16_000);
        return keyed(n);
    }
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
        if args.workload == Workload::W4 {
            let db = match Db::open(args.store, args.baseline).await {
                Ok(db) => db,
                Err(e) => return json!({"workload": "W4", "ok": false, "error": e}),
            };
            let out = if args.baseline {
                measure(&args, &DurableBaseline { inner: Baseline::new(args.workload), db: db.clone() }, Some(&db))
                    .await
            } else {
                let fw = Framework::durable(args.workload, db.store.clone().expect("a framework store"));
                measure(&args, &fw, Some(&db)).await
            };
            db.cleanup().await;
            return out;
        }
        if args.baseline {
            measure(&args, &Baseline::new(args.workload), None).await
        } else {
            measure(&args, &Framework::new(args.workload), None).await
        }
    });
    println!("{out}");
    if out["ok"] == true { ExitCode::SUCCESS } else { ExitCode::from(2) }
}

// ---------------------------------------------------------------- W4: the database

/// The database of a W4 run: the framework's store or the baseline's tables, and how
/// to read its size.
#[derive(Clone)]
struct Db {
    kind: DbKind,
    sqlite: Option<sqlx::SqlitePool>,
    postgres: Option<sqlx::PgPool>,
    /// The framework's store (absent for the baseline).
    store: Option<Arc<dyn Store>>,
    dir: Option<std::path::PathBuf>,
    schema: Option<String>,
}

const BASELINE_SQLITE: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS bench_runs (run_id BLOB PRIMARY KEY, step INTEGER NOT NULL, state TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS bench_documents (run_id BLOB NOT NULL, seq INTEGER NOT NULL, content TEXT NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID",
];
const BASELINE_POSTGRES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS bench_runs (run_id UUID PRIMARY KEY, step BIGINT NOT NULL, state TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS bench_documents (run_id UUID NOT NULL, seq BIGINT NOT NULL, content TEXT NOT NULL, PRIMARY KEY (run_id, seq))",
];

impl Db {
    async fn open(kind: DbKind, baseline: bool) -> Result<Self, String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let mut db = Self { kind, sqlite: None, postgres: None, store: None, dir: None, schema: None };
        match kind {
            DbKind::Sqlite => {
                let dir = std::env::temp_dir().join(format!("loopstack-bench-{}", RunId::new()));
                std::fs::create_dir_all(&dir).map_err(|x| e(&x))?;
                let path = dir.join("bench.db");
                if baseline {
                    // The same settings the store uses: WAL, synchronous=FULL.
                    let options = sqlx::sqlite::SqliteConnectOptions::new()
                        .filename(&path)
                        .create_if_missing(true)
                        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                        .synchronous(sqlx::sqlite::SqliteSynchronous::Full);
                    let pool = sqlx::SqlitePool::connect_with(options).await.map_err(|x| e(&x))?;
                    for sql in BASELINE_SQLITE {
                        sqlx::query(sql).execute(&pool).await.map_err(|x| e(&x))?;
                    }
                    db.sqlite = Some(pool);
                } else {
                    let store = SqliteStore::open(&path).await.map_err(|x| e(&x))?;
                    db.sqlite = Some(store.pool().clone());
                    db.store = Some(Arc::new(store));
                }
                db.dir = Some(dir);
            }
            DbKind::Postgres => {
                let url = std::env::var("LOOPSTACK_DATABASE_URL")
                    .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
                let schema = format!("loopstack_bench_{}", RunId::new().0.simple());
                let store = PostgresStore::connect_schema(&url, &schema).await.map_err(|x| e(&x))?;
                if baseline {
                    for sql in BASELINE_POSTGRES {
                        sqlx::query(sql).execute(store.pool()).await.map_err(|x| e(&x))?;
                    }
                } else {
                    db.store = Some(Arc::new(store.clone()));
                }
                db.postgres = Some(store.pool().clone());
                db.schema = Some(schema);
            }
        }
        Ok(db)
    }

    /// Rows in all tables, and bytes on disk.
    async fn size(&self) -> Result<(i64, i64), String> {
        let e = |e: sqlx::Error| e.to_string();
        let tables: &[&str] = if self.store.is_some() {
            // The event log's tables too: a run nobody follows writes no row there.
            &["runs", "checkpoints", "documents", "signals", "events", "event_listeners"]
        } else {
            &["bench_runs", "bench_documents"]
        };
        let count = tables.iter().map(|t| format!("(SELECT count(*) FROM {t})")).collect::<Vec<_>>().join(" + ");
        let count = format!("SELECT {count} AS n");
        match self.kind {
            DbKind::Sqlite => {
                let pool = self.sqlite.as_ref().expect("a sqlite pool");
                let rows: i64 = sqlx::query_scalar(&count).fetch_one(pool).await.map_err(e)?;
                // Move the WAL into the main file first, so the file size counts it.
                sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(pool).await.map_err(e)?;
                let bytes: i64 =
                    sqlx::query_scalar("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()")
                        .fetch_one(pool)
                        .await
                        .map_err(e)?;
                Ok((rows, bytes))
            }
            DbKind::Postgres => {
                let pool = self.postgres.as_ref().expect("a postgres pool");
                let rows: i64 = sqlx::query_scalar(&count).fetch_one(pool).await.map_err(e)?;
                let bytes: i64 = sqlx::query_scalar(
                    "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::BIGINT FROM pg_class c \
                     JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'",
                )
                .fetch_one(pool)
                .await
                .map_err(e)?;
                Ok((rows, bytes))
            }
        }
    }

    /// Drops the database, unless `LOOPSTACK_BENCH_KEEP` is set (to look at its rows).
    async fn cleanup(&self) {
        if std::env::var_os("LOOPSTACK_BENCH_KEEP").is_some() {
            eprintln!("kept the database: {:?} {:?}", self.dir, self.schema);
            return;
        }
        if let (Some(pool), Some(schema)) = (&self.postgres, &self.schema) {
            let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(pool).await;
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// One plain transaction: update the run row (or create it) and insert new documents.
    async fn write_step(
        &self,
        run_id: uuid::Uuid,
        step: i64,
        state: &str,
        docs: &[(i64, String)],
    ) -> Result<(), String> {
        macro_rules! step_tx {
            ($pool:expr) => {{
                let e = |e: sqlx::Error| e.to_string();
                let mut tx = $pool.begin().await.map_err(e)?;
                if step == 0 {
                    sqlx::query("INSERT INTO bench_runs (run_id, step, state) VALUES ($1, $2, $3)")
                        .bind(run_id)
                        .bind(step)
                        .bind(state)
                        .execute(&mut *tx)
                        .await
                        .map_err(e)?;
                } else {
                    sqlx::query("UPDATE bench_runs SET step = $2, state = $3 WHERE run_id = $1")
                        .bind(run_id)
                        .bind(step)
                        .bind(state)
                        .execute(&mut *tx)
                        .await
                        .map_err(e)?;
                }
                for (seq, content) in docs {
                    sqlx::query("INSERT INTO bench_documents (run_id, seq, content) VALUES ($1, $2, $3)")
                        .bind(run_id)
                        .bind(*seq)
                        .bind(content.as_str())
                        .execute(&mut *tx)
                        .await
                        .map_err(e)?;
                }
                tx.commit().await.map_err(e)
            }};
        }
        match (&self.sqlite, &self.postgres) {
            (Some(pool), _) => step_tx!(pool),
            (None, Some(pool)) => step_tx!(pool),
            (None, None) => Err("no database".to_owned()),
        }
    }
}

/// The baseline loop, persisting the same steps the agent checkpoints, each in one
/// plain transaction: create the run with the question, then `llm_turn` (the model's
/// message), `execute_tool_calls` (the results), `tools_complete` (no document), the
/// second `llm_turn`, and `respond` (no document).
struct DurableBaseline {
    inner: Baseline,
    db: Db,
}

impl Subject for DurableBaseline {
    fn run_one(&self) -> BoxFuture<'static, Result<(), String>> {
        let (model, tools, db) = (self.inner.model.clone(), self.inner.tools.clone(), self.db.clone());
        Box::pin(async move {
            let run_id = RunId::new().0;
            let mut step = 0;
            let mut write = async |docs: &[(i64, String)]| {
                let state = format!(r#"{{"step":{step}}}"#);
                let result = db.write_step(run_id, step, &state, docs).await;
                step += 1;
                result
            };
            write(&[]).await?; // the run row
            let question = json!({"role": "user", "content": [{"type": "text", "text": QUESTION}]});
            write(&[(0, question.to_string())]).await?; // setup
            let mut messages = vec![question];
            loop {
                let mut reply = model.chat(&messages).await?;
                let stop = reply["stop_reason"].clone();
                let message = reply["message"].take();
                write(&[(messages.len() as i64, message.to_string())]).await?; // llm_turn
                let calls: Vec<(String, Value)> = message["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == "tool_use")
                    .map(|b| (b["id"].as_str().unwrap_or_default().to_owned(), b["input"].clone()))
                    .collect();
                messages.push(message);
                if stop != "tool_use" {
                    write(&[]).await?; // respond
                    return Ok(());
                }
                let mut results = Vec::new();
                for (id, input) in calls {
                    let content = match tools.get("get_weather") {
                        Some(tool) => tool(input).await?,
                        None => return Err("no tool".to_owned()),
                    };
                    results
                        .push(json!({"type": "tool_result", "tool_use_id": id, "content": content, "is_error": false}));
                }
                let results = json!({"role": "user", "content": results});
                write(&[(messages.len() as i64, results.to_string())]).await?; // execute_tool_calls
                write(&[]).await?; // tools_complete
                messages.push(results);
            }
        })
    }
    fn counts(&self) -> (u64, u64) {
        self.inner.counts()
    }
}
