//! Provider-neutral messages.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::image::Image;
pub use crate::usage::{StopReason, Usage};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The user, including tool results sent back to the model.
    User,
    /// The model.
    Assistant,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolUse {
    /// The provider's id of the call; its result must carry the same id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments. When the model wrote arguments that are not valid JSON this is
    /// `null` and [`ToolUse::invalid_input`] holds what it wrote.
    pub input: Value,
    /// Arguments that were not valid JSON, with the parse error; sent back to the
    /// provider as written, and answered with an error result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_input: Option<InvalidInput>,
}

/// Tool arguments a model wrote that are not valid JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidInput {
    /// What the model wrote.
    pub raw: String,
    /// Why it does not parse.
    pub error: String,
}

impl ToolUse {
    /// A tool call with valid arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        Self { id: id.into(), name: name.into(), input, invalid_input: None }
    }

    /// A tool call from a raw argument string: parsed when it is JSON, kept as
    /// [`InvalidInput`] when it is not. An empty string is `{}`.
    ///
    /// Arguments nested deeper than [`MAX_JSON_DEPTH`] are not parsed (a linear scan of
    /// the text finds them first): they are kept as [`InvalidInput`] too, with the
    /// text shortened to its first [`MAX_REFUSED_TEXT`] bytes and `...`.
    pub fn from_raw_arguments(id: impl Into<String>, name: impl Into<String>, raw: &str) -> Self {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Self::new(id, name, Value::Object(Default::default()));
        }
        if nests_deeper_than(trimmed.as_bytes(), MAX_JSON_DEPTH) {
            return Self::refused(id, name, raw);
        }
        match serde_json::from_str::<Value>(trimmed) {
            Ok(input) => Self::new(id, name, input),
            Err(e) => Self {
                id: id.into(),
                name: name.into(),
                input: Value::Null,
                invalid_input: Some(InvalidInput { raw: raw.to_owned(), error: e.to_string() }),
            },
        }
    }

    /// A tool call from parsed arguments, refused like [`ToolUse::from_raw_arguments`]
    /// refuses text when they nest deeper than [`MAX_JSON_DEPTH`].
    #[cfg_attr(not(feature = "anthropic"), allow(dead_code))] // (the one provider that sends parsed input)
    pub(crate) fn checked(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        if value_deeper_than(&input, MAX_JSON_DEPTH) {
            // The value came from a parser with a depth limit (serde_json's 128), so
            // writing it out does not recurse without bound.
            return Self::refused(id, name, &input.to_string());
        }
        Self::new(id, name, input)
    }

    /// A call whose arguments nest too deep: no input, the text shortened.
    fn refused(id: impl Into<String>, name: impl Into<String>, raw: &str) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            input: Value::Null,
            invalid_input: Some(InvalidInput { raw: shorten(raw, MAX_REFUSED_TEXT), error: too_deep() }),
        }
    }
}

/// The deepest nesting of arrays and objects accepted in JSON a model wrote: 64
/// levels (`{}` is one level, `{"a": [1]}` two).
///
/// Tool arguments nested deeper are not parsed: the call becomes an error result the
/// model reads, saying so, and the run goes on. The bound keeps every message well
/// within what serde_json reads back (128 levels, with the message's own levels
/// around the arguments), and no reply can build a value deep enough to overflow the
/// stack when it is dropped.
pub const MAX_JSON_DEPTH: usize = 64;

/// How much of a refused text (arguments nested too deep) is kept in
/// [`InvalidInput::raw`]: 512 bytes, then `...`.
pub const MAX_REFUSED_TEXT: usize = 512;

pub(crate) fn too_deep() -> String {
    format!("JSON nested more than {MAX_JSON_DEPTH} levels deep is not accepted")
}

/// `text` cut to at most `max` bytes at a character boundary, with `...` when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let cut = (0..=max).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("{}...", &text[..cut])
}

