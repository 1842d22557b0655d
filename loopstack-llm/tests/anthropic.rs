//! The Anthropic provider against a local scripted server.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Reply, Server, anthropic_sse, recorded_sleeps, tool_spec};
use futures::StreamExt as _;
use loopstack_llm::model::ResponseSchema;
use loopstack_llm::{
    Agent, Anthropic, ChatModel, ChatRequest, ChatResponse, ContentBlock, LlmError, Message, PromptCache, Reasoning,
    RetryPolicy, Role, StopReason, StreamEvent, ToolResult, ToolUse, Usage,
};
use serde_json::{Value, json};

const KEY: &str = "sk-ant-test-secret-key";

/// A model for `server` whose retry delays are recorded instead of slept.
fn claude(server: &Server) -> (Anthropic, Arc<Mutex<Vec<Duration>>>) {
    let (sleeps, hook) = recorded_sleeps();
    (Anthropic::new(KEY).base_url(server.url()).__sleep_with(hook), sleeps)
}

fn hello() -> ChatRequest {
    ChatRequest::new("claude-test", vec![Message::user("Hello")])
}

fn text_reply() -> Value {
    json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test-2025",
        "content": [{"type": "text", "text": "Bonjour ! ☀️ Il fait beau."}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": 9, "cache_creation_input_tokens": 2, "cache_read_input_tokens": 5},
    })
}

fn text_stream() -> String {
    anthropic_sse(&[
        json!({"type": "message_start", "message": {
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test-2025", "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 1, "cache_creation_input_tokens": 2, "cache_read_input_tokens": 5},
        }}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Bonjour ! "}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "☀️ Il fait"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " beau."}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 9}}),
        json!({"type": "message_stop"}),
    ])
}

