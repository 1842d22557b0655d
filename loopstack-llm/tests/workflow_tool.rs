//! Workflows as tools: each call starts one child run; what the child publishes is
//! the call's result; a child that waits leaves its call pending and the agent
//! waits durably; failures, timeouts and bad arguments are error results, one per
//! call id, always.

use loopstack_core::{RunContext, RunStatus, Runtime, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use loopstack_llm::dispatch::ChildInput;
use loopstack_llm::{
    Agent, AgentError, AgentStatus, ChatResponse, ContentBlock, Message, Role, ScriptedModel, StopReason, ToolUse,
    Usage, WorkflowTool,
};
use loopstack_macros::workflow;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct RefundArgs {
    /// The order to refund.
    order: String,
    /// The amount, in euros.
    amount: u32,
    /// For the tests: the child fails.
    fail: Option<bool>,
    /// For the tests: the child hangs.
    hang: Option<bool>,
}

/// The refund desk: small refunds at once, large ones after a manager approves.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Refund {
    order: String,
    amount: u32,
    customer: Value,
    tool_call_id: String,
    tool_call_index: usize,
    fail: Option<bool>,
    hang: Option<bool>,
    tool_result_text: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Approval {
    approved: bool,
    by: String,
}

struct RefundDesk;

#[workflow(crate = ::loopstack_core, name = "refund", input = Refund)]
impl RefundDesk {
    #[transition(to = Checked)]
    async fn check(&self, refund: &mut Refund, _cx: &mut RunContext) -> Result<(), AgentError> {
        if refund.fail == Some(true) {
            return Err(AgentError::Document(serde::de::Error::custom("the ledger rejected key sk-secret-123")));
        }
        if refund.hang == Some(true) {
            std::future::pending::<()>().await;
        }
        Ok(())
    }

    #[transition(from = Checked, to = End, priority = 1)]
    #[guard(is_small)]
    async fn refund_at_once(&self, refund: &mut Refund, _cx: &mut RunContext) -> Result<(), AgentError> {
        refund.tool_result_text = Some(format!("refunded {} EUR on {}", refund.amount, refund.order));
        Ok(())
    }

    #[transition(from = Checked, to = End, wait)]
    async fn approve(&self, refund: &mut Refund, _cx: &mut RunContext, approval: Approval) -> Result<(), AgentError> {
        refund.tool_result_text = Some(if approval.approved {
            format!("refunded {} EUR on {}, approved by {}", refund.amount, refund.order, approval.by)
        } else {
            format!("the refund on {} was refused by {}", refund.order, approval.by)
        });
        Ok(())
    }

    fn is_small(&self, refund: &Refund) -> bool {
        refund.amount <= 100
    }
}

/// A plain tool next to the workflow tool.
struct Clock;

#[async_trait::async_trait]
impl Tool for Clock {
    fn name(&self) -> &str {
        "clock"
    }
    fn description(&self) -> &str {
        "Tells the time."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::json(json!({"time": "noon"})))
    }
}

fn refund_tool() -> WorkflowTool {
    let mapping = json!({
        "order": "arguments.order",
        "amount": "arguments.amount",
        "customer": "ctx.customer.id",
        "fail": "arguments.fail",
        "hang": "arguments.hang",
    });
    WorkflowTool::new::<RefundArgs>("issue_refund", "Refunds an order.", "refund")
        .unwrap()
        .input(ChildInput::mapping(mapping).unwrap())
}

fn calls(calls: &[(&str, &str, Value)]) -> ChatResponse {
    let content =
        calls.iter().map(|(id, name, input)| ContentBlock::ToolUse(ToolUse::new(*id, *name, input.clone()))).collect();
    ChatResponse::new(Message { role: Role::Assistant, content }, StopReason::ToolUse, Usage::new(5, 5), "m")
}