/// Whether the JSON text nests arrays and objects deeper than `limit`: one pass over
/// the bytes counting `[` and `{` outside strings, stopping as soon as it knows. Text
/// that is not JSON is scanned all the same; the parser finds what else is wrong.
pub(crate) fn nests_deeper_than(text: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in text {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Whether a value nests arrays and objects deeper than `limit`; recurses at most
/// `limit + 1` levels, however deep the value.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
#[doc(hidden)]
pub fn value_deeper_than(value: &Value, limit: usize) -> bool {
    match value {
        Value::Array(items) => limit == 0 || items.iter().any(|v| value_deeper_than(v, limit - 1)),
        Value::Object(map) => limit == 0 || map.values().any(|v| value_deeper_than(v, limit - 1)),
        _ => false,
    }
}

/// What a model reasoned before it answered: Anthropic's thinking blocks, OpenAI's
/// reasoning items, Gemini's thoughts and thought signatures, Bedrock's reasoning
/// content.
///
/// A provider refuses the next turn of a tool loop unless its reasoning comes back
/// exactly as it was sent, so a reasoning block is saved with its message in the
/// run's documents and sent back unchanged: a run resumed in another process, a
/// replay and a fork continue where the provider expects. Only the provider that
/// wrote it is sent it back; a fallback to another provider leaves it out, since no
/// provider reads another's.
///
/// ```
/// use loopstack_model::{ContentBlock, Reasoning};
/// use serde_json::json;
///
/// let block = ContentBlock::Reasoning(Reasoning::new("anthropic", "The user wants Oslo.", json!({"signature": "EqQB"})));
/// assert_eq!(block.to_string(), "[anthropic reasoning] The user wants Oslo.");
/// let saved = serde_json::to_value(&block).unwrap();
/// assert_eq!(saved, json!({
///     "type": "reasoning", "text": "The user wants Oslo.", "provider": "anthropic", "data": {"signature": "EqQB"},
/// }));
/// assert_eq!(serde_json::from_value::<ContentBlock>(saved).unwrap(), block);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Reasoning {
    /// The reasoning as the model showed it (a summary, on providers that summarize);
    /// empty when it showed none (redacted or encrypted reasoning, a bare signature).
    #[serde(default)]
    pub text: String,
    /// The provider that wrote it, as its [`ChatModel::provider`](crate::ChatModel::provider)
    /// names itself; only that provider is sent it back.
    pub provider: String,
    /// What the provider needs back unchanged, in its own shape: a signature, an
    /// encrypted item and its id, a thought signature. `null` when there is none.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub data: Value,
}

impl Reasoning {
    /// Reasoning `provider` wrote, with what it needs back (`Value::Null` for nothing).
    pub fn new(provider: impl Into<String>, text: impl Into<String>, data: Value) -> Self {
        Self { text: text.into(), provider: provider.into(), data }
    }
}

/// The result of a tool call, sent back to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the [`ToolUse`] it answers.
    pub tool_use_id: String,
    /// The result as text (structured results as JSON text).
    pub content: String,
    /// Whether the call failed.
    #[serde(default)]
    pub is_error: bool,
}

/// One block of a message's content.
///
/// Serialized with a `type` tag (`text`, `tool_use`, `tool_result`, `image`,
/// `reasoning`, `provider`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call.
    ToolUse(ToolUse),
    /// A tool result.
    ToolResult(ToolResult),
    /// An image: one the user shows the model, or, with `tool_use_id`, one a tool
    /// returned with the result of that call (see [`crate::image`]).
    Image {
        /// The image.
        source: Image,
        /// The call whose result it belongs to; `None` for a user's image.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_use_id: Option<String>,
    },
    /// What the model reasoned before it answered (see [`Reasoning`]): kept with the
    /// message and sent back unchanged to the provider that wrote it.
    Reasoning(Reasoning),
    /// A provider's own block, kept as received so it can be sent back unchanged to
    /// the same provider. (Messages saved before [`ContentBlock::Reasoning`] existed
    /// hold Anthropic's `thinking` blocks this way.)
    Provider {
        /// The provider that produced it.
        provider: String,
        /// The block as the provider sent it.
        raw: Value,
    },
}

