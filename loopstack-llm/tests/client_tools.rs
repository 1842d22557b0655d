//! Tools a client declares and answers itself (a frontend's): offered to the model
//! with the run's input, their calls wait durably for the client's result like calls
//! to approve, and are never run by the agent.

use loopstack_core::{Runtime, ToolRegistry};
use loopstack_llm::agent::{AgentInput, ClientTool, UserMessage};
use loopstack_llm::{Agent, AgentSignal, AgentStatus, ChatRequest, ScriptedModel, ToolDecision, ToolDecisions};
use serde_json::json;

mod common;

use common::weather::Weather;

fn confirm() -> ClientTool {
    ClientTool::new(
        "confirm",
        "Asks the user to confirm a booking.",
        json!({"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]}),
    )
}

/// Calls `tool` first, then answers with the result it reads.
fn model(tool: &'static str) -> ScriptedModel {
    ScriptedModel::from_fn(move |req: &ChatRequest| {
        let last = req.messages.last().unwrap();
        Ok(match last.tool_results_iter().next() {
            Some(result) => ScriptedModel::new().text_response(format!("Read: {}", result.content)),
            None => {
                ScriptedModel::new().tool_call_response(tool, json!({"what": "a table for two", "location": "Oslo"}))
            }
        })
    })
    .record_requests(true)
}

#[tokio::test]
async fn a_client_tool_is_offered_and_its_call_waits_for_the_clients_result() {
    let model = model("confirm");
    let agent = Agent::new(model.clone(), "m", ToolRegistry::new().with(Weather::default()).unwrap());
    let runtime = Runtime::new();
    let input = AgentInput::new("Book a table").client_tools([confirm()]);
    let reply = agent.reply_of(runtime.start(&agent, input).await.unwrap());

    // Offered beside the agent's own tools, with its schema.
    let offered: Vec<String> = model.requests()[0].tools.iter().map(|t| t.name.clone()).collect();
    assert_eq!(offered, ["get_weather", "confirm"]);
    assert_eq!(model.requests()[0].tools[1].input_schema, confirm().parameters);
    // Its call waits, marked as the client's.
    let AgentStatus::AwaitingApproval { calls } = reply.status else { panic!("{:?}", reply.status) };
    assert_eq!((calls.len(), calls[0].name.as_str(), calls[0].client), (1, "confirm", true));
    assert_eq!(calls[0].arguments["what"], "a table for two");

    // The client's result is the call's result.
    let decisions = ToolDecisions::new([ToolDecision::result(&calls[0].call_id, "confirmed")]);
    let done = agent.decide(&runtime, reply.run_id, decisions).await.unwrap();
    assert_eq!((done.status, done.text.as_str()), (AgentStatus::Completed, "Read: confirmed"));
    // Answered, never run by the agent.
    assert_eq!(done.tool_calls, 0);
}

#[tokio::test]
async fn a_client_call_approved_without_a_result_is_answered_with_an_error() {
    let agent = Agent::new(model("confirm"), "m", ToolRegistry::new());
    let runtime = Runtime::new();
    let reply = agent.reply_of(runtime.start(&agent, AgentInput::new("Book").client_tools([confirm()])).await.unwrap());
    let AgentStatus::AwaitingApproval { calls } = reply.status else { panic!("{:?}", reply.status) };
    let done = agent.decide(&runtime, reply.run_id, ToolDecisions::approve_all(&calls)).await.unwrap();
    assert_eq!(done.text, "Read: the client gave no result for its tool `confirm`");
}

#[tokio::test]
async fn the_agents_own_tool_keeps_a_name_a_client_tool_also_has() {
    let model = model("get_weather");
    let weather = Weather::default();
    let agent = Agent::new(model.clone(), "m", ToolRegistry::new().with(weather.clone()).unwrap());
    let shadow = ClientTool::new("get_weather", "The client's weather.", json!({"type": "object"}));
    let reply =
        agent.reply_of(Runtime::new().start(&agent, AgentInput::new("Weather?").client_tools([shadow])).await.unwrap());
    // Offered once (the agent's), run by the agent: nothing waits.
    assert_eq!(model.requests()[0].tools.len(), 1);
    assert_eq!(reply.status, AgentStatus::Completed);
    assert_eq!(weather.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_chat_message_replaces_the_client_tools() {
    let model = ScriptedModel::new().text("Hello.").tool_call("confirm", json!({"what": "x"})).record_requests(true);
    let agent = Agent::new(model.clone(), "m", ToolRegistry::new()).chat(true);
    let runtime = Runtime::new();
    let reply = agent.reply_of(runtime.start(&agent, AgentInput::new("Hi")).await.unwrap());
    assert_eq!(reply.status, AgentStatus::AwaitingUser);
    assert!(model.requests()[0].tools.is_empty());

    let mut message = UserMessage::new("Book it");
    message.client_tools = Some(vec![confirm()]);
    let reply = agent.reply_of(runtime.signal(&agent, reply.run_id, AgentSignal::UserMessage(message)).await.unwrap());
    assert_eq!(model.requests()[1].tools[0].name, "confirm");
    let AgentStatus::AwaitingApproval { calls } = reply.status else { panic!("{:?}", reply.status) };
    assert!(calls[0].client);
}

#[test]
fn the_input_reads_as_a_prompt_or_with_client_tools() {
    let prompt: AgentInput = serde_json::from_value(json!("Hi")).unwrap();
    assert_eq!((prompt.prompt.as_str(), prompt.client_tools.len()), ("Hi", 0));
    assert_eq!(serde_json::to_value(&prompt).unwrap(), json!("Hi"));
    let full = AgentInput::new("Hi").client_tools([confirm()]);
    let written = serde_json::to_value(&full).unwrap();
    assert_eq!(written["client_tools"][0]["name"], "confirm");
    assert_eq!(serde_json::from_value::<AgentInput>(written).unwrap(), full);
    // An unknown field is an error, not ignored.
    assert!(serde_json::from_value::<AgentInput>(json!({"prompt": "Hi", "tools": []})).is_err());
}
