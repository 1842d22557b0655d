//! Decoding a streamed Chat Completions response: `data:` chunks, then `[DONE]`.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::reply::{WireUsage, content_text, stop_reason};
use super::text_tools::apply_text_tool_calls;
use crate::call_ids::CallIds;
use crate::error::LlmError;
use crate::http::{self, SseDecoder, malformed};
use crate::message::{ContentBlock, Message, Role, ToolUse, Usage};
use crate::model::{ChatResponse, StreamEvent};

#[derive(Deserialize)]
struct WireChunk {
    id: Option<String>,
    model: Option<String>,
    #[serde(default)]
    choices: Vec<WireChunkChoice>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChunkChoice {
    #[serde(default)]
    index: u64,
    delta: Option<WireDelta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireDelta {
    content: Option<Value>,
    tool_calls: Option<Vec<WireToolCallDelta>>,
}

#[derive(Deserialize)]
struct WireToolCallDelta {
    index: Option<u64>,
    id: Option<String>,
    function: Option<WireFunctionDelta>,
}

#[derive(Deserialize)]
struct WireFunctionDelta {
    name: Option<String>,
    arguments: Option<Box<RawValue>>,
}

/// A tool call being streamed.
struct ToolAcc {
    block: usize,
    id: String,
    name: String,
    arguments: String,
    /// Arguments some servers send whole, as an object (its JSON text).
    object: Option<String>,
}

/// Assembles the chunks of a streamed Chat Completions response. Content blocks are
/// numbered in the order they first appear (text first, as in the non-streamed reply,
/// unless a server sends tool calls before text).
pub(super) struct Decoder<'a> {
    provider: &'static str,
    model: String,
    /// The tools whose calls written as text are accepted.
    text_tools: Vec<&'a str>,
    /// The ids of calls that come without one.
    ids: CallIds<'a>,
    id: Option<String>,
    response_model: Option<String>,
    text: Option<(usize, String)>,
    tools: Vec<ToolAcc>,
    tool_index: HashMap<u64, usize>,
    blocks: usize,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    done: bool,
    /// With text tool calls, text is held back while it could still be a call
    /// written as text (it starts with `{`, `[` or a fence), so a call is never
    /// streamed as answer text; `true` once it is known to be text.
    released: bool,
}

impl<'a> Decoder<'a> {
    /// A decoder of `provider` accepting calls of `text_tools` written as text, with
    /// ids from `ids`.
    pub(super) fn new(provider: &'static str, model: &str, text_tools: Vec<&'a str>, ids: CallIds<'a>) -> Self {
        Self {
            provider,
            model: model.to_owned(),
            text_tools,
            ids,
            id: None,
            response_model: None,
            text: None,
            tools: Vec::new(),
            tool_index: HashMap::new(),
            blocks: 0,
            finish_reason: None,
            usage: None,
            done: false,
            released: false,
        }
    }

    fn malformed(&self, message: impl Into<String>) -> LlmError {
        malformed(self.provider, &self.model, message)
    }

    fn text_delta(&mut self, piece: String, out: &mut Vec<StreamEvent>) {
        if piece.is_empty() {
            return;
        }
        let (index, text) = self.text.get_or_insert_with(|| {
            self.blocks += 1;
            (self.blocks - 1, String::new())
        });
        text.push_str(&piece);
        if self.text_tools.is_empty() || self.released {
            out.push(StreamEvent::TextDelta { index: *index, text: piece });
            return;
        }
        let start = text.trim_start();
        // JSON, a fence or a tag (`<tool_call>`, `<tools>`) could still be a call: held
        // back until the reply ends or shows otherwise.
        if start.is_empty() || start.starts_with(['{', '[', '`', '<']) {
            return;
        }
        self.released = true;
        out.push(StreamEvent::TextDelta { index: *index, text: text.clone() });
    }

