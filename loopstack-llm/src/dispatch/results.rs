//! Dispatch results: what one batch of tool calls produced, call by call.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io;

use loopstack_core::ToolOutput;
use serde::ser::SerializeStruct as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::projection::CallView;
use crate::call_result::ToolCallResult;
use crate::message::{Message, ToolResult};

/// The key of a child's output whose value is its tool result.
pub const TOOL_RESULT_VALUE: &str = "tool_result_value";
/// The key of a child's output whose text is its tool result, when it published no
/// [`TOOL_RESULT_VALUE`].
pub const TOOL_RESULT_TEXT: &str = "tool_result_text";

/// A bound for results kept in durable storage, in bytes (see [`stored_form`]).
pub const DEFAULT_MAX_STORED_BYTES: usize = 256 * 1024;

/// Where a child's result came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ResultSource {
    /// The child published a [`TOOL_RESULT_VALUE`].
    Value,
    /// The child published a [`TOOL_RESULT_TEXT`].
    Text,
    /// The child published nothing: its output, without private keys.
    Output,
}

impl ResultSource {
    /// Whether the child published its result ([`ResultSource::Value`] or [`ResultSource::Text`]).
    pub fn is_published(self) -> bool {
        matches!(self, Self::Value | Self::Text)
    }
}

/// The result of a child run and where it came from, from its output (its final
/// state as JSON):
///
/// 1. its `tool_result_value`, when it has that key with a value other than null;
/// 2. else its `tool_result_text`, when it has that key with a value other than null
///    (a string as it is; any other value as it is too);
/// 3. else the output object without its top-level keys starting with `_` (nested
///    ones stay) and without the two keys above (which can only be null here);
/// 4. an output that is not an object is the result as it is.
///
/// A null publication counts as none, so a state type with
/// `tool_result_value: Option<Value>` that never set it falls through to its
/// other fields.
///
/// ```
/// use loopstack_llm::dispatch::{ResultSource, select_result};
/// use serde_json::json;
///
/// let picked = select_result(json!({"tool_result_value": {"ok": true}, "tool_result_text": "ok"}));
/// assert_eq!(picked, (json!({"ok": true}), ResultSource::Value));
/// let picked = select_result(json!({"tool_result_value": null, "tool_result_text": "refunded"}));
/// assert_eq!(picked, (json!("refunded"), ResultSource::Text));
/// let picked = select_result(json!({"amount": 10, "_internal": 1, "meta": {"_kept": 2}}));
/// assert_eq!(picked, (json!({"amount": 10, "meta": {"_kept": 2}}), ResultSource::Output));
/// ```
pub fn select_result(output: Value) -> (Value, ResultSource) {
    let mut map = match output {
        Value::Object(map) => map,
        other => return (other, ResultSource::Output),
    };
    for (key, source) in [(TOOL_RESULT_VALUE, ResultSource::Value), (TOOL_RESULT_TEXT, ResultSource::Text)] {
        match map.remove(key) {
            Some(Value::Null) | None => {}
            Some(value) => return (value, source),
        }
    }
    map.retain(|key, _| !key.starts_with('_'));
    (Value::Object(map), ResultSource::Output)
}

