//! Errors an API sends in place of an answer with a success status, in a 200 body or
//! inside a stream, against local scripted servers: each maps to the error kind of the
//! HTTP status it stands for (never `MalformedResponse`), and a non-streamed one (or
//! one sent before a stream started) is retried as that status would be.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Reply, Server, anthropic_sse, openai_sse, recorded_sleeps};
use futures::StreamExt as _;
use loopstack_llm::{Anthropic, ChatModel, ChatRequest, LlmError, Message, OpenAi, RetryPolicy, StreamEvent};
use serde_json::{Value, json};

fn claude(server: &Server) -> (Anthropic, Arc<Mutex<Vec<Duration>>>) {
    let (sleeps, hook) = recorded_sleeps();
    (Anthropic::new("sk-ant-test").base_url(server.url()).__sleep_with(hook), sleeps)
}

fn gpt(server: &Server) -> (OpenAi, Arc<Mutex<Vec<Duration>>>) {
    let (sleeps, hook) = recorded_sleeps();
    (OpenAi::new().base_url(server.url()).__sleep_with(hook), sleeps)
}

fn hello(model: &str) -> ChatRequest {
    ChatRequest::new(model, vec![Message::user("Hello")])
}

/// All the items of a stream.
async fn items(model: &dyn ChatModel, request: &ChatRequest) -> Vec<Result<StreamEvent, LlmError>> {
    model.stream(request).collect().await
}

