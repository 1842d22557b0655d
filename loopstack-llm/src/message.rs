//! Provider-neutral messages.

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

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
    pub fn from_raw_arguments(id: impl Into<String>, name: impl Into<String>, raw: &str) -> Self {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Self::new(id, name, Value::Object(Default::default()));
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
/// Serialized with a `type` tag (`text`, `tool_use`, `tool_result`, `provider`).
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
    /// A provider's own block (Anthropic `thinking` and `redacted_thinking`, for
    /// instance), kept as received so it can be sent back unchanged to the same provider.
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

/// A message of a conversation.
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

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// It finished its answer.
    EndTurn,
    /// It wants tools called.
    ToolUse,
    /// It ran out of output tokens.
    MaxTokens,
    /// It wrote a stop sequence.
    StopSequence,
    /// A provider value with no variant of its own, kept as it came.
    Other(String),
}

impl StopReason {
    /// The snake_case name (`end_turn`, `tool_use`, ...) or the provider's own value.
    pub fn as_str(&self) -> &str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::StopSequence => "stop_sequence",
            Self::Other(s) => s,
        }
    }

    /// Parses the snake_case name; anything else is [`StopReason::Other`].
    pub fn parse(s: &str) -> Self {
        match s {
            "end_turn" => Self::EndTurn,
            "tool_use" => Self::ToolUse,
            "max_tokens" => Self::MaxTokens,
            "stop_sequence" => Self::StopSequence,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for StopReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StopReason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(Self::parse(&s))
    }
}

/// Token usage of one or more model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Output (completion) tokens.
    pub output_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the provider's prompt cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// Usage with input and output tokens only.
    pub const fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self { input_tokens, output_tokens, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 }
    }

    /// Input plus output tokens.
    pub const fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

impl Add for Usage {
    type Output = Self;
    fn add(mut self, rhs: Self) -> Self {
        self += rhs;
        self
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.input_tokens += rhs.input_tokens;
        self.output_tokens += rhs.output_tokens;
        self.cache_creation_input_tokens += rhs.cache_creation_input_tokens;
        self.cache_read_input_tokens += rhs.cache_read_input_tokens;
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
        let err = serde_json::from_value::<ContentBlock>(json!({"type": "image"})).unwrap_err();
        assert!(err.to_string().contains("unknown variant `image`"), "{err}");
        let err = serde_json::from_value::<ContentBlock>(json!({"type": "tool_use", "name": "x"})).unwrap_err();
        assert!(err.to_string().contains("missing field `id`"), "{err}");
    }

    #[test]
    fn stop_reasons_keep_unknown_values() {
        let r: StopReason = serde_json::from_value(json!("pause_turn")).unwrap();
        assert_eq!(r, StopReason::Other("pause_turn".into()));
        assert_eq!(serde_json::to_value(&r).unwrap(), json!("pause_turn"));
        assert_eq!(serde_json::from_value::<StopReason>(json!("tool_use")).unwrap(), StopReason::ToolUse);
    }
}
