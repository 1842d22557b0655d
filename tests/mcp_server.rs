//! The MCP server against a client we did not write: the official MCP Python SDK
//! (`mcp` on PyPI), driven by `tests/mcp_client.py`, over stdio (the `mcp` command
//! of `examples/mcp_server`) and over streamable HTTP (`loopstack::serve` on a
//! loopback port, with a token). The script prints one JSON object; the assertions
//! are here.
//!
//! `.ci/mcp-servers` installs the SDK, pinned, in a virtual environment under
//! `target/mcp-python/` (`.ci/run` does that), or `LOOPSTACK_MCP_PYTHON` names a
//! Python that has it. Without it the tests are skipped, saying so and how to
//! install it; where `CI` is set they fail instead.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

mod common;
#[path = "../examples/mcp_server/desk.rs"]
#[allow(dead_code)] // `relay` is the example's, with `--mcp`
mod desk;

/// The pinned version `.ci/mcp-servers` installs.
const SDK_VERSION: &str = "2.3.0";

/// A Python with the MCP SDK, or `None` (the test is skipped) when there is none
/// outside CI.
fn python() -> Option<PathBuf> {
    let python = std::env::var_os("LOOPSTACK_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/mcp-python/bin/python"));
    let has_sdk = Command::new(&python).args(["-c", "import mcp"]).output().is_ok_and(|o| o.status.success());
    if has_sdk {
        return Some(python);
    }
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !ci,
        "the MCP server tests need the MCP Python SDK at {} where CI is set: run `.ci/mcp-servers` (as .ci/run \
         does), or set LOOPSTACK_MCP_PYTHON to a Python that has `mcp`",
        python.display()
    );
    // Straight to the terminal: the harness hides the output of tests that pass.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: the MCP server test needs the MCP Python SDK at {}; run `.ci/mcp-servers` (python3 -m venv and \
         pip install mcp=={SDK_VERSION} under target/mcp-python), then `cargo test --test mcp_server`",
        python.display()
    );
    None
}

/// Runs the client script with `args` and reads the JSON object it prints. Run on
/// a blocking thread: the server it talks to may be on this test's runtime.
async fn client(python: PathBuf, args: Vec<String>) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let output = tokio::task::spawn_blocking(move || Command::new(python).arg(script).args(args).output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the client failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("the client printed no JSON ({e}): {stdout}"))
}

