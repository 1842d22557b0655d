//! Secrets registered with the runtime never reach what a run records or what a
//! model reads: documents (content and metadata), states, tool results and the
//! errors recorded with failed runs.

use loopstack_core::{RunStatus, Runtime, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use loopstack_llm::{Agent, ScriptedModel};
use serde_json::{Value, json};

const KEY: &str = "sk-live-0123456789abcdef";

/// A tool that leaks the key in its result.
struct Leaky;

#[async_trait::async_trait]
impl Tool for Leaky {
    fn name(&self) -> &str {
        "leaky"
    }
    fn description(&self) -> &str {
        "Leaks."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::json(json!({"token": KEY, "note": format!("use {KEY} to log in")})))
    }
}

#[tokio::test]
async fn registered_secrets_are_redacted_from_documents_states_results_and_errors() {
    let model = ScriptedModel::new().tool_call("leaky", json!({})).text(format!("The key is {KEY}."));
    let agent = Agent::new(model.clone(), "m", ToolRegistry::new().with(Leaky).unwrap());
    let runtime = Runtime::new();
    runtime.secrets().register(KEY);
    let reply = agent.ask(&runtime, format!("My key is {KEY}; check it.")).await.unwrap();

    // The model's next turn read the redacted result.
    let result = model.requests()[1].messages[2].tool_results_iter().next().unwrap().content.clone();
    assert!(!result.contains(KEY) && result.contains("[redacted]"), "{result}");
    // Nothing the run recorded holds the key.
    let docs = runtime.store().documents(reply.run_id).await.unwrap();
    for doc in &docs {
        assert!(!doc.content.get().contains(KEY), "{}", doc.content.get());
        assert!(!doc.metadata.as_str().contains(KEY), "{}", doc.metadata.as_str());
    }
    let record = runtime.store().load_run(reply.run_id).await.unwrap();
    for step in 0..=record.step {
        let checkpoint = runtime.store().checkpoint(reply.run_id, step).await.unwrap();
        assert!(!checkpoint.state.get().contains(KEY), "step {step}: {}", checkpoint.state.get());
    }
    assert_eq!(reply.text, "The key is [redacted].");

    // A failed run's recorded error is redacted too.
    let failing = Agent::new(ScriptedModel::new(), "m", ToolRegistry::new());
    let err = failing.ask(&runtime, "hello").await.unwrap_err();
    let run = runtime.store().load_run(err.run_id().unwrap()).await.unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    let runtime2 = Runtime::new();
    runtime2.secrets().register("scripted reply");
    let err = Agent::new(ScriptedModel::new(), "m", ToolRegistry::new()).ask(&runtime2, "hi").await.unwrap_err();
    let run = runtime2.store().load_run(err.run_id().unwrap()).await.unwrap();
    let recorded = run.error.unwrap();
    assert!(!recorded.contains("scripted reply") && recorded.contains("[redacted]"), "{recorded}");
}
