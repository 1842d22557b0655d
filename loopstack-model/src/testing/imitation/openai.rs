//! An imitation of OpenAI Chat Completions (`POST /v1/chat/completions`), from its
//! reference: the request's fields and message roles, tool calls and the `tool`
//! messages answering them, image content parts, `response_format`; replies as a
//! `chat.completion` object or `chat.completion.chunk`s ending in `[DONE]`; errors as
//! `{"error": {"message", "type", "param", "code"}}` with the documented statuses.

use crate::testing::{API_KEY, Answer, Failure, Part, Reply, Request, Seen, SeenMessage, Turn};
use crate::{Role, StopReason};
use serde_json::{Value, json};

use super::{field, only_fields, pieces, string};

/// The request parameters of Chat Completions.
const PARAMETERS: &[&str] = &[
    "model",
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "stream",
    "stream_options",
    "response_format",
    "reasoning_effort",
    "prompt_cache_key",
    "seed",
    "user",
    "n",
    "store",
    "metadata",
    "service_tier",
];

/// OpenAI Chat Completions (`POST /v1/chat/completions`) for the suite, with its
/// key ([`API_KEY`]) as a bearer token; see the [module docs](self).
pub struct ChatCompletions;

fn read_content(content: &Value, at: &str) -> Result<Vec<Part>, String> {
    match content {
        Value::String(text) => Ok(vec![Part::Text(text.clone())]),
        Value::Array(items) => {
            let mut parts = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let at = format!("{at}.{i}");
                match string(item, "type", &at)? {
                    "text" => {
                        only_fields(item, &["type", "text"], &at)?;
                        parts.push(Part::Text(string(item, "text", &at)?.into()));
                    }
                    "image_url" => {
                        only_fields(item, &["type", "image_url"], &at)?;
                        let image = field(item, "image_url", &at)?;
                        only_fields(image, &["url", "detail"], &at)?;
                        let url = string(image, "url", &format!("{at}.image_url"))?;
                        parts.push(match url.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,")) {
                            Some((media_type, data)) => {
                                Part::Image { media_type: media_type.into(), data: data.into() }
                            }
                            None if url.starts_with("https://") || url.starts_with("http://") => {
                                Part::ImageUrl(url.into())
                            }
                            None => return Err(format!("{at}.image_url.url: neither a URL nor a base64 data URL")),
                        });
                    }
                    other => return Err(format!("{at}.type: `{other}` is not a user content part")),
                }
            }
            Ok(parts)
        }
        _ => Err(format!("{at}: a string or a list of content parts")),
    }
}

