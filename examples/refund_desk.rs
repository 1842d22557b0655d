//! The refund desk: an agent whose `issue_refund` tool is a workflow. Each call
//! starts a child run of `refund`; a small refund completes within the call, a
//! large one waits for a manager's approval signal, and the agent waits with it,
//! durably, holding no task. Offline, with the scripted model.
//!
//! ```text
//! cargo run --example refund_desk                 # a SQLite file in the temp dir
//! cargo run --example refund_desk -- --db desk.db # keep the runs
//! ```
//!
//! It asks for two refunds at once: 40 EUR (refunded at once) and 900 EUR (waits).
//! Then, as a manager would from another process, a second runtime over the same
//! store approves the waiting refund; the child's end wakes the agent, which
//! answers with both results.

use std::process::ExitCode;

use loopstack::llm::dispatch::ChildInput;
use loopstack::llm::{Agent, AgentStatus, ChatRequest, Message, ScriptedModel, WorkflowTool};
use loopstack::prelude::*;
use serde::{Deserialize, Serialize};

/// What the model passes to `issue_refund`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[allow(dead_code)] // Read by the schema and the argument check.
struct RefundArgs {
    /// The order number, such as A-1017.
    order: String,
    /// The amount to refund, in euros.
    amount: u32,
}

/// A refund's run: its input (from the tool call) and what it publishes.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Refund {
    order: String,
    amount: u32,
    /// The call that started it (part of every workflow tool child's input).
    tool_call_id: String,
    /// What the agent's model reads as the call's result.
    tool_result_text: Option<String>,
}

/// A manager's decision on a large refund.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Approval {
    approved: bool,
    manager: String,
}

/// Refunds up to 100 EUR at once; larger ones wait for a manager.
struct RefundDesk;

#[workflow(name = "refund", input = Refund)]
impl RefundDesk {
    #[transition(to = Checked)]
    async fn check(&self, refund: &mut Refund, _cx: &mut RunContext) -> Result<()> {
        println!("  [refund {}] checking {} EUR on {}", refund.tool_call_id, refund.amount, refund.order);
        Ok(())
    }

    #[transition(from = Checked, to = End, priority = 1)]
    #[guard(is_small)]
    async fn refund_at_once(&self, refund: &mut Refund, _cx: &mut RunContext) -> Result<()> {
        refund.tool_result_text = Some(format!("refunded {} EUR on {}", refund.amount, refund.order));
        Ok(())
    }

    /// Waits for a manager.
    #[transition(from = Checked, to = End, wait)]
    async fn approve(&self, refund: &mut Refund, _cx: &mut RunContext, approval: Approval) -> Result<()> {
        refund.tool_result_text = Some(if approval.approved {
            format!("refunded {} EUR on {}, approved by {}", refund.amount, refund.order, approval.manager)
        } else {
            format!("the refund on {} was refused by {}", refund.order, approval.manager)
        });
        Ok(())
    }

    /// A refund nobody approved within two days is refused; the agent's call gets
    /// that as its result. (The tool's timeout bounds the run until it first waits;
    /// a waiting child keeps its own deadline, durably, as a timer.)
    #[transition(from = Checked, to = End, after = "48h")]
    async fn expire(&self, refund: &mut Refund, _cx: &mut RunContext) -> Result<()> {
        refund.tool_result_text = Some(format!("no manager approved the refund on {} within 48 hours", refund.order));
        Ok(())
    }

    fn is_small(&self, refund: &Refund) -> bool {
        refund.amount <= 100
    }
}

/// The offline model: it asks for both refunds, then answers from the results.
fn desk_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().expect("a conversation");
        let results: Vec<String> = last.tool_results_iter().map(|r| r.content.clone()).collect();
        if results.is_empty() {
            let calls = [
                ("issue_refund", serde_json::json!({"order": "A-1017", "amount": 40})),
                ("issue_refund", serde_json::json!({"order": "B-2204", "amount": 900})),
            ];
            return Ok(ScriptedModel::new().tool_calls_response(calls));
        }
        Ok(ScriptedModel::new().text_response(format!("Done: {}.", results.join("; "))))
    })
}

