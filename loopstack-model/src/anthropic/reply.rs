//! Decoding the body of a Messages API response.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::PROVIDER;
use crate::error::LlmError;
use crate::http::{self, malformed};
use crate::message::{
    ContentBlock, MAX_JSON_DEPTH, Message, Reasoning, Role, StopReason, ToolUse, Usage, nests_deeper_than, too_deep,
};
use crate::model::ChatResponse;

/// A response body. Content blocks are kept as raw text until each is decoded, so
/// that tool arguments are checked for their depth before they are parsed.
#[derive(Deserialize)]
struct WireMessage {
    #[serde(rename = "type")]
    kind: Option<String>,
    error: Option<Value>,
    id: Option<String>,
    model: Option<String>,
    content: Option<Vec<Box<RawValue>>>,
    stop_reason: Option<String>,
    #[serde(default)]
    usage: WireUsage,
}

/// The fields of a content block the decoder reads; `input` stays raw text.
#[derive(Deserialize)]
struct WireBlock {
    #[serde(rename = "type")]
    kind: Option<String>,
    id: Option<String>,
    name: Option<String>,
    text: Option<String>,
    input: Option<Box<RawValue>>,
}

#[derive(Deserialize, Default)]
pub(super) struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Overwrites the counts present in `self`.
    pub(super) fn apply(&self, usage: &mut Usage) {
        let set = |to: &mut u64, from: Option<u64>| {
            if let Some(n) = from {
                *to = n;
            }
        };
        set(&mut usage.input_tokens, self.input_tokens);
        set(&mut usage.output_tokens, self.output_tokens);
        set(&mut usage.cache_creation_input_tokens, self.cache_creation_input_tokens);
        set(&mut usage.cache_read_input_tokens, self.cache_read_input_tokens);
    }
}