impl crate::testing::Imitation for ChatCompletions {
    fn read(&self, request: &Request) -> Result<Seen, String> {
        if request.method != "POST" || request.path != "/v1/chat/completions" {
            return Err(format!("no route {} {}", request.method, request.path));
        }
        if request.header("authorization") != Some(&format!("Bearer {API_KEY}")) {
            return Err("incorrect API key provided (authorization is not `Bearer <key>`)".into());
        }
        if !request.header("content-type").is_some_and(|t| t.starts_with("application/json")) {
            return Err(format!("content-type is {:?}", request.header("content-type")));
        }
        let body = &request.body;
        only_fields(body, PARAMETERS, "body")?;
        let mut seen = Seen::default();
        seen.model = string(body, "model", "body")?.to_owned();
        seen.stream = match body.get("stream") {
            None => false,
            Some(Value::Bool(stream)) => *stream,
            Some(_) => return Err("stream: must be a boolean".into()),
        };
        if let Some(options) = body.get("stream_options") {
            if !seen.stream {
                return Err("stream_options: only allowed when `stream` is true".into());
            }
            only_fields(options, &["include_usage", "include_obfuscation"], "stream_options")?;
        }
        seen.max_tokens = match (body.get("max_tokens"), body.get("max_completion_tokens")) {
            (Some(_), Some(_)) => return Err("max_tokens and max_completion_tokens: give one".into()),
            (Some(n), None) | (None, Some(n)) => Some(n.as_u64().ok_or("the token limit must be an integer")?),
            (None, None) => None,
        };
        if let Some(effort) = body.get("reasoning_effort") {
            let effort = effort.as_str().ok_or("reasoning_effort: a string")?;
            if !["none", "minimal", "low", "medium", "high", "xhigh"].contains(&effort) {
                return Err(format!("reasoning_effort: `{effort}`"));
            }
            seen.thinking = effort != "none";
        }
        if let Some(format) = body.get("response_format") {
            match string(format, "type", "response_format")? {
                "json_schema" => {
                    let schema = field(format, "json_schema", "response_format")?;
                    only_fields(schema, &["name", "description", "schema", "strict"], "response_format.json_schema")?;
                    let name = string(schema, "name", "response_format.json_schema")?;
                    let valid = (1..=64).contains(&name.len())
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                    if !valid {
                        return Err(format!(
                            "response_format.json_schema.name: `{name}` must match ^[a-zA-Z0-9_-]{{1,64}}$"
                        ));
                    }
                    seen.response_schema = schema.get("schema").cloned();
                }
                "json_object" | "text" => {}
                other => return Err(format!("response_format.type: `{other}`")),
            }
        }
        if let Some(tools) = body.get("tools") {
            for (i, tool) in tools.as_array().ok_or("tools: must be a list")?.iter().enumerate() {
                let at = format!("tools.{i}");
                only_fields(tool, &["type", "function"], &at)?;
                if string(tool, "type", &at)? != "function" {
                    return Err(format!("{at}.type: must be `function`"));
                }
                let function = field(tool, "function", &at)?;
                only_fields(function, &["name", "description", "parameters", "strict"], &format!("{at}.function"))?;
                seen.tools.push(string(function, "name", &format!("{at}.function"))?.into());
            }
        }
        let messages = field(body, "messages", "body")?.as_array().ok_or("messages: must be a list")?;
        if messages.is_empty() {
            return Err("messages: at least one message is required".into());
        }
        // The calls of the last assistant message not answered yet.
        let mut open: Vec<String> = Vec::new();
        for (i, message) in messages.iter().enumerate() {
            let at = format!("messages.{i}");
            let role = string(message, "role", &at)?;
            if role != "tool" && !open.is_empty() {
                return Err(format!(
                    "{at}: an assistant message with 'tool_calls' must be followed by tool messages responding to \
                     each 'tool_call_id'; not answered: {open:?}"
                ));
            }
            match role {
                "system" | "developer" => {
                    only_fields(message, &["role", "content", "name"], &at)?;
                    let text = string(message, "content", &at)?;
                    if seen.system.is_none() && seen.messages.is_empty() {
                        seen.system = Some(text.into());
                    } else {
                        return Err(format!("{at}: the imitation expects one system message, first"));
                    }
                }
                "user" => {
                    only_fields(message, &["role", "content", "name"], &at)?;
                    let parts = read_content(field(message, "content", &at)?, &format!("{at}.content"))?;
                    seen.messages.push(SeenMessage::new(Role::User, parts));
                }
                "assistant" => {
                    only_fields(message, &["role", "content", "tool_calls", "refusal", "name"], &at)?;
                    let mut parts = match message.get("content") {
                        None | Some(Value::Null) => Vec::new(),
                        Some(content) => read_content(content, &format!("{at}.content"))?,
                    };
                    let calls = message.get("tool_calls").and_then(Value::as_array);
                    if parts.is_empty() && calls.is_none_or(Vec::is_empty) {
                        return Err(format!("{at}: `content` is required unless `tool_calls` is given"));
                    }
                    for (j, call) in calls.into_iter().flatten().enumerate() {
                        let at = format!("{at}.tool_calls.{j}");
                        only_fields(call, &["id", "type", "function"], &at)?;
                        if string(call, "type", &at)? != "function" {
                            return Err(format!("{at}.type: must be `function`"));
                        }
                        let id = string(call, "id", &at)?.to_owned();
                        let function = field(call, "function", &at)?;
                        let arguments = string(function, "arguments", &format!("{at}.function"))?;
                        let input = serde_json::from_str(arguments)
                            .map_err(|e| format!("{at}.function.arguments: not JSON ({e})"))?;
                        let name = string(function, "name", &format!("{at}.function"))?.into();
                        open.push(id.clone());
                        parts.push(Part::ToolCall { id: Some(id), name, input });
                    }
                    seen.messages.push(SeenMessage::new(Role::Assistant, parts));
                }
                "tool" => {
                    only_fields(message, &["role", "content", "tool_call_id"], &at)?;
                    let id = string(message, "tool_call_id", &at)?.to_owned();
                    let Some(position) = open.iter().position(|c| *c == id) else {
                        return Err(format!(
                            "{at}: messages with role 'tool' must be a response to a preceding message with \
                             'tool_calls' (no open call {id})"
                        ));
                    };
                    open.remove(position);
                    let content = match field(message, "content", &at)? {
                        Value::String(text) => text.clone(),
                        Value::Array(items) => {
                            items.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect()
                        }
                        _ => return Err(format!("{at}.content: a string or text parts")),
                    };
                    let result = Part::ToolResult { id: Some(id), content, is_error: None };
                    seen.messages.push(SeenMessage::new(Role::User, vec![result]));
                }
                other => return Err(format!("{at}.role: `{other}`")),
            }
        }
        if !open.is_empty() {
            return Err(format!("tool calls not answered: {open:?}"));
        }
        Ok(seen)
    }

