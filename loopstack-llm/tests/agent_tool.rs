//! An agent as a tool of another agent (`billing.as_tool(...)`): each call is a
//! durable child run of the named agent and its answer is the result; an approval
//! inside the child keeps the call pending; the child's tokens and cost count
//! against the parent's limits; a child that fails is one error result.

use loopstack_core::{RunQuery, RunStatus, Runtime, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use loopstack_llm::{
    Agent, AgentState, AgentStatus, AgentToolError, Limit, Limits, Price, Prices, ScriptedModel, ToolDecisions,
    ToolResult, Usage,
};
use serde_json::{Value, json};

/// The parent: asks `tool` one question, then answers with `answer`.
fn parent(tool: &str, answer: &str, tools: ToolRegistry) -> (Agent, ScriptedModel) {
    let model = ScriptedModel::new()
        .tool_call(tool, json!({"question": "What did the customer pay in May?"}))
        .text(answer)
        .record_requests(true);
    (Agent::new(model.clone(), "m", tools).named("triage").unwrap(), model)
}

fn billing(model: ScriptedModel) -> Agent {
    Agent::new(model, "m", ToolRegistry::new()).named("billing").unwrap()
}

/// The results the parent's model read in its second turn.
fn results_read(model: &ScriptedModel) -> Vec<ToolResult> {
    let requests = model.requests();
    requests[1].messages.iter().flat_map(|m| m.tool_results_iter().cloned().collect::<Vec<_>>()).collect()
}

#[tokio::test]
async fn the_childs_answer_is_the_result_and_its_usage_is_the_parents() {
    let child_model = ScriptedModel::new().text("20 EUR on 1 May.").record_requests(true);
    let billing = billing(child_model.clone());
    let tool = billing.as_tool("billing", "Answers billing questions.").unwrap();
    assert_eq!(tool.agent(), "billing");
    assert_eq!(tool.input_schema()["required"], json!(["question"]));
    let (triage, model) = parent("billing", "You paid 20 EUR.", ToolRegistry::new().with(tool).unwrap());
    let prices = Prices::new().model("m", Price::per_million(1000.0, 1000.0));
    let triage = triage.prices(prices.clone());
    let runtime = Runtime::new().try_register(billing.prices(prices)).unwrap().try_register(triage.clone()).unwrap();

    let reply = triage.ask(&runtime, "What did I pay in May?").await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    assert_eq!(reply.text, "You paid 20 EUR.");
    let results = results_read(&model);
    assert_eq!(results.len(), 1);
    assert!(!results[0].is_error);
    assert_eq!(results[0].content, "20 EUR on 1 May.");
    // The child was asked the question, not the conversation.
    assert_eq!(child_model.requests()[0].messages.last().unwrap().text(), "What did the customer pay in May?");
    // Two turns of the parent's and one of the child's, 20 tokens each, 0.02 each.
    assert_eq!(reply.usage.all_tokens(), 60);
    assert!((reply.cost - 0.06).abs() < 1e-9, "{}", reply.cost);
    assert_eq!(reply.turns, 2, "the child's turns are its own");

    // The child is a run of its own, of the agent `billing`, a child of the parent.
    let children = runtime.store().list_runs(&RunQuery::new().parent(reply.run_id)).await.unwrap().runs;
    assert_eq!(children.len(), 1);
    let child = runtime.store().load_run(children[0].run_id).await.unwrap();
    assert_eq!(
        (child.workflow.as_ref(), child.status, child.parent),
        ("billing", RunStatus::Completed, Some(reply.run_id))
    );
}

/// A tool that needs a person's approval.
struct Reset;

#[async_trait::async_trait]
impl Tool for Reset {
    fn name(&self) -> &str {
        "reset_password"
    }
    fn description(&self) -> &str {
        "Resets a user's password."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"user": {"type": "string"}}})
    }
    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!("password of {} reset", args["user"].as_str().unwrap_or("?"))))
    }
}