/// Asserts the delays are the policy's backoff for retries 0, 1, ... (with its jitter).
fn assert_backoff(sleeps: &[Duration]) {
    let policy = RetryPolicy::default();
    for (retry, delay) in sleeps.iter().enumerate() {
        let base = policy.backoff(retry as u32);
        assert!(*delay <= base && *delay >= base.mul_f64(0.75), "retry {retry}: {delay:?} for a backoff of {base:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Anthropic: `{"type": "error", "error": {"type", "message"}}`

fn anthropic_error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

fn anthropic_text() -> Value {
    json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test", "content": [{"type": "text", "text": "Hi"}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 3, "output_tokens": 1},
    })
}

/// A stream that sends some text, then an `error` event.
fn anthropic_stream_failing_with(kind: &str) -> String {
    anthropic_sse(&[
        json!({"type": "message_start", "message": {"id": "m", "model": "claude-test", "usage": {"input_tokens": 3}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hal"}}),
        anthropic_error(kind, "it broke"),
    ])
}

#[tokio::test]
async fn anthropic_error_bodies_with_status_200_are_retried_like_their_status() {
    let server = Server::start(vec![
        Reply::json(200, anthropic_error("overloaded_error", "Overloaded")),
        Reply::json(200, anthropic_error("api_error", "Internal server error")),
        Reply::json(200, anthropic_error("rate_limit_error", "slow down")).header("retry-after", "7"),
        Reply::json(200, anthropic_text()),
    ])
    .await;
    let (model, sleeps) = claude(&server);
    let response = model.chat(&hello("claude-test")).await.unwrap();
    assert_eq!(response.message.text(), "Hi");
    assert_eq!(server.requests().len(), 4);
    let sleeps = sleeps.lock().unwrap().clone();
    assert_eq!(sleeps.len(), 3);
    assert_backoff(&sleeps[..2]);
    assert_eq!(sleeps[2], Duration::from_secs(7), "the rate limit's retry-after is honoured");
}

#[tokio::test]
async fn anthropic_error_bodies_with_status_200_are_typed_errors() {
    let server = Server::start(vec![
        Reply::json(200, anthropic_error("overloaded_error", "Overloaded")),
        Reply::json(200, anthropic_error("api_error", "Internal server error")),
        Reply::json(200, anthropic_error("rate_limit_error", "slow down")).header("retry-after", "3"),
    ])
    .await;
    let (model, sleeps) = claude(&server);
    let model = model.retry_policy(RetryPolicy::disabled());
    let request = hello("claude-test");

    let err = model.chat(&request).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Overloaded { provider: "anthropic", model, message } if model == "claude-test" && message == "Overloaded"),
        "{err:?}"
    );
    assert!(err.is_retryable());
    let err = model.chat(&request).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Server { status: 500, message, .. } if message == "Internal server error"),
        "{err:?}"
    );
    assert!(err.is_retryable());
    let err = model.chat(&request).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::RateLimited { retry_after: Some(d), message, .. } if *d == Duration::from_secs(3) && message == "slow down"),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert_eq!(server.requests().len(), 3);
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn anthropic_invalid_request_in_a_200_body_is_not_retried() {
    let server = Server::start(vec![
        Reply::json(200, anthropic_error("invalid_request_error", "messages: at least one message is required")),
        Reply::json(200, anthropic_text()),
    ])
    .await;
    let (model, sleeps) = claude(&server);
    let err = model.chat(&hello("claude-test")).await.unwrap_err();
    assert!(matches!(&err, LlmError::InvalidRequest { status: 400, .. }), "{err:?}");
    assert_eq!(server.requests().len(), 1);
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn anthropic_error_events_end_the_stream_with_typed_errors() {
    let server = Server::start(vec![
        Reply::sse(anthropic_stream_failing_with("overloaded_error")),
        Reply::sse(anthropic_stream_failing_with("api_error")),
        Reply::sse(anthropic_stream_failing_with("rate_limit_error")),
    ])
    .await;
    let (model, sleeps) = claude(&server);
    let request = hello("claude-test");
    for want in ["overloaded", "server", "rate limited"] {
        let all = items(&model, &request).await;
        let [Ok(StreamEvent::TextDelta { text, .. }), Err(err)] = &all[..] else { panic!("{all:?}") };
        assert_eq!(text, "Hal", "the events before the error are yielded");
        let kind = match err {
            LlmError::Overloaded { message, .. } if message == "it broke" => "overloaded",
            LlmError::Server { status: 500, message, .. } if message == "it broke" => "server",
            LlmError::RateLimited { message, .. } if message == "it broke" => "rate limited",
            other => panic!("{other:?}"),
        };
        assert_eq!(kind, want);
        assert!(err.is_retryable(), "the caller may try again");
    }
    assert_eq!(server.requests().len(), 3, "a started stream is not retried");
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn anthropic_stream_answered_with_a_json_error_is_retried() {
    let stream = anthropic_sse(&[
        json!({"type": "message_start", "message": {"id": "m", "model": "claude-test", "usage": {"input_tokens": 3}}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}),
        json!({"type": "message_stop"}),
    ]);
    let server = Server::start(vec![
        Reply::json(200, anthropic_error("overloaded_error", "Overloaded")),
        Reply::sse(stream),
        Reply::json(200, json!({"id": "msg", "content": []})),
    ])
    .await;
    let (model, sleeps) = claude(&server);
    let request = hello("claude-test");
    let all = items(&model, &request).await;
    assert!(matches!(all.last(), Some(Ok(StreamEvent::Done(_)))), "{all:?}");
    assert_eq!(sleeps.lock().unwrap().len(), 1);
    // JSON without an error, where an event stream was asked for.
    let all = items(&model, &request).await;
    assert!(matches!(&all[..], [Err(LlmError::MalformedResponse { .. })]), "{all:?}");
    assert_eq!(server.requests().len(), 3);
}

// ---------------------------------------------------------------------------------------
// OpenAI and compatible servers: `{"error": {"message", "type", "code"}}`

fn openai_text() -> Value {
    json!({"id": "chatcmpl-1", "model": "gpt-test", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}]})
}

