//! A run's events and stored conversation, as AG-UI events.
//!
//! What streams live (the model's text, its reasoning, the arguments of the calls it
//! writes) is sent as it comes; what a step saved (the model's message when it did
//! not stream, its tool calls, the tools' results) is read from the run's documents
//! when the step commits, so the stream says what the store holds. The state is the
//! run's: a snapshot first, then a delta at each commit.

use std::collections::HashSet;
use std::sync::Arc;

use loopstack_core::serde_json::{self, Value};
use loopstack_core::{Document, EventKind, RunId};
use loopstack_llm::{ContentBlock, Message, Role};

use super::wire::{Event, PatchOp, TokenUsage, diff};

/// Turns one thread's run events into AG-UI events.
pub(super) struct Translator {
    run: RunId,
    /// The transition under way: its name and the step it commits as.
    step: Option<(String, u64)>,
    /// Whether the stream joined a drive in the middle of a step: what that step
    /// streams is not sent (its beginning was missed), its stored message is.
    mid_step: bool,
    /// The text message streaming now: its id, step and text so far.
    text: Option<(String, u64, String)>,
    /// The reasoning streaming now.
    reasoning: Option<String>,
    /// Tool calls whose arguments stream now: id and arguments so far.
    calls: Vec<(String, String)>,
    /// Steps whose model text was streamed: their message's text is not sent again.
    streamed: HashSet<u64>,
    /// Tool calls already announced (streamed, or read from a message).
    announced: HashSet<String>,
    /// Tool calls whose result the client has (it sent their tool messages, answering
    /// its own tools): not sent back.
    known_results: HashSet<String>,
    /// The first message document not sent yet (by its position in the run).
    next: u64,
    /// The state as the client last got it.
    state: Option<Value>,
    usage: Vec<TokenUsage>,
}

impl Translator {
    /// For run `run`, whose conversation before document `next` the client has.
    pub(super) fn new(run: RunId, next: u64) -> Self {
        Self {
            run,
            step: None,
            mid_step: false,
            text: None,
            reasoning: None,
            calls: Vec::new(),
            streamed: HashSet::new(),
            announced: HashSet::new(),
            known_results: HashSet::new(),
            next,
            state: None,
            usage: Vec::new(),
        }
    }

    /// Says that the stream joins a drive under way: the step in progress is sent
    /// as stored once it commits, not as it streams.
    pub(super) fn joined(&mut self) {
        self.mid_step = true;
    }

    /// The position after the run's last message document: what a client that has
    /// the conversation so far has not seen begins there.
    pub(super) fn next_of(documents: &[Arc<Document>]) -> u64 {
        documents.iter().filter(|d| is_message(d)).map(|d| d.seq + 1).max().unwrap_or(0)
    }

    /// The position of the current turn's first message: after the last message the
    /// user wrote (not one carrying tool results). A client that reconnects to a turn
    /// gets it whole from there.
    pub(super) fn turn_of(documents: &[Arc<Document>]) -> u64 {
        documents
            .iter()
            .filter(|d| is_message(d))
            .filter(|d| {
                d.read::<Message>().is_ok_and(|m| {
                    m.role == Role::User && m.content.iter().any(|b| matches!(b, ContentBlock::Text { .. }))
                })
            })
            .map(|d| d.seq + 1)
            .max()
            .unwrap_or(0)
    }

    /// Says that the client has the results of `calls`.
    pub(super) fn known_results(&mut self, calls: impl IntoIterator<Item = String>) {
        self.known_results.extend(calls);
    }

    /// The token usage counted so far, per provider and model.
    pub(super) fn take_usage(&mut self) -> Vec<TokenUsage> {
        std::mem::take(&mut self.usage)
    }

