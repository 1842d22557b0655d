//! The Gemini provider against a strict imitation of the Gemini API and Vertex AI
//! (`loopstack_model::testing::imitation::gemini_api`), written from their published REST reference.
//!
//! `cargo test -p loopstack-model --features gemini,testing --test gemini`

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use loopstack_model::testing::{Reply, Request, Server};
use loopstack_model::{
    ChatModel, ChatRequest, ChatResponse, ContentBlock, Gemini, Image, LlmError, Message, Reasoning, ReasoningEffort,
    ResponseSchema, RetryPolicy, Role, StopReason, StreamEvent, ToolDefinition, ToolResult, ToolUse, Usage,
};
use serde_json::{Value, json};

use loopstack_model::testing::imitation::gemini_api::{self, Api, SKIP, answer, error, response};

const KEY: &str = "gemini-test-key";
const MODEL: &str = "gemini-3-flash-preview";

/// An imitation answering each request read by `api` with `answer_of`; requests it
/// refuses get the API's error.
async fn imitation(api: Api, answer_of: impl Fn(&gemini_api::Read) -> Reply + Send + Sync + 'static) -> Server {
    Server::handle(move |request: &Request| match api.read(request) {
        Ok(read) => answer_of(&read),
        Err(reply) => reply,
    })
    .await
}

fn model(server: &Server) -> Gemini {
    Gemini::new(KEY).base_url(server.url()).retry_policy(RetryPolicy::disabled())
}

fn weather_tool() -> Arc<ToolDefinition> {
    // A schemars-style schema: Gemini refuses `additionalProperties`, `$ref` and `$defs`.
    Arc::new(ToolDefinition::new(
        "get_weather",
        "The weather in a city.",
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "city": {"type": "string"},
                "unit": {"anyOf": [{"$ref": "#/$defs/Unit"}, {"type": "null"}]},
            },
            "required": ["city"],
            "$defs": {"Unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        }),
    ))
}

fn usage(prompt: u64, candidates: u64) -> Value {
    json!({"promptTokenCount": prompt, "candidatesTokenCount": candidates, "totalTokenCount": prompt + candidates})
}

async fn streamed(model: &Gemini, request: &ChatRequest) -> (Vec<StreamEvent>, Result<ChatResponse, LlmError>) {
    let mut events = Vec::new();
    let mut stream = model.stream(request);
    while let Some(item) = stream.next().await {
        match item {
            Ok(StreamEvent::Done(response)) => return (events, Ok(response)),
            Ok(event) => events.push(event),
            Err(e) => return (events, Err(e)),
        }
    }
    (events, Err(LlmError::Config { provider: "test", message: "the stream ended without Done".into() }))
}

#[tokio::test]
async fn a_text_turn_with_an_api_key() {
    let server = imitation(Api::gemini(KEY), |read| {
        assert_eq!(read.model, MODEL);
        assert_eq!(read.body["systemInstruction"], json!({"parts": [{"text": "Be brief."}]}));
        assert_eq!(read.body["contents"], json!([{"role": "user", "parts": [{"text": "Weather in Paris?"}]}]));
        let config = &read.body["generationConfig"];
        assert_eq!((config["maxOutputTokens"].clone(), config["temperature"].clone()), (json!(64), json!(0.2)));
        assert_eq!(config["stopSequences"], json!(["END"]));
        assert_eq!(config["thinkingConfig"], json!({"includeThoughts": true}));
        answer(&response(json!([{"text": "Sunny."}]), "STOP", usage(12, 3)), read.stream)
    })
    .await;
    let request = ChatRequest::new(MODEL, vec![Message::user("Weather in Paris?")])
        .system("Be brief.")
        .max_tokens(64)
        .temperature(0.2)
        .stop_sequences(["END"]);
    let response = model(&server).chat(&request).await.unwrap();
    assert_eq!(response.message, Message::assistant("Sunny."));
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.usage, Usage::new(12, 3));
    assert_eq!(
        (response.model.as_str(), response.id.as_deref()),
        ("gemini-3-flash-preview-001", Some("resp-gemini-1"))
    );
    let seen = &server.requests()[0];
    assert_eq!(seen.path, format!("/v1beta/models/{MODEL}:generateContent"));
    assert_eq!(seen.header("x-goog-api-key"), Some(KEY));
    assert_eq!(seen.header("authorization"), None);
}

