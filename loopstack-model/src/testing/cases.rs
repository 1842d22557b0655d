//! The cases of the provider conformance suite. Each returns `Err` with what it
//! expected and what happened at the first check that fails.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Value, json};

use super::suite::{Answer, Capability, Case, Context, Failure, MODEL, Part, Seen, Session, Thought, Turn};
use crate::error::LlmError;
use crate::image::Image;
use crate::message::{ContentBlock, Message, Reasoning, Role, StopReason, ToolResult, ToolUse, Usage};
use crate::model::{ChatModel, ChatRequest, ChatResponse, ReasoningEffort, ResponseSchema, StreamEvent};
use crate::tool::ToolDefinition;

/// The longest the suite waits for the imitation to see a request or a hang-up: a
/// bound on a wait that normally takes milliseconds, not a timing check.
const LIMIT: Duration = Duration::from_secs(20);

type Checked = Result<(), String>;

/// Fails the case with a message unless the condition holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

pub(super) async fn run(case: Case, ctx: &Context) -> Checked {
    match case {
        Case::Text => text(ctx).await,
        Case::Streaming => streaming(ctx).await,
        Case::ToolCalls => tool_calls(ctx).await,
        Case::ParallelCalls => parallel_calls(ctx).await,
        Case::Images => images(ctx, false).await,
        Case::ToolImages => images(ctx, true).await,
        Case::StructuredOutput => structured_output(ctx).await,
        Case::ReasoningRoundTrip => reasoning_round_trip(ctx).await,
        Case::Usage => usage(ctx).await,
        Case::AuthenticationError => {
            let expected = |e: &LlmError| matches!(e, LlmError::Authentication { status: 401 | 403, .. });
            refused(ctx, Failure::Authentication, "Authentication (HTTP 401 or 403)", expected).await
        }
        Case::InvalidRequestError => {
            let expected = |e: &LlmError| matches!(e, LlmError::InvalidRequest { status: 400, .. });
            refused(ctx, Failure::InvalidRequest, "InvalidRequest (HTTP 400)", expected).await
        }
        Case::RateLimitedError => {
            let wait = Duration::from_secs(7);
            let (class, expected): (_, fn(&LlmError) -> bool) = if ctx.has(Capability::RetryAfter) {
                (
                    "RateLimited with retry_after 7s",
                    |e| matches!(e, LlmError::RateLimited { retry_after: Some(d), .. } if *d == Duration::from_secs(7)),
                )
            } else {
                ("RateLimited (the API gives no wait)", |e| {
                    matches!(e, LlmError::RateLimited { retry_after: None, .. })
                })
            };
            retryable(ctx, Failure::RateLimited { retry_after: wait }, class, expected).await
        }
        Case::OverloadedError => {
            let expected =
                |e: &LlmError| matches!(e, LlmError::Overloaded { .. } | LlmError::Server { status: 500.., .. });
            retryable(ctx, Failure::Overloaded, "Overloaded (or Server with a 5xx status)", expected).await
        }
        Case::ServerError => {
            let expected = |e: &LlmError| matches!(e, LlmError::Server { status: 500, .. });
            retryable(ctx, Failure::Server, "Server (HTTP 500)", expected).await
        }
        Case::MalformedResponse => {
            let expected = |e: &LlmError| matches!(e, LlmError::MalformedResponse { .. });
            refused(ctx, Failure::Malformed, "MalformedResponse", expected).await
        }
        Case::TruncatedResponse => truncated(ctx).await,
        Case::RetryHints => retry_hints(ctx).await,
        Case::Cancellation => cancellation(ctx).await,
    }
}

// ---- requests and answers ------------------------------------------------------

fn hello() -> ChatRequest {
    ChatRequest::new(MODEL, vec![Message::user("Hello")]).system("Be brief.").max_tokens(256)
}

fn weather_tool() -> Arc<ToolDefinition> {
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "units": {"type": "array", "items": {"type": "string"}}},
        "required": ["city"],
    });
    Arc::new(ToolDefinition::new("get_weather", "Gets the weather of a city.", schema))
}

fn asking_weather() -> ChatRequest {
    ChatRequest::new(MODEL, vec![Message::user("Weather in Paris and Zürich?")])
        .system("Be brief.")
        .max_tokens(256)
        .tools(vec![weather_tool()])
}

fn paris() -> ToolUse {
    ToolUse::new("call_conf_a", "get_weather", json!({"city": "Paris"}))
}