    /// What a live event adds to the stream.
    pub(super) fn event(&mut self, kind: &EventKind, out: &mut Vec<Event>) {
        match kind {
            EventKind::TransitionStarted { transition, step, .. } => {
                self.mid_step = false;
                self.end_step(out);
                self.step = Some((transition.to_string(), *step));
                out.push(Event::StepStarted { step_name: transition.to_string() });
            }
            EventKind::TextDelta { .. } | EventKind::ReasoningDelta { .. } | EventKind::ToolCallDelta { .. }
                if self.mid_step => {}
            EventKind::TextDelta { text } => {
                self.end_reasoning(out);
                self.end_calls(out);
                if self.text.is_none() {
                    let (id, step) = (self.streamed_id(), self.step.as_ref().map_or(u64::MAX, |(_, step)| *step));
                    self.streamed.insert(step);
                    out.push(Event::TextMessageStart { message_id: id.clone(), role: "assistant" });
                    self.text = Some((id, step, String::new()));
                }
                let (id, _, so_far) = self.text.as_mut().expect("opened above");
                so_far.push_str(text);
                out.push(Event::TextMessageContent { message_id: id.clone(), delta: text.clone() });
            }
            EventKind::ReasoningDelta { text } => {
                self.end_text(out);
                self.end_calls(out);
                let id = match &self.reasoning {
                    Some(id) => id.clone(),
                    None => {
                        let id = format!("{}-reasoning", self.streamed_id());
                        out.push(Event::ReasoningStart { message_id: id.clone() });
                        out.push(Event::ReasoningMessageStart { message_id: id.clone(), role: "reasoning" });
                        self.reasoning = Some(id.clone());
                        id
                    }
                };
                out.push(Event::ReasoningMessageContent { message_id: id, delta: text.clone() });
            }
            EventKind::ToolCallDelta { call_id, name, partial_json } => {
                self.end_text(out);
                self.end_reasoning(out);
                let index = match self.calls.iter().position(|(id, _)| id == call_id) {
                    Some(index) => index,
                    None => {
                        if !self.announced.insert(call_id.clone()) {
                            // Its arguments were complete already: nothing more comes.
                            return;
                        }
                        out.push(Event::ToolCallStart {
                            tool_call_id: call_id.clone(),
                            tool_call_name: name.clone(),
                            parent_message_id: Some(self.streamed_id()),
                        });
                        self.calls.push((call_id.clone(), String::new()));
                        self.calls.len() - 1
                    }
                };
                if !partial_json.is_empty() {
                    self.calls[index].1.push_str(partial_json);
                    out.push(Event::ToolCallArgs { tool_call_id: call_id.clone(), delta: partial_json.clone() });
                }
            }
            EventKind::Usage {
                provider,
                model,
                input_tokens,
                output_tokens,
                cache_read_input_tokens,
                cache_creation_input_tokens,
                reasoning_output_tokens,
            } => {
                let input = input_tokens + cache_read_input_tokens + cache_creation_input_tokens;
                let entry = match self.usage.iter_mut().find(|u| u.provider == *provider && u.model == *model) {
                    Some(entry) => entry,
                    None => {
                        self.usage.push(TokenUsage {
                            provider: provider.clone(),
                            model: model.clone(),
                            input_tokens: 0,
                            output_tokens: 0,
                            total_tokens: 0,
                            reasoning_tokens: 0,
                            cached_input_tokens: 0,
                            cache_write_input_tokens: 0,
                        });
                        self.usage.last_mut().expect("just pushed")
                    }
                };
                entry.input_tokens += input;
                entry.output_tokens += output_tokens;
                entry.total_tokens += input + output_tokens;
                entry.reasoning_tokens += reasoning_output_tokens;
                entry.cached_input_tokens += cache_read_input_tokens;
                entry.cache_write_input_tokens += cache_creation_input_tokens;
            }
            _ => {}
        }
    }

    /// What a committed step adds: the messages saved up to step `upto` (completing
    /// what streamed of them, should pieces be missing), and the state's change.
    pub(super) fn committed(&mut self, upto: u64, documents: &[Arc<Document>], state: Value, out: &mut Vec<Event>) {
        self.end_reasoning(out);
        self.messages(upto, documents, out);
        self.end_streams(out);
        self.state(state, out);
        self.end_step(out);
    }

    /// The run's state, as a snapshot the first time and a delta after.
    pub(super) fn state(&mut self, state: Value, out: &mut Vec<Event>) {
        match &self.state {
            None => out.push(Event::StateSnapshot { snapshot: state.clone() }),
            Some(before) => {
                let delta: Vec<PatchOp> = diff(before, &state);
                if !delta.is_empty() {
                    out.push(Event::StateDelta { delta });
                }
            }
        }
        self.state = Some(state);
    }

    /// Closes whatever is open, before the run's last event.
    pub(super) fn end(&mut self, out: &mut Vec<Event>) {
        self.end_streams(out);
        self.end_step(out);
    }

    /// The id of the message the model streams in the step under way.
    fn streamed_id(&self) -> String {
        match self.step {
            Some((_, step)) => format!("{}-{step}", self.run),
            None => format!("{}-live", self.run),
        }
    }

