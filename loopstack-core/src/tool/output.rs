//! What a tool returns: its output ([`ToolOutput`]) or its error ([`ToolError`]).

use super::*;

/// The content of a tool result.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum ToolContent {
    /// Text, sent to the model as it is.
    Text(String),
    /// A structured result, sent to the model as JSON.
    Json(Value),
}

/// What a tool returns for one call, as the model will see it: text or JSON, and
/// whether the call failed. With the call's id and the tool's name it becomes the
/// call's result (`ToolCallResult` in `loopstack::llm`), the one type the steps
/// that run calls give back.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct ToolOutput {
    /// The content.
    pub content: ToolContent,
    /// Whether the call failed; providers mark such results as errors.
    pub is_error: bool,
    /// Set when the call has no result yet: it runs on as this child run (a
    /// workflow tool whose run waits for a person, a timer). Its result arrives as
    /// the child's [`ChildEnded`](crate::ChildEnded) signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<RunId>,
    /// Images the model is shown with the result (a chart, a screenshot), after its
    /// text; see [`ToolOutput::with_image`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<crate::image::Image>,
    /// A structured result beside a text result: the model reads the text, a
    /// program reads this (see [`ToolOutput::with_value`]). `None` for a JSON
    /// result, whose content is its value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// Set when the call cannot finish without a person's input: what to ask them
    /// (see [`ToolOutput::needs_input`]). The call is run again with the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Box<InputRequest>>,
}

/// What a tool call asks a person before it can finish: an MCP server's
/// elicitation, a confirmation a service wants. An agent's run waits for the answer
/// as it waits for an approval (durably, across restarts), then runs the call again
/// with the answer in its [`ToolContext::input`].
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct InputRequest {
    /// What to ask, in words for a person.
    pub message: String,
    /// The JSON Schema the answer must fit: an object's, whose properties are the
    /// form's fields.
    pub schema: Value,
    /// What the tool needs to go on when it is called again with the answer: kept
    /// with the run, given back as it is, never shown to the model.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub state: Value,
}

impl InputRequest {
    /// Asks `message`, the answer fitting `schema`.
    pub fn new(message: impl Into<String>, schema: Value) -> Self {
        Self { message: message.into(), schema, state: Value::Null }
    }

    /// Keeps `state` for the call that comes with the answer.
    #[must_use]
    pub fn state(mut self, state: Value) -> Self {
        self.state = state;
        self
    }
}

/// A person's answer to an [`InputRequest`], and the request it answers: what a
/// call run again after the answer finds in [`ToolContext::input`].
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct InputAnswer {
    /// The request the answer is to.
    pub request: InputRequest,
    /// The answer.
    pub response: InputResponse,
}

impl InputAnswer {
    /// `response` to `request`.
    pub fn new(request: InputRequest, response: InputResponse) -> Self {
        Self { request, response }
    }
}

/// How a person answered an [`InputRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(tag = "action", content = "content", rename_all = "snake_case")]
#[non_exhaustive]
pub enum InputResponse {
    /// Gave what was asked: a value that fits the request's schema.
    Accept(Value),
    /// Said no.
    Decline,
    /// Went away without answering.
    Cancel,
}

impl ToolOutput {
    /// A call that cannot finish without a person's input: the agent's run waits
    /// for the answer (like an approval) and runs the call again with it, in its
    /// [`ToolContext::input`].
    ///
    /// ```
    /// use loopstack_core::{InputRequest, ToolOutput};
    /// use serde_json::json;
    ///
    /// let schema = json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]});
    /// let output = ToolOutput::needs_input(InputRequest::new("Refund 80 EUR to order A-17?", schema));
    /// assert_eq!(output.input.as_ref().unwrap().message, "Refund 80 EUR to order A-17?");
    /// ```
    pub fn needs_input(request: InputRequest) -> Self {
        Self {
            content: ToolContent::Text(format!("needs input: {}", request.message)),
            is_error: false,
            pending: None,
            images: Vec::new(),
            structured: None,
            input: Some(Box::new(request)),
        }
    }

