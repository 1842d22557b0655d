//! The OpenAI Responses provider against a strict imitation of the API
//! (`loopstack_model::testing::imitation::responses_api`): the stateless reasoning round trip in a tool loop,
//! streaming, images, structured output, usage, and each class of error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use loopstack_model::testing::imitation::responses_api::{self, ResponsesApi, events, invalid};
use loopstack_model::testing::{Reply, Server};
use loopstack_model::{
    ChatModel, ChatRequest, ChatResponse, ContentBlock, Image, LlmError, Message, OpenAiResponses, Reasoning,
    ReasoningEffort, ResponseSchema, RetryPolicy, Role, StopReason, StreamEvent, ToolDefinition, ToolResult, Usage,
};
use serde_json::{Value, json};

const KEY: &str = "sk-test-responses";
const PROVIDER: &str = "openai-responses";

type Sleeps = Arc<Mutex<Vec<Duration>>>;

async fn imitation() -> (Server, ResponsesApi) {
    let api = ResponsesApi::openai(KEY);
    (Server::handle(api.clone().handler()).await, api)
}

fn model(server: &Server) -> (OpenAiResponses, Sleeps) {
    let sleeps = Sleeps::default();
    let recorder = sleeps.clone();
    let model = OpenAiResponses::new(KEY).base_url(server.url()).__sleep_with(move |d| {
        recorder.lock().unwrap().push(d);
        std::future::ready(())
    });
    (model, sleeps)
}

fn weather() -> Arc<ToolDefinition> {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false});
    Arc::new(ToolDefinition::new("get_weather", "The weather in a city.", schema))
}

fn ask_weather() -> ChatRequest {
    weather_turn(vec![Arc::new(Message::user("Weather in Oslo?"))])
}

/// A turn of the weather conversation with these messages.
fn weather_turn(messages: Vec<Arc<Message>>) -> ChatRequest {
    ChatRequest::new("gpt-5-mini", messages)
        .system("Be brief.")
        .tools(vec![weather()])
        .reasoning_effort(ReasoningEffort::Low)
}

/// The events of a stream and its final response.
async fn collect(model: &OpenAiResponses, request: &ChatRequest) -> Result<(Vec<StreamEvent>, ChatResponse), LlmError> {
    let mut stream = model.stream(request);
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        match event? {
            StreamEvent::Done(response) => return Ok((events, response)),
            other => events.push(other),
        }
    }
    panic!("the stream ended without Done: {events:?}")
}

/// The text of each kind of delta, by block index.
fn deltas(events: &[StreamEvent]) -> (String, String, String) {
    let (mut text, mut reasoning, mut json) = (String::new(), String::new(), String::new());
    for event in events {
        match event {
            StreamEvent::TextDelta { text: t, .. } => text.push_str(t),
            StreamEvent::ReasoningDelta { text: t, .. } => reasoning.push_str(t),
            StreamEvent::ToolInputDelta { partial_json, .. } => json.push_str(partial_json),
            _ => {}
        }
    }
    (text, reasoning, json)
}

fn results(call: &str, content: &str) -> Message {
    Message::tool_results([ToolResult { tool_use_id: call.into(), content: content.into(), is_error: false }])
}

