//! Decoding Gemini's answers: the parts of a `GenerateContentResponse` into content
//! blocks (one [`Assembler`] for a whole body and for the chunks of a stream), and a
//! non-streamed body.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::THOUGHT_SIGNATURE;
use crate::call_ids::CallIds;
use crate::error::LlmError;
use crate::http::{self, malformed};
use crate::message::{
    ContentBlock, InvalidInput, MAX_JSON_DEPTH, Message, Reasoning, Role, StopReason, ToolUse, Usage,
    nests_deeper_than, too_deep,
};
use crate::model::{ChatResponse, StreamEvent};

/// A `GenerateContentResponse`: a whole body, or one chunk of a stream. Parts stay raw
/// text until each is decoded, so that function arguments are checked for their depth
/// before they are parsed.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WireResponse {
    candidates: Option<Vec<WireCandidate>>,
    prompt_feedback: Option<WireFeedback>,
    usage_metadata: Option<WireUsage>,
    model_version: Option<String>,
    response_id: Option<String>,
    pub(super) error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCandidate {
    content: Option<WireContent>,
    finish_reason: Option<String>,
    finish_message: Option<String>,
    #[serde(default)]
    index: u64,
}

#[derive(Deserialize)]
struct WireContent {
    parts: Option<Vec<Box<RawValue>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireFeedback {
    block_reason: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
    tool_use_prompt_token_count: Option<u64>,
}

impl WireUsage {
    /// Gemini counts cached tokens within `promptTokenCount` and thoughts apart from
    /// `candidatesTokenCount`; [`Usage`] counts cached input apart and reasoning within
    /// the output.
    fn usage(&self) -> Usage {
        let cached = self.cached_content_token_count.unwrap_or(0);
        let thoughts = self.thoughts_token_count.unwrap_or(0);
        let prompt = self.prompt_token_count.unwrap_or(0).saturating_add(self.tool_use_prompt_token_count.unwrap_or(0));
        Usage {
            input_tokens: prompt.saturating_sub(cached),
            output_tokens: self.candidates_token_count.unwrap_or(0).saturating_add(thoughts),
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
            reasoning_output_tokens: thoughts,
        }
    }
}

/// The fields of a part the decoder reads; `args` stays raw text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePart {
    text: Option<String>,
    #[serde(default)]
    thought: bool,
    thought_signature: Option<String>,
    function_call: Option<WireCall>,
}

#[derive(Deserialize)]
struct WireCall {
    id: Option<String>,
    name: Option<String>,
    args: Option<Box<RawValue>>,
}

/// A block being assembled: a run of text or of thought, which the next pieces of
/// the same kind continue, or a finished block.
enum Built {
    Text { text: String, signature: Option<String> },
    Thought { text: String, signature: Option<String> },
    Done(ContentBlock),
}

/// Assembles content blocks from parts, as they come: all the parts of a body, or
/// the parts of a stream's chunks one after the other. Runs of text (or of thought)
/// parts become one block, so a streamed answer and the same answer whole give the
/// same blocks; a signature on a part is a [`Reasoning`] block before the block it
/// belongs to (a thought's is in its own block). Events are pushed for a stream.
pub(super) struct Assembler<'a> {
    provider: &'static str,
    model: String,
    ids: CallIds<'a>,
    built: Vec<Built>,
    /// Whether the last built block is a run that the next piece of its kind continues.
    open: bool,
    /// The index the next block's events get.
    next_index: usize,
    calls: usize,
    finish_reason: Option<String>,
    finish_message: Option<String>,
    block_reason: Option<String>,
    usage: Option<Usage>,
    response_model: Option<String>,
    id: Option<String>,
}

impl<'a> Assembler<'a> {
    /// An assembler of the reply of `provider`'s `model` to a request with these messages.
    pub(super) fn new(provider: &'static str, model: &str, conversation: &'a [Arc<Message>]) -> Self {
        Self {
            provider,
            model: model.to_owned(),
            ids: CallIds::new(conversation),
            built: Vec::new(),
            open: false,
            next_index: 0,
            calls: 0,
            finish_reason: None,
            finish_message: None,
            block_reason: None,
            usage: None,
            response_model: None,
            id: None,
        }
    }

    pub(super) fn malformed(&self, message: impl Into<String>) -> LlmError {
        malformed(self.provider, &self.model, message)
    }