/// The text a model sees for a result: a string as it is, any other value as
/// compact JSON.
pub fn content_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// One tool call of a dispatch: its [`ToolCallResult`] with the call's arguments
/// and, for a workflow tool, the child's workflow.
///
/// Serialized flat, with the result's field names: `{"tool_use_id", "name",
/// "content", "is_error", "value", "arguments", "workflow", "error"}` (`value`,
/// `workflow` and `error` left out when unset). Entries stored in the older form
/// (`id`, `success`, `result`) read back too.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct DispatchEntry {
    /// The call's result: its id, tool name, the text the model reads, whether it
    /// failed, and its structured result (a typed tool's JSON result, a child's
    /// [selected result](select_result)).
    #[serde(flatten)]
    pub result: ToolCallResult,
    /// The call's parsed arguments.
    pub arguments: Value,
    /// The workflow of the child run that handled the call, for a workflow tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Why the call failed. Usually the [content](ToolCallResult::content) too; a
    /// child that published a result and then failed keeps what it published as
    /// the content, and the error is here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl DispatchEntry {
    /// The entry of a call with its result and arguments; a failed result's content
    /// is its [error](Self::error).
    pub fn new(result: ToolCallResult, arguments: Value) -> Self {
        let error = result.is_error.then(|| result.content.clone());
        Self { result, arguments, workflow: None, error }
    }

    /// A successful call with this result; the model sees [`content_text`] of it.
    pub fn succeeded(call: &CallView<'_>, value: Value) -> Self {
        let content = content_text(&value);
        Self::of(call, false, Some(value), content, None)
    }

    /// A failed (or unsupported) call: no result, and the model sees the error.
    /// Bound and redact the error first (see [`Secrets::redact_bounded`](super::Secrets::redact_bounded)).
    pub fn failed(call: &CallView<'_>, error: impl Into<String>) -> Self {
        let error = error.into();
        Self::of(call, true, None, error.clone(), Some(error))
    }

    /// The entry of a plain tool's output: a JSON result is kept as JSON, a text
    /// result is the content; an error output is a failure with its text.
    pub fn from_tool_output(call: &CallView<'_>, output: ToolOutput) -> Self {
        Self::new(ToolCallResult::new(call.id, call.name, output), call.arguments.clone())
    }

    /// The entry of a child run of `workflow` that ended with `output` (its final
    /// state as JSON) and, when it failed, `error`.
    ///
    /// The result's value is always [selected](select_result) from the output.
    /// What the model sees is its content, except for a failed child that
    /// published nothing: then the model sees the error rather than a dump of the
    /// child's state. A child that published a result and then failed keeps what it
    /// published as the content; the error stays in [`error`](Self::error).
    ///
    /// ```
    /// use loopstack_llm::dispatch::{CallView, DispatchEntry};
    /// use serde_json::json;
    ///
    /// let args = json!({"order": "2024-0001"});
    /// let call = CallView::new("call_1", "issue_refund", &args);
    /// let ok = DispatchEntry::from_child(&call, "refund", json!({"tool_result_text": "refunded", "_step": 3}), None);
    /// assert!(!ok.result.is_error);
    /// assert_eq!((ok.result.content.as_str(), ok.workflow.as_deref()), ("refunded", Some("refund")));
    ///
    /// let failed = DispatchEntry::from_child(&call, "refund", json!({"amount": 10}), Some("denied".into()));
    /// assert!(failed.result.is_error);
    /// assert_eq!(failed.result.value, Some(json!({"amount": 10})));
    /// assert_eq!(failed.result.content, "denied");
    /// ```
    pub fn from_child(call: &CallView<'_>, workflow: impl Into<String>, output: Value, error: Option<String>) -> Self {
        let (value, source) = select_result(output);
        let content = match &error {
            Some(error) if !source.is_published() => error.clone(),
            _ => content_text(&value),
        };
        Self::of(call, error.is_some(), Some(value), content, error).with_workflow(workflow)
    }

    /// Sets the workflow of the child run that handled the call.
    #[must_use]
    pub fn with_workflow(mut self, workflow: impl Into<String>) -> Self {
        self.workflow = Some(workflow.into());
        self
    }

    /// The form to store: the result's [value](ToolCallResult::value) and
    /// [content](ToolCallResult::content) each cut to `max_bytes` with a marker
    /// (see [`stored_form`]); borrowed when both fit.
    pub fn stored(&self, max_bytes: usize) -> Cow<'_, Self> {
        let value = self.result.value.as_ref().map(|v| stored_form(v, max_bytes));
        let content = truncate_bytes(&self.result.content, max_bytes);
        if matches!((&value, &content), (None | Some(Cow::Borrowed(_)), Cow::Borrowed(_))) {
            return Cow::Borrowed(self);
        }
        let mut stored = self.clone();
        stored.result.value = value.map(Cow::into_owned);
        stored.result.content = content.into_owned();
        Cow::Owned(stored)
    }

    fn of(call: &CallView<'_>, is_error: bool, value: Option<Value>, content: String, error: Option<String>) -> Self {
        let mut result = ToolCallResult::error(call.id, call.name, content);
        result.is_error = is_error;
        result.value = value;
        Self { result, arguments: call.arguments.clone(), workflow: None, error }
    }
}

