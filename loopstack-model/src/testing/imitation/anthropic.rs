//! An imitation of the Anthropic Messages API (`POST /v1/messages`), from its
//! reference: the request's headers and fields, content blocks, extended thinking
//! and tool-use rules; replies as a message object or its event stream; errors as
//! `{"type": "error", "error": {"type", "message"}}` with the documented statuses.

use crate::testing::{API_KEY, Answer, Failure, Part, Reply, Request, Seen, SeenMessage, Turn};
use crate::{Role, StopReason};
use serde_json::{Value, json};

use super::{field, only_fields, pieces, string};

/// The top-level parameters of a Messages request.
const PARAMETERS: &[&str] = &[
    "model",
    "max_tokens",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "stream",
    "thinking",
    "metadata",
    "service_tier",
];

/// The Anthropic Messages API (`POST /v1/messages`), with its key ([`API_KEY`]) in
/// `x-api-key`; see the [module docs](self).
pub struct MessagesApi;

impl MessagesApi {
    fn read_message(&self, message: &Value, at: &str, thinking: bool, last: bool) -> Result<SeenMessage, String> {
        only_fields(message, &["role", "content"], at)?;
        let role = match string(message, "role", at)? {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => return Err(format!("{at}.role: `{other}` is neither user nor assistant")),
        };
        let content = field(message, "content", at)?;
        let mut parts = Vec::new();
        let blocks = match content {
            Value::String(text) => {
                parts.push(Part::Text(text.clone()));
                return Ok(SeenMessage::new(role, parts));
            }
            Value::Array(blocks) if !blocks.is_empty() => blocks,
            _ => return Err(format!("{at}.content: a string or a non-empty list of blocks")),
        };
        for (i, block) in blocks.iter().enumerate() {
            let at = format!("{at}.content.{i}");
            let kind = string(block, "type", &at)?;
            let allowed: &[&str] = match (kind, role) {
                ("text", _) => &["type", "text", "cache_control", "citations"],
                ("image", Role::User) => &["type", "source", "cache_control"],
                ("tool_result", Role::User) => &["type", "tool_use_id", "content", "is_error", "cache_control"],
                ("tool_use", Role::Assistant) => &["type", "id", "name", "input", "cache_control"],
                ("thinking", Role::Assistant) => &["type", "thinking", "signature"],
                ("redacted_thinking", Role::Assistant) => &["type", "data"],
                _ => return Err(format!("{at}: a `{kind}` block is not allowed in a {role} message")),
            };
            only_fields(block, allowed, &at)?;
            match kind {
                "text" => {
                    let text = string(block, "text", &at)?;
                    if text.is_empty() {
                        return Err(format!("{at}: text content blocks must be non-empty"));
                    }
                    parts.push(Part::Text(text.into()));
                }
                "image" => parts.push(read_image(field(block, "source", &at)?, &at)?),
                "tool_use" => {
                    let input = field(block, "input", &at)?;
                    if !input.is_object() {
                        return Err(format!("{at}.input: must be an object"));
                    }
                    let id = string(block, "id", &at)?.to_owned();
                    parts.push(Part::ToolCall {
                        id: Some(id),
                        name: string(block, "name", &at)?.into(),
                        input: input.clone(),
                    });
                }
                "tool_result" => {
                    let id = string(block, "tool_use_id", &at)?.to_owned();
                    let is_error = match block.get("is_error") {
                        None => false,
                        Some(Value::Bool(flag)) => *flag,
                        Some(_) => return Err(format!("{at}.is_error: must be a boolean")),
                    };
                    let mut images = Vec::new();
                    let content = match block.get("content") {
                        None => String::new(),
                        Some(Value::String(text)) => text.clone(),
                        Some(Value::Array(inner)) => {
                            let mut text = String::new();
                            for (j, item) in inner.iter().enumerate() {
                                let at = format!("{at}.content.{j}");
                                match string(item, "type", &at)? {
                                    "text" => text.push_str(string(item, "text", &at)?),
                                    "image" => images.push(read_image(field(item, "source", &at)?, &at)?),
                                    other => {
                                        return Err(format!("{at}: a `{other}` block is not allowed in a tool result"));
                                    }
                                }
                            }
                            text
                        }
                        Some(_) => return Err(format!("{at}.content: a string or a list of blocks")),
                    };
                    parts.push(Part::ToolResult { id: Some(id), content, is_error: Some(is_error) });
                    parts.extend(images);
                }
                "thinking" => {
                    string(block, "thinking", &at)?;
                    let signature = string(block, "signature", &at)?;
                    parts.push(Part::Reasoning { token: signature.into() });
                }
                "redacted_thinking" => parts.push(Part::Reasoning { token: string(block, "data", &at)?.into() }),
                _ => unreachable!(),
            }
        }
        // With thinking on, the assistant turn of a tool loop still going must begin
        // with its thinking ("Expected `thinking` or `redacted_thinking`, but found
        // `tool_use`").
        let calls = parts.iter().any(|p| matches!(p, Part::ToolCall { .. }));
        if thinking
            && role == Role::Assistant
            && calls
            && last
            && !matches!(parts.first(), Some(Part::Reasoning { .. }))
        {
            return Err(format!("{at}.content.0: expected `thinking` or `redacted_thinking`, but found another block"));
        }
        Ok(SeenMessage::new(role, parts))
    }
}

