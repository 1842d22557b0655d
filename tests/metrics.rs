//! Metrics and health over HTTP: a driven run, a queued run and an agent's model
//! turns and tool calls show in `/metrics` with their labels and values; `/readyz`
//! answers 503 while the store fails; `worker --metrics-addr` serves all three.

use loopstack::llm::{Agent, AgentStatus, Price, Prices, ScriptedModel, Usage};
use loopstack::metrics::Metrics;
use loopstack::prelude::*;
use loopstack::serve::{ServeOptions, serve};
use loopstack::{Schedule, SqliteStore, Timestamp};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

mod common;

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
struct Ticket {
    text: String,
}

struct Triage;

#[workflow(name = "triage", input = Ticket)]
impl Triage {
    #[transition(to = Read)]
    async fn read(&self, _ticket: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Read, to = End)]
    async fn file(&self, _ticket: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

/// Echoes its text.
#[tool]
async fn echo(text: String) -> Result<String, ToolError> {
    Ok(text)
}

/// Always fails.
#[tool]
async fn broken(text: String) -> Result<String, ToolError> {
    Err(ToolError::new(format!("cannot handle {text}")))
}

/// One GET, the connection closed after it: (status, body).
async fn get(address: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let connect = tokio::net::TcpStream::connect(address);
    let mut stream = tokio::time::timeout(std::time::Duration::from_secs(10), connect).await.unwrap().unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    let read = stream.read_to_string(&mut response);
    tokio::time::timeout(std::time::Duration::from_secs(30), read).await.unwrap().unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// The value of the series `series` (its name and labels, as written) in `text`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn sqlite() -> (SqliteStore, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("loopstack-metrics-{}.db", RunId::new()));
    (SqliteStore::open(&path).await.unwrap(), path)
}

async fn start(runtime: &Runtime, options: ServeOptions) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(serve(listener, runtime.clone(), options));
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_steps_model_turns_and_tool_calls_show_in_metrics() {
    let (store, path) = sqlite().await;
    let metrics = Metrics::new();
    let runtime = Runtime::with_store(store).register(Triage).with_metrics(metrics);
    let address = start(&runtime, ServeOptions::new()).await;

    // A run driven to its end, one queued for a worker.
    runtime.start(&Triage, Ticket { text: "printer".into() }).await.unwrap();
    runtime.submit(&Triage, Ticket { text: "screen".into() }).await.unwrap();
    // A schedule first due in an hour.
    let now = Timestamp::now();
    let hourly = Schedule::every(std::time::Duration::from_secs(3600)).unwrap();
    runtime.schedule("hourly", "triage", serde_json::json!({"text": "x"}), hourly).await.unwrap();
    // An agent's two turns, 100 tokens in and 20 out each, priced; two tool calls
    // in the first, one of which fails.
    let model = ScriptedModel::new()
        .model_name("m-1")
        .usage(Usage::new(100, 20))
        .tool_calls([("echo", serde_json::json!({"text": "hi"})), ("broken", serde_json::json!({"text": "hi"}))])
        .text("done");
    let tools = ToolRegistry::new().with(Echo).unwrap().with(Broken).unwrap();
    let agent = Agent::new(model, "m-1", tools).prices(Prices::new().model("m-1", Price::per_million(1.0, 2.0)));
    let reply = agent.ask(&runtime, "help").await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);

    let (status, text) = get(&address, "/metrics", None).await;
    assert_eq!(status, 200, "{text}");
    let expect = [
        // Recorded by this process.
        (r#"loopstack_drives_total{workflow="triage",outcome="completed"}"#, 1.0),
        (r#"loopstack_drives_total{workflow="agent",outcome="completed"}"#, 1.0),
        (r#"loopstack_step_duration_seconds_count{workflow="triage",transition="read"}"#, 1.0),
        (r#"loopstack_step_duration_seconds_count{workflow="triage",transition="file"}"#, 1.0),
        (r#"loopstack_step_duration_seconds_count{workflow="agent",transition="llm_turn"}"#, 2.0),
        (r#"loopstack_model_call_duration_seconds_count{provider="scripted",model="m-1",outcome="ok"}"#, 2.0),
        (r#"loopstack_model_tokens_total{provider="scripted",model="m-1",kind="input"}"#, 200.0),
        (r#"loopstack_model_tokens_total{provider="scripted",model="m-1",kind="output"}"#, 40.0),
        (r#"loopstack_tool_calls_total{tool="echo",outcome="ok"}"#, 1.0),
        (r#"loopstack_tool_calls_total{tool="broken",outcome="error"}"#, 1.0),
        // Read from the store: the queued run, which a worker could claim now.
        (r#"loopstack_runs{workflow="triage",status="queued"}"#, 1.0),
        (r#"loopstack_runs_runnable{workflow="triage"}"#, 1.0),
    ];
    for (series, expected) in expect {
        assert_eq!(value(&text, series), Some(expected), "{series} in:\n{text}");
    }
    // Two turns of (100 * 1 + 20 * 2) per million tokens.
    let cost = value(&text, r#"loopstack_model_cost_total{provider="scripted",model="m-1"}"#).unwrap();
    assert!((cost - 0.00028).abs() < 1e-12, "{cost}");
    assert_eq!(
        value(&text, r#"loopstack_runs{workflow="triage",status="running"}"#),
        None,
        "ended runs are not counted"
    );
    assert_eq!(value(&text, r#"loopstack_schedule_lag_seconds{schedule="hourly"}"#), Some(0.0), "not due yet");
    // Two hours on, by a runtime's clock over the same store, it is an hour late
    // (less the moments between reading `now` and storing the schedule).
    let later =
        Runtime::with_shared_store(runtime.store().clone()).clock(move || now + std::time::Duration::from_secs(7200));
    let text = Metrics::new().render(&later).await.unwrap();
    let lag = value(&text, r#"loopstack_schedule_lag_seconds{schedule="hourly"}"#).unwrap();
    assert!((3540.0..=3600.0).contains(&lag), "{lag}");
    let _ = std::fs::remove_file(&path);
}

/// `/healthz` and `/readyz` need no token and answer to any Host; `/metrics` is
/// under the API's token. `/readyz` (and `/metrics`) answer 503 with the reason
/// while the store fails, and 200 again once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_while_the_store_fails() {
    let (store, path) = sqlite().await;
    let runtime = Runtime::with_store(store).register(Triage);
    let address = start(&runtime, ServeOptions::new().token("s3cret")).await;

    assert_eq!(get(&address, "/healthz", None).await.0, 200);
    assert_eq!(get(&address, "/readyz", None).await.0, 200);
    assert_eq!(get(&address, "/metrics", None).await.0, 401);
    let (status, text) = get(&address, "/metrics", Some("s3cret")).await;
    assert_eq!(status, 200, "{text}");

    // The store loses its table of runs (another connection renames it).
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("ALTER TABLE runs RENAME TO runs_gone").unwrap();
    let (status, body) = get(&address, "/readyz", None).await;
    assert_eq!(status, 503, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(body["error"].as_str().unwrap().contains("runs"), "the reason: {body}");
    assert_eq!(get(&address, "/metrics", Some("s3cret")).await.0, 503);
    assert_eq!(get(&address, "/healthz", None).await.0, 200, "the process still lives");

    other.execute_batch("ALTER TABLE runs_gone RENAME TO runs").unwrap();
    assert_eq!(get(&address, "/readyz", None).await.0, 200);
    drop(runtime);
    let _ = std::fs::remove_file(&path);
}

/// `worker --metrics-addr` serves `/metrics`, `/healthz` and `/readyz` on a port
/// of its own, without a token: its drive of a queued run shows in its metrics.
#[test]
fn a_worker_serves_metrics_and_probes_on_its_own_port() {
    use std::io::{BufRead as _, Read as _};
    use std::process::{Command, Stdio};
    let ops = common::example("ops");
    let db = std::env::temp_dir().join(format!("loopstack-metrics-{}.db", RunId::new()));
    let queued =
        Command::new(&ops).arg("--db").arg(&db).args(["run", "review", "--input", r#"{"text": "Hi"}"#]).output();
    assert!(queued.unwrap().status.success());
    let mut worker = Command::new(&ops)
        .arg("--db")
        .arg(&db)
        .args(["worker", "--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(worker.stderr.take().unwrap());
    let mut line = String::new();
    let address = loop {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "the worker never said where its metrics are");
        if let Some(rest) = line.strip_prefix("worker: metrics on http://") {
            break rest.split('/').next().unwrap().to_owned();
        }
    };
    // Its stderr drained meanwhile, so that what it logs finds a reader.
    let drained = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
        rest
    });
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    assert_eq!(tokio.block_on(get(&address, "/healthz", None)).0, 200);
    assert_eq!(tokio.block_on(get(&address, "/readyz", None)).0, 200);
    // The worker takes the queued run to its wait; its metrics are read until then.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let waiting = r#"loopstack_drives_total{workflow="review",outcome="waiting"}"#;
    let text = loop {
        let (status, text) = tokio.block_on(get(&address, "/metrics", None));
        assert_eq!(status, 200, "{text}");
        if value(&text, waiting).is_some() || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(value(&text, waiting), Some(1.0), "{text}");
    assert_eq!(value(&text, "loopstack_runs_claimed_total"), Some(1.0), "{text}");
    assert_eq!(value(&text, r#"loopstack_runs{workflow="review",status="waiting"}"#), Some(1.0), "{text}");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(worker.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let logged = drained.join().unwrap();
    assert!(worker.wait().unwrap().success(), "{logged}");
    let _ = std::fs::remove_file(&db);
}
