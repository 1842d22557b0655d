//! The OpenAI provider against a local scripted server.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Reply, Server, openai_sse, recorded_sleeps, tool_spec};
use futures::StreamExt as _;
use loopstack_core::ToolDefinition;
use loopstack_llm::model::ResponseSchema;
use loopstack_llm::{
    ChatModel, ChatRequest, ChatResponse, ContentBlock, LlmError, Message, OpenAi, RetryPolicy, Role, StopReason,
    StreamEvent, ToolResult, ToolUse, Usage,
};
use serde_json::{Value, json};

const KEY: &str = "sk-proj-test-secret-key";

/// A model for `server` whose retry delays are recorded instead of slept.
fn gpt(server: &Server) -> (OpenAi, Arc<Mutex<Vec<Duration>>>) {
    let (sleeps, hook) = recorded_sleeps();
    (OpenAi::new().api_key(KEY).base_url(server.url()).__sleep_with(hook), sleeps)
}

fn hello() -> ChatRequest {
    ChatRequest::new("gpt-test", vec![Message::user("Hello")])
}

fn weather() -> Arc<ToolDefinition> {
    tool_spec(
        "get_weather",
        "Gets the weather of a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

fn with_tools() -> ChatRequest {
    hello().tools(vec![weather()])
}

fn completion(message: Value, finish_reason: &str) -> Value {
    json!({
        "id": "chatcmpl-01", "object": "chat.completion", "created": 1_700_000_000, "model": "gpt-test-2025",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 25, "completion_tokens": 11, "total_tokens": 36,
                  "prompt_tokens_details": {"cached_tokens": 16}},
    })
}

fn text_reply() -> Value {
    completion(json!({"role": "assistant", "content": "Bonjour ! ☀️ Il fait beau.", "refusal": null}), "stop")
}

fn chunk(delta: Value, finish_reason: Value) -> Value {
    json!({
        "id": "chatcmpl-01", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-test-2025",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
    })
}

fn usage_chunk() -> Value {
    json!({
        "id": "chatcmpl-01", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-test-2025",
        "choices": [],
        "usage": {"prompt_tokens": 25, "completion_tokens": 11, "total_tokens": 36,
                  "prompt_tokens_details": {"cached_tokens": 16}},
    })
}

fn text_stream() -> String {
    openai_sse(&[
        chunk(json!({"role": "assistant", "content": "", "refusal": null}), Value::Null),
        chunk(json!({"content": "Bonjour ! "}), Value::Null),
        chunk(json!({"content": "☀️ Il fait"}), Value::Null),
        chunk(json!({"content": " beau."}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage_chunk(),
    ])
}

fn tools_reply() -> Value {
    completion(
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Zürich\",\"units\":[\"°C\"]}"}},
        ]}),
        "tool_calls",
    )
}

fn tools_stream() -> String {
    let call = |index: u32, id: Option<&str>, name: Option<&str>, arguments: &str| {
        let mut call = json!({"index": index, "function": {"arguments": arguments}});
        if let Some(id) = id {
            call["id"] = id.into();
            call["type"] = "function".into();
        }
        if let Some(name) = name {
            call["function"]["name"] = name.into();
        }
        chunk(json!({"tool_calls": [call]}), Value::Null)
    };
    openai_sse(&[
        chunk(json!({"role": "assistant", "content": null}), Value::Null),
        call(0, Some("call_a"), Some("get_weather"), ""),
        call(0, None, None, "{\"city\":"),
        call(0, None, None, "\"Paris\"}"),
        call(1, Some("call_b"), Some("get_weather"), ""),
        call(1, None, None, "{\"city\":\"Zü"),
        call(1, None, None, "rich\",\"units\":[\"°C\"]}"),
        chunk(json!({}), json!("tool_calls")),
        usage_chunk(),
    ])
}