#[tokio::test]
async fn an_approval_inside_the_child_keeps_the_parents_call_pending() {
    let mut tools = ToolRegistry::new().with(Reset).unwrap();
    tools.require_approval("reset_password").unwrap();
    let child_model =
        ScriptedModel::new().tool_call("reset_password", json!({"user": "ada"})).text("Ada's password is reset.");
    let password = Agent::new(child_model, "m", tools).named("password").unwrap();
    let tool = password.as_tool("password", "Resets passwords.").unwrap();
    let (triage, model) = parent("password", "Done: Ada's password is reset.", ToolRegistry::new().with(tool).unwrap());
    let runtime = Runtime::new().try_register(password.clone()).unwrap().try_register(triage.clone()).unwrap();

    let reply = triage.ask(&runtime, "Reset Ada's password").await.unwrap();
    let AgentStatus::AwaitingTools { calls } = &reply.status else { panic!("{:?}", reply.status) };
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, "password");
    assert_eq!(model.calls(), 1, "the parent waits for its call's result");
    assert_eq!(runtime.store().load_run(reply.run_id).await.unwrap().status, RunStatus::Waiting);

    // The child waits for the person; deciding it ends the child and wakes the parent.
    let child = calls[0].child;
    let pending = password.pending(&runtime, child).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].arguments, json!({"user": "ada"}));
    let child_reply = password.decide(&runtime, child, ToolDecisions::approve_all(&pending)).await.unwrap();
    assert_eq!(child_reply.status, AgentStatus::Completed);

    let parent = runtime.store().load_run(reply.run_id).await.unwrap();
    assert_eq!(parent.status, RunStatus::Completed);
    let state: AgentState = serde_json::from_str(parent.state.get()).unwrap();
    assert_eq!(state.output.as_deref(), Some("Done: Ada's password is reset."));
    assert_eq!(results_read(&model)[0].content, "Ada's password is reset.");
    // Two turns each, 20 tokens a turn.
    assert_eq!(state.usage.all_tokens(), 80);
}

#[tokio::test]
async fn the_parents_limits_count_the_childs_tokens_and_cost() {
    // Tokens: the child's 1000 pass the parent's budget of 100 before its next turn.
    let billing_agent = billing(ScriptedModel::new().usage(Usage::new(500, 500)).text("20 EUR."));
    let tool = billing_agent.as_tool("billing", "Answers billing questions.").unwrap();
    let (triage, model) = parent("billing", "never said", ToolRegistry::new().with(tool).unwrap());
    let triage = triage.limits(Limits::new().max_total_tokens(100));
    let runtime = Runtime::new().try_register(billing_agent).unwrap().try_register(triage.clone()).unwrap();
    let reply = triage.ask(&runtime, "What did I pay?").await.unwrap();
    assert_eq!(reply.status, AgentStatus::LimitReached(Limit::TotalTokens { max: 100, used: 1020 }));
    assert_eq!(model.calls(), 1);

    // Cost: the child's turn, priced by the child's prices, passes the parent's budget.
    let billing_agent = billing(ScriptedModel::new().text("20 EUR."))
        .prices(Prices::new().model("m", Price::per_million(100_000.0, 100_000.0)));
    let tool = billing_agent.as_tool("billing", "Answers billing questions.").unwrap();
    let (triage, model) = parent("billing", "never said", ToolRegistry::new().with(tool).unwrap());
    let triage = triage.limits(Limits::new().max_cost(1.0));
    let runtime = Runtime::new().try_register(billing_agent).unwrap().try_register(triage.clone()).unwrap();
    let reply = triage.ask(&runtime, "What did I pay?").await.unwrap();
    let AgentStatus::LimitReached(Limit::Cost { max, spent }) = reply.status else { panic!("{:?}", reply.status) };
    assert_eq!(max, 1.0);
    assert!((spent - 2.0).abs() < 1e-9, "{spent}");
    assert_eq!(model.calls(), 1);
}

