//! Decoding a streamed Responses API response: its typed events, from
//! `response.created` to `response.completed` (or `response.incomplete`).
//!
//! The deltas of text, tool arguments and reasoning summaries become stream events
//! of the content block of their output item (one block per item, at the item's
//! `output_index`, as the plain reply has them). The final response is read from the
//! last event's response object with the plain reply's decoder; when that object
//! carries no output (some compatible servers), from the items of the
//! `response.output_item.done` events.

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::reply::{SUMMARY_SEPARATOR, WireItem, WireResponse, decode_item, outcome, response_error, response_of};
use crate::error::LlmError;
use crate::http::{SseDecoder, malformed};
use crate::message::{ContentBlock, Message, Role, ToolUse};
use crate::model::{ChatResponse, StreamEvent, replay};

/// The fields of an event the decoder reads; items and responses stay raw text.
#[derive(Deserialize)]
struct WireEvent {
    #[serde(rename = "type")]
    kind: Option<String>,
    response: Option<Box<RawValue>>,
    item: Option<Box<RawValue>>,
    output_index: Option<u64>,
    summary_index: Option<u64>,
    delta: Option<String>,
}

/// An output item being streamed.
struct Item {
    /// Its type (`message`, `function_call`, `reasoning`, ...).
    kind: String,
    /// The `id` of a reasoning item.
    id: Option<String>,
    /// A function call's `call_id` and name.
    call: Option<(String, String)>,
    /// The text, arguments or summary so far.
    text: String,
    /// The summary part the reasoning deltas are at.
    summary_index: Option<u64>,
    /// The item as `response.output_item.done` gave it.
    done: Option<ContentBlock>,
}

/// Assembles the events of a streamed Responses API response.
pub(super) struct Decoder {
    provider: &'static str,
    model: String,
    items: Vec<Item>,
    /// The response object of the last event (`response.completed`, `.incomplete`).
    last: Option<Box<RawValue>>,
}

impl Decoder {
    pub(super) fn new(provider: &'static str, model: &str) -> Self {
        Self { provider, model: model.to_owned(), items: Vec::new(), last: None }
    }

    fn malformed(&self, message: impl Into<String>) -> LlmError {
        malformed(self.provider, &self.model, message)
    }

    fn index(&self, event: &WireEvent) -> Result<usize, LlmError> {
        event
            .output_index
            .and_then(|i| usize::try_from(i).ok())
            .ok_or_else(|| self.malformed("an event has no `output_index`"))
    }

    /// The index of the item an event is about, which must have been added.
    fn added_index(&self, event: &WireEvent) -> Result<usize, LlmError> {
        let index = self.index(event)?;
        if index >= self.items.len() {
            return Err(self.malformed(format!("an event for output item {index}, which was not added")));
        }
        Ok(index)
    }

    fn added(&mut self, event: &WireEvent, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let index = self.index(event)?;
        // Items arrive in order; an index beyond them is a broken stream, not a reason
        // to allocate.
        if index != self.items.len() {
            return Err(self.malformed(format!("output item {index} added after {} items", self.items.len())));
        }
        let raw = event.item.as_deref().ok_or_else(|| self.malformed("`response.output_item.added` has no item"))?;
        let item: WireItem =
            serde_json::from_str(raw.get()).map_err(|e| self.malformed(format!("invalid output item: {e}")))?;
        let kind = item.kind.ok_or_else(|| self.malformed("an output item has no `type`"))?;
        let call = match kind.as_str() {
            "function_call" => {
                let (Some(id), Some(name)) = (item.call_id.filter(|i| !i.is_empty()), item.name) else {
                    return Err(self.malformed("a `function_call` output item has no `call_id` or `name`"));
                };
                out.push(StreamEvent::ToolUseStart { index, id: id.clone(), name: name.clone() });
                Some((id, name))
            }
            _ => None,
        };
        self.items.push(Item { kind, id: item.id, call, text: String::new(), summary_index: None, done: None });
        Ok(())
    }

    fn delta(&mut self, event: &WireEvent, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let kind = event.kind.as_deref().unwrap_or_default();
        let piece = event.delta.clone().unwrap_or_default();
        let index = self.added_index(event)?;
        let expected = match kind {
            "response.output_text.delta" | "response.refusal.delta" => "message",
            "response.function_call_arguments.delta" => "function_call",
            _ => "reasoning",
        };
        if self.items[index].kind != expected {
            let message = format!("a `{kind}` event for output item {index}, a `{}`", self.items[index].kind);
            return Err(self.malformed(message));
        }
        let item = &mut self.items[index];
        let piece = match kind {
            "response.reasoning_summary_text.delta" => {
                // Summaries are joined by a blank line, in the stream as in the reply.
                let part = event.summary_index.unwrap_or(0);
                let new_part = item.summary_index.is_some_and(|i| i != part);
                item.summary_index = Some(part);
                if new_part { format!("{SUMMARY_SEPARATOR}{piece}") } else { piece }
            }
            _ => piece,
        };
        if piece.is_empty() {
            return Ok(());
        }
        item.text.push_str(&piece);
        out.push(match expected {
            "message" => StreamEvent::TextDelta { index, text: piece },
            "function_call" => StreamEvent::ToolInputDelta { index, partial_json: piece },
            _ => StreamEvent::ReasoningDelta { index, text: piece },
        });
        Ok(())
    }

