//! A provider written as a crate outside this repository would write it: with the
//! public API of `loopstack_model::http` alone (no `pub(crate)` item, no test hook),
//! for a made-up JSON API, the "Parrot" API, tested against a strict imitation of it on
//! `loopstack_model::testing::Server`.
//!
//! The Parrot API, as its (made-up) reference publishes it:
//!
//! - `POST /v1/complete`, headers `x-parrot-key: <key>` and `content-type:
//!   application/json`, body `{"model": string, "input": [{"role": "user" |
//!   "assistant", "text": string}], "max_output"?: integer}`; answers `200
//!   {"id", "model", "output": string, "finish": "done" | "length", "usage": {"input",
//!   "output"}}`.
//! - `POST /v1/complete/stream`, the same request with `accept: text/event-stream`;
//!   answers an event stream of `event: delta` / `data: {"text"}` events and a last
//!   `event: end` / `data: {"id", "model", "finish", "usage"}`; an `event: error` /
//!   `data: {"error": {"type", "message"}}` ends a failed stream.
//! - Errors: `{"error": {"type", "message"}}` with 400 (`invalid_request_error`), 401
//!   (`authentication_error`), 429, 503 (`unavailable_error`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use loopstack_model::http::{
    Auth, Call, Client, HeaderMap, HeaderValue, MAX_RESPONSE_BYTES, Signer, SseDecoder, body_error, malformed,
};
use loopstack_model::testing::{Reply, Request, Server};
use loopstack_model::{
    ChatModel, ChatRequest, ChatResponse, LlmError, Message, RetryPolicy, Role, StopReason, StreamEvent, Usage,
};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------
// The provider, as its own crate would have it.
// ---------------------------------------------------------------------------------

const PROVIDER: &str = "parrot";

/// The Parrot API.
#[derive(Debug, Clone)]
struct Parrot {
    http: Client,
}

impl Parrot {
    const DEFAULT_BASE_URL: &'static str = "https://api.parrot.example";
    const API_VERSION: &'static str = "2025-06-01";

    fn new(api_key: &str) -> Self {
        let mut http = Client::new(PROVIDER, Self::DEFAULT_BASE_URL, "/v1/complete", Auth::new("x-parrot-key", ""));
        http.set_api_key(api_key);
        Self { http }
    }

    fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.http.set_base_url(base_url);
        self
    }

    fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.http.set_retry_policy(policy);
        self
    }

    fn timeout(mut self, timeout: Duration) -> Self {
        self.http.set_timeout(timeout);
        self
    }

    fn body(request: &ChatRequest) -> Value {
        let input: Vec<Value> = request
            .messages
            .iter()
            .map(|m| {
                let role = if m.role == Role::Assistant { "assistant" } else { "user" };
                json!({"role": role, "text": m.text()})
            })
            .collect();
        let mut body = json!({"model": request.model, "input": input});
        if let Some(max) = request.settings.max_tokens {
            body["max_output"] = json!(max);
        }
        body
    }
}

fn usage(value: &Value) -> Usage {
    let count = |name: &str| value.get(name).and_then(Value::as_u64).unwrap_or(0);
    Usage { input_tokens: count("input"), output_tokens: count("output"), ..Usage::default() }
}

fn stop_reason(finish: Option<&str>) -> StopReason {
    match finish {
        Some("done") => StopReason::EndTurn,
        Some("length") => StopReason::MaxTokens,
        other => StopReason::Other(other.unwrap_or("unknown").to_owned()),
    }
}

fn response(value: &Value, text: String, model: &str) -> ChatResponse {
    let answered = value.get("model").and_then(Value::as_str).unwrap_or(model);
    let mut response = ChatResponse::new(
        Message::assistant(text),
        stop_reason(value.get("finish").and_then(Value::as_str)),
        usage(&value["usage"]),
        answered,
    );
    response.id = value.get("id").and_then(Value::as_str).map(str::to_owned);
    response
}

fn decode(body: &[u8], model: &str) -> Result<ChatResponse, LlmError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| malformed(PROVIDER, model, format!("the reply is not JSON: {e}")))?;
    if let Some(error) = value.get("error") {
        return Err(body_error(PROVIDER, model, error));
    }
    let output =
        value.get("output").and_then(Value::as_str).ok_or_else(|| malformed(PROVIDER, model, "no `output`"))?;
    Ok(response(&value, output.to_owned(), model))
}

struct Decoder {
    model: String,
    text: String,
    end: Option<Value>,
}

