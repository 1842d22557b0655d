//! Hostile model replies: tool arguments nested deep enough to overflow a stack (from
//! a local server, plain, streamed and written as text), arguments that are not an
//! object, tool calls with an `end_turn` stop, repeated call ids, absurd usage. A bad
//! call ends in an error result the model reads; the run goes on and the process lives.

mod common;

use std::time::Duration;

use common::{Reply, Server, anthropic_sse, openai_sse, recorded_sleeps};
use futures::StreamExt as _;
use loopstack_core::{RunContext, Runtime, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use loopstack_llm::{
    Agent, AgentStatus, Anthropic, ChatModel, ChatRequest, ChatResponse, ContentBlock, LlmDelegateToolCalls, LlmError,
    Message, OpenAi, Role, ScriptedModel, StopReason, StreamEvent, ToolUse, Usage,
};
use serde_json::{Value, json};

/// A guard against a hang: the streams below end long before it. It only turns a
/// stream that never ends into a failure instead of a hung test.
const HANG_GUARD: Duration = Duration::from_secs(60);

fn claude(server: &Server) -> Anthropic {
    let (_, hook) = recorded_sleeps();
    Anthropic::new("sk-ant-test").base_url(server.url()).__sleep_with(hook)
}

fn gpt(server: &Server) -> OpenAi {
    let (_, hook) = recorded_sleeps();
    OpenAi::new().base_url(server.url()).__sleep_with(hook)
}

fn hello(model: &str) -> ChatRequest {
    ChatRequest::new(model, vec![Message::user("Hello")])
}

/// Every item of a stream, the hang guard around it.
async fn items(model: &dyn ChatModel, request: &ChatRequest) -> Vec<Result<StreamEvent, LlmError>> {
    tokio::time::timeout(HANG_GUARD, model.stream(request).collect::<Vec<_>>()).await.expect("the stream never ended")
}

// ---------------------------------------------------------------------------------------
// Deeply nested tool arguments

/// `{"location": [[...["Oslo"]...]]}` with `depth` levels in all.
fn nested_arguments(depth: usize) -> String {
    let arrays = depth - 1;
    format!(r#"{{"location": {}"Oslo"{}}}"#, "[".repeat(arrays), "]".repeat(arrays))
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Location {
    /// City or location name
    #[allow(dead_code)]
    location: Value,
}

/// A weather tool taking any JSON as its location.
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
        loopstack_core::tool_input_schema::<Location>()
    }
    async fn call(&self, args: Value, _cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let _: Location = loopstack_core::parse_tool_arguments(self.name(), args)?;
        Ok(ToolOutput::text("Mostly sunny."))
    }
}

fn tools() -> ToolRegistry {
    ToolRegistry::new().with(Weather).unwrap()
}

fn assert_depth_error(content: &str) {
    assert!(content.contains("nested more than 64 levels deep"), "{content}");
    assert!(content.starts_with("the arguments of this call to `get_weather` "), "{content}");
}

#[tokio::test]
async fn deep_arguments_from_anthropic_are_error_results_and_the_run_goes_on() {
    let deep = |depth| serde_json::value::RawValue::from_string(nested_arguments(depth)).unwrap();
    let content = format!(
        r#"[{{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}},
            {{"type": "tool_use", "id": "t2", "name": "get_weather", "input": {}}},
            {{"type": "tool_use", "id": "t3", "name": "get_weather", "input": {}}}]"#,
        deep(20_000),
        deep(100),
        deep(64),
    );
    let reply = format!(
        r#"{{"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "content": {content},
            "stop_reason": "tool_use", "usage": {{"input_tokens": 1, "output_tokens": 1}}}}"#
    );
    let answer = json!({"id": "msg_2", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn", "usage": {}});
    let server = Server::start(vec![Reply::raw(200, "application/json", reply), Reply::json(200, answer)]).await;
    let agent = Agent::new(claude(&server), "claude-test", tools());
    let runtime = Runtime::new();
    let reply = agent.ask(&runtime, "Weather?").await.unwrap();
    assert_eq!(reply.text, "Done.");

    let sent = &server.requests()[1].body["messages"];
    let calls = &sent[1]["content"];
    assert_eq!(calls[0]["input"], json!({}), "arguments that were refused are sent back empty");
    assert_eq!(calls[1]["input"], json!({}));
    let results = &sent[2]["content"];
    assert_depth_error(results[0]["content"].as_str().unwrap());
    assert_depth_error(results[1]["content"].as_str().unwrap());
    assert_eq!((results[0]["is_error"].clone(), results[1]["is_error"].clone()), (json!(true), json!(true)));
    assert_eq!(
        results[2],
        // The newest block carries the default prompt-cache breakpoint.
        json!({"type": "tool_result", "tool_use_id": "t3", "content": "Mostly sunny.", "is_error": false,
               "cache_control": {"type": "ephemeral"}})
    );

    // The stored conversation reads back.
    let docs = runtime.store().documents(reply.run_id).await.unwrap();
    let messages: Vec<Message> = docs.iter().map(|d| d.read().unwrap()).collect();
    let stored = messages[1].tool_uses().next().unwrap().invalid_input.clone().unwrap();
    assert!(stored.raw.len() < 2_000, "the refused text is kept shortened");
    assert!(stored.raw.starts_with(r#"{"location": [[["#));
}

#[tokio::test]
async fn deep_arguments_from_openai_are_error_results_and_the_run_goes_on() {
    let message = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": nested_arguments(20_000)}},
        {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": nested_arguments(100)}},
        {"id": "c3", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Oslo\"}"}},
    ]});
    // Arguments as an object, as some local servers send them, nested 100 levels.
    let object_call = format!(
        r#"{{"choices": [{{"index": 0, "finish_reason": "tool_calls", "message": {{"role": "assistant", "content": null,
            "tool_calls": [{{"id": "c4", "type": "function", "function": {{"name": "get_weather", "arguments": {}}}}}]}}}}]}}"#,
        nested_arguments(100)
    );
    let reply =
        |message: Value, finish: &str| json!({"choices": [{"index": 0, "message": message, "finish_reason": finish}]});
    let server = Server::start(vec![
        Reply::json(200, reply(message, "tool_calls")),
        Reply::raw(200, "application/json", object_call),
        Reply::json(200, reply(json!({"role": "assistant", "content": "Done."}), "stop")),
    ])
    .await;
    let agent = Agent::new(gpt(&server), "gpt-test", tools());
    let reply = agent.ask(&Runtime::new(), "Weather?").await.unwrap();
    assert_eq!(reply.text, "Done.");

    let requests = server.requests();
    let sent = requests[1].body["messages"].as_array().unwrap();
    let results: Vec<&str> =
        sent.iter().filter(|m| m["role"] == "tool").map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(results.len(), 3);
    assert_depth_error(results[0].strip_prefix("Error: ").unwrap());
    assert_depth_error(results[1].strip_prefix("Error: ").unwrap());
    assert_eq!(results[2], "Mostly sunny.");
    let last = requests[2].body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["tool_call_id"], "c4");
    assert_depth_error(last["content"].as_str().unwrap().strip_prefix("Error: ").unwrap());
}

