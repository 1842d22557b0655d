//! Why a model stopped, and the tokens it used.

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

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
    /// Input (prompt) tokens not read from or written to the provider's prompt
    /// cache; those are counted apart, below, for every provider.
    pub input_tokens: u64,
    /// Output (completion) tokens, reasoning tokens included.
    pub output_tokens: u64,
    /// Input tokens written to the provider's prompt cache (left out of the JSON
    /// when zero: usage is stored with every model turn and checkpoint).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the provider's prompt cache (left out when zero).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_input_tokens: u64,
    /// Of the output tokens, those the model spent reasoning before it answered,
    /// where the provider counts them apart (OpenAI's reasoning models, Gemini's
    /// thoughts; left out when zero). They are priced as output: a cost is computed
    /// from `output_tokens`, which includes them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_output_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Usage with input and output tokens only.
    pub const fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self {
            input_tokens,
            output_tokens,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
            reasoning_output_tokens: 0,
        }
    }

    /// Input plus output tokens, at most `u64::MAX` (cached input not counted).
    pub const fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// Every token: input, cached input (read and written) and output, at most
    /// `u64::MAX`; what a token budget counts.
    pub const fn all_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read_input_tokens)
            .saturating_add(self.cache_creation_input_tokens)
            .saturating_add(self.output_tokens)
    }
}

/// Sums each count, saturating at `u64::MAX`: a provider or script reporting absurd
/// counts never panics (debug builds) or wraps around (release builds).
impl Add for Usage {
    type Output = Self;
    fn add(mut self, rhs: Self) -> Self {
        self += rhs;
        self
    }
}

/// Adds each count, saturating at `u64::MAX`, as [`Add`] does.
impl AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.input_tokens = self.input_tokens.saturating_add(rhs.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(rhs.output_tokens);
        self.cache_creation_input_tokens =
            self.cache_creation_input_tokens.saturating_add(rhs.cache_creation_input_tokens);
        self.cache_read_input_tokens = self.cache_read_input_tokens.saturating_add(rhs.cache_read_input_tokens);
        self.reasoning_output_tokens = self.reasoning_output_tokens.saturating_add(rhs.reasoning_output_tokens);
    }
}

/// `n` as a span field: tracing-opentelemetry exports `u64` fields as strings and
/// `i64` ones as integers, which is what trace backends sum and chart.
#[doc(hidden)]
pub fn as_i64<N: TryInto<i64>>(n: N) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_saturates() {
        let max = Usage::new(u64::MAX, u64::MAX);
        assert_eq!(max + Usage::new(1, 2), max);
        assert_eq!(max.total(), u64::MAX);
    }

    #[test]
    fn stop_reasons_keep_unknown_values() {
        let r: StopReason = serde_json::from_value(json!("pause_turn")).unwrap();
        assert_eq!(r, StopReason::Other("pause_turn".into()));
        assert_eq!(serde_json::to_value(&r).unwrap(), json!("pause_turn"));
        assert_eq!(serde_json::from_value::<StopReason>(json!("tool_use")).unwrap(), StopReason::ToolUse);
    }
}