impl SseDecoder for Decoder {
    fn event(&mut self, name: &str, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let value: Value = serde_json::from_str(data)
            .map_err(|e| malformed(PROVIDER, &self.model, format!("an event is not JSON: {e}")))?;
        match name {
            "delta" => {
                let text = value
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| malformed(PROVIDER, &self.model, "a delta has no `text`"))?;
                self.text.push_str(text);
                out.push(StreamEvent::TextDelta { index: 0, text: text.to_owned() });
            }
            "end" => self.end = Some(value),
            "error" => return Err(body_error(PROVIDER, &self.model, &value["error"])),
            _ => {}
        }
        Ok(())
    }

    fn is_complete(&self) -> bool {
        self.end.is_some()
    }

    fn finish(&mut self, _out: &mut Vec<StreamEvent>) -> Result<ChatResponse, LlmError> {
        let end = self.end.take().ok_or_else(|| malformed(PROVIDER, &self.model, "the stream ended before `end`"))?;
        Ok(response(&end, std::mem::take(&mut self.text), &self.model))
    }
}

#[async_trait::async_trait]
impl ChatModel for Parrot {
    fn provider(&self) -> &'static str {
        PROVIDER
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let call = self.http.call(&request.model, &Self::body(request), false).map(|mut call| {
            call.headers.insert("parrot-version", HeaderValue::from_static(Self::API_VERSION));
            call
        });
        self.http.chat(request, call, |body| decode(body, &request.model)).await
    }

    fn stream<'a>(&'a self, request: &'a ChatRequest) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
        let call =
            self.http.call_at("/v1/complete/stream", &request.model, &Self::body(request), true).map(|mut call| {
                call.headers.insert("parrot-version", HeaderValue::from_static(Self::API_VERSION));
                call
            });
        let decoder = Decoder { model: request.model.clone(), text: String::new(), end: None };
        self.http.stream(request, call, decoder)
    }
}

// ---------------------------------------------------------------------------------
// The imitation of the Parrot API.
// ---------------------------------------------------------------------------------

const KEY: &str = "pk-test-secret";

fn api_error(status: u16, kind: &str, message: &str) -> Reply {
    Reply::json(status, json!({"error": {"type": kind, "message": message}}))
}

/// Checks a request as the API would, and answers it: the reply repeats the last
/// user text. `None` when the request is valid.
fn check(request: &Request, stream: bool) -> Option<Reply> {
    if request.method != "POST" {
        return Some(api_error(405, "invalid_request_error", "POST only"));
    }
    if request.header("x-parrot-key") != Some(KEY) {
        return Some(api_error(401, "authentication_error", "invalid x-parrot-key"));
    }
    if request.header("parrot-version") != Some(Parrot::API_VERSION) {
        return Some(api_error(400, "invalid_request_error", "parrot-version is missing or unknown"));
    }
    if request.header("content-type") != Some("application/json") {
        return Some(api_error(400, "invalid_request_error", "the body must be JSON"));
    }
    let accept = if stream { "text/event-stream" } else { "application/json" };
    if request.header("accept") != Some(accept) {
        return Some(api_error(400, "invalid_request_error", "wrong accept header"));
    }
    let body = &request.body;
    if !body.get("model").is_some_and(Value::is_string) {
        return Some(api_error(400, "invalid_request_error", "`model` is required"));
    }
    let input = body.get("input").and_then(Value::as_array);
    let valid_input = input.is_some_and(|input| {
        !input.is_empty()
            && input.iter().all(|m| {
                matches!(m.get("role").and_then(Value::as_str), Some("user" | "assistant"))
                    && m.get("text").is_some_and(Value::is_string)
            })
    });
    if !valid_input {
        return Some(api_error(400, "invalid_request_error", "`input` must be a non-empty list of messages"));
    }
    if body.get("max_output").is_some_and(|m| !m.is_u64()) {
        return Some(api_error(400, "invalid_request_error", "`max_output` must be an integer"));
    }
    None
}

/// What the API answers: the last user text repeated, cut to `max_output` words.
fn answer(request: &Request) -> (String, &'static str) {
    let last = request.body["input"].as_array().and_then(|i| i.last()).and_then(|m| m["text"].as_str());
    let words: Vec<&str> = last.unwrap_or_default().split_whitespace().collect();
    let max = request.body.get("max_output").and_then(Value::as_u64).map_or(usize::MAX, |m| m as usize);
    let finish = if words.len() > max { "length" } else { "done" };
    (words[..words.len().min(max)].join(" "), finish)
}