    fn done(&mut self, event: &WireEvent) -> Result<(), LlmError> {
        let raw = event.item.as_deref().ok_or_else(|| self.malformed("`response.output_item.done` has no item"))?;
        let block = decode_item(raw.get(), self.provider).map_err(|m| self.malformed(m))?;
        let index = self.added_index(event)?;
        self.items[index].done = Some(block);
        Ok(())
    }

    /// The content assembled from the events, for a final response without output.
    fn assembled(&mut self) -> Vec<ContentBlock> {
        let provider = self.provider;
        std::mem::take(&mut self.items)
            .into_iter()
            .map(|item| match item.done {
                Some(block) => block,
                None => match (item.kind.as_str(), item.call) {
                    ("function_call", Some((id, name))) => {
                        ContentBlock::ToolUse(ToolUse::from_raw_arguments(id, name, &item.text))
                    }
                    ("reasoning", _) => {
                        let data = serde_json::json!({"id": item.id, "summary": []});
                        ContentBlock::Reasoning(crate::Reasoning::new(provider, item.text, data))
                    }
                    _ => ContentBlock::Text { text: item.text },
                },
            })
            .collect()
    }
}

impl SseDecoder for Decoder {
    /// A `response.failed` or `error` event ends the stream with its typed error.
    fn event(&mut self, name: &str, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let event: WireEvent = serde_json::from_str(data).map_err(|e| self.malformed(format!("invalid event: {e}")))?;
        let kind = event.kind.clone().unwrap_or_else(|| name.to_owned());
        match kind.as_str() {
            "response.output_item.added" => self.added(&event, out),
            "response.output_text.delta"
            | "response.refusal.delta"
            | "response.function_call_arguments.delta"
            | "response.reasoning_summary_text.delta" => self.delta(&event, out),
            "response.output_item.done" => self.done(&event),
            "response.completed" | "response.incomplete" => {
                let response = event.response.ok_or_else(|| self.malformed(format!("`{kind}` has no response")))?;
                self.last = Some(response);
                Ok(())
            }
            "response.failed" => {
                let response = event.response.ok_or_else(|| self.malformed("`response.failed` has no response"))?;
                let wire: WireResponse = serde_json::from_str(response.get())
                    .map_err(|e| self.malformed(format!("invalid response: {e}")))?;
                let error = wire.error.unwrap_or(Value::Null);
                Err(response_error(self.provider, &self.model, &error))
            }
            "error" => {
                let value: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                // `{"type": "error", "code", "message"}`, or the error in an `error` field.
                let error = value.get("error").filter(|e| e.is_object()).unwrap_or(&value);
                Err(response_error(self.provider, &self.model, error))
            }
            // The others (`response.created`, `.in_progress`, `.content_part.*`,
            // `.output_text.done`, annotations, ...) add nothing the final response lacks.
            _ => Ok(()),
        }
    }

