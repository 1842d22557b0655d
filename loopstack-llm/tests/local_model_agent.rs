//! The agent against a server that behaves like a small local model
//! (`common::local_model`): with the text-tool-call fallback and a system prompt it
//! calls the tool and answers, streamed or not, one call per city when asked about
//! two, and without a system prompt too; a model that repeats its call is stopped by
//! the loop guard; without the fallback the answer is a tool call written as text, and
//! says so.

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
async fn asked_about_two_cities_it_calls_once_for_each() {
    let server = local_model::start().await;
    let system = "You answer weather questions. Call get_weather once for each city, then answer in one sentence.";
    let reply =
        agent(&server.url(), true).system(system).ask(&Runtime::new(), "What is the weather in Paris and Rome?").await;
    let reply = reply.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    assert_eq!(reply.text, "The tool says: Sunny in Paris Sunny in Rome");
    assert_eq!((reply.turns, reply.tool_calls), (2, 2));
}

#[tokio::test]
async fn without_a_system_prompt_the_model_still_answers_from_the_result() {
    let server = local_model::start().await;
    let reply = agent(&server.url(), true).ask(&Runtime::new(), QUESTION).await.unwrap();
    assert_eq!((reply.status, reply.text.as_str()), (AgentStatus::Completed, "The tool says: Sunny in Oslo"));
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
async fn a_repeating_model_is_stopped() {
    let server = local_model::LocalModel::repeating().await;
    let agent = agent(&server.url(), true).limits(Limits::new().max_repeats(2).max_turns(20));
    let reply = agent.ask(&Runtime::new(), QUESTION).await.unwrap();
    assert_eq!(reply.status, AgentStatus::RepeatedToolCalls { tools: vec!["get_weather".into()], times: 4 });
    assert_eq!(reply.tool_calls, 3);
    // The calls went back as the text the model writes, each followed by its result.
    let bodies = server.requests();
    let last: Value = bodies.last().unwrap().clone();
    let messages = last["messages"].as_array().unwrap();
    let call = r#"{"name": "get_weather", "arguments": {"location":"Oslo"}}"#;
    let calls = messages.iter().filter(|m| m["role"] == "assistant" && m["content"] == call).count();
    let results = messages
        .iter()
        .filter(|m| m["role"] == "user" && m["content"] == format!("{call} returned: Sunny in Oslo"))
        .count();
    assert_eq!((calls, results), (3, 3), "{messages:#?}");
    assert!(messages.iter().all(|m| m.get("tool_calls").is_none() && m["role"] != "tool"), "{messages:#?}");
}

#[tokio::test]
async fn without_the_fallback_the_answer_is_an_unparsed_tool_call() {
    let server = local_model::start().await;
    let reply = agent(&server.url(), false).system(SYSTEM).ask(&Runtime::new(), QUESTION).await.unwrap();
    assert_eq!(reply.status, AgentStatus::UnparsedToolCall);
    assert_eq!(reply.tool_calls, 0);
}
