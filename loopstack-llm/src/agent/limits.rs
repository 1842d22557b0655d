//! What an agent run may spend, and what its tokens cost.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::message::Usage;

/// The default budget of model turns per run.
pub const DEFAULT_MAX_TURNS: u32 = 10;
/// The default number of times in a row a turn may repeat the tool calls of the
/// turn before it exactly.
pub const DEFAULT_MAX_REPEATS: u32 = 2;

/// What one agent run may spend. Exceeding a limit stops the run
/// ([`RunStatus::Stopped`](loopstack_core::RunStatus::Stopped)) with
/// [`AgentStatus::LimitReached`](crate::AgentStatus::LimitReached), never with a panic
/// or a silent stop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Limits {
    /// Model turns (default 10).
    pub max_turns: u32,
    /// Tokens of all turns (input, cached input and output); checked before each turn.
    pub max_total_tokens: Option<u64>,
    /// Cost of all turns, in the currency of the [`Prices`]; checked before each turn.
    pub max_cost: Option<f64>,
    /// Tool calls run; a turn whose calls would pass it ends the run instead.
    pub max_tool_calls: Option<u32>,
    /// How many times in a row a turn may ask for exactly the tool calls (names and
    /// arguments) of the turn before it (default 2); the next repeat ends the run
    /// with [`AgentStatus::RepeatedToolCalls`](crate::AgentStatus::RepeatedToolCalls).
    /// A small model without a system prompt can otherwise call one tool forever.
    pub max_repeats: u32,
    /// Whether a spent turn, token or cost budget makes the run wait instead of
    /// ending it (see [`Limits::pause_at_limit`]); off by default.
    #[serde(default)]
    pub pause: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_turns: DEFAULT_MAX_TURNS,
            max_total_tokens: None,
            max_cost: None,
            max_tool_calls: None,
            max_repeats: DEFAULT_MAX_REPEATS,
            pause: false,
        }
    }
}

impl Limits {
    /// The defaults: 10 turns, 2 repeats, nothing else limited.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the budget of model turns.
    #[must_use]
    pub fn max_turns(mut self, max: u32) -> Self {
        self.max_turns = max;
        self
    }

    /// Sets the budget of tokens (input, cached input and output, all turns).
    #[must_use]
    pub fn max_total_tokens(mut self, max: u64) -> Self {
        self.max_total_tokens = Some(max);
        self
    }

    /// Sets the budget of cost, priced by the agent's [`Prices`]; turns of a model
    /// without a price cost nothing, so set a price for every model the agent uses.
    #[must_use]
    pub fn max_cost(mut self, max: f64) -> Self {
        self.max_cost = Some(max);
        self
    }

    /// Sets the budget of tool calls.
    #[must_use]
    pub fn max_tool_calls(mut self, max: u32) -> Self {
        self.max_tool_calls = Some(max);
        self
    }

    /// Sets how many times in a row a turn may repeat the previous turn's calls.
    #[must_use]
    pub fn max_repeats(mut self, max: u32) -> Self {
        self.max_repeats = max;
        self
    }

    /// Makes a spent turn, token or cost budget pause the run instead of ending it:
    /// the run waits, durably and keeping everything, at the agent's place
    /// `budget_spent` ([`AgentStatus::BudgetSpent`](crate::AgentStatus::BudgetSpent)),
    /// until the signal `raise_limit` ([`Agent::raise`](crate::Agent::raise),
    /// a [`RaiseLimit`]) raises a limit, when it takes the turn it stopped before, or
    /// `end_at_limit` ends it as a spent budget ends a run that does not pause.
    #[must_use]
    pub fn pause_at_limit(mut self, pause: bool) -> Self {
        self.pause = pause;
        self
    }
}

/// The payload of the agent's `raise_limit` signal: new values for the budgets a
/// paused run was stopped by (see [`Limits::pause_at_limit`]). A field left out keeps
/// the budget the run has; the raised budgets are kept with the run, so they hold
/// after a restart and for the rest of the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct RaiseLimit {
    /// The new budget of model turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// The new budget of tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_total_tokens: Option<u64>,
    /// The new budget of cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
}

impl RaiseLimit {
    /// Raises nothing yet; set the budgets with the builder methods.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the new budget of model turns.
    #[must_use]
    pub fn max_turns(mut self, max: u32) -> Self {
        self.max_turns = Some(max);
        self
    }

    /// Sets the new budget of tokens.
    #[must_use]
    pub fn max_total_tokens(mut self, max: u64) -> Self {
        self.max_total_tokens = Some(max);
        self
    }