fn parrot_api(request: &Request) -> Reply {
    let stream = match request.path.as_str() {
        "/v1/complete" => false,
        "/v1/complete/stream" => true,
        _ => return api_error(404, "not_found_error", "no such endpoint"),
    };
    if let Some(error) = check(request, stream) {
        return error;
    }
    let (text, finish) = answer(request);
    let usage = json!({"input": 12, "output": text.split_whitespace().count()});
    let model = request.body["model"].as_str().unwrap_or_default();
    if !stream {
        return Reply::json(
            200,
            json!({"id": "rsp_1", "model": model, "output": text, "finish": finish, "usage": usage}),
        );
    }
    let mut events = String::from(": the parrot speaks\n\n");
    for (i, word) in text.split(' ').enumerate() {
        let piece = if i == 0 { word.to_owned() } else { format!(" {word}") };
        events.push_str(&format!("event: delta\ndata: {}\n\n", json!({"text": piece})));
    }
    let end = json!({"id": "rsp_1", "model": model, "finish": finish, "usage": usage});
    events.push_str(&format!("event: end\ndata: {end}\n\n"));
    // In small pieces: events and UTF-8 sequences arrive cut anywhere.
    Reply::sse(events).pieces(&[5, 1, 9])
}

/// No waiting between retries: the tests stay fast without a test hook.
fn quick_retries(max_retries: u32) -> RetryPolicy {
    RetryPolicy::new().max_retries(max_retries).initial_backoff(Duration::ZERO)
}

fn parrot(server: &Server) -> Parrot {
    Parrot::new(KEY).base_url(server.url()).retry_policy(quick_retries(3)).timeout(Duration::from_secs(30))
}

fn request(text: &str) -> ChatRequest {
    ChatRequest::new("parrot-1", vec![Message::user("Say something."), Message::assistant("Hi."), Message::user(text)])
}

async fn collect(model: &Parrot, request: &ChatRequest) -> Vec<Result<StreamEvent, LlmError>> {
    model.stream(request).collect().await
}

// ---------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_plain_reply_is_decoded_from_the_apis_json() {
    let server = Server::handle(parrot_api).await;
    let reply = parrot(&server).chat(&request("Pieces of eight, é ☀️")).await.unwrap();
    assert_eq!(reply.message.text(), "Pieces of eight, é ☀️");
    assert_eq!(reply.message.role, Role::Assistant);
    assert_eq!(reply.stop_reason, StopReason::EndTurn);
    assert_eq!((reply.usage.input_tokens, reply.usage.output_tokens), (12, 5));
    assert_eq!((reply.id.as_deref(), reply.model.as_str()), (Some("rsp_1"), "parrot-1"));

    let cut = parrot(&server).chat(&request("one two three").max_tokens(2)).await.unwrap();
    assert_eq!((cut.message.text().as_str(), cut.stop_reason), ("one two", StopReason::MaxTokens));

    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].body["input"][2], json!({"role": "user", "text": "Pieces of eight, é ☀️"}));
    assert_eq!(sent[1].body["max_output"], 2);
}

#[tokio::test]
async fn a_503_is_retried_until_the_api_answers() {
    let unavailable = || api_error(503, "unavailable_error", "warming up");
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let server = Server::handle(move |request| {
        // The first two attempts find the API unavailable.
        if counter.fetch_add(1, Ordering::SeqCst) < 2 { unavailable() } else { parrot_api(request) }
    })
    .await;
    let reply = parrot(&server).chat(&request("hello again")).await.unwrap();
    assert_eq!(reply.message.text(), "hello again");
    let sent = server.requests();
    assert_eq!(sent.len(), 3, "two 503s, then the answer");
    assert!(sent.iter().all(|r| r.raw_body == sent[0].raw_body), "each retry sends the same request");

    // The retries run out: the 503 as a typed, retryable error with the API's message.
    let server = Server::start(vec![unavailable(), unavailable()]).await;
    let err = parrot(&server).retry_policy(quick_retries(1)).chat(&request("hi")).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Server { provider: "parrot", status: 503, message, .. } if message == "warming up"),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert_eq!(server.requests().len(), 2);

    // A stream is retried too, before it starts.
    let server = Server::start(vec![
        unavailable(),
        Reply::sse("event: delta\ndata: {\"text\": \"ok\"}\n\nevent: end\ndata: {\"finish\": \"done\"}\n\n"),
    ])
    .await;
    let events = collect(&parrot(&server), &request("ok")).await;
    assert!(matches!(events.last(), Some(Ok(StreamEvent::Done(r))) if r.message.text() == "ok"), "{events:?}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_wrong_key_is_an_authentication_error_and_not_retried() {
    let server = Server::handle(parrot_api).await;
    let model = Parrot::new("pk-wrong-secret").base_url(server.url()).retry_policy(quick_retries(3));
    let err = model.chat(&request("hi")).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Authentication { provider: "parrot", status: 401, message, .. }
            if message == "invalid x-parrot-key"),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!(server.requests().len(), 1, "a 401 is not sent again");
    assert_eq!(server.requests()[0].header("x-parrot-key"), Some("pk-wrong-secret"));
    // The key is in no error, and no Debug output.
    assert!(!err.to_string().contains("secret") && !format!("{err:?}").contains("pk-wrong"));
    assert!(!format!("{model:?}").contains("secret"));

    // The stream's error is the same.
    let events = collect(&model, &request("hi")).await;
    assert!(matches!(events[..], [Err(LlmError::Authentication { status: 401, .. })]), "{events:?}");
}