#[tokio::test]
async fn vertex_sends_a_bearer_token_to_the_project_path() {
    let server = imitation(Api::vertex("proj-1", "us-central1", "ya29.token"), |read| {
        answer(&response(json!([{"text": "Hi."}]), "STOP", usage(3, 1)), read.stream)
    })
    .await;
    let vertex = Gemini::vertex("proj-1", "us-central1", "ya29.token").base_url(server.url());
    assert_eq!(vertex.provider(), "vertex");
    let request = ChatRequest::new("gemini-2.5-pro", vec![Message::user("Hi")]);
    assert_eq!(vertex.chat(&request).await.unwrap().message.text(), "Hi.");
    let (_, streamed) = streamed(&vertex, &request).await;
    assert_eq!(streamed.unwrap().message.text(), "Hi.");
    let requests = server.requests();
    let path = "/v1/projects/proj-1/locations/us-central1/publishers/google/models/gemini-2.5-pro";
    assert_eq!(requests[0].path, format!("{path}:generateContent"));
    assert_eq!(requests[1].path, format!("{path}:streamGenerateContent?alt=sse"));
    assert_eq!(requests[0].header("authorization"), Some("Bearer ya29.token"));
    assert_eq!(requests[0].header("x-goog-api-key"), None);
    // A wrong token is refused with a 401.
    let err = vertex.access_token("expired").chat(&request).await.unwrap_err();
    assert!(matches!(err, LlmError::Authentication { provider: "vertex", status: 401, .. }), "{err:?}");
}

#[tokio::test]
async fn tool_schemas_reach_the_wire_in_the_openapi_subset() {
    let server = imitation(Api::gemini(KEY), |read| {
        answer(&response(json!([{"text": "ok"}]), "STOP", usage(1, 1)), read.stream)
    })
    .await;
    let request = ChatRequest::new(MODEL, vec![Message::user("Weather?")]).tools(vec![weather_tool()]);
    model(&server).chat(&request).await.unwrap();
    let seen = &server.requests()[0];
    let raw = String::from_utf8(seen.raw_body.clone()).unwrap();
    for refused in ["additionalProperties", "$ref", "$defs", "$schema"] {
        assert!(!raw.contains(refused), "{refused} reached the wire: {raw}");
    }
    assert_eq!(
        seen.body["tools"][0]["functionDeclarations"][0]["parameters"],
        json!({"type": "OBJECT", "required": ["city"], "properties": {
            "city": {"type": "STRING"},
            "unit": {"type": "STRING", "enum": ["celsius", "fahrenheit"], "nullable": true},
        }})
    );
    // A schema Gemini cannot take is refused before anything is sent.
    let map = Arc::new(ToolDefinition::new(
        "tag",
        "",
        json!({"type": "object", "properties": {"tags": {"type": "object", "additionalProperties": {"type": "string"}}}}),
    ));
    let err = model(&server).chat(&request.clone().tools(vec![map])).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::InvalidRequest { status: 400, message, .. } if message.contains("tool `tag`") && message.contains("/properties/tags")),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);
}

/// The first turn of the tool loop: a thought summary with its signature, text, and
/// two parallel calls, the first with a signature (as Gemini 3 answers).
fn first_turn() -> Value {
    response(
        json!([
            {"text": "The user wants two cities.", "thought": true, "thoughtSignature": "dGhvdWdodA=="},
            {"text": "Let me check both."},
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "Y2FsbDE="},
            {"functionCall": {"name": "get_weather", "args": {"city": "Rome", "unit": "celsius"}}},
        ]),
        "STOP",
        json!({"promptTokenCount": 40, "candidatesTokenCount": 20, "thoughtsTokenCount": 15, "cachedContentTokenCount": 8}),
    )
}

