//! The `otel` feature against a real OTLP endpoint: Arize Phoenix, an open-source
//! trace server (`.ci/otel-endpoint` installs it under target/otel-python), started on
//! loopback. An agent's run waits for an approval, its runtime is dropped, and a new
//! runtime over a new connection to the same SQLite file finishes it: Phoenix must
//! hold both drives in the one trace of the request span that started the run, with
//! the GenAI attributes (token counts as integers) on the model and tool spans.
//!
//! Without Phoenix the test is skipped, saying so and how to install it; where `CI`
//! is set it fails instead. Run it with `cargo test --features otel --test otel`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use loopstack::llm::{Agent, AgentStatus, ScriptedModel, ToolDecisions};
use loopstack::prelude::*;
use loopstack::{SqliteStore, Store};
use serde_json::Value;
use tracing::Instrument as _;

/// The pinned version `.ci/otel-endpoint` installs.
const PHOENIX_VERSION: &str = "20.26.1";

/// Refunds an order: a person approves each call.
#[tool(approve)]
async fn issue_refund(order: String) -> Result<String, ToolError> {
    Ok(format!("refunded {order}"))
}

/// Asks for the refund, then answers from the tool result.
fn agent() -> Agent {
    let model = ScriptedModel::from_fn(|req| {
        let last = req.messages.last().unwrap();
        Ok(match last.tool_results_iter().next() {
            Some(result) => ScriptedModel::new().text_response(format!("Done: {}", result.content)),
            None => ScriptedModel::new().tool_call_response("issue_refund", serde_json::json!({"order": "A-17"})),
        })
    });
    Agent::new(model, "refund-model", ToolRegistry::new().with(IssueRefund).unwrap()).named("refunds").unwrap()
}

/// Phoenix's `phoenix` command, or `None` (skipped) when it is missing outside CI.
fn phoenix() -> Option<PathBuf> {
    let bin = std::env::var_os("LOOPSTACK_PHOENIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/otel-python/bin/phoenix"));
    if bin.exists() {
        return Some(bin);
    }
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !ci,
        "the OpenTelemetry test needs Arize Phoenix at {} where CI is set: run `.ci/otel-endpoint` (as .ci/run does), \
         or set LOOPSTACK_PHOENIX to its `phoenix` command",
        bin.display()
    );
    let _ = writeln!(
        std::io::stderr(),
        "skipped: the OpenTelemetry test needs Arize Phoenix at {}; run `.ci/otel-endpoint` (python3 -m venv and pip \
         install arize-phoenix=={PHOENIX_VERSION} under target/otel-python), then `cargo test --features otel --test otel`",
        bin.display()
    );
    None
}

