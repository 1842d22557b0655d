//! Hostile servers: endless error bodies, and event streams that never end a line or
//! an event, or keep sending forever. Each call ends promptly in a typed error.

mod common;

use std::time::Duration;

use common::{Reply, Server, anthropic_sse, recorded_sleeps};
use futures::StreamExt as _;
use loopstack_llm::sse::{SSE_MAX_EVENT_BYTES, SSE_MAX_LINE_BYTES};
use loopstack_llm::{Anthropic, ChatModel, ChatRequest, LlmError, Message, OpenAi, RetryPolicy, StreamEvent};
use serde_json::json;

/// A guard against a hang: the calls below end long before it (most at once, some at
/// their own request timeout of a fraction of a second). It only turns a call that
/// never ends, the defect these tests are about, into a failure instead of a hung test.
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

/// The last item of a stream and how many came before it, the hang guard around it.
async fn last_item(model: &dyn ChatModel, request: &ChatRequest) -> (usize, Result<StreamEvent, LlmError>) {
    let counting = async {
        let mut stream = model.stream(request);
        let mut before = 0;
        let mut last = None;
        while let Some(item) = stream.next().await {
            if last.replace(item).is_some() {
                before += 1;
            }
        }
        (before, last.expect("the stream yielded nothing"))
    };
    tokio::time::timeout(HANG_GUARD, counting).await.expect("the stream never ended")
}

// ---------------------------------------------------------------------------------------
// Error bodies

#[tokio::test]
async fn an_endless_error_body_is_read_only_up_to_a_bound() {
    // A 500 whose body never ends: the old client read it whole, so the call only ended
    // at its timeout, with a timeout error instead of the server's.
    let page = format!("<html>{}</html>", "Internal Server Error. ".repeat(400));
    let endless = || Reply::raw(500, "text/html", page.clone()).endless();
    let server = Server::start(vec![endless(), endless(), endless(), endless()]).await;
    let (sleeps, hook) = recorded_sleeps();
    let model = OpenAi::new().base_url(server.url()).__sleep_with(hook).timeout(Duration::from_secs(20));
    let err = tokio::time::timeout(HANG_GUARD, model.chat(&hello("gpt-test"))).await.unwrap().unwrap_err();
    let LlmError::Server { status: 500, message, .. } = &err else { panic!("{err:?}") };
    assert!(message.starts_with("<html>Internal Server Error. "), "{message}");
    assert_eq!(message.chars().count(), 503, "500 characters and `...`");
    assert!(message.ends_with("..."));
    assert_eq!(server.requests().len(), 4, "retried as a 500 is");
    assert_eq!(sleeps.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn an_endless_error_body_before_a_stream_is_bounded_too() {
    let body = json!({"type": "error", "error": {"type": "api_error", "message": "x".repeat(10_000)}}).to_string();
    let server = Server::start(vec![Reply::raw(503, "application/json", body).endless()]).await;
    let model = claude(&server).retry_policy(RetryPolicy::disabled()).timeout(Duration::from_secs(20));
    let all = items(&model, &hello("claude-test")).await;
    assert_eq!(all.len(), 1);
    let Err(LlmError::Server { status: 503, message, .. }) = &all[0] else { panic!("{all:?}") };
    // The body is cut, so it is no longer JSON: its start is the message.
    assert!(message.starts_with(r#"{"type":"error""#) || message.starts_with(r#"{"error""#), "{message}");
    assert_eq!(message.chars().count(), 503);
}

#[tokio::test]
async fn a_huge_error_body_gives_a_short_message() {
    let server = Server::start(vec![Reply::raw(400, "text/plain", "e".repeat(8 << 20))]).await;
    let model = gpt(&server);
    let err = model.chat(&hello("gpt-test")).await.unwrap_err();
    let LlmError::InvalidRequest { status: 400, message, .. } = &err else { panic!("{err:?}") };
    assert_eq!(message.len(), 503);
}

// ---------------------------------------------------------------------------------------
// Event streams

#[tokio::test]
async fn a_stream_of_endless_events_still_hits_the_request_timeout() {
    // Pings forever: each event used to restart the timeout, so the stream never ended.
    let ping = anthropic_sse(&[json!({"type": "ping"})]);
    let start = anthropic_sse(&[json!({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {}}})]);
    let server = Server::start(vec![Reply::sse(format!("{start}{ping}")).endless()]).await;
    let model = claude(&server).timeout(Duration::from_millis(300));
    let (_, last) = last_item(&model, &hello("claude-test")).await;
    assert!(
        matches!(&last, Err(LlmError::Timeout { provider: "anthropic", after, .. }) if *after == Duration::from_millis(300)),
        "{last:?}"
    );
}

#[tokio::test]
async fn a_stream_of_endless_text_still_hits_the_request_timeout() {
    let delta = "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \".\"}}]}\n\n";
    let server = Server::start(vec![Reply::sse(delta).endless()]).await;
    let model = gpt(&server).timeout(Duration::from_millis(300));
    let (before, last) = last_item(&model, &hello("gpt-test")).await;
    assert!(matches!(last, Err(LlmError::Timeout { provider: "openai", .. })), "{last:?}");
    assert!(before > 0, "text arrived before the deadline");
}

#[tokio::test]
async fn a_stream_of_endless_comments_still_hits_the_request_timeout() {
    let server = Server::start(vec![Reply::sse(": keep-alive\n\n".repeat(100)).endless()]).await;
    let model = claude(&server).timeout(Duration::from_millis(300));
    let all = items(&model, &hello("claude-test")).await;
    assert!(matches!(all[..], [Err(LlmError::Timeout { .. })]), "{all:?}");
}

#[tokio::test]
async fn a_line_longer_than_the_limit_ends_the_stream_with_a_clear_error() {
    // No newline, ever: the old decoder rescanned the whole line at each chunk and
    // waited for its end until the timeout.
    let start = anthropic_sse(&[json!({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {}}})]);
    let body = format!("{start}data: {}", "a".repeat(SSE_MAX_LINE_BYTES));
    let server = Server::start(vec![Reply::sse(body).then_hang()]).await;
    let model = claude(&server).timeout(Duration::from_secs(30));
    let all = items(&model, &hello("claude-test")).await;
    let [Err(LlmError::MalformedResponse { provider: "anthropic", message, .. })] = &all[..] else { panic!("{all:?}") };
    assert_eq!(message, "invalid event stream: a line is longer than the 1 MiB allowed");
}

#[tokio::test]
async fn an_event_larger_than_the_limit_ends_the_stream_with_a_clear_error() {
    // Lines within their limit, but one event that never ends.
    let line = format!("data: {}\n", "a".repeat(SSE_MAX_LINE_BYTES - "data: ".len()));
    let lines = SSE_MAX_EVENT_BYTES / SSE_MAX_LINE_BYTES + 1;
    let first = "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"Hi\"}}]}\n\n";
    let server = Server::start(vec![Reply::sse(format!("{first}{}", line.repeat(lines))).then_hang()]).await;
    let model = gpt(&server).timeout(Duration::from_secs(30));
    let all = items(&model, &hello("gpt-test")).await;
    assert!(matches!(&all[0], Ok(StreamEvent::TextDelta { text, .. }) if text == "Hi"), "{:?}", all[0]);
    let [_, Err(LlmError::MalformedResponse { provider: "openai", message, .. })] = &all[..] else { panic!("{all:?}") };
    assert_eq!(message, "invalid event stream: an event is larger than the 8 MiB allowed");
}