fn setup(first: ChatResponse, tool: WorkflowTool) -> (Runtime, Agent, ScriptedModel) {
    // The first turn asks for the calls; the next answers with the results it reads.
    let model = ScriptedModel::from_fn(move |req| {
        let last = req.messages.last().unwrap();
        if req.messages.len() == 1 {
            return Ok(first.clone());
        }
        let results: Vec<String> = last.tool_results_iter().map(|r| r.content.clone()).collect();
        Ok(ScriptedModel::new().text_response(results.join(" | ")))
    });
    let tools = ToolRegistry::new().with(tool).unwrap().with(Clock).unwrap();
    let agent = Agent::new(model.clone(), "m", tools);
    let runtime = Runtime::new().register(RefundDesk).register(agent.clone());
    // The ledger's key, kept out of every result and record.
    runtime.secrets().register("sk-secret-123");
    (runtime, agent, model)
}

#[tokio::test]
async fn a_call_runs_a_child_whose_published_result_is_what_the_model_reads() {
    let first = calls(&[("c1", "issue_refund", json!({"order": "A-1", "amount": 40})), ("c2", "clock", json!({}))]);
    let (runtime, agent, model) = setup(first, refund_tool());
    let reply = agent.ask(&runtime, "Refund A-1").await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    assert_eq!(reply.text, r#"refunded 40 EUR on A-1 | {"time":"noon"}"#);

    // One child, recording its parent; its input is the mapping in the envelope.
    let children = runtime.store().list_runs(&loopstack_core::RunQuery::new().parent(reply.run_id)).await.unwrap().runs;
    assert_eq!(children.len(), 1);
    let state = runtime.store().load_run(children[0].run_id).await.unwrap().state;
    let child: Refund = serde_json::from_str(state.get()).unwrap();
    assert_eq!((child.order.as_str(), child.amount, child.customer.clone()), ("A-1", 40, Value::Null));
    assert_eq!((child.tool_call_id.as_str(), child.tool_call_index), ("c1", 0));
    // The model saw only the name, the description and the schema.
    let offered = model.requests()[0].tools.iter().find(|t| t.name == "issue_refund").unwrap().clone();
    assert_eq!(offered.description, "Refunds an order.");
    assert_eq!(offered.input_schema["required"], json!(["order", "amount"]));
}

#[tokio::test]
async fn a_child_that_waits_leaves_its_call_pending_until_a_person_answers() {
    let first = calls(&[("c1", "issue_refund", json!({"order": "B-2", "amount": 900})), ("c2", "clock", json!({}))]);
    let (runtime, agent, model) = setup(first, refund_tool());
    let reply = agent.ask(&runtime, "Refund B-2").await.unwrap();
    let AgentStatus::AwaitingTools { calls } = &reply.status else { panic!("{:?}", reply.status) };
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].call_id, "c1");
    assert_eq!(model.calls(), 1, "the model waits for every result of the batch");
    assert_eq!(runtime.store().load_run(reply.run_id).await.unwrap().status, RunStatus::Waiting);

    // The manager approves the child; its end wakes the agent, which answers.
    let approval = RefundDeskSignal::Approve(Approval { approved: true, by: "ada".into() });
    runtime.signal(&RefundDesk, calls[0].child, approval).await.unwrap();
    let parent = runtime.store().load_run(reply.run_id).await.unwrap();
    assert_eq!(parent.status, RunStatus::Completed);
    let state: loopstack_llm::AgentState = serde_json::from_str(parent.state.get()).unwrap();
    assert_eq!(state.output.as_deref(), Some(r#"refunded 900 EUR on B-2, approved by ada | {"time":"noon"}"#));
    // One results message, in call order, with one result per call id.
    let results =
        model.requests()[1].messages[2].tool_results_iter().map(|r| r.tool_use_id.clone()).collect::<Vec<_>>();
    assert_eq!(results, ["c1", "c2"]);
}

#[tokio::test]
async fn failures_timeouts_and_bad_arguments_are_error_results_for_their_call() {
    let first = calls(&[
        ("c1", "issue_refund", json!({"order": "C-3", "amount": 10, "fail": true})),
        ("c2", "issue_refund", json!({"order": "C-4", "amount": 10, "hang": true})),
        ("c3", "issue_refund", json!({"order": "C-5", "amount": "ten"})),
    ]);
    let tool = refund_tool().timeout(std::time::Duration::from_millis(100));
    let (runtime, agent, model) = setup(first, tool);
    let reply = agent.ask(&runtime, "Refund them").await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    let results: Vec<_> = model.requests()[1].messages[2].tool_results_iter().cloned().collect();
    assert_eq!(results.iter().map(|r| r.tool_use_id.as_str()).collect::<Vec<_>>(), ["c1", "c2", "c3"]);
    assert!(results.iter().all(|r| r.is_error));
    assert!(results[0].content.contains("the ledger rejected key [redacted]"), "{}", results[0].content);
    assert!(!results[0].content.contains("sk-secret-123"));
    assert!(results[1].content.contains("timed out"), "{}", results[1].content);
    assert!(results[2].content.starts_with("invalid arguments for tool `issue_refund`"), "{}", results[2].content);

    // The failed child failed, the hanging one was cancelled, the bad call started none.
    let mut children =
        runtime.store().list_runs(&loopstack_core::RunQuery::new().parent(reply.run_id)).await.unwrap().runs;
    children.sort_by_key(|c| c.created_at);
    let statuses: Vec<RunStatus> = children.iter().map(|c| c.status).collect();
    assert_eq!(statuses.len(), 2);
    assert!(statuses.contains(&RunStatus::Failed) && statuses.contains(&RunStatus::Cancelled), "{statuses:?}");
}

#[test]
fn names_are_validated_like_tool_names() {
    let err = WorkflowTool::new::<RefundArgs>("issue refund!", "Refunds.", "refund").unwrap_err();
    assert!(err.to_string().contains("tool name `issue refund!` is invalid"), "{err}");
}

#[tokio::test]
async fn fail_fast_fails_the_step_at_the_first_failure_and_cancels_the_children() {
    let first = calls(&[
        ("c1", "issue_refund", json!({"order": "D-1", "amount": 10, "hang": true})),
        ("c2", "issue_refund", json!({"order": "D-2", "amount": "ten"})),
    ]);
    let (runtime, agent, _model) = setup(first, refund_tool());
    let tools = ToolRegistry::new().with(refund_tool()).unwrap().with(Clock).unwrap();
    let agent = agent.delegate(
        loopstack_llm::LlmDelegateToolCalls::new(tools).error_policy(loopstack_llm::dispatch::ErrorPolicy::FailFast),
    );
    let err = agent.ask(&runtime, "Refund them").await.unwrap_err();
    let Some(AgentError::ToolFailed { call_id, tool, error }) = err.agent_error() else { panic!("{err:?}") };
    assert_eq!((call_id.as_str(), tool.as_str()), ("c2", "issue_refund"));
    assert!(error.starts_with("invalid arguments"), "{error}");
    let run_id = err.run_id().unwrap();
    assert_eq!(runtime.store().load_run(run_id).await.unwrap().status, RunStatus::Failed);
    // The hanging child, dropped mid-call, is cancelled with its parent.
    let children = runtime.store().list_runs(&loopstack_core::RunQuery::new().parent(run_id)).await.unwrap().runs;
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].status, RunStatus::Cancelled);
}