#[tokio::test]
async fn deep_arguments_in_streams_and_text_tool_calls_are_refused() {
    let fragments = |args: &str| -> Vec<String> {
        args.as_bytes().chunks(1000).map(|c| String::from_utf8(c.to_vec()).unwrap()).collect()
    };
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}}),
    ];
    for piece in fragments(&nested_arguments(20_000)) {
        events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": piece}}));
    }
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}}));
    events.push(json!({"type": "message_stop"}));
    let server = Server::start(vec![Reply::sse(anthropic_sse(&events))]).await;
    let all = items(&claude(&server), &hello("claude-test")).await;
    let Some(Ok(StreamEvent::Done(response))) = all.last() else { panic!("{:?}", all.last()) };
    assert_refused(response, 1);

    let mut chunks = vec![json!({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]})];
    for piece in fragments(&nested_arguments(100)) {
        chunks.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}}]}));
    }
    chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}));
    let server = Server::start(vec![Reply::sse(openai_sse(&chunks))]).await;
    let all = items(&gpt(&server), &hello("gpt-test")).await;
    let Some(Ok(StreamEvent::Done(response))) = all.last() else { panic!("{:?}", all.last()) };
    assert_refused(response, 1);

    // Tool calls written as text, by small local models.
    let text = |depth| format!(r#"{{"name": "get_weather", "arguments": {}}}"#, nested_arguments(depth));
    let reply = |text: String| json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]});
    let server = Server::start(vec![
        Reply::json(200, reply(text(20_000))),
        Reply::json(200, reply(format!("[{}, {}]", text(100), text(2)))),
    ])
    .await;
    let model = gpt(&server).text_tool_calls(true);
    let spec = tools().spec("get_weather").unwrap().definition.clone();
    let request = hello("gpt-test").tools(vec![spec]);
    assert_refused(&model.chat(&request).await.unwrap(), 1);
    let response = model.chat(&request).await.unwrap();
    assert_refused(&response, 2);
    assert_eq!(response.message.tool_uses().nth(1).unwrap().input, json!({"location": ["Oslo"]}));
}