#[tokio::test]
async fn a_child_that_fails_stops_or_is_missing_is_one_error_result_the_parent_reads() {
    // No reply scripted: the child's first turn fails, and so does its run.
    let failing = billing(ScriptedModel::new());
    let tool = failing.as_tool("billing", "Answers billing questions.").unwrap();
    let (triage, model) = parent("billing", "Billing is down; try later.", ToolRegistry::new().with(tool).unwrap());
    let runtime = Runtime::new().try_register(failing.clone()).unwrap().try_register(triage.clone()).unwrap();
    let reply = triage.ask(&runtime, "What did I pay?").await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    assert_eq!(reply.text, "Billing is down; try later.");
    let results = results_read(&model);
    assert_eq!(results.len(), 1);
    assert!(results[0].is_error);
    assert!(results[0].content.starts_with("the agent `billing` failed:"), "{}", results[0].content);
    assert!(results[0].content.contains("scripted model"), "{}", results[0].content);

    // A child that stops at its own limit did not answer: it is stopped, and its
    // waiting parent is told why.
    let looping = billing(ScriptedModel::new().tool_call("nothing", json!({}))).max_turns(1);
    let tool = looping.as_tool("billing", "Answers billing questions.").unwrap();
    let (triage_agent, model) = parent("billing", "No answer.", ToolRegistry::new().with(tool).unwrap());
    let runtime = Runtime::new().try_register(looping).unwrap().try_register(triage_agent.clone()).unwrap();
    let reply = triage_agent.ask(&runtime, "?").await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    let result = &results_read(&model)[0];
    assert!(result.is_error);
    assert_eq!(result.content, "the agent `billing` stopped: the run reached the budget of 1 model turns");
    let children = runtime.store().list_runs(&RunQuery::new().parent(reply.run_id)).await.unwrap().runs;
    let stopped: Vec<_> = children.iter().map(|c| (c.status, c.error.as_deref())).collect();
    assert_eq!(stopped, [(RunStatus::Stopped, Some("the run reached the budget of 1 model turns"))]);

    // A child that takes longer than the tool's timeout is cancelled.
    let slow = billing(ScriptedModel::new().latency(std::time::Duration::from_secs(5)).text("late"));
    let tool =
        slow.as_tool("billing", "Answers billing questions.").unwrap().timeout(std::time::Duration::from_millis(50));
    let (triage_agent, model) = parent("billing", "No answer.", ToolRegistry::new().with(tool).unwrap());
    let runtime = Runtime::new().try_register(slow).unwrap().try_register(triage_agent.clone()).unwrap();
    assert_eq!(triage_agent.ask(&runtime, "?").await.unwrap().status, AgentStatus::Completed);
    let result = &results_read(&model)[0];
    assert!(result.is_error);
    assert!(result.content.starts_with("the agent `billing` was cancelled"), "{}", result.content);

    // An agent not registered on the runtime: the result says how to fix it.
    let tool = billing(ScriptedModel::new().text("20 EUR.")).as_tool("billing", "Answers billing questions.").unwrap();
    let (triage_agent, model) = parent("billing", "No answer.", ToolRegistry::new().with(tool).unwrap());
    let runtime = Runtime::new().try_register(triage_agent.clone()).unwrap();
    assert_eq!(triage_agent.ask(&runtime, "?").await.unwrap().status, AgentStatus::Completed);
    let result = &results_read(&model)[0];
    assert!(result.is_error);
    assert!(result.content.contains("the agent `billing` is not registered on this runtime"), "{}", result.content);

    // A name that is not a tool name is refused, and so is an agent without a name.
    let err = billing(ScriptedModel::new()).as_tool("bill ing", "").unwrap_err();
    assert!(matches!(err, AgentToolError::Name(_)), "{err}");
    let err = Agent::new(ScriptedModel::new(), "m", ToolRegistry::new()).as_tool("billing", "").unwrap_err();
    assert_eq!(err, AgentToolError::Unnamed);
}