#[tokio::test]
async fn a_tool_loop_sends_each_reasoning_item_back_before_its_call() {
    let (server, _) = imitation().await;
    let (model, _) = model(&server);
    assert_eq!(model.provider(), PROVIDER);
    let first = model.chat(&ask_weather()).await.unwrap();
    assert_eq!(first.stop_reason, StopReason::ToolUse);
    assert_eq!((first.id.as_deref(), first.model.as_str()), (Some("resp_1"), "gpt-5-mini-2025-08-07"));
    let [ContentBlock::Reasoning(reasoning), ContentBlock::ToolUse(call)] = &first.message.content[..] else {
        panic!("{:?}", first.message.content)
    };
    assert_eq!(reasoning.provider, PROVIDER);
    assert_eq!(reasoning.text, "**Turn 1**\n\nRead the question.\n\nDecide what to do.");
    assert_eq!(
        reasoning.data,
        json!({"id": "rs_1", "encrypted_content": "gAAAAB-secret-1", "summary": [
            {"type": "summary_text", "text": "**Turn 1**\n\nRead the question."},
            {"type": "summary_text", "text": "Decide what to do."},
        ]})
    );
    assert_eq!(
        (call.id.as_str(), call.name.as_str(), &call.input),
        ("call_1", "get_weather", &json!({"city": "Oslo"}))
    );
    assert_eq!(first.usage.reasoning_output_tokens, 12);

    // The first request: stateless, asking for the encrypted reasoning.
    let sent = &server.requests()[0];
    assert_eq!(sent.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(sent.body["store"], false);
    assert_eq!(sent.body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(sent.body["reasoning"], json!({"effort": "low", "summary": "auto"}));
    assert_eq!(sent.body["instructions"], "Be brief.");
    assert_eq!(
        sent.body["tools"],
        json!([{"type": "function", "name": "get_weather", "description": "The weather in a city.",
                "parameters": weather().input_schema, "strict": true}])
    );

    // The second turn: the imitation refuses it unless the reasoning item comes back,
    // unchanged, before its call.
    let mut conversation = ask_weather().messages;
    conversation.push(Arc::new(first.message.clone()));
    conversation.push(Arc::new(results("call_1", "sunny, 21 °C")));
    let second = weather_turn(conversation.clone());
    let answer = model.chat(&second).await.unwrap();
    assert_eq!(answer.message.text(), "The weather: sunny, 21 °C.");
    assert_eq!(answer.stop_reason, StopReason::EndTurn);
    let sent = &server.requests()[1].body["input"];
    let kinds: Vec<&str> = sent.as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["message", "reasoning", "function_call", "function_call_output"]);
    assert_eq!(
        sent[1],
        json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAAB-secret-1", "summary": reasoning.data["summary"]})
    );
    assert_eq!(
        sent[2],
        json!({"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"})
    );
    assert_eq!(sent[3], json!({"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 °C"}));

    // A third turn carries both reasoning items, each in its place.
    conversation.push(Arc::new(answer.message.clone()));
    conversation.push(Arc::new(Message::user("And in Rome?")));
    let third = model.chat(&weather_turn(conversation)).await.unwrap();
    assert_eq!(third.message.tool_uses().next().unwrap().id, "call_3");
    let sent = &server.requests()[2].body["input"];
    let kinds: Vec<&str> = sent.as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["message", "reasoning", "function_call", "function_call_output", "reasoning", "message", "message"]
    );
    assert_eq!(sent[4]["id"], "rs_2");

    // Without the reasoning item the imitation refuses the turn, as the API does.
    let mut stripped = first.message.clone();
    stripped.content.retain(|b| !matches!(b, ContentBlock::Reasoning(_)));
    let bare = weather_turn(vec![
        Arc::new(Message::user("Weather in Oslo?")),
        Arc::new(stripped),
        Arc::new(results("call_1", "sunny")),
    ]);
    let err = model.chat(&bare).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::InvalidRequest { provider: PROVIDER, status: 400, message, .. }
            if message.contains("without its required 'reasoning' item: 'rs_1'")),
        "{err:?}"
    );
}

#[tokio::test]
async fn streaming_equals_the_plain_reply() {
    let (server, _) = imitation().await;
    let (model, _) = model(&server);
    // The tool call with its reasoning.
    let plain = model.chat(&ask_weather()).await.unwrap();
    let (events, streamed) = collect(&model, &ask_weather()).await.unwrap();
    assert_eq!(server.requests()[1].body["stream"], true);
    // The ids differ per response; all else is equal.
    assert_eq!(streamed.message.content.len(), plain.message.content.len());
    assert_eq!((streamed.stop_reason.clone(), streamed.usage), (plain.stop_reason.clone(), plain.usage));
    let (text, reasoning, json) = deltas(&events);
    assert_eq!((text.as_str(), json.as_str()), ("", "{\"city\":\"Oslo\"}"));
    assert_eq!(reasoning, streamed.message.reasoning_text());
    assert!(matches!(&events[0], StreamEvent::ReasoningDelta { index: 0, .. }), "{events:?}");
    assert!(events.contains(&StreamEvent::ToolUseStart { index: 1, id: "call_2".into(), name: "get_weather".into() }));
    let ContentBlock::Reasoning(r) = &streamed.message.content[0] else { panic!() };
    assert_eq!(r.data["encrypted_content"], "gAAAAB-secret-2");

    // A plain answer, streamed in odd pieces, equals the plain one exactly.
    let hello = ChatRequest::new("gpt-5-mini", vec![Message::user("Hi")]);
    let plain = model.chat(&hello).await.unwrap();
    let (events, streamed) = collect(&model, &hello).await.unwrap();
    assert_eq!(deltas(&events).0, plain.message.text());
    assert_eq!(streamed.message, plain.message);
    assert_eq!((streamed.stop_reason, streamed.usage), (plain.stop_reason, plain.usage));
    assert!(events.iter().all(|e| matches!(e, StreamEvent::TextDelta { index: 0, .. })), "{events:?}");
}

