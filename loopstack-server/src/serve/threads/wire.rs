//! AG-UI 1.0 on the wire: the request a client sends and the events it reads.
//!
//! Written from the protocol's JSON Schema (the `@ag-ui/core` package's), not on a
//! crate: the protocol has no official Rust SDK, and the community crate is a
//! pre-release whose server runtime we would not use. Only what this server reads
//! and writes is here. Every event object is closed in the schema (a field it does
//! not name is an error to a strict client), so nothing is added beyond it.

use loopstack_core::serde_json::Value;
use serde::{Deserialize, Serialize};

/// The protocol version this server speaks (`RUN_STARTED.protocolVersion`).
pub(super) const PROTOCOL_VERSION: &str = "1.0";

/// A request to run an agent: the body of `POST /ag-ui/{name}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RunAgentInput {
    /// The conversation: one run of the workflow per thread.
    pub thread_id: String,
    /// The client's id of this request's run, echoed on the lifecycle events.
    pub run_id: String,
    /// The state the client holds: a workflow's input when it starts, unless
    /// `forwardedProps.input` gives one.
    #[serde(default)]
    pub state: Option<Value>,
    /// The conversation as the client holds it; its last user message is what is new,
    /// and its tool messages answer the calls of the client's tools.
    #[serde(default)]
    pub messages: Vec<InputMessage>,
    /// The tools the client answers itself (frontend tools), offered to an agent's model.
    #[serde(default)]
    pub tools: Vec<InputTool>,
    /// Values for the agent: `input` starts a workflow with that input.
    #[serde(default)]
    pub forwarded_props: Option<Value>,
    /// Answers to the interrupts the thread's last run ended with.
    #[serde(default)]
    pub resume: Option<Vec<ResumeEntry>>,
}

/// One message of [`RunAgentInput::messages`]: only its role, text and (a tool
/// message's) call are read.
#[derive(Debug, Deserialize)]
pub(super) struct InputMessage {
    pub role: String,
    /// The call a tool message answers.
    #[serde(default, rename = "toolCallId")]
    pub tool_call_id: Option<String>,
    /// A string, or a list of parts of which the `text` ones are read.
    #[serde(default)]
    pub content: Option<Value>,
}

impl InputMessage {
    /// The message's text: its content when a string, else its text parts joined.
    pub(super) fn text(&self) -> String {
        match &self.content {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        }
    }
}

/// A tool the client declares.
#[derive(Debug, Deserialize)]
pub(super) struct InputTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub parameters: Option<Value>,
}

/// An answer to one interrupt.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ResumeEntry {
    pub interrupt_id: String,
    pub status: ResumeStatus,
    #[serde(default)]
    pub payload: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// An event of the stream, serialized with its `type` tag.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE", rename_all_fields = "camelCase")]
pub(super) enum Event {
    RunStarted {
        thread_id: String,
        run_id: String,
        protocol_version: &'static str,
        /// `{"loopstackRunId": ...}`: the run of the workflow behind the thread.
        metadata: Value,
    },
    RunFinished {
        thread_id: String,
        run_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        outcome: Outcome,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        usage: Vec<TokenUsage>,
    },
    RunError {
        message: String,
        code: &'static str,
    },
    StepStarted {
        step_name: String,
    },
    StepFinished {
        step_name: String,
    },
    TextMessageStart {
        message_id: String,
        role: &'static str,
    },
    TextMessageContent {
        message_id: String,
        delta: String,
    },
    TextMessageEnd {
        message_id: String,
    },
    ReasoningStart {
        message_id: String,
    },
    ReasoningMessageStart {
        message_id: String,
        role: &'static str,
    },
    ReasoningMessageContent {
        message_id: String,
        delta: String,
    },
    ReasoningMessageEnd {
        message_id: String,
    },
    ReasoningEnd {
        message_id: String,
    },
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<String>,
    },
    ToolCallArgs {
        tool_call_id: String,
        delta: String,
    },
    ToolCallEnd {
        tool_call_id: String,
    },
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        content: String,
        role: &'static str,
        /// Whether the result is the tool's error (AG-UI's event has no field for it;
        /// other protocols write it).
        #[serde(skip)]
        is_error: bool,
    },
    StateSnapshot {
        snapshot: Value,
    },
    StateDelta {
        delta: Vec<PatchOp>,
    },
}