    /// Sets the new budget of cost.
    #[must_use]
    pub fn max_cost(mut self, max: f64) -> Self {
        self.max_cost = Some(max);
        self
    }

    /// `self`'s budgets where set, else `earlier`'s.
    pub(crate) fn over(self, earlier: Option<Self>) -> Self {
        let earlier = earlier.unwrap_or_default();
        Self {
            max_turns: self.max_turns.or(earlier.max_turns),
            max_total_tokens: self.max_total_tokens.or(earlier.max_total_tokens),
            max_cost: self.max_cost.or(earlier.max_cost),
        }
    }
}

/// The limit a run reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "limit", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Limit {
    /// The budget of model turns.
    Turns {
        /// The budget.
        max: u32,
    },
    /// The budget of tokens.
    TotalTokens {
        /// The budget.
        max: u64,
        /// The tokens used.
        used: u64,
    },
    /// The budget of cost.
    Cost {
        /// The budget.
        max: f64,
        /// What the run spent.
        spent: f64,
    },
    /// The budget of tool calls.
    ToolCalls {
        /// The budget.
        max: u32,
        /// Calls run so far.
        used: u32,
        /// Calls the last turn asked for, which were not run.
        asked: u32,
    },
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Turns { max } => write!(f, "the budget of {max} model turns"),
            Self::TotalTokens { max, used } => write!(f, "the budget of {max} tokens ({used} used)"),
            Self::Cost { max, spent } => write!(f, "the cost budget of {max} ({spent:.6} spent)"),
            Self::ToolCalls { max, used, asked } => {
                write!(f, "the budget of {max} tool calls ({used} run, {asked} more asked for)")
            }
        }
    }
}

/// What a model's tokens cost, per million tokens, in the currency of your choice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Price {
    /// Per million input tokens (not read from or written to a cache).
    pub input: f64,
    /// Per million output tokens.
    pub output: f64,
    /// Per million input tokens read from the prompt cache.
    pub cache_read: f64,
    /// Per million input tokens written to the prompt cache.
    pub cache_write: f64,
}

impl Price {
    /// A price per million input and output tokens; cached input is priced as
    /// input until set with [`Price::cached`].
    pub fn per_million(input: f64, output: f64) -> Self {
        Self { input, output, cache_read: input, cache_write: input }
    }

    /// Sets the prices of cached input tokens, read and written.
    #[must_use]
    pub fn cached(mut self, read: f64, write: f64) -> Self {
        self.cache_read = read;
        self.cache_write = write;
        self
    }

    /// What `usage` costs: each count of [`Usage`] at its price (the providers'
    /// counts are made to not overlap: cached input is not in `input_tokens`).
    pub fn cost(&self, usage: &Usage) -> f64 {
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per(usage.input_tokens, self.input)
            + per(usage.output_tokens, self.output)
            + per(usage.cache_read_input_tokens, self.cache_read)
            + per(usage.cache_creation_input_tokens, self.cache_write)
    }
}

/// Prices by model name: the agent adds the cost of each turn to its run.
///
/// A model is priced by its exact name, else by the longest name that is a
/// prefix of it (`gpt-4o-mini` prices `gpt-4o-mini-2024-07-18`); a model with no
/// price costs nothing.
///
/// ```
/// use loopstack_llm::{Price, Prices, Usage};
///
/// let prices = Prices::new().model("gpt-4o-mini", Price::per_million(0.15, 0.60));
/// let cost = prices.cost("gpt-4o-mini-2024-07-18", &Usage::new(1_000_000, 500_000)).unwrap();
/// assert!((cost - 0.45).abs() < 1e-9);
/// assert_eq!(prices.cost("llama3", &Usage::new(10, 10)), None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Prices {
    by_model: BTreeMap<String, Price>,
}

impl Prices {
    /// No prices.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the price of `model`.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>, price: Price) -> Self {
        self.by_model.insert(model.into(), price);
        self
    }

    /// The price of `model`, by exact name or longest prefix.
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.by_model.get(model).or_else(|| {
            self.by_model
                .iter()
                .filter(|(name, _)| model.starts_with(name.as_str()))
                .max_by_key(|(n, _)| n.len())
                .map(|(_, p)| p)
        })
    }

    /// What `usage` of `model` costs, if it has a price.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.price(model).map(|p| p.cost(usage))
    }

    /// Whether no model has a price.
    pub fn is_empty(&self) -> bool {
        self.by_model.is_empty()
    }
}