fn zurich() -> ToolUse {
    ToolUse::new("call_conf_b", "get_weather", json!({"city": "Zürich", "units": ["°C"]}))
}

/// The conversation after `reply`, with a result for each of its calls (the second
/// an error).
fn with_results(request: &ChatRequest, reply: &Message) -> ChatRequest {
    let mut next = request.clone();
    next.messages.push(Arc::new(reply.clone()));
    let results = reply.tool_uses().enumerate().map(|(n, call)| ToolResult {
        tool_use_id: call.id.clone(),
        content: result_text(n).into(),
        is_error: n == 1,
    });
    next.messages.push(Arc::new(Message::tool_results(results)));
    next
}

fn result_text(n: usize) -> &'static str {
    if n == 0 { "18°C, sunny" } else { "the weather service is down" }
}

// ---- running a model -----------------------------------------------------------

async fn chat(session: &Session, request: &ChatRequest) -> Result<ChatResponse, String> {
    let result = session.model.chat(request).await;
    session.problems()?;
    result.map_err(|e| format!("the call failed: {e} ({e:?})"))
}

/// A stream's items: the events before `Done`, and how it ended.
struct Streamed {
    events: Vec<StreamEvent>,
    end: Result<ChatResponse, LlmError>,
}

async fn stream(session: &Session, request: &ChatRequest) -> Result<Streamed, String> {
    let mut items = session.model.stream(request);
    let mut events = Vec::new();
    let mut end = None;
    while let Some(item) = items.next().await {
        ensure!(end.is_none(), "the stream went on after it ended (with Done or an error): {item:?}");
        match item {
            Ok(StreamEvent::Done(response)) => end = Some(Ok(response)),
            Ok(event) => events.push(event),
            Err(error) => end = Some(Err(error)),
        }
    }
    drop(items);
    session.problems()?;
    let end = end.ok_or("the stream ended with neither Done nor an error")?;
    Ok(Streamed { events, end })
}

async fn streamed_response(
    session: &Session,
    request: &ChatRequest,
) -> Result<(Vec<StreamEvent>, ChatResponse), String> {
    let streamed = stream(session, request).await?;
    match streamed.end {
        Ok(response) => Ok((streamed.events, response)),
        Err(e) => Err(format!("the stream failed: {e} ({e:?})")),
    }
}

fn seen(session: &Session, n: usize) -> Result<Seen, String> {
    session.seen().get(n).cloned().ok_or_else(|| format!("the imitation saw no request {}", n + 1))
}

fn expect_requests(session: &Session, n: usize) -> Checked {
    let got = session.seen().len();
    ensure!(got == n, "expected {n} request(s) to the API, it got {got}");
    Ok(())
}

// ---- checking responses --------------------------------------------------------

/// The usage the provider should report for `answer`: the counts it lacks are zero.
fn expected_usage(ctx: &Context, usage: Usage) -> Usage {
    let mut expected = usage;
    if !ctx.has(Capability::CacheReadTokens) {
        expected.cache_read_input_tokens = 0;
    }
    if !ctx.has(Capability::CacheWriteTokens) {
        expected.cache_creation_input_tokens = 0;
    }
    if !ctx.has(Capability::ReasoningTokens) {
        expected.reasoning_output_tokens = 0;
    }
    expected
}