    /// Takes in one `GenerateContentResponse` (a body or a chunk), pushing events.
    pub(super) fn feed(&mut self, wire: WireResponse, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        if let Some(error) = wire.error.as_ref().filter(|e| !e.is_null()) {
            return Err(http::body_error(self.provider, &self.model, error));
        }
        if let Some(usage) = &wire.usage_metadata {
            self.usage = Some(usage.usage());
        }
        if wire.model_version.is_some() {
            self.response_model = wire.model_version;
        }
        if wire.response_id.is_some() {
            self.id = wire.response_id;
        }
        if let Some(reason) = wire.prompt_feedback.and_then(|f| f.block_reason) {
            self.block_reason = Some(reason);
        }
        for candidate in wire.candidates.into_iter().flatten().filter(|c| c.index == 0) {
            for part in candidate.content.and_then(|c| c.parts).into_iter().flatten() {
                let piece = self.piece(part.get()).map_err(|m| self.malformed(m))?;
                self.add(piece, out);
            }
            if candidate.finish_reason.is_some() {
                self.finish_reason = candidate.finish_reason;
            }
            if candidate.finish_message.is_some() {
                self.finish_message = candidate.finish_message;
            }
        }
        Ok(())
    }

    /// Reads one part.
    fn piece(&mut self, raw: &str) -> Result<Piece, String> {
        let part: WirePart = serde_json::from_str(raw).map_err(|e| format!("invalid part: {e}"))?;
        if let Some(call) = part.function_call {
            let name = call.name.ok_or("a functionCall has no `name`")?;
            let id = self.ids.or_new(call.id, self.calls);
            self.calls += 1;
            let call = match call.args {
                Some(args) if args.get() != "null" => ToolUse::from_raw_arguments(id, name, args.get()),
                _ => ToolUse::new(id, name, json!({})),
            };
            return Ok(Piece::Call(call, part.thought_signature));
        }
        match (part.text, part.thought) {
            (Some(text), true) => return Ok(Piece::Thought(text, part.thought_signature)),
            (Some(text), false) => return Ok(Piece::Text(text, part.thought_signature)),
            (None, _) => {}
        }
        if nests_deeper_than(raw.as_bytes(), MAX_JSON_DEPTH) {
            return Err(format!("a part is refused: {}", too_deep()));
        }
        let value: Value = serde_json::from_str(raw).map_err(|e| format!("invalid part: {e}"))?;
        match value.as_object() {
            // A signature alone: an empty text part that carries it.
            Some(fields) if fields.keys().all(|k| k == "thoughtSignature") => {
                Ok(Piece::Text(String::new(), part.thought_signature))
            }
            Some(_) => Ok(Piece::Other(value)),
            None => Err("a part is not an object".into()),
        }
    }

    fn signature(&self, signature: String) -> ContentBlock {
        ContentBlock::Reasoning(Reasoning::new(self.provider, "", json!({ THOUGHT_SIGNATURE: signature })))
    }

    fn take_index(&mut self) -> usize {
        self.next_index += 1;
        self.next_index - 1
    }

    fn done(&mut self, block: ContentBlock) -> usize {
        self.open = false;
        self.built.push(Built::Done(block));
        self.take_index()
    }

    fn add(&mut self, piece: Piece, out: &mut Vec<StreamEvent>) {
        match piece {
            Piece::Thought(text, signature) => {
                if self.open
                    && let Some(Built::Thought { text: run, signature: held }) = self.built.last_mut()
                    && (signature.is_none() || held.is_none())
                {
                    run.push_str(&text);
                    if signature.is_some() {
                        *held = signature;
                    }
                    if !text.is_empty() {
                        out.push(StreamEvent::ReasoningDelta { index: self.next_index - 1, text });
                    }
                    return;
                }
                let index = self.take_index();
                if !text.is_empty() {
                    out.push(StreamEvent::ReasoningDelta { index, text: text.clone() });
                }
                self.built.push(Built::Thought { text, signature });
                self.open = true;
            }
            Piece::Text(text, signature) => {
                if self.open
                    && let Some(Built::Text { text: run, signature: held }) = self.built.last_mut()
                    && (signature.is_none() || held.is_none())
                {
                    // A signature on a later piece of the run: the run's, put before it.
                    run.push_str(&text);
                    if signature.is_some() {
                        *held = signature;
                    }
                    if !text.is_empty() {
                        out.push(StreamEvent::TextDelta { index: self.next_index - 1, text });
                    }
                    return;
                }
                match (text.is_empty(), signature) {
                    (true, None) => {}
                    (true, Some(signature)) => {
                        let block = self.signature(signature);
                        self.done(block);
                    }
                    (false, signature) => {
                        if signature.is_some() {
                            // The signature's block, before the text's.
                            self.take_index();
                        }
                        let index = self.take_index();
                        out.push(StreamEvent::TextDelta { index, text: text.clone() });
                        self.built.push(Built::Text { text, signature });
                        self.open = true;
                    }
                }
            }
            Piece::Call(call, signature) => {
                if let Some(signature) = signature {
                    let block = self.signature(signature);
                    self.done(block);
                }
                let partial_json =
                    call.invalid_input.as_ref().map_or_else(|| call.input.to_string(), |i| i.raw.clone());
                let (id, name) = (call.id.clone(), call.name.clone());
                let index = self.done(ContentBlock::ToolUse(call));
                out.push(StreamEvent::ToolUseStart { index, id, name });
                out.push(StreamEvent::ToolInputDelta { index, partial_json });
            }
            Piece::Other(raw) => {
                let block = ContentBlock::Provider { provider: self.provider.into(), raw };
                self.done(block);
            }
        }
    }