fn read_image(source: &Value, at: &str) -> Result<Part, String> {
    let at = format!("{at}.source");
    match string(source, "type", &at)? {
        "base64" => {
            only_fields(source, &["type", "media_type", "data"], &at)?;
            let media_type = string(source, "media_type", &at)?;
            if !["image/jpeg", "image/png", "image/gif", "image/webp"].contains(&media_type) {
                return Err(format!("{at}.media_type: `{media_type}` is not supported"));
            }
            Ok(Part::Image { media_type: media_type.into(), data: string(source, "data", &at)?.into() })
        }
        "url" => Ok(Part::ImageUrl(string(source, "url", &at)?.into())),
        other => Err(format!("{at}.type: `{other}` is not an image source")),
    }
}

/// Checks that each tool result answers a call of the assistant message just before
/// it, and that every such call is answered in the next message.
fn check_tool_loop(messages: &[SeenMessage]) -> Result<(), String> {
    for (i, pair) in messages.windows(2).enumerate() {
        let calls: Vec<&str> = pair[0]
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::ToolCall { id: Some(id), .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        let results: Vec<&str> = pair[1]
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::ToolResult { id: Some(id), .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        if let Some(stray) = results.iter().find(|r| !calls.contains(r)) {
            return Err(format!("messages.{}: unexpected `tool_use_id` {stray} found in `tool_result` blocks", i + 1));
        }
        if let Some(unanswered) = calls.iter().find(|c| !results.contains(c)) {
            return Err(format!(
                "messages.{}: `tool_use` ids were found without `tool_result` blocks: {unanswered}",
                i + 1
            ));
        }
    }
    Ok(())
}

impl crate::testing::Imitation for MessagesApi {
    fn read(&self, request: &Request) -> Result<Seen, String> {
        if request.method != "POST" || request.path != "/v1/messages" {
            return Err(format!("no route {} {}", request.method, request.path));
        }
        if request.header("x-api-key") != Some(API_KEY) {
            return Err(format!("x-api-key is {:?}, not the key", request.header("x-api-key")));
        }
        if request.header("anthropic-version") != Some("2023-06-01") {
            return Err(format!("anthropic-version is {:?}", request.header("anthropic-version")));
        }
        if !request.header("content-type").is_some_and(|t| t.starts_with("application/json")) {
            return Err(format!("content-type is {:?}", request.header("content-type")));
        }
        let body = &request.body;
        only_fields(body, PARAMETERS, "body")?;
        let mut seen = Seen::default();
        seen.model = string(body, "model", "body")?.to_owned();
        let max_tokens = field(body, "max_tokens", "body")?.as_u64().ok_or("max_tokens: must be a positive integer")?;
        seen.max_tokens = Some(max_tokens);
        seen.stream = match body.get("stream") {
            None => false,
            Some(Value::Bool(stream)) => *stream,
            Some(_) => return Err("stream: must be a boolean".into()),
        };
        if seen.stream && request.header("accept").is_some_and(|a| !a.contains("text/event-stream") && a != "*/*") {
            return Err(format!("a stream was asked for, accepting {:?}", request.header("accept")));
        }
        seen.system = match body.get("system") {
            None => None,
            Some(Value::String(system)) => Some(system.clone()),
            Some(Value::Array(blocks)) => {
                let mut text = String::new();
                for (i, block) in blocks.iter().enumerate() {
                    let at = format!("system.{i}");
                    only_fields(block, &["type", "text", "cache_control"], &at)?;
                    if string(block, "type", &at)? != "text" {
                        return Err(format!("{at}: system blocks are text"));
                    }
                    text.push_str(string(block, "text", &at)?);
                }
                Some(text)
            }
            Some(_) => return Err("system: a string or a list of text blocks".into()),
        };
        if let Some(thinking) = body.get("thinking") {
            match string(thinking, "type", "thinking")? {
                "enabled" => {
                    only_fields(thinking, &["type", "budget_tokens"], "thinking")?;
                    let budget =
                        field(thinking, "budget_tokens", "thinking")?.as_u64().ok_or("budget_tokens: an integer")?;
                    if budget < 1024 || budget >= max_tokens {
                        return Err(format!(
                            "thinking.budget_tokens: {budget} must be ≥ 1024 and less than max_tokens"
                        ));
                    }
                    seen.thinking = true;
                }
                "disabled" => only_fields(thinking, &["type"], "thinking")?,
                other => return Err(format!("thinking.type: `{other}`")),
            }
        }
        if let Some(tools) = body.get("tools") {
            for (i, tool) in tools.as_array().ok_or("tools: must be a list")?.iter().enumerate() {
                let at = format!("tools.{i}");
                only_fields(tool, &["name", "description", "input_schema", "cache_control"], &at)?;
                if field(tool, "input_schema", &at)?.get("type") != Some(&json!("object")) {
                    return Err(format!("{at}.input_schema.type: must be `object`"));
                }
                seen.tools.push(string(tool, "name", &at)?.into());
            }
        }
        let messages = field(body, "messages", "body")?.as_array().ok_or("messages: must be a list")?;
        if messages.is_empty() {
            return Err("messages: at least one message is required".into());
        }
        for (i, message) in messages.iter().enumerate() {
            let last_assistant = i + 2 == messages.len();
            seen.messages.push(self.read_message(message, &format!("messages.{i}"), seen.thinking, last_assistant)?);
        }
        if seen.messages[0].role != Role::User {
            return Err("messages.0: the first message must use the `user` role".into());
        }
        if let Some(i) = seen.messages.windows(2).position(|w| w[0].role == w[1].role) {
            return Err(format!("messages.{}: roles must alternate between `user` and `assistant`", i + 1));
        }
        check_tool_loop(&seen.messages)?;
        Ok(seen)
    }

    fn reply(&self, turn: &Turn, seen: &Seen) -> Reply {
        match turn {
            Turn::Answer(answer) if seen.stream => Reply::sse(sse(&events(answer, None))).pieces(&[17, 5, 64]),
            Turn::Answer(answer) => Reply::json(200, message_object(answer)),
            Turn::Hang(answer) => Reply::sse(sse(&events(answer, Some(1)))).then_hang(),
            Turn::Fail(failure) => fail(failure, seen),
        }
    }
}

fn stop_reason(stop: &StopReason) -> &str {
    stop.as_str()
}

fn usage(answer: &Answer) -> Value {
    let u = &answer.usage;
    json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_creation_input_tokens": u.cache_creation_input_tokens,
        "cache_read_input_tokens": u.cache_read_input_tokens,
    })
}