/// Checks a response against the answer it was given.
fn check_response(ctx: &Context, model: &dyn ChatModel, answer: &Answer, response: &ChatResponse) -> Checked {
    let content = &response.message.content;
    ensure!(
        response.message.role == Role::Assistant,
        "the response's role is {}, not assistant",
        response.message.role
    );
    let mut blocks = content.iter().peekable();
    if let Some(thought) = &answer.reasoning {
        let Some(ContentBlock::Reasoning(reasoning)) = blocks.next() else {
            return Err(format!("expected a reasoning block first, the content is {content:?}"));
        };
        ensure!(
            reasoning.provider == model.provider(),
            "the reasoning block names provider `{}`, the model is `{}`",
            reasoning.provider,
            model.provider()
        );
        ensure!(
            reasoning.text == thought.text,
            "the reasoning's text is {:?}, expected {:?}",
            reasoning.text,
            thought.text
        );
        ensure!(!reasoning.data.is_null(), "the reasoning block keeps nothing to send back (its data is null)");
    }
    if !answer.text.is_empty() {
        match blocks.next() {
            Some(ContentBlock::Text { text }) if *text == answer.text => {}
            other => return Err(format!("expected the text {:?}, found {other:?} in {content:?}", answer.text)),
        }
    }
    let calls: Vec<&ContentBlock> = blocks.collect();
    ensure!(
        calls.len() == answer.calls.len(),
        "expected {} tool call(s) after the text, found {calls:?}",
        answer.calls.len()
    );
    let mut ids = Vec::new();
    for (block, want) in calls.iter().zip(&answer.calls) {
        let ContentBlock::ToolUse(call) = block else {
            return Err(format!("expected the tool call {want:?}, found {block:?}"));
        };
        ensure!(call.name == want.name, "a call is to `{}`, expected `{}`", call.name, want.name);
        ensure!(call.input == want.input, "a call's input is {}, expected {}", call.input, want.input);
        ensure!(call.invalid_input.is_none(), "a call's input was refused: {:?}", call.invalid_input);
        if ctx.has(Capability::CallIds) {
            ensure!(call.id == want.id, "a call's id is {:?}, the API gave {:?}", call.id, want.id);
        }
        ensure!(!call.id.is_empty() && !ids.contains(&&call.id), "call ids must be distinct and not empty: {calls:?}");
        ids.push(&call.id);
    }
    ensure!(response.stop_reason == answer.stop, "stopped with {}, expected {}", response.stop_reason, answer.stop);
    let usage = expected_usage(ctx, answer.usage);
    ensure!(response.usage == usage, "the usage is {:?}, expected {usage:?}", response.usage);
    ensure!(
        response.model == answer.model || response.model == MODEL,
        "the response names model {:?}, expected the API's {:?} (or the request's)",
        response.model,
        answer.model
    );
    Ok(())
}

/// Checks that a stream's events add up to the response it ended with: text and
/// reasoning deltas to each block's text, a start and input deltas to each call.
fn check_events(events: &[StreamEvent], response: &ChatResponse) -> Checked {
    let content = &response.message.content;
    let mut texts: BTreeMap<usize, String> = BTreeMap::new();
    let mut thoughts: BTreeMap<usize, String> = BTreeMap::new();
    let mut starts: BTreeMap<usize, (String, String)> = BTreeMap::new();
    let mut inputs: BTreeMap<usize, String> = BTreeMap::new();
    for event in events {
        match event {
            StreamEvent::TextDelta { index, text } => texts.entry(*index).or_default().push_str(text),
            StreamEvent::ReasoningDelta { index, text } => thoughts.entry(*index).or_default().push_str(text),
            StreamEvent::ToolUseStart { index, id, name } => {
                let again = starts.insert(*index, (id.clone(), name.clone()));
                ensure!(again.is_none(), "block {index} started twice in the stream");
            }
            StreamEvent::ToolInputDelta { index, partial_json } => {
                ensure!(starts.contains_key(index), "input for block {index} came before its ToolUseStart");
                inputs.entry(*index).or_default().push_str(partial_json);
            }
            other => return Err(format!("an unexpected event before Done: {other:?}")),
        }
    }
    for (index, block) in content.iter().enumerate() {
        match block {
            ContentBlock::Text { text } => {
                let streamed = texts.remove(&index).unwrap_or_default();
                ensure!(
                    streamed == *text,
                    "the text deltas of block {index} add up to {streamed:?}, Done has {text:?}"
                );
            }
            ContentBlock::Reasoning(reasoning) => {
                let streamed = thoughts.remove(&index).unwrap_or_default();
                ensure!(
                    streamed == reasoning.text,
                    "the reasoning deltas of block {index} add up to {streamed:?}, Done has {:?}",
                    reasoning.text
                );
            }
            ContentBlock::ToolUse(call) => {
                let Some((id, name)) = starts.remove(&index) else {
                    return Err(format!("no ToolUseStart for the call at block {index}: {call:?}"));
                };
                ensure!(id == call.id && name == call.name, "block {index} started as {id}/{name}, Done has {call:?}");
                let json = inputs.remove(&index).unwrap_or_default();
                let input: Value = if json.trim().is_empty() {
                    json!({})
                } else {
                    serde_json::from_str(&json)
                        .map_err(|e| format!("the input deltas of block {index} ({json:?}) are not JSON: {e}"))?
                };
                ensure!(
                    input == call.input,
                    "the input deltas of block {index} add up to {input}, Done has {}",
                    call.input
                );
            }
            _ => {}
        }
    }
    let stray: Vec<usize> = texts.keys().chain(thoughts.keys()).chain(starts.keys()).copied().collect();
    ensure!(stray.is_empty(), "deltas for blocks {stray:?}, which Done does not have as such: {content:?}");
    Ok(())
}

