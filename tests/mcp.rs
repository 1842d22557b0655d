//! The MCP client against servers we did not write and one we did.
//!
//! The reference servers `@modelcontextprotocol/server-everything` and
//! `server-filesystem` (from npm, run by Node.js) are spoken to over stdio, and the
//! first over streamable HTTP too. `.ci/mcp-servers` installs them, pinned, under
//! `target/mcp-servers/` (`.ci/run` does that), or `LOOPSTACK_MCP_SERVERS` names a
//! folder whose `node_modules` has them. Without Node.js or the packages those tests
//! are skipped, saying so and how to install them; where `CI` is set they fail
//! instead.
//!
//! The faults (an error result, a JSON-RPC error, a timeout, a server that dies
//! during a call, one that never starts or cannot be started again) are played by
//! `examples/mcp_fault_server.rs`, a server written with rmcp, which needs nothing
//! but cargo.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use loopstack::llm::{Agent, ScriptedModel};
use loopstack::mcp::{
    CALL_ID_META, IDEMPOTENCY_KEY_META, MAX_TOOL_PAGES, MAX_TOOLS, McpError, McpRegistryExt as _, McpServer, McpTools,
};
use loopstack::prelude::*;
use loopstack::{ToolContent, ToolContext, ToolErrorKind};
use serde_json::{Value, json};

mod common;

/// A bound that only ends a broken run of a test, never a speed goal.
const PATIENCE: Duration = Duration::from_secs(60);

/// The pinned version of the reference servers `.ci/mcp-servers` installs.
const REFERENCE_VERSION: &str = "2026.8.31";

async fn patiently<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(PATIENCE, future).await.unwrap_or_else(|_| panic!("{what} took over {PATIENCE:?}"))
}

/// The fault server's executable, built by cargo next to this test's binary.
fn fault_server() -> PathBuf {
    common::example_with("mcp_fault_server", &["mcp"])
}

fn faults() -> McpServer {
    McpServer::stdio(fault_server(), Vec::<String>::new()).name("faults")
}

/// `dist/index.js` of the reference server everything.
fn everything() -> Option<PathBuf> {
    reference_server("server-everything")
}

/// `dist/index.js` of reference server `name` (`server-everything`), or `None` (the
/// test is skipped) when Node.js or the package is missing outside CI.
fn reference_server(name: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("LOOPSTACK_MCP_SERVERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/mcp-servers"));
    let script = dir.join("node_modules/@modelcontextprotocol").join(name).join("dist/index.js");
    let node = Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    if node && script.exists() {
        return Some(script);
    }
    let missing = if node { format!("{}", script.display()) } else { "Node.js (`node`)".to_owned() };
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !ci,
        "the MCP reference-server tests need {missing} where CI is set: run `.ci/mcp-servers` (as .ci/run does), \
         or set LOOPSTACK_MCP_SERVERS to a folder whose node_modules has @modelcontextprotocol/{name}"
    );
    // Straight to the terminal: the harness hides the output of tests that pass.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: the MCP reference-server test needs {missing}; install Node.js 20 or later and run \
         `.ci/mcp-servers` (npm installs @modelcontextprotocol/{name}@{REFERENCE_VERSION} under \
         target/mcp-servers), then `cargo test --test mcp`"
    );
    None
}