fn tools_reply() -> Value {
    json!({
        "id": "msg_02", "type": "message", "role": "assistant", "model": "claude-test-2025",
        "content": [
            {"type": "thinking", "thinking": "Two cities: two calls.", "signature": "c2lnbmF0dXJl"},
            {"type": "text", "text": "Checking both."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_02", "name": "get_weather", "input": {"city": "Zürich", "units": ["°C"]}},
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 40, "output_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    })
}

fn tools_stream() -> String {
    let delta = |index: u32, delta: Value| json!({"type": "content_block_delta", "index": index, "delta": delta});
    anthropic_sse(&[
        json!({"type": "message_start", "message": {
            "id": "msg_02", "type": "message", "role": "assistant", "model": "claude-test-2025", "content": [],
            "stop_reason": null, "usage": {"input_tokens": 40, "output_tokens": 1},
        }}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        delta(0, json!({"type": "thinking_delta", "thinking": "Two cities: "})),
        delta(0, json!({"type": "thinking_delta", "thinking": "two calls."})),
        delta(0, json!({"type": "signature_delta", "signature": "c2lnbmF0dXJl"})),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        delta(1, json!({"type": "text_delta", "text": "Checking both."})),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {}}}),
        delta(2, json!({"type": "input_json_delta", "partial_json": ""})),
        delta(2, json!({"type": "input_json_delta", "partial_json": "{\"city\": \"Pa"})),
        delta(2, json!({"type": "input_json_delta", "partial_json": "ris\"}"})),
        json!({"type": "content_block_stop", "index": 2}),
        json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_02", "name": "get_weather", "input": {}}}),
        delta(3, json!({"type": "input_json_delta", "partial_json": "{\"city\": \"Zü"})),
        delta(3, json!({"type": "input_json_delta", "partial_json": "rich\", \"units\": [\"°C\"]}"})),
        json!({"type": "content_block_stop", "index": 3}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
        json!({"type": "message_stop"}),
    ])
}

/// Collects a stream: its events before `Done`, and the response of `Done`.
async fn collect(model: &Anthropic, request: &ChatRequest) -> Result<(Vec<StreamEvent>, ChatResponse), LlmError> {
    let mut stream = model.stream(request);
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        match event? {
            StreamEvent::Done(response) => {
                assert!(stream.next().await.is_none(), "nothing follows Done");
                return Ok((events, response));
            }
            other => events.push(other),
        }
    }
    panic!("the stream ended without Done: {events:?}");
}

#[tokio::test]
async fn encodes_the_request_body_and_headers() {
    let server = Server::start(vec![Reply::json(200, text_reply())]).await;
    let (model, _) = claude(&server);
    let weather = tool_spec(
        "get_weather",
        "Gets the weather of a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    );
    let thinking = json!({"type": "thinking", "thinking": "Use the tool.", "signature": "sig"});
    let request = ChatRequest::new(
        "claude-test",
        vec![
            Message::user("Weather in Paris and Rome?"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Provider { provider: "anthropic".into(), raw: thinking.clone() },
                    ContentBlock::Provider { provider: "openai".into(), raw: json!({"type": "reasoning"}) },
                    ContentBlock::ToolUse(ToolUse::new("toolu_1", "get_weather", json!({"city": "Paris"}))),
                    ContentBlock::ToolUse(ToolUse::new("toolu_2", "get_weather", json!({"city": "Rome"}))),
                ],
            },
            Message::tool_results([
                ToolResult { tool_use_id: "toolu_1".into(), content: "sunny, 21 °C".into(), is_error: false },
                ToolResult { tool_use_id: "toolu_2".into(), content: "service unavailable".into(), is_error: true },
            ]),
        ],
    )
    .system("You are terse.")
    .tools(vec![weather])
    .temperature(0.5)
    .stop_sequences(["\n\nHuman:"])
    .prompt_cache(PromptCache::Off);
    model.chat(&request).await.unwrap();

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!((sent.method.as_str(), sent.path.as_str()), ("POST", "/v1/messages"));
    assert_eq!(sent.header("x-api-key"), Some(KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(
        sent.body,
        json!({
            "model": "claude-test",
            "max_tokens": 4096,
            "system": "You are terse.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
                {"role": "assistant", "content": [
                    thinking,
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21 °C", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "service unavailable", "is_error": true},
                ]},
            ],
            "tools": [{
                "name": "get_weather",
                "description": "Gets the weather of a city.",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }],
            "temperature": 0.5,
            "stop_sequences": ["\n\nHuman:"],
        })
    );
}

#[tokio::test]
async fn max_tokens_comes_from_the_request_or_the_model_default() {
    let server = Server::start(vec![Reply::json(200, text_reply()), Reply::json(200, text_reply())]).await;
    let (model, _) = claude(&server);
    let model = model.default_max_tokens(1000);
    model.chat(&hello()).await.unwrap();
    model.chat(&hello().max_tokens(77)).await.unwrap();
    let requests = server.requests();
    assert_eq!(requests[0].body["max_tokens"], 1000);
    assert_eq!(requests[1].body["max_tokens"], 77);
    assert_eq!(requests[0].body.get("stream"), None);
}

#[tokio::test]
async fn there_is_no_structured_output_and_a_response_schema_is_not_sent() {
    let server = Server::start(vec![Reply::json(200, text_reply())]).await;
    let (model, _) = claude(&server);
    assert!(!model.structured_output());
    let schema = ResponseSchema::new("answer", json!({"type": "object"}));
    model.chat(&hello().response_schema(schema).prompt_cache(PromptCache::Off)).await.unwrap();
    let body = &server.requests()[0].body;
    assert_eq!((body.get("response_format"), body.get("output_format")), (None, None));
    assert_eq!(body["messages"], json!([{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]));
}

#[tokio::test]
async fn decodes_a_plain_reply() {
    let server = Server::start(vec![Reply::json(200, text_reply())]).await;
    let (model, _) = claude(&server);
    let response = model.chat(&hello()).await.unwrap();
    assert_eq!(response.message, Message::assistant("Bonjour ! ☀️ Il fait beau."));
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 12,
            output_tokens: 9,
            cache_creation_input_tokens: 2,
            cache_read_input_tokens: 5,
            ..Usage::default()
        }
    );
    assert_eq!(response.model, "claude-test-2025");
    assert_eq!(response.id.as_deref(), Some("msg_01"));
}

#[tokio::test]
async fn decodes_thinking_and_parallel_tool_calls() {
    let server = Server::start(vec![Reply::json(200, tools_reply())]).await;
    let (model, _) = claude(&server);
    let response = model.chat(&hello()).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.message.content,
        vec![
            ContentBlock::Reasoning(Reasoning::new(
                "anthropic",
                "Two cities: two calls.",
                json!({"signature": "c2lnbmF0dXJl"})
            )),
            ContentBlock::text("Checking both."),
            ContentBlock::ToolUse(ToolUse::new("toolu_01", "get_weather", json!({"city": "Paris"}))),
            ContentBlock::ToolUse(ToolUse::new("toolu_02", "get_weather", json!({"city": "Zürich", "units": ["°C"]}))),
        ]
    );
}

#[tokio::test]
async fn a_streamed_text_reply_equals_the_plain_reply() {
    let server = Server::start(vec![Reply::json(200, text_reply()), Reply::sse(text_stream())]).await;
    let (model, _) = claude(&server);
    let chat = model.chat(&hello()).await.unwrap();
    let (events, streamed) = collect(&model, &hello()).await.unwrap();
    assert_eq!(streamed, chat);
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta { index: 0, text: "Bonjour ! ".into() },
            StreamEvent::TextDelta { index: 0, text: "☀️ Il fait".into() },
            StreamEvent::TextDelta { index: 0, text: " beau.".into() },
        ]
    );
    let sent = &server.requests()[1];
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.header("accept"), Some("text/event-stream"));
}