#[tokio::test]
async fn other_providers_reasoning_is_left_out() {
    let (server, _) = imitation().await;
    let (model, _) = model(&server);
    let foreign = |provider: &str| {
        ContentBlock::Reasoning(Reasoning::new(
            provider,
            "hm",
            json!({"id": "rs_x", "encrypted_content": "zzz", "summary": []}),
        ))
    };
    let earlier = Message {
        role: Role::Assistant,
        content: vec![
            foreign("anthropic"),
            foreign("azure-responses"),
            foreign("openai"),
            ContentBlock::text("Hello."),
        ],
    };
    let request = ChatRequest::new("gpt-5-mini", vec![Message::user("Hi"), earlier, Message::user("Bye")]);
    model.chat(&request).await.unwrap();
    let input = &server.requests()[0].body["input"];
    assert!(input.as_array().unwrap().iter().all(|i| i["type"] != "reasoning"), "{input}");
    assert_eq!(input[1], json!({"type": "message", "role": "assistant", "content": "Hello."}));
}

#[tokio::test]
async fn images_are_input_images() {
    let (server, _) = imitation().await;
    let (model, _) = model(&server);
    let png = Image::base64("image/png", "iVBORw0KGgoAAAANSUhEUg==").unwrap();
    let url = Image::url("https://example.com/cat.jpg").unwrap();
    let request = ChatRequest::new("gpt-5-mini", vec![Message::user_with_images("What is this?", [png, url])]);
    let reply = model.chat(&request).await.unwrap();
    assert_eq!(reply.message.text(), "I see 2 images.");
    assert_eq!(
        server.requests()[0].body["input"][0]["content"],
        json!([
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==", "detail": "auto"},
            {"type": "input_image", "image_url": "https://example.com/cat.jpg", "detail": "auto"},
        ])
    );
    // A tool's image follows its result, in a user message naming the call.
    let call = Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse(loopstack_model::ToolUse::new("c1", "get_weather", json!({})))],
    };
    let mut result = results("c1", "a chart");
    result.content.push(ContentBlock::Image {
        source: Image::url("https://example.com/chart.png").unwrap(),
        tool_use_id: Some("c1".into()),
    });
    let request = ChatRequest::new("gpt-5-mini", vec![Message::user("Chart?"), call, result]);
    model.chat(&request).await.unwrap();
    let input = &server.requests()[1].body["input"];
    assert_eq!(input[2], json!({"type": "function_call_output", "call_id": "c1", "output": "a chart"}));
    assert_eq!(
        input[3]["content"][1],
        json!({"type": "input_image", "image_url": "https://example.com/chart.png", "detail": "auto"})
    );
}

#[tokio::test]
async fn structured_output_is_a_json_schema_text_format() {
    let (server, _) = imitation().await;
    let (model, _) = model(&server);
    assert!(ChatModel::structured_output(&model));
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "celsius": {"type": "integer"}},
                        "required": ["city", "celsius"], "additionalProperties": false});
    let request = ChatRequest::new("gpt-5-mini", vec![Message::user("Weather in Oslo, as JSON")])
        .response_schema(ResponseSchema::new("weather", schema.clone()));
    let reply = model.chat(&request).await.unwrap();
    let value: Value = serde_json::from_str(&reply.message.text()).unwrap();
    assert_eq!(value, json!({"city": "Oslo", "celsius": 21}));
    assert_eq!(
        server.requests()[0].body["text"],
        json!({"format": {"type": "json_schema", "name": "weather", "schema": schema, "strict": true}})
    );
    let off = model.structured_output(false);
    assert!(!ChatModel::structured_output(&off));
    off.chat(&request).await.unwrap();
    assert_eq!(server.requests()[1].body.get("text"), None);
}