fn openai_text_stream() -> String {
    openai_sse(&[json!({"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]})])
}

#[tokio::test]
async fn openai_error_bodies_with_status_200_are_retried_like_their_status() {
    let server = Server::start(vec![
        Reply::json(200, json!({"error": {"message": "The server had an error", "type": "server_error"}})),
        // Ollama's shape: a bare message.
        Reply::json(200, json!({"error": "model runner has unexpectedly stopped"})),
        Reply::json(
            200,
            json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}),
        )
        .header("retry-after-ms", "250"),
        Reply::json(200, openai_text()),
    ])
    .await;
    let (model, sleeps) = gpt(&server);
    let response = model.chat(&hello("gpt-test")).await.unwrap();
    assert_eq!(response.message.text(), "Hi");
    assert_eq!(server.requests().len(), 4);
    let sleeps = sleeps.lock().unwrap().clone();
    assert_eq!(sleeps.len(), 3);
    assert_backoff(&sleeps[..2]);
    assert_eq!(sleeps[2], Duration::from_millis(250));
}

#[tokio::test]
async fn openai_error_bodies_with_status_200_are_typed_errors() {
    let server = Server::start(vec![
        Reply::json(200, json!({"error": {"message": "The server had an error", "type": "server_error"}})),
        Reply::json(
            200,
            json!({"error": {"message": "Rate limit reached", "type": "tokens", "code": "rate_limit_exceeded"}}),
        ),
        // llama.cpp's and vLLM's shape: the status as a numeric code.
        Reply::json(200, json!({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})),
        Reply::json(200, json!({"error": "model crashed"})),
    ])
    .await;
    let (model, sleeps) = gpt(&server);
    let model = model.retry_policy(RetryPolicy::disabled());
    let request = hello("gpt-test");

    let err = model.chat(&request).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Server { provider: "openai", status: 500, model, message }
            if model == "gpt-test" && message == "The server had an error"),
        "{err:?}"
    );
    let err = model.chat(&request).await.unwrap_err();
    assert!(matches!(&err, LlmError::RateLimited { message, .. } if message == "Rate limit reached"), "{err:?}");
    let err = model.chat(&request).await.unwrap_err();
    assert!(matches!(&err, LlmError::Server { status: 503, message, .. } if message == "Loading model"), "{err:?}");
    let err = model.chat(&request).await.unwrap_err();
    assert!(matches!(&err, LlmError::Server { status: 500, message, .. } if message == "model crashed"), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(server.requests().len(), 4);
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn openai_invalid_request_in_a_200_body_is_not_retried() {
    let server = Server::start(vec![
        Reply::json(
            200,
            json!({"error": {"code": 400, "message": "the request exceeds the available context size", "type": "exceed_context_size_error"}}),
        ),
        Reply::json(200, openai_text()),
    ])
    .await;
    let (model, sleeps) = gpt(&server);
    let err = model.chat(&hello("gpt-test")).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::InvalidRequest { status: 400, message, .. } if message.contains("context size")),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!(server.requests().len(), 1);
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn openai_error_chunks_end_the_stream_with_typed_errors() {
    let text = json!({"choices": [{"index": 0, "delta": {"content": "Hal"}}]});
    let failing = |error: Value| openai_sse(&[text.clone(), json!({"error": error})]);
    // llama.cpp's server sends a stream's error as an `error:` line.
    let llama_cpp = format!(
        "data: {text}\n\nerror: {}\n\ndata: [DONE]\n\n",
        json!({"code": 500, "message": "it broke", "type": "server_error"})
    );
    let server = Server::start(vec![
        Reply::sse(failing(json!({"message": "it broke", "type": "server_error"}))),
        Reply::sse(failing(json!({"message": "it broke", "type": "rate_limit_exceeded"}))),
        Reply::sse(failing(json!({"message": "it broke", "type": "invalid_request_error"}))),
        Reply::sse(llama_cpp).pieces(&[7, 3]),
    ])
    .await;
    let (model, sleeps) = gpt(&server);
    let request = hello("gpt-test");
    for want in ["server", "rate limited", "invalid", "server"] {
        let all = items(&model, &request).await;
        let [Ok(StreamEvent::TextDelta { text, .. }), Err(err)] = &all[..] else { panic!("{all:?}") };
        assert_eq!(text, "Hal", "the events before the error are yielded");
        let kind = match err {
            LlmError::Server { status: 500, message, .. } if message == "it broke" => "server",
            LlmError::RateLimited { message, .. } if message == "it broke" => "rate limited",
            LlmError::InvalidRequest { status: 400, message, .. } if message == "it broke" => "invalid",
            other => panic!("{other:?}"),
        };
        assert_eq!(kind, want);
    }
    assert_eq!(server.requests().len(), 4, "a started stream is not retried");
    assert!(sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn openai_stream_answered_with_a_json_error_is_retried() {
    let server = Server::start(vec![
        Reply::json(200, json!({"error": {"message": "The server had an error", "type": "server_error"}})),
        Reply::sse(openai_text_stream()),
        Reply::json(200, json!({"error": {"message": "bad", "type": "invalid_request_error"}})),
    ])
    .await;
    let (model, sleeps) = gpt(&server);
    let request = hello("gpt-test");
    let all = items(&model, &request).await;
    let Some(Ok(StreamEvent::Done(response))) = all.last() else { panic!("{all:?}") };
    assert_eq!(response.message.text(), "Hi");
    assert_eq!(sleeps.lock().unwrap().len(), 1);
    let all = items(&model, &request).await;
    assert!(matches!(&all[..], [Err(LlmError::InvalidRequest { status: 400, .. })]), "{all:?}");
    assert_eq!(server.requests().len(), 3, "an invalid request is not sent again");
}