#[tokio::test]
async fn a_streamed_tool_reply_split_at_odd_byte_boundaries_equals_the_plain_reply() {
    let server = Server::start(vec![
        Reply::json(200, tools_reply()),
        Reply::sse(tools_stream()).pieces(&[1, 2, 3]),
        Reply::sse(tools_stream()).pieces(&[7, 1, 13, 2]),
    ])
    .await;
    let (model, _) = claude(&server);
    let chat = model.chat(&hello()).await.unwrap();
    let (events, streamed) = collect(&model, &hello()).await.unwrap();
    assert_eq!(streamed, chat);
    assert_eq!(
        events,
        vec![
            StreamEvent::ReasoningDelta { index: 0, text: "Two cities: ".into() },
            StreamEvent::ReasoningDelta { index: 0, text: "two calls.".into() },
            StreamEvent::TextDelta { index: 1, text: "Checking both.".into() },
            StreamEvent::ToolUseStart { index: 2, id: "toolu_01".into(), name: "get_weather".into() },
            StreamEvent::ToolInputDelta { index: 2, partial_json: "{\"city\": \"Pa".into() },
            StreamEvent::ToolInputDelta { index: 2, partial_json: "ris\"}".into() },
            StreamEvent::ToolUseStart { index: 3, id: "toolu_02".into(), name: "get_weather".into() },
            StreamEvent::ToolInputDelta { index: 3, partial_json: "{\"city\": \"Zü".into() },
            StreamEvent::ToolInputDelta { index: 3, partial_json: "rich\", \"units\": [\"°C\"]}".into() },
        ]
    );
    let (_, again) = collect(&model, &hello()).await.unwrap();
    assert_eq!(again, chat);
}