/// Why a run ended (`RUN_FINISHED.outcome`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase", rename_all_fields = "camelCase")]
pub(super) enum Outcome {
    Success {
        /// The calls of the client's tools the run waits to have answered.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pending_tool_call_ids: Vec<String>,
    },
    Interrupt {
        interrupts: Vec<Interrupt>,
    },
    Cancelled,
}

/// Something the run waits for from a person.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Interrupt {
    /// `decide_tools:<call id>`, `resolve_tools:<call id>`, or a signal's name.
    pub id: String,
    /// `tool_approval`, `tool_outcome_unknown` or `signal`.
    pub reason: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
    /// When a timer leaves the place, and the interrupt stops being answerable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// Token counts of one provider and model, in AG-UI's accounting: input counts
/// every prompt token, cached ones included, which the other counts break down.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TokenUsage {
    pub provider: String,
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    pub reasoning_tokens: u64,
    pub cached_input_tokens: u64,
    pub cache_write_input_tokens: u64,
}

/// One RFC 6902 operation of a state delta.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub(super) enum PatchOp {
    Add { path: String, value: Value },
    Remove { path: String },
    Replace { path: String, value: Value },
}

/// The operations that turn `from` into `to`: objects key by key, anything else
/// (arrays included) replaced whole.
pub(super) fn diff(from: &Value, to: &Value) -> Vec<PatchOp> {
    let mut ops = Vec::new();
    diff_at(&mut String::new(), from, to, &mut ops);
    ops
}

fn diff_at(path: &mut String, from: &Value, to: &Value, ops: &mut Vec<PatchOp>) {
    if from == to {
        return;
    }
    let (Value::Object(a), Value::Object(b)) = (from, to) else {
        ops.push(PatchOp::Replace { path: path.clone(), value: to.clone() });
        return;
    };
    let len = path.len();
    for key in a.keys().filter(|k| !b.contains_key(*k)) {
        push_token(path, key);
        ops.push(PatchOp::Remove { path: path.clone() });
        path.truncate(len);
    }
    for (key, value) in b {
        push_token(path, key);
        match a.get(key) {
            Some(old) => diff_at(path, old, value, ops),
            None => ops.push(PatchOp::Add { path: path.clone(), value: value.clone() }),
        }
        path.truncate(len);
    }
}

/// Appends `/key` to a JSON Pointer, escaped as RFC 6901 says.
fn push_token(path: &mut String, key: &str) {
    path.push('/');
    path.push_str(&key.replace('~', "~0").replace('/', "~1"));
}

#[cfg(test)]
mod tests {
    use loopstack_core::serde_json::{self, json};

    use super::*;

    #[test]
    fn a_delta_changes_what_changed_and_escapes_its_pointers() {
        let from = json!({"a": 1, "gone": true, "n": {"x": [1], "a/b": 1, "t~": 0}});
        let to = json!({"a": 1, "n": {"x": [1, 2], "a/b": 2, "t~": 0}, "new": null});
        let ops = serde_json::to_value(diff(&from, &to)).unwrap();
        assert_eq!(
            ops,
            json!([
                {"op": "remove", "path": "/gone"},
                {"op": "replace", "path": "/n/a~1b", "value": 2},
                {"op": "replace", "path": "/n/x", "value": [1, 2]},
                {"op": "add", "path": "/new", "value": null},
            ])
        );
        assert!(diff(&to, &to).is_empty());
        assert_eq!(
            serde_json::to_value(diff(&json!(1), &json!([]))).unwrap(),
            json!([{"op": "replace", "path": "", "value": []}])
        );
    }

    #[test]
    fn events_are_written_as_the_protocol_names_them() {
        let started = Event::ToolCallStart {
            tool_call_id: "c1".into(),
            tool_call_name: "weather".into(),
            parent_message_id: None,
        };
        assert_eq!(
            serde_json::to_value(started).unwrap(),
            json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "weather"})
        );
        let interrupt = Interrupt {
            id: "approve".into(),
            reason: "signal",
            message: "m".into(),
            tool_call_id: None,
            response_schema: None,
            expires_at: None,
        };
        let finished = Event::RunFinished {
            thread_id: "t".into(),
            run_id: "r".into(),
            result: None,
            outcome: Outcome::Interrupt { interrupts: vec![interrupt] },
            usage: Vec::new(),
        };
        assert_eq!(
            serde_json::to_value(finished).unwrap(),
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r",
                   "outcome": {"type": "interrupt", "interrupts": [{"id": "approve", "reason": "signal", "message": "m"}]}})
        );
    }
}
