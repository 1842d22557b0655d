//! The OpenAI provider against a server that behaves like a small local model
//! (`common::local_model`): tool calls only as text, in the forms the real model writes,
//! their results sent back as text; a model that repeats its call for the guards.

mod common;

use std::sync::Arc;

use common::local_model::{self, CallStyle, LocalModel};
use common::tool_spec;
use futures::StreamExt as _;
use loopstack_core::ToolDefinition;
use loopstack_llm::{
    ChatModel, ChatRequest, ChatResponse, ContentBlock, LlmError, Message, OpenAi, StopReason, StreamEvent, ToolResult,
    ToolUse,
};
use serde_json::json;

const QUESTION: &str = "What is the weather in Oslo?";

fn weather() -> Arc<ToolDefinition> {
    tool_spec(
        "get_weather",
        "Retrieve weather information.",
        json!({
            "type": "object",
            "properties": {"location": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["location"],
        }),
    )
}

fn ask(system: Option<&str>) -> ChatRequest {
    let request = ChatRequest::new("qwen", vec![Message::user(QUESTION)]).tools(vec![weather()]);
    match system {
        Some(system) => request.system(system),
        None => request,
    }
}

fn oslo(id: &str) -> ToolUse {
    ToolUse::new(id, "get_weather", json!({"location": "Oslo"}))
}

/// Adds the reply and a result for each of its calls to the conversation.
fn answer_calls(request: &mut ChatRequest, reply: &ChatResponse) {
    request.messages.push(reply.message.clone().into());
    let results = reply.message.tool_uses().map(|call| ToolResult {
        tool_use_id: call.id.clone(),
        content: "Sunny, 14 degrees.".into(),
        is_error: false,
    });
    request.messages.push(Message::tool_results(results).into());
}

/// Collects a stream: its events before `Done`, and the response of `Done`.
async fn collect(model: &OpenAi, request: &ChatRequest) -> Result<(Vec<StreamEvent>, ChatResponse), LlmError> {
    let mut stream = model.stream(request);
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        match event? {
            StreamEvent::Done(response) => return Ok((events, response)),
            other => events.push(other),
        }
    }
    panic!("the stream ended without Done: {events:?}");
}

fn local(server: &LocalModel) -> OpenAi {
    OpenAi::new().base_url(server.url()).text_tool_calls(true)
}

#[tokio::test]
async fn with_a_system_prompt_the_text_call_is_parsed_then_the_model_answers() {
    let server = local_model::start().await;
    let model = local(&server);
    let mut request = ask(Some("You answer weather questions. Call get_weather once, then answer."));

    let first = model.chat(&request).await.unwrap();
    assert_eq!(first.stop_reason, StopReason::ToolUse);
    assert_eq!(first.message.content, vec![ContentBlock::ToolUse(oslo("call_0"))], "the fenced call, parsed");
    answer_calls(&mut request, &first);
    let second = model.chat(&request).await.unwrap();
    assert_eq!(second.stop_reason, StopReason::EndTurn);
    assert_eq!(second.message, Message::assistant("The tool says: Sunny, 14 degrees."));

    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0]["messages"][0], json!({"role": "system", "content": request.settings.system.clone().unwrap()}));
    // The call goes back as the model writes it, its result as a user message beside it:
    // rendered by the chat template as `tool_calls` and a `tool` message, the real model
    // asks for the same call again instead of answering.
    let call = r#"{"name": "get_weather", "arguments": {"location":"Oslo"}}"#;
    assert_eq!(sent[1]["messages"][2], json!({"role": "assistant", "content": call}));
    assert_eq!(
        sent[1]["messages"][3],
        json!({"role": "user", "content": format!("{call} returned: Sunny, 14 degrees.")})
    );
}