// Written by hand: serde's derive for internally tagged enums buffers every block
// before it reads the tag, which made reading a conversation a hot spot of the
// overhead benchmark. This reads the fields of all variants in one pass instead.
impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;

        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Kind {
            Text,
            ToolUse,
            ToolResult,
            Image,
            Reasoning,
            Provider,
        }

        #[derive(Deserialize)]
        struct Flat {
            #[serde(rename = "type")]
            kind: Kind,
            text: Option<String>,
            id: Option<String>,
            name: Option<String>,
            input: Option<Value>,
            invalid_input: Option<InvalidInput>,
            tool_use_id: Option<String>,
            content: Option<String>,
            #[serde(default)]
            is_error: bool,
            provider: Option<String>,
            raw: Option<Value>,
            source: Option<Image>,
            data: Option<Value>,
        }

        let f = Flat::deserialize(deserializer)?;
        let need = |v: Option<String>, field: &'static str| v.ok_or_else(|| D::Error::missing_field(field));
        Ok(match f.kind {
            Kind::Text => Self::Text { text: need(f.text, "text")? },
            Kind::ToolUse => Self::ToolUse(ToolUse {
                id: need(f.id, "id")?,
                name: need(f.name, "name")?,
                input: f.input.unwrap_or(Value::Null),
                invalid_input: f.invalid_input,
            }),
            Kind::ToolResult => Self::ToolResult(ToolResult {
                tool_use_id: need(f.tool_use_id, "tool_use_id")?,
                content: need(f.content, "content")?,
                is_error: f.is_error,
            }),
            Kind::Image => Self::Image {
                source: f.source.ok_or_else(|| D::Error::missing_field("source"))?,
                tool_use_id: f.tool_use_id,
            },
            Kind::Reasoning => Self::Reasoning(Reasoning {
                text: f.text.unwrap_or_default(),
                provider: need(f.provider, "provider")?,
                data: f.data.unwrap_or(Value::Null),
            }),
            Kind::Provider => {
                Self::Provider { provider: need(f.provider, "provider")?, raw: f.raw.unwrap_or(Value::Null) }
            }
        })
    }
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }
}

/// `user` or `assistant`.
impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::User => "user",
            Self::Assistant => "assistant",
        })
    }
}

/// The block as a person reads it: text as written, `tool call get_weather({"location":"Oslo"})`
/// (the arguments as compact JSON, or as the model wrote them when they are not JSON),
/// `tool result call_1: Sunny` (`tool error ...` for a failed call), `image image/png`
/// (`image image/png for call_1` for a tool's, `image <url>` for one at a URL), and
/// `[anthropic reasoning] text` for reasoning (`[anthropic reasoning]` when none was
/// shown), and `[anthropic thinking]` for a provider's own block.
///
/// ```
/// use loopstack_model::{ContentBlock, ToolUse};
/// use serde_json::json;
///
/// let call = ContentBlock::ToolUse(ToolUse::new("call_1", "get_weather", json!({"location": "Oslo"})));
/// assert_eq!(call.to_string(), r#"tool call get_weather({"location":"Oslo"})"#);
/// ```
impl std::fmt::Display for ContentBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Text { text } => f.write_str(text),
            Self::ToolUse(call) => match &call.invalid_input {
                Some(bad) => write!(f, "tool call {}({}) (invalid JSON: {})", call.name, bad.raw, bad.error),
                None => write!(f, "tool call {}({})", call.name, call.input),
            },
            Self::ToolResult(result) => {
                let kind = if result.is_error { "tool error" } else { "tool result" };
                write!(f, "{kind} {}: {}", result.tool_use_id, result.content)
            }
            Self::Image { source, tool_use_id } => crate::image::fmt_image(f, source, tool_use_id.as_deref()),
            Self::Reasoning(reasoning) if reasoning.text.is_empty() => write!(f, "[{} reasoning]", reasoning.provider),
            Self::Reasoning(reasoning) => write!(f, "[{} reasoning] {}", reasoning.provider, reasoning.text),
            Self::Provider { provider, raw } => match raw.get("type").and_then(Value::as_str) {
                Some(kind) => write!(f, "[{provider} {kind}]"),
                None => write!(f, "[{provider} block]"),
            },
        }
    }
}