/// Collects a stream: its events before `Done`, and the response of `Done`.
async fn collect(model: &OpenAi, request: &ChatRequest) -> Result<(Vec<StreamEvent>, ChatResponse), LlmError> {
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
    let (model, _) = gpt(&server);
    let request = ChatRequest::new(
        "gpt-test",
        vec![
            Message::user("Weather in Paris and Rome?"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::text("Checking."),
                    ContentBlock::ToolUse(ToolUse::new("call_a", "get_weather", json!({"city": "Paris"}))),
                    ContentBlock::ToolUse(ToolUse::from_raw_arguments("call_b", "get_weather", "{\"city\": Rome")),
                ],
            },
            Message::tool_results([
                ToolResult { tool_use_id: "call_a".into(), content: "sunny".into(), is_error: false },
                ToolResult {
                    tool_use_id: "call_b".into(),
                    content: "arguments are not valid JSON".into(),
                    is_error: true,
                },
            ]),
        ],
    )
    .system("You are terse.")
    .tools(vec![weather()])
    .max_tokens(256)
    .temperature(0.2)
    .stop_sequences(["###"]);
    model.chat(&request).await.unwrap();

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!((sent.method.as_str(), sent.path.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!(sent.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(sent.header("x-api-key"), None);
    assert_eq!(
        sent.body,
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": Rome"}},
                ]},
                {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_b", "content": "Error: arguments are not valid JSON"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_weather",
                "description": "Gets the weather of a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }}],
            "max_tokens": 256,
            "temperature": 0.2,
            "stop": ["###"],
        })
    );
}

#[tokio::test]
async fn a_response_schema_is_sent_as_a_strict_json_schema_response_format() {
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "degrees": {"type": "number"}},
        "required": ["city", "degrees"],
        "additionalProperties": false,
    });
    let answer = completion(json!({"role": "assistant", "content": "{\"city\": \"Paris\", \"degrees\": 21}"}), "stop");
    let server = Server::start(vec![
        Reply::json(200, answer.clone()),
        Reply::sse(openai_sse(&[chunk(json!({"content": "{}"}), json!("stop"))])),
        Reply::json(200, answer),
    ])
    .await;
    let (model, _) = gpt(&server);
    assert!(ChatModel::structured_output(&model), "on by default");
    let request = hello().response_schema(ResponseSchema::new("weather_report", schema.clone()));
    let response = model.chat(&request).await.unwrap();
    assert_eq!(response.message.text(), "{\"city\": \"Paris\", \"degrees\": 21}");
    collect(&model, &request).await.unwrap();
    let off = model.structured_output(false);
    assert!(!ChatModel::structured_output(&off));
    off.chat(&request).await.unwrap();

    let requests = server.requests();
    let want =
        json!({"type": "json_schema", "json_schema": {"name": "weather_report", "schema": schema, "strict": true}});
    assert_eq!(requests[0].body["response_format"], want);
    assert_eq!(requests[1].body["response_format"], want, "streamed requests carry it too");
    assert_eq!(requests[2].body.get("response_format"), None, "not sent when turned off");
    assert_eq!(hello().response_schema, None);
}

#[tokio::test]
async fn without_a_key_there_is_no_authorization_header() {
    let server = Server::start(vec![Reply::json(200, text_reply())]).await;
    let model = OpenAi::new().base_url(server.url());
    model.chat(&hello()).await.unwrap();
    let sent = &server.requests()[0];
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(sent.body, json!({"model": "gpt-test", "messages": [{"role": "user", "content": "Hello"}]}));
}

#[tokio::test]
async fn decodes_a_plain_reply() {
    let server = Server::start(vec![Reply::json(200, text_reply())]).await;
    let (model, _) = gpt(&server);
    let response = model.chat(&hello()).await.unwrap();
    assert_eq!(response.message, Message::assistant("Bonjour ! ☀️ Il fait beau."));
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(
        response.usage,
        Usage { input_tokens: 9, output_tokens: 11, cache_read_input_tokens: 16, ..Usage::default() }
    );
    assert_eq!(response.model, "gpt-test-2025");
    assert_eq!(response.id.as_deref(), Some("chatcmpl-01"));
}

#[tokio::test]
async fn finish_reasons_are_mapped() {
    let cases = [
        ("length", StopReason::MaxTokens),
        ("content_filter", StopReason::Other("content_filter".into())),
        ("eos_token", StopReason::Other("eos_token".into())),
    ];
    let replies =
        cases.iter().map(|(finish, _)| Reply::json(200, completion(json!({"content": "x"}), finish))).collect();
    let server = Server::start(replies).await;
    let (model, _) = gpt(&server);
    for (finish, want) in cases {
        assert_eq!(model.chat(&hello()).await.unwrap().stop_reason, want, "{finish}");
    }
}

#[tokio::test]
async fn decodes_parallel_tool_calls() {
    let server = Server::start(vec![Reply::json(200, tools_reply())]).await;
    let (model, _) = gpt(&server);
    let response = model.chat(&with_tools()).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.message.content,
        vec![
            ContentBlock::ToolUse(ToolUse::new("call_a", "get_weather", json!({"city": "Paris"}))),
            ContentBlock::ToolUse(ToolUse::new("call_b", "get_weather", json!({"city": "Zürich", "units": ["°C"]}))),
        ]
    );
}

