//! Decoding a streamed Messages API response: its events, from `message_start` to
//! `message_stop`.

use serde::Deserialize;
use serde_json::{Value, json};

use super::PROVIDER;
use super::reply::{WireUsage, error_event, provider_block};
use crate::error::LlmError;
use crate::http::{SseDecoder, malformed};
use crate::message::{
    ContentBlock, MAX_JSON_DEPTH, Message, Role, StopReason, ToolUse, Usage, nests_deeper_than, too_deep,
    value_deeper_than,
};
use crate::model::{ChatResponse, StreamEvent};

fn decode_block(block: Value) -> Result<ContentBlock, String> {
    let str_field = |name: &str| {
        block
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("a content block has no `{name}`"))
    };
    match block.get("type").and_then(Value::as_str) {
        Some("text") => Ok(ContentBlock::text(str_field("text")?)),
        Some("tool_use") => {
            let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
            Ok(ContentBlock::ToolUse(ToolUse::checked(str_field("id")?, str_field("name")?, input)))
        }
        Some(_) if value_deeper_than(&block, MAX_JSON_DEPTH) => {
            Err(format!("a content block is refused: {}", too_deep()))
        }
        Some(_) => Ok(ContentBlock::Provider { provider: PROVIDER.into(), raw: block }),
        None => Err("a content block has no `type`".into()),
    }
}

/// A content block being streamed.
enum Block {
    Text(String),
    /// A tool call; `json` collects its `input_json_delta`s, which replace its input.
    Tool {
        tool: ToolUse,
        json: String,
    },
    /// A block kept raw; `json` collects `input_json_delta`s (server tools) for `input`.
    Raw {
        value: Value,
        json: String,
    },
}

/// Assembles the events of a streamed Messages API response.
pub(super) struct Decoder {
    model: String,
    id: Option<String>,
    response_model: Option<String>,
    blocks: Vec<Option<Block>>,
    stop_reason: Option<String>,
    usage: Usage,
    complete: bool,
}

impl Decoder {
    pub(super) fn new(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            id: None,
            response_model: None,
            blocks: Vec::new(),
            stop_reason: None,
            usage: Usage::default(),
            complete: false,
        }
    }

    fn malformed(&self, message: impl Into<String>) -> LlmError {
        malformed(PROVIDER, &self.model, message)
    }

    fn index(&self, value: &Value) -> Result<usize, LlmError> {
        value
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .ok_or_else(|| self.malformed("an event has no `index`"))
    }

    fn block(&mut self, index: usize) -> Result<&mut Block, LlmError> {
        let missing = self.malformed(format!("a delta for content block {index}, which did not start"));
        self.blocks.get_mut(index).and_then(Option::as_mut).ok_or(missing)
    }

    fn start_block(&mut self, value: &Value, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let index = self.index(value)?;
        let raw =
            value.get("content_block").cloned().ok_or_else(|| self.malformed("content_block_start has no block"))?;
        let block = match decode_block(raw).map_err(|m| self.malformed(m))? {
            ContentBlock::Text { text } => {
                if !text.is_empty() {
                    out.push(StreamEvent::TextDelta { index, text: text.clone() });
                }
                Block::Text(text)
            }
            ContentBlock::ToolUse(tool) => {
                out.push(StreamEvent::ToolUseStart { index, id: tool.id.clone(), name: tool.name.clone() });
                Block::Tool { tool, json: String::new() }
            }
            ContentBlock::Provider { raw, .. } => {
                let thinking = raw.get("thinking").and_then(Value::as_str).filter(|t| !t.is_empty());
                if let Some(text) = thinking {
                    out.push(StreamEvent::ReasoningDelta { index, text: text.to_owned() });
                }
                Block::Raw { value: raw, json: String::new() }
            }
            ContentBlock::ToolResult(_) | ContentBlock::Image { .. } | ContentBlock::Reasoning(_) => {
                unreachable!("decode_block makes no tool results, images or reasoning")
            }
        };
        // Blocks arrive in order; an index far beyond them is a broken stream, not a
        // reason to allocate.
        if index > self.blocks.len() {
            return Err(self.malformed(format!("content block {index} started before block {}", self.blocks.len())));
        }
        if self.blocks.len() == index {
            self.blocks.push(None);
        }
        self.blocks[index] = Some(block);
        Ok(())
    }

    fn delta(&mut self, value: &Value, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let index = self.index(value)?;
        let delta = value.get("delta").ok_or_else(|| self.malformed("content_block_delta has no delta"))?;
        let kind = delta.get("type").and_then(Value::as_str).unwrap_or_default();
        let text_of = |field: &str| delta.get(field).and_then(Value::as_str).unwrap_or_default();
        match (self.block(index)?, kind) {
            (Block::Text(text), "text_delta") => {
                let piece = text_of("text");
                text.push_str(piece);
                if !piece.is_empty() {
                    out.push(StreamEvent::TextDelta { index, text: piece.to_owned() });
                }
            }
            (Block::Tool { json, .. }, "input_json_delta") => {
                let piece = text_of("partial_json");
                json.push_str(piece);
                if !piece.is_empty() {
                    out.push(StreamEvent::ToolInputDelta { index, partial_json: piece.to_owned() });
                }
            }
            (Block::Raw { json, .. }, "input_json_delta") => json.push_str(text_of("partial_json")),
            (Block::Raw { value, .. }, "thinking_delta") => {
                let piece = text_of("thinking");
                append_str(value, "thinking", piece);
                if !piece.is_empty() {
                    out.push(StreamEvent::ReasoningDelta { index, text: piece.to_owned() });
                }
            }
            (Block::Raw { value, .. }, "signature_delta") => append_str(value, "signature", text_of("signature")),
            // citations_delta and deltas added later: not kept.
            _ => {}
        }
        Ok(())
    }

    fn message_start(&mut self, value: &Value) -> Result<(), LlmError> {
        let message = value.get("message").ok_or_else(|| self.malformed("message_start has no message"))?;
        self.id = message.get("id").and_then(Value::as_str).map(str::to_owned);
        self.response_model = message.get("model").and_then(Value::as_str).map(str::to_owned);
        if let Some(usage) = message.get("usage") {
            self.apply_usage(usage)?;
        }
        Ok(())
    }

    fn apply_usage(&mut self, usage: &Value) -> Result<(), LlmError> {
        let wire = WireUsage::deserialize(usage).map_err(|e| self.malformed(format!("invalid usage: {e}")))?;
        wire.apply(&mut self.usage);
        Ok(())
    }
}