    fn tool_delta(&mut self, position: usize, delta: WireToolCallDelta, out: &mut Vec<StreamEvent>) {
        let (name, arguments) = delta.function.map(|f| (f.name, f.arguments)).unwrap_or_default();
        // Servers that leave out `index` are matched by call id: a new id is a new call,
        // and a piece without id or index continues the call before it.
        let existing = match (delta.index, delta.id.as_deref()) {
            (Some(key), _) => self.tool_index.get(&key).copied(),
            (None, Some(id)) => self.tools.iter().position(|t| t.id == id),
            (None, None) => self.tools.len().checked_sub(1),
        };
        let key = delta.index.unwrap_or(u64::MAX - position as u64 - self.tools.len() as u64);
        let slot = match existing {
            Some(slot) => slot,
            None => {
                let block = self.blocks;
                self.blocks += 1;
                let id = self.ids.or_new(delta.id, self.tools.len());
                let name = name.clone().unwrap_or_default();
                out.push(StreamEvent::ToolUseStart { index: block, id: id.clone(), name: name.clone() });
                self.tools.push(ToolAcc { block, id, name, arguments: String::new(), object: None });
                self.tool_index.insert(key, self.tools.len() - 1);
                self.tools.len() - 1
            }
        };
        let tool = &mut self.tools[slot];
        if tool.name.is_empty() {
            tool.name = name.unwrap_or_default();
        }
        let Some(raw) = arguments.as_deref().map(RawValue::get) else { return };
        if raw.starts_with('"') {
            match serde_json::from_str::<String>(raw) {
                Ok(piece) if !piece.is_empty() => {
                    tool.arguments.push_str(&piece);
                    out.push(StreamEvent::ToolInputDelta { index: tool.block, partial_json: piece });
                }
                _ => {}
            }
        } else if raw.starts_with('{') {
            out.push(StreamEvent::ToolInputDelta { index: tool.block, partial_json: raw.to_owned() });
            tool.object = Some(raw.to_owned());
        }
    }
}

impl SseDecoder for Decoder<'_> {
    /// A chunk with an `error`, or an `error` event (llama.cpp's), ends the stream with
    /// the error of the HTTP status it stands for ([`http::body_error`]).
    fn event(&mut self, name: &str, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        if name == "error" {
            return Err(http::event_error(self.provider, &self.model, data));
        }
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: WireChunk = serde_json::from_str(data).map_err(|e| self.malformed(format!("invalid chunk: {e}")))?;
        if let Some(error) = &chunk.error {
            return Err(http::body_error(self.provider, &self.model, error));
        }
        if self.id.is_none() {
            self.id = chunk.id;
        }
        if self.response_model.is_none() {
            self.response_model = chunk.model;
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.usage());
        }
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(delta) = choice.delta {
                self.text_delta(content_text(delta.content.as_ref()), out);
                for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                    self.tool_delta(position, call, out);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
        Ok(())
    }