#[tokio::test]
async fn a_model_that_repeats_its_call_gets_a_new_id_each_time() {
    let server = LocalModel::repeating().await;
    let model = local(&server);
    let mut request = ask(None);
    let mut ids = Vec::new();
    for turn in 0..4 {
        let reply = model.chat(&request).await.unwrap();
        assert_eq!(reply.stop_reason, StopReason::ToolUse, "turn {turn}");
        let [ContentBlock::ToolUse(call)] = &reply.message.content[..] else { panic!("turn {turn}: {reply:?}") };
        assert_eq!((call.name.as_str(), &call.input), ("get_weather", &json!({"location": "Oslo"})), "turn {turn}");
        ids.push(call.id.clone());
        answer_calls(&mut request, &reply);
    }
    assert_eq!(ids, ["call_0", "call_1", "call_2", "call_3"]);
    // The server wrote the call with its outer braces doubled, as the real model does.
    let first = local_model::reply_text(&server.requests()[0], CallStyle::Observed);
    assert_eq!(first, r#"{{"name": "get_weather", "arguments": {"location": "Oslo"}}}"#);
    // The same request gets the same ids.
    let mut earlier = request.clone();
    earlier.messages.truncate(3);
    let again = model.chat(&earlier).await.unwrap();
    assert_eq!(again.message.tool_uses().next().unwrap().id, "call_1");
}

#[tokio::test]
async fn streamed_text_calls_equal_the_plain_replies_turn_after_turn() {
    let server = LocalModel::repeating().await;
    let model = local(&server);
    let mut request = ask(None);
    for (turn, id) in ["call_0", "call_1", "call_2"].into_iter().enumerate() {
        let chat = model.chat(&request).await.unwrap();
        let (events, streamed) = collect(&model, &request).await.unwrap();
        assert_eq!(streamed, chat, "turn {turn}");
        assert_eq!(streamed.message.content, vec![ContentBlock::ToolUse(oslo(id))], "turn {turn}");
        let starts: Vec<&StreamEvent> =
            events.iter().filter(|e| matches!(e, StreamEvent::ToolUseStart { .. })).collect();
        assert_eq!(
            starts,
            [&StreamEvent::ToolUseStart { index: 0, id: id.into(), name: "get_weather".into() }],
            "turn {turn}"
        );
        assert!(
            !events.iter().any(|e| matches!(e, StreamEvent::TextDelta { .. })),
            "a call written as text is not streamed as answer text"
        );
        answer_calls(&mut request, &streamed);
    }
}

#[tokio::test]
async fn each_call_style_is_parsed() {
    for style in [CallStyle::Observed, CallStyle::Fenced, CallStyle::DoubledBraces, CallStyle::Bare, CallStyle::Tagged]
    {
        let server = LocalModel::start_with(style).await;
        let reply = local(&server).chat(&ask(None)).await.unwrap();
        assert_eq!(reply.message.content, vec![ContentBlock::ToolUse(oslo("call_0"))], "{style:?}");
    }
}

#[tokio::test]
async fn with_text_tool_calls_off_the_json_stays_text() {
    let server = local_model::start().await;
    let model = OpenAi::new().base_url(server.url());
    let mut request = ask(None);

    let fenced = model.chat(&request).await.unwrap();
    assert_eq!(fenced.stop_reason, StopReason::EndTurn);
    assert_eq!(fenced.message.tool_uses().count(), 0);
    assert_eq!(fenced.message.text(), "{{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}}}");
    request.messages.push(fenced.message.clone().into());
    request.messages.push(Message::user("Well?").into());
    let again = model.chat(&request).await.unwrap();
    assert_eq!(again.message.text(), "{{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Well\"}}}");
    assert_eq!(again.message.tool_uses().count(), 0);
    let (_, streamed) = collect(&model, &ask(None)).await.unwrap();
    assert_eq!(streamed.message, fenced.message);
}

#[tokio::test]
async fn without_tools_the_model_just_answers() {
    let server = local_model::start().await;
    let reply = local(&server).chat(&ChatRequest::new("qwen", vec![Message::user("Hello")])).await.unwrap();
    assert_eq!((reply.message.text(), reply.stop_reason), ("You said: Hello".to_owned(), StopReason::EndTurn));
    assert_eq!(reply.model, "qwen");
    assert!(reply.usage.input_tokens > 0 && reply.usage.output_tokens > 0);
}
