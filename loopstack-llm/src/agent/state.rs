//! The state of an agent run, serialized at every step.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{AgentStatus, PendingCall, PendingTool, RaiseLimit};
use crate::delegate::{ToolCallResult, ToolDenial};
use crate::message::{Message, StopReason, ToolUse, Usage};

/// Tool calls one turn asked for, as a fingerprint, and how many turns in a row
/// asked for exactly these. Serialized as one number, `times << 32 | fingerprint`:
/// it is in every checkpoint of an agent run that uses tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "u64", into = "u64")]
pub struct Repeats {
    /// A hash of the calls' names and arguments (32-bit FNV-1a, stable across
    /// builds): compared with the next turn's only.
    pub fingerprint: u32,
    /// Turns in a row that asked for these calls.
    pub times: u32,
}

/// How the last batch of tool calls went ([`AgentState::tools_completed`]). Stored
/// as the pair `[all_completed, errors]`, as checkpoints written before it had
/// names keep it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(bool, usize)", into = "(bool, usize)")]
pub struct ToolsCompleted {
    /// Whether every call of the batch has its result (none waits for a child run).
    pub all_completed: bool,
    /// How many of the results are errors.
    pub errors: usize,
}

impl From<(bool, usize)> for ToolsCompleted {
    fn from((all_completed, errors): (bool, usize)) -> Self {
        Self { all_completed, errors }
    }
}

impl From<ToolsCompleted> for (bool, usize) {
    fn from(t: ToolsCompleted) -> Self {
        (t.all_completed, t.errors)
    }
}

/// The state of an agent run: small, because it is serialized at every step. The
/// messages themselves live in the run's documents.
///
/// Tests of the agent's routing build one from [`Default`] and set the fields a
/// guard reads, then ask which transition fires from a place ([`AgentPlace`](crate::AgentPlace)):
///
/// ```
/// use loopstack_core::{ToolRegistry, WorkflowExt};
/// use loopstack_llm::{Agent, AgentPlace, AgentState, ScriptedModel, StopReason};
///
/// let agent = Agent::new(ScriptedModel::new(), "scripted-1", ToolRegistry::new());
/// let mut state = AgentState::default();
/// state.last_stop = Some(StopReason::ToolUse);
/// state.last_tool_calls = 2;
/// let fires = agent.next_transition(AgentPlace::PromptExecuted, &state).unwrap();
/// // No tool of this agent starts a child run: one step runs the calls and goes
/// // back to the model.
/// assert_eq!(fires, Some("run_tool_calls"));
/// state.turns = 10; // the default limit of model turns
/// assert_eq!(agent.next_transition(AgentPlace::Ready, &state).unwrap(), Some("stop_at_limit"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AgentState {
    /// The user's prompt, until the run's creation saves it as the first message
    /// document (so no checkpoint holds it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prompt: String,
    /// The agent that takes the turns, once the run was handed to another one
    /// ([`Agent::handoff`](crate::Agent::handoff)); `None` for the agent the run started with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The agent the last turn asked to hand the conversation to, until the
    /// `hand_off` transition does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<String>,
    /// Model turns taken.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub turns: u32,
    /// Tokens used by all turns.
    #[serde(default, skip_serializing_if = "is_default")]
    pub usage: Usage,
    /// What all turns cost, by the agent's [`Prices`](crate::Prices).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cost: f64,
    /// What the last turn cost: the estimate of the next one's, so a cost budget stops
    /// the run before a turn that would pass it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub last_turn_cost: f64,
    /// What of the conversation is sent, once the agent compacted it (see
    /// [`ContextPolicy`](crate::ContextPolicy)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<crate::ContextWindow>,
    /// The estimated input tokens of the next turn, kept with a [`ContextPolicy`](crate::ContextPolicy).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub input_estimate: u64,
    /// The turn (the count of turns taken) at which the agent last compacted: at most
    /// once before each turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacted_turn: Option<u32>,
    /// Budgets raised by the `raise_limit` signal, over the agent's [`Limits`](crate::Limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raised: Option<RaiseLimit>,
    /// Tool calls run.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub tool_calls: u32,
    /// Why the last model turn stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_stop: Option<StopReason>,
    /// How many tool calls the last model turn asked for.
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub last_tool_calls: usize,
    /// Whether the last batch of tool calls completed, and its error count; cleared
    /// by the next model turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_completed: Option<ToolsCompleted>,
    /// The calls the last turn asked for, and how many turns in a row asked for them.
    #[serde(default, skip_serializing_if = "is_default")]
    pub repeats: Repeats,
    /// Calls of the last turn that wait for a person's decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_approval: Vec<PendingCall>,
    /// Calls of the last turn a person denied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied: Vec<ToolDenial>,
    /// Calls of the last batch whose child runs have not ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_tools: Vec<PendingTool>,
    /// At-most-once calls of the last batch whose outcome is unknown: a drive died
    /// after their intent was committed and before their results were; they wait
    /// at `awaiting_outcome` for a person to say what happened.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_outcome: Vec<PendingCall>,
    /// Results a person gave for calls whose outcome was unknown: the calls are
    /// not run, and the model reads these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answered: Vec<ToolCallResult>,
    /// The step the last batch was first tried at, once a call's unknown outcome made
    /// it run again later: its calls keep their first attempt's idempotency keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_step: Option<u64>,
    /// A person's answers to the input calls of the last batch asked for
    /// ([`ToolOutput::needs_input`](loopstack_core::ToolOutput::needs_input)): the
    /// calls run again with them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<crate::CallInput>,
    /// The results of the last batch while some are pending, in call order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_results: Vec<ToolCallResult>,
    /// The typed answer, once one fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Value>,
    /// Why the last typed answer did not fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_error: Option<String>,
    /// How many answers went back to the model.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub answer_retries: u32,
    /// Set when the run ends (or a chat run answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AgentStatus>,
    /// The final answer's text, set when the run ends (or a chat run answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The system prompt and model of a fork's turns ([`ForkEdits`](loopstack_core::ForkEdits)),
    /// in place of the agent's own: kept in the state, so a fork resumed after a
    /// restart keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_settings: Option<loopstack_core::ForkSettings>,
    /// The tools the client answers itself ([`AgentInput::client_tools`](crate::agent::AgentInput)),
    /// offered to the model besides the agent's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_tools: Vec<crate::agent::ClientTool>,
}