/// The content blocks of an answer.
fn blocks(answer: &Answer) -> Vec<Value> {
    let mut blocks = Vec::new();
    if let Some(thought) = &answer.reasoning {
        blocks.push(json!({"type": "thinking", "thinking": thought.text, "signature": thought.token}));
    }
    if !answer.text.is_empty() {
        blocks.push(json!({"type": "text", "text": answer.text, "citations": null}));
    }
    for call in &answer.calls {
        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}));
    }
    blocks
}

/// The message object of an answer.
fn message_object(answer: &Answer) -> Value {
    json!({
        "id": answer.id, "type": "message", "role": "assistant", "model": answer.model,
        "content": blocks(answer),
        "stop_reason": stop_reason(&answer.stop), "stop_sequence": null,
        "usage": usage(answer),
    })
}

/// The events of an answer's stream; with `cut`, only up to that many text deltas.
fn events(answer: &Answer, cut: Option<usize>) -> Vec<Value> {
    let start_usage = json!({
        "input_tokens": answer.usage.input_tokens, "output_tokens": 1,
        "cache_creation_input_tokens": answer.usage.cache_creation_input_tokens,
        "cache_read_input_tokens": answer.usage.cache_read_input_tokens,
    });
    let mut events = vec![json!({"type": "message_start", "message": {
        "id": answer.id, "type": "message", "role": "assistant", "model": answer.model, "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": start_usage,
    }})];
    let delta = |index: usize, delta: Value| json!({"type": "content_block_delta", "index": index, "delta": delta});
    for (index, block) in blocks(answer).into_iter().enumerate() {
        match block["type"].as_str() {
            Some("thinking") => {
                events.push(json!({"type": "content_block_start", "index": index,
                                   "content_block": {"type": "thinking", "thinking": "", "signature": ""}}));
                for piece in pieces(block["thinking"].as_str().unwrap_or_default(), 3) {
                    events.push(delta(index, json!({"type": "thinking_delta", "thinking": piece})));
                }
                events.push(delta(index, json!({"type": "signature_delta", "signature": block["signature"]})));
            }
            Some("text") => {
                events.push(json!({"type": "content_block_start", "index": index,
                                   "content_block": {"type": "text", "text": ""}}));
                events.push(json!({"type": "ping"}));
                let text = pieces(block["text"].as_str().unwrap_or_default(), 4);
                let take = cut.unwrap_or(text.len());
                for piece in text.into_iter().take(take) {
                    events.push(delta(index, json!({"type": "text_delta", "text": piece})));
                }
                if cut.is_some() {
                    return events;
                }
            }
            _ => {
                let mut start = block.clone();
                start["input"] = json!({});
                events.push(json!({"type": "content_block_start", "index": index, "content_block": start}));
                for piece in pieces(&block["input"].to_string(), 3) {
                    events.push(delta(index, json!({"type": "input_json_delta", "partial_json": piece})));
                }
            }
        }
        events.push(json!({"type": "content_block_stop", "index": index}));
    }
    events.push(json!({"type": "message_delta",
                       "delta": {"stop_reason": stop_reason(&answer.stop), "stop_sequence": null},
                       "usage": {"output_tokens": answer.usage.output_tokens}}));
    events.push(json!({"type": "message_stop"}));
    events
}