/// Answers the first request with [`first_turn`], and the second (which must send
/// both calls back with their results) with a text carrying a signature.
fn tool_loop(read: &gemini_api::Read) -> Reply {
    let contents = read.body["contents"].as_array().unwrap();
    match contents.len() {
        1 => answer(&first_turn(), read.stream),
        3 => {
            // The model's turn comes back part for part, each signature on its part.
            assert_eq!(
                contents[1],
                json!({"role": "model", "parts": [
                    {"text": "The user wants two cities.", "thought": true, "thoughtSignature": "dGhvdWdodA=="},
                    {"text": "Let me check both."},
                    {"functionCall": {"id": "call_0", "name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "Y2FsbDE="},
                    {"functionCall": {"id": "call_1", "name": "get_weather", "args": {"city": "Rome", "unit": "celsius"}}},
                ]})
            );
            assert_eq!(
                contents[2],
                json!({"role": "user", "parts": [
                    {"functionResponse": {"id": "call_0", "name": "get_weather", "response": {"result": {"temp": 21}}}},
                    {"functionResponse": {"id": "call_1", "name": "get_weather", "response": {"error": "no data for Rome"}}},
                ]})
            );
            let text =
                response(json!([{"text": "Paris is at 21°C.", "thoughtSignature": "ZW5k"}]), "STOP", usage(80, 6));
            answer(&text, read.stream)
        }
        5 => {
            assert_eq!(
                contents[3],
                json!({"role": "model", "parts": [{"text": "Paris is at 21°C.", "thoughtSignature": "ZW5k"}]})
            );
            answer(&response(json!([{"text": "You are welcome."}]), "STOP", usage(90, 4)), read.stream)
        }
        n => gemini_api::invalid(format!("unexpected conversation of {n} contents")),
    }
}

async fn run_tool_loop(stream: bool) {
    let server = imitation(Api::gemini(KEY).issued(["dGhvdWdodA==", "Y2FsbDE=", "ZW5k"]), tool_loop).await;
    let gemini = model(&server);
    let mut request =
        ChatRequest::new(MODEL, vec![Message::user("Weather in Paris and Rome?")]).tools(vec![weather_tool()]);
    let first =
        if stream { streamed(&gemini, &request).await.1.unwrap() } else { gemini.chat(&request).await.unwrap() };
    let signature = |s: &str| ContentBlock::Reasoning(Reasoning::new("gemini", "", json!({"thought_signature": s})));
    assert_eq!(
        first.message.content,
        vec![
            ContentBlock::Reasoning(Reasoning::new(
                "gemini",
                "The user wants two cities.",
                json!({"thought_signature": "dGhvdWdodA=="})
            )),
            ContentBlock::text("Let me check both."),
            signature("Y2FsbDE="),
            ContentBlock::ToolUse(ToolUse::new("call_0", "get_weather", json!({"city": "Paris"}))),
            ContentBlock::ToolUse(ToolUse::new("call_1", "get_weather", json!({"city": "Rome", "unit": "celsius"}))),
        ]
    );
    assert_eq!(first.stop_reason, StopReason::ToolUse);
    assert_eq!(
        first.usage,
        Usage {
            input_tokens: 32,
            output_tokens: 35,
            cache_read_input_tokens: 8,
            reasoning_output_tokens: 15,
            ..Usage::default()
        }
    );
    request.messages.push(Arc::new(first.message));
    request.messages.push(Arc::new(Message::tool_results([
        ToolResult { tool_use_id: "call_0".into(), content: "{\"temp\": 21}".into(), is_error: false },
        ToolResult { tool_use_id: "call_1".into(), content: "no data for Rome".into(), is_error: true },
    ])));
    let second =
        if stream { streamed(&gemini, &request).await.1.unwrap() } else { gemini.chat(&request).await.unwrap() };
    assert_eq!(second.message.content, vec![signature("ZW5k"), ContentBlock::text("Paris is at 21°C.")]);
    assert_eq!(second.stop_reason, StopReason::EndTurn);
    // The final answer goes back with its signature on its text.
    request.messages.push(Arc::new(second.message));
    request.messages.push(Arc::new(Message::user("Thanks.")));
    let third =
        if stream { streamed(&gemini, &request).await.1.unwrap() } else { gemini.chat(&request).await.unwrap() };
    assert_eq!(third.message.text(), "You are welcome.");
}

#[tokio::test]
async fn a_two_turn_tool_loop_returns_each_signature_on_its_part() {
    run_tool_loop(false).await;
}

#[tokio::test]
async fn a_streamed_two_turn_tool_loop_returns_each_signature_on_its_part() {
    run_tool_loop(true).await;
}

#[tokio::test]
async fn another_providers_history_is_sent_with_the_skip_signature() {
    let server = imitation(Api::gemini(KEY), |read| {
        let contents = read.body["contents"].as_array().unwrap();
        // The Anthropic thinking block is left out; the call gets the skip value.
        assert_eq!(contents[1], json!({"role": "model", "parts": [
            {"text": "Checking."},
            {"functionCall": {"id": "toolu_1", "name": "get_weather", "args": {"city": "Oslo"}}, "thoughtSignature": SKIP},
        ]}));
        answer(&response(json!([{"text": "Cold."}]), "STOP", usage(9, 1)), read.stream)
    })
    .await;
    let request = ChatRequest::new(
        MODEL,
        vec![
            Message::user("Weather in Oslo?"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Reasoning(Reasoning::new("anthropic", "Oslo.", json!({"signature": "EqQB"}))),
                    ContentBlock::text("Checking."),
                    ContentBlock::ToolUse(ToolUse::new("toolu_1", "get_weather", json!({"city": "Oslo"}))),
                ],
            },
            Message::tool_results([ToolResult {
                tool_use_id: "toolu_1".into(),
                content: "-3°C".into(),
                is_error: false,
            }]),
        ],
    )
    .tools(vec![weather_tool()]);
    assert_eq!(model(&server).chat(&request).await.unwrap().message.text(), "Cold.");
}

#[tokio::test]
async fn streaming_equals_non_streaming() {
    let server =
        imitation(Api::gemini(KEY).issued(["dGhvdWdodA==", "Y2FsbDE="]), |read| answer(&first_turn(), read.stream))
            .await;
    let gemini = model(&server);
    let request =
        ChatRequest::new(MODEL, vec![Message::user("Weather in Paris and Rome?")]).tools(vec![weather_tool()]);
    let plain = gemini.chat(&request).await.unwrap();
    let (events, streamed) = streamed(&gemini, &request).await;
    let streamed = streamed.unwrap();
    assert_eq!(streamed, plain);
    // The deltas add up to the blocks they name.
    let reasoning: String = events
        .iter()
        .filter_map(|e| if let StreamEvent::ReasoningDelta { index: 0, text } = e { Some(text.as_str()) } else { None })
        .collect();
    assert_eq!(reasoning, "The user wants two cities.");
    let text: String = events
        .iter()
        .filter_map(|e| if let StreamEvent::TextDelta { index: 1, text } = e { Some(text.as_str()) } else { None })
        .collect();
    assert_eq!(text, "Let me check both.");
    let starts: Vec<(usize, &str)> = events
        .iter()
        .filter_map(|e| {
            if let StreamEvent::ToolUseStart { index, id, .. } = e { Some((*index, id.as_str())) } else { None }
        })
        .collect();
    assert_eq!(starts, [(3, "call_0"), (4, "call_1")]);
    assert!(server.requests()[1].path.ends_with(":streamGenerateContent?alt=sse"));
}

#[tokio::test]
async fn images_are_inline_data_and_file_data() {
    let png = Image::base64("image/png", "iVBORw0KGgo=").unwrap();
    let server = imitation(Api::gemini(KEY).issued(["c2NyZWVu"]), |read| {
        let contents = read.body["contents"].as_array().unwrap();
        match contents.len() {
            1 => {
                assert_eq!(contents[0]["parts"], json!([
                    {"text": "What is this?"},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                    {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}},
                ]));
                let call = json!([{"functionCall": {"name": "screenshot", "args": {}}, "thoughtSignature": "c2NyZWVu"}]);
                answer(&response(call, "STOP", usage(300, 5)), read.stream)
            }
            _ => {
                // The tool's image follows its function response.
                assert_eq!(contents[2]["parts"], json!([
                    {"functionResponse": {"id": "call_0", "name": "screenshot", "response": {"result": "the screen"}}},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                ]));
                answer(&response(json!([{"text": "A cat."}]), "STOP", usage(600, 3)), read.stream)
            }
        }
    })
    .await;
    let screenshot =
        Arc::new(ToolDefinition::new("screenshot", "Takes one.", json!({"type": "object", "properties": {}})));
    let gemini = Gemini::new(KEY).base_url(server.url());
    let mut request = ChatRequest::new(
        MODEL,
        vec![Message::user_with_images(
            "What is this?",
            [png.clone(), Image::url("https://example.com/cat.jpg").unwrap()],
        )],
    )
    .tools(vec![screenshot]);
    let first = gemini.chat(&request).await.unwrap();
    request.messages.push(Arc::new(first.message));
    let mut results = Message::tool_results([ToolResult {
        tool_use_id: "call_0".into(),
        content: "the screen".into(),
        is_error: false,
    }]);
    results.content.push(ContentBlock::Image { source: png, tool_use_id: Some("call_0".into()) });
    request.messages.push(Arc::new(results));
    assert_eq!(gemini.chat(&request).await.unwrap().message.text(), "A cat.");
    // The tool without parameters was declared without any.
    assert_eq!(
        server.requests()[0].body["tools"],
        json!([{"functionDeclarations": [{"name": "screenshot", "description": "Takes one."}]}])
    );
}