impl<'de> Deserialize<'de> for DispatchEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Both forms: today's, and the one from before a call's result was one
        /// type (`id`, `success`, and `result` for the value).
        #[derive(Deserialize)]
        struct Stored {
            #[serde(alias = "id")]
            tool_use_id: String,
            name: String,
            #[serde(default)]
            content: String,
            is_error: Option<bool>,
            success: Option<bool>,
            #[serde(default)]
            value: Option<Value>,
            #[serde(default)]
            result: Option<Value>,
            #[serde(default)]
            arguments: Value,
            #[serde(default)]
            workflow: Option<String>,
            #[serde(default)]
            error: Option<String>,
        }
        let s = Stored::deserialize(deserializer)?;
        let is_error = s.is_error.or(s.success.map(|ok| !ok)).unwrap_or(false);
        let mut result = ToolCallResult::error(s.tool_use_id, s.name, s.content);
        result.is_error = is_error;
        result.value = s.value.or(s.result.filter(|v| !v.is_null()));
        Ok(Self { result, arguments: s.arguments, workflow: s.workflow, error: s.error })
    }
}

/// What one dispatch of tool calls produced: an entry per call, in call order.
///
/// Serialized as `{"entries": [..], "count": .., "errors": .., "all_succeeded": ..}`
/// (the three figures for readers of the JSON, such as a later step's
/// [`InputMapping`](super::InputMapping) `ctx.results.all_succeeded`); only
/// `entries` is read back. The tool messages and the entries by id are methods, so
/// the stored form does not hold every result twice.
///
/// ```
/// use loopstack_llm::dispatch::{CallView, DispatchEntry, DispatchResults};
/// use serde_json::json;
///
/// let (a, b) = (json!({"city": "Oslo"}), json!({}));
/// let results: DispatchResults = [
///     DispatchEntry::succeeded(&CallView::new("call_1", "get_weather", &a), json!({"temp": 14})),
///     DispatchEntry::failed(&CallView::new("call_2", "launch", &b), "unknown tool `launch`"),
/// ]
/// .into_iter()
/// .collect();
/// assert_eq!((results.count(), results.error_count(), results.all_succeeded()), (2, 1, false));
/// assert_eq!(results.get("call_1").unwrap().result.content, r#"{"temp":14}"#);
/// let message = results.message().unwrap();
/// let sent: Vec<_> = message.tool_results_iter().map(|r| (r.tool_use_id.as_str(), r.is_error)).collect();
/// assert_eq!(sent, [("call_1", false), ("call_2", true)]);
/// assert_eq!(serde_json::to_value(&results).unwrap()["errors"], 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DispatchResults {
    entries: Vec<DispatchEntry>,
}

impl DispatchResults {
    /// No entries.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the entry of the next call.
    pub fn push(&mut self, entry: DispatchEntry) {
        self.entries.push(entry);
    }

    /// The entries, in call order.
    pub fn entries(&self) -> &[DispatchEntry] {
        &self.entries
    }

    /// The entries, in call order.
    pub fn into_entries(self) -> Vec<DispatchEntry> {
        self.entries
    }

