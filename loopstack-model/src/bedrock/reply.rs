//! Decoding the body of a Converse response, and the errors Bedrock names.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::PROVIDER;
use crate::error::LlmError;
use crate::http::malformed;
use crate::message::{
    ContentBlock, MAX_JSON_DEPTH, Message, Reasoning, Role, StopReason, ToolUse, Usage, nests_deeper_than, too_deep,
};
use crate::model::ChatResponse;

/// A response body. Content blocks are kept as raw text until each is decoded, so
/// that tool inputs are checked for their depth before they are parsed.
#[derive(Deserialize)]
struct WireResponse {
    output: Option<WireOutput>,
    #[serde(rename = "stopReason")]
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireOutput {
    message: Option<WireMessage>,
}

#[derive(Deserialize)]
struct WireMessage {
    content: Option<Vec<Box<RawValue>>>,
}

/// A content block: a union, exactly one member set. `toolUse.input` stays raw text.
#[derive(Deserialize)]
struct WireBlock {
    text: Option<String>,
    #[serde(rename = "toolUse")]
    tool_use: Option<WireToolUse>,
    #[serde(rename = "reasoningContent")]
    reasoning: Option<WireReasoning>,
}

#[derive(Deserialize)]
struct WireToolUse {
    #[serde(rename = "toolUseId")]
    id: String,
    name: String,
    input: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct WireReasoning {
    #[serde(rename = "reasoningText")]
    text: Option<WireReasoningText>,
    #[serde(rename = "redactedContent")]
    redacted: Option<String>,
}

#[derive(Deserialize)]
struct WireReasoningText {
    text: String,
    signature: Option<String>,
}

/// Token counts (`TokenUsage`). `inputTokens` leaves out the tokens read from or
/// written to the cache, as [`Usage::input_tokens`] does.
#[derive(Deserialize, Default)]
pub(super) struct WireUsage {
    #[serde(rename = "inputTokens")]
    input_tokens: Option<u64>,
    #[serde(rename = "outputTokens")]
    output_tokens: Option<u64>,
    #[serde(rename = "cacheReadInputTokens")]
    cache_read_input_tokens: Option<u64>,
    #[serde(rename = "cacheWriteInputTokens")]
    cache_write_input_tokens: Option<u64>,
}

impl WireUsage {
    pub(super) fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0),
            output_tokens: self.output_tokens.unwrap_or(0),
            cache_creation_input_tokens: self.cache_write_input_tokens.unwrap_or(0),
            cache_read_input_tokens: self.cache_read_input_tokens.unwrap_or(0),
            ..Usage::default()
        }
    }
}