#[tokio::test]
async fn usage_counts_cached_and_reasoning_tokens_and_limits_stop_as_max_tokens() {
    let (server, _) = imitation().await;
    let (model, _) = model(&server);
    let request = ChatRequest::new("gpt-5-mini", vec![Message::user("Hi")])
        .prompt_cache_key("tenant-7")
        .reasoning_effort(ReasoningEffort::Medium)
        .max_tokens(40)
        .temperature(0.5)
        .stop_sequences(["END"]);
    let reply = model.chat(&request).await.unwrap();
    // 120 input tokens of which 64 cached; 42 output of which 12 reasoning.
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 56,
            output_tokens: 42,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 64,
            reasoning_output_tokens: 12
        }
    );
    assert_eq!(reply.stop_reason, StopReason::MaxTokens);
    let (_, streamed) = collect(&model, &request).await.unwrap();
    assert_eq!((streamed.usage, streamed.stop_reason), (reply.usage, StopReason::MaxTokens));
    let body = &server.requests()[0].body;
    assert_eq!(
        (body["prompt_cache_key"].clone(), body["max_output_tokens"].clone(), body["temperature"].clone()),
        (json!("tenant-7"), json!(40), json!(0.5))
    );
    assert_eq!(body.get("stop"), None, "the API has no stop sequences");
}

#[tokio::test]
async fn provider_options_are_merged_under_the_providers_name() {
    let (server, _) = imitation().await;
    let (model, _) = model(&server);
    let request = ChatRequest::new("gpt-5-mini", vec![Message::user("Hi")])
        .provider_options(PROVIDER, json!({"service_tier": "flex", "store": true}))
        .provider_options("openai", json!({"bogus": 1}));
    model.chat(&request).await.unwrap();
    let body = &server.requests()[0].body;
    assert_eq!((body["service_tier"].clone(), body["store"].clone()), (json!("flex"), json!(true)));
    // An unknown parameter is the API's 400, with its message, not retried.
    let bad = ChatRequest::new("gpt-5-mini", vec![Message::user("Hi")]).provider_options(PROVIDER, json!({"bogus": 1}));
    let err = model.chat(&bad).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::InvalidRequest { provider: PROVIDER, status: 400, message, .. } if message == "Unknown parameter: 'bogus'."),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 2);
    let not_object = ChatRequest::new("gpt-5-mini", vec![Message::user("Hi")]).provider_options(PROVIDER, json!(3));
    assert!(matches!(model.chat(&not_object).await, Err(LlmError::Config { provider: PROVIDER, .. })));
}