/// A message of a conversation.
///
/// It prints as one readable line (see its [`Display`](std::fmt::Display)
/// implementation), so printing a conversation is `for m in &messages { println!("{m}") }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// What it says.
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message with one text block.
    pub fn user(text: impl Into<String>) -> Self {
        Self { role: Role::User, content: vec![ContentBlock::text(text)] }
    }

    /// An assistant message with one text block.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self { role: Role::Assistant, content: vec![ContentBlock::text(text)] }
    }

    /// A user message carrying tool results.
    pub fn tool_results(results: impl IntoIterator<Item = ToolResult>) -> Self {
        Self { role: Role::User, content: results.into_iter().map(ContentBlock::ToolResult).collect() }
    }

    /// The text blocks joined.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }

    /// The reasoning shown in the message, its blocks' texts joined by blank lines;
    /// empty when it shows none.
    pub fn reasoning_text(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Reasoning(r) if !r.text.is_empty() => Some(r.text.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n\n")
    }

    /// The tool calls, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = &ToolUse> + '_ {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse(t) => Some(t),
            _ => None,
        })
    }

    /// The tool results, in order.
    pub fn tool_results_iter(&self) -> impl Iterator<Item = &ToolResult> + '_ {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolResult(t) => Some(t),
            _ => None,
        })
    }
}

/// The message as one readable line: `user: How is the weather?`,
/// `assistant: tool call get_weather({"location":"Oslo"})`, `tool result call_1: Sunny`.
///
/// The role comes first, except for a message made only of tool results, whose
/// results speak for themselves; blocks are separated by `; ` and each prints as its
/// [`ContentBlock`] does. Text is written as it is, line breaks included, and a
/// message without content prints as `assistant: (empty)`.
///
/// ```
/// use loopstack_model::{ContentBlock, Message, Role, ToolResult, ToolUse};
/// use serde_json::json;
///
/// let call = ToolUse::new("call_1", "get_weather", json!({"location": "Oslo"}));
/// let conversation = [
///     Message::user("How is the weather?"),
///     Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] },
///     Message::tool_results([ToolResult { tool_use_id: "call_1".into(), content: "Sunny".into(), is_error: false }]),
///     Message::assistant("It is sunny in Oslo."),
/// ];
/// let lines: Vec<String> = conversation.iter().map(ToString::to_string).collect();
/// assert_eq!(lines, [
///     "user: How is the weather?",
///     r#"assistant: tool call get_weather({"location":"Oslo"})"#,
///     "tool result call_1: Sunny",
///     "assistant: It is sunny in Oslo.",
/// ]);
/// ```
impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let only_results =
            !self.content.is_empty() && self.content.iter().all(|b| matches!(b, ContentBlock::ToolResult(_)));
        if !only_results {
            write!(f, "{}: ", self.role)?;
        }
        if self.content.is_empty() {
            return f.write_str("(empty)");
        }
        for (i, block) in self.content.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{block}")?;
        }
        Ok(())
    }
}

/// The calls of `message` whose id repeats the id of an earlier call, by call index,
/// each with a new id that no call of the message has: `<id>_dup<n>`, `n` from 2 (a
/// form Anthropic's id pattern accepts). Empty, without allocating, when the ids are
/// unique.
#[doc(hidden)]
pub fn duplicate_ids(message: &Message) -> Vec<(usize, String)> {
    const PAIRWISE: usize = 32;
    let count = message.tool_uses().count();
    if count < 2 {
        return Vec::new();
    }
    let unique = if count <= PAIRWISE {
        message.tool_uses().enumerate().all(|(i, a)| message.tool_uses().skip(i + 1).all(|b| a.id != b.id))
    } else {
        let mut seen = std::collections::HashSet::with_capacity(count);
        message.tool_uses().all(|t| seen.insert(t.id.as_str()))
    };
    if unique {
        return Vec::new();
    }
    let mut taken: std::collections::HashSet<String> = message.tool_uses().map(|t| t.id.clone()).collect();
    let mut seen = std::collections::HashSet::new();
    let mut renamed = Vec::new();
    for (index, call) in message.tool_uses().enumerate() {
        if seen.insert(call.id.as_str()) {
            continue;
        }
        let new_id =
            (2..).map(|n| format!("{}_dup{n}", call.id)).find(|id| !taken.contains(id)).expect("an unused id is found");
        taken.insert(new_id.clone());
        renamed.push((index, new_id));
    }
    renamed
}

