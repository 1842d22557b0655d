//! A tool call that asks a person for input (`ToolOutput::needs_input`): the agent's
//! run waits for the answer like an approval, on every store and across a restart
//! of its process, then runs the call again with the answer; the batch's other
//! calls are not run again, an answer that does not fit is refused, a refusal
//! reaches the tool as a decline.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loopstack::llm::{Agent, AgentStatus, ScriptedModel, ToolDecision, ToolDecisions};
use loopstack::prelude::*;
use loopstack::{InputRequest, InputResponse, Store};
use serde_json::{Value, json};

mod common;
use common::stores::on_every_store;

/// Refunds an order once a person confirms the amount.
struct Refund {
    calls: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Tool for Refund {
    fn name(&self) -> &str {
        "refund"
    }
    fn description(&self) -> &str {
        "Refunds an order, once a person confirms the amount."
    }
    fn input_schema(&self) -> Value {
        json!({ "type": "object", "properties": { "order": { "type": "string" } }, "required": ["order"] })
    }
    async fn call(&self, args: Value, cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let order = args["order"].as_str().unwrap_or_default().to_owned();
        let Some(answer) = cx.input() else {
            let schema = json!({
                "type": "object",
                "properties": { "amount": { "type": "integer", "minimum": 1 } },
                "required": ["amount"],
                "additionalProperties": false,
            });
            let request = InputRequest::new(format!("How much of order {order} is refunded, in EUR?"), schema)
                .state(json!({ "order": order }));
            return Ok(ToolOutput::needs_input(request));
        };
        // The state the first attempt kept comes back with the answer.
        assert_eq!(answer.request.state, json!({ "order": order }));
        Ok(match &answer.response {
            InputResponse::Accept(content) => {
                ToolOutput::text(format!("refunded {} EUR of {order}", content["amount"]))
            }
            _ => ToolOutput::text(format!("not refunded: the person declined ({order})")),
        })
    }
}

/// Looks an order up; counts its calls.
struct Lookup {
    calls: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Tool for Lookup {
    fn name(&self) -> &str {
        "lookup"
    }
    fn description(&self) -> &str {
        "Looks an order up."
    }
    fn input_schema(&self) -> Value {
        json!({ "type": "object" })
    }
    async fn call(&self, _args: Value, _cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutput::text("order A-17: 80 EUR, paid"))
    }
}

struct Counts {
    refund: Arc<AtomicUsize>,
    lookup: Arc<AtomicUsize>,
}

/// The agent: calls `lookup` and `refund` at once, then answers with what they said.
fn agent(counts: &Counts) -> Agent {
    let model = ScriptedModel::from_fn(|req| {
        let last = req.messages.last().unwrap();
        let results: Vec<String> = last.tool_results_iter().map(|r| r.content.clone()).collect();
        Ok(if results.is_empty() {
            let mut turn = ScriptedModel::new().tool_call_response("lookup", json!({}));
            let refund = ScriptedModel::new().tool_call_response("refund", json!({ "order": "A-17" }));
            turn.message.content.extend(refund.message.content);
            turn
        } else {
            ScriptedModel::new().text_response(results.join(" | "))
        })
    });
    let tools = ToolRegistry::new()
        .with(Refund { calls: counts.refund.clone() })
        .unwrap()
        .with(Lookup { calls: counts.lookup.clone() })
        .unwrap();
    Agent::new(model, "m", tools).named("refunds").unwrap()
}

async fn a_call_waits_for_input_and_runs_again_with_the_answer(store: Arc<dyn Store>) {
    let counts = Counts { refund: Arc::default(), lookup: Arc::default() };
    let refunds = agent(&counts);
    let runtime = Runtime::with_shared_store(store.clone()).register(refunds.clone());
    let reply = refunds.ask(&runtime, "Refund order A-17").await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = &reply.status else { panic!("{:?}", reply.status) };
    let [call] = calls.as_slice() else { panic!("{calls:?}") };
    let input = call.input.as_ref().expect("the call asks for input");
    assert_eq!((call.name.as_str(), input.message.as_str()), ("refund", "How much of order A-17 is refunded, in EUR?"));
    assert_eq!(input.schema["required"], json!(["amount"]));
    let run_id = reply.run_id;
    drop(runtime);

    // Another process takes the answer: the run waited in the store.
    let restarted = Runtime::with_shared_store(store.clone()).register(refunds.clone());
    let pending = refunds.pending(&restarted, run_id).await.unwrap();
    assert_eq!(pending[0].input.as_ref().unwrap().state, json!({ "order": "A-17" }));
    // An answer that does not fit is refused; the run still waits.
    let bad = ToolDecisions::new([ToolDecision::input(&call.call_id, json!({ "amount": "all of it" }))]);
    let refused = refunds.decide(&restarted, run_id, bad).await.unwrap_err();
    assert!(refused.to_string().contains("does not fit"), "{refused}");
    let good = ToolDecisions::new([ToolDecision::input(&call.call_id, json!({ "amount": 80 }))]);
    let reply = refunds.decide(&restarted, run_id, good).await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed, "{reply:?}");
    // Both results, in call order; the lookup ran once, the refund twice.
    assert_eq!(reply.text, "order A-17: 80 EUR, paid | refunded 80 EUR of A-17");
    assert_eq!((counts.lookup.load(Ordering::SeqCst), counts.refund.load(Ordering::SeqCst)), (1, 2));
}

