//! Decoding a streamed answer (`streamGenerateContent?alt=sse`): each event is a
//! `GenerateContentResponse` with the next parts; the last has the finish reason, and
//! the stream ends with the body (there is no end event).

use std::sync::Arc;

use super::reply::{Assembler, WireResponse};
use crate::error::LlmError;
use crate::http::{self, SseDecoder};
use crate::message::Message;
use crate::model::{ChatResponse, StreamEvent};

/// Assembles the chunks of a stream with the [`Assembler`] a whole body is decoded
/// with, so the stream's response equals the non-streamed one.
pub(super) struct Decoder<'a> {
    provider: &'static str,
    model: String,
    assembler: Assembler<'a>,
}

impl<'a> Decoder<'a> {
    /// A decoder of `provider`'s `model` answering a request with these messages.
    pub(super) fn new(provider: &'static str, model: &str, conversation: &'a [Arc<Message>]) -> Self {
        Self { provider, model: model.to_owned(), assembler: Assembler::new(provider, model, conversation) }
    }
}

impl SseDecoder for Decoder<'_> {
    /// A chunk with an `error` (or an `error` event) ends the stream with the error of
    /// its `code`.
    fn event(&mut self, name: &str, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        if name == "error" {
            return Err(http::event_error(self.provider, &self.model, data));
        }
        let chunk: WireResponse =
            serde_json::from_str(data).map_err(|e| self.assembler.malformed(format!("invalid chunk: {e}")))?;
        self.assembler.feed(chunk, out)
    }

    /// Never: the stream ends with its body, after the chunk with the finish reason and
    /// any usage after it.
    fn is_complete(&self) -> bool {
        false
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<ChatResponse, LlmError> {
        if !self.assembler.finished() {
            return Err(self.assembler.malformed("the stream ended before a finishReason"));
        }
        self.assembler.finish(out)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::message::{ContentBlock, Reasoning, StopReason, ToolUse};

    fn run(chunks: &[Value]) -> (Vec<StreamEvent>, Result<ChatResponse, LlmError>) {
        let mut decoder = Decoder::new("gemini", "gemini-x", &[]);
        let mut out = Vec::new();
        for chunk in chunks {
            if let Err(e) = decoder.event("message", &chunk.to_string(), &mut out) {
                return (out, Err(e));
            }
        }
        let result = decoder.finish(&mut out);
        (out, result)
    }

    fn chunk(parts: Value, finish: Option<&str>) -> Value {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(finish) = finish {
            candidate["finishReason"] = finish.into();
        }
        json!({"candidates": [candidate], "modelVersion": "gemini-x-001", "responseId": "r1"})
    }

    #[test]
    fn streams_thoughts_text_and_calls() {
        let (events, response) = run(&[
            chunk(json!([{"text": "Think", "thought": true}]), None),
            chunk(json!([{"text": "ing.", "thought": true}]), None),
            chunk(json!([{"text": "Let me "}]), None),
            chunk(json!([{"text": "check."}]), None),
            chunk(
                json!([{"functionCall": {"name": "w", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"},
                       {"functionCall": {"name": "w", "args": {"city": "Rome"}}}]),
                Some("STOP"),
            ),
            json!({"usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 7}}),
        ]);
        assert_eq!(
            events,
            vec![
                StreamEvent::ReasoningDelta { index: 0, text: "Think".into() },
                StreamEvent::ReasoningDelta { index: 0, text: "ing.".into() },
                StreamEvent::TextDelta { index: 1, text: "Let me ".into() },
                StreamEvent::TextDelta { index: 1, text: "check.".into() },
                StreamEvent::ToolUseStart { index: 3, id: "call_0".into(), name: "w".into() },
                StreamEvent::ToolInputDelta { index: 3, partial_json: "{\"city\":\"Paris\"}".into() },
                StreamEvent::ToolUseStart { index: 4, id: "call_1".into(), name: "w".into() },
                StreamEvent::ToolInputDelta { index: 4, partial_json: "{\"city\":\"Rome\"}".into() },
            ]
        );
        let response = response.unwrap();
        assert_eq!(
            response.message.content,
            vec![
                ContentBlock::Reasoning(Reasoning::new("gemini", "Thinking.", Value::Null)),
                ContentBlock::text("Let me check."),
                ContentBlock::Reasoning(Reasoning::new("gemini", "", json!({"thought_signature": "c2ln"}))),
                ContentBlock::ToolUse(ToolUse::new("call_0", "w", json!({"city": "Paris"}))),
                ContentBlock::ToolUse(ToolUse::new("call_1", "w", json!({"city": "Rome"}))),
            ]
        );
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            (response.usage.input_tokens, response.usage.output_tokens, response.usage.reasoning_output_tokens),
            (10, 12, 7)
        );
        assert_eq!((response.model.as_str(), response.id.as_deref()), ("gemini-x-001", Some("r1")));
    }

    #[test]
    fn a_late_text_signature_goes_before_its_text() {
        let (_, response) = run(&[
            chunk(json!([{"text": "Sunny"}]), None),
            chunk(json!([{"text": " in Paris."}]), None),
            chunk(json!([{"text": "", "thoughtSignature": "c2ln"}]), Some("STOP")),
        ]);
        assert_eq!(
            response.unwrap().message.content,
            vec![
                ContentBlock::Reasoning(Reasoning::new("gemini", "", json!({"thought_signature": "c2ln"}))),
                ContentBlock::text("Sunny in Paris."),
            ]
        );
    }

    #[test]
    fn stream_errors() {
        let (_, r) = run(&[chunk(json!([{"text": "Hi"}]), None)]);
        assert!(
            matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("before a finishReason"))
        );
        let (_, r) = run(&[
            chunk(json!([{"text": "Hi"}]), None),
            json!({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}),
        ]);
        assert!(matches!(r, Err(LlmError::Server { status: 503, .. })));
        let mut decoder = Decoder::new("gemini", "m", &[]);
        assert!(matches!(decoder.event("message", "{nope", &mut Vec::new()), Err(LlmError::MalformedResponse { .. })));
        let deep = format!("{{\"inlineData\": {}1{}}}", "[".repeat(100), "]".repeat(100));
        let chunk = format!(r#"{{"candidates": [{{"content": {{"parts": [{deep}]}}}}]}}"#);
        assert!(
            matches!(decoder.event("message", &chunk, &mut Vec::new()), Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("nested"))
        );
    }
}