    fn is_complete(&self) -> bool {
        self.done
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<ChatResponse, LlmError> {
        let finish_reason = self.finish_reason.take().ok_or_else(|| {
            let what = if self.done { "no finish_reason" } else { "the stream ended before a finish_reason" };
            self.malformed(what)
        })?;
        let mut blocks: Vec<(usize, ContentBlock)> = Vec::new();
        if let Some((index, text)) = self.text.take() {
            blocks.push((index, ContentBlock::Text { text }));
        }
        for tool in std::mem::take(&mut self.tools) {
            let arguments = tool.object.as_deref().unwrap_or(&tool.arguments);
            let call = ToolUse::from_raw_arguments(tool.id, tool.name, arguments);
            blocks.push((tool.block, ContentBlock::ToolUse(call)));
        }
        blocks.sort_by_key(|(index, _)| *index);
        let content: Vec<ContentBlock> = blocks.into_iter().map(|(_, block)| block).collect();
        let has_tool_calls = content.iter().any(|b| matches!(b, ContentBlock::ToolUse(_)));
        let mut response = ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason: stop_reason(&finish_reason, has_tool_calls),
            usage: self.usage.unwrap_or_default(),
            model: self.response_model.take().unwrap_or_else(|| self.model.clone()),
            id: self.id.take(),
        };
        let calls = apply_text_tool_calls(&mut response, &self.text_tools, &mut self.ids);
        if !self.text_tools.is_empty() && !self.released {
            // Held back to the end: the text that did not turn out to be a call.
            for (index, block) in response.message.content.iter().enumerate() {
                if let ContentBlock::Text { text } = block
                    && !text.is_empty()
                {
                    out.push(StreamEvent::TextDelta { index, text: text.clone() });
                }
            }
        }
        for index in calls {
            if let ContentBlock::ToolUse(tool) = &response.message.content[index] {
                out.push(StreamEvent::ToolUseStart { index, id: tool.id.clone(), name: tool.name.clone() });
                let partial_json =
                    tool.invalid_input.as_ref().map_or_else(|| tool.input.to_string(), |i| i.raw.clone());
                out.push(StreamEvent::ToolInputDelta { index, partial_json });
            }
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::message::StopReason;

    fn run_stream(chunks: &[&str], text_tools: Vec<&str>) -> (Vec<StreamEvent>, Result<ChatResponse, LlmError>) {
        let mut decoder = Decoder::new("openai", "gpt-x", text_tools, CallIds::new(&[]));
        let mut out = Vec::new();
        for chunk in chunks {
            if let Err(e) = decoder.event("message", chunk, &mut out) {
                return (out, Err(e));
            }
        }
        let result = decoder.finish(&mut out);
        (out, result)
    }

    #[test]
    fn streams_text_and_parallel_tool_calls() {
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "chatcmpl-1", "model": "gpt-x-2025", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                .to_string()
        };
        let chunks = [
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": "Let me "}), Value::Null),
            chunk(json!({"content": "check."}), Value::Null),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "w", "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}), Value::Null),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "c2", "type": "function", "function": {"name": "w", "arguments": "{\"city\":\"Rome\"}"}}]}),
                Value::Null,
            ),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}), Value::Null),
            chunk(json!({}), json!("tool_calls")),
            json!({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}})
                .to_string(),
            "[DONE]".to_owned(),
        ];
        let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
        let (events, response) = run_stream(&chunks, vec![]);
        assert_eq!(
            events,
            vec![
                StreamEvent::TextDelta { index: 0, text: "Let me ".into() },
                StreamEvent::TextDelta { index: 0, text: "check.".into() },
                StreamEvent::ToolUseStart { index: 1, id: "c1".into(), name: "w".into() },
                StreamEvent::ToolInputDelta { index: 1, partial_json: "{\"city\":".into() },
                StreamEvent::ToolUseStart { index: 2, id: "c2".into(), name: "w".into() },
                StreamEvent::ToolInputDelta { index: 2, partial_json: "{\"city\":\"Rome\"}".into() },
                StreamEvent::ToolInputDelta { index: 1, partial_json: "\"Paris\"}".into() },
            ]
        );
        let response = response.unwrap();
        assert_eq!(
            response.message.content,
            vec![
                ContentBlock::text("Let me check."),
                ContentBlock::ToolUse(ToolUse::new("c1", "w", json!({"city": "Paris"}))),
                ContentBlock::ToolUse(ToolUse::new("c2", "w", json!({"city": "Rome"}))),
            ]
        );
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(response.usage, Usage::new(9, 4));
        assert_eq!((response.id.as_deref(), response.model.as_str()), (Some("chatcmpl-1"), "gpt-x-2025"));
    }

    #[test]
    fn stream_text_tool_calls_become_events() {
        let text = r#"{"name": "get_time", "arguments": {}}"#;
        let content =
            json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}).to_string();
        let (events, response) = run_stream(&[&content, "[DONE]"], vec!["get_time"]);
        let response = response.unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.message.content,
            vec![ContentBlock::ToolUse(ToolUse::new("call_0", "get_time", json!({})))]
        );
        // The call written as text is not streamed as text: only its tool events.
        assert_eq!(
            events[..],
            [
                StreamEvent::ToolUseStart { index: 0, id: "call_0".into(), name: "get_time".into() },
                StreamEvent::ToolInputDelta { index: 0, partial_json: "{}".into() },
            ]
        );
        // Between tags, as Qwen2.5-Coder writes some calls, and in pieces.
        let pieces = ["<tools>\n{\"name\": \"get_ti", "me\", \"arguments\": {}}\n</tools>"];
        let chunks: Vec<String> = pieces
            .iter()
            .map(|p| json!({"choices": [{"index": 0, "delta": {"content": p}}]}).to_string())
            .chain([json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).to_string()])
            .collect();
        let chunks: Vec<&str> = chunks.iter().map(String::as_str).chain(["[DONE]"]).collect();
        let (events, response) = run_stream(&chunks, vec!["get_time"]);
        assert_eq!(response.unwrap().stop_reason, StopReason::ToolUse);
        assert!(!events.iter().any(|e| matches!(e, StreamEvent::TextDelta { .. })), "{events:?}");
    }

    #[test]
    fn stream_tool_calls_without_index_are_told_apart_by_id() {
        let call = |id: Option<&str>, name: Option<&str>, args: &str| {
            let mut tc = json!({"function": {"arguments": args}});
            if let Some(id) = id {
                tc["id"] = json!(id);
                tc["type"] = json!("function");
            }
            if let Some(name) = name {
                tc["function"]["name"] = json!(name);
            }
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [tc]}}]}).to_string()
        };
        let chunks = [
            call(Some("a"), Some("get_weather"), r#"{"location":"#),
            call(None, None, r#""Oslo"}"#),
            call(Some("b"), Some("get_weather"), r#"{"location":"Rome"}"#),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
        ];
        let chunks: Vec<&str> = chunks.iter().map(String::as_str).chain(["[DONE]"]).collect();
        let (_, response) = run_stream(&chunks, vec![]);
        let response = response.unwrap();
        let calls: Vec<(&str, &Value)> = response.message.tool_uses().map(|t| (t.id.as_str(), &t.input)).collect();
        assert_eq!(calls, [("a", &json!({"location": "Oslo"})), ("b", &json!({"location": "Rome"}))]);
    }

    #[test]
    fn stream_errors() {
        let (_, r) = run_stream(&[r#"{"choices": [{"index": 0, "delta": {"content": "hi"}}]}"#], vec![]);
        assert!(matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("finish_reason")));
        let (_, r) = run_stream(&[r#"{"error": {"message": "out of memory"}}"#], vec![]);
        assert!(matches!(r, Err(LlmError::Server { status: 500, ref message, .. }) if message == "out of memory"));
        let (_, r) = run_stream(&[r#"{"error": {"message": "slow down", "type": "rate_limit_exceeded"}}"#], vec![]);
        assert!(matches!(r, Err(LlmError::RateLimited { .. })));
        // llama.cpp's `error:` line, read as an `error` event, with or without a wrapper.
        let mut decoder = Decoder::new("openai", "gpt-x", vec![], CallIds::new(&[]));
        let error = r#"{"code": 400, "message": "too long", "type": "exceed_context_size_error"}"#;
        let r = decoder.event("error", error, &mut Vec::new());
        assert!(matches!(r, Err(LlmError::InvalidRequest { status: 400, ref message, .. }) if message == "too long"));
        let r = decoder.event("error", r#"{"error": {"type": "server_error", "message": "m"}}"#, &mut Vec::new());
        assert!(matches!(r, Err(LlmError::Server { status: 500, .. })));
        let r = decoder.event("error", "it broke", &mut Vec::new());
        assert!(matches!(r, Err(LlmError::Server { ref message, .. }) if message == "it broke"));
        let (_, r) = run_stream(&["{nope"], vec![]);
        assert!(matches!(r, Err(LlmError::MalformedResponse { .. })));
        // A stream that ends after its finish_reason without [DONE] is accepted.
        let (_, r) = run_stream(
            &[r#"{"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}"#],
            vec![],
        );
        assert_eq!(r.unwrap().message.text(), "hi");
    }

    #[test]
    fn stream_tool_calls_without_an_id_get_ids_after_the_conversation() {
        let earlier = [std::sync::Arc::new(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse(ToolUse::new("call_0", "w", json!({})))],
        })];
        let mut decoder = Decoder::new("openai", "gpt-x", vec![], CallIds::new(&earlier));
        let mut out = Vec::new();
        for chunk in [
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "w", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "call_2", "function": {"name": "w", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 2, "function": {"name": "w", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ] {
            decoder.event("message", &chunk.to_string(), &mut out).unwrap();
        }
        let response = decoder.finish(&mut out).unwrap();
        let ids: Vec<&str> = response.message.tool_uses().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["call_1", "call_2", "call_3"]);
    }
}