    /// How many calls were processed.
    pub fn count(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many calls failed or were unsupported.
    pub fn error_count(&self) -> usize {
        self.entries.iter().filter(|e| e.result.is_error).count()
    }

    /// Whether every call succeeded (`true` for no calls).
    pub fn all_succeeded(&self) -> bool {
        self.entries.iter().all(|e| !e.result.is_error)
    }

    /// The first failed entry, in call order.
    pub fn first_failure(&self) -> Option<&DispatchEntry> {
        self.entries.iter().find(|e| e.result.is_error)
    }

    /// The entry of the call with this id (the first, should two share it).
    pub fn get(&self, id: &str) -> Option<&DispatchEntry> {
        self.entries.iter().find(|e| e.result.tool_use_id == id)
    }

    /// The entries keyed by call id (the first, should two share an id).
    pub fn by_id(&self) -> BTreeMap<&str, &DispatchEntry> {
        let mut by_id = BTreeMap::new();
        for entry in &self.entries {
            by_id.entry(entry.result.tool_use_id.as_str()).or_insert(entry);
        }
        by_id
    }

    /// The tool results the model reads, in call order.
    pub fn tool_results(&self) -> impl Iterator<Item = ToolResult> + '_ {
        self.entries.iter().map(|e| ToolResult::from(&e.result))
    }

    /// The chat message carrying every tool result, in call order, for the next
    /// model turn; `None` for no calls (a message needs content).
    pub fn message(&self) -> Option<Message> {
        (!self.entries.is_empty()).then(|| Message::tool_results(self.tool_results()))
    }

    /// The form to store: every entry's result and content cut to `max_bytes` with
    /// a marker (see [`DispatchEntry::stored`]); borrowed when all fit. The caller
    /// keeps the full results for the next step in the same process.
    pub fn stored(&self, max_bytes: usize) -> Cow<'_, Self> {
        let stored: Vec<Cow<'_, DispatchEntry>> = self.entries.iter().map(|e| e.stored(max_bytes)).collect();
        if stored.iter().all(|e| matches!(e, Cow::Borrowed(_))) {
            return Cow::Borrowed(self);
        }
        Cow::Owned(Self { entries: stored.into_iter().map(Cow::into_owned).collect() })
    }
}

impl FromIterator<DispatchEntry> for DispatchResults {
    fn from_iter<I: IntoIterator<Item = DispatchEntry>>(iter: I) -> Self {
        Self { entries: iter.into_iter().collect() }
    }
}

impl From<Vec<DispatchEntry>> for DispatchResults {
    fn from(entries: Vec<DispatchEntry>) -> Self {
        Self { entries }
    }
}

impl Extend<DispatchEntry> for DispatchResults {
    fn extend<I: IntoIterator<Item = DispatchEntry>>(&mut self, iter: I) {
        self.entries.extend(iter);
    }
}

impl<'a> IntoIterator for &'a DispatchResults {
    type Item = &'a DispatchEntry;
    type IntoIter = std::slice::Iter<'a, DispatchEntry>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter()
    }
}

impl IntoIterator for DispatchResults {
    type Item = DispatchEntry;
    type IntoIter = std::vec::IntoIter<DispatchEntry>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl Serialize for DispatchResults {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("DispatchResults", 4)?;
        s.serialize_field("entries", &self.entries)?;
        s.serialize_field("count", &self.count())?;
        s.serialize_field("errors", &self.error_count())?;
        s.serialize_field("all_succeeded", &self.all_succeeded())?;
        s.end()
    }
}

impl<'de> Deserialize<'de> for DispatchResults {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Stored {
            #[serde(default)]
            entries: Vec<DispatchEntry>,
        }
        Stored::deserialize(deserializer).map(|s| Self { entries: s.entries })
    }
}

/// What a dispatch does when a call fails (an unknown tool, arguments that do not
/// fit, a tool error, a child that fails, is cancelled or times out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorPolicy {
    /// Every call runs and gets its entry; failures are error results the model
    /// reads and can act on. The default.
    #[default]
    Continue,
    /// The first failure fails the dispatch step: the calls still running, and
    /// their child runs, are cancelled, and the step's error carries the failed
    /// entry's (bounded, redacted) error.
    FailFast,
}

impl ErrorPolicy {
    /// Whether the dispatch stops once it has this entry.
    pub fn stops_at(self, entry: &DispatchEntry) -> bool {
        self == Self::FailFast && entry.result.is_error
    }
}