#[tokio::test]
async fn a_malformed_body_is_a_typed_error_and_not_retried() {
    let server = Server::start(vec![
        Reply::raw(200, "application/json", "<html>not json</html>"),
        Reply::json(200, json!({"id": "rsp_1", "finish": "done"})),
    ])
    .await;
    let model = parrot(&server);
    let err = model.chat(&request("hi")).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::MalformedResponse { provider: "parrot", model, message }
            if model == "parrot-1" && message.starts_with("the reply is not JSON")),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    let err = model.chat(&request("hi")).await.unwrap_err();
    assert!(matches!(&err, LlmError::MalformedResponse { message, .. } if message == "no `output`"), "{err:?}");
    assert_eq!(server.requests().len(), 2, "each malformed reply was asked for once");

    // An error the API sends with a 200 is typed by body_error, and retried as its
    // kind is: an overloaded API is asked again.
    let server = Server::start(vec![
        Reply::json(200, json!({"error": {"type": "overloaded_error", "message": "busy"}})),
        Reply::json(200, json!({"output": "fine", "finish": "done"})),
    ])
    .await;
    assert_eq!(parrot(&server).chat(&request("hi")).await.unwrap().message.text(), "fine");
    assert_eq!(server.requests().len(), 2);

    // A body larger than the toolkit's bound is refused, not read.
    let server = Server::start(vec![Reply::raw(200, "application/json", vec![b' '; MAX_RESPONSE_BYTES + 1])]).await;
    let err = parrot(&server).chat(&request("hi")).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::MalformedResponse { message, .. } if message.contains("larger than the 64 MiB")),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);

    // A stream cut before its `end`: the deltas, then the decoder's error.
    let server = Server::start(vec![Reply::sse("event: delta\ndata: {\"text\": \"half\"}\n\n")]).await;
    let events = collect(&parrot(&server), &request("hi")).await;
    assert!(matches!(&events[0], Ok(StreamEvent::TextDelta { index: 0, text }) if text == "half"), "{events:?}");
    assert!(
        matches!(&events[1..], [Err(LlmError::MalformedResponse { message, .. })] if message.contains("before `end`")),
        "{events:?}"
    );
}

#[tokio::test]
async fn the_streamed_reply_equals_the_plain_one() {
    let server = Server::handle(parrot_api).await;
    let model = parrot(&server);
    let request = request("The quick brown fox, é ☀️, jumps");
    let plain = model.chat(&request).await.unwrap();
    let events = collect(&model, &request).await;
    let events: Vec<StreamEvent> = events.into_iter().collect::<Result<_, _>>().unwrap();
    let Some((StreamEvent::Done(streamed), deltas)) = events.split_last() else { panic!("no Done: {events:?}") };
    assert_eq!(*streamed, plain);
    let text: String = deltas
        .iter()
        .map(|e| match e {
            StreamEvent::TextDelta { index: 0, text } => text.as_str(),
            other => panic!("unexpected event {other:?}"),
        })
        .collect();
    assert_eq!(text, plain.message.text());
    assert_eq!(deltas.len(), 7, "one delta a word");

    let sent = server.requests();
    assert_eq!((sent[0].path.as_str(), sent[1].path.as_str()), ("/v1/complete", "/v1/complete/stream"));
    assert_eq!(sent[1].header("accept"), Some("text/event-stream"));
    assert_eq!(sent[0].body, sent[1].body);

    // An error event mid-stream ends it with the typed error, after what came before.
    let server = Server::start(vec![Reply::sse(
        "event: delta\ndata: {\"text\": \"so\"}\n\nevent: error\ndata: {\"error\": {\"type\": \"rate_limit_error\", \"message\": \"slow down\"}}\n\n",
    )])
    .await;
    let events = collect(&parrot(&server), &request).await;
    assert!(matches!(&events[0], Ok(StreamEvent::TextDelta { text, .. }) if text == "so"), "{events:?}");
    assert!(
        matches!(&events[1..], [Err(LlmError::RateLimited { provider: "parrot", message, .. })] if message == "slow down"),
        "{events:?}"
    );
    assert_eq!(server.requests().len(), 1, "a stream that started is not retried");
}

