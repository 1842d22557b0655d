//! The `otel` feature against a real OTLP endpoint: Arize Phoenix, an open-source
//! trace server (`.ci/otel-endpoint` installs it under target/otel-python), started on
//! loopback. An agent's run waits for an approval, its runtime is dropped, and a new
//! runtime over a new connection to the same SQLite file finishes it: Phoenix must
//! hold both drives in the one trace of the request span that started the run, with
//! the GenAI attributes (token counts as integers) on the run, model and tool spans.
//!
//! The GenAI client metrics go to an OTLP receiver of the test's own on loopback
//! (Phoenix takes traces only), which decodes the protobuf it is sent.
//!
//! Without Phoenix the test is skipped, saying so and how to install it; where `CI`
//! is set it fails instead. Run it with `cargo test --features otel --test otel`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loopstack::llm::{Agent, AgentStatus, ScriptedModel, ToolDecisions, Usage};
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

/// What each of the refund model's turns reports: cached and reasoning tokens too.
const REFUND_USAGE: Usage = Usage {
    input_tokens: 10,
    output_tokens: 10,
    cache_read_input_tokens: 4,
    cache_creation_input_tokens: 2,
    reasoning_output_tokens: 3,
};

/// Asks for the refund, then answers from the tool result.
fn agent() -> Agent {
    let model = ScriptedModel::from_fn(|req| {
        let last = req.messages.last().unwrap();
        let reply = ScriptedModel::new().usage(REFUND_USAGE);
        Ok(match last.tool_results_iter().next() {
            Some(result) => reply.text_response(format!("Done: {}", result.content)),
            None => reply.tool_call_response("issue_refund", serde_json::json!({"order": "A-17"})),
        })
    });
    Agent::new(model, "refund-model", ToolRegistry::new().with(IssueRefund).unwrap()).named("refunds").unwrap()
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Lookup {
    done: bool,
}

/// A workflow that is not an agent.
struct LookUp;

#[workflow(name = "lookup", input = Lookup)]
impl LookUp {
    #[transition(to = End)]
    async fn look(&self, lookup: &mut Lookup, _cx: &mut RunContext) -> Result<()> {
        lookup.done = true;
        Ok(())
    }
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
    let client = loopstack_model::http::client_builder().build().unwrap();
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
    let client = loopstack_model::http::client_builder().build().unwrap();
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
    let second = Runtime::with_shared_store(open().await).register(agent()).register(LookUp);
    let done = agent().decide(&second, reply.run_id, ToolDecisions::approve_all(calls)).await.unwrap();
    assert_eq!(done.status, AgentStatus::Completed);

    // A run nobody's span started is the root of a trace of its own.
    let alone = agent().ask(&second, "Refund B-2").await.unwrap();
    // A workflow that is not an agent.
    let lookup = second.start(&LookUp, Lookup::default()).await.unwrap();
    otel.shutdown().await.unwrap();

    let spans = spans(&server.url, |s| {
        named(s, "invoke_agent refunds").len() >= 3
            && !named(s, "execute_tool issue_refund").is_empty()
            && !named(s, "invoke_workflow lookup").is_empty()
    })
    .await;
    let request = named(&spans, "handle_request");
    assert_eq!(request.len(), 1, "{spans:#?}");
    let trace = request[0]["trace_id"].as_str().unwrap();
    let of_run = |run_id: RunId| -> Vec<&Value> {
        named(&spans, "invoke_agent refunds")
            .into_iter()
            .filter(|s| string(s, "run_id") == run_id.to_string())
            .collect()
    };

    // Both drives of the first run, the first in this runtime and the second in the
    // next, are children of the request's span, in its trace.
    let drives = of_run(reply.run_id);
    assert_eq!(drives.len(), 2, "{spans:#?}");
    for drive in &drives {
        assert_eq!(drive["trace_id"], trace, "{drive:#}");
        assert_eq!(drive["parent_span_id"], request[0]["span_id"], "{drive:#}");
        assert_eq!(string(drive, "workflow"), "refunds");
        assert_eq!(string(drive, "gen_ai.operation.name"), "invoke_agent");
        assert_eq!(string(drive, "gen_ai.agent.name"), "refunds");
        assert_eq!(string(drive, "gen_ai.conversation.id"), reply.run_id.to_string());
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
        assert_eq!(string(turn, "gen_ai.conversation.id"), reply.run_id.to_string());
        // Input tokens count the cached ones too, as the conventions have it.
        assert_eq!(integer(turn, "gen_ai.usage.input_tokens"), 16);
        assert_eq!(integer(turn, "gen_ai.usage.output_tokens"), 10);
        assert_eq!(integer(turn, "gen_ai.usage.cache_read.input_tokens"), 4);
        assert_eq!(integer(turn, "gen_ai.usage.cache_creation.input_tokens"), 2);
        assert_eq!(integer(turn, "gen_ai.usage.reasoning.output_tokens"), 3);
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

    // A workflow's run is an `invoke_workflow` operation, its run the conversation.
    let workflow = named(&spans, "invoke_workflow lookup");
    assert_eq!(workflow.len(), 1, "{spans:#?}");
    assert_eq!(string(workflow[0], "gen_ai.operation.name"), "invoke_workflow");
    assert_eq!(string(workflow[0], "gen_ai.workflow.name"), "lookup");
    assert_eq!(string(workflow[0], "gen_ai.conversation.id"), lookup.run_id.to_string());

    drop(server);
    let _ = std::fs::remove_file(&path);
}

/// An OTLP/HTTP receiver on loopback: the bodies of the requests sent to
/// `/v1/metrics`, each answered 200 (an empty export response).
async fn receiver() -> (String, Arc<Mutex<Vec<Vec<u8>>>>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = bodies.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                // One connection carries request after request (keep-alive).
                let mut buf = Vec::new();
                loop {
                    let head_end = loop {
                        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break at + 4;
                        }
                        let mut chunk = [0; 4096];
                        let read = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut chunk)).await;
                        match read {
                            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                            _ => return,
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|line| line.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    while buf.len() < head_end + length {
                        let mut chunk = [0; 4096];
                        let read = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut chunk)).await;
                        match read {
                            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                            _ => return,
                        }
                    }
                    let body: Vec<u8> = buf.drain(..head_end + length).skip(head_end).collect();
                    if head.starts_with("post /v1/metrics ") {
                        kept.lock().unwrap().push(body);
                    }
                    let answer =
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, bodies)
}

