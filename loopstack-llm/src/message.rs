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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