/// An event stream: `event: <type>` and `data: <json>` per event.
fn sse(events: &[Value]) -> String {
    events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("message"))).collect()
}

fn error(status: u16, kind: &str, message: &str) -> Reply {
    Reply::json(status, json!({"type": "error", "error": {"type": kind, "message": message}}))
        .header("request-id", "req_conformance")
}

fn fail(failure: &Failure, seen: &Seen) -> Reply {
    let message = failure.message();
    match failure {
        Failure::Authentication => error(401, "authentication_error", message),
        Failure::InvalidRequest => error(400, "invalid_request_error", message),
        Failure::RateLimited { retry_after } => {
            error(429, "rate_limit_error", message).header("retry-after", &retry_after.as_secs().to_string())
        }
        Failure::Overloaded => error(529, "overloaded_error", message),
        Failure::Server => error(500, "api_error", message),
        // A message without its content, stop reason and usage; a stream whose
        // first event is not JSON.
        Failure::Malformed if seen.stream => Reply::sse("event: message_start\ndata: {\"type\": \"message_sta\n\n"),
        Failure::Malformed => Reply::json(200, json!({"id": "msg_1", "type": "message", "role": "assistant"})),
        Failure::Truncated(answer) if seen.stream => Reply::sse(sse(&events(answer, Some(1)))).truncated(),
        Failure::Truncated(answer) => Reply::json(200, message_object(answer)).truncated(),
    }
}