/// Gives the calls of `message` that repeat the id of an earlier call new ids (see
/// [`duplicate_ids`]); returns the `(old, new)` ids.
#[doc(hidden)]
pub fn rename_duplicate_ids(message: &mut Message) -> Vec<(String, String)> {
    let renamed = duplicate_ids(message);
    if renamed.is_empty() {
        return Vec::new();
    }
    let mut changes = Vec::with_capacity(renamed.len());
    let calls = message.content.iter_mut().filter_map(|b| match b {
        ContentBlock::ToolUse(t) => Some(t),
        _ => None,
    });
    let mut renamed = renamed.into_iter().peekable();
    for (index, call) in calls.enumerate() {
        if let Some((_, new_id)) = renamed.next_if(|(i, _)| *i == index) {
            changes.push((std::mem::replace(&mut call.id, new_id.clone()), new_id));
        }
    }
    changes
}

impl Message {
    /// A user message with text and images, shown to the model after the text.
    pub fn user_with_images(text: impl Into<String>, images: impl IntoIterator<Item = Image>) -> Self {
        let mut message = Self::user(text);
        message.content.extend(images.into_iter().map(|source| ContentBlock::Image { source, tool_use_id: None }));
        message
    }

    /// Adds an image block (a user's image) to the message.
    #[must_use]
    pub fn with_image(mut self, image: Image) -> Self {
        self.content.push(ContentBlock::Image { source: image, tool_use_id: None });
        self
    }