#[tokio::test]
async fn unauthorized_is_an_authentication_error_and_not_retried() {
    let body = json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}});
    let server = Server::start(vec![Reply::json(401, body)]).await;
    let (model, sleeps) = claude(&server);
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Authentication { provider: "anthropic", model, status: 401, message }
            if model == "claude-test" && message == "invalid x-api-key"),
        "{err:?}"
    );
    assert!(!err.to_string().contains(KEY));
    assert_eq!(server.requests().len(), 1);
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn bad_request_carries_the_api_message() {
    let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: must be at least 1"}});
    let server = Server::start(vec![Reply::json(400, body)]).await;
    let (model, _) = claude(&server);
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::InvalidRequest { status: 400, message, .. } if message == "max_tokens: must be at least 1"),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn not_found_is_not_retried() {
    let body = json!({"type": "error", "error": {"type": "not_found_error", "message": "model: claude-nope"}});
    let server = Server::start(vec![Reply::json(404, body), Reply::json(200, text_reply())]).await;
    let (model, sleeps) = claude(&server);
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(matches!(&err, LlmError::InvalidRequest { status: 404, message, .. } if message == "model: claude-nope"));
    assert_eq!(server.requests().len(), 1);
    assert_eq!(server.unused_replies(), 1);
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn rate_limits_honour_retry_after_then_succeed() {
    let limited = json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}});
    let server = Server::start(vec![
        Reply::json(429, limited.clone()).header("retry-after", "7"),
        Reply::json(429, limited).header("retry-after", "30").header("retry-after-ms", "1500"),
        Reply::json(200, text_reply()),
    ])
    .await;
    let (model, sleeps) = claude(&server);
    let response = model.chat(&hello()).await.unwrap();
    assert_eq!(response.message.text(), "Bonjour ! ☀️ Il fait beau.");
    assert_eq!(*sleeps.lock().unwrap(), vec![Duration::from_secs(7), Duration::from_millis(1500)]);
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn overloaded_and_server_errors_are_retried_with_backoff() {
    let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let server = Server::start(vec![
        Reply::json(529, overloaded),
        Reply::json(500, json!({"type": "error", "error": {"type": "api_error", "message": "Internal"}})),
        Reply::raw(503, "text/html", "<html>upstream down</html>"),
        Reply::json(200, text_reply()),
    ])
    .await;
    let (model, sleeps) = claude(&server);
    model.chat(&hello()).await.unwrap();
    let sleeps = sleeps.lock().unwrap().clone();
    assert_eq!(sleeps.len(), 3);
    let policy = RetryPolicy::default();
    for (retry, delay) in sleeps.iter().enumerate() {
        let base = policy.backoff(retry as u32);
        assert!(*delay <= base && *delay >= base.mul_f64(0.75), "retry {retry}: {delay:?} for a backoff of {base:?}");
    }
    let bodies: Vec<Value> = server.requests().into_iter().map(|r| r.body).collect();
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "every attempt sends the same body");
}

