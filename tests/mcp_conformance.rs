//! The official MCP conformance suite (`@modelcontextprotocol/conformance` on npm)
//! against our server and our client.
//!
//! `.ci/mcp-servers` installs it, pinned, under `target/mcp-conformance/`, with the
//! Node.js 22 it needs (the `node` package on npm), or `LOOPSTACK_MCP_CONFORMANCE`
//! names a folder whose `node_modules` has both. Without them the tests are skipped,
//! saying so and how to install them; where `CI` is set they fail instead.
//!
//! The scenarios we do not pass are listed, each with why, in
//! `tests/mcp_conformance/{server,client}.yml`; the suite fails on a scenario that
//! fails and is not listed, and on one that is listed and passes.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;

use loopstack::prelude::*;
use serde::{Deserialize, Serialize};

mod common;

/// The pinned version `.ci/mcp-servers` installs.
const CONFORMANCE_VERSION: &str = "0.1.16";

/// Node.js 22 and the suite's command-line script, or `None` (the test is skipped)
/// when they are missing outside CI.
fn suite() -> Option<(PathBuf, PathBuf)> {
    let dir = std::env::var_os("LOOPSTACK_MCP_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/mcp-conformance"));
    let node = dir.join("node_modules/.bin/node");
    let cli = dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    if node.exists() && cli.exists() {
        return Some((node, cli));
    }
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !ci,
        "the MCP conformance tests need {} and {} where CI is set: run `.ci/mcp-servers` (as .ci/run does), or set \
         LOOPSTACK_MCP_CONFORMANCE to a folder whose node_modules has `node` 22 and @modelcontextprotocol/conformance",
        node.display(),
        cli.display()
    );
    // Straight to the terminal: the harness hides the output of tests that pass.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: the MCP conformance test needs {}; run `.ci/mcp-servers` (npm installs node@22 and \
         @modelcontextprotocol/conformance@{CONFORMANCE_VERSION} under target/mcp-conformance), then `cargo test \
         --test mcp_conformance --features mcp,mcp-server,serve`",
        cli.display()
    );
    None
}

/// The suite's command line run with `args` on a blocking thread (the server it
/// tests may be on this test's runtime), in a folder of its own for its results:
/// whether it passed, and what it printed.
async fn run_suite(args: Vec<String>) -> (bool, String) {
    let (node, cli) = suite().expect("checked by the caller");
    let results = std::env::temp_dir().join(format!("loopstack-mcp-conformance-{}", RunId::new()));
    std::fs::create_dir_all(&results).unwrap();
    let output = tokio::task::spawn_blocking(move || {
        let output = Command::new(node).arg(cli).args(args).current_dir(&results).output();
        let _ = std::fs::remove_dir_all(&results);
        output
    })
    .await
    .unwrap()
    .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

fn baseline(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_conformance").join(name).display().to_string()
}

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
struct Fixture {
    /// What the run answers with.
    #[serde(default)]
    tool_result_text: Option<String>,
}

/// The suite's `test_simple_text`: answers with text.
struct SimpleText;

/// Answers with a line of text.
#[workflow(name = "test_simple_text", input = Fixture)]
impl SimpleText {
    #[transition(to = End)]
    async fn answer(&self, fixture: &mut Fixture, _cx: &mut RunContext) -> Result<()> {
        fixture.tool_result_text = Some("This is a simple text response for testing.".to_owned());
        Ok(())
    }
}

/// The suite's `test_error_handling`: its run fails.
struct ErrorHandling;

/// Fails, always.
#[workflow(name = "test_error_handling", input = Fixture)]
impl ErrorHandling {
    #[transition(to = End)]
    async fn fail(&self, _fixture: &mut Fixture, _cx: &mut RunContext) -> Result<()> {
        Err("This tool intentionally returns an error for testing".into())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_passes_the_conformance_suite() {
    if suite().is_none() {
        return;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let runtime = Runtime::new().register(SimpleText).register(ErrorHandling);
    let server = tokio::spawn(loopstack::serve::serve(listener, runtime, loopstack::serve::ServeOptions::new()));
    let args = ["server", "--url", &url, "--expected-failures", &baseline("server.yml")];
    let (passed, out) = run_suite(args.map(str::to_owned).to_vec()).await;
    server.abort();
    assert!(passed, "{out}");
}

/// The client scenarios run: the protocol's, and its authorization's (OAuth 2.1, with
/// feature `mcp-oauth`), the drafts and extensions among them.
const CLIENT_SCENARIOS: [&str; 26] = [
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/cross-app-access-complete-flow",
];

#[tokio::test(flavor = "multi_thread")]
async fn the_client_passes_the_conformance_suite() {
    if suite().is_none() {
        return;
    }
    let client = common::example_with("mcp_conformance_client", &["mcp", "mcp-oauth"]);
    for scenario in CLIENT_SCENARIOS {
        let args = [
            "client",
            "--command",
            &client.display().to_string(),
            "--scenario",
            scenario,
            "--expected-failures",
            &baseline("client.yml"),
        ];
        let (passed, out) = run_suite(args.map(str::to_owned).to_vec()).await;
        assert!(passed, "{scenario}: {out}");
    }
}
