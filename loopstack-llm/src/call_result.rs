//! [`ToolCallResult`]: the result of one tool call, the one type every step that
//! runs calls gives back. The wire block sent to the model ([`ToolResult`]) and the
//! dispatch entry ([`DispatchEntry`](crate::DispatchEntry)) are made from it and
//! use its field names.

use loopstack_core::{RunId, ToolContent, ToolOutput};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::image::Image;
use crate::message::ToolResult;

/// The result of one tool call: which call it answers, the text the model reads,
/// whether it failed, the tool's structured result and, while the call still runs
/// as a child run, that run.
///
/// A tool returns a [`ToolOutput`]; with the call's id and name it becomes this
/// ([`ToolCallResult::new`]). What the model receives is its [`ToolResult`] block
/// (`ToolResult::from(&result)`), with the same `tool_use_id`, `content` and
/// `is_error`.
///
/// ```
/// use loopstack_core::ToolOutput;
/// use loopstack_llm::{ToolCallResult, ToolResult};
/// use serde_json::json;
///
/// let result = ToolCallResult::new("call_1", "get_weather", ToolOutput::json(json!({"temp": 14})));
/// assert_eq!((result.content.as_str(), result.is_error), (r#"{"temp":14}"#, false));
/// assert_eq!(result.value, Some(json!({"temp": 14})));
/// let block = ToolResult::from(&result);
/// assert_eq!((block.tool_use_id.as_str(), block.content.as_str()), ("call_1", r#"{"temp":14}"#));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolCallResult {
    /// The id of the call it answers.
    pub tool_use_id: String,
    /// The tool's name as the model called it.
    pub name: String,
    /// The text the model reads (a structured result as its JSON text).
    pub content: String,
    /// Whether the call failed.
    #[serde(default)]
    pub is_error: bool,
    /// The tool's structured result, when it gave one (`content` is its JSON text,
    /// or the text given beside it, [`ToolOutput::with_value`]); `None` for a text
    /// result and for a call that failed before giving one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Set while the call has no result yet: it runs on as this child run, and its
    /// result comes with the child's end (see [`ToolOutput::pending`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<RunId>,
    /// The images the tool returned with its result ([`ToolOutput::with_image`]),
    /// shown to the model after `content`; once the run saved them, references to
    /// its image documents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    /// Set while the call waits for a person's input ([`ToolOutput::needs_input`]):
    /// it runs again with the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Box<loopstack_core::InputRequest>>,
}

impl ToolCallResult {
    /// The result of call `tool_use_id` of tool `name` that gave `output`.
    pub fn new(tool_use_id: impl Into<String>, name: impl Into<String>, output: ToolOutput) -> Self {
        let ToolOutput { content, is_error, pending, images, structured, input, .. } = output;
        let (content, value) = match content {
            ToolContent::Text(text) => (text, structured),
            ToolContent::Json(json) => (json.to_string(), Some(structured.unwrap_or(json))),
        };
        Self { tool_use_id: tool_use_id.into(), name: name.into(), content, is_error, value, pending, images, input }
    }

    /// An error result: the model reads `message`.
    pub fn error(tool_use_id: impl Into<String>, name: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(tool_use_id, name, ToolOutput::error(message))
    }

    /// Whether the call has no result yet (see [`ToolCallResult::pending`]).
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }
}

impl From<&ToolCallResult> for ToolResult {
    fn from(r: &ToolCallResult) -> Self {
        Self { tool_use_id: r.tool_use_id.clone(), content: r.content.clone(), is_error: r.is_error }
    }
}