#[tokio::test]
async fn structured_output_thinking_and_provider_options() {
    let server = imitation(Api::gemini(KEY), |read| {
        let config = &read.body["generationConfig"];
        assert_eq!(config["responseMimeType"], "application/json");
        assert_eq!(config["responseJsonSchema"]["required"], json!(["city"]));
        assert_eq!(config["thinkingConfig"], json!({"thinkingLevel": "LOW", "includeThoughts": true}));
        assert_eq!(config["seed"], 7);
        assert_eq!(
            read.body["safetySettings"],
            json!([{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "threshold": "BLOCK_ONLY_HIGH"}])
        );
        answer(&response(json!([{"text": "{\"city\": \"Paris\"}"}]), "STOP", usage(20, 6)), read.stream)
    })
    .await;
    let gemini = model(&server);
    assert!(gemini.structured_output());
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false});
    let request = ChatRequest::new(MODEL, vec![Message::user("Which city?")])
        .response_schema(ResponseSchema::new("answer", schema))
        .reasoning_effort(ReasoningEffort::Low)
        .provider_options(
            "gemini",
            json!({"safetySettings": [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "threshold": "BLOCK_ONLY_HIGH"}],
                   "generationConfig": {"seed": 7}}),
        );
    let response = gemini.chat(&request).await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&response.message.text()).unwrap(), json!({"city": "Paris"}));
}