/// Decodes a non-streamed response body.
pub(super) fn decode_response(body: &[u8], model: &str) -> Result<ChatResponse, LlmError> {
    let wire: WireMessage =
        serde_json::from_slice(body).map_err(|e| malformed(PROVIDER, model, format!("invalid JSON: {e}")))?;
    if wire.kind.as_deref() == Some("error") {
        return Err(error_event(wire.error.as_ref(), model));
    }
    let missing = |field: &str| malformed(PROVIDER, model, format!("missing field `{field}`"));
    let id = wire.id.ok_or_else(|| missing("id"))?;
    let response_model = wire.model.ok_or_else(|| missing("model"))?;
    let content = wire
        .content
        .ok_or_else(|| missing("content"))?
        .iter()
        .map(|block| decode_raw_block(block.get()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| malformed(PROVIDER, model, m))?;
    let stop_reason = wire.stop_reason.ok_or_else(|| malformed(PROVIDER, model, "missing stop_reason"))?;
    let mut usage = Usage::default();
    wire.usage.apply(&mut usage);
    Ok(ChatResponse {
        message: Message { role: Role::Assistant, content },
        stop_reason: StopReason::parse(&stop_reason),
        usage,
        model: response_model,
        id: Some(id),
    })
}

/// Decodes a content block of a response body from its text. A tool call's input is
/// read with [`ToolUse::from_raw_arguments`], so input nested too deep is an error
/// result, not a failed response; a provider block nested too deep is refused.
fn decode_raw_block(raw: &str) -> Result<ContentBlock, String> {
    let block: WireBlock = serde_json::from_str(raw).map_err(|e| format!("invalid content block: {e}"))?;
    let field = |value: Option<String>, name: &str| value.ok_or_else(|| format!("a content block has no `{name}`"));
    match block.kind.as_deref() {
        Some("text") => Ok(ContentBlock::text(field(block.text, "text")?)),
        Some("tool_use") => {
            let (id, name) = (field(block.id, "id")?, field(block.name, "name")?);
            Ok(ContentBlock::ToolUse(match block.input {
                Some(input) => ToolUse::from_raw_arguments(id, name, input.get()),
                None => ToolUse::new(id, name, json!({})),
            }))
        }
        Some(_) => Ok(provider_block(parse_provider_json(raw)?)),
        None => Err("a content block has no `type`".into()),
    }
}

/// A block of the API's own, as a content block: `thinking` (with its `signature`)
/// and `redacted_thinking` (its `data`) are [`Reasoning`], everything else (server
/// tools' calls and results, say) a [`ContentBlock::Provider`] block, sent back as
/// received.
pub(super) fn provider_block(raw: Value) -> ContentBlock {
    let field = |name: &str| raw.get(name).and_then(Value::as_str);
    match (field("type"), field("thinking"), field("signature"), field("data")) {
        (Some("thinking"), Some(text), Some(signature), _) => {
            ContentBlock::Reasoning(Reasoning::new(PROVIDER, text, json!({ "signature": signature })))
        }
        (Some("redacted_thinking"), _, _, Some(data)) => {
            ContentBlock::Reasoning(Reasoning::new(PROVIDER, "", json!({ "redacted": data })))
        }
        _ => ContentBlock::Provider { provider: PROVIDER.into(), raw },
    }
}

/// Parses JSON of a provider block (a server tool's input, say), refusing it when it
/// nests deeper than [`MAX_JSON_DEPTH`].
fn parse_provider_json(raw: &str) -> Result<Value, String> {
    if nests_deeper_than(raw.as_bytes(), MAX_JSON_DEPTH) {
        return Err(format!("a content block is refused: {}", too_deep()));
    }
    serde_json::from_str(raw).map_err(|e| format!("invalid content block: {e}"))
}

/// The error of an `error` object, `{"type": "error", "error": {"type", "message"}}`,
/// sent as a 200 body or as an `error` event of a stream: the kind of the HTTP status
/// its type stands for ([`http::body_error`]), so `overloaded_error` is
/// [`LlmError::Overloaded`], `rate_limit_error` [`LlmError::RateLimited`] and
/// `api_error` [`LlmError::Server`], all retryable.
pub(super) fn error_event(error: Option<&Value>, model: &str) -> LlmError {
    http::body_error(PROVIDER, model, error.unwrap_or(&Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_blocks_stop_reasons_and_usage() {
        let body = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x-2025",
            "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "redacted_thinking", "data": "abc"},
                {"type": "text", "text": "Hi"},
                {"type": "tool_use", "id": "tu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
            "stop_reason": "refusal", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 3,
                      "cache_read_input_tokens": null},
        });
        let response = decode_response(body.to_string().as_bytes(), "claude-x").unwrap();
        assert_eq!(response.stop_reason, StopReason::Other("refusal".into()));
        assert_eq!(
            response.usage,
            Usage { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 3, ..Usage::default() }
        );
        assert_eq!(response.model, "claude-x-2025");
        assert_eq!(response.id.as_deref(), Some("msg_1"));
        assert_eq!(
            response.message.content,
            vec![
                ContentBlock::Reasoning(Reasoning::new("anthropic", "t", json!({"signature": "s"}))),
                ContentBlock::Reasoning(Reasoning::new("anthropic", "", json!({"redacted": "abc"}))),
                ContentBlock::text("Hi"),
                ContentBlock::ToolUse(ToolUse::new("tu_1", "get_weather", json!({"city": "Paris"}))),
            ]
        );
        for (wire, want) in [
            ("end_turn", StopReason::EndTurn),
            ("tool_use", StopReason::ToolUse),
            ("max_tokens", StopReason::MaxTokens),
            ("stop_sequence", StopReason::StopSequence),
            ("pause_turn", StopReason::Other("pause_turn".into())),
        ] {
            let body = json!({"id": "m", "model": "x", "content": [], "stop_reason": wire, "usage": {}});
            assert_eq!(decode_response(body.to_string().as_bytes(), "x").unwrap().stop_reason, want);
        }
    }

    #[test]
    fn malformed_bodies() {
        let err = |body: &str| decode_response(body.as_bytes(), "claude-x").unwrap_err();
        assert!(
            matches!(err("{not json"), LlmError::MalformedResponse { provider: "anthropic", ref model, .. } if model == "claude-x")
        );
        assert!(
            matches!(err(r#"{"id": "m", "model": "x"}"#), LlmError::MalformedResponse { ref message, .. } if message.contains("content"))
        );
        assert!(matches!(
            err(r#"{"id": "m", "model": "x", "content": [], "stop_reason": null}"#),
            LlmError::MalformedResponse { ref message, .. } if message.contains("stop_reason")
        ));
        assert!(matches!(
            err(r#"{"id": "m", "model": "x", "content": [{"type": "text"}], "stop_reason": "end_turn"}"#),
            LlmError::MalformedResponse { .. }
        ));
        assert!(matches!(
            err(r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#),
            LlmError::Overloaded { .. }
        ));
    }
}