    fn is_complete(&self) -> bool {
        self.last.is_some()
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<ChatResponse, LlmError> {
        let last = self.last.take().ok_or_else(|| self.malformed("the stream ended before `response.completed`"))?;
        let mut wire: WireResponse =
            serde_json::from_str(last.get()).map_err(|e| self.malformed(format!("invalid response: {e}")))?;
        if !wire.output.is_empty() {
            let streamed = !self.items.is_empty();
            let response = response_of(wire, self.provider, &self.model)?;
            if !streamed {
                // A server that sent the whole response at its end: its events now.
                let mut events = replay(response.clone());
                events.pop(); // the `Done` the transport adds
                out.extend(events);
            }
            return Ok(response);
        }
        let content = self.assembled();
        let stop_reason = outcome(&wire, &content, self.provider, &self.model)?;
        Ok(ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason,
            usage: wire.usage.take().unwrap_or_default().usage(),
            model: wire.model.take().unwrap_or_else(|| self.model.clone()),
            id: wire.id.take(),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::message::{StopReason, Usage};

    const P: &str = "openai-responses";

    fn run(events: &[Value]) -> (Vec<StreamEvent>, Result<ChatResponse, LlmError>) {
        let mut decoder = Decoder::new(P, "gpt-x");
        let mut out = Vec::new();
        for event in events {
            let name = event["type"].as_str().unwrap_or("message");
            if let Err(e) = decoder.event(name, &event.to_string(), &mut out) {
                return (out, Err(e));
            }
        }
        let result = decoder.finish(&mut out);
        (out, result)
    }

    fn final_response(output: Value) -> Value {
        json!({"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-x-2025", "output": output,
               "usage": {"input_tokens": 5, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 0},
                         "output_tokens_details": {"reasoning_tokens": 1}}})
    }

    #[test]
    fn streams_reasoning_text_and_tool_calls() {
        let reasoning = json!({"type": "reasoning", "id": "rs_1", "summary": [
            {"type": "summary_text", "text": "A"}, {"type": "summary_text", "text": "B"}], "encrypted_content": "e"});
        let message = json!({"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                             "content": [{"type": "output_text", "text": "Hi.", "annotations": []}]});
        let call =
            json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "w", "arguments": "{\"a\":1}"});
        let events = [
            json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
            json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 0, "delta": "A"}),
            json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 1, "delta": "B"}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning}),
            json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "message", "id": "m1", "role": "assistant", "content": []}}),
            json!({"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": "Hi"}),
            json!({"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": "."}),
            json!({"type": "response.output_item.done", "output_index": 1, "item": message}),
            json!({"type": "response.output_item.added", "output_index": 2, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "w", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "{\"a\":"}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "1}"}),
            json!({"type": "response.output_item.done", "output_index": 2, "item": call}),
            json!({"type": "response.completed", "response": final_response(json!([reasoning, message, call]))}),
        ];
        let (out, response) = run(&events);
        assert_eq!(
            out,
            [
                StreamEvent::ReasoningDelta { index: 0, text: "A".into() },
                StreamEvent::ReasoningDelta { index: 0, text: "\n\nB".into() },
                StreamEvent::TextDelta { index: 1, text: "Hi".into() },
                StreamEvent::TextDelta { index: 1, text: ".".into() },
                StreamEvent::ToolUseStart { index: 2, id: "call_1".into(), name: "w".into() },
                StreamEvent::ToolInputDelta { index: 2, partial_json: "{\"a\":".into() },
                StreamEvent::ToolInputDelta { index: 2, partial_json: "1}".into() },
            ]
        );
        let response = response.unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(response.message.reasoning_text(), "A\n\nB");
        assert_eq!(response.usage.reasoning_output_tokens, 1);
        // Without output in the final response: the items of the events.
        let mut bare = events.to_vec();
        bare.last_mut().unwrap()["response"]["output"] = json!([]);
        let (_, assembled) = run(&bare);
        assert_eq!(assembled.unwrap().message, response.message);
    }

    #[test]
    fn a_final_response_alone_is_replayed_as_events() {
        let message =
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi"}]});
        let (out, response) =
            run(&[json!({"type": "response.completed", "response": final_response(json!([message]))})]);
        assert_eq!(out, [StreamEvent::TextDelta { index: 0, text: "Hi".into() }]);
        assert_eq!(response.unwrap().usage, Usage { reasoning_output_tokens: 1, ..Usage::new(5, 3) });
    }

    #[test]
    fn stream_errors() {
        let (_, r) = run(&[json!({"type": "response.created", "response": {"status": "in_progress"}})]);
        assert!(
            matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("response.completed"))
        );
        let failed = json!({"type": "response.failed", "response": {"status": "failed", "output": [],
                            "error": {"code": "server_error", "message": "boom"}}});
        let (_, r) = run(&[failed]);
        assert!(matches!(r, Err(LlmError::Server { status: 500, ref message, .. }) if message == "boom"));
        let error = json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow", "param": null});
        assert!(matches!(run(&[error]).1, Err(LlmError::RateLimited { .. })));
        let nested = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}});
        assert!(matches!(run(&[nested]).1, Err(LlmError::InvalidRequest { status: 400, .. })));
        // Items out of order, deltas for items never added or of the wrong kind.
        let far = json!({"type": "response.output_item.added", "output_index": 7, "item": {"type": "message"}});
        assert!(matches!(run(&[far]).1, Err(LlmError::MalformedResponse { .. })));
        let orphan = json!({"type": "response.output_text.delta", "output_index": 0, "delta": "x"});
        assert!(matches!(run(&[orphan]).1, Err(LlmError::MalformedResponse { .. })));
        let added = json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message"}});
        let wrong = json!({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{"});
        assert!(matches!(run(&[added, wrong]).1, Err(LlmError::MalformedResponse { .. })));
        assert!(matches!(run(&[json!("nope")]).1, Err(LlmError::MalformedResponse { .. })));
    }
}
