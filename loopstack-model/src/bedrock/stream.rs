//! Reading a ConverseStream response: its event-stream messages
//! ([`event_stream`](super::event_stream)) decoded into [`StreamEvent`]s and the
//! [`ChatResponse`] that `chat` would have returned.

use std::time::Instant;

use bytes::Bytes;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::Instrument as _;

use super::PROVIDER;
use super::event_stream::{FeedError, Frame, FrameDecoder};
use super::reply::{WireUsage, exception};
use crate::error::LlmError;
use crate::http::{Call, Transport, malformed, record_outcome};
use crate::message::{ContentBlock, Message, Reasoning, Role, StopReason, ToolUse, Usage};
use crate::model::{ChatResponse, StreamEvent};

/// A content block being streamed.
enum Block {
    Text(String),
    Tool { id: String, name: String, json: String },
    Reasoning { text: String, signature: Option<String>, redacted: Option<String> },
}

impl Block {
    fn kind(&self) -> &'static str {
        match self {
            Self::Text(_) => "text",
            Self::Tool { .. } => "toolUse",
            Self::Reasoning { .. } => "reasoningContent",
        }
    }
}

/// Decodes ConverseStream's events: `messageStart`, `contentBlockStart` (a tool call's
/// id and name), `contentBlockDelta` (text, a piece of a tool call's input, reasoning
/// text, its signature or redacted reasoning), `contentBlockStop`, `messageStop` (the
/// stop reason) and `metadata` (the usage, last); an exception message is the typed
/// error its type names.
pub(super) struct Decoder {
    model: String,
    started: bool,
    blocks: Vec<Block>,
    stop_reason: Option<String>,
    usage: Usage,
    /// `metadata` arrived: nothing follows it.
    complete: bool,
}

/// The index of a content block in an event.
#[derive(Deserialize)]
struct Indexed {
    #[serde(rename = "contentBlockIndex")]
    index: u64,
}

