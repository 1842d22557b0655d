//! Decoding a Responses API response: its `output` items, status and usage. The
//! stream decoder reads the items and the final response of its events with the same
//! functions, so a streamed reply equals a plain one.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::error::LlmError;
use crate::http::{self, malformed};
use crate::message::{
    ContentBlock, MAX_JSON_DEPTH, Message, Reasoning, Role, StopReason, ToolUse, Usage, nests_deeper_than, too_deep,
};
use crate::model::ChatResponse;

/// A response object: the body of a non-streamed reply, and the `response` of the
/// `response.completed`, `response.incomplete` and `response.failed` events. The
/// output items stay raw text until each is decoded.
#[derive(Deserialize)]
pub(super) struct WireResponse {
    pub(super) id: Option<String>,
    pub(super) model: Option<String>,
    pub(super) status: Option<String>,
    #[serde(default)]
    pub(super) output: Vec<Box<RawValue>>,
    pub(super) usage: Option<WireUsage>,
    pub(super) error: Option<Value>,
    pub(super) incomplete_details: Option<WireIncomplete>,
}

#[derive(Deserialize)]
pub(super) struct WireIncomplete {
    reason: Option<String>,
}

/// The fields of an output item the decoder reads.
#[derive(Deserialize)]
pub(super) struct WireItem {
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
    pub(super) id: Option<String>,
    pub(super) call_id: Option<String>,
    pub(super) name: Option<String>,
    /// A function call's arguments: JSON as a string.
    pub(super) arguments: Option<String>,
    /// A message's content parts.
    content: Option<Vec<WirePart>>,
    /// A reasoning item's summary parts.
    summary: Option<Vec<WirePart>>,
    encrypted_content: Option<String>,
}

/// A content part of a message (`output_text`, `refusal`) or a summary part of a
/// reasoning item (`summary_text`).
#[derive(Deserialize)]
struct WirePart {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    refusal: Option<String>,
}

#[derive(Deserialize, Default)]
pub(super) struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    input_tokens_details: Option<WireInputDetails>,
    output_tokens_details: Option<WireOutputDetails>,
}

#[derive(Deserialize, Default)]
struct WireInputDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
struct WireOutputDetails {
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    /// The usage, with cached tokens counted apart from `input_tokens` (the API counts
    /// them within), as [`Usage`] counts them for every provider.
    pub(super) fn usage(&self) -> Usage {
        let cached = self.input_tokens_details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0);
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0).saturating_sub(cached),
            output_tokens: self.output_tokens.unwrap_or(0),
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
            // Within `output_tokens`, as `Usage` counts them.
            reasoning_output_tokens: self.output_tokens_details.as_ref().and_then(|d| d.reasoning_tokens).unwrap_or(0),
        }
    }
}

/// The separator of a reasoning item's summaries in its text (and its stream).
pub(super) const SUMMARY_SEPARATOR: &str = "\n\n";

/// Decodes one output item from its text: a `message` is a text block (its
/// `output_text` and `refusal` parts joined), a `function_call` a tool call (whose
/// `call_id` is the call's id, its arguments read by [`ToolUse::from_raw_arguments`]),
/// a `reasoning` item a [`Reasoning`] block of `provider`, any other item a
/// [`ContentBlock::Provider`] block kept as received (refused when it nests deeper
/// than [`MAX_JSON_DEPTH`]).
pub(super) fn decode_item(raw: &str, provider: &'static str) -> Result<ContentBlock, String> {
    let item: WireItem = serde_json::from_str(raw).map_err(|e| format!("invalid output item: {e}"))?;
    let field = |value: Option<String>, name: &str, kind: &str| {
        value.filter(|v| !v.is_empty()).ok_or_else(|| format!("a `{kind}` output item has no `{name}`"))
    };
    match item.kind.as_deref() {
        Some("message") => Ok(ContentBlock::text(message_text(item.content.as_deref().unwrap_or_default()))),
        Some("function_call") => {
            let id = field(item.call_id, "call_id", "function_call")?;
            let name = field(item.name, "name", "function_call")?;
            Ok(ContentBlock::ToolUse(ToolUse::from_raw_arguments(id, name, item.arguments.as_deref().unwrap_or(""))))
        }
        Some("reasoning") => {
            let id = field(item.id, "id", "reasoning")?;
            Ok(ContentBlock::Reasoning(reasoning(
                provider,
                id,
                item.summary.unwrap_or_default(),
                item.encrypted_content,
            )))
        }
        Some(_) => {
            if nests_deeper_than(raw.as_bytes(), MAX_JSON_DEPTH) {
                return Err(format!("an output item is refused: {}", too_deep()));
            }
            let raw = serde_json::from_str(raw).map_err(|e| format!("invalid output item: {e}"))?;
            Ok(ContentBlock::Provider { provider: provider.into(), raw })
        }
        None => Err("an output item has no `type`".into()),
    }
}