#[tokio::test]
async fn a_typed_agent_answers_with_its_value() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Charge {
        amount: u32,
    }
    let typed = Agent::new(ScriptedModel::new().tool_call("respond", json!({"amount": 20})), "m", ToolRegistry::new())
        .named("billing")
        .unwrap()
        .answer::<Charge>();
    let tool = typed.as_tool("billing", "Answers billing questions.").unwrap();
    let (triage, model) = parent("billing", "20.", ToolRegistry::new().with(tool).unwrap());
    let runtime = Runtime::new().try_register(typed.agent().clone()).unwrap().try_register(triage.clone()).unwrap();
    assert_eq!(triage.ask(&runtime, "?").await.unwrap().status, AgentStatus::Completed);
    assert_eq!(serde_json::from_str::<Value>(&results_read(&model)[0].content).unwrap(), json!({"amount": 20}));
}

#[tokio::test]
async fn two_calls_in_one_turn_are_two_children_answered_in_call_order() {
    let child_model = ScriptedModel::from_fn(|req| {
        let question = req.messages.last().map(|m| m.text()).unwrap_or_default();
        Ok(ScriptedModel::new().text_response(format!("answer to {question}")))
    });
    let billing = billing(child_model);
    let tool = billing.as_tool("billing", "Answers billing questions.").unwrap();
    let model = ScriptedModel::new()
        .tool_calls([("billing", json!({"question": "May?"})), ("billing", json!({"question": "June?"}))])
        .text("Both answered.")
        .record_requests(true);
    let triage = Agent::new(model.clone(), "m", ToolRegistry::new().with(tool).unwrap()).named("triage").unwrap();
    let runtime = Runtime::new().try_register(billing).unwrap().try_register(triage.clone()).unwrap();
    let reply = triage.ask(&runtime, "What did I pay?").await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    let contents: Vec<String> = results_read(&model).into_iter().map(|r| r.content).collect();
    assert_eq!(contents, ["answer to May?", "answer to June?"]);
    assert_eq!(reply.usage.all_tokens(), 80, "two turns of its own and one of each child");
    assert_eq!(runtime.store().list_runs(&RunQuery::new().parent(reply.run_id)).await.unwrap().runs.len(), 2);
}

#[tokio::test]
async fn an_approval_two_agents_down_wakes_both_callers_in_turn() {
    let mut tools = ToolRegistry::new().with(Reset).unwrap();
    tools.require_approval("reset_password").unwrap();
    let reset_model = ScriptedModel::new().tool_call("reset_password", json!({"user": "ada"})).text("reset");
    let password = Agent::new(reset_model, "m", tools).named("password").unwrap();
    let accounts_model =
        ScriptedModel::new().tool_call("password", json!({"question": "Reset ada"})).text("accounts: reset");
    let accounts = Agent::new(
        accounts_model,
        "m",
        ToolRegistry::new().with(password.as_tool("password", "Resets passwords.").unwrap()).unwrap(),
    )
    .named("accounts")
    .unwrap();
    let tool = accounts.as_tool("accounts", "Manages accounts.").unwrap();
    let (triage, model) = parent("accounts", "triage: accounts: reset", ToolRegistry::new().with(tool).unwrap());
    let runtime = Runtime::new()
        .try_register(password.clone())
        .unwrap()
        .try_register(accounts.clone())
        .unwrap()
        .try_register(triage.clone())
        .unwrap();

    let reply = triage.ask(&runtime, "Reset Ada").await.unwrap();
    let AgentStatus::AwaitingTools { calls } = &reply.status else { panic!("{:?}", reply.status) };
    let middle = runtime.store().load_run(calls[0].child).await.unwrap();
    let state: AgentState = serde_json::from_str(middle.state.get()).unwrap();
    let grandchild = state.pending_tools[0].child;
    let pending = password.pending(&runtime, grandchild).await.unwrap();
    password.decide(&runtime, grandchild, ToolDecisions::approve_all(&pending)).await.unwrap();

    let top = runtime.store().load_run(reply.run_id).await.unwrap();
    assert_eq!(top.status, RunStatus::Completed);
    assert_eq!(results_read(&model)[0].content, "accounts: reset");
    let state: AgentState = serde_json::from_str(top.state.get()).unwrap();
    assert_eq!(state.usage.all_tokens(), 120, "two turns at each of the three levels");
}