/// Checks that a streamed response equals the non-streamed one.
fn same_response(streamed: &ChatResponse, plain: &ChatResponse) -> Checked {
    ensure!(
        streamed.message == plain.message,
        "the streamed message differs from the plain one:\n  streamed {:?}\n  plain    {:?}",
        streamed.message,
        plain.message
    );
    ensure!(
        streamed.stop_reason == plain.stop_reason,
        "stop reasons differ: {} streamed, {} plain",
        streamed.stop_reason,
        plain.stop_reason
    );
    ensure!(streamed.usage == plain.usage, "usage differs: {:?} streamed, {:?} plain", streamed.usage, plain.usage);
    Ok(())
}

fn check_stream_seen(ctx: &Context, seen: &Seen) -> Checked {
    let want = ctx.has(Capability::Streaming);
    ensure!(
        seen.stream == want,
        "the streamed call's request {} a stream",
        if seen.stream { "asked for" } else { "did not ask for" }
    );
    Ok(())
}

// ---- the cases -----------------------------------------------------------------

async fn text(ctx: &Context) -> Checked {
    let answer = Answer::text("Bonjour ! ☀️ Il fait beau. \"Quoted\" \\ and a\nnewline.");
    let cut = Answer { stop: StopReason::MaxTokens, ..Answer::text("The answer is cut") };
    let session = ctx.start(vec![Turn::Answer(answer.clone()), Turn::Answer(cut.clone())], 0).await;
    let response = chat(&session, &hello()).await?;
    check_response(ctx, &*session.model, &answer, &response)?;
    let seen = seen(&session, 0)?;
    ensure!(seen.model == MODEL, "the request names model {:?}, expected {MODEL:?}", seen.model);
    ensure!(!seen.stream, "a plain call asked for a stream");
    ensure!(seen.system.as_deref() == Some("Be brief."), "the system prompt sent is {:?}", seen.system);
    ensure!(seen.max_tokens == Some(256), "the token limit sent is {:?}, expected 256", seen.max_tokens);
    let user = [Part::Text("Hello".into())];
    ensure!(
        seen.messages.len() == 1 && seen.messages[0].role == Role::User && seen.messages[0].parts == user,
        "the messages sent are {:?}, expected one user message saying Hello",
        seen.messages
    );
    ensure!(seen.tools.is_empty() && seen.response_schema.is_none(), "tools or a schema were sent: {seen:?}");
    let response = chat(&session, &hello()).await?;
    check_response(ctx, &*session.model, &cut, &response)?;
    session.finish()
}

async fn streaming(ctx: &Context) -> Checked {
    let answer = Answer::text("Bonjour ! ☀️ Il fait beau à Paris, 18 °C, et demain aussi. ".repeat(3));
    let turns = vec![Turn::Answer(answer.clone()), Turn::Answer(answer.clone())];
    let session = ctx.start(turns, 0).await;
    let plain = chat(&session, &hello()).await?;
    check_response(ctx, &*session.model, &answer, &plain)?;
    let (events, streamed) = streamed_response(&session, &hello()).await?;
    check_stream_seen(ctx, &seen(&session, 1)?)?;
    ensure!(!events.is_empty(), "the stream had no events before Done");
    check_events(&events, &streamed)?;
    same_response(&streamed, &plain)?;
    session.finish()
}

async fn tool_calls(ctx: &Context) -> Checked {
    let first = Answer { text: "Let me check.".into(), ..Answer::calls([paris()]) };
    let then = Answer::text("Sunny in Paris.");
    let session = ctx.start(vec![Turn::Answer(first.clone()), Turn::Answer(then.clone())], 0).await;
    let request = asking_weather();
    let response = chat(&session, &request).await?;
    check_response(ctx, &*session.model, &first, &response)?;
    let offered = seen(&session, 0)?;
    ensure!(offered.tools == ["get_weather"], "the tools offered are {:?}, expected [get_weather]", offered.tools);
    let next = with_results(&request, &response.message);
    let answered = chat(&session, &next).await?;
    check_response(ctx, &*session.model, &then, &answered)?;
    let sent = seen(&session, 1)?;
    check_calls_sent_back(&sent, &response.message)?;
    session.finish()
}