#[tokio::test]
async fn a_plain_batch_comes_back_as_a_dispatch_collection_with_json_results_kept() {
    let message = Message {
        role: Role::Assistant,
        content: vec![
            ContentBlock::ToolUse(ToolUse::new("t1", "clock", json!({}))),
            ContentBlock::ToolUse(ToolUse::new("t2", "nope", json!({"x": 1}))),
        ],
    };
    let tools = ToolRegistry::new().with(Clock).unwrap();
    let delegate = loopstack_llm::LlmDelegateToolCalls::new(tools);
    let cx = RunContext::detached("test");
    let result = delegate.run(&cx, &message, &["clock".to_owned()]).await;
    let dispatch = result.dispatch(&message);
    assert_eq!((dispatch.count(), dispatch.error_count(), dispatch.all_succeeded()), (2, 1, false));
    let clock = dispatch.get("t1").unwrap();
    assert_eq!(
        (clock.result.is_error, clock.result.value.clone(), clock.result.content.as_str()),
        (false, Some(json!({"time": "noon"})), r#"{"time":"noon"}"#)
    );
    let nope = dispatch.get("t2").unwrap();
    assert_eq!((nope.result.is_error, nope.arguments.clone()), (true, json!({"x": 1})));
    assert!(nope.error.as_deref().unwrap().contains("`nope`"), "{nope:?}");
    let results: Vec<String> = dispatch.message().unwrap().tool_results_iter().map(|r| r.tool_use_id.clone()).collect();
    assert_eq!(results, ["t1", "t2"]);
}

/// A tool with a long answer.
struct Long;

#[async_trait::async_trait]
impl Tool for Long {
    fn name(&self) -> &str {
        "long"
    }
    fn description(&self) -> &str {
        "Answers at length."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("é".repeat(100)))
    }
}