/// The server, ended (by its own pid) when the test ends.
struct Server {
    child: Child,
    url: String,
    _dir: TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts Phoenix on free loopback ports with a database of its own, and waits until
/// it answers its REST API.
async fn start(bin: PathBuf) -> Server {
    let dir = TempDir(std::env::temp_dir().join(format!("loopstack-phoenix-{}", RunId::new())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let port = free_port();
    let child = Command::new(bin)
        .arg("serve")
        .env("PHOENIX_HOST", "127.0.0.1")
        .env("PHOENIX_PORT", port.to_string())
        .env("PHOENIX_GRPC_PORT", free_port().to_string())
        .env("PHOENIX_WORKING_DIR", &dir.0)
        .env("PHOENIX_TELEMETRY_ENABLED", "false")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server { child, url: format!("http://127.0.0.1:{port}"), _dir: dir };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let answer = client.get(format!("{}/v1/projects", server.url)).send().await;
        if answer.is_ok_and(|r| r.status().is_success()) {
            return server;
        }
        assert!(Instant::now() < deadline, "Phoenix did not answer at {} within 180 s", server.url);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The spans Phoenix holds (OTLP-shaped: typed attribute values), once `done` holds
/// of them; Phoenix writes what it receives in batches.
async fn spans(url: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let body: Value = client
            .get(format!("{url}/v1/projects/default/spans/otlpv1?limit=1000"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let spans = body["data"].as_array().cloned().unwrap_or_default();
        if done(&spans) {
            return spans;
        }
        assert!(Instant::now() < deadline, "Phoenix never held the expected spans; it holds {spans:#?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

/// An attribute's OTLP value (`{"string_value": ..}`, `{"int_value": ..}`, ...).
fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    span["attributes"]
        .as_array()
        .and_then(|a| a.iter().find(|kv| kv["key"] == key))
        .map_or(&Value::Null, |kv| &kv["value"])
}

fn string<'a>(span: &'a Value, key: &str) -> &'a str {
    attribute(span, key)["string_value"].as_str().unwrap_or_else(|| panic!("no string {key} on {span:#}"))
}

/// An integer attribute (OTLP's JSON may write an int64 as a string).
fn integer(span: &Value, key: &str) -> i64 {
    let value = &attribute(span, key)["int_value"];
    value
        .as_i64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("no integer {key} on {span:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_exported_as_one_trace_each_across_a_restart_with_genai_attributes() {
    let Some(bin) = phoenix() else { return };
    let server = start(bin).await;
    let otel = loopstack::otel::Otel::new()
        .endpoint(&server.url)
        .service_name("loopstack-otel-test")
        .filter("info")
        .without_log()
        .init()
        .unwrap();

    let path = std::env::temp_dir().join(format!("loopstack-otel-{}.db", RunId::new()));
    let open = || async { Arc::new(SqliteStore::open(&path).await.unwrap()) as Arc<dyn Store> };

    // A request handler's span starts the run; the first drive waits for approval.
    let request = tracing::info_span!("handle_request");
    let first = Runtime::with_shared_store(open().await).register(agent());
    let reply = agent().ask(&first, "Refund A-17").instrument(request.clone()).await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = &reply.status else { panic!("{:?}", reply.status) };
    drop(first);
    drop(request);

    // Another runtime, as after a restart, outside any span, finishes it.
    let second = Runtime::with_shared_store(open().await).register(agent());
    let done = agent().decide(&second, reply.run_id, ToolDecisions::approve_all(calls)).await.unwrap();
    assert_eq!(done.status, AgentStatus::Completed);

    // A run nobody's span started is the root of a trace of its own.
    let alone = agent().ask(&second, "Refund B-2").await.unwrap();
    otel.shutdown().await.unwrap();

    let spans =
        spans(&server.url, |s| named(s, "run refunds").len() >= 3 && !named(s, "execute_tool issue_refund").is_empty())
            .await;
    let request = named(&spans, "handle_request");
    assert_eq!(request.len(), 1, "{spans:#?}");
    let trace = request[0]["trace_id"].as_str().unwrap();
    let of_run = |run_id: RunId| -> Vec<&Value> {
        named(&spans, "run refunds").into_iter().filter(|s| string(s, "run_id") == run_id.to_string()).collect()
    };

    // Both drives of the first run, the first in this runtime and the second in the
    // next, are children of the request's span, in its trace.
    let drives = of_run(reply.run_id);
    assert_eq!(drives.len(), 2, "{spans:#?}");
    for drive in &drives {
        assert_eq!(drive["trace_id"], trace, "{drive:#}");
        assert_eq!(drive["parent_span_id"], request[0]["span_id"], "{drive:#}");
        assert_eq!(string(drive, "workflow"), "refunds");
    }
    let in_trace: Vec<&Value> = spans.iter().filter(|s| s["trace_id"] == trace).collect();

    // The model turns: GenAI names and attributes, token counts as integers.
    let turns: Vec<&&Value> = in_trace.iter().filter(|s| s["name"] == "chat refund-model").collect();
    assert_eq!(turns.len(), 2, "{in_trace:#?}");
    for turn in &turns {
        assert_eq!(string(turn, "gen_ai.operation.name"), "chat");
        assert_eq!(string(turn, "gen_ai.provider.name"), "scripted");
        assert_eq!(string(turn, "gen_ai.request.model"), "refund-model");
        assert_eq!(string(turn, "gen_ai.agent.name"), "refunds");
        assert_eq!(integer(turn, "gen_ai.usage.input_tokens"), 10);
        assert_eq!(integer(turn, "gen_ai.usage.output_tokens"), 10);
        // (Phoenix keeps its own span kinds, not OTLP's, so `otel.kind` is not checked here.)
    }

    // The tool call, in the second drive.
    let tools: Vec<&&Value> = in_trace.iter().filter(|s| s["name"] == "execute_tool issue_refund").collect();
    assert_eq!(tools.len(), 1, "{in_trace:#?}");
    assert_eq!(string(tools[0], "gen_ai.operation.name"), "execute_tool");
    assert_eq!(string(tools[0], "gen_ai.tool.name"), "issue_refund");
    assert_eq!(string(tools[0], "gen_ai.tool.call.id"), calls[0].call_id);

    // The run started outside any span: a `start refunds` root and its drive in one
    // trace of their own.
    let alone = of_run(alone.run_id);
    assert_eq!(alone.len(), 1, "{spans:#?}");
    assert_ne!(alone[0]["trace_id"], trace);
    let root: Vec<&Value> =
        named(&spans, "start refunds").into_iter().filter(|s| s["trace_id"] == alone[0]["trace_id"]).collect();
    assert_eq!(root.len(), 1, "{spans:#?}");
    assert_eq!(alone[0]["parent_span_id"], root[0]["span_id"]);

    drop(server);
    let _ = std::fs::remove_file(&path);
}