/// Checks that the second request carried the assistant's text and calls and a
/// result for each call, in order.
fn check_calls_sent_back(seen: &Seen, reply: &Message) -> Checked {
    let text = reply.text();
    if !text.is_empty() {
        let found =
            seen.messages.iter().any(|m| m.role == Role::Assistant && m.parts.contains(&Part::Text(text.clone())));
        ensure!(found, "the assistant's text {text:?} was not sent back: {:?}", seen.messages);
    }
    let calls: Vec<(&Option<String>, &String, &Value)> = seen
        .parts()
        .filter_map(|p| match p {
            Part::ToolCall { id, name, input } => Some((id, name, input)),
            _ => None,
        })
        .collect();
    let expected: Vec<&ToolUse> = reply.tool_uses().collect();
    ensure!(
        calls.len() == expected.len(),
        "{} call(s) were sent back, expected {}: {:?}",
        calls.len(),
        expected.len(),
        seen.messages
    );
    for ((id, name, input), want) in calls.iter().zip(&expected) {
        ensure!(
            **name == want.name && **input == want.input,
            "the call sent back is {name}({input}), expected {want:?}"
        );
        if let Some(id) = id {
            ensure!(*id == want.id, "the call sent back has id {id:?}, expected {:?}", want.id);
        }
    }
    let results: Vec<(&Option<String>, &String, &Option<bool>)> = seen
        .parts()
        .filter_map(|p| match p {
            Part::ToolResult { id, content, is_error } => Some((id, content, is_error)),
            _ => None,
        })
        .collect();
    ensure!(
        results.len() == expected.len(),
        "{} result(s) were sent, expected {}: {:?}",
        results.len(),
        expected.len(),
        seen.messages
    );
    for (n, ((id, content, is_error), call)) in results.iter().zip(&expected).enumerate() {
        ensure!(
            content.contains(result_text(n)),
            "result {n} sent is {content:?}, expected it to say {:?}",
            result_text(n)
        );
        if let Some(id) = id {
            ensure!(*id == call.id, "result {n} answers {id:?}, expected {:?}", call.id);
        }
        if let Some(flag) = is_error {
            ensure!(*flag == (n == 1), "result {n} is sent with is_error {flag}");
        }
    }
    Ok(())
}

async fn parallel_calls(ctx: &Context) -> Checked {
    let calls = Answer::calls([paris(), zurich()]);
    let then = Answer::text("Sunny in Paris; Zürich's weather is unknown.");
    let turns = vec![Turn::Answer(calls.clone()), Turn::Answer(calls.clone()), Turn::Answer(then.clone())];
    let session = ctx.start(turns, 0).await;
    let request = asking_weather();
    let plain = chat(&session, &request).await?;
    check_response(ctx, &*session.model, &calls, &plain)?;
    let (events, streamed) = streamed_response(&session, &request).await?;
    check_stream_seen(ctx, &seen(&session, 1)?)?;
    check_events(&events, &streamed)?;
    if ctx.has(Capability::CallIds) {
        same_response(&streamed, &plain)?;
    } else {
        check_response(ctx, &*session.model, &calls, &streamed)?;
    }
    let next = with_results(&request, &plain.message);
    let answered = chat(&session, &next).await?;
    check_response(ctx, &*session.model, &then, &answered)?;
    check_calls_sent_back(&seen(&session, 2)?, &plain.message)?;
    session.finish()
}

/// A 1x1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
/// A 1x1 GIF.
const GIF: &str = "R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7";