#[tokio::test]
async fn long_results_are_stored_cut_with_a_marker_and_returned_whole() {
    let message =
        Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(ToolUse::new("l1", "long", json!({})))] };
    let delegate =
        loopstack_llm::LlmDelegateToolCalls::new(ToolRegistry::new().with(Long).unwrap()).max_stored_bytes(11);
    let mut cx = RunContext::detached("test");
    let result = delegate.call(&mut cx, &message, &["long".to_owned()]).await.unwrap();
    assert_eq!(result.results[0].content, "é".repeat(100), "the step gets the whole result");
    let stored: Message = cx.documents().last().unwrap().read().unwrap();
    let content = &stored.tool_results_iter().next().unwrap().content;
    assert_eq!(content, &format!("{}… [truncated: 10 of 200 bytes]", "é".repeat(5)));
    // The next step of this drive (the next model turn) reads the whole result.
    let conversation = loopstack_llm::conversation(&cx).unwrap();
    assert_eq!(conversation.last().unwrap().tool_results_iter().next().unwrap().content, "é".repeat(100));
}

/// Fails its first call, then answers.
struct Flaky(std::sync::atomic::AtomicBool);

#[async_trait::async_trait]
impl Tool for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    fn description(&self) -> &str {
        "Fails once."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        if self.0.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Err(ToolError::new("the service is down"));
        }
        Ok(ToolOutput::text("up again"))
    }
}

#[tokio::test]
async fn a_retried_batch_takes_the_result_of_a_child_that_ended_before() {
    let first = calls(&[("c1", "issue_refund", json!({"order": "E-1", "amount": 5})), ("c2", "flaky", json!({}))]);
    let (_, _, model) = setup(first, refund_tool());
    let tools = ToolRegistry::new().with(refund_tool()).unwrap().with(Flaky(true.into())).unwrap();
    let agent = Agent::new(model.clone(), "m", tools.clone()).delegate(
        loopstack_llm::LlmDelegateToolCalls::new(tools).error_policy(loopstack_llm::dispatch::ErrorPolicy::FailFast),
    );
    // A runtime of its own: this agent differs from `setup`'s, and one name holds one agent.
    let runtime = Runtime::new().register(RefundDesk).register(agent.clone());
    let err = agent.ask(&runtime, "Refund E-1").await.unwrap_err();
    let run_id = err.run_id().unwrap();
    // The child completed before the batch failed; retried, the batch takes its result.
    let report = runtime.retry(&agent, run_id).await.unwrap();
    let reply = agent.reply_of(report);
    assert_eq!(reply.status, AgentStatus::Completed);
    assert_eq!(reply.text, "refunded 5 EUR on E-1 | up again");
}

#[tokio::test]
async fn a_message_to_a_run_another_driver_holds_is_queued_not_answered() {
    let model = ScriptedModel::new().text("Hello.");
    let agent = Agent::new(model, "m", ToolRegistry::new()).chat(true);
    let runtime = Runtime::new();
    let first = agent.ask(&runtime, "Hi").await.unwrap();
    // Another driver takes the run.
    runtime.store().claim(first.run_id, &loopstack_core::Claim::new([RunStatus::Waiting])).await.unwrap();
    let reply = agent.say(&runtime, first.run_id, "Are you there?").await.unwrap();
    assert!(matches!(reply.status, AgentStatus::Queued { .. }), "{:?}", reply.status);
}
