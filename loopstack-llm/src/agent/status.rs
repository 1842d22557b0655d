//! How an agent run ended, or what it waits for.

use loopstack_core::RunId;
use serde::{Deserialize, Serialize};

use super::answer::looks_like_tool_call;
use super::{Limit, PendingCall};
use crate::message::StopReason;

/// How an agent run ended, or what it waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentStatus {
    /// The model finished its answer (end turn or stop sequence).
    Completed,
    /// The model ran out of output tokens; the answer may be cut short.
    MaxTokens,
    /// The model stopped for another reason, kept as the provider gave it.
    Stopped(StopReason),
    /// The model ended its turn with no text and no tool call.
    EmptyAnswer,
    /// The final answer looks like a tool call written as text (`{"name": ...,
    /// "arguments": ...}`): a local model whose tool calls the provider did not
    /// parse (see `OpenAi::text_tool_calls`).
    UnparsedToolCall,
    /// A limit of [`Limits`](crate::Limits) was reached before the model answered:
    /// the run is [stopped](loopstack_core::RunStatus::Stopped) before the step the
    /// limit forbids, and can be retried after raising it.
    LimitReached(Limit),
    /// A turn, token or cost budget was spent and the run waits for it to be raised
    /// ([`Agent::raise`](crate::Agent::raise)), as
    /// [`Limits::pause_at_limit`](crate::Limits::pause_at_limit) asks.
    BudgetSpent(Limit),
    /// The model asked for exactly the same tool calls as the turn before more than
    /// [`Limits::max_repeats`](crate::Limits::max_repeats) times in a row (so `max_repeats + 2` turns asked for
    /// them; the last one's calls were not run). The run is
    /// [stopped](loopstack_core::RunStatus::Stopped) with those calls unanswered.
    RepeatedToolCalls {
        /// The tools of the repeated calls.
        tools: Vec<String>,
        /// How many turns in a row asked for them.
        times: u32,
    },
    /// The typed answer still did not fit after the set retries.
    InvalidAnswer {
        /// Why the last answer did not fit.
        error: String,
        /// How many times it went back to the model.
        retries: u32,
    },
    /// The run waits for a person to approve or deny these calls
    /// ([`Agent::decide`](crate::Agent::decide)).
    AwaitingApproval {
        /// The calls that wait for a decision.
        calls: Vec<PendingCall>,
    },
    /// A drive died during these at-most-once calls
    /// ([`Effect::AtMostOnce`](loopstack_core::Effect::AtMostOnce)): their intent was
    /// committed, their results were not, so they were not run again. The run waits
    /// for a person to say what happened ([`Agent::decide`](crate::Agent::decide)
    /// with each call's result, or an approval to run it again).
    OutcomeUnknown {
        /// The calls whose outcome is unknown.
        calls: Vec<PendingCall>,
    },
    /// The chat run answered and waits for the user's next message ([`Agent::say`](crate::Agent::say)).
    AwaitingUser,
    /// The signal (a decision, a user message) was stored, but another driver holds
    /// the run: that driver delivers it. The reply's text is the run's last answer,
    /// not one to this signal; read the run again later.
    Queued {
        /// The signal's id in the run's inbox.
        signal: u64,
    },
    /// Calls of workflow tools whose child runs wait (for a person, a timer): the
    /// run goes on when they end.
    AwaitingTools {
        /// The calls without a result yet.
        calls: Vec<PendingTool>,
    },
}

/// A tool call whose result comes when its child run ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTool {
    /// The call's id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The child run the call runs as.
    pub child: RunId,
}

impl AgentStatus {
    /// Whether the model gave a complete answer.
    pub fn is_completed(&self) -> bool {
        *self == Self::Completed
    }

    /// Why a run that ended with this status stopped, in words: the error of a run
    /// an agent stopped ([`RunStatus::Stopped`](loopstack_core::RunStatus::Stopped)).
    ///
    /// ```
    /// use loopstack_llm::{AgentStatus, Limit};
    ///
    /// let status = AgentStatus::LimitReached(Limit::Turns { max: 3 });
    /// assert_eq!(status.stop_reason(), "the run reached the budget of 3 model turns");
    /// ```
    pub fn stop_reason(&self) -> String {
        match self {
            Self::LimitReached(limit) => format!("the run reached {limit}"),
            Self::RepeatedToolCalls { tools, times } => {
                format!("the model asked for the same calls ({}) {times} turns in a row", tools.join(", "))
            }
            Self::InvalidAnswer { error, retries } => {
                format!("the answer still did not fit its type after {retries} retries: {error}")
            }
            other => format!("the run stopped: {other:?}"),
        }
    }

    /// How a final turn (one without tool calls) that stopped for `stop` with
    /// `text` ends a run: [`Completed`](Self::Completed), or
    /// [`EmptyAnswer`](Self::EmptyAnswer), [`UnparsedToolCall`](Self::UnparsedToolCall),
    /// [`MaxTokens`](Self::MaxTokens) or [`Stopped`](Self::Stopped). For workflows of
    /// your own that end like the agent does.
    ///
    /// ```
    /// use loopstack_llm::{AgentStatus, StopReason};
    ///
    /// assert_eq!(AgentStatus::of_answer(&StopReason::EndTurn, "Sunny."), AgentStatus::Completed);
    /// assert_eq!(AgentStatus::of_answer(&StopReason::EndTurn, " "), AgentStatus::EmptyAnswer);
    /// let text_call = r#"{"name": "get_weather", "arguments": {"location": "Oslo"}}"#;
    /// assert_eq!(AgentStatus::of_answer(&StopReason::EndTurn, text_call), AgentStatus::UnparsedToolCall);
    /// assert_eq!(AgentStatus::of_answer(&StopReason::MaxTokens, "It is sun"), AgentStatus::MaxTokens);
    /// ```
    pub fn of_answer(stop: &StopReason, text: &str) -> Self {
        match stop {
            StopReason::EndTurn | StopReason::StopSequence if text.trim().is_empty() => Self::EmptyAnswer,
            StopReason::EndTurn | StopReason::StopSequence if looks_like_tool_call(text) => Self::UnparsedToolCall,
            StopReason::EndTurn | StopReason::StopSequence => Self::Completed,
            StopReason::MaxTokens => Self::MaxTokens,
            other => Self::Stopped(other.clone()),
        }
    }
}