fn append_str(value: &mut Value, field: &str, piece: &str) {
    if let Some(object) = value.as_object_mut() {
        let entry = object.entry(field).or_insert_with(|| Value::String(String::new()));
        match entry {
            Value::String(s) => s.push_str(piece),
            other => *other = Value::String(piece.to_owned()),
        }
    }
}

impl SseDecoder for Decoder {
    fn event(&mut self, _name: &str, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let value: Value =
            serde_json::from_str(data).map_err(|e| self.malformed(format!("invalid JSON in an event: {e}")))?;
        match value.get("type").and_then(Value::as_str).unwrap_or_default() {
            "message_start" => self.message_start(&value)?,
            "content_block_start" => self.start_block(&value, out)?,
            "content_block_delta" => self.delta(&value, out)?,
            "message_delta" => {
                if let Some(reason) = value.get("delta").and_then(|d| d.get("stop_reason")).and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(usage) = value.get("usage") {
                    self.apply_usage(usage)?;
                }
            }
            "message_stop" => self.complete = true,
            "error" => return Err(error_event(value.get("error"), &self.model)),
            // ping, content_block_stop, and events added later.
            _ => {}
        }
        Ok(())
    }

    fn is_complete(&self) -> bool {
        self.complete
    }

    fn finish(&mut self, _out: &mut Vec<StreamEvent>) -> Result<ChatResponse, LlmError> {
        if !self.complete {
            return Err(self.malformed("the stream ended before message_stop"));
        }
        let (Some(id), Some(model)) = (self.id.take(), self.response_model.take()) else {
            return Err(self.malformed("the stream had no message_start"));
        };
        let stop_reason = self.stop_reason.take().ok_or_else(|| self.malformed("the stream had no stop_reason"))?;
        let mut content = Vec::with_capacity(self.blocks.len());
        for (index, block) in std::mem::take(&mut self.blocks).into_iter().enumerate() {
            let block = block.ok_or_else(|| self.malformed(format!("content block {index} never started")))?;
            content.push(match block {
                Block::Text(text) => ContentBlock::Text { text },
                Block::Tool { tool, json } if json.trim().is_empty() => ContentBlock::ToolUse(tool),
                Block::Tool { tool, json } => {
                    ContentBlock::ToolUse(ToolUse::from_raw_arguments(tool.id, tool.name, &json))
                }
                Block::Raw { value, json } if json.trim().is_empty() => provider_block(value),
                Block::Raw { mut value, json } => {
                    if nests_deeper_than(json.as_bytes(), MAX_JSON_DEPTH) {
                        return Err(
                            self.malformed(format!("the input of content block {index} is refused: {}", too_deep()))
                        );
                    }
                    let input: Value = serde_json::from_str(&json)
                        .map_err(|e| self.malformed(format!("invalid input of content block {index}: {e}")))?;
                    value["input"] = input;
                    ContentBlock::Provider { provider: PROVIDER.into(), raw: value }
                }
            });
        }
        Ok(ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason: StopReason::parse(&stop_reason),
            usage: self.usage,
            model,
            id: Some(id),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_stream(events: &[Value]) -> (Vec<StreamEvent>, Result<ChatResponse, LlmError>) {
        let mut decoder = Decoder::new("claude-x");
        let mut out = Vec::new();
        for event in events {
            if let Err(e) = decoder.event("", &event.to_string(), &mut out) {
                return (out, Err(e));
            }
        }
        let result = decoder.finish(&mut out);
        (out, result)
    }

    #[test]
    fn streams_thinking_text_and_tools() {
        let (events, response) = run_stream(&[
            json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude-x-2025", "content": [],
                   "stop_reason": null, "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 4}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "a"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "b"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "tu_1", "name": "w", "input": {}}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"ci"}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "ty\": \"Paris\"}"}}),
            json!({"type": "content_block_stop", "index": 2}),
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "tu_2", "name": "now", "input": {}}}),
            json!({"type": "content_block_stop", "index": 3}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 20}}),
            json!({"type": "message_stop"}),
        ]);
        assert_eq!(
            events,
            vec![
                StreamEvent::ReasoningDelta { index: 0, text: "a".into() },
                StreamEvent::ReasoningDelta { index: 0, text: "b".into() },
                StreamEvent::TextDelta { index: 1, text: "Hi".into() },
                StreamEvent::ToolUseStart { index: 2, id: "tu_1".into(), name: "w".into() },
                StreamEvent::ToolInputDelta { index: 2, partial_json: "{\"ci".into() },
                StreamEvent::ToolInputDelta { index: 2, partial_json: "ty\": \"Paris\"}".into() },
                StreamEvent::ToolUseStart { index: 3, id: "tu_2".into(), name: "now".into() },
            ]
        );
        let response = response.unwrap();
        assert_eq!(
            response.message.content,
            vec![
                ContentBlock::Reasoning(crate::Reasoning::new("anthropic", "ab", json!({"signature": "sig"}))),
                ContentBlock::text("Hi"),
                ContentBlock::ToolUse(ToolUse::new("tu_1", "w", json!({"city": "Paris"}))),
                ContentBlock::ToolUse(ToolUse::new("tu_2", "now", json!({}))),
            ]
        );
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.usage,
            Usage { input_tokens: 10, output_tokens: 20, cache_read_input_tokens: 4, ..Usage::default() }
        );
        assert_eq!((response.id.as_deref(), response.model.as_str()), (Some("msg_1"), "claude-x-2025"));
    }

    #[test]
    fn stream_truncated_tool_input_is_kept_as_invalid() {
        let (_, response) = run_stream(&[
            json!({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {"input_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "w", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Pa"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ]);
        let response = response.unwrap();
        let tool = response.message.tool_uses().next().unwrap();
        assert_eq!(tool.invalid_input.as_ref().unwrap().raw, "{\"city\": \"Pa");
        assert_eq!(response.stop_reason, StopReason::MaxTokens);
    }

    #[test]
    fn stream_errors() {
        let start = json!({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {}}});
        let (_, r) = run_stream(&[
            start.clone(),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ]);
        assert!(matches!(r, Err(LlmError::Overloaded { .. })));
        let (_, r) =
            run_stream(&[start.clone(), json!({"type": "error", "error": {"type": "api_error", "message": "boom"}})]);
        assert!(matches!(r, Err(LlmError::Server { status: 500, ref message, .. }) if message == "boom"));
        let (_, r) = run_stream(&[
            start.clone(),
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
        ]);
        assert!(matches!(r, Err(LlmError::RateLimited { retry_after: None, .. })));
        // A block index far beyond the blocks so far is refused, not allocated.
        let (_, r) = run_stream(&[
            start.clone(),
            json!({"type": "content_block_start", "index": 1_000_000_000_000u64, "content_block": {"type": "text", "text": ""}}),
        ]);
        assert!(
            matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("started before"))
        );
        let (_, r) = run_stream(std::slice::from_ref(&start));
        assert!(matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("message_stop")));
        let (_, r) = run_stream(&[
            start.clone(),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}),
        ]);
        assert!(matches!(r, Err(LlmError::MalformedResponse { .. })));
        let mut decoder = Decoder::new("x");
        assert!(matches!(decoder.event("", "{nope", &mut Vec::new()), Err(LlmError::MalformedResponse { .. })));
    }
}