/// Decodes a Converse response body. Bedrock names no model and gives no id in it:
/// the response's model is the one asked for, its id `None`.
pub(super) fn decode_response(body: &[u8], model: &str) -> Result<ChatResponse, LlmError> {
    let wire: WireResponse =
        serde_json::from_slice(body).map_err(|e| malformed(PROVIDER, model, format!("invalid JSON: {e}")))?;
    let missing = |field: &str| malformed(PROVIDER, model, format!("missing field `{field}`"));
    let content = wire
        .output
        .ok_or_else(|| missing("output"))?
        .message
        .ok_or_else(|| missing("output.message"))?
        .content
        .ok_or_else(|| missing("output.message.content"))?;
    let content = content
        .iter()
        .map(|block| decode_block(block.get()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| malformed(PROVIDER, model, m))?;
    let stop_reason = wire.stop_reason.ok_or_else(|| missing("stopReason"))?;
    let usage = wire.usage.ok_or_else(|| missing("usage"))?.usage();
    Ok(ChatResponse {
        message: Message { role: Role::Assistant, content },
        stop_reason: StopReason::parse(&stop_reason),
        usage,
        model: model.to_owned(),
        id: None,
    })
}

/// Decodes a content block of a response from its text: text, a tool call (its input
/// read with [`ToolUse::from_raw_arguments`], so input nested too deep is an error
/// result, not a failed response), reasoning ([`Reasoning`] with
/// `{"signature": ..}` or `{"redacted": ..}`), or else a
/// [`ContentBlock::Provider`] block, sent back as received.
fn decode_block(raw: &str) -> Result<ContentBlock, String> {
    let block: WireBlock = serde_json::from_str(raw).map_err(|e| format!("invalid content block: {e}"))?;
    if let Some(text) = block.text {
        return Ok(ContentBlock::text(text));
    }
    if let Some(tool) = block.tool_use {
        return Ok(ContentBlock::ToolUse(match tool.input {
            Some(input) => ToolUse::from_raw_arguments(tool.id, tool.name, input.get()),
            None => ToolUse::new(tool.id, tool.name, json!({})),
        }));
    }
    if let Some(reasoning) = block.reasoning {
        return match (reasoning.text, reasoning.redacted) {
            (Some(text), _) => {
                let data = text.signature.map_or(Value::Null, |signature| json!({ "signature": signature }));
                Ok(ContentBlock::Reasoning(Reasoning::new(PROVIDER, text.text, data)))
            }
            (None, Some(redacted)) => {
                Ok(ContentBlock::Reasoning(Reasoning::new(PROVIDER, "", json!({ "redacted": redacted }))))
            }
            (None, None) => Err("a reasoningContent block has neither reasoningText nor redactedContent".into()),
        };
    }
    if nests_deeper_than(raw.as_bytes(), MAX_JSON_DEPTH) {
        return Err(format!("a content block is refused: {}", too_deep()));
    }
    let raw: Value = serde_json::from_str(raw).map_err(|e| format!("invalid content block: {e}"))?;
    Ok(ContentBlock::Provider { provider: PROVIDER.into(), raw })
}

/// The typed error of an exception Bedrock names (`ThrottlingException`, or the
/// stream's `throttlingException`), with its message: the kind of the HTTP status the
/// API reference gives it. An unknown exception is a server error (500).
pub(super) fn exception(kind: &str, message: &str, model: &str) -> LlmError {
    let (provider, model) = (PROVIDER, model.to_owned());
    let message = format!("{kind}: {message}");
    let status = match kind.to_ascii_lowercase().as_str() {
        "validationexception" => 400,
        "accessdeniedexception" => 403,
        "resourcenotfoundexception" => 404,
        "modeltimeoutexception" => 408,
        "modelerrorexception" => 424,
        "throttlingexception" | "modelnotreadyexception" | "servicequotaexceededexception" => 429,
        "serviceunavailableexception" => 503,
        // internalServerException, modelStreamErrorException ("a streaming error
        // occurred, retry your request", HTTP 424 in the reference) and new ones.
        _ => 500,
    };
    match status {
        403 => LlmError::Authentication { provider, model, status, message },
        429 => LlmError::RateLimited { provider, model, retry_after: None, message },
        408 | 500..=599 => LlmError::Server { provider, model, status, message },
        _ => LlmError::InvalidRequest { provider, model, status, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_blocks_stop_reasons_and_usage() {
        let body = json!({
            "output": {"message": {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "Oslo, then.", "signature": "sig=="}}},
                {"reasoningContent": {"redactedContent": "cmVkYWN0ZWQ="}},
                {"text": "Let me look."},
                {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Oslo"}}},
                {"citationsContent": {"content": [{"text": "x"}]}},
            ]}},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 12, "outputTokens": 30, "totalTokens": 142, "cacheReadInputTokens": 100},
            "metrics": {"latencyMs": 120},
        });
        let response = decode_response(body.to_string().as_bytes(), "claude").unwrap();
        assert_eq!(
            response.message.content,
            vec![
                ContentBlock::Reasoning(Reasoning::new("bedrock", "Oslo, then.", json!({"signature": "sig=="}))),
                ContentBlock::Reasoning(Reasoning::new("bedrock", "", json!({"redacted": "cmVkYWN0ZWQ="}))),
                ContentBlock::text("Let me look."),
                ContentBlock::ToolUse(ToolUse::new("tooluse_1", "get_weather", json!({"city": "Oslo"}))),
                ContentBlock::Provider {
                    provider: "bedrock".into(),
                    raw: json!({"citationsContent": {"content": [{"text": "x"}]}})
                },
            ]
        );
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.usage,
            Usage { input_tokens: 12, output_tokens: 30, cache_read_input_tokens: 100, ..Usage::default() }
        );
        assert_eq!((response.model.as_str(), response.id), ("claude", None));
        let filtered = json!({"output": {"message": {"role": "assistant", "content": []}},
            "stopReason": "guardrail_intervened", "usage": {"inputTokens": 1, "outputTokens": 0, "totalTokens": 1}});
        let response = decode_response(filtered.to_string().as_bytes(), "m").unwrap();
        assert_eq!(response.stop_reason, StopReason::Other("guardrail_intervened".into()));
    }

    #[test]
    fn malformed_bodies_are_errors() {
        let bad = |body: &str| decode_response(body.as_bytes(), "m").unwrap_err();
        assert!(matches!(bad("{nope"), LlmError::MalformedResponse { .. }));
        assert!(bad("{}").to_string().contains("missing field `output`"));
        let no_stop = r#"{"output": {"message": {"content": []}}, "usage": {}}"#;
        assert!(bad(no_stop).to_string().contains("stopReason"));
        let no_usage = r#"{"output": {"message": {"content": []}}, "stopReason": "end_turn"}"#;
        assert!(bad(no_usage).to_string().contains("usage"));
        let empty_reasoning = r#"{"output": {"message": {"content": [{"reasoningContent": {}}]}}, "stopReason": "end_turn", "usage": {}}"#;
        assert!(bad(empty_reasoning).to_string().contains("reasoningContent"));
        // Tool input nested too deep is kept as invalid input, not parsed.
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        let body = format!(
            r#"{{"output": {{"message": {{"content": [{{"toolUse": {{"toolUseId": "t", "name": "n", "input": {deep}}}}}]}}}}, "stopReason": "tool_use", "usage": {{}}}}"#
        );
        let response = decode_response(body.as_bytes(), "m").unwrap();
        assert!(response.message.tool_uses().next().unwrap().invalid_input.is_some());
    }

    #[test]
    fn exceptions_map_to_the_kind_of_their_status() {
        let kind = |name: &str| exception(name, "m", "model");
        assert!(matches!(kind("ValidationException"), LlmError::InvalidRequest { status: 400, .. }));
        assert!(matches!(kind("validationException"), LlmError::InvalidRequest { status: 400, .. }));
        assert!(matches!(kind("AccessDeniedException"), LlmError::Authentication { status: 403, .. }));
        assert!(matches!(kind("ResourceNotFoundException"), LlmError::InvalidRequest { status: 404, .. }));
        assert!(matches!(kind("ModelTimeoutException"), LlmError::Server { status: 408, .. }));
        assert!(matches!(kind("ModelErrorException"), LlmError::InvalidRequest { status: 424, .. }));
        assert!(matches!(kind("throttlingException"), LlmError::RateLimited { .. }));
        assert!(matches!(kind("ModelNotReadyException"), LlmError::RateLimited { .. }));
        assert!(matches!(kind("serviceUnavailableException"), LlmError::Server { status: 503, .. }));
        assert!(matches!(kind("internalServerException"), LlmError::Server { status: 500, .. }));
        assert!(kind("modelStreamErrorException").is_retryable());
        let e = kind("throttlingException");
        assert!(e.to_string().contains("throttlingException: m"), "{e}");
    }
}
