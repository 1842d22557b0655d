//! The agent against a server that behaves like a small local model
//! (`common::local_model`): with the text-tool-call fallback and a system prompt it
//! calls the tool and answers, streamed or not; without a system prompt the model
//! repeats its call and the loop guard stops it; without the fallback the answer is
//! a tool call written as text, and says so.

mod common;

use common::local_model;
use loopstack_core::{EventKind, Runtime, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use loopstack_llm::{Agent, AgentStatus, Limits, OpenAi};
use serde_json::{Value, json};

const QUESTION: &str = "What is the weather in Oslo?";
const SYSTEM: &str = "You answer weather questions. Call get_weather once, then answer.";

struct Weather;

#[async_trait::async_trait]
impl Tool for Weather {
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "Retrieve weather information."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]})
    }
    async fn call(&self, args: Value, _cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!("Sunny in {}", args["location"].as_str().unwrap_or("?"))))
    }
}

fn agent(url: &str, text_tool_calls: bool) -> Agent {
    let model = OpenAi::new().base_url(url).text_tool_calls(text_tool_calls);
    Agent::new(model, "qwen2.5-coder-1.5b", ToolRegistry::new().with(Weather).unwrap()).temperature(0.0)
}

#[tokio::test]
async fn with_the_fallback_and_a_system_prompt_the_tool_is_called_and_answered() {
    let server = local_model::start().await;
    let reply = agent(&server.url(), true).system(SYSTEM).ask(&Runtime::new(), QUESTION).await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    assert_eq!(reply.text, "The tool says: Sunny in Oslo");
    assert_eq!((reply.turns, reply.tool_calls), (2, 1));
}

#[tokio::test]
async fn streamed_the_answer_arrives_in_pieces_that_make_it_up() {
    let server = local_model::start().await;
    let runtime = Runtime::new();
    let mut events = runtime.subscribe();
    let reply = agent(&server.url(), true).system(SYSTEM).ask(&runtime, QUESTION).await.unwrap();
    let mut deltas = Vec::new();
    let mut tools = Vec::new();
    while let Some(event) = events.try_recv() {
        match &event.unwrap().kind {
            EventKind::TextDelta { text } => deltas.push(text.clone()),
            EventKind::ToolCallFinished { name, error, .. } => tools.push((name.clone(), error.clone())),
            _ => {}
        }
    }
    assert_eq!(tools, [("get_weather".to_owned(), None)]);
    assert!(deltas.len() > 2, "{deltas:?}");
    // The call the model wrote as text is never streamed as answer text.
    assert!(deltas.iter().all(|d| !d.contains("\"name\"") && !d.contains("get_weather")), "{deltas:?}");
    assert_eq!(deltas.concat(), reply.text, "{deltas:?}");
}

#[tokio::test]
async fn without_a_system_prompt_the_repeating_model_is_stopped() {
    let server = local_model::start().await;
    let agent = agent(&server.url(), true).limits(Limits::new().max_repeats(2).max_turns(20));
    let reply = agent.ask(&Runtime::new(), QUESTION).await.unwrap();
    assert_eq!(reply.status, AgentStatus::RepeatedToolCalls { tools: vec!["get_weather".into()], times: 4 });
    assert_eq!(reply.tool_calls, 3);
    // Every call id the fallback made is unique across the conversation.
    let bodies = server.requests();
    let last: Value = bodies.last().unwrap().clone();
    let mut ids: Vec<&str> =
        last["messages"].as_array().unwrap().iter().filter_map(|m| m["tool_call_id"].as_str()).collect();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "{ids:?}");
}

#[tokio::test]
async fn without_the_fallback_the_answer_is_an_unparsed_tool_call() {
    let server = local_model::start().await;
    let reply = agent(&server.url(), false).system(SYSTEM).ask(&Runtime::new(), QUESTION).await.unwrap();
    assert_eq!(reply.status, AgentStatus::UnparsedToolCall);
    assert_eq!(reply.tool_calls, 0);
}