#[tokio::test]
async fn exhausted_retries_return_the_typed_error() {
    let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let server = Server::start(vec![Reply::json(529, overloaded); 5]).await;
    let (model, sleeps) = claude(&server);
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Overloaded { provider: "anthropic", message, .. } if message == "Overloaded"),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert_eq!(server.requests().len(), 4, "one attempt and 3 retries");
    assert_eq!(sleeps.lock().unwrap().len(), 3);

    let server = Server::start(vec![Reply::json(500, json!({})); 3]).await;
    let (model, _) = claude(&server);
    let model = model.retry_policy(RetryPolicy::new().max_retries(1));
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(matches!(err, LlmError::Server { status: 500, .. }), "{err:?}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_dropped_connection_is_retried() {
    let server = Server::start(vec![Reply::close(), Reply::json(200, text_reply())]).await;
    let (model, sleeps) = claude(&server);
    let response = model.chat(&hello()).await.unwrap();
    assert_eq!(response.id.as_deref(), Some("msg_01"));
    assert_eq!(server.requests().len(), 2);
    assert_eq!(sleeps.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_body_cut_off_after_success_is_not_sent_again() {
    // The server answered 200 (and billed the call): retrying would pay for it twice.
    let server = Server::start(vec![Reply::json(200, text_reply()).truncated(), Reply::json(200, text_reply())]).await;
    let (model, sleeps) = claude(&server);
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(matches!(&err, LlmError::Connection { provider: "anthropic", .. }), "{err:?}");
    assert_eq!(server.requests().len(), 1);
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_refused_connection_is_a_connection_error_after_the_retries() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let (sleeps, hook) = recorded_sleeps();
    let model = Anthropic::new(KEY).base_url(format!("http://{addr}")).__sleep_with(hook);
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Connection { provider: "anthropic", model, .. } if model == "claude-test"),
        "{err:?}"
    );
    assert_eq!(sleeps.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_stalled_server_times_out_without_retry() {
    let server = Server::start(vec![Reply::stall(), Reply::json(200, text_reply())]).await;
    let (model, sleeps) = claude(&server);
    let model = model.timeout(Duration::from_millis(200));
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Timeout { provider: "anthropic", after, .. } if *after == Duration::from_millis(200)),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_stream_that_goes_silent_times_out() {
    let start = anthropic_sse(&[json!({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {}}})]);
    let server = Server::start(vec![Reply::sse(start).then_hang()]).await;
    let (model, _) = claude(&server);
    let model = model.timeout(Duration::from_millis(200));
    let err = collect(&model, &hello()).await.unwrap_err();
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
}

#[tokio::test]
async fn malformed_replies_are_malformed_response_errors() {
    let server = Server::start(vec![
        Reply::raw(200, "application/json", "{\"id\": \"msg\", \"content\": [tru"),
        Reply::json(200, json!({"id": "msg", "model": "m", "stop_reason": "end_turn"})),
        Reply::sse("event: message_start\ndata: {not json}\n\n"),
    ])
    .await;
    let (model, _) = claude(&server);
    for _ in 0..2 {
        let err = model.chat(&hello()).await.unwrap_err();
        assert!(
            matches!(&err, LlmError::MalformedResponse { provider: "anthropic", model, .. } if model == "claude-test"),
            "{err:?}"
        );
    }
    let err = collect(&model, &hello()).await.unwrap_err();
    assert!(matches!(err, LlmError::MalformedResponse { .. }), "{err:?}");
    assert_eq!(server.requests().len(), 3, "malformed replies are not retried");
}

#[tokio::test]
async fn an_error_event_mid_stream_ends_the_stream() {
    let stream = |kind: &str| {
        anthropic_sse(&[
            json!({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {"input_tokens": 3}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hal"}}),
            json!({"type": "error", "error": {"type": kind, "message": "it broke"}}),
        ])
    };
    let server = Server::start(vec![Reply::sse(stream("api_error")), Reply::sse(stream("overloaded_error"))]).await;
    let (model, sleeps) = claude(&server);
    let request = hello();
    let items: Vec<_> = model.stream(&request).collect().await;
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].as_ref().unwrap(), &StreamEvent::TextDelta { index: 0, text: "Hal".into() });
    assert!(matches!(&items[1], Err(LlmError::Server { status: 500, message, .. }) if message == "it broke"));
    let err = collect(&model, &request).await.unwrap_err();
    assert!(matches!(err, LlmError::Overloaded { .. }), "{err:?}");
    assert_eq!(server.requests().len(), 2, "a started stream is not retried");
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_stream_is_retried_before_it_starts() {
    let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let server = Server::start(vec![Reply::json(529, overloaded), Reply::sse(text_stream())]).await;
    let (model, sleeps) = claude(&server);
    let (_, response) = collect(&model, &hello()).await.unwrap();
    assert_eq!(response.message.text(), "Bonjour ! ☀️ Il fait beau.");
    assert_eq!(sleeps.lock().unwrap().len(), 1);

    let server = Server::start(vec![Reply::json(401, json!({"error": {"message": "no"}}))]).await;
    let (model, _) = claude(&server);
    let err = collect(&model, &hello()).await.unwrap_err();
    assert!(matches!(err, LlmError::Authentication { .. }), "{err:?}");
}

#[tokio::test]
async fn the_base_url_may_end_in_v1() {
    for suffix in ["", "/", "/v1", "/v1/"] {
        let server = Server::start(vec![Reply::json(200, text_reply())]).await;
        let model = Anthropic::new(KEY).base_url(format!("{}{suffix}", server.url()));
        model.chat(&hello()).await.unwrap();
        assert_eq!(server.requests()[0].path, "/v1/messages", "base ending in {suffix:?}");
    }
    let err = Anthropic::new(KEY).base_url("not a url").chat(&hello()).await.unwrap_err();
    assert!(matches!(err, LlmError::Config { provider: "anthropic", .. }), "{err:?}");
}

#[tokio::test]
async fn the_key_never_shows_in_debug_output() {
    let model = Anthropic::new(KEY)
        .base_url("http://127.0.0.1:1")
        .timeout(Duration::from_secs(5))
        .retry_policy(RetryPolicy::disabled());
    let debug = format!("{model:?} {model:#?}");
    assert!(!debug.contains(KEY) && !debug.contains("secret"), "{debug}");
    assert!(debug.contains("<redacted>") && debug.contains("http://127.0.0.1:1"), "{debug}");
    assert_eq!(model.provider(), "anthropic");
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(!format!("{err} {err:?}").contains(KEY));
}

/// A tool reply calling `get_weather` for `city`, as the API sends it.
fn weather_call(id: &str, city: &str) -> Value {
    json!({
        "id": format!("msg_{id}"), "type": "message", "role": "assistant", "model": "claude-test-2025",
        "content": [{"type": "tool_use", "id": id, "name": "get_weather", "input": {"city": city}}],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 40, "output_tokens": 30},
    })
}

/// `body` without its `cache_control` markers, which are not part of the cached text.
fn unmarked(mut body: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.remove("cache_control");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut body);
    body
}