impl Decoder {
    pub(super) fn new(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            started: false,
            blocks: Vec::new(),
            stop_reason: None,
            usage: Usage::default(),
            complete: false,
        }
    }

    fn malformed(&self, message: impl Into<String>) -> LlmError {
        malformed(PROVIDER, &self.model, message)
    }

    /// Handles one message of the stream; `Ok(true)` once the response is complete.
    pub(super) fn frame(&mut self, frame: &Frame, out: &mut Vec<StreamEvent>) -> Result<bool, LlmError> {
        let payload = |decoder: &Self| -> Result<Value, LlmError> {
            serde_json::from_slice(&frame.payload)
                .map_err(|e| decoder.malformed(format!("invalid JSON in a stream message: {e}")))
        };
        match frame.header(":message-type") {
            Some("event") => {}
            Some("exception") => {
                let kind = frame.header(":exception-type").unwrap_or("unknownException");
                let value = payload(self).unwrap_or(Value::Null);
                let message = value.get("message").or_else(|| value.get("Message")).and_then(Value::as_str);
                return Err(exception(kind, message.unwrap_or("no message"), &self.model));
            }
            Some("error") => {
                let kind = frame.header(":error-code").unwrap_or("unknownError");
                let message = frame.header(":error-message").unwrap_or("no message");
                return Err(exception(kind, message, &self.model));
            }
            other => return Err(self.malformed(format!("a stream message of type {other:?}"))),
        }
        let Some(event) = frame.header(":event-type") else {
            return Err(self.malformed("a stream event has no :event-type"));
        };
        match event {
            "messageStart" => self.started = true,
            "contentBlockStart" => {
                let value = payload(self)?;
                self.start_block(&value, out)?;
            }
            "contentBlockDelta" => {
                let value = payload(self)?;
                self.delta(&value, out)?;
            }
            "messageStop" => {
                let value = payload(self)?;
                let reason = value.get("stopReason").and_then(Value::as_str);
                self.stop_reason = Some(reason.ok_or_else(|| self.malformed("messageStop has no stopReason"))?.into());
            }
            "metadata" => {
                let value = payload(self)?;
                let usage = value.get("usage").ok_or_else(|| self.malformed("metadata has no usage"))?;
                let usage = WireUsage::deserialize(usage).map_err(|e| self.malformed(format!("invalid usage: {e}")))?;
                self.usage = usage.usage();
                self.complete = true;
            }
            // contentBlockStop, and events added later.
            _ => {}
        }
        Ok(self.complete)
    }

    /// The index of the block an event is about: one already started, or the next.
    /// An index far beyond the blocks so far is a broken stream, not a reason to
    /// allocate.
    fn index(&self, value: &Value) -> Result<usize, LlmError> {
        let Indexed { index } =
            Indexed::deserialize(value).map_err(|e| self.malformed(format!("invalid content block event: {e}")))?;
        match usize::try_from(index) {
            Ok(index) if index <= self.blocks.len() => Ok(index),
            _ => Err(self.malformed(format!("content block {index} arrived before block {}", self.blocks.len()))),
        }
    }

    fn start_block(&mut self, value: &Value, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let index = self.index(value)?;
        let Some(tool) = value.get("start").and_then(|s| s.get("toolUse")) else {
            // Starts of other kinds (added later): their deltas say what they are.
            return Ok(());
        };
        let field = |name: &str| tool.get(name).and_then(Value::as_str).map(str::to_owned);
        let (Some(id), Some(name)) = (field("toolUseId"), field("name")) else {
            return Err(self.malformed("a toolUse start has no toolUseId or name"));
        };
        if index < self.blocks.len() {
            return Err(self.malformed(format!("content block {index} started twice")));
        }
        out.push(StreamEvent::ToolUseStart { index, id: id.clone(), name: name.clone() });
        self.blocks.push(Block::Tool { id, name, json: String::new() });
        Ok(())
    }

    fn delta(&mut self, value: &Value, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let index = self.index(value)?;
        let delta = value.get("delta").ok_or_else(|| self.malformed("contentBlockDelta has no delta"))?;
        let text_of = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        if let Some(text) = text_of(delta.get("text")) {
            if index == self.blocks.len() {
                self.blocks.push(Block::Text(String::new()));
            }
            let Block::Text(block) = &mut self.blocks[index] else {
                return Err(self.mismatch(index, "text"));
            };
            block.push_str(&text);
            if !text.is_empty() {
                out.push(StreamEvent::TextDelta { index, text });
            }
        } else if let Some(tool) = delta.get("toolUse") {
            let piece = text_of(tool.get("input")).unwrap_or_default();
            let Some(Block::Tool { json, .. }) = self.blocks.get_mut(index) else {
                return Err(self.mismatch(index, "toolUse"));
            };
            json.push_str(&piece);
            if !piece.is_empty() {
                out.push(StreamEvent::ToolInputDelta { index, partial_json: piece });
            }
        } else if let Some(reasoning) = delta.get("reasoningContent") {
            if index == self.blocks.len() {
                self.blocks.push(Block::Reasoning { text: String::new(), signature: None, redacted: None });
            }
            let Block::Reasoning { text, signature, redacted } = &mut self.blocks[index] else {
                return Err(self.mismatch(index, "reasoningContent"));
            };
            if let Some(piece) = text_of(reasoning.get("text")) {
                text.push_str(&piece);
                if !piece.is_empty() {
                    out.push(StreamEvent::ReasoningDelta { index, text: piece });
                }
            }
            if let Some(piece) = text_of(reasoning.get("signature")) {
                signature.get_or_insert_default().push_str(&piece);
            }
            if let Some(piece) = text_of(reasoning.get("redactedContent")) {
                redacted.get_or_insert_default().push_str(&piece);
            }
        }
        // Deltas of kinds added later (citations, say): not kept.
        Ok(())
    }

    fn mismatch(&self, index: usize, kind: &str) -> LlmError {
        let was = self.blocks.get(index).map_or("nothing", Block::kind);
        self.malformed(format!("a {kind} delta for content block {index}, which is {was}"))
    }

    /// The response, once `metadata` arrived or the body ended.
    pub(super) fn finish(&mut self) -> Result<ChatResponse, LlmError> {
        if !self.started {
            return Err(self.malformed("the stream had no messageStart"));
        }
        let stop_reason =
            self.stop_reason.take().ok_or_else(|| self.malformed("the stream ended before messageStop"))?;
        let content = std::mem::take(&mut self.blocks)
            .into_iter()
            .map(|block| match block {
                Block::Text(text) => ContentBlock::Text { text },
                Block::Tool { id, name, json } => ContentBlock::ToolUse(ToolUse::from_raw_arguments(id, name, &json)),
                Block::Reasoning { redacted: Some(redacted), .. } => {
                    ContentBlock::Reasoning(Reasoning::new(PROVIDER, "", json!({ "redacted": redacted })))
                }
                Block::Reasoning { text, signature, redacted: None } => {
                    let data = signature.map_or(Value::Null, |signature| json!({ "signature": signature }));
                    ContentBlock::Reasoning(Reasoning::new(PROVIDER, text, data))
                }
            })
            .collect();
        Ok(ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason: StopReason::parse(&stop_reason),
            usage: self.usage,
            model: self.model.clone(),
            id: None,
        })
    }
}