    /// The messages saved up to step `upto` that the stream has not sent.
    pub(super) fn messages(&mut self, upto: u64, documents: &[Arc<Document>], out: &mut Vec<Event>) {
        let next = self.next;
        let new = documents.iter().filter(|d| is_message(d) && d.seq >= next && d.step <= upto);
        for doc in new {
            self.next = doc.seq + 1;
            let Ok(message) = doc.read::<Message>() else { continue };
            match message.role {
                Role::Assistant => self.assistant(doc, &message, out),
                Role::User => self.results(doc, &message, out),
            }
        }
    }

    fn assistant(&mut self, doc: &Document, message: &Message, out: &mut Vec<Event>) {
        let streamed = self.streamed.remove(&doc.step);
        let id = if streamed { format!("{}-{}", self.run, doc.step) } else { format!("{}-m{}", self.run, doc.seq) };
        let text = message.text();
        if let Some((open, _, so_far)) = self.text.take_if(|(_, step, _)| *step == doc.step) {
            // Still streaming: what the stream has not carried yet, then its end.
            if let Some(rest) = text.strip_prefix(so_far.as_str()).filter(|rest| !rest.is_empty()) {
                out.push(Event::TextMessageContent { message_id: open.clone(), delta: rest.to_owned() });
            }
            out.push(Event::TextMessageEnd { message_id: open });
        } else if !streamed && !text.is_empty() {
            out.push(Event::TextMessageStart { message_id: id.clone(), role: "assistant" });
            out.push(Event::TextMessageContent { message_id: id.clone(), delta: text });
            out.push(Event::TextMessageEnd { message_id: id.clone() });
        }
        for block in &message.content {
            let ContentBlock::ToolUse(call) = block else { continue };
            let arguments = match &call.invalid_input {
                Some(invalid) => invalid.raw.clone(),
                None => serde_json::to_string(&call.input).unwrap_or_default(),
            };
            if let Some(index) = self.calls.iter().position(|(open, _)| *open == call.id) {
                let (open, so_far) = self.calls.remove(index);
                if let Some(rest) = arguments.strip_prefix(so_far.as_str()).filter(|rest| !rest.is_empty()) {
                    out.push(Event::ToolCallArgs { tool_call_id: open.clone(), delta: rest.to_owned() });
                }
                out.push(Event::ToolCallEnd { tool_call_id: open });
                continue;
            }
            if !self.announced.insert(call.id.clone()) {
                continue;
            }
            out.push(Event::ToolCallStart {
                tool_call_id: call.id.clone(),
                tool_call_name: call.name.clone(),
                parent_message_id: Some(id.clone()),
            });
            out.push(Event::ToolCallArgs { tool_call_id: call.id.clone(), delta: arguments });
            out.push(Event::ToolCallEnd { tool_call_id: call.id.clone() });
        }
    }

    fn results(&mut self, doc: &Document, message: &Message, out: &mut Vec<Event>) {
        for block in &message.content {
            let ContentBlock::ToolResult(result) = block else { continue };
            if self.known_results.contains(&result.tool_use_id) {
                continue;
            }
            out.push(Event::ToolCallResult {
                message_id: format!("{}-m{}-{}", self.run, doc.seq, result.tool_use_id),
                tool_call_id: result.tool_use_id.clone(),
                content: result.content.clone(),
                role: "tool",
                is_error: result.is_error,
            });
        }
    }

    fn end_streams(&mut self, out: &mut Vec<Event>) {
        self.end_text(out);
        self.end_reasoning(out);
        self.end_calls(out);
    }

    fn end_text(&mut self, out: &mut Vec<Event>) {
        if let Some((id, ..)) = self.text.take() {
            out.push(Event::TextMessageEnd { message_id: id });
        }
    }

    fn end_reasoning(&mut self, out: &mut Vec<Event>) {
        if let Some(id) = self.reasoning.take() {
            out.push(Event::ReasoningMessageEnd { message_id: id.clone() });
            out.push(Event::ReasoningEnd { message_id: id });
        }
    }

    fn end_calls(&mut self, out: &mut Vec<Event>) {
        for (id, _) in self.calls.drain(..) {
            out.push(Event::ToolCallEnd { tool_call_id: id });
        }
    }

    fn end_step(&mut self, out: &mut Vec<Event>) {
        self.end_streams(out);
        if let Some((name, _)) = self.step.take() {
            out.push(Event::StepFinished { step_name: name });
        }
    }
}

