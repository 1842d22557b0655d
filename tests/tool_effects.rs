//! What a crash during a tool call does to the call, by the tool's effect, with a
//! real child process killed (SIGKILL) inside the call and the run resumed in this
//! process, on SQLite and on PostgreSQL:
//!
//! - an at-most-once call (`#[tool(effect = at_most_once)]`) is not run again: the
//!   run waits at `awaiting_outcome` until a person gives the call's result (the
//!   model reads it) or has it run again (it runs once more, under its first key);
//! - an at-least-once call (the default) runs again, and so does an idempotent one,
//!   under the same idempotency key; an idempotent call of a failed run that is
//!   retried has the same key as well.
//!
//! Each call of a tool appends its idempotency key to a file named by the run (the
//! tool's "effect"), which both processes write: its lines count the calls that ran.
//! The child is this test binary, run again with `LOOPSTACK_EFFECTS_TOOL` set: it
//! drives the run to the tool, which records its effect, says so, and hangs there
//! until it is killed.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;

use loopstack::llm::{
    Agent, AgentPlace, AgentStatus, ChatResponse, ContentBlock, ErrorPolicy, LlmDelegateToolCalls, Message, Role,
    ScriptedModel, StopReason, ToolDecision, ToolDecisions, ToolUse, Usage, pending_calls,
};
use loopstack::prelude::*;
use loopstack::{RunStatus, SqliteStore, Store};

mod common;

/// The tool the child calls and hangs in (set only in the child).
const TOOL: &str = "LOOPSTACK_EFFECTS_TOOL";
/// `sqlite:<path>` or `postgres:<schema>`.
const STORE: &str = "LOOPSTACK_EFFECTS_STORE";
const RUN: &str = "LOOPSTACK_EFFECTS_RUN";

/// The file a run's tool calls append their keys to.
fn effects_file(run_id: RunId) -> PathBuf {
    std::env::temp_dir().join(format!("loopstack-effects-{run_id}"))
}

/// The keys of the calls that ran, in order.
fn effects(run_id: RunId) -> Vec<String> {
    std::fs::read_to_string(effects_file(run_id)).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// Records the call's effect; in the child, then hangs inside the call.
async fn effect(cx: &ToolContext) {
    let run_id = cx.run_id().expect("called in a run");
    let key = cx.idempotency_key().expect("a call made in a run has a key");
    let mut keys = std::fs::read_to_string(effects_file(run_id)).unwrap_or_default();
    keys.push_str(&key);
    keys.push('\n');
    std::fs::write(effects_file(run_id), keys).unwrap();
    if std::env::var(TOOL).is_ok_and(|t| t == cx.tool_name()) {
        println!("IN {}", cx.tool_name());
        std::future::pending::<()>().await;
    }
}

/// Refunds an order: never twice.
#[tool(effect = at_most_once)]
async fn refund(order: String, cx: &ToolContext) -> String {
    effect(cx).await;
    format!("refunded {order}")
}

/// Sends a note about an order: twice does no harm.
#[tool]
async fn notify(order: String, cx: &ToolContext) -> String {
    effect(cx).await;
    format!("noted {order}")
}

/// Charges for an order under the call's idempotency key; the first charge of a
/// run fails when `order` is `"flaky"`.
#[tool(effect = idempotent)]
async fn charge(order: String, cx: &ToolContext) -> Result<String, ToolError> {
    let first = effects(cx.run_id().expect("called in a run")).is_empty();
    effect(cx).await;
    if first && order == "flaky" {
        return Err(ToolError::new("the card service timed out"));
    }
    Ok(format!("charged {order}"))
}

/// An agent whose model calls `tool` once, then answers with what the call returned.
fn agent(tool: &str) -> Agent {
    let (tool, order) = (tool.to_owned(), if tool == "charge_flaky" { "flaky" } else { "A-17" });
    let name = tool.trim_end_matches("_flaky").to_owned();
    let model = ScriptedModel::from_fn(move |req| {
        let last = req.messages.last().unwrap();
        Ok(match last.tool_results_iter().next() {
            Some(result) => ScriptedModel::new().text_response(format!("Done: {}", result.content)),
            None => {
                let call = ToolUse::new("call_1", &name, serde_json::json!({"order": order}));
                let message = Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] };
                ChatResponse::new(message, StopReason::ToolUse, Usage::new(20, 5), "scripted")
            }
        })
    });
    let tools = ToolRegistry::new().with(Refund).unwrap().with(Notify).unwrap().with(Charge).unwrap();
    let failing = LlmDelegateToolCalls::new(tools.clone()).error_policy(ErrorPolicy::FailFast);
    let agent = Agent::new(model, "scripted", tools);
    if tool.ends_with("_flaky") { agent.delegate(failing) } else { agent }
}

