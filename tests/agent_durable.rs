//! The agent's waits survive a restart: a run that waits for tool approval, and a
//! chat run that waits for the user, are picked up by a new runtime over a new
//! connection to the same store (SQLite and PostgreSQL), which holds nothing of the
//! first one in memory.

use std::sync::Arc;

use loopstack::llm::{Agent, AgentStatus, Message, ScriptedModel, ToolDecision, ToolDecisions};
use loopstack::prelude::*;
use loopstack::{RunStatus, SqliteStore, Store};
use loopstack_store::PostgresStore;

/// Refunds an order: a person approves each call.
#[tool(approve)]
async fn issue_refund(order: String) -> Result<String, ToolError> {
    Ok(format!("refunded {order}"))
}

/// The model: asks for the refund, then answers from the tool result it reads.
fn model() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        let last = req.messages.last().unwrap();
        Ok(match last.tool_results_iter().next() {
            Some(result) => ScriptedModel::new().text_response(format!("Done: {}", result.content)),
            None => ScriptedModel::new().tool_call_response("issue_refund", serde_json::json!({"order": "A-17"})),
        })
    })
}

async fn approval_survives_a_restart(open: impl AsyncFn() -> Arc<dyn Store>) {
    let agent = || Agent::new(model(), "scripted", ToolRegistry::new().with(IssueRefund).unwrap());

    let first = Runtime::with_shared_store(open().await);
    let reply = agent().ask(&first, "Refund A-17").await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = reply.status else { panic!("{:?}", reply.status) };
    let before = first.store().documents(reply.run_id).await.unwrap();
    assert!(before.iter().all(|d| d.read::<Message>().unwrap().tool_results_iter().next().is_none()));
    drop(first);

    let second = Runtime::with_shared_store(open().await);
    assert_eq!(second.store().load_run(reply.run_id).await.unwrap().status, RunStatus::Waiting);
    let decisions = ToolDecisions::new([ToolDecision::approve(&calls[0].call_id)]);
    let done = agent().decide(&second, reply.run_id, decisions).await.unwrap();
    assert_eq!((done.status, done.text.as_str()), (AgentStatus::Completed, "Done: refunded A-17"));
    // The call ran only once approved: before, the run had no tool result.
    let docs = second.store().documents(reply.run_id).await.unwrap();
    let results = docs.iter().filter(|d| d.read::<Message>().unwrap().tool_results_iter().next().is_some()).count();
    assert_eq!(results, 1);
}

async fn chat_survives_a_restart(open: impl AsyncFn() -> Arc<dyn Store>) {
    let model = || {
        ScriptedModel::from_fn(|req| {
            let said: Vec<String> = req.messages.iter().map(Message::text).collect();
            Ok(ScriptedModel::new().text_response(format!("heard {}", said.join(" | "))))
        })
    };
    let agent = || Agent::new(model(), "scripted", ToolRegistry::new()).chat(true);
    let first = Runtime::with_shared_store(open().await);
    let reply = agent().ask(&first, "one").await.unwrap();
    assert_eq!((reply.status, reply.text.as_str()), (AgentStatus::AwaitingUser, "heard one"));
    drop(first);

    let second = Runtime::with_shared_store(open().await);
    let reply = agent().say(&second, reply.run_id, "two").await.unwrap();
    assert_eq!(reply.text, "heard one | heard one | two");
    assert_eq!(agent().close_chat(&second, reply.run_id).await.unwrap().status, AgentStatus::Completed);
}

fn sqlite_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("loopstack-agent-{}.db", RunId::new()))
}

#[tokio::test]
async fn on_sqlite_a_waiting_approval_and_chat_survive_a_restart() {
    let path = sqlite_path();
    let open = async || -> Arc<dyn Store> {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).await.unwrap());
        store
    };
    approval_survives_a_restart(open).await;
    chat_survives_a_restart(open).await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn on_postgres_a_waiting_approval_and_chat_survive_a_restart() {
    let url = std::env::var("LOOPSTACK_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let schema = format!("loopstack_test_agent_{}", RunId::new().0.simple());
    let open = async || -> Arc<dyn Store> {
        let store: Arc<dyn Store> = Arc::new(PostgresStore::connect_schema(&url, &schema).await.unwrap_or_else(|e| {
            panic!("PostgreSQL at {url} is needed for this test (`.ci/run` starts it; set LOOPSTACK_DATABASE_URL): {e}")
        }));
        store
    };
    approval_survives_a_restart(open).await;
    chat_survives_a_restart(open).await;
    let store = PostgresStore::connect_schema(&url, &schema).await.unwrap();
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(store.pool()).await.unwrap();
}