/// Whether `doc` is a message of a conversation of the run.
pub(super) fn is_message(doc: &Document) -> bool {
    use loopstack_llm::generate::{CONVERSATION_TAG, MESSAGE_DOCUMENT};
    doc.doc_type == MESSAGE_DOCUMENT && doc.tags.iter().any(|t| t == CONVERSATION_TAG)
}

#[cfg(test)]
mod tests {
    use loopstack_core::serde_json::json;

    use super::*;

    fn message(seq: u64, step: u64, message: Value) -> Arc<Document> {
        let doc = json!({"seq": seq, "doc_type": "llm_message", "key": null, "version": 1, "tags": ["conversation"],
                         "metadata": {}, "content": message, "step": step});
        Arc::new(serde_json::from_value(doc).unwrap())
    }

    fn kinds(events: &[Event]) -> Vec<String> {
        events.iter().map(|e| serde_json::to_value(e).unwrap()["type"].as_str().unwrap().to_owned()).collect()
    }

    fn started(step: u64) -> EventKind {
        EventKind::TransitionStarted { transition: "llm_turn".into(), from: "a".into(), to: "b".into(), step }
    }

    fn delta(json: &str) -> EventKind {
        EventKind::ToolCallDelta { call_id: "c1".into(), name: "weather".into(), partial_json: json.into() }
    }

    #[test]
    fn what_the_stream_missed_is_completed_from_the_stored_message() {
        let mut t = Translator::new(RunId::new(), 0);
        let mut out = Vec::new();
        t.event(&started(1), &mut out);
        t.event(&EventKind::TextDelta { text: "Sunny ".into() }, &mut out);
        assert_eq!(kinds(&out), ["STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]);
        // The rest of the stream was lost (a subscriber that fell behind): the
        // stored message completes the text and ends it.
        let mut docs = vec![
            message(0, 0, json!({"role": "user", "content": [{"type": "text", "text": "Weather?"}]})),
            message(1, 1, json!({"role": "assistant", "content": [{"type": "text", "text": "Sunny in Oslo"}]})),
        ];
        out.clear();
        t.committed(1, &docs, json!({"turns": 1}), &mut out);
        assert_eq!(kinds(&out), ["TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STATE_SNAPSHOT", "STEP_FINISHED"]);
        assert_eq!(serde_json::to_value(&out[0]).unwrap()["delta"], "in Oslo");

        // Likewise a tool call's arguments.
        out.clear();
        t.event(&started(2), &mut out);
        t.event(&delta(""), &mut out);
        t.event(&delta("{\"city\""), &mut out);
        docs.push(message(
            2,
            2,
            json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "weather", "input": {"city": "Oslo"}}]}),
        ));
        out.clear();
        t.committed(2, &docs, json!({"turns": 2}), &mut out);
        assert_eq!(kinds(&out), ["TOOL_CALL_ARGS", "TOOL_CALL_END", "STATE_DELTA", "STEP_FINISHED"]);
        assert_eq!(serde_json::to_value(&out[0]).unwrap()["delta"], ":\"Oslo\"}");

        // A message that did not stream is sent whole; one already sent is not again.
        docs.push(message(
            3,
            3,
            json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "Sunny in Oslo"}]}),
        ));
        docs.push(message(4, 4, json!({"role": "assistant", "content": [{"type": "text", "text": "It is sunny."}]})));
        out.clear();
        t.committed(u64::MAX, &docs, json!({"turns": 2}), &mut out);
        assert_eq!(kinds(&out), ["TOOL_CALL_RESULT", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]);
        out.clear();
        t.committed(u64::MAX, &docs, json!({"turns": 2}), &mut out);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn usage_adds_up_per_model_in_the_protocols_accounting() {
        let mut t = Translator::new(RunId::new(), 0);
        let usage = |model: &str| EventKind::Usage {
            provider: "p".into(),
            model: model.into(),
            input_tokens: 10,
            output_tokens: 5,
            cache_read_input_tokens: 100,
            cache_creation_input_tokens: 1,
            reasoning_output_tokens: 2,
        };
        let mut out = Vec::new();
        t.event(&usage("a"), &mut out);
        t.event(&usage("a"), &mut out);
        t.event(&usage("b"), &mut out);
        let usage = serde_json::to_value(t.take_usage()).unwrap();
        assert_eq!(
            usage[0],
            json!({"provider": "p", "model": "a", "inputTokens": 222, "outputTokens": 10, "totalTokens": 232,
                                    "reasoningTokens": 4, "cachedInputTokens": 200, "cacheWriteInputTokens": 2})
        );
        assert_eq!(usage[1]["model"], "b");
    }
}
