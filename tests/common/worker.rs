//! The worker example (`examples/worker.rs`) as a process, and the agent it drives
//! (same name and table), for the tests that submit runs to it or drive one here.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use loopstack::llm::{Agent, ChatRequest, ChatResponse, ContentBlock, Message, Role, ScriptedModel};
use loopstack::llm::{StopReason, ToolUse, Usage};
use loopstack::prelude::*;

/// The question the tests ask.
pub(crate) const QUESTION: &str = "How is the weather in Berlin?";

/// The worker example, built next to the test's binary.
pub(crate) fn worker_exe() -> &'static PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| super::example("worker"))
}

/// Kills its worker when dropped, so a failing test leaves no process behind.
pub(crate) struct WorkerProcess(pub(crate) Child);

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A worker process on the store `store_args` open, with `options` (`--owner`,
/// `--concurrency`, ...).
pub(crate) fn spawn_worker(store_args: &[String], options: &[&str]) -> WorkerProcess {
    let child = Command::new(worker_exe())
        .args(store_args)
        .args(options)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    WorkerProcess(child)
}

/// The agent the worker example drives: one call of `get_weather`, then an answer
/// with its result.
pub(crate) fn agent() -> Agent {
    let model = ScriptedModel::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().unwrap();
        let usage = Usage::new(20, 5);
        if let Some(result) = last.tool_results_iter().next() {
            let answer = Message::assistant(format!("Here is the weather: {}", result.content));
            return Ok(ChatResponse::new(answer, StopReason::EndTurn, usage, "scripted"));
        }
        let call = ToolUse::new("call_0", "get_weather", serde_json::json!({ "location": "Berlin" }));
        let message = Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] };
        Ok(ChatResponse::new(message, StopReason::ToolUse, usage, "scripted"))
    });
    Agent::new(model, "scripted", ToolRegistry::new().with(Weather).unwrap())
}

/// Retrieve weather information.
#[tool(name = "get_weather")]
async fn weather(
    /// City or location name
    location: String,
) -> Result<String, ToolError> {
    Ok(format!("Mostly sunny in {location}, 14C."))
}