/// The first call of `response` was refused for its depth; it has `calls` calls.
fn assert_refused(response: &ChatResponse, calls: usize) {
    let uses: Vec<_> = response.message.tool_uses().collect();
    assert_eq!(uses.len(), calls, "{response:?}");
    let invalid = uses[0].invalid_input.as_ref().expect("refused");
    assert!(invalid.error.contains("nested more than 64 levels deep"), "{}", invalid.error);
    assert_eq!(uses[0].input, Value::Null);
    assert!(invalid.raw.len() < 2_000);
}

// ---------------------------------------------------------------------------------------
// Model replies, scripted

fn calls_reply(text: &str, calls: Vec<ToolUse>, stop: StopReason) -> ChatResponse {
    let mut content = vec![ContentBlock::text(text)];
    content.extend(calls.into_iter().map(ContentBlock::ToolUse));
    ChatResponse::new(Message { role: Role::Assistant, content }, stop, Usage::new(5, 5), "m-1")
}

fn oslo(id: &str) -> ToolUse {
    ToolUse::new(id, "get_weather", json!({"location": "Oslo"}))
}

/// The results the model was sent in request `n`, as `(id, is_error, content)`.
fn results_sent(model: &ScriptedModel, n: usize) -> Vec<(String, bool, String)> {
    let request = &model.requests()[n];
    let last = request.messages.last().unwrap();
    last.tool_results_iter().map(|r| (r.tool_use_id.clone(), r.is_error, r.content.clone())).collect()
}

#[tokio::test]
async fn tool_calls_that_come_with_end_turn_are_run_and_the_run_goes_on() {
    // Anthropic may stop with `end_turn` after tool_use blocks; a reply cut at
    // `max_tokens` may hold calls too. Their calls must be answered either way.
    let model = ScriptedModel::new()
        .reply(calls_reply("Let me check.", vec![oslo("c1")], StopReason::EndTurn))
        .reply(calls_reply("", vec![oslo("c2")], StopReason::MaxTokens))
        .reply(calls_reply("Sunny in Oslo.", vec![], StopReason::EndTurn));
    let runtime = Runtime::new();
    let reply = Agent::new(model.clone(), "m-1", tools()).ask(&runtime, "Weather?").await.unwrap();
    assert_eq!((reply.text.as_str(), reply.status, reply.turns), ("Sunny in Oslo.", AgentStatus::Completed, 3));
    assert_eq!(results_sent(&model, 1), [("c1".to_owned(), false, "Mostly sunny.".to_owned())]);
    assert_eq!(results_sent(&model, 2), [("c2".to_owned(), false, "Mostly sunny.".to_owned())]);
    model.assert_finished();

    // Every call in the stored conversation has its result.
    let docs = runtime.store().documents(reply.run_id).await.unwrap();
    let messages: Vec<Message> = docs.iter().map(|d| d.read().unwrap()).collect();
    let calls: Vec<&str> = messages.iter().flat_map(|m| m.tool_uses()).map(|t| t.id.as_str()).collect();
    let results: Vec<&str> =
        messages.iter().flat_map(|m| m.tool_results_iter()).map(|r| r.tool_use_id.as_str()).collect();
    assert_eq!((calls, results), (vec!["c1", "c2"], vec!["c1", "c2"]));
}