    /// The images, in order, each with the call whose result it belongs to (`None`
    /// for a user's image).
    pub fn images(&self) -> impl Iterator<Item = (&Image, Option<&str>)> + '_ {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::Image { source, tool_use_id } => Some((source, tool_use_id.as_deref())),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_blocks_round_trip() {
        let blocks = vec![
            ContentBlock::text("hi"),
            ContentBlock::ToolUse(ToolUse::new("c1", "get_weather", json!({"location": "Oslo"}))),
            ContentBlock::ToolUse(ToolUse::from_raw_arguments("c2", "get_weather", "{bad")),
            ContentBlock::ToolResult(ToolResult { tool_use_id: "c1".into(), content: "sunny".into(), is_error: true }),
            ContentBlock::Provider { provider: "anthropic".into(), raw: json!({"type": "thinking", "thinking": "hm"}) },
        ];
        let text = serde_json::to_string(&blocks).unwrap();
        assert_eq!(serde_json::from_str::<Vec<ContentBlock>>(&text).unwrap(), blocks);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v[0], json!({"type": "text", "text": "hi"}));
        assert_eq!(v[1], json!({"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"location": "Oslo"}}));
        assert_eq!(v[3], json!({"type": "tool_result", "tool_use_id": "c1", "content": "sunny", "is_error": true}));
    }

    #[test]
    fn bad_blocks_are_errors() {
        let err = serde_json::from_value::<ContentBlock>(json!({"type": "picture"})).unwrap_err();
        assert!(err.to_string().contains("unknown variant `picture`"), "{err}");
        let err = serde_json::from_value::<ContentBlock>(json!({"type": "image"})).unwrap_err();
        assert!(err.to_string().contains("missing field `source`"), "{err}");
        let err = serde_json::from_value::<ContentBlock>(json!({"type": "tool_use", "name": "x"})).unwrap_err();
        assert!(err.to_string().contains("missing field `id`"), "{err}");
    }

    #[test]
    fn the_depth_scan_counts_brackets_outside_strings() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(!nests_deeper_than(nested(64).as_bytes(), 64));
        assert!(nests_deeper_than(nested(65).as_bytes(), 64));
        assert!(nests_deeper_than(format!("{{\"a\": {}}}", nested(64)).as_bytes(), 64));
        // Brackets in strings, escaped quotes included, do not count.
        let in_string = format!(r#"{{"a": "{}\"{}", "b": [1]}}"#, "[".repeat(100), "{".repeat(100));
        assert!(!nests_deeper_than(in_string.as_bytes(), 2));
        assert!(nests_deeper_than(in_string.as_bytes(), 1));
        // Siblings do not add up.
        assert!(!nests_deeper_than(nested(3).repeat(1000).as_bytes(), 3));
        let value: Value = serde_json::from_str(&nested(65)).unwrap();
        assert!(value_deeper_than(&value, 64) && !value_deeper_than(&value, 65));
        assert!(!value_deeper_than(&json!(3), 0) && value_deeper_than(&json!({}), 0));
    }

    #[test]
    fn arguments_nested_too_deep_are_refused_before_parsing() {
        let deep = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
        let call = ToolUse::from_raw_arguments("c", "t", &deep);
        assert_eq!(call.input, Value::Null);
        let bad = call.invalid_input.unwrap();
        assert_eq!(bad.error, "JSON nested more than 64 levels deep is not accepted");
        assert_eq!(bad.raw, format!("{}...", &deep[..MAX_REFUSED_TEXT]));
        let value: Value = serde_json::from_str(&format!("{}{}", "[".repeat(100), "]".repeat(100))).unwrap();
        assert!(ToolUse::checked("c", "t", value).invalid_input.is_some());
        assert_eq!(ToolUse::checked("c", "t", json!({"a": [1]})), ToolUse::new("c", "t", json!({"a": [1]})));
        assert_eq!(shorten("é".repeat(300).as_str(), 5), "éé...");
    }

    #[test]
    fn repeated_ids_get_new_ones() {
        let message = |ids: &[&str]| Message {
            role: Role::Assistant,
            content: ids.iter().map(|id| ContentBlock::ToolUse(ToolUse::new(*id, "t", json!({})))).collect(),
        };
        assert!(duplicate_ids(&message(&["a", "b", "c"])).is_empty());
        assert_eq!(duplicate_ids(&message(&["a", "a", "a_dup2", "a"])), [(1, "a_dup3".into()), (3, "a_dup4".into())]);
        let many: Vec<String> = (0..100).map(|i| format!("c{}", i % 50)).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let mut m = message(&many);
        assert_eq!(duplicate_ids(&m).len(), 50);
        let renamed = rename_duplicate_ids(&mut m);
        assert_eq!(renamed[0], ("c0".to_owned(), "c0_dup2".to_owned()));
        assert!(duplicate_ids(&m).is_empty());
        assert!(rename_duplicate_ids(&mut m).is_empty());
    }

    #[test]
    fn messages_print_as_readable_lines() {
        let result = |id: &str, content: &str, is_error| ToolResult {
            tool_use_id: id.into(),
            content: content.into(),
            is_error,
        };
        assert_eq!(Message::user("How is the weather?").to_string(), "user: How is the weather?");
        let calls = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::text("Let me look."),
                ContentBlock::ToolUse(ToolUse::new("call_1", "get_weather", json!({"location": "Oslo"}))),
                ContentBlock::ToolUse(ToolUse::from_raw_arguments("call_2", "get_time", "{bad")),
            ],
        };
        assert_eq!(
            calls.to_string(),
            "assistant: Let me look.; tool call get_weather({\"location\":\"Oslo\"}); tool call get_time({bad) \
             (invalid JSON: key must be a string at line 1 column 2)"
        );
        let results = Message::tool_results([result("call_1", "Sunny", false), result("call_2", "no clock", true)]);
        assert_eq!(results.to_string(), "tool result call_1: Sunny; tool error call_2: no clock");
        // A user message that adds text to its results keeps its role.
        let mut mixed = Message::tool_results([result("call_1", "Sunny", false)]);
        mixed.content.push(ContentBlock::text("Thanks."));
        assert_eq!(mixed.to_string(), "user: tool result call_1: Sunny; Thanks.");
        let thinking = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Provider { provider: "anthropic".into(), raw: json!({"type": "thinking"}) },
                ContentBlock::Provider { provider: "other".into(), raw: json!([1]) },
                ContentBlock::text("Sunny."),
            ],
        };
        assert_eq!(thinking.to_string(), "assistant: [anthropic thinking]; [other block]; Sunny.");
        assert_eq!(Message { role: Role::Assistant, content: vec![] }.to_string(), "assistant: (empty)");
        assert_eq!(format!("{} {}", Role::User, Role::Assistant), "user assistant");
    }
}