/// What every transport must show: the tools, and each call's answer.
fn assert_session(out: &Value) {
    let tools = &out["tools"];
    for name in ["greet", "review", "desk", "loopstack_signal", "loopstack_decide"] {
        assert!(tools.get(name).is_some(), "{name} is not among {tools}");
    }
    // Descriptions from the doc comments and from Agent::description.
    assert_eq!(tools["greet"]["description"], "Greets a person by name.");
    assert!(
        tools["review"]["description"].as_str().unwrap().starts_with("Publishes a text once a reviewer approves it.")
    );
    assert!(tools["desk"]["description"].as_str().unwrap().starts_with("The helpdesk: resets the passwords"));
    // An object input is the schema; an agent's prompt (a string) is wrapped.
    assert_eq!(tools["greet"]["input_schema"]["type"], "object");
    assert_eq!(tools["greet"]["input_schema"]["required"], serde_json::json!(["name"]));
    assert_eq!(tools["desk"]["input_schema"]["properties"]["input"]["type"], "string");
    assert_eq!(tools["desk"]["input_schema"]["required"], serde_json::json!(["input"]));
    // Every tool declares the shape of its structured content, which the SDK checks
    // each result against (a result that did not fit would fail its call).
    for name in ["greet", "review", "desk", "loopstack_signal", "loopstack_decide"] {
        let schema = &tools[name]["output_schema"];
        assert_eq!(schema["required"], serde_json::json!(["run_id", "workflow", "status"]), "{name}: {schema}");
    }

    // A run that ends: its output, structured and as text.
    let greet = &out["greet"];
    assert_eq!(greet["is_error"], false, "{greet}");
    assert_eq!(greet["structured"]["status"], "completed");
    assert_eq!(greet["structured"]["output"]["greeting"], "Hello, ada!");
    assert!(greet["text"].as_str().unwrap().contains("Hello, ada!"));

    // A run that waits: its id, and the signal with its payload's schema, in words too.
    let review = &out["review"];
    assert_eq!(review["is_error"], false, "{review}");
    assert_eq!(review["structured"]["status"], "waiting");
    assert_eq!(review["structured"]["place"], "drafted");
    let signal = &review["structured"]["waits_for"]["signals"][0];
    assert_eq!(signal["name"], "approve");
    assert_eq!(signal["payload_schema"]["required"], serde_json::json!(["reviewer"]));
    let words = review["text"].as_str().unwrap();
    assert!(words.contains("signal approve -> end, payload {reviewer: string}"), "{words}");
    assert!(words.contains("loopstack_signal"), "{words}");

    // Wrong answers are tool errors that say why, and change nothing.
    let wrong = &out["review_wrong_signal"];
    assert_eq!(wrong["is_error"], true, "{wrong}");
    assert!(wrong["text"].as_str().unwrap().contains("does not wait for the signal `publish`"), "{wrong}");
    assert!(wrong["text"].as_str().unwrap().contains("approve"), "{wrong}");
    let bad = &out["review_bad_payload"];
    assert_eq!(bad["is_error"], true, "{bad}");
    assert!(bad["text"].as_str().unwrap().contains("reviewer"), "{bad}");
    let approved = &out["review_approved"];
    assert_eq!(approved["is_error"], false, "{approved}");
    assert_eq!(approved["structured"]["status"], "completed");
    assert_eq!(approved["structured"]["run_id"], review["structured"]["run_id"]);
    assert_eq!(approved["structured"]["output"]["approved_by"], "ada");

    // An agent whose calls wait for approval: each call with its tool and arguments.
    let desk = &out["desk"];
    assert_eq!(desk["structured"]["status"], "waiting", "{desk}");
    assert_eq!(desk["structured"]["place"], "awaiting_approval");
    let calls = desk["structured"]["waits_for"]["pending_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{desk}");
    assert!(calls.iter().all(|c| c["name"] == "reset_password"));
    assert!(desk["text"].as_str().unwrap().contains(r#"reset_password {"user":"bob"}"#));
    let unknown = &out["desk_unknown_call"];
    assert_eq!(unknown["is_error"], true);
    assert!(unknown["text"].as_str().unwrap().contains("call `call_nope` does not wait"), "{unknown}");
    // One call approved: the run waits for the other.
    let first = &out["desk_approve_ada"];
    assert_eq!(first["structured"]["status"], "waiting", "{first}");
    assert_eq!(first["structured"]["waits_for"]["pending_calls"].as_array().unwrap().len(), 1);
    assert_eq!(first["structured"]["waits_for"]["pending_calls"][0]["arguments"]["user"], "bob");
    // The rest denied: the agent answers, with the denial's reason.
    let done = &out["desk_deny_rest"];
    assert_eq!(done["is_error"], false, "{done}");
    assert_eq!(done["structured"]["status"], "completed");
    let answer = done["structured"]["output"].as_str().unwrap();
    assert!(answer.contains("the password of ada is reset") && answer.contains("bob is on leave"), "{answer}");
    assert_eq!(done["text"], answer);

    let missing = &out["unknown_run"];
    assert_eq!(missing["is_error"], true);
    assert!(missing["text"].as_str().unwrap().contains("01890a5d-ac96-774b-bcce-b302099a8057"), "{missing}");
}

/// The ways the Python SDK starts a session, each with the revision it speaks then:
/// the `initialize` handshake (the newest revision that has one), and
/// `server/discover` (2026-07-28, each request carrying its version).
const HANDSHAKES: [(Option<&str>, &str); 2] = [(None, "2025-11-25"), (Some("--discover"), "2026-07-28")];

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_over_stdio() {
    let Some(python) = python() else { return };
    let server = common::example_with("mcp_server", &["mcp-server", "cli"]);
    for (handshake, version) in HANDSHAKES {
        let mut args: Vec<String> = handshake.map(str::to_owned).into_iter().collect();
        args.extend(["stdio".to_owned(), server.display().to_string(), "--db".into(), "memory".into(), "mcp".into()]);
        let out = client(python.clone(), args).await;
        assert_eq!(out["server"]["name"], "mcp-desk", "{handshake:?}"); // the app's name
        assert_eq!(out["server"]["protocol"], version, "{handshake:?}");
        assert_session(&out);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_over_http_with_a_token() {
    let Some(python) = python() else { return };
    let token = "mcp-test-token-0123456789";
    let runtime = desk::register(loopstack::Runtime::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let server = tokio::spawn(loopstack::serve::serve(
        listener,
        runtime.clone(),
        loopstack::serve::ServeOptions::new().token(token),
    ));
    for (handshake, version) in HANDSHAKES {
        let mut args: Vec<String> = handshake.map(str::to_owned).into_iter().collect();
        args.extend(["http".to_owned(), url.clone(), token.into()]);
        let out = client(python.clone(), args).await;
        assert_eq!(out["server"]["protocol"], version, "{handshake:?}");
        assert_session(&out);
        check_refusals(&out);
    }
    server.abort();
    // The runs are the runtime's, as the HTTP API and Studio see them: three a session.
    let runs = runtime.store().list_runs(&loopstack::RunQuery::new()).await.unwrap();
    assert_eq!(runs.runs.len(), 6);
}

/// The HTTP API's rules over `/mcp`: a token, the right one, and no page of another
/// origin.
fn check_refusals(out: &Value) {
    let refused = &out["refused"];
    assert_eq!(refused["no_token"], 401, "{refused}");
    assert_eq!(refused["wrong_token"], 401, "{refused}");
    assert_eq!(refused["other_origin"], 403, "{refused}");
    assert_eq!(refused["same_origin"], 200, "{refused}");
}

/// Runs `program args` on a blocking thread (a server it talks to may be on this
/// test's runtime), with `env` set: its exit status, stdout and stderr.
async fn run(program: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut command = Command::new(program);
    command.args(args).envs(env.iter().copied());
    let output = tokio::task::spawn_blocking(move || command.output()).await.unwrap().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (output.status.success(), text(&output.stdout), text(&output.stderr))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_command_line_gives_an_agent_the_tools_of_mcp_servers() {
    let desk = common::example_with("mcp_server", &["mcp-server", "cli"]);
    let dir = std::env::temp_dir().join(format!("loopstack-mcp-cli-{}", loopstack::RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("relay.db");
    let db = db.to_str().unwrap();

    // Over stdio: the example's own `mcp` command, started by `--mcp`, is the server
    // whose `greet` the agent `relay` calls.
    let line = format!("\"{}\" --db memory mcp", desk.display());
    let (ok, out, err) =
        run(&desk, &["--db", db, "--mcp", &line, "run", "relay", "--input", "\"ada\"", "--wait", "--json"], &[]).await;
    assert!(ok, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["status"], "completed", "{report}");
    let run_id = report["run_id"].as_str().unwrap();
    let (ok, shown, err) = run(&desk, &["--db", db, "show", run_id], &[]).await;
    assert!(ok, "{err}");
    assert!(shown.contains("tool call greet") && shown.contains("Hello, ada!"), "{shown}");

    // Over HTTP, the bearer token read from the variable `--mcp-token-env` names.
    let token = "relay-test-token-0123456789";
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let options = loopstack::serve::ServeOptions::new().token(token);
    let server = tokio::spawn(loopstack::serve::serve(listener, desk::register(loopstack::Runtime::new()), options));
    let relay = [
        "--db",
        db,
        "--mcp-url",
        &url,
        "--mcp-token-env",
        "RELAY_MCP_TOKEN",
        "run",
        "relay",
        "--input",
        "\"bo\"",
        "--wait",
        "--json",
    ];
    let (ok, out, err) = run(&desk, &relay, &[("RELAY_MCP_TOKEN", token)]).await;
    assert!(ok, "{out}{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["status"], "completed");
    // No variable, or the wrong token: one `error:` line, exit status 1.
    let (ok, _, err) = run(&desk, &relay, &[]).await;
    assert!(!ok && err.contains("error:") && err.contains("RELAY_MCP_TOKEN"), "{err}");
    let (ok, _, err) = run(&desk, &relay, &[("RELAY_MCP_TOKEN", "not-the-token-at-all")]).await;
    assert!(!ok && err.starts_with("error:"), "{err}");
    assert!(!err.contains("not-the-token-at-all"), "the token is redacted: {err}");
    server.abort();

    // An app whose register closure takes no tools refuses the flags.
    let ops = common::example("ops");
    let (ok, _, err) = run(&ops, &["--db", "memory", "--mcp", "anything", "workflows"], &[]).await;
    assert!(!ok && err.contains("takes no MCP servers"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_configuration_file_declares_a_server_once_for_every_command_that_drives_runs() {
    let desk = common::example_with("mcp_server", &["mcp-server", "cli"]);
    let dir = std::env::temp_dir().join(format!("loopstack-mcp-config-{}", loopstack::RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("desk.db");
    let db = db.to_str().unwrap();
    let started = dir.join("started");
    // The server is the example's own `mcp` command, behind a shell that notes each
    // start in a file and says hello on its standard error.
    let script = format!(
        "echo start >> '{}'; echo 'the desk server says hello' >&2; exec '{}' --db memory mcp",
        started.display(),
        desk.display()
    );
    let config = dir.join("desk.json");
    let file = serde_json::json!({"mcp": {"servers": {"desk": {"command": "sh", "args": ["-c", script]}}}});
    std::fs::write(&config, file.to_string()).unwrap();
    let config = config.to_str().unwrap();
    let starts = || std::fs::read_to_string(&started).map_or(0, |text| text.lines().count());

    // Help, the version and the list of workflows start nothing.
    for args in [&["--help"][..], &["--version"], &["workflows"]] {
        let (ok, out, err) = run(&desk, &[&["--config", config, "--db", db][..], args].concat(), &[]).await;
        assert!(ok, "{args:?}: {out}{err}");
        assert_eq!(starts(), 0, "{args:?} started the server");
    }
    // `run --wait`: the agent `relay` calls the server's `greet`. The server's
    // standard error is in the logs (JSON here), with its name, not on the terminal.
    let relay =
        ["--config", config, "--db", db, "--log-format", "json", "run", "relay", "--input", "\"ada\"", "--wait"];
    let (ok, out, err) = run(&desk, &[&relay[..], &["--json"]].concat(), &[("RUST_LOG", "info")]).await;
    assert!(ok, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["status"], "completed", "{report}");
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    assert_eq!(starts(), 1);
    let said: Vec<&str> = err.lines().filter(|line| line.contains("the desk server says hello")).collect();
    assert_eq!(said.len(), 1, "{err}");
    let logged: Value = serde_json::from_str(said[0]).unwrap_or_else(|e| panic!("not a log line ({e}): {}", said[0]));
    assert_eq!(logged["fields"]["server"], "desk", "{logged}");
    assert_eq!(logged["fields"]["message"], "the desk server says hello", "{logged}");
    assert_eq!(logged["target"], "loopstack::mcp::stderr", "{logged}");
    // Without RUST_LOG the command logs nothing, the server's lines included.
    let mut quiet = Command::new(&desk);
    quiet.args(relay).env_remove("RUST_LOG");
    let output = tokio::task::spawn_blocking(move || quiet.output()).await.unwrap().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && err.is_empty(), "{err}");
    assert_eq!(starts(), 2);

    // Reading runs starts nothing.
    for args in [&["runs"][..], &["show", &run_id], &["export", &run_id]] {
        let (ok, out, err) = run(&desk, &[&["--config", config, "--db", db][..], args].concat(), &[]).await;
        assert!(ok, "{args:?}: {out}{err}");
        assert_eq!(starts(), 2, "{args:?} started the server");
    }
    // A run queued here is driven by a worker, which gets the same tools.
    let queue = ["--config", config, "--db", db, "run", "relay", "--input", "\"bo\"", "--json"];
    let (ok, out, err) = run(&desk, &queue, &[]).await;
    assert!(ok, "{out}{err}");
    let queued = serde_json::from_str::<Value>(&out).unwrap()["run_id"].as_str().unwrap().to_owned();
    let (ok, out, err) = run(&desk, &["--config", config, "--db", db, "worker", "--once"], &[]).await;
    assert!(ok, "{out}{err}");
    let (ok, shown, err) = run(&desk, &["--db", db, "show", &queued], &[]).await;
    assert!(ok, "{err}");
    assert!(shown.contains("tool call greet") && shown.contains("Hello, bo!"), "{shown}");
    assert_eq!(starts(), 4);

    // LOOPSTACK_CONFIG names the file as well; one that does not read is one `error:` line.
    let (ok, out, err) =
        run(&desk, &["--db", db, "run", "relay", "--input", "\"cy\"", "--wait"], &[("LOOPSTACK_CONFIG", config)]).await;
    assert!(ok && out.contains("completed"), "{out}{err}");
    assert_eq!(starts(), 5);
    let missing = dir.join("missing.json");
    let (ok, _, err) = run(&desk, &["--config", missing.to_str().unwrap(), "--db", db, "worker", "--once"], &[]).await;
    assert!(!ok && err.starts_with("error: the configuration file ") && err.contains("missing.json"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// How long a test waits for one answer of a server before it fails.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// The HTTP server of `desk`'s workflows on a loopback port, without a token: its address.
async fn serve_desk() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let runtime = desk::register(loopstack::Runtime::new());
    tokio::spawn(loopstack::serve::serve(listener, runtime, loopstack::serve::ServeOptions::new()));
    address
}

/// An answer of `/mcp`: its status, its head, and its body (de-chunked).
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    /// A header's value.
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }

    /// The first JSON-RPC message of the body: as it is, or as a Server-Sent Event's data.
    fn message(&self) -> Value {
        let json =
            self.body.lines().find_map(|line| line.strip_prefix("data:").map(str::trim).filter(|d| !d.is_empty()));
        let json = json.unwrap_or(&self.body);
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {}\n{}", self.head, self.body))
    }
}

/// One HTTP/1.1 request to `/mcp`, the connection closed after it.
async fn mcp_http(address: &str, method: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let headers: String = headers.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect();
    let request = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, \
         text/event-stream\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        // The server may answer and close before it has read a body it refuses.
        let _ = stream.write_all(request.as_bytes()).await;
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response).await;
        response
    };
    let response = tokio::time::timeout(ANSWER_WITHIN, exchange).await.expect("/mcp answered in time");
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no answer: {response:?}"));
    let mut answer = Answer { status: head[9..12].parse().unwrap(), head: head.to_owned(), body: body.to_owned() };
    if answer.header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        let (mut rest, mut body) = (answer.body.as_str(), String::new());
        while let Some((size, after)) = rest.split_once("\r\n") {
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            if size == 0 {
                break;
            }
            body.push_str(&after[..size]);
            rest = &after[size + 2..];
        }
        answer.body = body;
    }
    answer
}

/// An `initialize` request asking for protocol `version`.
fn initialize(version: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": version, "capabilities": {}, "clientInfo": { "name": "probe", "version": "1" } },
    })
    .to_string()
}

const INITIALIZED: &str = r#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#;
const LIST_TOOLS: &str = r#"{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}"#;

/// The versions of the protocol the server speaks with an `initialize` handshake,
/// newest first; 2026-07-28 has none (each request says its version).
const SPOKEN: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
const STATELESS: &str = "2026-07-28";

#[tokio::test(flavor = "multi_thread")]
async fn mcp_over_http_answers_a_version_it_speaks_and_refuses_a_header_of_one_it_does_not() {
    let address = serve_desk().await;
    for asked in ["1999-01-01", "", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", STATELESS, "9999-12-31"] {
        let answer = mcp_http(&address, "POST", &[], &initialize(asked)).await;
        assert_eq!(answer.status, 200, "{asked:?}: {}", answer.body);
        let version = answer.message()["result"]["protocolVersion"].as_str().unwrap().to_owned();
        if SPOKEN.contains(&asked) {
            assert_eq!(version, asked, "a version it speaks is the one answered");
        } else {
            // Asked for one it does not speak over `initialize`: the newest it does.
            assert_eq!(version, SPOKEN[0], "asked {asked:?}");
        }
    }

    let answer = mcp_http(&address, "POST", &[], &initialize(SPOKEN[0])).await;
    let session = answer.header("mcp-session-id").expect("a session id").to_owned();
    let headers = [("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", SPOKEN[0])];
    assert_eq!(mcp_http(&address, "POST", &headers, INITIALIZED).await.status, 202);
    let listed = mcp_http(&address, "POST", &headers, LIST_TOOLS).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(listed.message()["result"]["tools"].is_array(), "{}", listed.body);
    for unspoken in ["1999-01-01", "", "2099-01-01"] {
        let headers = [("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", unspoken)];
        let refused = mcp_http(&address, "POST", &headers, LIST_TOOLS).await;
        assert_eq!(refused.status, 400, "{unspoken:?}: {}", refused.body);
        assert!(refused.body.contains("MCP-Protocol-Version"), "{}", refused.body);
    }
}

/// Our own client and server speak the newest revision to each other: over HTTP
/// statelessly (no session), over stdio with `server/discover` instead of the
/// `initialize` handshake.
#[tokio::test(flavor = "multi_thread")]
async fn our_client_and_server_speak_the_stateless_revision() {
    use loopstack::mcp::{McpServer, McpTools};
    use loopstack::{ToolContent, ToolContext, ToolRegistry};

    let token = "stateless-test-token-0123456789";
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let options = loopstack::serve::ServeOptions::new().token(token);
    tokio::spawn(loopstack::serve::serve(listener, desk::register(loopstack::Runtime::new()), options));
    let desk = common::example_with("mcp_server", &["mcp-server", "cli"]);
    let servers = [
        McpServer::http(url).bearer(token).name("desk-http"),
        McpServer::stdio(desk, ["--db", "memory", "mcp"]).name("desk-stdio"),
    ];
    for server in servers {
        let server = server.allow(["greet"]).connect_timeout(ANSWER_WITHIN);
        let mut registry = ToolRegistry::new();
        let tools: McpTools = McpTools::connect(server).await.unwrap();
        assert_eq!(tools.protocol_version().as_deref(), Some(STATELESS), "{}", tools.server_name());
        tools.register(&mut registry).unwrap();
        let cx = ToolContext::new("call_1", "greet");
        let call = registry.call("greet", serde_json::json!({ "name": "Ada" }), &cx);
        let out = tokio::time::timeout(ANSWER_WITHIN, call).await.expect("an answer in time").unwrap();
        assert!(!out.is_error, "{out:?}");
        // The model reads the run's output; a program reads the whole answer.
        let ToolContent::Text(text) = &out.content else { panic!("not text: {out:?}") };
        assert!(text.contains("Hello, Ada!"), "{text}");
        let answer = out.value().expect("the structured answer");
        assert_eq!(answer["status"], "completed", "{answer}");
        assert_eq!(answer["output"]["greeting"], "Hello, Ada!", "{answer}");
    }
}

/// A request of the stateless revision: its version in the header and in `_meta`,
/// no session.
fn stateless(id: u32, method: &str, params: Value) -> String {
    let mut params = params;
    params["_meta"] = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    serde_json::json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string()
}

/// The headers of a stateless request: the version, and the method and name the
/// body holds (so that a proxy can route it without reading the body).
fn stateless_headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![("MCP-Protocol-Version", STATELESS), ("Mcp-Method", method)];
    headers.extend(name.map(|name| ("Mcp-Name", name)));
    headers
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_over_http_serves_the_stateless_revision_without_a_session() {
    let address = serve_desk().await;
    let headers = stateless_headers("server/discover", None);
    let discovered =
        mcp_http(&address, "POST", &headers, &stateless(1, "server/discover", serde_json::json!({}))).await;
    assert_eq!(discovered.status, 200, "{}", discovered.body);
    let versions = &discovered.message()["result"]["supportedVersions"];
    assert!(versions.as_array().is_some_and(|v| v.contains(&serde_json::json!(STATELESS))), "{}", discovered.body);

    let headers = stateless_headers("tools/list", None);
    let listed = mcp_http(&address, "POST", &headers, &stateless(2, "tools/list", serde_json::json!({}))).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert!(listed.header("mcp-session-id").is_none(), "no session: {}", listed.head);
    let tools = listed.message();
    let names: Vec<&str> =
        tools["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"greet"), "{names:?}");

    let call = stateless(3, "tools/call", serde_json::json!({ "name": "greet", "arguments": { "name": "Ada" } }));
    let called = mcp_http(&address, "POST", &stateless_headers("tools/call", Some("greet")), &call).await;
    assert_eq!(called.status, 200, "{}", called.body);
    let result = &called.message()["result"];
    assert_eq!(result["structuredContent"]["status"], "completed", "{result}");
    assert_eq!(result["structuredContent"]["output"]["greeting"], "Hello, Ada!", "{result}");

    // A request whose headers do not say what its body does is refused.
    let refused = mcp_http(&address, "POST", &stateless_headers("tools/call", Some("review")), &call).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_over_http_answers_404_for_a_session_it_does_not_know_or_deleted() {
    let address = serve_desk().await;
    let unknown = [("Mcp-Session-Id", "no-such-session")];
    for method in ["POST", "GET", "DELETE"] {
        let answer = mcp_http(&address, method, &unknown, if method == "POST" { LIST_TOOLS } else { "" }).await;
        assert_eq!(answer.status, 404, "{method}: {}", answer.body);
    }

    let answer = mcp_http(&address, "POST", &[], &initialize(SPOKEN[0])).await;
    let session = answer.header("mcp-session-id").expect("a session id").to_owned();
    let headers = [("Mcp-Session-Id", session.as_str())];
    assert_eq!(mcp_http(&address, "POST", &headers, INITIALIZED).await.status, 202);
    assert_eq!(mcp_http(&address, "DELETE", &headers, "").await.status, 202);
    let after = mcp_http(&address, "POST", &headers, LIST_TOOLS).await;
    assert_eq!(after.status, 404, "a deleted session: {}", after.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_over_http_refuses_a_body_over_the_apis_limit() {
    let address = serve_desk().await;
    let body = format!(r#"{{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": "{}"}}"#, "x".repeat(3 << 20));
    let answer = mcp_http(&address, "POST", &[], &body).await;
    assert_eq!(answer.status, 413, "{}", answer.head);
    let reason: Value = serde_json::from_str(&answer.body).unwrap_or_else(|e| panic!("{e}: {}", answer.body));
    assert!(reason["error"].as_str().unwrap().contains("length limit"), "{reason}");
}

/// The stdio of an MCP server's process: a line written, a line read.
struct Lines {
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Lines {
    async fn send(&mut self, line: &str) {
        use tokio::io::AsyncWriteExt as _;
        self.stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    }

    async fn exchange(&mut self, line: &str) -> Value {
        self.send(line).await;
        let answer = tokio::time::timeout(ANSWER_WITHIN, self.stdout.next_line()).await.expect("an answer in time");
        let answer = answer.unwrap().expect("the server answered before it ended its output");
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_over_stdio_answers_a_line_that_is_not_json_with_a_parse_error_and_goes_on() {
    use tokio::io::AsyncBufReadExt as _;
    let server = common::example_with("mcp_server", &["mcp-server", "cli"]);
    let mut child = tokio::process::Command::new(server)
        .args(["--db", "memory", "mcp"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut lines = Lines { stdin: child.stdin.take().unwrap(), stdout };

    // Before the handshake, and after it: an answer, and the session goes on.
    let error = lines.exchange("{not json").await;
    assert_eq!((&error["error"]["code"], &error["id"]), (&serde_json::json!(-32700), &Value::Null), "{error}");
    let init = lines.exchange(&initialize("1999-01-01")).await;
    assert_eq!(init["result"]["protocolVersion"], SPOKEN[0], "{init}");
    lines.send(INITIALIZED).await;
    for bad in ["]", "\u{7f}garbage"] {
        let error = lines.exchange(bad).await;
        assert_eq!(error["error"]["code"], -32700, "{bad:?}: {error}");
    }
    let listed = lines.exchange(LIST_TOOLS).await;
    assert!(listed["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{listed}");

    drop(lines);
    let status = tokio::time::timeout(ANSWER_WITHIN, child.wait()).await.expect("the server ended in time").unwrap();
    assert!(status.success(), "{status}");
}