    /// A text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: ToolContent::Text(text.into()),
            is_error: false,
            pending: None,
            images: Vec::new(),
            structured: None,
            input: None,
        }
    }

    /// A structured result.
    pub fn json(value: Value) -> Self {
        Self {
            content: ToolContent::Json(value),
            is_error: false,
            pending: None,
            images: Vec::new(),
            structured: None,
            input: None,
        }
    }

    /// A call whose result is not there yet: it comes when child run `child` ends.
    pub fn pending(child: RunId) -> Self {
        Self {
            content: ToolContent::Text(format!("pending: run {child}")),
            is_error: false,
            pending: Some(child),
            images: Vec::new(),
            structured: None,
            input: None,
        }
    }

    /// Adds an image the model is shown with the result, after its text: a chart,
    /// a screenshot. A result without images is sent as it always was.
    ///
    /// ```
    /// use loopstack_core::{ToolOutput, image::Image};
    ///
    /// let png = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d];
    /// let output = ToolOutput::text("the chart of May").with_image(Image::from_bytes(&png).unwrap());
    /// assert_eq!(output.images.len(), 1);
    /// ```
    #[must_use]
    pub fn with_image(mut self, image: crate::image::Image) -> Self {
        self.images.push(image);
        self
    }

    /// Whether the call has no result yet (see [`ToolOutput::pending`]).
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Adds a structured result to a text result: the model reads the text, and a
    /// program that called the tool reads [`value`](Self::value). An MCP server's
    /// file read is both: its text for the model, `{"content": ...}` for a program.
    /// On a JSON result, the value replaces what a program reads; the model still
    /// reads the JSON content.
    ///
    /// ```
    /// use loopstack_core::ToolOutput;
    /// use serde_json::json;
    ///
    /// let output = ToolOutput::text("14 °C and sunny").with_value(json!({"temp": 14}));
    /// assert_eq!(output.to_text(), "14 °C and sunny");
    /// assert_eq!(output.value(), Some(&json!({"temp": 14})));
    /// ```
    #[must_use]
    pub fn with_value(mut self, value: Value) -> Self {
        self.structured = Some(value);
        self
    }

    /// The structured result a program reads: the value given with
    /// [`with_value`](Self::with_value), else a JSON result's content; `None` for a
    /// text result without one.
    pub fn value(&self) -> Option<&Value> {
        match (&self.structured, &self.content) {
            (Some(value), _) | (None, ToolContent::Json(value)) => Some(value),
            (None, ToolContent::Text(_)) => None,
        }
    }

    /// An error result with a message for the model.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            content: ToolContent::Text(message.into()),
            is_error: true,
            pending: None,
            images: Vec::new(),
            structured: None,
            input: None,
        }
    }

    /// The content as the text sent to a model: text as it is, JSON serialized.
    pub fn to_text(&self) -> Cow<'_, str> {
        match &self.content {
            ToolContent::Text(t) => Cow::Borrowed(t),
            ToolContent::Json(v) => Cow::Owned(v.to_string()),
        }
    }

    /// Consumes the output and returns its text.
    pub fn into_text(self) -> String {
        match self.content {
            ToolContent::Text(t) => t,
            ToolContent::Json(v) => v.to_string(),
        }
    }
}

impl From<ToolError> for ToolOutput {
    fn from(err: ToolError) -> Self {
        Self::error(err.to_string())
    }
}

/// Turns what a tool handler returns into a [`ToolOutput`].
///
/// Text types become text results, [`Json`] and [`Value`] structured results.
/// `#[tool]` also accepts any other `Serialize` type and sends it as JSON.
pub trait IntoToolOutput {
    /// Converts into the output.
    fn into_tool_output(self) -> ToolOutput;
}

impl IntoToolOutput for ToolOutput {
    fn into_tool_output(self) -> ToolOutput {
        self
    }
}
impl IntoToolOutput for String {
    fn into_tool_output(self) -> ToolOutput {
        ToolOutput::text(self)
    }
}
impl IntoToolOutput for &str {
    fn into_tool_output(self) -> ToolOutput {
        ToolOutput::text(self)
    }
}
impl IntoToolOutput for Cow<'_, str> {
    fn into_tool_output(self) -> ToolOutput {
        ToolOutput::text(self.into_owned())
    }
}
impl IntoToolOutput for Value {
    fn into_tool_output(self) -> ToolOutput {
        ToolOutput::json(self)
    }
}
impl<T: Serialize> IntoToolOutput for Json<T> {
    fn into_tool_output(self) -> ToolOutput {
        match serde_json::to_value(&self.0) {
            Ok(v) => ToolOutput::json(v),
            Err(e) => ToolOutput::error(format!("the tool's result could not be serialized: {e}")),
        }
    }
}

/// A structured tool result, serialized to JSON for the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Json<T>(pub T);

/// What kind of failure a [`ToolError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// The model's arguments did not match the schema.
    InvalidArguments,
    /// The model called a tool that does not exist or was not offered.
    UnknownTool,
    /// The handler returned an error.
    Failed,
    /// The handler panicked.
    Panicked,
    /// The call took longer than its timeout.
    TimedOut,
    /// The handler asked for the run the call is made from ([`ToolContext::runtime`])
    /// and the call was not given it: the tool does not ask for it
    /// ([`ToolOptions::needs_run`], `#[tool(needs_run)]`), or it was called outside a run.
    NoRun,
}

/// A failed tool call. Its message is what the model sees.
///
/// Like `anyhow::Error`, any `std::error::Error` converts into it with `?`, so a
/// handler can use `?` on its own errors. For a message of your own, use
/// [`ToolError::new`].
pub struct ToolError {
    kind: ToolErrorKind,
    message: String,
}

impl ToolError {
    /// A handler failure with a message for the model.
    pub fn new(message: impl fmt::Display) -> Self {
        Self { kind: ToolErrorKind::Failed, message: message.to_string() }
    }

    /// An error of a given kind.
    pub fn with_kind(kind: ToolErrorKind, message: impl fmt::Display) -> Self {
        Self { kind, message: message.to_string() }
    }

    /// The model's arguments were not valid.
    pub fn invalid_arguments(message: impl fmt::Display) -> Self {
        Self::with_kind(ToolErrorKind::InvalidArguments, message)
    }

    /// The kind of failure.
    pub fn kind(&self) -> ToolErrorKind {
        self.kind
    }

    /// The message the model sees.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolError").field("kind", &self.kind).field("message", &self.message).finish()
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for ToolError {
    fn from(err: E) -> Self {
        let mut message = err.to_string();
        let mut source = err.source();
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        Self::new(message)
    }
}

impl ToolError {
    /// A handler failure from a boxed error (`From` cannot cover it: it would overlap
    /// the conversion from every `std::error::Error`). Use it as
    /// `.map_err(ToolError::from_boxed)?`.
    pub fn from_boxed(err: crate::BoxError) -> Self {
        let mut message = err.to_string();
        let mut source = err.source();
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        Self::new(message)
    }
}