/// A message's text: its `output_text` parts, and what a `refusal` part says.
fn message_text(parts: &[WirePart]) -> String {
    let mut text = String::new();
    for part in parts {
        match part.kind.as_deref() {
            Some("output_text") => text.push_str(part.text.as_deref().unwrap_or_default()),
            Some("refusal") => text.push_str(part.refusal.as_deref().unwrap_or_default()),
            _ => {}
        }
    }
    text
}

/// A reasoning block: its summaries' text as the block's text, and what the API needs
/// back (`id`, `summary`, `encrypted_content`) as its data. The summary is rebuilt
/// from the texts read, so nothing else the server sent is kept.
fn reasoning(provider: &'static str, id: String, summary: Vec<WirePart>, encrypted: Option<String>) -> Reasoning {
    let texts: Vec<String> = summary
        .into_iter()
        .filter(|p| p.kind.as_deref().is_none_or(|k| k == "summary_text"))
        .filter_map(|p| p.text)
        .collect();
    let mut data = Map::new();
    data.insert("id".into(), id.into());
    let parts: Vec<Value> = texts.iter().map(|t| json!({"type": "summary_text", "text": t})).collect();
    data.insert("summary".into(), parts.into());
    if let Some(encrypted) = encrypted {
        data.insert("encrypted_content".into(), encrypted.into());
    }
    Reasoning::new(provider, texts.join(SUMMARY_SEPARATOR), Value::Object(data))
}

/// Why a response with this status stopped: `completed` is the end of the turn (or a
/// tool use, when it called tools), `incomplete` its `incomplete_details.reason`
/// (`max_output_tokens`: [`StopReason::MaxTokens`]). A `failed` response is its
/// error; a response still `in_progress` or `queued` (a background response) is
/// malformed here.
pub(super) fn outcome(
    wire: &WireResponse,
    content: &[ContentBlock],
    provider: &'static str,
    model: &str,
) -> Result<StopReason, LlmError> {
    if let Some(error) = wire.error.as_ref().filter(|e| !e.is_null()) {
        return Err(response_error(provider, model, error));
    }
    let has_tool_calls = content.iter().any(|b| matches!(b, ContentBlock::ToolUse(_)));
    match wire.status.as_deref() {
        // A server that leaves the status out answered in full.
        Some("completed") | None if has_tool_calls => Ok(StopReason::ToolUse),
        Some("completed") | None => Ok(StopReason::EndTurn),
        Some("incomplete") => {
            match wire.incomplete_details.as_ref().and_then(|d| d.reason.as_deref()).unwrap_or("incomplete") {
                "max_output_tokens" => Ok(StopReason::MaxTokens),
                other => Ok(StopReason::Other(other.to_owned())),
            }
        }
        Some("failed") => Err(response_error(provider, model, &Value::Null)),
        Some("cancelled") => Ok(StopReason::Other("cancelled".into())),
        Some(other) => Err(malformed(provider, model, format!("the response is `{other}`, not finished"))),
    }
}

/// The typed error of a failed response's `error` (`{"code", "message"}`) or of an
/// `error` event: a rate limit is [`LlmError::RateLimited`], `server_error` and
/// unknown codes [`LlmError::Server`] (as [`http::body_error`] reads them), and the
/// codes that blame the request (`invalid_prompt`, `invalid_image`, the other image
/// codes) [`LlmError::InvalidRequest`] with status 400.
pub(super) fn response_error(provider: &'static str, model: &str, error: &Value) -> LlmError {
    let code = error.get("code").and_then(Value::as_str).unwrap_or_default();
    if code.starts_with("invalid_") || code.contains("image") {
        let message = error.get("message").and_then(Value::as_str).unwrap_or(code);
        return LlmError::InvalidRequest {
            provider,
            model: model.to_owned(),
            status: 400,
            message: message.to_owned(),
        };
    }
    if error.is_null() {
        return http::body_error(provider, model, &json!({"message": "the response failed without an error"}));
    }
    http::body_error(provider, model, error)
}

/// The response of a response object: its items in order (one content block each),
/// its stop reason, usage, model and id.
pub(super) fn response_of(wire: WireResponse, provider: &'static str, model: &str) -> Result<ChatResponse, LlmError> {
    let content = wire
        .output
        .iter()
        .map(|item| decode_item(item.get(), provider))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| malformed(provider, model, m))?;
    let stop_reason = outcome(&wire, &content, provider, model)?;
    Ok(ChatResponse {
        message: Message { role: Role::Assistant, content },
        stop_reason,
        usage: wire.usage.unwrap_or_default().usage(),
        model: wire.model.unwrap_or_else(|| model.to_owned()),
        id: wire.id,
    })
}