/// The agent and a runtime that knows both workflows, over `store`.
fn desk(store: loopstack::SqliteStore) -> Result<(Agent, Runtime), BoxError> {
    let refund = WorkflowTool::new::<RefundArgs>(
        "issue_refund",
        "Refunds an order. Refunds over 100 EUR wait for a manager's approval.",
        "refund",
    )?
    .input(ChildInput::mapping(serde_json::json!({"order": "arguments.order", "amount": "arguments.amount"}))?)
    .timeout(std::time::Duration::from_secs(10));
    let agent = Agent::new(desk_model(), "scripted-desk", ToolRegistry::new().with(refund)?)
        .system("You handle refunds. Use issue_refund for each order.");
    let runtime = Runtime::with_store(store).register(RefundDesk).register(agent.clone());
    Ok((agent, runtime))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<bool, BoxError> {
    let mut args = std::env::args().skip(1);
    let db = match (args.next().as_deref(), args.next()) {
        (Some("--db"), Some(path)) => std::path::PathBuf::from(path),
        (None, _) => std::env::temp_dir().join(format!("refund-desk-{}.db", RunId::new())),
        _ => return Err("usage: refund_desk [--db PATH]".into()),
    };
    println!("Refund desk, offline with the scripted model (store: {})\n", db.display());

    // The customer asks; the agent calls the tool twice.
    let (agent, runtime) = desk(loopstack::SqliteStore::open(&db).await?)?;
    let reply = agent.ask(&runtime, "Please refund A-1017 (40 EUR) and B-2204 (900 EUR).").await?;
    let AgentStatus::AwaitingTools { calls } = &reply.status else {
        return Err(format!("expected the agent to wait for the large refund, got {:?}", reply.status).into());
    };
    println!("\nThe agent run {} waits for {} call(s):", reply.run_id, calls.len());
    for call in calls {
        println!("  {} ({}) runs as child run {}, waiting for a manager", call.call_id, call.name, call.child);
    }
    let child = calls[0].child;
    drop(runtime);

    // Later, from another process: a manager approves. A new runtime, nothing in memory.
    println!("\nA manager approves child run {child} ...");
    let (_, runtime) = desk(loopstack::SqliteStore::open(&db).await?)?;
    let approval = RefundDeskSignal::Approve(Approval { approved: true, manager: "Ada".into() });
    runtime.signal(&RefundDesk, child, approval).await?;

    let record = runtime.store().load_run(reply.run_id).await?;
    println!("\nThe agent run is {}.\n\nConversation:", record.status.as_str());
    for doc in runtime.store().documents(reply.run_id).await? {
        let message: Message = doc.read()?;
        for call in message.tool_uses() {
            println!("  tool call {} {}({})", call.id, call.name, call.input);
        }
        for result in message.tool_results_iter() {
            println!("  tool result {}: {}", result.tool_use_id, result.content);
        }
        let text = message.text();
        if !text.is_empty() {
            println!("  {:?}: {text}", message.role);
        }
    }
    Ok(record.status == loopstack::RunStatus::Completed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_desk_refunds_at_once_and_after_an_approval_across_a_restart() {
        let db = std::env::temp_dir().join(format!("refund-desk-test-{}.db", RunId::new()));
        let (agent, runtime) = desk(loopstack::SqliteStore::open(&db).await.unwrap()).unwrap();
        let reply = agent.ask(&runtime, "Refund both").await.unwrap();
        let AgentStatus::AwaitingTools { calls } = reply.status else { panic!("{:?}", reply.status) };
        drop(runtime);
        let (_, runtime) = desk(loopstack::SqliteStore::open(&db).await.unwrap()).unwrap();
        let approval = RefundDeskSignal::Approve(Approval { approved: false, manager: "Ada".into() });
        runtime.signal(&RefundDesk, calls[0].child, approval).await.unwrap();
        let record = runtime.store().load_run(reply.run_id).await.unwrap();
        assert_eq!(record.status, loopstack::RunStatus::Completed);
        let state: loopstack::llm::AgentState = serde_json::from_str(record.state.get()).unwrap();
        assert_eq!(
            state.output.as_deref(),
            Some("Done: refunded 40 EUR on A-1017; the refund on B-2204 was refused by Ada.")
        );
        let _ = std::fs::remove_file(&db);
    }

    #[tokio::test]
    async fn a_refund_nobody_approves_expires_after_48_hours_and_the_call_gets_that() {
        let db = std::env::temp_dir().join(format!("refund-desk-expiry-{}.db", RunId::new()));
        let (agent, runtime) = desk(loopstack::SqliteStore::open(&db).await.unwrap()).unwrap();
        let reply = agent.ask(&runtime, "Refund both").await.unwrap();
        assert!(matches!(reply.status, AgentStatus::AwaitingTools { .. }), "{:?}", reply.status);
        // Two days and an hour later, a worker finds the child's timer due.
        let later = loopstack::Timestamp::now() + std::time::Duration::from_secs(49 * 3600);
        let runtime = runtime.clock(move || later);
        let driven = loopstack::Worker::new(runtime.clone()).run_once().await.unwrap();
        assert!(driven >= 1);
        let record = runtime.store().load_run(reply.run_id).await.unwrap();
        assert_eq!(record.status, loopstack::RunStatus::Completed);
        let state: loopstack::llm::AgentState = serde_json::from_str(record.state.get()).unwrap();
        assert_eq!(
            state.output.as_deref(),
            Some("Done: refunded 40 EUR on A-1017; no manager approved the refund on B-2204 within 48 hours.")
        );
        let _ = std::fs::remove_file(&db);
    }
}