#[test]
fn settings_come_from_the_environment() {
    let mut client = Client::new(PROVIDER, Parrot::DEFAULT_BASE_URL, "/v1/complete", Auth::new("x-parrot-key", ""));
    let env = |name: &str| match name {
        "PARROT_API_KEY" => Some(" pk-env-secret ".to_owned()),
        "PARROT_BASE_URL" => Some("http://127.0.0.1:9/v1".to_owned()),
        _ => None,
    };
    client.configure_from(&env, "PARROT_API_KEY", "PARROT_BASE_URL").unwrap();
    assert!(client.has_api_key());
    let call = client.call("parrot-1", &json!({}), false).unwrap();
    assert_eq!(call.url.as_str(), "http://127.0.0.1:9/v1/complete");
    assert_eq!(call.headers["x-parrot-key"], "pk-env-secret");
    assert!(call.headers["x-parrot-key"].is_sensitive());
    assert!(!format!("{client:?}").contains("secret"));

    let bad = |name: &str| (name == "PARROT_BASE_URL").then(|| "parrot.example".to_owned());
    let err = client.configure_from(&bad, "PARROT_API_KEY", "PARROT_BASE_URL").unwrap_err();
    assert!(matches!(err, LlmError::Config { provider: "parrot", .. }), "{err:?}");

    // A header name no HTTP header may have is a configuration error, not a panic.
    let mut client = Client::new(PROVIDER, Parrot::DEFAULT_BASE_URL, "/v1/complete", Auth::new("x parrot key", ""));
    client.set_api_key("k");
    assert!(matches!(client.call("parrot-1", &json!({}), false), Err(LlmError::Config { .. })));
}

/// A signature of the body (a real API would use an HMAC with a secret).
fn checksum(body: &[u8]) -> String {
    let sum = body.iter().fold(0u32, |sum, &b| sum.wrapping_mul(31).wrapping_add(u32::from(b)));
    format!("{sum:08x}")
}

/// Signs each attempt, numbering them: the imitation sees a fresh signature on each.
struct Checksum(AtomicUsize);

impl Signer for Checksum {
    fn sign(&self, call: &Call<'_>) -> Result<HeaderMap, LlmError> {
        let attempt = self.0.fetch_add(1, Ordering::SeqCst);
        let mut headers = HeaderMap::new();
        let value = format!("{}; attempt={attempt}", checksum(call.body()));
        let value = HeaderValue::from_str(&value)
            .map_err(|e| LlmError::Config { provider: PROVIDER, message: e.to_string() })?;
        headers.insert("parrot-signature", value);
        Ok(headers)
    }
}

#[tokio::test]
async fn a_signer_signs_each_attempt() {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let server = Server::handle(move |request| {
        let signature = request.header("parrot-signature").unwrap_or_default();
        if !signature.starts_with(&format!("{}; ", checksum(&request.raw_body))) {
            return api_error(401, "authentication_error", "bad signature");
        }
        if counter.fetch_add(1, Ordering::SeqCst) == 0 {
            return api_error(503, "unavailable_error", "warming up");
        }
        parrot_api(request)
    })
    .await;
    let mut model = parrot(&server);
    model.http.set_signer(Some(Arc::new(Checksum(AtomicUsize::new(0)))));
    assert_eq!(model.chat(&request("signed")).await.unwrap().message.text(), "signed");
    let signatures: Vec<String> =
        server.requests().iter().map(|r| r.header("parrot-signature").unwrap_or_default().to_owned()).collect();
    assert_eq!(signatures.len(), 2);
    assert!(signatures[0].ends_with("attempt=0") && signatures[1].ends_with("attempt=1"), "{signatures:?}");
}
