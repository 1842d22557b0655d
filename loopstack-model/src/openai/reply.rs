//! Decoding the body of a Chat Completions response.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::call_ids::CallIds;
use crate::error::LlmError;
use crate::http::{self, malformed};
use crate::message::{ContentBlock, Message, Role, StopReason, ToolUse, Usage};
use crate::model::ChatResponse;

/// A response body. Tool call arguments are kept as raw text until each call is
/// decoded, so that they are checked for their depth before they are parsed.
#[derive(Deserialize)]
struct WireResponse {
    id: Option<String>,
    model: Option<String>,
    choices: Option<Vec<WireChoice>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: WireMessage,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    content: Option<Value>,
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    arguments: Option<Box<RawValue>>,
}

#[derive(Deserialize, Default)]
pub(super) struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<WireUsageDetails>,
    completion_tokens_details: Option<WireCompletionDetails>,
}

#[derive(Deserialize, Default)]
struct WireUsageDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
struct WireCompletionDetails {
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    pub(super) fn usage(&self) -> Usage {
        // OpenAI counts cached tokens within `prompt_tokens`; `Usage` counts them
        // apart (as Anthropic does), so each token is counted, and priced, once.
        let cached = self.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0);
        Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0).saturating_sub(cached),
            output_tokens: self.completion_tokens.unwrap_or(0),
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
            // Within `completion_tokens`, as `Usage` counts them.
            reasoning_output_tokens: self
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
        }
    }
}

/// A message's `content`: a string, or (some servers) an array of text parts.
pub(super) fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        _ => String::new(),
    }
}

/// A tool call from its arguments as sent: a JSON string (usually), or an object (some
/// local servers); absent or `null` is `{}`. Either way the arguments are read by
/// [`ToolUse::from_raw_arguments`], which refuses them when they nest too deep.
pub(super) fn tool_use(id: String, name: String, arguments: Option<&RawValue>) -> ToolUse {
    match arguments.map(RawValue::get) {
        None | Some("null") => ToolUse::new(id, name, json!({})),
        Some(raw) => match raw.starts_with('"').then(|| serde_json::from_str::<String>(raw)) {
            Some(Ok(text)) => ToolUse::from_raw_arguments(id, name, &text),
            _ => ToolUse::from_raw_arguments(id, name, raw),
        },
    }
}

/// The stop reason of a `finish_reason`.
pub(super) fn stop_reason(finish_reason: &str, has_tool_calls: bool) -> StopReason {
    match finish_reason {
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "stop" if has_tool_calls => StopReason::ToolUse,
        "stop" => StopReason::EndTurn,
        "length" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_owned()),
    }
}