async fn images(ctx: &Context, tool_images: bool) -> Checked {
    let image =
        |media_type: &str, data: &str| Image::base64(media_type, data).map_err(|e| format!("a test image: {e}"));
    let shown = image("image/png", PNG)?;
    let mut messages = vec![Message {
        role: Role::User,
        content: vec![
            ContentBlock::text("What is in this picture?"),
            ContentBlock::Image { source: shown, tool_use_id: None },
        ],
    }];
    if tool_images {
        let call = ToolUse::new("call_conf_photo", "take_photo", json!({}));
        messages.push(Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] });
        messages.push(Message {
            role: Role::User,
            content: vec![
                ContentBlock::ToolResult(ToolResult {
                    tool_use_id: "call_conf_photo".into(),
                    content: "Here is the photo.".into(),
                    is_error: false,
                }),
                ContentBlock::Image { source: image("image/gif", GIF)?, tool_use_id: Some("call_conf_photo".into()) },
            ],
        });
    }
    let photo =
        Arc::new(ToolDefinition::new("take_photo", "Takes a photo.", json!({"type": "object", "properties": {}})));
    let request = ChatRequest::new(MODEL, messages).max_tokens(256).tools(vec![photo]);
    let answer = Answer::text("A single pixel.");
    let session = ctx.start(vec![Turn::Answer(answer.clone())], 0).await;
    let response = chat(&session, &request).await?;
    check_response(ctx, &*session.model, &answer, &response)?;
    let seen = seen(&session, 0)?;
    let first_user =
        seen.messages.first().filter(|m| m.role == Role::User).ok_or("the first message sent is not the user's")?;
    let png = Part::Image { media_type: "image/png".into(), data: PNG.into() };
    ensure!(
        first_user.parts.contains(&png),
        "the user's image was not sent as image/png with its data: {:?}",
        first_user.parts
    );
    ensure!(
        first_user.parts.contains(&Part::Text("What is in this picture?".into())),
        "the user's text was not sent beside the image: {:?}",
        first_user.parts
    );
    if tool_images {
        let gif = Part::Image { media_type: "image/gif".into(), data: GIF.into() };
        let later: Vec<&Part> = seen.messages.iter().skip(2).flat_map(|m| &m.parts).collect();
        ensure!(later.contains(&&gif), "the tool's image was not sent after its call: {:?}", seen.messages);
    }
    session.finish()
}

async fn structured_output(ctx: &Context) -> Checked {
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "temperature_c": {"type": "number"}},
        "required": ["city", "temperature_c"],
        "additionalProperties": false,
    });
    let typed = json!({"city": "Paris", "temperature_c": 21.5});
    let answer = Answer::text(typed.to_string());
    let session = ctx.start(vec![Turn::Answer(answer.clone())], 0).await;
    let request = hello().response_schema(ResponseSchema::new("weather_report", schema.clone()));
    let response = chat(&session, &request).await?;
    check_response(ctx, &*session.model, &answer, &response)?;
    let seen = seen(&session, 0)?;
    if session.model.structured_output() {
        ensure!(
            seen.response_schema.as_ref() == Some(&schema),
            "the schema sent is {:?}, expected {schema}",
            seen.response_schema
        );
        let parsed: Value =
            serde_json::from_str(&response.message.text()).map_err(|e| format!("the typed answer is not JSON: {e}"))?;
        ensure!(parsed == typed, "the typed answer is {parsed}, expected {typed}");
    } else {
        ensure!(
            seen.response_schema.is_none(),
            "the model says it has no structured output, yet sent a schema: {:?}",
            seen.response_schema
        );
    }
    session.finish()
}

async fn reasoning_round_trip(ctx: &Context) -> Checked {
    let token = "EqQBCkgIARABGAIiQK/opaque+token/with=padding==";
    let thought = Thought::new("The user wants Paris; get_weather answers that.", token);
    let first = Answer { reasoning: Some(thought.clone()), text: "Checking.".into(), ..Answer::calls([paris()]) };
    let then = Answer::text("Sunny in Paris.");
    let turns = vec![Turn::Answer(first.clone()), Turn::Answer(first.clone()), Turn::Answer(then.clone())];
    let session = ctx.start(turns, 0).await;
    let mut request = ChatRequest::new(MODEL, vec![Message::user("Weather in Paris?")])
        .tools(vec![weather_tool()])
        .reasoning_effort(ReasoningEffort::Low);
    request.settings.max_tokens = None;
    let plain = chat(&session, &request).await?;
    check_response(ctx, &*session.model, &first, &plain)?;
    ensure!(seen(&session, 0)?.thinking, "the request did not ask the model to reason (effort low)");
    let (events, streamed) = streamed_response(&session, &request).await?;
    check_events(&events, &streamed)?;
    let thought_streamed = events.iter().any(|e| matches!(e, StreamEvent::ReasoningDelta { .. }));
    ensure!(thought_streamed, "the stream had no ReasoningDelta events");
    same_response(&streamed, &plain)?;
    // Back with the reply, and a reasoning block of another provider that must not be sent.
    let mut reply = plain.message.clone();
    reply.content.insert(
        0,
        ContentBlock::Reasoning(Reasoning::new("another-provider", "elsewhere", json!({"token": "foreign"}))),
    );
    let next = with_results(&request, &reply);
    let answered = chat(&session, &next).await?;
    check_response(ctx, &*session.model, &then, &answered)?;
    let sent = seen(&session, 2)?;
    ensure!(
        sent.reasoning_tokens() == [token],
        "the reasoning tokens sent back are {:?}, expected exactly [{token:?}] (and not another provider's)",
        sent.reasoning_tokens()
    );
    let assistant =
        sent.messages.iter().find(|m| m.role == Role::Assistant).ok_or("no assistant message was sent back")?;
    let position = |p: fn(&Part) -> bool| assistant.parts.iter().position(p);
    let reasoning_at = position(|p| matches!(p, Part::Reasoning { .. }));
    let call_at = position(|p| matches!(p, Part::ToolCall { .. }));
    ensure!(
        matches!((reasoning_at, call_at), (Some(r), Some(c)) if r < c),
        "the reasoning must come back before the call it preceded: {:?}",
        assistant.parts
    );
    session.finish()
}