/// `text` cut to at most `max_bytes` bytes (never inside a character), with a
/// marker saying how much there was: `… [truncated: N of M bytes]`. The marker comes
/// on top of the `max_bytes`. Borrowed, unchanged, when it fits.
///
/// ```
/// use loopstack_llm::dispatch::truncate_bytes;
///
/// assert_eq!(truncate_bytes("café", 5), "café");
/// assert_eq!(truncate_bytes("café", 4), "caf… [truncated: 3 of 5 bytes]");
/// ```
pub fn truncate_bytes(text: &str, max_bytes: usize) -> Cow<'_, str> {
    if text.len() <= max_bytes {
        return Cow::Borrowed(text);
    }
    let cut = text.floor_char_boundary(max_bytes);
    Cow::Owned(format!("{}… [truncated: {cut} of {} bytes]", &text[..cut], text.len()))
}

/// The form of a result to keep in durable storage (documents, checkpoints) when
/// it may be large: borrowed, unchanged, when it fits in `max_bytes`, else a string
/// cut with a marker ([`truncate_bytes`]). A string is measured by its UTF-8 bytes
/// and cut as text; any other value by its compact JSON text, which is cut.
///
/// The caller keeps the full value for the next step in the same process; what a
/// reader sees after a restart, or in a stored document, is this form.
///
/// ```
/// use loopstack_llm::dispatch::stored_form;
/// use serde_json::json;
///
/// let small = json!({"temp": 14});
/// assert_eq!(*stored_form(&small, 64), small);
/// assert_eq!(*stored_form(&json!({"text": "a long report"}), 10), json!(r#"{"text":"a… [truncated: 10 of 24 bytes]"#));
/// ```
pub fn stored_form(value: &Value, max_bytes: usize) -> Cow<'_, Value> {
    if let Value::String(text) = value {
        return match truncate_bytes(text, max_bytes) {
            Cow::Borrowed(_) => Cow::Borrowed(value),
            Cow::Owned(cut) => Cow::Owned(Value::String(cut)),
        };
    }
    if json_len(value) <= max_bytes {
        return Cow::Borrowed(value);
    }
    let text = value.to_string();
    Cow::Owned(Value::String(truncate_bytes(&text, max_bytes).into_owned()))
}