async fn open(store: &str) -> Arc<dyn Store> {
    match store.split_once(':') {
        Some(("sqlite", path)) => Arc::new(SqliteStore::open(path).await.unwrap()),
        Some(("postgres", schema)) => {
            let schema = common::postgres::TestSchema { url: common::postgres::url(), name: schema.to_owned() };
            Arc::new(schema.store().await)
        }
        _ => panic!("unknown store {store}"),
    }
}

/// The child: drives a run of the agent into `tool`, where it hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child() {
    let Ok(tool) = std::env::var(TOOL) else { return };
    let runtime = Runtime::with_shared_store(open(&std::env::var(STORE).unwrap()).await);
    let run_id: RunId = std::env::var(RUN).unwrap().parse().unwrap();
    runtime.start(&agent(&tool), "Refund A-17".into()).run_id(run_id).await.unwrap();
    panic!("the child came out of `{tool}`");
}

/// Runs the child into a call of `tool`, kills it there (SIGKILL), and returns the
/// run's id.
fn kill_during(tool: &str, store: &str) -> RunId {
    let run_id = RunId::new();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads", "1"])
        .env(TOOL, tool)
        .env(STORE, store)
        .env(RUN, run_id.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let marker = format!("IN {tool}");
    let seen = stdout.lines().any(|line| line.unwrap().contains(&marker));
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(seen, "the child reached `{tool}` (it exited with {status})");
    assert!(!status.success());
    run_id
}

/// The key of the run's one call, made at step 2 (llm_turn, then the calls).
fn key(run_id: RunId) -> String {
    format!("{run_id}/2/call_1")
}

async fn at_most_once_waits_for_the_result(store: &str) {
    let run_id = kill_during("refund", store);
    assert_eq!(effects(run_id), [key(run_id)], "the killed call had its effect once");

    let runtime = Runtime::with_shared_store(open(store).await);
    let agent = agent("refund");
    let reply = agent.resume(&runtime, run_id).await.unwrap();
    let AgentStatus::OutcomeUnknown { calls } = &reply.status else { panic!("{:?}", reply.status) };
    assert_eq!((calls[0].name.as_str(), &calls[0].arguments), ("refund", &serde_json::json!({"order": "A-17"})));
    assert_eq!(effects(run_id), [key(run_id)], "the resumed run did not call the tool again");
    // Where it waits, as the store has it, and as the command line and the HTTP API read it.
    let record = runtime.store().load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place), (RunStatus::Waiting, AgentPlace::AwaitingOutcome.as_str()));
    assert_eq!(record.waiting_for, ["resolve_tools"]);
    let listed = pending_calls(agent.definition(), &record);
    assert_eq!(listed.unwrap().unwrap(), *calls);
    assert_eq!(agent.pending(&runtime, run_id).await.unwrap(), *calls);

    // A person checked: the refund was made. The model reads that, and the run ends.
    let decision = ToolDecision::result(&calls[0].call_id, "refunded A-17 (checked by ada)");
    let done = agent.decide(&runtime, run_id, ToolDecisions::new([decision])).await.unwrap();
    assert_eq!((done.status, done.text.as_str()), (AgentStatus::Completed, "Done: refunded A-17 (checked by ada)"));
    assert_eq!(effects(run_id), [key(run_id)], "answered with its result, the call never ran again");
    let _ = std::fs::remove_file(effects_file(run_id));
}