/// One field of a protobuf message, as the wire has it.
#[derive(Debug, Clone, Copy)]
enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32,
}

fn varint(buf: &mut &[u8]) -> u64 {
    let mut value = 0;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first().expect("a truncated varint");
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return value;
        }
    }
    panic!("a varint longer than 64 bits")
}

/// The fields of a protobuf message, by number, in order.
fn fields(mut buf: &[u8]) -> Vec<(u64, Field<'_>)> {
    let mut fields = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf);
        let field = match key & 7 {
            0 => Field::Varint(varint(&mut buf)),
            1 => {
                let (bytes, rest) = buf.split_at(8);
                buf = rest;
                Field::Fixed64(u64::from_le_bytes(bytes.try_into().unwrap()))
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)).unwrap();
                let (bytes, rest) = buf.split_at(len);
                buf = rest;
                Field::Bytes(bytes)
            }
            5 => {
                buf = &buf[4..];
                Field::Fixed32
            }
            wire => panic!("wire type {wire} in an OTLP message"),
        };
        fields.push((key >> 3, field));
    }
    fields
}

/// The messages (or strings) in field `number` of `message`.
fn all(message: &[u8], number: u64) -> Vec<&[u8]> {
    fields(message)
        .into_iter()
        .filter_map(|(n, f)| match f {
            Field::Bytes(bytes) if n == number => Some(bytes),
            _ => None,
        })
        .collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// A histogram's data point, as OTLP's `HistogramDataPoint` has it.
#[derive(Debug, PartialEq)]
struct Point {
    attributes: Vec<(String, String)>,
    count: u64,
    sum: f64,
}

/// The histograms of an `ExportMetricsServiceRequest`: name, unit and data points.
fn histograms(request: &[u8]) -> Vec<(String, String, Vec<Point>)> {
    let mut found = Vec::new();
    // ResourceMetrics (1) > ScopeMetrics (2) > Metric (2).
    for metric in all(request, 1).into_iter().flat_map(|r| all(r, 2)).flat_map(|s| all(s, 2)) {
        let name = all(metric, 1).first().map(|b| text(b)).unwrap_or_default();
        let unit = all(metric, 3).first().map(|b| text(b)).unwrap_or_default();
        // Histogram (9) > HistogramDataPoint (1).
        let points = all(metric, 9).into_iter().flat_map(|h| all(h, 1)).map(point).collect();
        found.push((name, unit, points));
    }
    found
}

fn point(message: &[u8]) -> Point {
    let mut point = Point { attributes: Vec::new(), count: 0, sum: f64::NAN };
    for (number, field) in fields(message) {
        match (number, field) {
            // KeyValue: key (1), AnyValue (2) with a string (1) or an int64 (3).
            (9, Field::Bytes(kv)) => {
                let key = text(all(kv, 1)[0]);
                let value = fields(all(kv, 2)[0])
                    .into_iter()
                    .find_map(|f| match f {
                        (1, Field::Bytes(s)) => Some(text(s)),
                        (3, Field::Varint(i)) => Some(i.to_string()),
                        _ => None,
                    })
                    .unwrap();
                point.attributes.push((key, value));
            }
            (4, Field::Fixed64(count)) => point.count = count,
            (5, Field::Fixed64(sum)) => point.sum = f64::from_bits(sum),
            _ => {}
        }
    }
    point.attributes.sort();
    point
}

fn attributes(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut attributes: Vec<(String, String)> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    attributes.sort();
    attributes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_turns_record_the_genai_client_metrics_exported_over_otlp() {
    let (url, bodies) = receiver().await;
    // A layer never installed: this test's spans go nowhere; its metrics are recorded
    // by every model turn in the process while the guard lives.
    let (_layer, otel) = loopstack::otel::Otel::new()
        .endpoint(&url)
        .service_name("loopstack-otel-metrics-test")
        .metrics()
        .layer::<tracing_subscriber::Registry>()
        .unwrap();

    // One turn that answers, with known usage, and one whose model fails. The model
    // names are this test's own: the other test's turns, in this process, record too.
    let usage = Usage {
        input_tokens: 100,
        output_tokens: 20,
        cache_read_input_tokens: 30,
        cache_creation_input_tokens: 5,
        reasoning_output_tokens: 0,
    };
    let model = ScriptedModel::new().usage(usage).model_name("metrics-model-2025").text("Hello.");
    let answers = Agent::new(model, "metrics-model", ToolRegistry::new()).named("greeter").unwrap();
    let fails = Agent::new(ScriptedModel::new(), "failing-model", ToolRegistry::new()).named("mute").unwrap();
    let runtime = Runtime::new().register(answers.clone()).register(fails.clone());
    let reply = answers.ask(&runtime, "Hi").await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    assert!(fails.ask(&runtime, "Hi").await.is_err());
    otel.shutdown().await.unwrap();

    // The last export holds every point so far (cumulative, the SDK's default).
    let last = bodies.lock().unwrap().last().cloned().expect("no metrics were exported");
    let histograms = histograms(&last);
    let of = |name: &str, model: &str| -> Vec<&Point> {
        histograms
            .iter()
            .filter(|(n, _, _)| n == name)
            .flat_map(|(_, _, points)| points)
            .filter(|p| p.attributes.iter().any(|(k, v)| k == "gen_ai.request.model" && v == model))
            .collect()
    };
    let unit = |name: &str| histograms.iter().find(|(n, _, _)| n == name).map(|(_, unit, _)| unit.as_str());
    assert_eq!(unit("gen_ai.client.token.usage"), Some("{token}"), "{histograms:#?}");
    assert_eq!(unit("gen_ai.client.operation.duration"), Some("s"), "{histograms:#?}");

    let answered = [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.provider.name", "scripted"),
        ("gen_ai.request.model", "metrics-model"),
        ("gen_ai.response.model", "metrics-model-2025"),
    ];
    // Input tokens count the cached ones (read and written) too.
    let mut tokens = of("gen_ai.client.token.usage", "metrics-model");
    tokens.sort_by(|a, b| a.attributes.cmp(&b.attributes));
    let turn = |kind, sum| Point {
        attributes: attributes(&[answered.as_slice(), &[("gen_ai.token.type", kind)]].concat()),
        count: 1,
        sum,
    };
    assert_eq!(tokens, [&turn("input", 135.0), &turn("output", 20.0)]);
    let duration = of("gen_ai.client.operation.duration", "metrics-model");
    assert_eq!(duration.len(), 1, "{histograms:#?}");
    assert_eq!((&duration[0].attributes, duration[0].count), (&attributes(&answered), 1));
    assert!(duration[0].sum >= 0.0, "{duration:?}");

    // The failed turn: its duration with the error's type, and no tokens.
    assert!(of("gen_ai.client.token.usage", "failing-model").is_empty(), "{histograms:#?}");
    let failed = of("gen_ai.client.operation.duration", "failing-model");
    assert_eq!(failed.len(), 1, "{histograms:#?}");
    assert_eq!(
        (&failed[0].attributes, failed[0].count),
        (
            &attributes(&[
                ("error.type", "script"),
                ("gen_ai.operation.name", "chat"),
                ("gen_ai.provider.name", "scripted"),
                ("gen_ai.request.model", "failing-model"),
            ]),
            1
        )
    );
}