    fn reply(&self, turn: &Turn, seen: &Seen) -> Reply {
        match turn {
            Turn::Answer(answer) if seen.stream => Reply::sse(sse(&chunks(answer, None, true))).pieces(&[23, 3, 80]),
            Turn::Answer(answer) => Reply::json(200, completion(answer)),
            Turn::Hang(answer) => Reply::sse(cut_sse(&chunks(answer, Some(1), false))).then_hang(),
            Turn::Fail(failure) => fail(failure, seen),
        }
    }
}

fn finish_reason(stop: &StopReason) -> &'static str {
    match stop {
        StopReason::ToolUse => "tool_calls",
        StopReason::MaxTokens => "length",
        _ => "stop",
    }
}

fn usage(answer: &Answer) -> Value {
    let u = &answer.usage;
    let prompt = u.input_tokens + u.cache_read_input_tokens;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": u.output_tokens,
        "total_tokens": prompt + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_read_input_tokens, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning_output_tokens, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    })
}

fn completion(answer: &Answer) -> Value {
    let mut message = json!({"role": "assistant", "content": null, "refusal": null, "annotations": []});
    if !answer.text.is_empty() {
        message["content"] = answer.text.clone().into();
    }
    if !answer.calls.is_empty() {
        let calls: Vec<Value> = answer
            .calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.input.to_string()}}))
            .collect();
        message["tool_calls"] = calls.into();
    }
    json!({
        "id": answer.id, "object": "chat.completion", "created": 1_767_225_600, "model": answer.model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason(&answer.stop)}],
        "usage": usage(answer), "service_tier": "default", "system_fingerprint": "fp_conformance",
    })
}

/// The chunks of an answer's stream; with `cut`, only the first that many text
/// pieces. `usage`: the last chunk carries the usage (asked for with
/// `stream_options.include_usage`).
pub fn chunks(answer: &Answer, cut: Option<usize>, usage_chunk: bool) -> Vec<Value> {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": answer.id, "object": "chat.completion.chunk", "created": 1_767_225_600, "model": answer.model,
            "system_fingerprint": "fp_conformance",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    };
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": "", "refusal": null}), Value::Null)];
    let text = pieces(&answer.text, 4);
    let take = cut.unwrap_or(text.len());
    for piece in text.into_iter().take(take) {
        chunks.push(chunk(json!({"content": piece}), Value::Null));
    }
    if cut.is_some() {
        return chunks;
    }
    for (index, call) in answer.calls.iter().enumerate() {
        chunks.push(chunk(
            json!({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                   "function": {"name": call.name, "arguments": ""}}]}),
            Value::Null,
        ));
        for piece in pieces(&call.input.to_string(), 3) {
            chunks
                .push(chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}), Value::Null));
        }
    }
    chunks.push(chunk(json!({}), finish_reason(&answer.stop).into()));
    if usage_chunk {
        chunks.push(json!({
            "id": answer.id, "object": "chat.completion.chunk", "created": 1_767_225_600, "model": answer.model,
            "choices": [], "usage": usage(answer),
        }));
    }
    chunks
}

/// `data: <json>` per chunk, then `data: [DONE]`.
pub fn sse(chunks: &[Value]) -> String {
    let mut out = cut_sse(chunks);
    out.push_str("data: [DONE]\n\n");
    out
}

/// `data: <json>` per chunk, without the end.
fn cut_sse(chunks: &[Value]) -> String {
    chunks.iter().map(|c| format!("data: {c}\n\n")).collect()
}

fn error(status: u16, kind: &str, code: Value, message: &str) -> Reply {
    Reply::json(status, json!({"error": {"message": message, "type": kind, "param": null, "code": code}}))
        .header("x-request-id", "req_conformance")
}

fn fail(failure: &Failure, seen: &Seen) -> Reply {
    let message = failure.message();
    match failure {
        Failure::Authentication => error(401, "invalid_request_error", json!("invalid_api_key"), message),
        Failure::InvalidRequest => error(400, "invalid_request_error", Value::Null, message),
        Failure::RateLimited { retry_after } => error(429, "requests", json!("rate_limit_exceeded"), message)
            .header("retry-after", &retry_after.as_secs().to_string()),
        Failure::Overloaded => error(503, "server_error", Value::Null, message),
        Failure::Server => error(500, "server_error", Value::Null, message),
        // A completion without its choices; a stream whose first chunk is not JSON.
        Failure::Malformed if seen.stream => Reply::sse("data: {\"id\": \"chatcmpl-1\", \"obj\n\n"),
        Failure::Malformed => Reply::json(200, json!({"id": "chatcmpl-1", "object": "chat.completion"})),
        Failure::Truncated(answer) if seen.stream => Reply::sse(cut_sse(&chunks(answer, Some(1), false))).truncated(),
        Failure::Truncated(answer) => Reply::json(200, completion(answer)).truncated(),
    }
}