async fn at_most_once_runs_again_when_told_to(store: &str) {
    let run_id = kill_during("refund", store);
    let runtime = Runtime::with_shared_store(open(store).await);
    let agent = agent("refund");
    let reply = agent.resume(&runtime, run_id).await.unwrap();
    let AgentStatus::OutcomeUnknown { calls } = reply.status else { panic!("{:?}", reply.status) };
    assert_eq!(effects(run_id).len(), 1);

    // A person checked: no refund was made. Run it again: once more, under its first key.
    let done = agent.decide(&runtime, run_id, ToolDecisions::approve_all(&calls)).await.unwrap();
    assert_eq!((done.status, done.text.as_str()), (AgentStatus::Completed, "Done: refunded A-17"));
    assert_eq!(effects(run_id), [key(run_id), key(run_id)], "the call ran once more, with the same key");
    assert_eq!(done.tool_calls, 1);
    let _ = std::fs::remove_file(effects_file(run_id));
}

/// One HTTP/1.1 request to `address`, the connection closed after it: (status, JSON body).
async fn http(address: &str, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}")))
}

/// Over HTTP, as Studio and code elsewhere see it: the pending list says the outcome
/// is unknown and names the signal, and that signal with a result ends the run.
async fn over_http_the_outcome_is_listed_and_answered(store: &str) {
    let run_id = kill_during("refund", store);
    let agent = agent("refund");
    let runtime = Runtime::with_shared_store(open(store).await).register(agent.clone());
    let reply = agent.resume(&runtime, run_id).await.unwrap();
    assert!(matches!(reply.status, AgentStatus::OutcomeUnknown { .. }), "{:?}", reply.status);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(loopstack::serve::serve(listener, runtime.clone(), loopstack::serve::ServeOptions::new()));

    let (status, pending) = http(&address, "GET", &format!("/api/runs/{run_id}/pending"), "").await;
    assert_eq!(status, 200, "{pending}");
    assert_eq!(
        (&pending["outcome_unknown"], &pending["awaiting_approval"]),
        (&serde_json::json!(true), &serde_json::json!(false))
    );
    assert_eq!(pending["signal"], "resolve_tools");
    assert_eq!(pending["calls"][0]["call_id"], "call_1");
    let (_, shown) = http(&address, "GET", &format!("/api/runs/{run_id}"), "").await;
    assert_eq!(
        (&shown["place"], &shown["pending_signal"]),
        (&serde_json::json!("awaiting_outcome"), &serde_json::json!("resolve_tools"))
    );

    let body = r#"{"decisions": [{"call_id": "call_1", "approved": true, "result": "refunded A-17 (checked)"}]}"#;
    let (status, done) = http(&address, "POST", &format!("/api/runs/{run_id}/signals/resolve_tools"), body).await;
    assert_eq!((status, &done["status"]), (200, &serde_json::json!("completed")), "{done}");
    let state = runtime.store().load_run(run_id).await.unwrap().state;
    assert!(state.get().contains("Done: refunded A-17 (checked)"), "{}", state.get());
    assert_eq!(effects(run_id), [key(run_id)], "answered over HTTP, the call never ran again");
    let _ = std::fs::remove_file(effects_file(run_id));
}