#[tokio::test]
async fn finish_reasons() {
    let turn: Arc<Mutex<Value>> = Arc::new(Mutex::new(Value::Null));
    let current = turn.clone();
    let server = imitation(Api::gemini(KEY), move |read| answer(&current.lock().unwrap(), read.stream)).await;
    let gemini = model(&server);
    let request = ChatRequest::new(MODEL, vec![Message::user("Hi")]).tools(vec![weather_tool()]);
    let cases = [
        (response(json!([{"text": "Once upon"}]), "MAX_TOKENS", usage(1, 2)), StopReason::MaxTokens),
        (response(json!([{"text": "I cannot"}]), "SAFETY", usage(1, 2)), StopReason::Other("safety".into())),
        (response(json!([]), "RECITATION", usage(1, 0)), StopReason::Other("recitation".into())),
        (
            json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": usage(1, 0), "modelVersion": "m", "responseId": "r"}),
            StopReason::Other("prompt_blocked_safety".into()),
        ),
    ];
    for (body, stop) in cases {
        *turn.lock().unwrap() = body;
        let plain = gemini.chat(&request).await.unwrap();
        assert_eq!(plain.stop_reason, stop);
        assert_eq!(streamed(&gemini, &request).await.1.unwrap(), plain);
    }
    // A call Gemini could not parse comes back as a call with invalid input, which the
    // agent loop answers with an error the model reads.
    let mut malformed = response(json!([]), "MALFORMED_FUNCTION_CALL", usage(5, 0));
    malformed["candidates"][0]["finishMessage"] =
        json!("Malformed function call: print(default_api.get_weather(city=Paris))");
    *turn.lock().unwrap() = malformed;
    let plain = gemini.chat(&request).await.unwrap();
    assert_eq!(plain.stop_reason, StopReason::ToolUse);
    let call = plain.message.tool_uses().next().unwrap();
    assert_eq!((call.id.as_str(), call.name.as_str(), &call.input), ("call_0", "get_weather", &Value::Null));
    let bad = call.invalid_input.as_ref().unwrap();
    assert!(bad.raw.contains("default_api.get_weather(city=Paris)") && bad.error.contains("MALFORMED_FUNCTION_CALL"));
    let (events, streamed_response) = streamed(&gemini, &request).await;
    assert_eq!(streamed_response.unwrap(), plain);
    assert!(matches!(&events[0], StreamEvent::ToolUseStart { name, .. } if name == "get_weather"));
}