fn is_zero(n: &f64) -> bool {
    *n == 0.0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero_usize(n: &usize) -> bool {
    *n == 0
}

fn is_default<T: Default + PartialEq>(t: &T) -> bool {
    *t == T::default()
}

impl From<crate::agent::AgentInput> for AgentState {
    fn from(input: crate::agent::AgentInput) -> Self {
        Self { prompt: input.prompt, client_tools: input.client_tools, ..Self::default() }
    }
}

impl From<u64> for Repeats {
    fn from(packed: u64) -> Self {
        Self { fingerprint: packed as u32, times: (packed >> 32) as u32 }
    }
}

impl From<Repeats> for u64 {
    fn from(r: Repeats) -> Self {
        Self::from(r.times) << 32 | Self::from(r.fingerprint)
    }
}

impl Repeats {
    /// Takes in the tool calls of a model turn and returns how many turns in a
    /// row (this one included) asked for exactly these calls; zero for a turn
    /// without calls. For workflows of your own that stop a model that repeats
    /// itself, as the agent does with [`Limits::max_repeats`](crate::Limits::max_repeats).
    ///
    /// ```
    /// use loopstack_llm::{Message, Repeats, ToolUse, ContentBlock, Role};
    ///
    /// let turn = |id: &str| Message {
    ///     role: Role::Assistant,
    ///     content: vec![ContentBlock::ToolUse(ToolUse::new(id, "get_weather", serde_json::json!({"location": "Oslo"})))],
    /// };
    /// let mut repeats = Repeats::default();
    /// assert_eq!(repeats.observe(&turn("c1")), 1);
    /// assert_eq!(repeats.observe(&turn("c2")), 2, "the ids differ, the calls do not");
    /// assert_eq!(repeats.observe(&Message::assistant("Sunny.")), 0);
    /// ```
    pub fn observe(&mut self, message: &Message) -> u32 {
        *self = if message.tool_uses().next().is_none() {
            Self::default()
        } else {
            let fingerprint = fingerprint(message.tool_uses());
            let times =
                if self.fingerprint == fingerprint && self.times > 0 { self.times.saturating_add(1) } else { 1 };
            Self { fingerprint, times }
        };
        self.times
    }
}

/// A fingerprint of a turn's calls (names and arguments, in order): FNV-1a over
/// their JSON, stable across builds and restarts.
fn fingerprint<'a>(calls: impl Iterator<Item = &'a ToolUse>) -> u32 {
    let mut hash = loopstack_core::fnv::Fnv1a::<u32>::default();
    let mut feed = |bytes: &[u8]| hash.bytes(bytes);
    for call in calls {
        feed(call.name.as_bytes());
        feed(&[0]);
        loopstack_core::fnv::feed_json(&call.input, &mut feed);
        feed(&[0xff]);
    }
    hash.finish()
}