async fn usage(ctx: &Context) -> Checked {
    let usage = Usage {
        input_tokens: 1200,
        output_tokens: 345,
        cache_creation_input_tokens: 300,
        cache_read_input_tokens: 2048,
        reasoning_output_tokens: 120,
    };
    let answer = Answer { usage, ..Answer::text("Counted.") };
    let session = ctx.start(vec![Turn::Answer(answer.clone()), Turn::Answer(answer.clone())], 0).await;
    let plain = chat(&session, &hello()).await?;
    check_response(ctx, &*session.model, &answer, &plain)?;
    let (_, streamed) = streamed_response(&session, &hello()).await?;
    check_response(ctx, &*session.model, &answer, &streamed)?;
    session.finish()
}

/// Checks an error's class, retryability and message.
fn check_error(
    error: &LlmError,
    failure: &Failure,
    class: &str,
    expected: fn(&LlmError) -> bool,
    retryable: bool,
) -> Checked {
    ensure!(expected(error), "expected {class}, got {error} ({error:?})");
    ensure!(
        error.is_retryable() == retryable,
        "{error:?} says is_retryable() = {}, expected {retryable}",
        error.is_retryable()
    );
    let message = failure.message();
    ensure!(error.to_string().contains(message), "the error does not carry the API's message {message:?}: {error}");
    Ok(())
}

/// A failure not retried: with retries allowed, one plain and one streamed call
/// each fail with the class, after one request each.
async fn refused(ctx: &Context, failure: Failure, class: &str, expected: fn(&LlmError) -> bool) -> Checked {
    let session = ctx.start(vec![Turn::Fail(failure.clone()), Turn::Fail(failure.clone())], 2).await;
    match session.model.chat(&hello()).await {
        Ok(response) => return Err(format!("expected {class}, the call answered {response:?}")),
        Err(error) => check_error(&error, &failure, class, expected, false)?,
    }
    session.problems()?;
    expect_requests(&session, 1)?;
    let streamed = stream(&session, &hello()).await?;
    match streamed.end {
        Ok(response) => return Err(format!("expected {class}, the stream answered {response:?}")),
        Err(error) => check_error(&error, &failure, class, expected, false)?,
    }
    expect_requests(&session, 2)?;
    ensure!(
        session.setup.slept().is_empty(),
        "a failure not to be retried was retried: slept {:?}",
        session.setup.slept()
    );
    session.finish()
}

/// A retryable failure, once retries ran out (none allowed): a plain and a streamed
/// call fail with the class.
async fn retryable(ctx: &Context, failure: Failure, class: &str, expected: fn(&LlmError) -> bool) -> Checked {
    let session = ctx.start(vec![Turn::Fail(failure.clone()), Turn::Fail(failure.clone())], 0).await;
    match session.model.chat(&hello()).await {
        Ok(response) => return Err(format!("expected {class}, the call answered {response:?}")),
        Err(error) => check_error(&error, &failure, class, expected, true)?,
    }
    session.problems()?;
    let streamed = stream(&session, &hello()).await?;
    match streamed.end {
        Ok(response) => return Err(format!("expected {class}, the stream answered {response:?}")),
        Err(error) => check_error(&error, &failure, class, expected, true)?,
    }
    expect_requests(&session, 2)?;
    session.finish()
}