    /// Whether a finish reason (or a blocked prompt) was seen: the answer is whole.
    pub(super) fn finished(&self) -> bool {
        self.finish_reason.is_some() || self.block_reason.is_some()
    }

    /// The response. A `MALFORMED_FUNCTION_CALL` becomes a call whose
    /// [`ToolUse::invalid_input`] says what Gemini said of it (its events pushed).
    pub(super) fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<ChatResponse, LlmError> {
        let stop_reason = match (self.finish_reason.take(), self.block_reason.take()) {
            (Some(reason), _) if reason == "MALFORMED_FUNCTION_CALL" => {
                let message = self.finish_message.take().unwrap_or_else(|| "Malformed function call.".to_owned());
                let name = called_name(&message).unwrap_or_else(|| "malformed_function_call".to_owned());
                let id = self.ids.or_new(None, self.calls);
                let call = ToolUse {
                    id: id.clone(),
                    name: name.clone(),
                    input: Value::Null,
                    invalid_input: Some(InvalidInput {
                        raw: message,
                        error: "Gemini could not read this function call (finish reason MALFORMED_FUNCTION_CALL); \
                                write it again as a valid call"
                            .to_owned(),
                    }),
                };
                let partial_json = call.invalid_input.as_ref().map(|i| i.raw.clone()).unwrap_or_default();
                let index = self.done(ContentBlock::ToolUse(call));
                out.push(StreamEvent::ToolUseStart { index, id, name });
                out.push(StreamEvent::ToolInputDelta { index, partial_json });
                StopReason::ToolUse
            }
            (Some(reason), _) => stop_reason(&reason, self.calls > 0),
            (None, Some(blocked)) => StopReason::Other(format!("prompt_blocked_{}", blocked.to_ascii_lowercase())),
            (None, None) => return Err(self.malformed("the answer has no finishReason")),
        };
        let mut content = Vec::with_capacity(self.built.len() + 1);
        for built in std::mem::take(&mut self.built) {
            match built {
                Built::Done(block) => content.push(block),
                Built::Text { text, signature } => {
                    if let Some(signature) = signature {
                        content.push(self.signature(signature));
                    }
                    if !text.is_empty() {
                        content.push(ContentBlock::Text { text });
                    }
                }
                Built::Thought { text, signature } => {
                    let data = signature.map_or(Value::Null, |s| json!({ THOUGHT_SIGNATURE: s }));
                    content.push(ContentBlock::Reasoning(Reasoning::new(self.provider, text, data)));
                }
            }
        }
        Ok(ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason,
            usage: self.usage.unwrap_or_default(),
            model: self.response_model.take().unwrap_or_else(|| self.model.clone()),
            id: self.id.take(),
        })
    }
}

/// One decoded part.
enum Piece {
    Text(String, Option<String>),
    Thought(String, Option<String>),
    Call(ToolUse, Option<String>),
    Other(Value),
}

/// The stop reason of a `finishReason`: `STOP` is the end of the turn, or a call of
/// tools when the answer has calls; `MAX_TOKENS` the output limit; others in lower case.
fn stop_reason(reason: &str, has_calls: bool) -> StopReason {
    match reason {
        "STOP" if has_calls => StopReason::ToolUse,
        "STOP" => StopReason::EndTurn,
        "MAX_TOKENS" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_ascii_lowercase()),
    }
}

/// The function a malformed call's message names: `default_api.<name>(`.
fn called_name(message: &str) -> Option<String> {
    let rest = &message[message.find("default_api.")? + "default_api.".len()..];
    let name: String =
        rest.chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')).collect();
    (!name.is_empty() && rest[name.len()..].starts_with('(')).then_some(name)
}

/// Decodes a non-streamed response body. An `error` in it is the error of its `code`,
/// retried as that status would be.
pub(super) fn decode_response(
    body: &[u8],
    provider: &'static str,
    model: &str,
    conversation: &[Arc<Message>],
) -> Result<ChatResponse, LlmError> {
    let wire: WireResponse =
        serde_json::from_slice(body).map_err(|e| malformed(provider, model, format!("invalid JSON: {e}")))?;
    let mut assembler = Assembler::new(provider, model, conversation);
    if wire.error.is_none() && wire.candidates.as_ref().is_none_or(Vec::is_empty) && wire.prompt_feedback.is_none() {
        return Err(assembler.malformed("the answer has no candidates"));
    }
    assembler.feed(wire, &mut Vec::new())?;
    assembler.finish(&mut Vec::new())
}