#[tokio::test]
async fn a_wrong_key_is_an_authentication_error_and_not_retried() {
    let (server, _) = imitation().await;
    let model = OpenAiResponses::new("sk-wrong").base_url(server.url());
    let err = model.chat(&ask_weather()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Authentication { provider: PROVIDER, status: 401, message, .. } if message == "Incorrect API key provided."),
        "{err:?}"
    );
    assert!(!err.to_string().contains("sk-wrong"));
    let err = collect(&model, &ask_weather()).await.unwrap_err();
    assert!(matches!(err, LlmError::Authentication { .. }));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn rate_limits_honour_retry_after() {
    let (server, api) = imitation().await;
    let (model, sleeps) = model(&server);
    let limited = json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "param": null, "code": "rate_limit_exceeded"}});
    api.fault(Reply::json(429, limited.clone()).header("retry-after", "2"));
    let reply = model.chat(&ask_weather()).await.unwrap();
    assert_eq!(reply.stop_reason, StopReason::ToolUse);
    assert_eq!(*sleeps.lock().unwrap(), [Duration::from_secs(2)]);
    // When the retries run out: the typed error, with the wait the server asked for.
    let once = model.retry_policy(RetryPolicy::new().max_retries(1));
    api.fault(Reply::json(429, limited.clone()).header("retry-after", "1"));
    api.fault(Reply::json(429, limited).header("retry-after", "1"));
    let err = once.chat(&ask_weather()).await.unwrap_err();
    assert!(
        matches!(err, LlmError::RateLimited { provider: PROVIDER, retry_after: Some(d), .. } if d == Duration::from_secs(1)),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn server_errors_are_retried_for_plain_and_streamed_calls() {
    let (server, api) = imitation().await;
    let (model, sleeps) = model(&server);
    let error = |m: &str| json!({"error": {"message": m, "type": "server_error", "param": null, "code": null}});
    api.fault(Reply::json(500, error("The server had an error")));
    api.fault(Reply::json(503, error("Overloaded")));
    assert_eq!(model.chat(&ask_weather()).await.unwrap().stop_reason, StopReason::ToolUse);
    api.fault(Reply::json(503, error("Overloaded")));
    let (_, streamed) = collect(&model, &ask_weather()).await.unwrap();
    assert_eq!(streamed.stop_reason, StopReason::ToolUse);
    assert_eq!(sleeps.lock().unwrap().len(), 3);
    assert_eq!(server.requests().len(), 5);
    let none = model.retry_policy(RetryPolicy::disabled());
    api.fault(Reply::json(500, error("The server had an error")));
    assert!(matches!(none.chat(&ask_weather()).await, Err(LlmError::Server { provider: PROVIDER, status: 500, .. })));
}

#[tokio::test]
async fn a_malformed_body_is_a_malformed_response_and_not_retried() {
    let (server, api) = imitation().await;
    let (model, _) = model(&server);
    api.fault(Reply::raw(200, "application/json", "{\"id\": \"resp_1\", \"output\": [tru"));
    let err = model.chat(&ask_weather()).await.unwrap_err();
    assert!(matches!(err, LlmError::MalformedResponse { provider: PROVIDER, .. }), "{err:?}");
    api.fault(Reply::json(
        200,
        json!({"id": "resp_1", "object": "response", "status": "completed",
        "output": [{"type": "function_call", "id": "fc_1", "name": "get_weather", "arguments": "{}"}]}),
    ));
    let err = model.chat(&ask_weather()).await.unwrap_err();
    assert!(matches!(&err, LlmError::MalformedResponse { message, .. } if message.contains("call_id")), "{err:?}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_cut_stream_is_an_error() {
    let (server, api) = imitation().await;
    let (model, _) = model(&server);
    // The whole answer's events but its last: the body ends before `response.completed`.
    let answer = json!({"id": "resp_9", "object": "response", "status": "completed", "model": "gpt-5-mini", "output": [
        {"type": "message", "id": "msg_9", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "Hello there", "annotations": []}]}]});
    let full = events(&answer);
    let cut = &full[..full.rfind("event: response.completed").unwrap()];
    api.fault(Reply::sse(cut));
    let request = ask_weather();
    let mut stream = model.stream(&request);
    let mut text = String::new();
    let err = loop {
        match stream.next().await.unwrap() {
            Ok(StreamEvent::TextDelta { text: t, .. }) => text.push_str(&t),
            Ok(StreamEvent::Done(r)) => panic!("a cut stream is not done: {r:?}"),
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert_eq!(text, "Hello there", "the text before the cut is streamed");
    assert!(
        matches!(&err, LlmError::MalformedResponse { message, .. } if message.contains("response.completed")),
        "{err:?}"
    );
    // Cut inside the body (the connection closes early): a connection error.
    api.fault(Reply::sse(cut).truncated());
    let err = collect(&model, &ask_weather()).await.unwrap_err();
    assert!(
        matches!(err, LlmError::Connection { provider: PROVIDER, .. } | LlmError::MalformedResponse { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_failed_response_is_its_typed_error() {
    let (server, api) = imitation().await;
    let (model, _) = model(&server);
    let failed = |code: &str| {
        json!({"type": "response.failed", "response": {"id": "resp_f", "object": "response", "status": "failed", "output": [],
               "error": {"code": code, "message": format!("failed: {code}")}}})
    };
    api.fault(Reply::sse(responses_api::sse(&[failed("server_error")])));
    let err = collect(&model, &ask_weather()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Server { provider: PROVIDER, status: 500, message, .. } if message == "failed: server_error"),
        "{err:?}"
    );
    api.fault(Reply::sse(responses_api::sse(&[failed("invalid_prompt")])));
    assert!(matches!(collect(&model, &ask_weather()).await, Err(LlmError::InvalidRequest { status: 400, .. })));
    let error = json!({"type": "error", "code": "rate_limit_exceeded", "message": "Too many requests", "param": null});
    api.fault(Reply::sse(responses_api::sse(&[error])));
    assert!(matches!(collect(&model, &ask_weather()).await, Err(LlmError::RateLimited { provider: PROVIDER, .. })));
    // A plain response that failed, and an error object sent with a 200 (retried as
    // the status they stand for, so not here).
    let once = OpenAiResponses::new(KEY).base_url(server.url()).retry_policy(RetryPolicy::disabled());
    api.fault(Reply::json(200, failed("rate_limit_exceeded")["response"].clone()));
    assert!(matches!(once.chat(&ask_weather()).await, Err(LlmError::RateLimited { .. })));
    api.fault(Reply::json(
        200,
        json!({"error": {"message": "bad", "type": "invalid_request_error", "param": null, "code": null}}),
    ));
    assert!(matches!(once.chat(&ask_weather()).await, Err(LlmError::InvalidRequest { status: 400, .. })));
    // A JSON error where events were asked for.
    api.fault(invalid("Invalid 'input[0]'.", Some("input[0]"), None));
    assert!(matches!(collect(&model, &ask_weather()).await, Err(LlmError::InvalidRequest { status: 400, .. })));
}