/// The length of a value's compact JSON text, without building it.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn selection_table() {
        let table = [
            (
                json!({"tool_result_value": {"a": 1}, "tool_result_text": "t", "x": 1}),
                json!({"a": 1}),
                ResultSource::Value,
            ),
            (json!({"tool_result_value": 0}), json!(0), ResultSource::Value),
            (json!({"tool_result_value": false}), json!(false), ResultSource::Value),
            (json!({"tool_result_value": ""}), json!(""), ResultSource::Value),
            (json!({"tool_result_value": null, "tool_result_text": "t"}), json!("t"), ResultSource::Text),
            (json!({"tool_result_text": "t", "x": 1}), json!("t"), ResultSource::Text),
            (json!({"tool_result_text": ["not", "text"]}), json!(["not", "text"]), ResultSource::Text),
            (
                json!({"tool_result_value": null, "tool_result_text": null, "x": 1}),
                json!({"x": 1}),
                ResultSource::Output,
            ),
            (
                json!({"_private": 1, "__x": 2, "public": {"_nested": 3}, "a_b": 4}),
                json!({"public": {"_nested": 3}, "a_b": 4}),
                ResultSource::Output,
            ),
            (json!({"_only": 1}), json!({}), ResultSource::Output),
            (json!({}), json!({}), ResultSource::Output),
            (json!({"_tool_result_value": 1}), json!({}), ResultSource::Output),
            (json!("text"), json!("text"), ResultSource::Output),
            (json!([{"_a": 1}]), json!([{"_a": 1}]), ResultSource::Output),
            (json!(null), json!(null), ResultSource::Output),
            (json!(3), json!(3), ResultSource::Output),
        ];
        for (output, value, source) in table {
            assert_eq!(select_result(output.clone()), (value, source), "{output}");
        }
    }

    #[test]
    fn contents() {
        assert_eq!(content_text(&json!("plain")), "plain");
        assert_eq!(content_text(&json!({"a": [1, "b"]})), r#"{"a":[1,"b"]}"#);
        assert_eq!(content_text(&json!(null)), "null");
        assert_eq!(content_text(&json!(1.5)), "1.5");
    }

    #[test]
    fn entries_of_each_kind() {
        let args = json!({"q": 1});
        let call = CallView::new("c1", "lookup", &args);
        let ok = DispatchEntry::succeeded(&call, json!({"n": 2}));
        assert_eq!(
            serde_json::to_value(&ok).unwrap(),
            json!({
                "tool_use_id": "c1", "name": "lookup", "content": r#"{"n":2}"#, "is_error": false,
                "value": {"n": 2}, "arguments": {"q": 1},
            })
        );
        let failed = DispatchEntry::failed(&call, "boom");
        assert_eq!(
            (failed.result.is_error, &failed.result.value, failed.result.content.as_str()),
            (true, &None, "boom")
        );
        assert_eq!(failed.error.as_deref(), Some("boom"));
        assert_eq!(
            ToolResult::from(&failed.result),
            ToolResult { tool_use_id: "c1".into(), content: "boom".into(), is_error: true }
        );

        let text = DispatchEntry::from_tool_output(&call, ToolOutput::text("hi"));
        assert_eq!((&text.result.value, text.result.content.as_str(), text.result.is_error), (&None, "hi", false));
        let typed = DispatchEntry::from_tool_output(&call, ToolOutput::json(json!({"status": "shipped"})));
        assert_eq!(typed.result.value, Some(json!({"status": "shipped"})));
        assert_eq!(typed.result.content, r#"{"status":"shipped"}"#);
        let error = DispatchEntry::from_tool_output(&call, ToolOutput::error("nope"));
        assert_eq!(
            (error.result.is_error, error.error.as_deref(), error.result.content.as_str()),
            (true, Some("nope"), "nope")
        );

        let child = DispatchEntry::from_child(&call, "wf", json!({"tool_result_value": [1], "_s": 1}), None);
        assert_eq!(
            (child.result.is_error, &child.result.value, child.result.content.as_str()),
            (false, &Some(json!([1])), "[1]")
        );
        assert_eq!(child.workflow.as_deref(), Some("wf"));
        let published =
            DispatchEntry::from_child(&call, "wf", json!({"tool_result_text": "half"}), Some("later".into()));
        assert_eq!((published.result.is_error, published.result.content.as_str()), (true, "half"));
        assert_eq!(published.error.as_deref(), Some("later"));
        let unpublished = DispatchEntry::from_child(&call, "wf", json!({"x": 1, "_y": 2}), Some("bad".into()));
        assert_eq!((&unpublished.result.value, unpublished.result.content.as_str()), (&Some(json!({"x": 1})), "bad"));
        let back: DispatchEntry = serde_json::from_value(serde_json::to_value(&unpublished).unwrap()).unwrap();
        assert_eq!(back, unpublished);
    }

    #[test]
    fn entries_stored_in_the_older_form_read_back() {
        let ok: DispatchEntry = serde_json::from_value(json!({
            "success": true, "id": "c1", "name": "lookup", "arguments": {"q": 1},
            "result": {"n": 2}, "content": r#"{"n":2}"#,
        }))
        .unwrap();
        let args = json!({"q": 1});
        assert_eq!(ok, DispatchEntry::succeeded(&CallView::new("c1", "lookup", &args), json!({"n": 2})));
        let failed: DispatchEntry = serde_json::from_value(json!({
            "success": false, "id": "c2", "name": "lookup", "arguments": {},
            "result": null, "content": "boom", "error": "boom",
        }))
        .unwrap();
        let empty = json!({});
        assert_eq!(failed, DispatchEntry::failed(&CallView::new("c2", "lookup", &empty), "boom"));
    }

    #[test]
    fn collections() {
        let args = json!({});
        let entries = vec![
            DispatchEntry::succeeded(&CallView::new("a", "t", &args), json!(1)),
            DispatchEntry::failed(&CallView::new("b", "t", &args), "x"),
            DispatchEntry::failed(&CallView::new("a", "t", &args), "repeat"),
        ];
        let results = DispatchResults::from(entries);
        assert_eq!((results.count(), results.error_count(), results.all_succeeded()), (3, 2, false));
        assert_eq!(results.first_failure().map(|e| e.result.tool_use_id.as_str()), Some("b"));
        assert_eq!(results.get("a").map(|e| e.result.is_error), Some(false));
        assert_eq!(results.by_id().len(), 2);
        assert!(!results.by_id()["a"].result.is_error);
        assert!(results.get("zzz").is_none());
        let json = serde_json::to_value(&results).unwrap();
        assert_eq!(
            (json["count"].clone(), json["errors"].clone(), json["all_succeeded"].clone()),
            (json!(3), json!(2), json!(false))
        );
        let back: DispatchResults = serde_json::from_value(json).unwrap();
        assert_eq!(back, results);
        let empty = DispatchResults::new();
        assert!(empty.all_succeeded() && empty.is_empty() && empty.message().is_none());
        assert_eq!(serde_json::from_value::<DispatchResults>(json!({})).unwrap(), empty);
    }

    #[test]
    fn policies() {
        let args = json!({});
        let call = CallView::new("a", "t", &args);
        let (ok, bad) = (DispatchEntry::succeeded(&call, json!(1)), DispatchEntry::failed(&call, "x"));
        assert!(!ErrorPolicy::Continue.stops_at(&bad));
        assert!(ErrorPolicy::FailFast.stops_at(&bad));
        assert!(!ErrorPolicy::FailFast.stops_at(&ok));
        assert_eq!(ErrorPolicy::default(), ErrorPolicy::Continue);
        assert_eq!(serde_json::to_value(ErrorPolicy::FailFast).unwrap(), json!("fail_fast"));
    }

    #[test]
    fn storage_bounds() {
        assert_eq!(truncate_bytes("", 0), "");
        assert_eq!(truncate_bytes("abc", 0), "… [truncated: 0 of 3 bytes]");
        assert_eq!(truncate_bytes("🔑🔑", 5), "🔑… [truncated: 4 of 8 bytes]");
        assert_eq!(truncate_bytes("🔑🔑", 3), "… [truncated: 0 of 8 bytes]");
        assert!(matches!(truncate_bytes("abc", 3), Cow::Borrowed(_)));
        assert!(matches!(stored_form(&json!("abc"), 3), Cow::Borrowed(_)));
        assert_eq!(*stored_form(&json!("abcd"), 3), json!("abc… [truncated: 3 of 4 bytes]"));
        assert_eq!(*stored_form(&json!(12345), 2), json!("12… [truncated: 2 of 5 bytes]"));
        assert!(matches!(stored_form(&json!([1, 2]), 5), Cow::Borrowed(_)));
        assert_eq!(*stored_form(&json!([1, 2]), 4), json!("[1,2… [truncated: 4 of 5 bytes]"));

        let args = json!({});
        let call = CallView::new("a", "t", &args);
        let big = DispatchEntry::succeeded(&call, json!("x".repeat(100)));
        let stored = big.stored(10);
        assert_eq!(stored.result.value, Some(json!(format!("{}… [truncated: 10 of 100 bytes]", "x".repeat(10)))));
        assert_eq!(stored.result.content, format!("{}… [truncated: 10 of 100 bytes]", "x".repeat(10)));
        assert!(matches!(big.stored(100), Cow::Borrowed(_)));
        let results: DispatchResults = [big.clone(), DispatchEntry::succeeded(&call, json!(1))].into_iter().collect();
        assert!(matches!(results.stored(1000), Cow::Borrowed(_)));
        let stored = results.stored(10);
        assert_eq!(stored.entries()[1], results.entries()[1]);
        assert_ne!(stored.entries()[0], results.entries()[0]);
        // The full results stay with the caller.
        assert_eq!(results.entries()[0].result.value, Some(json!("x".repeat(100))));
    }
}