fn text(output: &ToolOutput) -> String {
    output.to_text().into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reference_server_over_stdio() {
    let Some(script) = everything() else { return };
    let server = McpServer::stdio("node", [script.as_os_str(), "stdio".as_ref()])
        .name("everything")
        .env("LOOPSTACK_MCP_TEST", "set-by-the-test")
        .prefix("ev_")
        .approve("get-env");
    let mut registry = ToolRegistry::new();
    let mcp = patiently("connecting", registry.add_mcp(server)).await.unwrap();
    // The reference server (TypeScript SDK) answers no `server/discover`: the
    // `initialize` handshake, at the newest revision that has one.
    assert_eq!(mcp.protocol_version().as_deref(), Some("2025-11-25"));
    let names = mcp.tool_names();
    for tool in ["ev_echo", "ev_get-sum", "ev_get-structured-content", "ev_get-env"] {
        assert!(names.iter().any(|n| n == tool), "{tool} is not among {names:?}");
        assert!(registry.get(tool).is_some());
    }
    assert!(registry.spec("ev_get-env").unwrap().options.approve);
    assert!(!registry.spec("ev_echo").unwrap().options.approve);
    let echo = registry.spec("ev_echo").unwrap();
    assert_eq!(echo.input_schema["properties"]["message"]["type"], "string");

    let cx = ToolContext::new("call_1", "ev_echo");
    let out = patiently("echo", registry.call("ev_echo", json!({"message": "hi"}), &cx)).await.unwrap();
    assert_eq!(text(&out), "Echo: hi");
    assert!(!out.is_error);
    let sum = patiently("get-sum", registry.call("ev_get-sum", json!({"a": 2, "b": 3}), &cx)).await.unwrap();
    assert!(text(&sum).contains('5'), "{sum:?}");
    // Structured content is the result, as JSON.
    let weather = registry.call("ev_get-structured-content", json!({"location": "New York"}), &cx);
    let weather = patiently("get-structured-content", weather).await.unwrap();
    let ToolContent::Json(value) = &weather.content else { panic!("not structured: {weather:?}") };
    assert!(value.get("temperature").is_some(), "{value}");
    // The environment set for the process reaches it.
    let env = patiently("get-env", registry.call("ev_get-env", json!({}), &cx)).await.unwrap();
    assert!(text(&env).contains("set-by-the-test"));
    // Arguments the server refuses are an error result the model reads.
    let bad = patiently("bad get-sum", registry.call("ev_get-sum", json!({"a": "two"}), &cx)).await;
    let message = match bad {
        Ok(out) => {
            assert!(out.is_error, "{out:?}");
            text(&out)
        }
        Err(e) => e.to_string(),
    };
    assert!(!message.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_allow_list_registers_only_its_tools_and_names_typos() {
    let Some(script) = everything() else { return };
    let args = [script.as_os_str(), "stdio".as_ref()];
    let only_echo = McpServer::stdio("node", args).allow(["echo"]);
    let mcp = patiently("connecting", McpTools::connect(only_echo)).await.unwrap();
    assert_eq!(mcp.tool_names(), ["echo"]);
    let typo = McpServer::stdio("node", args).allow(["echo", "ecoh"]);
    let err = patiently("connecting", McpTools::connect(typo)).await.unwrap_err();
    let McpError::UnknownTools { option, names, .. } = &err else { panic!("{err}") };
    assert_eq!((*option, names.as_slice()), ("allow", ["ecoh".to_owned()].as_slice()));
    assert!(err.to_string().contains("get-sum"), "{err}");
    // Two servers with the same tools clash unless prefixed.
    let mut registry = ToolRegistry::new();
    registry.add_mcp(McpServer::stdio("node", args).allow(["echo"])).await.unwrap();
    let clash = registry.add_mcp(McpServer::stdio("node", args).allow(["echo"])).await.unwrap_err();
    assert!(matches!(clash, McpError::Registry(_)), "{clash}");
    registry.add_mcp(McpServer::stdio("node", args).allow(["echo"]).prefix("two_")).await.unwrap();
    assert_eq!(registry.names().collect::<Vec<_>>(), ["echo", "two_echo"]);
}

/// The reference server in streamable HTTP mode on a free port, killed when dropped.
struct HttpServer(Child, u16);

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn http_server(script: &std::path::Path) -> HttpServer {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    http_server_on(script, port)
}

fn http_server_on(script: &std::path::Path, port: u16) -> HttpServer {
    let mut child = Command::new("node")
        .arg(script)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node starts");
    // It says on stderr when it listens.
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let server = HttpServer(child, port);
    loop {
        let line = lines.next().expect("the server said it listens").unwrap();
        if line.contains("listening on port") {
            break;
        }
    }
    // Keep reading, so the server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    server
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reference_server_over_streamable_http() {
    let Some(script) = everything() else { return };
    let server = http_server(&script);
    let url = format!("http://127.0.0.1:{}/mcp", server.1);
    let runtime = Runtime::new();
    let mcp = McpServer::http(&url)
        .name("everything-http")
        .header("x-loopstack-test", "1")
        .bearer("tok_not_checked_by_the_server")
        .redact_with(runtime.secrets().clone())
        .allow(["echo", "get-sum"]);
    let mut registry = ToolRegistry::new();
    let tools = patiently("connecting", registry.add_mcp(mcp)).await.unwrap();
    assert_eq!(tools.tool_names(), ["echo", "get-sum"]);
    assert_eq!(tools.protocol_version().as_deref(), Some("2025-11-25"));
    let cx = ToolContext::new("call_1", "echo");
    let out = patiently("echo", registry.call("echo", json!({"message": "over http"}), &cx)).await.unwrap();
    assert_eq!(text(&out), "Echo: over http");
    let sum = patiently("get-sum", registry.call("get-sum", json!({"a": 20, "b": 22}), &cx)).await.unwrap();
    assert!(text(&sum).contains("42"), "{sum:?}");
    // The token is one of the runtime's secrets now: redacted wherever it shows.
    assert_eq!(runtime.secrets().redact("sent tok_not_checked_by_the_server"), "sent [redacted]");

    // A token taken from the environment must be there when connecting.
    let missing = McpServer::http(&url).bearer_from_env("LOOPSTACK_MCP_TEST_TOKEN_THAT_IS_NOT_SET");
    let err = McpTools::connect(missing).await.unwrap_err();
    assert!(matches!(err, McpError::MissingEnv { .. }), "{err}");
    // Nothing listening: a handshake error, not a hang.
    drop(server);
    let gone = McpServer::http(&url).connect_timeout(PATIENCE);
    let err = patiently("connecting to nothing", McpTools::connect(gone)).await.unwrap_err();
    assert!(matches!(err, McpError::Handshake { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_calls_an_mcp_tool_and_reads_its_result() {
    let mut registry = ToolRegistry::new();
    registry.add_mcp(faults().allow(["echo", "weather"])).await.unwrap();
    let model = ScriptedModel::new()
        .tool_call("echo", json!({"text": "from the agent"}))
        .tool_call("weather", json!({"city": "Oslo"}))
        .text("It is 21 degrees in Oslo.");
    let agent = Agent::new(model.clone(), "scripted", registry);
    let reply = patiently("the agent", agent.ask(&Runtime::new(), "How warm is Oslo?")).await.unwrap();
    assert_eq!(reply.text, "It is 21 degrees in Oslo.");
    let lines: Vec<String> = model.requests()[2].messages.iter().map(ToString::to_string).collect();
    assert_eq!(lines[2], "tool result call_0: from the agent");
    assert_eq!(lines[4], r#"tool result call_1: {"city":"Oslo","temperature":21}"#);
}

#[tokio::test(flavor = "multi_thread")]
async fn faults_are_error_results_the_model_reads() {
    let mut registry = ToolRegistry::new();
    let mcp = registry.add_mcp(faults().timeout(Duration::from_millis(300))).await.unwrap();
    let cx = ToolContext::new("call_1", "fail");
    // A result with isError.
    let failed = patiently("fail", registry.call("fail", json!({}), &cx)).await.unwrap();
    assert!(failed.is_error);
    assert_eq!(text(&failed), "the disk is full");
    // Results that break the tool's output schema: an error result that says how.
    let weather = patiently("weather", registry.call("weather", json!({"city": "Oslo"}), &cx)).await.unwrap();
    assert_eq!(weather.value(), Some(&json!({"city": "Oslo", "temperature": 21})), "{weather:?}");
    let mislabeled = patiently("mislabeled", registry.call("mislabeled", json!({}), &cx)).await.unwrap();
    assert!(mislabeled.is_error, "{mislabeled:?}");
    assert!(
        text(&mislabeled).starts_with(
            "the MCP server `faults` answered the call to `mislabeled` wrongly: its structured content does not fit \
             its output schema: at `/temperature`:"
        ),
        "{mislabeled:?}"
    );
    let unstructured = patiently("unstructured", registry.call("unstructured", json!({}), &cx)).await.unwrap();
    assert!(unstructured.is_error, "{unstructured:?}");
    assert_eq!(
        text(&unstructured),
        "the MCP server `faults` answered the call to `unstructured` wrongly: it declares an output schema but \
         answered without structured content"
    );
    // A JSON-RPC error.
    let rejected = patiently("reject", registry.call("reject", json!({}), &cx)).await.unwrap_err();
    assert_eq!(
        rejected.to_string(),
        "the MCP server `faults` answered the call to `reject` with an error: the fault server rejects this call \
         (code -32602)"
    );

    // A call that outlives its timeout, made by an agent: an error result, and the
    // run goes on.
    let model = ScriptedModel::new().tool_call("sleep", json!({})).text("The tool timed out.");
    let agent = Agent::new(model.clone(), "scripted", registry.clone());
    let reply = patiently("the agent", agent.ask(&Runtime::new(), "Sleep.")).await.unwrap();
    assert_eq!(reply.text, "The tool timed out.");
    let last = model.requests()[1].messages.last().unwrap().to_string();
    assert_eq!(last, "tool error call_0: tool `sleep` timed out after 300 ms");
    // The server is told the call is cancelled (the notification is sent in the
    // background, so ask until it has arrived).
    patiently("the cancellation to arrive", async {
        while text(&registry.call("cancelled", json!({}), &cx).await.unwrap()) != "1" {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // The server lives on.
    let echo = patiently("echo", registry.call("echo", json!({"text": "still here"}), &cx)).await.unwrap();
    assert_eq!(text(&echo), "still here");

    // A server that dies during a call: that call's error result, and the next call
    // starts it again.
    let first = patiently("pid", registry.call("pid", json!({}), &cx)).await.unwrap();
    let died = patiently("die", registry.call("die", json!({}), &cx)).await.unwrap_err();
    assert_eq!(
        died.to_string(),
        "the MCP server `faults` closed the connection during the call to `die`; it is started again for the next call"
    );
    let second = patiently("pid", registry.call("pid", json!({}), &cx)).await.unwrap();
    assert_ne!(text(&first), text(&second), "a new process answers");
    assert_eq!(mcp.starts(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_never_starts_is_an_error_when_connecting() {
    let exits = McpServer::stdio(fault_server(), ["--exit"]).name("exits");
    let err = patiently("connecting", McpTools::connect(exits)).await.unwrap_err();
    assert!(matches!(err, McpError::Handshake { .. }), "{err}");
    assert!(err.to_string().starts_with("the MCP server `exits` did not complete the handshake"), "{err}");

    let hangs = McpServer::stdio(fault_server(), ["--hang"]).name("hangs").connect_timeout(Duration::from_millis(500));
    let err = patiently("connecting", McpTools::connect(hangs)).await.unwrap_err();
    assert_eq!(err.to_string(), "the MCP server `hangs` did not answer the handshake within 500ms");

    let missing = McpServer::stdio("/nonexistent/mcp-server", ["x"]);
    let err = patiently("connecting", McpTools::connect(missing)).await.unwrap_err();
    assert!(matches!(err, McpError::Spawn { .. }), "{err}");
    assert!(err.to_string().starts_with("could not start the MCP server `mcp-server`: "), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_answers_the_handshake_but_never_lists_its_tools_times_out() {
    // Long enough for the start and the handshake, however busy the machine.
    let after = Duration::from_secs(2);
    let mute = McpServer::stdio(fault_server(), ["--hang-listing"]).name("mute").connect_timeout(after);
    let err = patiently("connecting", McpTools::connect(mute)).await.unwrap_err();
    assert!(
        matches!(&err, McpError::ListToolsTimeout { server, after: a } if server == "mute" && *a == after),
        "{err}"
    );
    assert!(err.is_timeout());
    assert_eq!(err.to_string(), "the MCP server `mute` answered the handshake but did not list its tools within 2s");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_list_that_never_ends_is_refused_at_its_bound() {
    let endless = McpServer::stdio(fault_server(), ["--endless-pages"]).name("endless");
    let err = patiently("connecting", McpTools::connect(endless)).await.unwrap_err();
    assert!(matches!(err, McpError::TooManyToolPages { limit: MAX_TOOL_PAGES, .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!("the MCP server `endless` lists its tools in more than {MAX_TOOL_PAGES} pages, the most that are read")
    );

    let looping = McpServer::stdio(fault_server(), ["--repeated-cursor"]).name("looping");
    let err = patiently("connecting", McpTools::connect(looping)).await.unwrap_err();
    assert!(matches!(&err, McpError::RepeatedCursor { cursor, .. } if cursor == "0"), "{err}");
    assert_eq!(err.to_string(), "the MCP server `looping`'s tool list loops: the cursor `0` was named twice");

    // A thousand tools a page: the bound on tools is met before the one on pages.
    let wide = McpServer::stdio(fault_server(), ["--wide-pages"]).name("wide");
    let err = patiently("connecting", McpTools::connect(wide)).await.unwrap_err();
    assert!(matches!(err, McpError::TooManyTools { limit: MAX_TOOLS, .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!("the MCP server `wide` lists more than {MAX_TOOLS} tools, the most taken from one server")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_whose_local_names_collide_register_none() {
    let mcp =
        patiently("connecting", McpTools::connect(McpServer::stdio(fault_server(), ["--colliding"]).name("faults")))
            .await
            .unwrap();
    let mut registry = ToolRegistry::new();
    let err = mcp.register(&mut registry).unwrap_err();
    let McpError::NameCollision { name, first, second, .. } = &err else { panic!("{err}") };
    assert_eq!((name.as_str(), first.as_str(), second.as_str()), ("get_time", "get.time", "get_time"));
    assert_eq!(
        err.to_string(),
        "the MCP server `faults`'s tools `get.time` and `get_time` both get the local name `get_time`; allow only one \
         of them"
    );
    assert!(registry.is_empty(), "registered: {:?}", registry.names().collect::<Vec<_>>());
}

/// A file that tells a server's first start from the next ones, removed when dropped.
struct Flag(PathBuf);

impl Drop for Flag {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A stdio server started by `sh`: the fault server the first time, then `again`
/// (a shell command) each time after.
fn started_again_as(name: &str, again: &str) -> (McpServer, Flag) {
    let flag = std::env::temp_dir().join(format!("loopstack-mcp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&flag);
    let script = format!(
        "if [ -e '{flag}' ]; then {again}; fi; touch '{flag}'; exec '{server}'",
        flag = flag.display(),
        server = fault_server().display()
    );
    (McpServer::stdio("sh", ["-c", script.as_str()]).name(name), Flag(flag))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_cannot_be_started_again_answers_each_call_with_an_error() {
    // Starts once: the second start exits.
    let (server, _flag) = started_again_as("once", "exit 2");
    let mut registry = ToolRegistry::new();
    registry.add_mcp(server).await.unwrap();
    let cx = ToolContext::new("call_1", "die");
    patiently("die", registry.call("die", json!({}), &cx)).await.unwrap_err();
    for _ in 0..2 {
        let err = patiently("echo", registry.call("echo", json!({"text": "x"}), &cx)).await.unwrap_err();
        assert!(
            err.to_string().starts_with(
                "the MCP server `once` is not running and could not be started again: the MCP server `once` did not \
                 complete the handshake"
            ),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_that_never_lists_the_tools_is_a_timeout_for_the_call() {
    // The second start answers the handshake and never `tools/list`.
    let hang = format!("exec '{}' --hang-listing", fault_server().display());
    let (server, _flag) = started_again_as("relists", &hang);
    let mut registry = ToolRegistry::new();
    registry.add_mcp(server.connect_timeout(Duration::from_secs(2))).await.unwrap();
    let cx = ToolContext::new("call_1", "die");
    patiently("die", registry.call("die", json!({}), &cx)).await.unwrap_err();
    let err = patiently("echo", registry.call("echo", json!({"text": "x"}), &cx)).await.unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::TimedOut, "{err}");
    assert_eq!(
        err.to_string(),
        "the MCP server `relists` is not running and could not be started again: the MCP server `relists` answered \
         the handshake but did not list its tools within 2s"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn each_call_carries_its_idempotency_key_in_meta() {
    let mut registry = ToolRegistry::new();
    let tools = registry.add_mcp(faults().allow(["meta"])).await.unwrap();
    // rmcp's server answers `server/discover`: each request says its revision.
    assert_eq!(tools.protocol_version().as_deref(), Some("2026-07-28"));
    let run = RunId::new();
    let cx = ToolContext::new("call_7", "meta").with_run_id(run).with_step(3);
    let out = patiently("meta", registry.call("meta", json!({}), &cx)).await.unwrap();
    let ToolContent::Json(meta) = &out.content else { panic!("{out:?}") };
    assert_eq!(meta[IDEMPOTENCY_KEY_META], Value::String(format!("{run}/3/call_7")));
    assert_eq!(meta[CALL_ID_META], "call_7");
    // Outside a run there is no key, only the call id.
    let out = patiently("meta", registry.call("meta", json!({}), &ToolContext::new("call_8", "meta"))).await.unwrap();
    let ToolContent::Json(meta) = &out.content else { panic!("{out:?}") };
    assert!(meta.get(IDEMPOTENCY_KEY_META).is_none(), "{meta}");
    assert_eq!(meta[CALL_ID_META], "call_8");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_tool_list_is_listed_again() {
    let mut registry = ToolRegistry::new();
    let mcp = registry.add_mcp(faults().prefix("f_")).await.unwrap();
    assert!(!mcp.tool_names().iter().any(|n| n == "f_extra"));
    let mut changes = mcp.subscribe();
    let cx = ToolContext::new("call_1", "f_grow");
    patiently("grow", registry.call("f_grow", json!({}), &cx)).await.unwrap();
    patiently("the list_changed notification", async {
        while !changes.borrow_and_update().iter().any(|n| n == "f_extra") {
            changes.changed().await.unwrap();
        }
    })
    .await;
    // A registry built now has the new tool.
    let mut fresh = ToolRegistry::new();
    mcp.register(&mut fresh).unwrap();
    let out = patiently("extra", fresh.call("f_extra", json!({}), &cx)).await.unwrap();
    assert_eq!(text(&out), "extra");
    // Offered no more: its calls are error results that say so.
    patiently("shrink", registry.call("f_shrink", json!({}), &cx)).await.unwrap();
    patiently("the second list_changed notification", async {
        while changes.borrow_and_update().iter().any(|n| n == "f_extra") {
            changes.changed().await.unwrap();
        }
    })
    .await;
    let gone = patiently("extra", fresh.call("f_extra", json!({}), &cx)).await.unwrap_err();
    assert_eq!(gone.to_string(), "the MCP server `faults` no longer offers the tool `extra`");
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_registry_ends_the_server_process() {
    let mut registry = ToolRegistry::new();
    drop(registry.add_mcp(faults().allow(["pid"])).await.unwrap());
    let cx = ToolContext::new("call_1", "pid");
    let pid = text(&patiently("pid", registry.call("pid", json!({}), &cx)).await.unwrap());
    let proc = PathBuf::from(format!("/proc/{pid}"));
    assert!(proc.exists());
    drop(registry);
    // The process is killed and reaped in the background: wait for it to go.
    patiently("the server process to end", async {
        while std::fs::read_to_string(proc.join("stat")).is_ok_and(|stat| !stat.contains(") Z ")) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[test]
fn the_weather_example_takes_the_tools_of_an_mcp_server() {
    let server = fault_server();
    let weather = {
        let mut dir = std::env::current_exe().unwrap();
        dir.pop();
        if dir.ends_with("deps") {
            dir.pop();
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built =
            Command::new(cargo).args(["build", "--quiet", "--features", "mcp", "--example", "weather"]).status();
        assert!(built.unwrap().success(), "building the weather example failed");
        dir.join("examples").join(format!("weather{}", std::env::consts::EXE_SUFFIX))
    };
    let out = Command::new(weather)
        .args(["--db", "memory", "--mcp"])
        .arg(format!("'{}'", server.display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(
            "MCP server `mcp_fault_server`: echo, weather, mislabeled, unstructured, fail, reject, sleep, cancelled, die, \
             meta, pid, grow, shrink, refund"
        ),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_tool_marked_approve_waits_for_a_person_and_carries_the_runs_key() {
    use loopstack::llm::ToolDecisions;
    let mut registry = ToolRegistry::new();
    registry.add_mcp(faults().allow(["meta"]).approve("meta")).await.unwrap();
    let model = ScriptedModel::new().tool_call("meta", json!({})).text("Done.");
    let agent = Agent::new(model.clone(), "scripted", registry);
    let runtime = Runtime::new();
    let reply = patiently("the agent", agent.ask(&runtime, "Show the meta.")).await.unwrap();
    let pending = agent.pending(&runtime, reply.run_id).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].name, "meta");
    let done = patiently("the decision", agent.decide(&runtime, reply.run_id, ToolDecisions::approve_all(&pending)))
        .await
        .unwrap();
    assert_eq!(done.text, "Done.");
    // The call ran inside the run: its key names the run and the call.
    let result = model.requests()[1].messages.last().unwrap().tool_results_iter().next().unwrap().content.clone();
    let meta: Value = serde_json::from_str(&result).unwrap();
    let key = meta[IDEMPOTENCY_KEY_META].as_str().unwrap();
    assert!(key.starts_with(&format!("{}/", reply.run_id)) && key.ends_with("/call_0"), "{key}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_servers_question_is_a_wait_of_the_run_answered_by_a_person() {
    use loopstack::llm::{AgentStatus, ToolDecision, ToolDecisions};
    // 2026-07-28's round trip: the server answers the call with its questions.
    let mut registry = ToolRegistry::new();
    registry.add_mcp(faults().allow(["refund"])).await.unwrap();
    let model = ScriptedModel::new().tool_call("refund", json!({"order": "A-17"})).text("Done.");
    let agent = Agent::new(model.clone(), "scripted", registry).named("desk").unwrap();
    let runtime = Runtime::new().register(agent.clone());
    let reply = patiently("the agent", agent.ask(&runtime, "Refund A-17")).await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = &reply.status else { panic!("{:?}", reply.status) };
    let input = calls[0].input.as_ref().expect("the call asks");
    assert_eq!(input.message, "How much of order A-17 is refunded?");
    assert_eq!(input.schema["required"], json!(["eur"]));
    let answer = ToolDecisions::new([ToolDecision::input(&calls[0].call_id, json!({"eur": 80}))]);
    let done = patiently("the answer", agent.decide(&runtime, reply.run_id, answer)).await.unwrap();
    assert_eq!(done.text, "Done.");
    let result = model.requests()[1].messages.last().unwrap().tool_results_iter().next().unwrap().content.clone();
    assert_eq!(result, "refunded 80 EUR (order=A-17, roots [])");

    // 2025-11-25's live question, from the reference server: cancelled while the
    // call runs, asked of the person, and answered when the call is made again.
    let Some(script) = everything() else { return };
    let server = McpServer::stdio("node", [script.as_os_str(), "stdio".as_ref()]).name("everything");
    let mut registry = ToolRegistry::new();
    registry.add_mcp(server.allow(["trigger-elicitation-request"])).await.unwrap();
    let model = ScriptedModel::new().tool_call("trigger-elicitation-request", json!({})).text("Thanks.");
    let agent = Agent::new(model.clone(), "scripted", registry).named("forms").unwrap();
    let runtime = Runtime::new().register(agent.clone());
    let reply = patiently("the agent", agent.ask(&runtime, "Fill the form")).await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = &reply.status else { panic!("{:?}", reply.status) };
    let input = calls[0].input.as_ref().expect("the call asks");
    assert_eq!(input.message, "Please provide inputs for the following fields:");
    assert_eq!(input.schema["properties"]["name"]["type"], "string");
    let form = json!({"name": "Ada Lovelace", "check": true, "integer": 7});
    let answer = ToolDecisions::new([ToolDecision::input(&calls[0].call_id, form)]);
    let done = patiently("the answer", agent.decide(&runtime, reply.run_id, answer)).await.unwrap();
    assert_eq!(done.text, "Thanks.");
    let result = model.requests()[1].messages.last().unwrap().tool_results_iter().next().unwrap().content.clone();
    assert!(result.contains("Ada Lovelace") && result.contains("accept"), "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_server_that_restarted_is_connected_again() {
    let Some(script) = everything() else { return };
    let server = http_server(&script);
    let port = server.1;
    let mut registry = ToolRegistry::new();
    let mcp = McpServer::http(format!("http://127.0.0.1:{port}/mcp")).allow(["echo"]);
    let tools = patiently("connecting", registry.add_mcp(mcp)).await.unwrap();
    let cx = ToolContext::new("call_1", "echo");
    let out = patiently("echo", registry.call("echo", json!({"message": "one"}), &cx)).await.unwrap();
    assert_eq!(text(&out), "Echo: one");
    // The server goes away, and its session with it: an error result, not a hang.
    drop(server);
    let down = patiently("echo while down", registry.call("echo", json!({"message": "two"}), &cx)).await;
    assert!(down.as_ref().map_or(true, |o| o.is_error), "{down:?}");
    // Back (a new process, so a new session): the next call connects again.
    let _server = http_server_on(&script, port);
    let out = patiently("echo after the restart", registry.call("echo", json!({"message": "three"}), &cx)).await;
    assert_eq!(text(&out.unwrap()), "Echo: three");
    assert_eq!(tools.starts(), 2);
}

/// The reference file server answers a read with the file's text and, as structured
/// content, `{"content": text}`: the model reads the text, a program the value.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_read_reaches_the_model_as_text_and_a_program_as_a_value() {
    let Some(script) = reference_server("server-filesystem") else { return };
    let dir = std::env::temp_dir().join(format!("loopstack-mcp-files-{}", RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    // The server resolves symbolic links in its allowed folders; so does the test.
    let dir = dir.canonicalize().unwrap();
    let notes = "line one\nline two: \"quoted\"\n";
    std::fs::write(dir.join("notes.txt"), notes).unwrap();
    let server = McpServer::stdio("node", [script.as_os_str(), dir.as_os_str()])
        .name("files")
        .prefix("fs_")
        .allow(["read_text_file", "write_file"]);
    let mut registry = ToolRegistry::new();
    patiently("connecting", registry.add_mcp(server)).await.unwrap();

    let path = dir.join("notes.txt").display().to_string();
    let cx = ToolContext::new("call_1", "fs_read_text_file");
    let read = patiently("read", registry.call("fs_read_text_file", json!({ "path": path }), &cx)).await.unwrap();
    assert!(!read.is_error, "{read:?}");
    assert_eq!(text(&read), notes, "the model reads the file, not JSON around it");
    assert_eq!(read.value(), Some(&json!({ "content": notes })));
    // As the call's result: the text the model is sent, and the value beside it.
    let result = loopstack::llm::ToolCallResult::new("call_1", "fs_read_text_file", read);
    assert_eq!(result.content, notes);
    assert_eq!(result.value, Some(json!({ "content": notes })));

    let written = dir.join("out.txt").display().to_string();
    let write = registry.call("fs_write_file", json!({ "path": written, "content": "hello" }), &cx);
    let write = patiently("write", write).await.unwrap();
    assert!(text(&write).starts_with("Successfully wrote"), "{write:?}");
    assert_eq!(std::fs::read_to_string(dir.join("out.txt")).unwrap(), "hello");
    std::fs::remove_dir_all(&dir).unwrap();
}