#[tokio::test]
async fn arguments_that_are_not_an_object_get_an_error_result_in_the_models_terms() {
    let call = |id: &str, input: Value| ToolUse::new(id, "get_weather", input);
    let model = ScriptedModel::new()
        .reply(calls_reply(
            "",
            vec![
                call("null", Value::Null),
                call("number", json!(3)),
                call("string", json!("Oslo")),
                call("array", json!(["Oslo"])),
                call("bool", json!(true)),
                ToolUse::from_raw_arguments("raw_array", "get_weather", r#"["Oslo"]"#),
                oslo("object"),
            ],
            StopReason::ToolUse,
        ))
        .reply(calls_reply("Done.", vec![], StopReason::EndTurn));
    let reply = Agent::new(model.clone(), "m-1", tools()).ask(&Runtime::new(), "Weather?").await.unwrap();
    assert_eq!(reply.text, "Done.");
    let refused = |kind: &str| {
        format!(
            "the arguments of this call to `get_weather` must be a JSON object of its parameters, not {kind}; \
             call the tool again with a JSON object"
        )
    };
    let want = [
        ("null", true, refused("null")),
        ("number", true, refused("a number")),
        ("string", true, refused("a string")),
        ("array", true, refused("an array")),
        ("bool", true, refused("a boolean")),
        ("raw_array", true, refused("an array")),
        ("object", false, "Mostly sunny.".to_owned()),
    ];
    let want: Vec<(String, bool, String)> = want.into_iter().map(|(id, e, c)| (id.to_owned(), e, c)).collect();
    assert_eq!(results_sent(&model, 1), want);
}

#[tokio::test]
async fn repeated_tool_call_ids_are_renamed_so_each_call_has_its_own_result() {
    let rome = ToolUse::new("dup", "get_weather", json!({"location": "Rome"}));
    let model = ScriptedModel::new()
        .reply(calls_reply("", vec![oslo("dup"), rome, oslo("dup_dup2"), oslo("dup")], StopReason::ToolUse))
        .reply(calls_reply("Done.", vec![], StopReason::EndTurn));
    let runtime = Runtime::new();
    let reply = Agent::new(model.clone(), "m-1", tools()).ask(&runtime, "Weather?").await.unwrap();
    assert_eq!(reply.text, "Done.");
    // The later duplicates got new ids, in the stored message as in the results.
    let ids = ["dup", "dup_dup3", "dup_dup2", "dup_dup4"];
    let sent = &model.requests()[1].messages;
    assert_eq!(sent[1].tool_uses().map(|t| t.id.as_str()).collect::<Vec<_>>(), ids);
    let results = results_sent(&model, 1);
    assert_eq!(results.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ids);
    assert!(results.iter().all(|r| !r.1), "every call ran: {results:?}");
    let docs = runtime.store().documents(reply.run_id).await.unwrap();
    let stored: Message = docs[1].read().unwrap();
    assert_eq!(stored.tool_uses().map(|t| t.id.as_str()).collect::<Vec<_>>(), ids);
}

#[tokio::test]
async fn the_delegate_answers_a_repeated_id_with_one_error_result_under_a_new_id() {
    // A message that did not come through LlmGenerateText, with a repeated id.
    let message = Message {
        role: Role::Assistant,
        content: vec![
            ContentBlock::ToolUse(oslo("a")),
            ContentBlock::ToolUse(oslo("a")),
            ContentBlock::ToolUse(oslo("b")),
        ],
    };
    let delegate = LlmDelegateToolCalls::new(tools());
    let mut cx = RunContext::detached("test");
    let result = delegate.call(&mut cx, &message, &["get_weather".to_owned()]).await.unwrap();
    let got: Vec<(&str, bool)> = result.results.iter().map(|r| (r.tool_use_id.as_str(), r.is_error)).collect();
    assert_eq!(got, [("a", false), ("a_dup2", true), ("b", false)]);
    assert_eq!(
        result.results[1].content,
        "this call to `get_weather` was not run: its id `a` is the id of an earlier call in the same message, \
         and every call needs an id of its own"
    );
    assert_eq!((result.error_count, result.all_completed), (1, true));
}

#[tokio::test]
async fn usage_saturates_instead_of_overflowing() {
    let huge = Usage {
        input_tokens: u64::MAX - 1,
        output_tokens: u64::MAX,
        cache_creation_input_tokens: u64::MAX / 2 + 1,
        cache_read_input_tokens: 1,
        reasoning_output_tokens: u64::MAX,
    };
    let sum = huge + huge;
    assert_eq!(
        sum,
        Usage {
            input_tokens: u64::MAX,
            output_tokens: u64::MAX,
            cache_creation_input_tokens: u64::MAX,
            cache_read_input_tokens: 2,
            reasoning_output_tokens: u64::MAX,
        }
    );
    assert_eq!(huge.total(), u64::MAX);
    let mut acc = Usage::new(1, 1);
    acc += huge;
    assert_eq!((acc.input_tokens, acc.output_tokens), (u64::MAX, u64::MAX));

    // Summed over a run, and by the scripted model.
    let model = ScriptedModel::new()
        .usage(Usage::new(u64::MAX, u64::MAX - 7))
        .tool_call("get_weather", json!({"location": "Oslo"}))
        .text("Sunny.");
    let reply = Agent::new(model.clone(), "m-1", tools()).ask(&Runtime::new(), "Weather?").await.unwrap();
    assert_eq!(reply.usage, Usage::new(u64::MAX, u64::MAX));
    assert_eq!(model.total_usage(), Usage::new(u64::MAX, u64::MAX));
}