/// Decodes the body of a non-streamed response. A body that is an `{"error": ..}`
/// (sent with a success status) is the error of the HTTP status it stands for.
pub(super) fn decode_response(body: &[u8], provider: &'static str, model: &str) -> Result<ChatResponse, LlmError> {
    let wire: WireResponse =
        serde_json::from_slice(body).map_err(|e| malformed(provider, model, format!("invalid JSON: {e}")))?;
    if wire.status.is_none() && wire.output.is_empty() {
        return Err(match wire.error.as_ref().filter(|e| !e.is_null()) {
            Some(error) => http::body_error(provider, model, error),
            None => malformed(provider, model, "a response without `status` and `output`"),
        });
    }
    response_of(wire, provider, model)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "openai-responses";

    fn decode(body: Value) -> Result<ChatResponse, LlmError> {
        decode_response(body.to_string().as_bytes(), P, "gpt-x")
    }

    #[test]
    fn decodes_items_usage_and_status() {
        let response = decode(json!({
            "id": "resp_1", "object": "response", "status": "completed", "model": "gpt-x-2025",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": [
                    {"type": "summary_text", "text": "Weather asked."},
                    {"type": "summary_text", "text": "Call the tool."},
                ], "encrypted_content": "enc1"},
                {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [
                    {"type": "output_text", "text": "Checking", "annotations": []},
                    {"type": "output_text", "text": ".", "annotations": []},
                ]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "w", "arguments": "{\"city\":\"Oslo\"}", "status": "completed"},
                {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "w", "arguments": "{bad"},
                {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            ],
            "usage": {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 10},
                      "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 4}, "total_tokens": 39},
        }))
        .unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!((response.id.as_deref(), response.model.as_str()), (Some("resp_1"), "gpt-x-2025"));
        assert_eq!(
            response.usage,
            Usage {
                input_tokens: 20,
                output_tokens: 9,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 10,
                reasoning_output_tokens: 4
            }
        );
        let content = &response.message.content;
        assert_eq!(
            content[0],
            ContentBlock::Reasoning(Reasoning::new(
                P,
                "Weather asked.\n\nCall the tool.",
                json!({"id": "rs_1", "encrypted_content": "enc1", "summary": [
                    {"type": "summary_text", "text": "Weather asked."},
                    {"type": "summary_text", "text": "Call the tool."},
                ]})
            ))
        );
        assert_eq!(content[1], ContentBlock::text("Checking."));
        assert_eq!(content[2], ContentBlock::ToolUse(ToolUse::new("call_1", "w", json!({"city": "Oslo"}))));
        let ContentBlock::ToolUse(bad) = &content[3] else { panic!("{content:?}") };
        assert_eq!(bad.invalid_input.as_ref().unwrap().raw, "{bad");
        assert!(
            matches!(&content[4], ContentBlock::Provider { provider, raw } if provider == P && raw["id"] == "ws_1")
        );
    }

    #[test]
    fn statuses() {
        let with = |status: &str, details: Value| {
            decode(json!({"status": status, "incomplete_details": details, "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi"}]},
            ]}))
        };
        assert_eq!(with("completed", Value::Null).unwrap().stop_reason, StopReason::EndTurn);
        assert_eq!(
            with("incomplete", json!({"reason": "max_output_tokens"})).unwrap().stop_reason,
            StopReason::MaxTokens
        );
        assert_eq!(
            with("incomplete", json!({"reason": "content_filter"})).unwrap().stop_reason,
            StopReason::Other("content_filter".into())
        );
        assert!(matches!(with("in_progress", Value::Null), Err(LlmError::MalformedResponse { .. })));
        let failed = |code: &str| {
            decode(json!({"status": "failed", "output": [], "error": {"code": code, "message": "m"}})).unwrap_err()
        };
        assert!(matches!(failed("server_error"), LlmError::Server { status: 500, .. }));
        assert!(matches!(failed("rate_limit_exceeded"), LlmError::RateLimited { .. }));
        assert!(matches!(failed("invalid_prompt"), LlmError::InvalidRequest { status: 400, .. }));
        assert!(matches!(failed("image_too_large"), LlmError::InvalidRequest { status: 400, .. }));
        assert!(matches!(
            decode(json!({"status": "failed", "output": []})).unwrap_err(),
            LlmError::Server { status: 500, .. }
        ));
    }

    #[test]
    fn malformed_and_error_bodies() {
        let err = |body: &str| decode_response(body.as_bytes(), P, "gpt-x").unwrap_err();
        for body in [
            "{oops",
            "{}",
            r#"{"status": "completed", "output": [{"type": "function_call", "name": "w", "arguments": "{}"}]}"#,
            r#"{"status": "completed", "output": [{"type": "reasoning", "summary": []}]}"#,
            r#"{"status": "completed", "output": [{"id": "x"}]}"#,
            r#"{"status": "completed", "output": 3}"#,
        ] {
            assert!(matches!(err(body), LlmError::MalformedResponse { provider: P, .. }), "{body}");
        }
        assert!(matches!(
            err(r#"{"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}}"#),
            LlmError::RateLimited { .. }
        ));
        // An item of the API's own nested too deep is refused before it is parsed.
        let deep = format!(
            r#"{{"status": "completed", "output": [{{"type": "x", "v": {}{}}}]}}"#,
            "[".repeat(100),
            "]".repeat(100)
        );
        assert!(matches!(err(&deep), LlmError::MalformedResponse { ref message, .. } if message.contains("nested")));
    }
}