type Body = BoxStream<'static, reqwest::Result<Bytes>>;

enum State<'a> {
    Start(Call<'a>, Decoder),
    Reading(Reading),
    End,
}

/// A stream being read: its body, framing, decoder and deadline.
struct Reading {
    body: Body,
    frames: FrameDecoder,
    decoder: Decoder,
    deadline: tokio::time::Instant,
}

/// Sends `call` and streams its event-stream response through `decoder`. As for the
/// SSE providers: retries only before the response starts, and the timeout is a
/// deadline for the whole attempt, whatever the server sends.
pub(super) fn read<'a>(
    transport: &'a Transport,
    call: Call<'a>,
    decoder: Decoder,
    span: tracing::Span,
) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
    let started = Instant::now();
    futures::stream::unfold(State::Start(call, decoder), move |state| {
        let step_span = span.clone();
        async move {
            let (items, next) = step(transport, state, &step_span, started).await;
            Some((items, next?))
        }
        .instrument(span.clone())
    })
    .flat_map(futures::stream::iter)
    .boxed()
}

/// One step of a stream: what to yield and the next state (`None` to end).
async fn step<'a>(
    transport: &Transport,
    state: State<'a>,
    span: &tracing::Span,
    started: Instant,
) -> (Vec<Result<StreamEvent, LlmError>>, Option<State<'a>>) {
    // The events decoded before an error are yielded before it.
    let fail_after = |out: Vec<StreamEvent>, error: LlmError| {
        record_outcome(span, started, Err(&error));
        let items = out.into_iter().map(Ok).chain([Err(error)]).collect();
        (items, Some(State::End))
    };
    let mut reading = match state {
        State::End => return (Vec::new(), None),
        State::Start(call, decoder) => {
            return match transport.open(&call).await {
                Ok((response, deadline)) => {
                    let body = response.bytes_stream().boxed();
                    (Vec::new(), Some(State::Reading(Reading { body, frames: FrameDecoder::new(), decoder, deadline })))
                }
                Err(error) => fail_after(Vec::new(), error),
            };
        }
        State::Reading(reading) => reading,
    };
    let timeout =
        |model: &str| LlmError::Timeout { provider: PROVIDER, model: model.to_owned(), after: transport.timeout };
    let mut out = Vec::new();
    loop {
        // Checked before each read too: a body that is always ready would never let
        // the timer below fire.
        if tokio::time::Instant::now() >= reading.deadline {
            return fail_after(out, timeout(&reading.decoder.model));
        }
        let Ok(next) = tokio::time::timeout_at(reading.deadline, reading.body.next()).await else {
            return fail_after(out, timeout(&reading.decoder.model));
        };
        let complete = match next {
            Some(Ok(chunk)) => {
                let Reading { frames, decoder, .. } = &mut reading;
                match frames.feed(&chunk, &mut |frame| decoder.frame(&frame, &mut out)) {
                    Ok(complete) => complete,
                    Err(FeedError::Handler(error)) => return fail_after(out, error),
                    Err(FeedError::Stream(error)) => {
                        let error = malformed(PROVIDER, &reading.decoder.model, error.to_string());
                        return fail_after(out, error);
                    }
                }
            }
            Some(Err(e)) => {
                let error = LlmError::Connection {
                    provider: PROVIDER,
                    model: reading.decoder.model.clone(),
                    source: Box::new(e),
                };
                return fail_after(out, error);
            }
            // The body ended: inside a message, it was cut off.
            None => {
                if let Err(error) = reading.frames.finish() {
                    let error = malformed(PROVIDER, &reading.decoder.model, error.to_string());
                    return fail_after(out, error);
                }
                true
            }
        };
        if !complete {
            if out.is_empty() {
                continue;
            }
            return (out.into_iter().map(Ok).collect(), Some(State::Reading(reading)));
        }
        return match reading.decoder.finish() {
            Ok(response) => {
                record_outcome(span, started, Ok(&response.usage));
                out.push(StreamEvent::Done(response));
                (out.into_iter().map(Ok).collect(), Some(State::End))
            }
            Err(error) => fail_after(out, error),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, payload: Value) -> Frame {
        Frame {
            headers: vec![
                (":event-type".into(), kind.into()),
                (":content-type".into(), "application/json".into()),
                (":message-type".into(), "event".into()),
            ],
            payload: payload.to_string().into_bytes(),
        }
    }

    fn run(frames: &[Frame]) -> (Vec<StreamEvent>, Result<ChatResponse, LlmError>) {
        let mut decoder = Decoder::new("claude");
        let mut out = Vec::new();
        for frame in frames {
            match decoder.frame(frame, &mut out) {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => return (out, Err(e)),
            }
        }
        let result = decoder.finish();
        (out, result)
    }

    #[test]
    fn streams_reasoning_text_and_tools() {
        let (events, response) = run(&[
            event("messageStart", json!({"role": "assistant"})),
            event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "a"}}})),
            event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "b"}}})),
            event(
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "sig"}}}),
            ),
            event("contentBlockStop", json!({"contentBlockIndex": 0})),
            event("contentBlockDelta", json!({"contentBlockIndex": 1, "delta": {"text": "Hi"}})),
            event("contentBlockStop", json!({"contentBlockIndex": 1})),
            event(
                "contentBlockStart",
                json!({"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "t1", "name": "w"}}}),
            ),
            event("contentBlockDelta", json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{\"ci"}}})),
            event(
                "contentBlockDelta",
                json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "ty\": \"Oslo\"}"}}}),
            ),
            event("contentBlockStop", json!({"contentBlockIndex": 2})),
            event(
                "contentBlockStart",
                json!({"contentBlockIndex": 3, "start": {"toolUse": {"toolUseId": "t2", "name": "now"}}}),
            ),
            event("contentBlockStop", json!({"contentBlockIndex": 3})),
            event(
                "contentBlockDelta",
                json!({"contentBlockIndex": 4, "delta": {"reasoningContent": {"redactedContent": "cmVk"}}}),
            ),
            event("messageStop", json!({"stopReason": "tool_use"})),
            event(
                "metadata",
                json!({"usage": {"inputTokens": 5, "outputTokens": 9, "totalTokens": 14, "cacheWriteInputTokens": 3}, "metrics": {"latencyMs": 1}}),
            ),
        ]);
        assert_eq!(
            events,
            vec![
                StreamEvent::ReasoningDelta { index: 0, text: "a".into() },
                StreamEvent::ReasoningDelta { index: 0, text: "b".into() },
                StreamEvent::TextDelta { index: 1, text: "Hi".into() },
                StreamEvent::ToolUseStart { index: 2, id: "t1".into(), name: "w".into() },
                StreamEvent::ToolInputDelta { index: 2, partial_json: "{\"ci".into() },
                StreamEvent::ToolInputDelta { index: 2, partial_json: "ty\": \"Oslo\"}".into() },
                StreamEvent::ToolUseStart { index: 3, id: "t2".into(), name: "now".into() },
            ]
        );
        let response = response.unwrap();
        assert_eq!(
            response.message.content,
            vec![
                ContentBlock::Reasoning(Reasoning::new("bedrock", "ab", json!({"signature": "sig"}))),
                ContentBlock::text("Hi"),
                ContentBlock::ToolUse(ToolUse::new("t1", "w", json!({"city": "Oslo"}))),
                ContentBlock::ToolUse(ToolUse::new("t2", "now", json!({}))),
                ContentBlock::Reasoning(Reasoning::new("bedrock", "", json!({"redacted": "cmVk"}))),
            ]
        );
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.usage,
            Usage { input_tokens: 5, output_tokens: 9, cache_creation_input_tokens: 3, ..Usage::default() }
        );
    }

    #[test]
    fn stream_errors() {
        let start = event("messageStart", json!({"role": "assistant"}));
        let exception = |kind: &str| Frame {
            headers: vec![
                (":exception-type".into(), kind.into()),
                (":content-type".into(), "application/json".into()),
                (":message-type".into(), "exception".into()),
            ],
            payload: br#"{"message":"slow down"}"#.to_vec(),
        };
        let (_, r) = run(&[start.clone(), exception("throttlingException")]);
        assert!(
            matches!(r, Err(LlmError::RateLimited { ref message, .. }) if message == "throttlingException: slow down")
        );
        let (_, r) = run(&[start.clone(), exception("modelStreamErrorException")]);
        assert!(matches!(r, Err(LlmError::Server { .. })));
        let (_, r) = run(&[start.clone(), exception("validationException")]);
        assert!(matches!(r, Err(LlmError::InvalidRequest { status: 400, .. })));
        let error = Frame {
            headers: vec![
                (":message-type".into(), "error".into()),
                (":error-code".into(), "InternalFailure".into()),
                (":error-message".into(), "boom".into()),
            ],
            payload: vec![],
        };
        let (_, r) = run(&[start.clone(), error]);
        assert!(
            matches!(r, Err(LlmError::Server { status: 500, ref message, .. }) if message == "InternalFailure: boom")
        );
        // A block index far beyond the blocks so far is refused, not allocated.
        let (_, r) = run(&[
            start.clone(),
            event("contentBlockDelta", json!({"contentBlockIndex": 1_000_000_000_000u64, "delta": {"text": "x"}})),
        ]);
        assert!(
            matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("arrived before"))
        );
        // A delta of another kind than its block.
        let (_, r) = run(&[
            start.clone(),
            event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "x"}})),
            event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": "{}"}}})),
        ]);
        assert!(matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("which is text")));
        let (_, r) = run(std::slice::from_ref(&start));
        assert!(matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("messageStop")));
        let (_, r) = run(&[event("messageStop", json!({"stopReason": "end_turn"}))]);
        assert!(matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("messageStart")));
        let (_, r) = run(&[start.clone(), Frame { headers: vec![], payload: vec![] }]);
        assert!(matches!(r, Err(LlmError::MalformedResponse { .. })));
        let bad_json = Frame { payload: b"{nope".to_vec(), ..event("contentBlockDelta", json!({})) };
        let (_, r) = run(&[start.clone(), bad_json]);
        assert!(matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("invalid JSON")));
        // Without metadata, the response has no usage but is complete.
        let (_, r) = run(&[start, event("messageStop", json!({"stopReason": "end_turn"}))]);
        assert_eq!(r.unwrap().usage, Usage::default());
    }
}