on_every_store!(a_call_waits_for_input_and_runs_again_with_the_answer);

#[tokio::test]
async fn a_refusal_reaches_the_tool_as_a_decline() {
    let counts = Counts { refund: Arc::default(), lookup: Arc::default() };
    let refunds = agent(&counts);
    let runtime = Runtime::new().register(refunds.clone());
    let reply = refunds.ask(&runtime, "Refund order A-17").await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = &reply.status else { panic!("{:?}", reply.status) };
    let deny = ToolDecisions::new([ToolDecision::deny(&calls[0].call_id, "not today")]);
    let reply = refunds.decide(&runtime, reply.run_id, deny).await.unwrap();
    assert_eq!(reply.text, "order A-17: 80 EUR, paid | not refunded: the person declined (A-17)");
}

#[tokio::test]
async fn the_command_line_shows_the_question_and_answers_it() {
    use clap::Parser as _;
    use loopstack::cli::{Cli, execute};
    let counts = Counts { refund: Arc::default(), lookup: Arc::default() };
    let refunds = agent(&counts);
    let runtime = Runtime::new().register(refunds.clone());
    let reply = refunds.ask(&runtime, "Refund order A-17").await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = &reply.status else { panic!("{:?}", reply.status) };
    let (run, call) = (reply.run_id.to_string(), calls[0].call_id.clone());
    let cli = |args: &[&str]| Cli::try_parse_from([&["app"], args].concat()).unwrap();
    let shown = execute(&runtime, &cli(&["show", &run])).await.unwrap();
    assert!(
        shown.contains(&format!(
            "asks: How much of order A-17 is refunded, in EUR?; answer {{amount: integer}} (`answer {run} {call} JSON`)"
        )),
        "{shown}"
    );
    let refused = execute(&runtime, &cli(&["answer", &run, &call, r#"{"amount": 0}"#])).await.unwrap_err();
    assert!(refused.to_string().contains("does not fit"), "{refused}");
    let answered = execute(&runtime, &cli(&["answer", &run, &call, r#"{"amount": 80}"#, "--json"])).await.unwrap();
    let answered: Value = serde_json::from_str(&answered).unwrap();
    assert_eq!(answered["status"], "completed", "{answered}");
}

#[tokio::test]
async fn an_ag_ui_client_answers_the_question_as_an_interrupt() {
    use loopstack::serve::{ServeOptions, serve};
    let counts = Counts { refund: Arc::default(), lookup: Arc::default() };
    let runtime = Runtime::new().register(agent(&counts));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(serve(listener, runtime, ServeOptions::new()));
    let post = |body: Value| {
        let url = format!("http://{address}/ag-ui/refunds");
        async move {
            let client = loopstack_model::http::client_builder().build().unwrap();
            let text = client.post(url).json(&body).send().await.unwrap().text().await.unwrap();
            text.lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .map(|d| serde_json::from_str::<Value>(d).unwrap())
                .collect::<Vec<_>>()
        }
    };
    let user = json!([{ "id": "u1", "role": "user", "content": "Refund order A-17" }]);
    let events =
        post(json!({ "threadId": "t-input", "runId": "r1", "messages": user, "tools": [], "context": [] })).await;
    let finished = events.last().unwrap();
    assert_eq!(finished["outcome"]["type"], "interrupt", "{finished}");
    let interrupt = &finished["outcome"]["interrupts"][0];
    assert_eq!(interrupt["reason"], "input_required");
    assert_eq!(interrupt["message"], "How much of order A-17 is refunded, in EUR?");
    assert_eq!(interrupt["responseSchema"]["required"], json!(["amount"]));
    let resume = json!([{ "interruptId": interrupt["id"], "status": "resolved", "payload": { "amount": 80 } }]);
    let events = post(
        json!({ "threadId": "t-input", "runId": "r2", "messages": [], "resume": resume, "tools": [], "context": [] }),
    )
    .await;
    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "RUN_FINISHED", "{finished}");
    assert_eq!(finished["result"], "order A-17: 80 EUR, paid | refunded 80 EUR of A-17");
    server.abort();
}

#[tokio::test]
async fn an_a2a_client_answers_the_question_with_a_data_part() {
    use loopstack::serve::{ServeOptions, serve};
    let counts = Counts { refund: Arc::default(), lookup: Arc::default() };
    let runtime = Runtime::new().register(agent(&counts));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(serve(listener, runtime, ServeOptions::new()));
    let send = |message: Value| {
        let url = format!("http://{address}/a2a/refunds");
        async move {
            let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": { "message": message } });
            let client = loopstack_model::http::client_builder().build().unwrap();
            client.post(url).json(&body).send().await.unwrap().json::<Value>().await.unwrap()
        }
    };
    let asked =
        send(json!({ "messageId": "m1", "role": "ROLE_USER", "parts": [{ "text": "Refund order A-17" }] })).await;
    let task = &asked["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    let parts = &task["status"]["message"]["parts"];
    assert!(parts[0]["text"].as_str().unwrap().contains("How much of order A-17 is refunded"), "{parts}");
    assert_eq!(parts[1]["data"]["interrupts"][0]["responseSchema"]["required"], json!(["amount"]));
    let answer = json!({ "messageId": "m2", "taskId": task["id"], "role": "ROLE_USER", "parts": [{ "data": { "amount": 80 } }] });
    let done = send(answer).await;
    let task = &done["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "order A-17: 80 EUR, paid | refunded 80 EUR of A-17");
    server.abort();
}
