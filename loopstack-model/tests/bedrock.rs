//! The Bedrock provider against a strict imitation of the Bedrock Runtime API's
//! `Converse` and `ConverseStream`, written from the published API reference: the
//! imitation recomputes every request's SigV4 signature on its own (from the request's
//! raw bytes and the test credentials), refuses requests the API refuses (as
//! `ValidationException`s), answers in the reference's shapes (JSON, or AWS
//! event-stream frames it encodes itself with their CRC32s), and fails with each error
//! class the reference lists.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use loopstack_model::bedrock::{Bedrock, Credentials};
use loopstack_model::testing::{Reply, Request, Server};
use loopstack_model::{
    ChatModel, ChatRequest, ChatResponse, ContentBlock, Image, LlmError, Message, Reasoning, ReasoningEffort, Role,
    StopReason, StreamEvent, ToolDefinition, ToolResult, ToolUse, Usage,
};
use serde_json::{Value, json};

use loopstack_model::testing::imitation::bedrock_api::{
    ACCESS_KEY, API_KEY, Auth, REGION, SECRET_KEY, SESSION_TOKEN, check_auth, check_request, crc32, error_reply,
    exception_frame, sigv4, stream_events,
};

const CLAUDE: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";

/// The verifier itself, against the AWS SigV4 test suite's `get-vanilla` case.
#[test]
fn the_signature_check_reproduces_the_aws_test_suite() {
    let signature = sigv4::signature(
        SECRET_KEY,
        "20150830T123600Z",
        "20150830/us-east-1/service/aws4_request",
        "GET",
        "/",
        &[("host", "example.amazonaws.com"), ("x-amz-date", "20150830T123600Z")],
        b"",
    );
    assert_eq!(signature, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
    assert_eq!(sigv4::canonical_uri("/model/a.b-v1%3A0/converse"), "/model/a.b-v1%253A0/converse");
}

// ---------------------------------------------------------------------------------
// The imitation.

/// What the imitation answers a request with.
#[derive(Debug, Clone)]
enum Answer {
    /// An assistant message of these Converse content blocks.
    Message { content: Vec<Value>, stop: &'static str, usage: Value },
    /// An error: its HTTP status and exception type.
    Fail(u16, &'static str),
}

fn answer(content: Vec<Value>, stop: &'static str) -> Answer {
    let usage = json!({"inputTokens": 21, "outputTokens": 7, "totalTokens": 128, "cacheReadInputTokens": 100});
    Answer::Message { content, stop, usage }
}

struct State {
    auth: Auth,
    answers: VecDeque<Answer>,
    /// The reasoning and tool blocks the imitation wrote, which may come back.
    issued: Vec<Value>,
    problems: Vec<String>,
}

#[derive(Clone)]
struct Imitation(Arc<Mutex<State>>);

impl Imitation {
    fn new(auth: Auth, answers: Vec<Answer>) -> Self {
        Self(Arc::new(Mutex::new(State { auth, answers: answers.into(), issued: Vec::new(), problems: Vec::new() })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn problems(&self) -> Vec<String> {
        self.state().problems.clone()
    }

    async fn serve(&self) -> Server {
        let imitation = self.clone();
        Server::handle(move |req| imitation.answer(req)).await
    }

    fn answer(&self, req: &Request) -> Reply {
        let mut state = self.state();
        let checked = check_auth(state.auth, req)
            .map_err(|m| (403, "InvalidSignatureException", m))
            .and_then(|()| check_request(req, &state.issued).map_err(|m| (400, "ValidationException", m)))
            .and_then(|stream| match state.answers.pop_front() {
                Some(answer) => Ok((stream, answer)),
                None => Err((400, "ValidationException", "the test scripted no more answers".to_owned())),
            });
        let (stream, answer) = match checked {
            Ok(ok) => ok,
            Err((status, kind, message)) => {
                state.problems.push(message.clone());
                return error_reply(status, kind, &message);
            }
        };
        match answer {
            Answer::Fail(status, kind) => error_reply(status, kind, &format!("{kind} by the test")),
            Answer::Message { content, stop, usage } => {
                state.issued.extend(content.iter().filter(|b| b.get("reasoningContent").is_some()).cloned());
                state.issued.extend(content.iter().filter(|b| b.get("toolUse").is_some()).cloned());
                if stream {
                    let body: Vec<u8> = stream_events(&content, stop, &usage).concat();
                    Reply::raw(200, "application/vnd.amazon.eventstream", body)
                        .header("x-amzn-requestid", "req-1")
                        .pieces(&[5, 31, 200, 1])
                } else {
                    Reply::json(
                        200,
                        json!({
                            "output": {"message": {"role": "assistant", "content": content}},
                            "stopReason": stop,
                            "usage": usage,
                            "metrics": {"latencyMs": 42},
                        }),
                    )
                    .header("x-amzn-requestid", "req-1")
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// The tests.

fn credentials(token: bool) -> Credentials {
    let credentials = Credentials::new(ACCESS_KEY, SECRET_KEY);
    if token { credentials.session_token(SESSION_TOKEN) } else { credentials }
}

fn model(server: &Server, token: bool) -> Bedrock {
    Bedrock::new(REGION, credentials(token))
        .endpoint_url(server.url())
        .retry_policy(loopstack_model::RetryPolicy::new().max_retries(1))
        .__sleep_with(|_| async {})
}

fn weather() -> Arc<ToolDefinition> {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    Arc::new(ToolDefinition::new("get_weather", "Gets the weather.", schema))
}

/// The response of `stream`, checking that its events spell out the response.
async fn streamed(model: &Bedrock, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
    let events: Vec<Result<StreamEvent, LlmError>> = model.stream(request).collect().await;
    let mut texts = std::collections::BTreeMap::<usize, String>::new();
    let mut reasoning = std::collections::BTreeMap::<usize, String>::new();
    let mut done = None;
    for event in events {
        match event? {
            StreamEvent::TextDelta { index, text } => texts.entry(index).or_default().push_str(&text),
            StreamEvent::ReasoningDelta { index, text } => reasoning.entry(index).or_default().push_str(&text),
            StreamEvent::Done(response) => done = Some(response),
            _ => {}
        }
    }
    let response = done.expect("a stream ends with Done");
    for (index, block) in response.message.content.iter().enumerate() {
        match block {
            ContentBlock::Text { text } => assert_eq!(texts.get(&index), Some(text)),
            ContentBlock::Reasoning(r) if !r.text.is_empty() => assert_eq!(reasoning.get(&index), Some(&r.text)),
            _ => {}
        }
    }
    Ok(response)
}

#[tokio::test]
async fn converse_is_signed_and_answered() {
    let imitation =
        Imitation::new(Auth::SigV4 { token: true }, vec![answer(vec![json!({"text": "Sunny in Oslo."})], "end_turn")]);
    let server = imitation.serve().await;
    let request = ChatRequest::new(CLAUDE, vec![Message::user("Weather in Oslo?")])
        .system("Be brief.")
        .max_tokens(300)
        .temperature(0.5)
        .stop_sequences(["###"]);
    let response = model(&server, true).chat(&request).await.unwrap();
    assert_eq!(imitation.problems(), Vec::<String>::new());
    assert_eq!(
        response.message,
        Message { role: Role::Assistant, content: vec![ContentBlock::text("Sunny in Oslo.")] }
    );
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(
        response.usage,
        Usage { input_tokens: 21, output_tokens: 7, cache_read_input_tokens: 100, ..Usage::default() }
    );
    assert_eq!((response.model.as_str(), response.id.as_deref()), (CLAUDE, None));

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse");
    assert_eq!(
        sent.body,
        json!({
            "messages": [{"role": "user", "content": [{"text": "Weather in Oslo?"}, {"cachePoint": {"type": "default"}}]}],
            "system": [{"text": "Be brief."}, {"cachePoint": {"type": "default"}}],
            "inferenceConfig": {"maxTokens": 300, "temperature": 0.5, "stopSequences": ["###"]},
        })
    );
}

#[tokio::test]
async fn signatures_without_a_session_token_and_api_keys() {
    let reply = || answer(vec![json!({"text": "Hi."})], "end_turn");
    let imitation = Imitation::new(Auth::SigV4 { token: false }, vec![reply(), reply()]);
    let server = imitation.serve().await;
    let request = ChatRequest::new("amazon.nova-lite-v1:0", vec![Message::user("Hi")]);
    model(&server, false).chat(&request).await.unwrap();
    streamed(&model(&server, false), &request).await.unwrap();
    assert_eq!(imitation.problems(), Vec::<String>::new());
    assert!(server.requests().iter().all(|r| r.header("x-amz-security-token").is_none()));
    // Signed with the wrong secret: refused as AWS refuses it.
    let wrong = Bedrock::new(REGION, Credentials::new(ACCESS_KEY, "not-the-secret")).endpoint_url(server.url());
    let err = wrong.chat(&request).await.unwrap_err();
    assert!(
        matches!(err, LlmError::Authentication { status: 403, ref message, .. }
            if message.starts_with("InvalidSignatureException: The request signature we calculated")),
        "{err}"
    );

    let imitation = Imitation::new(Auth::Bearer(API_KEY), vec![reply()]);
    let server = imitation.serve().await;
    let keyed = Bedrock::with_api_key(REGION, API_KEY).endpoint_url(server.url());
    keyed.chat(&request).await.unwrap();
    assert_eq!(imitation.problems(), Vec::<String>::new());
    assert!(server.requests()[0].header("x-amz-date").is_none());
    assert!(!format!("{keyed:?}").contains(API_KEY));
}

#[tokio::test]
async fn each_error_class_is_typed_and_retried_as_its_status() {
    type Check = fn(&LlmError) -> bool;
    let cases: [(u16, &str, usize, Check); 9] = [
        (400, "ValidationException", 1, |e| matches!(e, LlmError::InvalidRequest { status: 400, .. })),
        (403, "AccessDeniedException", 1, |e| matches!(e, LlmError::Authentication { status: 403, .. })),
        (404, "ResourceNotFoundException", 1, |e| matches!(e, LlmError::InvalidRequest { status: 404, .. })),
        (424, "ModelErrorException", 1, |e| matches!(e, LlmError::InvalidRequest { status: 424, .. })),
        (429, "ThrottlingException", 2, |e| matches!(e, LlmError::RateLimited { .. })),
        (429, "ModelNotReadyException", 2, |e| matches!(e, LlmError::RateLimited { .. })),
        (408, "ModelTimeoutException", 2, |e| matches!(e, LlmError::Server { status: 408, .. })),
        (500, "InternalServerException", 2, |e| matches!(e, LlmError::Server { status: 500, .. })),
        (503, "ServiceUnavailableException", 2, |e| matches!(e, LlmError::Server { status: 503, .. })),
    ];
    for stream in [false, true] {
        for (status, kind, attempts, check) in cases {
            let imitation = Imitation::new(Auth::SigV4 { token: true }, vec![Answer::Fail(status, kind); 2]);
            let server = imitation.serve().await;
            let request = ChatRequest::new(CLAUDE, vec![Message::user("Hi")]);
            let model = model(&server, true);
            let err = if stream { streamed(&model, &request).await } else { model.chat(&request).await }.unwrap_err();
            assert!(check(&err), "{kind}: {err:?}");
            assert!(err.to_string().contains(&format!("{kind}: {kind} by the test")), "{err}");
            // Every attempt, retries included, was signed anew and accepted.
            assert_eq!(server.requests().len(), attempts, "{kind}");
            assert_eq!(imitation.problems(), Vec::<String>::new());
        }
    }
}

#[tokio::test]
async fn a_two_turn_tool_loop_with_reasoning() {
    for stream in [false, true] {
        let thinking = json!({"reasoningContent": {"reasoningText": {
            "text": "The user wants Oslo's weather: call the tool.", "signature": "EqoBCkgIARABGAIiQHsig=="}}});
        let imitation = Imitation::new(
            Auth::SigV4 { token: true },
            vec![
                answer(
                    vec![
                        thinking.clone(),
                        json!({"reasoningContent": {"redactedContent": "cmVkYWN0ZWQgdGhvdWdodHM="}}),
                        json!({"text": "Let me look."}),
                        json!({"toolUse": {"toolUseId": "tooluse_Oslo1", "name": "get_weather", "input": {"city": "Oslo"}}}),
                    ],
                    "tool_use",
                ),
                answer(vec![json!({"text": "It is sunny in Oslo."})], "end_turn"),
            ],
        );
        let server = imitation.serve().await;
        let model = model(&server, true);
        let ask = |messages: Vec<Message>| {
            ChatRequest::new(CLAUDE, messages).tools(vec![weather()]).reasoning_effort(ReasoningEffort::Low)
        };
        let first = ask(vec![Message::user("Weather in Oslo?")]);
        let reply = if stream { streamed(&model, &first).await } else { model.chat(&first).await }.unwrap();
        assert_eq!(imitation.problems(), Vec::<String>::new());
        assert_eq!(reply.stop_reason, StopReason::ToolUse);
        assert_eq!(
            reply.message.content,
            vec![
                ContentBlock::Reasoning(Reasoning::new(
                    "bedrock",
                    "The user wants Oslo's weather: call the tool.",
                    json!({"signature": "EqoBCkgIARABGAIiQHsig=="})
                )),
                ContentBlock::Reasoning(Reasoning::new("bedrock", "", json!({"redacted": "cmVkYWN0ZWQgdGhvdWdodHM="}))),
                ContentBlock::text("Let me look."),
                ContentBlock::ToolUse(ToolUse::new("tooluse_Oslo1", "get_weather", json!({"city": "Oslo"}))),
            ]
        );
        let sent = &server.requests()[0].body;
        assert_eq!(
            sent["additionalModelRequestFields"],
            json!({"thinking": {"type": "enabled", "budget_tokens": 1024}})
        );
        assert_eq!(sent["inferenceConfig"], json!({"maxTokens": 1024 + 4096}));

        // The reasoning is saved with the message (as a run's documents keep it) and
        // read back; a fallback's reasoning from another provider is in the history too.
        let saved: Message = serde_json::from_value(serde_json::to_value(&reply.message).unwrap()).unwrap();
        let earlier = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Reasoning(Reasoning::new("anthropic", "Someone else's.", json!({"signature": "a"}))),
                ContentBlock::text("Hello."),
            ],
        };
        let result =
            ToolResult { tool_use_id: "tooluse_Oslo1".into(), content: "Sunny, 21 °C".into(), is_error: false };
        let second = ask(vec![
            Message::user("Hi"),
            earlier,
            Message::user("Weather in Oslo?"),
            saved,
            Message::tool_results([result]),
        ]);
        let reply = if stream { streamed(&model, &second).await } else { model.chat(&second).await }.unwrap();
        assert_eq!(imitation.problems(), Vec::<String>::new());
        assert_eq!(reply.message.text(), "It is sunny in Oslo.");
        let sent = &server.requests()[1].body;
        assert_eq!(
            sent["messages"][1]["content"],
            json!([{"text": "Hello."}]),
            "other providers' reasoning is left out"
        );
        assert_eq!(sent["messages"][3]["content"][0], thinking, "the reasoning comes back unchanged");
        assert_eq!(
            sent["messages"][4]["content"],
            json!([
                {"toolResult": {"toolUseId": "tooluse_Oslo1", "content": [{"text": "Sunny, 21 °C"}], "status": "success"}},
                {"cachePoint": {"type": "default"}},
            ])
        );
    }
}

#[tokio::test]
async fn a_changed_or_missing_reasoning_is_refused_by_the_imitation() {
    let thinking = json!({"reasoningContent": {"reasoningText": {"text": "Think.", "signature": "sig"}}});
    let tool = json!({"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Oslo"}}});
    let imitation = Imitation::new(Auth::SigV4 { token: true }, vec![answer(vec![thinking, tool], "tool_use")]);
    let server = imitation.serve().await;
    let model = model(&server, true);
    let ask = |messages: Vec<Message>| {
        ChatRequest::new(CLAUDE, messages).tools(vec![weather()]).reasoning_effort(ReasoningEffort::Low)
    };
    let reply = model.chat(&ask(vec![Message::user("Weather?")])).await.unwrap();
    let result =
        || Message::tool_results([ToolResult { tool_use_id: "t1".into(), content: "Sunny".into(), is_error: false }]);
    let mut changed = reply.message.clone();
    let ContentBlock::Reasoning(reasoning) = &mut changed.content[0] else { panic!("reasoning first") };
    reasoning.text.push('!');
    let err = model.chat(&ask(vec![Message::user("Weather?"), changed, result()])).await.unwrap_err();
    assert!(
        matches!(err, LlmError::InvalidRequest { status: 400, ref message, .. } if message.contains("modified")),
        "{err}"
    );
    let mut dropped = reply.message.clone();
    dropped.content.remove(0);
    let err = model.chat(&ask(vec![Message::user("Weather?"), dropped, result()])).await.unwrap_err();
    assert!(
        matches!(err, LlmError::InvalidRequest { ref message, .. } if message.contains("Expected `thinking`")),
        "{err}"
    );
}

#[tokio::test]
async fn streaming_equals_non_streaming() {
    let answers = [
        answer(vec![json!({"text": "Plain text, ünïcödé, and more."})], "end_turn"),
        answer(
            vec![
                json!({"reasoningContent": {"reasoningText": {"text": "Two tools.", "signature": "c2ln"}}}),
                json!({"toolUse": {"toolUseId": "a", "name": "get_weather", "input": {"city": "Oslo"}}}),
                json!({"toolUse": {"toolUseId": "b", "name": "get_weather", "input": {"city": "Bergen", "days": [1, 2]}}}),
            ],
            "tool_use",
        ),
        answer(vec![json!({"text": "Cut"})], "max_tokens"),
        answer(vec![], "content_filtered"),
    ];
    for answer in answers {
        let imitation = Imitation::new(Auth::SigV4 { token: true }, vec![answer.clone(), answer]);
        let server = imitation.serve().await;
        let model = model(&server, true);
        let request = ChatRequest::new(CLAUDE, vec![Message::user("Go")]).tools(vec![weather()]);
        let whole = model.chat(&request).await.unwrap();
        let pieces = streamed(&model, &request).await.unwrap();
        assert_eq!(imitation.problems(), Vec::<String>::new());
        assert_eq!(whole, pieces);
        let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
        assert!(paths[1].ends_with("/converse-stream"), "{paths:?}");
        assert_eq!(server.requests()[1].header("accept"), Some("application/vnd.amazon.eventstream"));
    }
}

#[tokio::test]
async fn images_guardrails_and_provider_options() {
    const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d];
    let imitation = Imitation::new(
        Auth::SigV4 { token: true },
        vec![answer(vec![json!({"text": "Blocked."})], "guardrail_intervened")],
    );
    let server = imitation.serve().await;
    let guardrail = json!({"guardrailIdentifier": "gr-abc123", "guardrailVersion": "1", "trace": "enabled"});
    let request = ChatRequest::new(
        "mistral.pixtral-large-2502-v1:0",
        vec![Message::user_with_images("What is this?", [Image::from_bytes(PNG).unwrap()])],
    )
    .provider_options("bedrock", json!({ "guardrailConfig": guardrail }));
    let response = model(&server, true).chat(&request).await.unwrap();
    assert_eq!(imitation.problems(), Vec::<String>::new());
    assert_eq!(response.stop_reason, StopReason::Other("guardrail_intervened".into()));
    let sent = &server.requests()[0].body;
    assert_eq!(sent["guardrailConfig"], guardrail);
    assert_eq!(sent["messages"][0]["content"][1]["image"]["format"], "png");
}

/// A scripted stream reply of these frames.
fn stream_reply(frames: Vec<Vec<u8>>) -> Reply {
    Reply::raw(200, "application/vnd.amazon.eventstream", frames.concat()).pieces(&[3, 50])
}

async fn stream_outcome(reply: Reply) -> (Vec<StreamEvent>, LlmError) {
    let server = Server::start(vec![reply]).await;
    let model = model(&server, true).timeout(Duration::from_secs(5));
    let request = ChatRequest::new(CLAUDE, vec![Message::user("Hi")]);
    let mut events = Vec::new();
    let mut items = model.stream(&request);
    while let Some(item) = items.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => {
                assert!(items.next().await.is_none(), "an error ends the stream");
                return (events, error);
            }
        }
    }
    panic!("the stream ended without an error: {events:?}");
}

#[tokio::test]
async fn broken_streams_are_typed_errors() {
    let usage = json!({"inputTokens": 1, "outputTokens": 1, "totalTokens": 2});
    let good = stream_events(&[json!({"text": "Hello there"})], "end_turn", &usage);
    let is_malformed = |error: &LlmError, what: &str| matches!(error, LlmError::MalformedResponse { provider: "bedrock", message, .. } if message.contains(what));

    // A payload byte changed: the message CRC fails, after the events before it.
    let mut corrupt = good.clone();
    let last = corrupt[2].len() - 8;
    corrupt[2][last] ^= 0x01;
    let (events, error) = stream_outcome(stream_reply(corrupt)).await;
    assert!(is_malformed(&error, "checksum does not match"), "{error}");
    assert_eq!(events, vec![StreamEvent::TextDelta { index: 0, text: "Hello".into() }]);

    // A prelude's CRC broken.
    let mut corrupt = good.clone();
    corrupt[1][9] ^= 0xff;
    let (_, error) = stream_outcome(stream_reply(corrupt)).await;
    assert!(is_malformed(&error, "prelude checksum"), "{error}");

    // The body ends inside a message.
    let mut cut = good[..3].concat();
    cut.extend_from_slice(&good[3][..10]);
    let (_, error) = stream_outcome(Reply::raw(200, "application/vnd.amazon.eventstream", cut)).await;
    assert!(is_malformed(&error, "ended inside a message"), "{error}");

    // The body ends between messages, before messageStop.
    let (events, error) = stream_outcome(stream_reply(good[..3].to_vec())).await;
    assert!(is_malformed(&error, "before messageStop"), "{error}");
    assert_eq!(events.len(), 2);

    // A prelude announcing 1 GiB: refused at once.
    let mut huge = (1u32 << 30).to_be_bytes().to_vec();
    huge.extend_from_slice(&0u32.to_be_bytes());
    let crc = crc32(&huge);
    huge.extend_from_slice(&crc.to_be_bytes());
    let (_, error) = stream_outcome(stream_reply(vec![good[0].clone(), huge])).await;
    assert!(is_malformed(&error, "larger than the 16 MiB allowed"), "{error}");

    // An exception in the stream: its typed error, after the text so far.
    let throttled = vec![good[0].clone(), good[1].clone(), exception_frame("throttlingException", "Too many tokens")];
    let (events, error) = stream_outcome(stream_reply(throttled)).await;
    assert!(
        matches!(error, LlmError::RateLimited { ref message, .. } if message == "throttlingException: Too many tokens")
    );
    assert_eq!(events.len(), 1);
    let failed = vec![good[0].clone(), exception_frame("modelStreamErrorException", "The model stream failed")];
    let (_, error) = stream_outcome(stream_reply(failed)).await;
    assert!(error.is_retryable(), "{error}");

    // The connection closes early; the server goes silent.
    let (_, error) = stream_outcome(stream_reply(good[..3].to_vec()).truncated()).await;
    assert!(matches!(error, LlmError::Connection { .. }), "{error}");
    let server = Server::start(vec![stream_reply(good[..2].to_vec()).then_hang()]).await;
    let model = model(&server, true).timeout(Duration::from_millis(300));
    let request = ChatRequest::new(CLAUDE, vec![Message::user("Hi")]);
    let items: Vec<_> = model.stream(&request).collect().await;
    assert!(matches!(items.last(), Some(Err(LlmError::Timeout { .. }))), "{items:?}");
}