async fn truncated(ctx: &Context) -> Checked {
    let answer = Answer::text("This answer is cut off before its end, mid-sentence.");
    let turns = vec![Turn::Fail(Failure::Truncated(answer.clone())), Turn::Fail(Failure::Truncated(answer))];
    let session = ctx.start(turns, 2).await;
    let cut = |e: &LlmError| matches!(e, LlmError::Connection { .. } | LlmError::MalformedResponse { .. });
    match session.model.chat(&hello()).await {
        Ok(response) => return Err(format!("a cut-off body was answered as {response:?}")),
        Err(error) => ensure!(cut(&error), "expected a Connection or MalformedResponse error, got {error:?}"),
    }
    session.problems()?;
    expect_requests(&session, 1).map_err(|e| format!("a body cut off after success must not be sent again: {e}"))?;
    let streamed = stream(&session, &hello()).await?;
    match streamed.end {
        Ok(response) => return Err(format!("a cut-off stream was answered as {response:?}")),
        Err(error) => {
            ensure!(cut(&error), "expected the stream to end in a Connection or MalformedResponse error, got {error:?}")
        }
    }
    expect_requests(&session, 2).map_err(|e| format!("a stream that started must not be sent again: {e}"))?;
    session.finish()
}

async fn retry_hints(ctx: &Context) -> Checked {
    let recorded = ctx.has(Capability::RecordedSleeps);
    // Without a wait from the API, a rate limit is retried after a backoff.
    let hinted = ctx.has(Capability::RetryAfter);
    let wait = Duration::from_secs(if recorded { 7 } else { 1 });
    let answer = Answer::text("At last.");
    let turns = vec![
        Turn::Fail(Failure::RateLimited { retry_after: wait }),
        Turn::Fail(Failure::Overloaded),
        Turn::Fail(Failure::Server),
        Turn::Answer(answer.clone()),
    ];
    let session = ctx.start(turns, 3).await;
    let response = chat(&session, &hello()).await?;
    check_response(ctx, &*session.model, &answer, &response)?;
    expect_requests(&session, 4)?;
    let slept = session.setup.slept();
    if recorded {
        ensure!(slept.len() == 3, "expected 3 retry delays, the model slept {slept:?}");
        if hinted {
            ensure!(slept[0] == wait, "the first retry waited {:?}, the API asked for {wait:?}", slept[0]);
        }
        let unhinted = if hinted { &slept[1..] } else { &slept[..] };
        ensure!(unhinted.iter().all(|d| !d.is_zero()), "a retry without a hint waited no time: {slept:?}");
    }
    // A stream is retried too, before it starts.
    drop(session);
    let turns = vec![Turn::Fail(Failure::RateLimited { retry_after: wait }), Turn::Answer(answer.clone())];
    let session = ctx.start(turns, 1).await;
    let (_, streamed) = streamed_response(&session, &hello()).await?;
    check_response(ctx, &*session.model, &answer, &streamed)?;
    if recorded && hinted {
        ensure!(
            session.setup.slept() == [wait],
            "the stream's retry waited {:?}, expected [{wait:?}]",
            session.setup.slept()
        );
    }
    session.finish()
}

async fn cancellation(ctx: &Context) -> Checked {
    let answer = Answer::text("A long answer that never ends, as far as the client knows.");
    let session = ctx.start(vec![Turn::Hang(answer.clone()), Turn::Hang(answer)], 0).await;
    let model = session.model.clone();
    let call = tokio::spawn(async move { model.chat(&hello()).await });
    ensure!(session.arrived(1, LIMIT).await, "the call's request did not arrive within {LIMIT:?}");
    call.abort();
    let _ = call.await;
    ensure!(session.server.hung_up(1, LIMIT).await, "the call was dropped, but its connection stayed open ({LIMIT:?})");
    let request = hello();
    let mut events = session.model.stream(&request);
    match events.next().await {
        Some(Ok(StreamEvent::TextDelta { .. })) => {}
        other => return Err(format!("expected the stream's first text before it hangs, got {other:?}")),
    }
    drop(events);
    ensure!(
        session.server.hung_up(2, LIMIT).await,
        "the stream was dropped mid-answer, but its connection stayed open ({LIMIT:?})"
    );
    check_stream_seen(ctx, &seen(&session, 1)?)?;
    session.finish()
}
