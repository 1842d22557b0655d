//! A tool loop with reasoning continues in a new process, on each provider whose
//! models reason: what the provider needs back (Anthropic's thinking signature, ...)
//! is saved with the run's messages and sent back exactly, by a process that never
//! saw the first turn.
//!
//! The test starts an imitation of the provider's API, then runs this test binary
//! twice as a child process over one SQLite file: the first asks the agent, whose
//! model reasons and calls a tool that needs approval, so the run waits and the
//! process exits; the second approves the call, and the model's next turn must
//! carry the first turn's reasoning unchanged, or the imitation refuses it as the
//! provider would.

use std::process::Command;
use std::sync::Arc;

use loopstack::llm::{Agent, AgentStatus, ChatModel, ToolDecision, ToolDecisions};
use loopstack::prelude::*;
use loopstack::{SqliteStore, Store};
use loopstack_model::testing::{Reply, Request, Server};
use serde_json::{Value, json};

/// Which half of the loop a child process runs: `ask` or `approve`.
const PHASE: &str = "LOOPSTACK_REASONING_PHASE";

/// Restarts the unit: a person approves each call.
#[tool(approve)]
async fn restart_unit(unit: String) -> Result<String, ToolError> {
    Ok(format!("{unit} restarted"))
}

/// The provider's model, pointed at the imitation.
fn model(provider: &str, url: &str) -> Arc<dyn ChatModel> {
    match provider {
        "anthropic" => Arc::new(loopstack::llm::Anthropic::new("test-key").base_url(url)),
        other => panic!("no model for {other}"),
    }
}

fn agent(provider: &str, url: &str) -> Agent {
    let tools = ToolRegistry::new().with(RestartUnit).unwrap();
    Agent::new(model(provider, url), "reasoner-1", tools).reasoning_effort(loopstack::llm::ReasoningEffort::High)
}

/// A child process: one half of the loop, over the store at `LOOPSTACK_DB`.
async fn child(phase: &str) {
    let (provider, url) = (std::env::var("LOOPSTACK_PROVIDER").unwrap(), std::env::var("LOOPSTACK_URL").unwrap());
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(std::env::var("LOOPSTACK_DB").unwrap()).await.unwrap());
    let runtime = Runtime::with_shared_store(store);
    match phase {
        "ask" => {
            let reply = agent(&provider, &url).ask(&runtime, "The web unit is down.").await.unwrap();
            let AgentStatus::AwaitingApproval { calls } = reply.status else { panic!("{:?}", reply.status) };
            println!("RUN {} {}", reply.run_id, calls[0].call_id);
        }
        "approve" => {
            let run_id: RunId = std::env::var("LOOPSTACK_RUN").unwrap().parse().unwrap();
            let call = std::env::var("LOOPSTACK_CALL").unwrap();
            let decisions = ToolDecisions::new([ToolDecision::approve(call)]);
            let done = agent(&provider, &url).decide(&runtime, run_id, decisions).await.unwrap();
            assert_eq!(done.status, AgentStatus::Completed, "{}", done.text);
            println!("ANSWER {}", done.text);
        }
        other => panic!("unknown phase {other}"),
    }
}

/// Runs this test in a child process for `phase`; its stdout.
fn run_child(phase: &str, env: &[(&str, String)]) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["--exact", "a_tool_loop_with_reasoning_continues_in_a_new_process", "--nocapture", "--test-threads=1"])
        .env(PHASE, phase)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "the {phase} process failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// An imitation of Anthropic's Messages API for the loop: the first turn thinks
/// (signed) and calls the tool; the next must send the signed thinking back, unchanged
/// and before the call, with the tool's result, as the API requires.
fn anthropic(request: &Request) -> Result<Reply, String> {
    if request.header("x-api-key") != Some("test-key") {
        return Ok(Reply::json(
            401,
            json!({"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}),
        ));
    }
    let body = &request.body;
    if body["thinking"] != json!({"type": "enabled", "budget_tokens": 16384}) {
        return Err(format!("thinking not asked for: {}", body["thinking"]));
    }
    let messages = body["messages"].as_array().ok_or("no messages")?;
    let reply = |content: Value, stop: &str| {
        Reply::json(
            200,
            json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "reasoner-1", "content": content,
                "stop_reason": stop, "stop_sequence": null,
                "usage": {"input_tokens": 20, "output_tokens": 40},
            }),
        )
    };
    match messages.len() {
        1 => Ok(reply(
            json!([
                {"type": "thinking", "thinking": "The web unit is down: restart it.", "signature": "c2lnLTE="},
                {"type": "tool_use", "id": "toolu_1", "name": "restart_unit", "input": {"unit": "web"}},
            ]),
            "tool_use",
        )),
        3 => {
            let assistant = &messages[1];
            let want = json!([
                {"type": "thinking", "thinking": "The web unit is down: restart it.", "signature": "c2lnLTE="},
                {"type": "tool_use", "id": "toolu_1", "name": "restart_unit", "input": {"unit": "web"}},
            ]);
            if assistant["content"] != want {
                return Ok(Reply::json(
                    400,
                    json!({"type": "error", "error": {"type": "invalid_request_error",
                    "message": format!("the thinking block must come back unchanged, got {}", assistant["content"])}}),
                ));
            }
            if request.header("anthropic-beta") != Some("interleaved-thinking-2025-05-14") {
                return Err("no interleaved thinking header".into());
            }
            Ok(reply(json!([{"type": "text", "text": "The web unit is back."}]), "end_turn"))
        }
        n => Err(format!("{n} messages")),
    }
}

/// The imitations, by provider.
fn imitation(provider: &str) -> fn(&Request) -> Result<Reply, String> {
    match provider {
        "anthropic" => anthropic,
        other => panic!("no imitation of {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_loop_with_reasoning_continues_in_a_new_process() {
    if let Ok(phase) = std::env::var(PHASE) {
        return child(&phase).await;
    }
    for provider in ["anthropic"] {
        let answer = imitation(provider);
        let server = Server::handle(move |request| {
            answer(request).unwrap_or_else(|problem| Reply::raw(418, "text/plain", format!("imitation: {problem}")))
        })
        .await;
        let db = std::env::temp_dir().join(format!("loopstack-reasoning-{provider}-{}.db", RunId::new()));
        let env = [
            ("LOOPSTACK_PROVIDER", provider.to_owned()),
            ("LOOPSTACK_URL", server.url()),
            ("LOOPSTACK_DB", db.display().to_string()),
        ];

        let asked = tokio::task::spawn_blocking(move || run_child("ask", &env)).await.unwrap();
        let line = asked.lines().find_map(|l| l.split_once("RUN ").map(|(_, rest)| rest)).unwrap_or_else(|| panic!("{asked}"));
        let (run, call) = line.split_once(' ').unwrap();
        let env = [
            ("LOOPSTACK_PROVIDER", provider.to_owned()),
            ("LOOPSTACK_URL", server.url()),
            ("LOOPSTACK_DB", db.display().to_string()),
            ("LOOPSTACK_RUN", run.to_owned()),
            ("LOOPSTACK_CALL", call.to_owned()),
        ];
        let approved = tokio::task::spawn_blocking(move || run_child("approve", &env)).await.unwrap();
        assert!(approved.contains("ANSWER The web unit is back."), "{provider}: {approved}");
        // Two turns, each answered once: the second carried the reasoning back.
        let statuses: Vec<_> = server.requests().iter().map(|r| r.body["messages"].as_array().map(Vec::len)).collect();
        assert_eq!(statuses, [Some(1), Some(3)], "{provider}");
        let _ = std::fs::remove_file(&db);
    }
}