/// The indices of the messages with a breakpoint on one of their blocks.
fn marked_messages(body: &Value) -> Vec<usize> {
    let messages = body["messages"].as_array().unwrap();
    (0..messages.len())
        .filter(|&i| messages[i]["content"].as_array().unwrap().iter().any(|b| b.get("cache_control").is_some()))
        .collect()
}

#[tokio::test]
async fn an_agent_marks_the_stable_prefix_so_each_turn_reads_the_one_before_from_the_cache() {
    struct Weather;
    #[async_trait::async_trait]
    impl loopstack_core::Tool for Weather {
        fn name(&self) -> &str {
            "get_weather"
        }
        fn description(&self) -> &str {
            "Gets the weather of a city."
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
        }
        async fn call(
            &self,
            args: Value,
            _: &loopstack_core::ToolContext,
        ) -> Result<loopstack_core::ToolOutput, loopstack_core::ToolError> {
            Ok(loopstack_core::ToolOutput::text(format!("sunny in {}", args["city"])))
        }
    }
    let replies = vec![
        Reply::json(200, weather_call("toolu_1", "Paris")),
        Reply::json(200, weather_call("toolu_2", "Rome")),
        Reply::json(200, text_reply()),
    ];
    let server = Server::start(replies).await;
    let (model, _) = claude(&server);
    let tools = loopstack_core::ToolRegistry::new().with(Weather).unwrap();
    let agent = Agent::new(model, "claude-test", tools).system("You are terse.");
    agent.ask(&loopstack_core::Runtime::new(), "Paris, then Rome?").await.unwrap();

    let bodies: Vec<Value> = server.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 3);
    for body in &bodies {
        assert_eq!(body["tools"][0]["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(body["system"][0]["cache_control"], json!({"type": "ephemeral"}));
        let marks = body.to_string().matches("cache_control").count();
        assert!(marks <= 4, "at most four breakpoints: {body}");
    }
    // 1 message, then 3, then 5: the newest one is marked, and from the second turn on
    // also the one the turn before marked as its newest.
    assert_eq!(marked_messages(&bodies[0]), [0]);
    assert_eq!(marked_messages(&bodies[1]), [0, 2]);
    assert_eq!(marked_messages(&bodies[2]), [2, 4]);
    // What the turn before sent up to its newest breakpoint, this turn sends again, block
    // for block: a server reads it from its cache.
    for pair in bodies.windows(2) {
        let (before, after) = (unmarked(pair[0].clone()), unmarked(pair[1].clone()));
        let newest = *marked_messages(&pair[0]).last().unwrap();
        assert!(marked_messages(&pair[1]).contains(&newest));
        assert_eq!(before["tools"], after["tools"]);
        assert_eq!(before["system"], after["system"]);
        assert_eq!(before["messages"].as_array().unwrap()[..=newest], after["messages"].as_array().unwrap()[..=newest]);
    }
}