#[tokio::test]
async fn invalid_json_arguments_are_kept_as_invalid_input() {
    let reply = completion(
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_x", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": 'Paris'"}},
            {"id": "call_y", "type": "function", "function": {"name": "get_weather", "arguments": ""}},
        ]}),
        "tool_calls",
    );
    let server = Server::start(vec![Reply::json(200, reply)]).await;
    let (model, _) = gpt(&server);
    let response = model.chat(&with_tools()).await.unwrap();
    let calls: Vec<&ToolUse> = response.message.tool_uses().collect();
    assert_eq!(calls[0].input, Value::Null, "never an invented {{}}");
    let invalid = calls[0].invalid_input.as_ref().expect("the raw arguments are kept");
    assert_eq!(invalid.raw, "{\"city\": 'Paris'");
    assert!(!invalid.error.is_empty());
    assert_eq!(*calls[1], ToolUse::new("call_y", "get_weather", json!({})), "empty arguments are {{}}");
}

#[tokio::test]
async fn a_streamed_text_reply_equals_the_plain_reply() {
    let server = Server::start(vec![Reply::json(200, text_reply()), Reply::sse(text_stream())]).await;
    let (model, _) = gpt(&server);
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
    assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn a_streamed_tool_reply_split_at_odd_byte_boundaries_equals_the_plain_reply() {
    let server = Server::start(vec![
        Reply::json(200, tools_reply()),
        Reply::sse(tools_stream()).pieces(&[1, 2, 3]),
        Reply::sse(tools_stream()).pieces(&[5, 1, 11]),
    ])
    .await;
    let (model, _) = gpt(&server);
    let chat = model.chat(&with_tools()).await.unwrap();
    let (events, streamed) = collect(&model, &with_tools()).await.unwrap();
    assert_eq!(streamed, chat);
    assert_eq!(
        events,
        vec![
            StreamEvent::ToolUseStart { index: 0, id: "call_a".into(), name: "get_weather".into() },
            StreamEvent::ToolInputDelta { index: 0, partial_json: "{\"city\":".into() },
            StreamEvent::ToolInputDelta { index: 0, partial_json: "\"Paris\"}".into() },
            StreamEvent::ToolUseStart { index: 1, id: "call_b".into(), name: "get_weather".into() },
            StreamEvent::ToolInputDelta { index: 1, partial_json: "{\"city\":\"Zü".into() },
            StreamEvent::ToolInputDelta { index: 1, partial_json: "rich\",\"units\":[\"°C\"]}".into() },
        ]
    );
    let (_, again) = collect(&model, &with_tools()).await.unwrap();
    assert_eq!(again, chat);
}

#[tokio::test]
async fn text_tool_calls_are_off_by_default() {
    let text = r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#;
    let server = Server::start(vec![Reply::json(200, completion(json!({"content": text}), "stop"))]).await;
    let (model, _) = gpt(&server);
    let response = model.chat(&with_tools()).await.unwrap();
    assert_eq!(response.message, Message::assistant(text));
    assert_eq!(response.stop_reason, StopReason::EndTurn);
}

#[tokio::test]
async fn text_tool_calls_when_enabled() {
    let unfenced = r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#;
    let fenced = "Sure.\n```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n```";
    let bare_fence = "```\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}\n```";
    let not_offered = r#"{"name": "launch_rocket", "arguments": {}}"#;
    let replies = [unfenced, fenced, bare_fence, not_offered]
        .map(|text| Reply::json(200, completion(json!({"content": text}), "stop")));
    let server = Server::start(replies.to_vec()).await;
    let (model, _) = gpt(&server);
    let model = model.text_tool_calls(true);

    let response = model.chat(&with_tools()).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.message.content,
        vec![ContentBlock::ToolUse(ToolUse::new("call_0", "get_weather", json!({"city": "Paris"})))]
    );
    let response = model.chat(&with_tools()).await.unwrap();
    assert_eq!(
        response.message.content,
        vec![
            ContentBlock::text("Sure."),
            ContentBlock::ToolUse(ToolUse::new("call_0", "get_weather", json!({"city": "Rome"}))),
        ]
    );
    let response = model.chat(&with_tools()).await.unwrap();
    assert_eq!(response.message.tool_uses().next().unwrap().input, json!({"city": "Oslo"}));
    let response = model.chat(&with_tools()).await.unwrap();
    // A tool that was not offered is a call too: the dispatch answers it with the tools
    // that are, which the model can read (left as text, it would end the run).
    assert_eq!(
        response.message.content,
        vec![ContentBlock::ToolUse(ToolUse::new("call_0", "launch_rocket", json!({})))]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}

#[tokio::test]
async fn streamed_text_tool_calls_equal_the_plain_reply() {
    let text = "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```";
    let stream = openai_sse(&[
        chunk(json!({"role": "assistant", "content": "```json\n{\"name\": \"get_"}), Value::Null),
        chunk(json!({"content": "weather\", \"arguments\": {\"city\": \"Paris\"}}\n```"}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage_chunk(),
    ]);
    let server = Server::start(vec![
        Reply::json(200, completion(json!({"content": text}), "stop")),
        Reply::sse(stream).pieces(&[2, 3]),
    ])
    .await;
    let (model, _) = gpt(&server);
    let model = model.text_tool_calls(true);
    let chat = model.chat(&with_tools()).await.unwrap();
    assert_eq!(chat.stop_reason, StopReason::ToolUse);
    let (events, streamed) = collect(&model, &with_tools()).await.unwrap();
    assert_eq!(streamed, chat);
    // The fenced call is held back while it streams, and never sent as answer text.
    assert_eq!(
        events[..],
        [
            StreamEvent::ToolUseStart { index: 0, id: "call_0".into(), name: "get_weather".into() },
            StreamEvent::ToolInputDelta { index: 0, partial_json: "{\"city\":\"Paris\"}".into() },
        ]
    );
}

#[tokio::test]
async fn unauthorized_is_an_authentication_error_and_not_retried() {
    let body = json!({"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error", "code": "invalid_api_key"}});
    let server = Server::start(vec![Reply::json(401, body)]).await;
    let (model, sleeps) = gpt(&server);
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Authentication { provider: "openai", model, status: 401, message }
            if model == "gpt-test" && message == "Incorrect API key provided."),
        "{err:?}"
    );
    assert!(!err.to_string().contains(KEY));
    assert_eq!(server.requests().len(), 1);
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn bad_request_carries_the_api_message() {
    let body =
        json!({"error": {"message": "'messages' must contain at least one item.", "type": "invalid_request_error"}});
    let server =
        Server::start(vec![Reply::json(400, body), Reply::json(404, json!({"error": "model \"tiny\" not found"}))])
            .await;
    let (model, _) = gpt(&server);
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::InvalidRequest { status: 400, message, .. } if message == "'messages' must contain at least one item."),
        "{err:?}"
    );
    // Ollama's error shape.
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::InvalidRequest { status: 404, message, .. } if message == "model \"tiny\" not found")
    );
    assert_eq!(server.requests().len(), 2, "neither is retried");
}