/// Decodes a non-streamed response body; a tool call without an id gets one from
/// `ids`. A body with an `error` (which some servers send with a success status) is
/// the error of the HTTP status it stands for ([`http::body_error`]), retried as that
/// status would be.
pub(super) fn decode_response(
    body: &[u8],
    provider: &'static str,
    model: &str,
    ids: &mut CallIds<'_>,
) -> Result<ChatResponse, LlmError> {
    let wire: WireResponse =
        serde_json::from_slice(body).map_err(|e| malformed(provider, model, format!("invalid JSON: {e}")))?;
    if let Some(error) = &wire.error {
        return Err(http::body_error(provider, model, error));
    }
    let choices = wire.choices.ok_or_else(|| malformed(provider, model, "missing field `choices`"))?;
    let choice = choices.into_iter().next().ok_or_else(|| malformed(provider, model, "no choices"))?;
    let mut content = Vec::new();
    let text = content_text(choice.message.content.as_ref());
    if !text.is_empty() {
        content.push(ContentBlock::Text { text });
    }
    let calls = choice.message.tool_calls.unwrap_or_default();
    if calls.iter().any(|call| call.id.as_deref().is_none_or(str::is_empty)) {
        calls.iter().filter_map(|call| call.id.as_deref()).for_each(|id| ids.reserve(id));
    }
    for (n, call) in calls.into_iter().enumerate() {
        let id = ids.or_new(call.id, n);
        content.push(ContentBlock::ToolUse(tool_use(id, call.function.name, call.function.arguments.as_deref())));
    }
    let has_tool_calls = content.iter().any(|b| matches!(b, ContentBlock::ToolUse(_)));
    let finish_reason = choice.finish_reason.ok_or_else(|| malformed(provider, model, "missing finish_reason"))?;
    Ok(ChatResponse {
        message: Message { role: Role::Assistant, content },
        stop_reason: stop_reason(&finish_reason, has_tool_calls),
        usage: wire.usage.unwrap_or_default().usage(),
        model: wire.model.unwrap_or_else(|| model.to_owned()),
        id: wire.id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(body: &[u8], model: &str) -> Result<ChatResponse, LlmError> {
        decode_response(body, "openai", model, &mut CallIds::new(&[]))
    }

    #[test]
    fn decodes_text_tools_finish_reasons_and_usage() {
        let body = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-x-2025",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Checking.",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{\"city\":\"Paris\"}"}},
                    {"type": "function", "function": {"name": "w", "arguments": ""}},
                    {"id": "c3", "type": "function", "function": {"name": "w", "arguments": {"city": "Rome"}}},
                    {"id": "c4", "type": "function", "function": {"name": "w", "arguments": "{\"city\": Rome"}},
                ],
            }}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27,
                      "prompt_tokens_details": {"cached_tokens": 8},
                      "completion_tokens_details": {"reasoning_tokens": 3}},
        });
        let response = decode(body.to_string().as_bytes(), "gpt-x").unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.usage,
            Usage {
                input_tokens: 12,
                output_tokens: 7,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 8,
                reasoning_output_tokens: 3
            }
        );
        assert_eq!((response.id.as_deref(), response.model.as_str()), (Some("chatcmpl-1"), "gpt-x-2025"));
        let content = &response.message.content;
        assert_eq!(content[0], ContentBlock::text("Checking."));
        assert_eq!(content[1], ContentBlock::ToolUse(ToolUse::new("c1", "w", json!({"city": "Paris"}))));
        assert_eq!(content[2], ContentBlock::ToolUse(ToolUse::new("call_1", "w", json!({}))));
        assert_eq!(content[3], ContentBlock::ToolUse(ToolUse::new("c3", "w", json!({"city": "Rome"}))));
        let ContentBlock::ToolUse(bad) = &content[4] else { panic!("{content:?}") };
        assert_eq!(
            (bad.input.clone(), bad.invalid_input.as_ref().unwrap().raw.as_str()),
            (Value::Null, "{\"city\": Rome")
        );

        for (finish, tools, want) in [
            ("stop", false, StopReason::EndTurn),
            ("stop", true, StopReason::ToolUse),
            ("function_call", true, StopReason::ToolUse),
            ("length", false, StopReason::MaxTokens),
            ("content_filter", false, StopReason::Other("content_filter".into())),
        ] {
            assert_eq!(stop_reason(finish, tools), want);
        }
        // Ids the server left out never repeat one of the reply or the conversation.
        let body = json!({"choices": [{"finish_reason": "tool_calls", "message": {"tool_calls": [
            {"function": {"name": "w", "arguments": "{}"}},
            {"id": "call_2", "function": {"name": "w", "arguments": "{}"}},
            {"function": {"name": "w", "arguments": "{}"}},
        ]}}]});
        let earlier = [std::sync::Arc::new(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse(ToolUse::new("call_0", "w", json!({})))],
        })];
        let response =
            decode_response(body.to_string().as_bytes(), "openai", "m", &mut CallIds::new(&earlier)).unwrap();
        let ids: Vec<&str> = response.message.tool_uses().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["call_1", "call_2", "call_3"]);

        let minimal = json!({"choices": [{"message": {"content": null}, "finish_reason": "stop"}]});
        let response = decode(minimal.to_string().as_bytes(), "local").unwrap();
        assert_eq!((response.model.as_str(), response.id.clone(), response.usage), ("local", None, Usage::default()));
        assert!(response.message.content.is_empty());
    }

    #[test]
    fn malformed_bodies() {
        let err = |body: &str| decode(body.as_bytes(), "gpt-x").unwrap_err();
        for body in
            ["{oops", r#"{"choices": []}"#, r#"{"id": "x"}"#, r#"{"choices": [{"message": {"content": "hi"}}]}"#]
        {
            assert!(
                matches!(err(body), LlmError::MalformedResponse { provider: "openai", ref model, .. } if model == "gpt-x"),
                "{body}"
            );
        }
    }

    #[test]
    fn error_bodies_are_the_errors_they_stand_for() {
        let err = |body: &str| decode(body.as_bytes(), "gpt-x").unwrap_err();
        assert!(matches!(
            err(r#"{"error": {"message": "model crashed"}}"#),
            LlmError::Server { provider: "openai", status: 500, ref model, ref message } if model == "gpt-x" && message == "model crashed"
        ));
        assert!(matches!(
            err(r#"{"error": "model crashed"}"#),
            LlmError::Server { ref message, .. } if message == "model crashed"
        ));
        assert!(matches!(
            err(r#"{"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}"#),
            LlmError::RateLimited { .. }
        ));
        assert!(matches!(
            err(r#"{"error": {"message": "too long", "type": "invalid_request_error"}, "choices": []}"#),
            LlmError::InvalidRequest { status: 400, .. }
        ));
    }
}