/// On the command line, as an operator sees it: `resolve RUN CALL RESULT` answers
/// the call the run waits on; a call it does not wait on is refused, typed.
async fn on_the_command_line_resolve_gives_the_result(store: &str) {
    use clap::Parser as _;
    use loopstack::cli::{Cli, CliError, execute};
    let run_id = kill_during("refund", store);
    let agent = agent("refund");
    let runtime = Runtime::with_shared_store(open(store).await).register(agent.clone());
    let reply = agent.resume(&runtime, run_id).await.unwrap();
    assert!(matches!(reply.status, AgentStatus::OutcomeUnknown { .. }), "{:?}", reply.status);
    let run = run_id.to_string();
    let cli = |args: &[&str]| Cli::try_parse_from(std::iter::once("helpdesk").chain(args.iter().copied())).unwrap();

    let err = execute(&runtime, &cli(&["resolve", &run, "call_9", "refunded"])).await.unwrap_err();
    assert!(matches!(&err, CliError::NotPending { call_id, .. } if call_id == "call_9"), "{err}");
    assert!(err.to_string().contains("call_1"), "the error lists the call that waits: {err}");
    assert_eq!(runtime.store().load_run(run_id).await.unwrap().status, RunStatus::Waiting, "nothing changed");

    let out = execute(&runtime, &cli(&["resolve", &run, "call_1", "refunded A-17 (checked by ada)"])).await.unwrap();
    assert!(out.contains("completed"), "{out}");
    let state = runtime.store().load_run(run_id).await.unwrap().state;
    assert!(state.get().contains("Done: refunded A-17 (checked by ada)"), "{}", state.get());
    assert_eq!(effects(run_id), [key(run_id)], "resolved on the command line, the call never ran again");

    // Once it has ended, there is nothing to resolve.
    let err = execute(&runtime, &cli(&["resolve", &run, "call_1", "again"])).await.unwrap_err();
    assert!(matches!(err, CliError::NotAwaitingApproval { .. }), "{err}");
    let _ = std::fs::remove_file(effects_file(run_id));
}

async fn at_least_once_and_idempotent_run_again(store: &str) {
    for (tool, answer) in [("notify", "Done: noted A-17"), ("charge", "Done: charged A-17")] {
        let run_id = kill_during(tool, store);
        let runtime = Runtime::with_shared_store(open(store).await);
        let reply = agent(tool).resume(&runtime, run_id).await.unwrap();
        assert_eq!((reply.status, reply.text.as_str()), (AgentStatus::Completed, answer), "{tool}");
        assert_eq!(effects(run_id), [key(run_id), key(run_id)], "{tool} ran again, with the same key");
        let _ = std::fs::remove_file(effects_file(run_id));
    }
}

/// An idempotent call whose failure failed the run has the same key when the run is
/// retried.
async fn idempotent_keeps_its_key_across_a_retry(store: &str) {
    let runtime = Runtime::with_shared_store(open(store).await);
    let agent = agent("charge_flaky");
    let run_id = RunId::new();
    let failed = runtime.start(&agent, "Charge".into()).run_id(run_id).await;
    assert!(failed.is_err(), "the failed call fails the run");
    assert_eq!(runtime.store().load_run(run_id).await.unwrap().status, RunStatus::Failed);
    let report = runtime.retry(&agent, run_id).await.unwrap();
    let reply = agent.reply_of(report);
    assert_eq!((reply.status, reply.text.as_str()), (AgentStatus::Completed, "Done: charged flaky"));
    assert_eq!(effects(run_id), [key(run_id), key(run_id)], "the retried call kept its key");
    let _ = std::fs::remove_file(effects_file(run_id));
}

async fn all(store: &str) {
    at_most_once_waits_for_the_result(store).await;
    at_most_once_runs_again_when_told_to(store).await;
    over_http_the_outcome_is_listed_and_answered(store).await;
    on_the_command_line_resolve_gives_the_result(store).await;
    at_least_once_and_idempotent_run_again(store).await;
    idempotent_keeps_its_key_across_a_retry(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_a_killed_call_runs_again_or_waits_by_its_effect() {
    if std::env::var(TOOL).is_ok() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("loopstack-effects-db-{}", RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("sqlite:{}", dir.join("runs.db").display());
    drop(open(&store).await);
    all(&store).await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_killed_call_runs_again_or_waits_by_its_effect() {
    if std::env::var(TOOL).is_ok() {
        return;
    }
    let schema = common::postgres::TestSchema::new("effects");
    let store = format!("postgres:{}", schema.name);
    // Created (and migrated) here, before any child opens it.
    drop(open(&store).await);
    all(&store).await;
    schema.drop().await;
}