#[tokio::test]
async fn rate_limits_honour_retry_after_then_succeed() {
    let limited = json!({"error": {"message": "Rate limit reached", "type": "requests"}});
    let server = Server::start(vec![
        Reply::json(429, limited.clone()).header("retry-after", "7"),
        Reply::json(429, limited).header("retry-after-ms", "250"),
        Reply::json(200, text_reply()),
    ])
    .await;
    let (model, sleeps) = gpt(&server);
    model.chat(&hello()).await.unwrap();
    assert_eq!(*sleeps.lock().unwrap(), vec![Duration::from_secs(7), Duration::from_millis(250)]);
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_retry_after_beyond_the_policy_is_returned_at_once() {
    let limited = json!({"error": {"message": "Rate limit reached"}});
    let server = Server::start(vec![Reply::json(429, limited).header("retry-after", "3600")]).await;
    let (model, sleeps) = gpt(&server);
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::RateLimited { retry_after: Some(d), message, .. }
            if *d == Duration::from_secs(3600) && message == "Rate limit reached"),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn server_errors_are_retried_then_succeed() {
    let server = Server::start(vec![
        Reply::json(500, json!({"error": {"message": "The server had an error"}})),
        Reply::json(502, json!({})),
        Reply::json(408, json!({})),
        Reply::json(200, text_reply()),
    ])
    .await;
    let (model, sleeps) = gpt(&server);
    model.chat(&hello()).await.unwrap();
    let sleeps = sleeps.lock().unwrap().clone();
    let policy = RetryPolicy::default();
    assert_eq!(sleeps.len(), 3);
    for (retry, delay) in sleeps.iter().enumerate() {
        let base = policy.backoff(retry as u32);
        assert!(*delay <= base && *delay >= base.mul_f64(0.75), "retry {retry}: {delay:?} for a backoff of {base:?}");
    }
}

#[tokio::test]
async fn exhausted_retries_return_the_typed_error() {
    let limited = json!({"error": {"message": "Rate limit reached"}});
    let server = Server::start(vec![Reply::json(429, limited).header("retry-after", "1"); 4]).await;
    let (model, sleeps) = gpt(&server);
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::RateLimited { retry_after: Some(d), .. } if *d == Duration::from_secs(1)),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 4);
    assert_eq!(*sleeps.lock().unwrap(), vec![Duration::from_secs(1); 3]);

    let server = Server::start(vec![Reply::json(503, json!({"error": {"message": "down"}})); 2]).await;
    let (model, _) = gpt(&server);
    let err = model.retry_policy(RetryPolicy::disabled()).chat(&hello()).await.unwrap_err();
    assert!(matches!(&err, LlmError::Server { status: 503, message, .. } if message == "down"), "{err:?}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_dropped_connection_is_retried() {
    let server = Server::start(vec![Reply::close(), Reply::sse(text_stream())]).await;
    let (model, sleeps) = gpt(&server);
    let (_, response) = collect(&model, &hello()).await.unwrap();
    assert_eq!(response.message.text(), "Bonjour ! ☀️ Il fait beau.");
    assert_eq!(sleeps.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_stalled_server_times_out_without_retry() {
    let server = Server::start(vec![Reply::stall(), Reply::stall()]).await;
    let (model, sleeps) = gpt(&server);
    let model = model.timeout(Duration::from_millis(200));
    let err = model.chat(&hello()).await.unwrap_err();
    assert!(matches!(&err, LlmError::Timeout { provider: "openai", model, .. } if model == "gpt-test"), "{err:?}");
    let err = collect(&model, &hello()).await.unwrap_err();
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
    assert_eq!(server.requests().len(), 2);
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_stream_that_goes_silent_times_out() {
    let start = "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"Hi\"}}]}\n\n";
    let server = Server::start(vec![Reply::sse(start).then_hang()]).await;
    let (model, _) = gpt(&server);
    let model = model.timeout(Duration::from_millis(200));
    let request = hello();
    let items: Vec<_> = model.stream(&request).collect().await;
    assert_eq!(items[0].as_ref().unwrap(), &StreamEvent::TextDelta { index: 0, text: "Hi".into() });
    assert!(matches!(items[1], Err(LlmError::Timeout { .. })), "{items:?}");
    assert_eq!(items.len(), 2);
}

#[tokio::test]
async fn malformed_replies_are_malformed_response_errors() {
    let server = Server::start(vec![
        Reply::raw(200, "application/json", "{\"choices\": [{\"message\": "),
        Reply::json(200, json!({"id": "x", "choices": []})),
        Reply::sse("data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"Hi\"}}]}\n\ndata: {oops\n\n"),
        Reply::sse("data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"Hi\"}}]}\n\n"),
    ])
    .await;
    let (model, sleeps) = gpt(&server);
    for _ in 0..2 {
        let err = model.chat(&hello()).await.unwrap_err();
        assert!(
            matches!(&err, LlmError::MalformedResponse { provider: "openai", model, .. } if model == "gpt-test"),
            "{err:?}"
        );
    }
    for _ in 0..2 {
        let err = collect(&model, &hello()).await.unwrap_err();
        assert!(matches!(err, LlmError::MalformedResponse { .. }), "{err:?}");
    }
    assert_eq!(server.requests().len(), 4);
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn the_base_url_may_end_in_v1() {
    for suffix in ["", "/", "/v1", "/v1/"] {
        let server = Server::start(vec![Reply::json(200, text_reply())]).await;
        let model = OpenAi::new().base_url(format!("{}{suffix}", server.url()));
        model.chat(&hello()).await.unwrap();
        assert_eq!(server.requests()[0].path, "/v1/chat/completions", "base ending in {suffix:?}");
    }
    let err = OpenAi::new().base_url("localhost:11434").chat(&hello()).await.unwrap_err();
    assert!(matches!(err, LlmError::Config { provider: "openai", .. }), "{err:?}");
}

#[tokio::test]
async fn the_key_never_shows_in_debug_output() {
    let model = OpenAi::new().api_key(KEY).text_tool_calls(true);
    let debug = format!("{model:?} {model:#?}");
    assert!(!debug.contains(KEY) && !debug.contains("secret"), "{debug}");
    assert!(debug.contains("<redacted>") && debug.contains("https://api.openai.com"), "{debug}");
    assert!(!format!("{:?}", OpenAi::new()).contains("redacted"), "no key, nothing to redact");
    assert_eq!(model.provider(), "openai");
}