/// A model retrying per the default policy, its sleeps recorded instead of slept.
fn retrying(server: &Server, sleeps: &Arc<Mutex<Vec<Duration>>>) -> Gemini {
    let sleeps = sleeps.clone();
    Gemini::new(KEY).base_url(server.url()).__sleep_with(move |d| {
        sleeps.lock().unwrap().push(d);
        std::future::ready(())
    })
}

#[tokio::test]
async fn errors_are_typed_and_retried_by_class() {
    let request = ChatRequest::new(MODEL, vec![Message::user("Hi")]);
    let ok = response(json!([{"text": "Hi."}]), "STOP", usage(1, 1));
    let retry_info = |delay: &str| {
        Reply::json(
            429,
            json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota exceeded",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}]}}),
        )
    };

    // 400 INVALID_ARGUMENT: not retried.
    let sleeps = Arc::default();
    let server = Server::start(vec![error(400, "INVALID_ARGUMENT", "contents is not specified")]).await;
    let err = retrying(&server, &sleeps).chat(&request).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::InvalidRequest { status: 400, message, .. } if message == "contents is not specified"),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);

    // A wrong key: the Gemini API's 400 API_KEY_INVALID is an authentication error; 403 too.
    let server = imitation(Api::gemini(KEY), |_| unreachable!("the key is wrong")).await;
    let err = Gemini::new("wrong").base_url(server.url()).chat(&request).await.unwrap_err();
    assert!(matches!(err, LlmError::Authentication { provider: "gemini", status: 400, .. }), "{err:?}");
    let server = Server::start(vec![error(403, "PERMISSION_DENIED", "Permission denied on resource project p.")]).await;
    let err = retrying(&server, &sleeps).chat(&request).await.unwrap_err();
    assert!(matches!(err, LlmError::Authentication { status: 403, .. }) && !err.is_retryable());
    assert_eq!(server.requests().len(), 1);

    // 429 RESOURCE_EXHAUSTED: retried after the RetryInfo delay, then answered.
    let sleeps: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let server = Server::start(vec![retry_info("3s"), answer(&ok, false)]).await;
    assert_eq!(retrying(&server, &sleeps).chat(&request).await.unwrap().message.text(), "Hi.");
    assert_eq!(*sleeps.lock().unwrap(), [Duration::from_secs(3)]);
    // A delay longer than the policy waits for is returned at once, with the wait.
    let server = Server::start(vec![retry_info("120s")]).await;
    let err = retrying(&server, &sleeps).chat(&request).await.unwrap_err();
    assert!(
        matches!(err, LlmError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(120)),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);

    // 500 and 503 are retried (streams too, before they start).
    let sleeps: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let server = Server::start(vec![
        error(500, "INTERNAL", "An internal error has occurred."),
        error(503, "UNAVAILABLE", "The model is overloaded."),
        answer(&ok, true),
    ])
    .await;
    let (_, streamed_response) = streamed(&retrying(&server, &sleeps), &request).await;
    assert_eq!(streamed_response.unwrap().message.text(), "Hi.");
    assert_eq!(sleeps.lock().unwrap().len(), 2);
    let server = Server::start(vec![error(503, "UNAVAILABLE", "The model is overloaded.")]).await;
    let err = model(&server).chat(&request).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Server { status: 503, message, .. } if message == "The model is overloaded.")
            && err.is_retryable()
    );

    // A 200 body that is no GenerateContentResponse: malformed, not retried.
    let server = Server::start(vec![Reply::json(200, json!({"usageMetadata": usage(1, 1)}))]).await;
    let err = retrying(&server, &sleeps).chat(&request).await.unwrap_err();
    assert!(matches!(err, LlmError::MalformedResponse { provider: "gemini", .. }), "{err:?}");
    assert_eq!(server.requests().len(), 1);

    // An error object in a 200 body is the error of its code.
    let server = Server::start(vec![Reply::json(
        200,
        json!({"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}),
    )])
    .await;
    assert!(matches!(model(&server).chat(&request).await.unwrap_err(), LlmError::InvalidRequest { status: 400, .. }));
}

#[tokio::test]
async fn cut_streams_are_errors() {
    let request = ChatRequest::new(MODEL, vec![Message::user("Hi")]);
    let long = response(json!([{"text": "A long answer, cut off."}]), "STOP", usage(1, 9));
    let whole = gemini_api::sse(&long);
    // The stream ends before the chunk with the finish reason.
    let first_chunk = whole.split("\r\n\r\n").next().unwrap().to_owned() + "\r\n\r\n";
    let server = Server::start(vec![Reply::sse(first_chunk)]).await;
    let (events, result) = streamed(&model(&server), &request).await;
    assert!(!events.is_empty());
    assert!(
        matches!(&result, Err(LlmError::MalformedResponse { message, .. }) if message.contains("finishReason")),
        "{result:?}"
    );
    // The connection closes mid-body.
    let server = Server::start(vec![Reply::sse(whole).truncated()]).await;
    let (_, result) = streamed(&model(&server), &request).await;
    assert!(result.is_err());
    assert_eq!(server.requests().len(), 1);
    // An error chunk in the stream.
    let error_chunk =
        "data: {\"error\": {\"code\": 503, \"message\": \"overloaded\", \"status\": \"UNAVAILABLE\"}}\r\n\r\n";
    let server = Server::start(vec![Reply::sse(error_chunk)]).await;
    let (_, result) = streamed(&model(&server), &request).await;
    assert!(matches!(result, Err(LlmError::Server { status: 503, .. })), "{result:?}");
}
