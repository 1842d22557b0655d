//! The ready-made agent loop.

use std::sync::Arc;

use loopstack_core::schemars::{self, JsonSchema};
use loopstack_core::{RunContext, RunError, RunId, RunOutcome, RunReport, Runtime, ToolRegistry};
use loopstack_macros::workflow;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::delegate::{LlmDelegateToolCalls, ToolCallResult, ToolDenial};
use crate::dispatch::Secrets;
use crate::error::AgentError;
use crate::generate::{GenerateOptions, LlmGenerateText, Models, TurnExtras, save_message};
use crate::message::{Message, StopReason, ToolResult, ToolUse, Usage};
use crate::model::ChatModel;
use loopstack_core::ChildEnded;

mod answer;
mod limits;

pub use answer::{Answer, DEFAULT_ANSWER_RETRIES, RESPOND_TOOL, TypedAgent};
use answer::{AnswerFormat, feedback, looks_like_tool_call};
pub use limits::{DEFAULT_MAX_REPEATS, DEFAULT_MAX_TURNS, Limit, Limits, Price, Prices};

/// A tool-calling agent: model turn, tool calls, tool results, model turn ... until
/// a model turn has no tool calls.
///
/// A turn with tool calls is a tool-use turn whatever its stop reason (`end_turn`,
/// `max_tokens` ...): its calls are run and answered, so a conversation never ends in
/// unanswered calls.
///
/// It is itself a `#[workflow]` (`Agent::definition().mermaid()` draws it):
///
/// ```text
/// start --setup--> ready --llm_turn--> prompt_executed
/// ready --stop_at_limit [over_budget] (10)--> end
/// prompt_executed --stop_repeating [repeats_itself] (40)--> end
/// prompt_executed --stop_at_tool_limit [over_tool_limit] (35)--> end
/// prompt_executed --accept_answer [has_valid_answer] (30)--> end
/// prompt_executed --reject_answer [can_retry_answer] (25)--> ready
/// prompt_executed --give_up_answer [answer_rejected] (24)--> end
/// prompt_executed --request_approval [needs_approval] (20)--> awaiting_approval
/// awaiting_approval --decide_tools (wait: ToolDecisions)--> prompt_executed
/// prompt_executed --execute_tool_calls [has_tool_calls] (10)--> awaiting_tools
/// awaiting_tools --tools_complete [all_tools_complete]--> ready
/// awaiting_tools --tool_result (wait: ChildEnded)--> awaiting_tools
/// prompt_executed --truncated [hit_max_tokens] (5)--> end
/// prompt_executed --chat_reply [is_chat] (3)--> awaiting_user
/// awaiting_user --user_message (wait: UserMessage)--> ready
/// awaiting_user --end_chat (wait)--> end
/// prompt_executed --respond--> end
/// ```
///
/// - **Limits** ([`Limits`]): model turns (default 10), total tokens, cost (priced
///   by [`Prices`]) and tool calls; a model that asks for the same calls again and
///   again is stopped once it repeats them more than [`Limits::max_repeats`] times.
///   Reaching one ends the run with a typed [`AgentStatus`]. The limits count the
///   whole run: in a chat, every exchange.
/// - **Approval**: calls of tools marked `#[tool(approve)]` (or
///   [`ToolRegistry::require_approval`]) wait for [`Agent::decide`] before they run,
///   durably; a denied call becomes an error result the model reads.
/// - **Chat**: with [`Agent::chat`] the run waits for the user's next message
///   ([`Agent::say`]) after each answer instead of ending.
/// - **Typed answers**: [`Agent::answer`] gives a [`TypedAgent`] whose answer
///   deserializes into a Rust type.
/// - **Events**: with a subscriber ([`Runtime::subscribe`]) model replies stream as
///   [`EventKind::TextDelta`](loopstack_core::EventKind::TextDelta)s, and tool calls
///   and usage are reported as they happen.
///
/// ```
/// use loopstack_core::{Runtime, ToolRegistry};
/// use loopstack_llm::{Agent, AgentStatus, ScriptedModel};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let model = ScriptedModel::new().text("Hello!");
/// let agent = Agent::new(model.clone(), "scripted-1", ToolRegistry::new());
/// let reply = agent.ask(&Runtime::new(), "Say hello.").await?;
/// assert_eq!(reply.text, "Hello!");
/// assert_eq!(reply.status, AgentStatus::Completed);
/// assert_eq!(reply.turns, 1);
/// # Ok::<(), loopstack_llm::AskError>(()) }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Agent {
    generate: LlmGenerateText,
    delegate: LlmDelegateToolCalls,
    options: GenerateOptions,
    limits: Limits,
    prices: Arc<Prices>,
    chat: bool,
    answer: Option<Arc<AnswerFormat>>,
    /// Whether the model answers in structured output (else through `respond`).
    structured: bool,
    /// Whether a tool needs the run's state (a workflow tool's input mapping).
    tools_need_state: bool,
    /// Redacted from the results of failed workflow tool calls.
    secrets: Secrets,
}

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
    /// A limit of [`Limits`] was reached before the model answered.
    LimitReached(Limit),
    /// The model asked for exactly the same tool calls as the turn before more than
    /// [`Limits::max_repeats`] times in a row (so `max_repeats + 2` turns asked for
    /// them; the last one's calls were not run).
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
    /// ([`Agent::decide`]).
    AwaitingApproval {
        /// The calls that wait for a decision.
        calls: Vec<PendingCall>,
    },
    /// The chat run answered and waits for the user's next message ([`Agent::say`]).
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

/// A tool call that waits for a person's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PendingCall {
    /// The call's id, to name in a [`ToolDecision`].
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The arguments the model gave.
    pub arguments: Value,
}

/// A person's decision on one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ToolDecision {
    /// The call's id ([`PendingCall::call_id`]).
    pub call_id: String,
    /// Whether the call may run.
    pub approved: bool,
    /// Why; a denied call's reason is what the model reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ToolDecision {
    /// Approves call `call_id`.
    pub fn approve(call_id: impl Into<String>) -> Self {
        Self { call_id: call_id.into(), approved: true, reason: None }
    }

    /// Denies call `call_id`, telling the model why.
    pub fn deny(call_id: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { call_id: call_id.into(), approved: false, reason: Some(reason.into()) }
    }
}

/// The payload of the agent's `decide_tools` signal: decisions on some or all of
/// the calls that wait. The run goes on once every call has one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ToolDecisions {
    /// The decisions, one per call.
    pub decisions: Vec<ToolDecision>,
}

impl ToolDecisions {
    /// These decisions.
    pub fn new(decisions: impl IntoIterator<Item = ToolDecision>) -> Self {
        Self { decisions: decisions.into_iter().collect() }
    }

    /// Approves every call in `calls`.
    pub fn approve_all<'a>(calls: impl IntoIterator<Item = &'a PendingCall>) -> Self {
        Self::new(calls.into_iter().map(|c| ToolDecision::approve(&c.call_id)))
    }

    /// Denies every call in `calls` for one reason.
    pub fn deny_all<'a>(calls: impl IntoIterator<Item = &'a PendingCall>, reason: &str) -> Self {
        Self::new(calls.into_iter().map(|c| ToolDecision::deny(&c.call_id, reason)))
    }
}

/// The payload of the agent's `user_message` signal: the user's next message in a
/// chat run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UserMessage {
    /// What the user says.
    pub text: String,
}

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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AgentState {
    /// The user's prompt, until `setup` saves it as the first message document.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prompt: String,
    /// Model turns taken.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub turns: u32,
    /// Tokens used by all turns.
    #[serde(default, skip_serializing_if = "is_default")]
    pub usage: Usage,
    /// What all turns cost, by the agent's [`Prices`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cost: f64,
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
}

fn is_zero(n: &f64) -> bool {
    *n == 0.0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero_usize(n: &usize) -> bool {
    *n == 0
}

fn is_default<T: Default + PartialEq>(t: &T) -> bool {
    *t == T::default()
}

impl From<String> for AgentState {
    fn from(prompt: String) -> Self {
        Self { prompt, ..Self::default() }
    }
}

/// What an agent run answered, or where it waits.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AgentReply {
    /// The run, whose documents hold the whole conversation.
    pub run_id: RunId,
    /// The final answer's text (empty while the run waits for approval).
    pub text: String,
    /// How the run ended, or what it waits for.
    pub status: AgentStatus,
    /// Tokens used by all turns.
    pub usage: Usage,
    /// What all turns cost, by the agent's [`Prices`].
    pub cost: f64,
    /// Model turns taken.
    pub turns: u32,
    /// Tool calls run.
    pub tool_calls: u32,
    /// The typed answer's JSON ([`TypedAgent`]).
    pub answer: Option<Value>,
    /// How the last answer ended when `status` cannot say it: a chat run waits
    /// for the user ([`AgentStatus::AwaitingUser`]) after an answer cut at the token
    /// limit ([`AgentStatus::MaxTokens`]), an empty one, a tool call written as text,
    /// or a stop of the provider's. `None` after a plain answer, and for every other
    /// status (which says it itself).
    pub answer_status: Option<AgentStatus>,
}

/// Why [`Agent::ask`] (and the other drives of an agent run) failed. The run's
/// documents keep the conversation up to the failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// A step of the run failed: the model's provider, a message document ...
    #[error("agent run {run_id} failed in `{transition}`: {source}")]
    Step {
        /// The run.
        run_id: RunId,
        /// The transition that failed.
        transition: &'static str,
        /// What went wrong.
        #[source]
        source: AgentError,
    },
    /// The runtime could not drive the run: its store, a cancellation, the step
    /// limit, a signal it refused ...
    #[error(transparent)]
    Run(RunError),
    /// The typed answer did not fit after the set retries.
    #[error("agent run {run_id}: the answer does not fit the type after {retries} retries: {error}")]
    InvalidAnswer {
        /// The run.
        run_id: RunId,
        /// Why the last answer did not fit.
        error: String,
        /// How many times it went back to the model.
        retries: u32,
    },
    /// A typed agent's run ended or waits without an answer (a limit, approval ...).
    #[error("agent run {run_id} has no answer: {status:?}")]
    NoAnswer {
        /// The run.
        run_id: RunId,
        /// How it ended or what it waits for.
        status: AgentStatus,
    },
}

impl AskError {
    /// The run that failed, when it was created.
    pub fn run_id(&self) -> Option<RunId> {
        match self {
            Self::Step { run_id, .. } | Self::InvalidAnswer { run_id, .. } | Self::NoAnswer { run_id, .. } => {
                Some(*run_id)
            }
            Self::Run(e) => e.run_id(),
        }
    }

    /// The step's error, when a step failed.
    pub fn agent_error(&self) -> Option<&AgentError> {
        match self {
            Self::Step { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<RunError> for AskError {
    fn from(err: RunError) -> Self {
        match err {
            RunError::Transition { run_id, transition, source, .. } if source.is::<AgentError>() => {
                let source = *source.downcast::<AgentError>().expect("checked with is");
                Self::Step { run_id, transition, source }
            }
            other => Self::Run(other),
        }
    }
}

impl Agent {
    /// An agent using `model` (registered under its provider name) with model name
    /// `model_name`, offering every tool of `tools`.
    pub fn new(model: impl ChatModel, model_name: impl Into<String>, tools: ToolRegistry) -> Self {
        let provider = model.provider();
        let options = GenerateOptions::new(provider, model_name).tools(tools.names());
        Self::with_models(Models::new().with(model), options, tools)
    }

    /// An agent over several models; `options` names the provider, model and tools.
    pub fn with_models(models: Models, options: GenerateOptions, tools: ToolRegistry) -> Self {
        let structured = models.get(&options.provider).is_ok_and(|m| m.structured_output());
        let tools_need_state = tools.specs().any(|s| s.options.needs_run);
        Self {
            generate: LlmGenerateText::new(models, tools.clone()),
            delegate: LlmDelegateToolCalls::new(tools),
            options,
            limits: Limits::default(),
            prices: Arc::new(Prices::new()),
            chat: false,
            answer: None,
            structured,
            tools_need_state,
            secrets: Secrets::new(),
        }
    }

    /// Sets the system prompt.
    #[must_use]
    pub fn system(mut self, system: impl Into<String>) -> Self {
        self.options.system = Some(system.into());
        self
    }

    /// Sets the budget of model turns (default 10); see [`Agent::limits`].
    #[must_use]
    pub fn max_turns(mut self, max_turns: u32) -> Self {
        self.limits.max_turns = max_turns;
        self
    }

    /// Sets the run's limits: turns, tokens, cost, tool calls, repeats.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the prices the run's cost is computed by.
    #[must_use]
    pub fn prices(mut self, prices: Prices) -> Self {
        self.prices = Arc::new(prices);
        self
    }

    /// Makes the run a chat session: after each answer it waits for the user's next
    /// message ([`Agent::say`]) instead of ending, until [`Agent::close_chat`].
    #[must_use]
    pub fn chat(mut self, chat: bool) -> Self {
        self.chat = chat;
        self
    }

    /// Names the conversation the agent reads and adds to, so two agents in one
    /// run keep one each (see [`GenerateOptions::conversation`]).
    #[must_use]
    pub fn conversation(mut self, name: impl Into<String>) -> Self {
        self.options.conversation = Some(name.into());
        self
    }

    /// Sets the output token limit per turn.
    #[must_use]
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.options.max_tokens = Some(max_tokens);
        self
    }

    /// Sets the temperature.
    #[must_use]
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.options.temperature = Some(temperature);
        self
    }

    /// Sets the secrets (API keys, tokens) redacted from the results of failed
    /// workflow tool calls.
    #[must_use]
    pub fn secrets(mut self, secrets: Secrets) -> Self {
        self.secrets = secrets;
        self
    }

    /// Replaces the tool-call step, to set its timeout or concurrency.
    #[must_use]
    pub fn delegate(mut self, delegate: LlmDelegateToolCalls) -> Self {
        self.delegate = delegate;
        self
    }

    /// An agent whose final answer must deserialize into `T`: see [`TypedAgent`].
    ///
    /// ```
    /// use loopstack_core::{Runtime, ToolRegistry};
    /// use loopstack_llm::{Agent, ScriptedModel};
    ///
    /// #[derive(serde::Deserialize, loopstack_core::schemars::JsonSchema)]
    /// # #[schemars(crate = "loopstack_core::schemars")]
    /// struct City { name: String, population: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// // The scripted model has no structured output: it answers through `respond`.
    /// let model = ScriptedModel::new().tool_call("respond", serde_json::json!({"name": "Oslo", "population": 717710}));
    /// let agent = Agent::new(model, "scripted-1", ToolRegistry::new()).answer::<City>();
    /// let city = agent.ask(&Runtime::new(), "The capital of Norway?").await?.value;
    /// assert_eq!((city.name.as_str(), city.population), ("Oslo", 717710));
    /// # Ok::<(), loopstack_llm::AskError>(()) }).unwrap();
    /// ```
    pub fn answer<T: JsonSchema + DeserializeOwned>(self) -> TypedAgent<T> {
        TypedAgent::new(self, DEFAULT_ANSWER_RETRIES)
    }

    /// The options of each model turn.
    pub fn options(&self) -> &GenerateOptions {
        &self.options
    }

    /// Runs the agent on `prompt` and returns its answer, or where it waits (for
    /// approval, or in a chat for the user). The run and its documents stay in the
    /// runtime's store.
    pub async fn ask(&self, runtime: &Runtime, prompt: impl Into<String>) -> Result<AgentReply, AskError> {
        Ok(self.reply_of(runtime.start(self, prompt.into()).await?))
    }

    /// Decides on calls a run waits to have approved, and drives it on: approved
    /// calls run, denied ones answer `denied by the user: <reason>`. Decisions for
    /// some of the calls keep the run waiting for the rest; a decision on a call
    /// that does not wait is refused and changes nothing.
    pub async fn decide(
        &self,
        runtime: &Runtime,
        run_id: RunId,
        decisions: ToolDecisions,
    ) -> Result<AgentReply, AskError> {
        Ok(self.reply_of(runtime.signal(self, run_id, AgentSignal::DecideTools(decisions)).await?))
    }

    /// Sends the user's next message to a chat run that waits for it, and drives it
    /// to its next answer.
    pub async fn say(&self, runtime: &Runtime, run_id: RunId, text: impl Into<String>) -> Result<AgentReply, AskError> {
        let message = UserMessage { text: text.into() };
        Ok(self.reply_of(runtime.signal(self, run_id, AgentSignal::UserMessage(message)).await?))
    }

    /// Ends a chat run that waits for the user (its `end_chat` signal).
    pub async fn close_chat(&self, runtime: &Runtime, run_id: RunId) -> Result<AgentReply, AskError> {
        Ok(self.reply_of(runtime.signal(self, run_id, AgentSignal::EndChat).await?))
    }

    /// Continues a run from its last checkpoint (after a crash), as
    /// [`Runtime::resume`] does.
    pub async fn resume(&self, runtime: &Runtime, run_id: RunId) -> Result<AgentReply, AskError> {
        Ok(self.reply_of(runtime.resume(self, run_id).await?))
    }

    /// What a drive's report says, as a reply.
    pub fn reply_of(&self, report: RunReport<AgentState>) -> AgentReply {
        let RunReport { run_id, outcome, state, .. } = report;
        let mut answer_status = None;
        let status = match outcome {
            RunOutcome::Waiting { place, .. } if place == AgentPlace::AwaitingApproval.as_str() => {
                AgentStatus::AwaitingApproval { calls: state.pending_approval }
            }
            RunOutcome::Waiting { place, .. } if place == AgentPlace::AwaitingUser.as_str() => {
                answer_status = state.status.filter(|s| *s != AgentStatus::Completed);
                AgentStatus::AwaitingUser
            }
            RunOutcome::Waiting { place, .. } if place == AgentPlace::AwaitingTools.as_str() => {
                AgentStatus::AwaitingTools { calls: state.pending_tools }
            }
            RunOutcome::Queued { signal } => AgentStatus::Queued { signal },
            _ => state.status.unwrap_or(AgentStatus::Completed),
        };
        AgentReply {
            run_id,
            text: state.output.unwrap_or_default(),
            status,
            usage: state.usage,
            cost: state.cost,
            turns: state.turns,
            tool_calls: state.tool_calls,
            answer: state.answer,
            answer_status,
        }
    }

    fn extras(&self) -> Option<TurnExtras> {
        let answer = self.answer.as_ref()?;
        let mut extras = TurnExtras::default();
        if self.structured {
            extras.response_schema = Some(answer.schema.clone());
        } else {
            extras.tools.push(answer.tool.clone());
        }
        Some(extras)
    }

    fn conversation_name(&self) -> Option<&str> {
        self.options.conversation.as_deref()
    }

    /// Answers every call of the last turn with `text` as an error result, so the
    /// conversation stays valid when the run stops before running them.
    fn answer_unrun(&self, cx: &mut RunContext, text: &str) -> Result<(), AgentError> {
        let message = last_message(cx, self.conversation_name())?;
        let results: Vec<ToolResult> = message
            .tool_uses()
            .map(|call| ToolResult { tool_use_id: call.id.clone(), content: text.to_owned(), is_error: true })
            .collect();
        if !results.is_empty() {
            save_message(cx, &Message::tool_results(results), self.conversation_name(), Default::default())?;
        }
        Ok(())
    }

    fn end(&self, state: &mut AgentState, status: AgentStatus) {
        tracing::info!(?status, turns = state.turns, "agent run ends");
        state.status = Some(status);
    }
}

#[workflow(crate = ::loopstack_core, name = "agent", input = String)]
impl Agent {
    /// Saves the user's prompt as the first message.
    #[transition(to = Ready)]
    async fn setup(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        // The prompt lives on in the documents; the state stays small.
        let prompt = Message::user(std::mem::take(&mut state.prompt));
        crate::generate::save_shared_message(cx, Arc::new(prompt), self.conversation_name(), Default::default())?;
        Ok(())
    }

    /// Ends the run before a turn that a limit forbids.
    #[transition(from = Ready, to = End, priority = 10)]
    #[guard(over_budget)]
    async fn stop_at_limit(&self, state: &mut AgentState, _cx: &mut RunContext) -> Result<(), AgentError> {
        let limit = self.budget_reached(state).expect("checked by the guard");
        tracing::warn!(%limit, "the agent reached a limit");
        self.end(state, AgentStatus::LimitReached(limit));
        Ok(())
    }

    /// One model turn.
    #[transition(from = Ready, to = PromptExecuted)]
    async fn llm_turn(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let result = match self.extras() {
            None => self.generate.call(cx, &self.options).await?,
            Some(extras) => self.generate.call_with(cx, &self.options, &extras).await?,
        };
        state.turns = state.turns.saturating_add(1);
        state.usage += result.usage;
        if !self.prices.is_empty() {
            let cost = self
                .prices
                .cost(&self.options.model, &result.usage)
                .or_else(|| self.prices.cost(&result.model, &result.usage));
            state.cost += cost.unwrap_or(0.0);
        }
        state.last_stop = Some(result.stop_reason.clone());
        state.answer_error = None;
        state.tools_completed = None;
        state.pending_approval.clear();
        state.denied.clear();

        let respond =
            self.answer.is_some().then(|| result.message.tool_uses().find(|c| c.name == RESPOND_TOOL)).flatten();
        if let (Some(format), Some(call)) = (&self.answer, respond) {
            // An answer through `respond`: the turn's other calls are not run, and
            // the streak of repeated calls is broken.
            state.last_tool_calls = 0;
            state.repeats = Repeats::default();
            match format.accept(&call.input) {
                Ok(value) => state.answer = Some(value),
                Err(error) => state.answer_error = Some(error),
            }
            return Ok(());
        }
        let calls: Vec<&ToolUse> = result.message.tool_uses().collect();
        state.last_tool_calls = calls.len();
        state.repeats.observe(&result.message);
        if calls.is_empty() {
            if let Some(format) = &self.answer {
                let text = result.message.text();
                match format.accept_text(&text) {
                    Ok(value) => state.answer = Some(value),
                    Err(error) => state.answer_error = Some(error),
                }
            }
            return Ok(());
        }
        let tools = self.generate.tools();
        state.pending_approval = calls
            .iter()
            .filter(|c| tools.spec(&c.name).is_some_and(|s| s.options.approve))
            .map(|c| PendingCall { call_id: c.id.clone(), name: c.name.clone(), arguments: c.input.clone() })
            .collect();
        Ok(())
    }

    /// Stops a model that asks for the same calls again and again.
    #[transition(from = PromptExecuted, to = End, priority = 40)]
    #[guard(repeats_itself)]
    async fn stop_repeating(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let message = last_message(cx, self.conversation_name())?;
        let mut tools: Vec<String> = message.tool_uses().map(|c| c.name.clone()).collect();
        tools.dedup();
        let times = state.repeats.times;
        tracing::warn!(?tools, times, "the model repeats its tool calls; the run stops");
        self.answer_unrun(
            cx,
            &format!("not run: the same calls were asked for {times} turns in a row, so the run stopped"),
        )?;
        self.end(state, AgentStatus::RepeatedToolCalls { tools, times });
        Ok(())
    }

    /// Ends the run when the turn's calls would pass the tool-call budget.
    #[transition(from = PromptExecuted, to = End, priority = 35)]
    #[guard(over_tool_limit)]
    async fn stop_at_tool_limit(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let max = self.limits.max_tool_calls.unwrap_or(0);
        let limit = Limit::ToolCalls { max, used: state.tool_calls, asked: state.last_tool_calls as u32 };
        self.answer_unrun(cx, &format!("not run: the run reached {limit}"))?;
        self.end(state, AgentStatus::LimitReached(limit));
        Ok(())
    }

    /// Ends the run with a typed answer that fits.
    #[transition(from = PromptExecuted, to = End, priority = 30)]
    #[guard(has_valid_answer)]
    async fn accept_answer(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let message = last_message(cx, self.conversation_name())?;
        let results: Vec<ToolResult> = message
            .tool_uses()
            .map(|call| {
                let (content, is_error) = if call.name == RESPOND_TOOL {
                    ("answer accepted".to_owned(), false)
                } else {
                    ("not run: the final answer was given in the same turn".to_owned(), true)
                };
                ToolResult { tool_use_id: call.id.clone(), content, is_error }
            })
            .collect();
        if !results.is_empty() {
            save_message(cx, &Message::tool_results(results), self.conversation_name(), Default::default())?;
        }
        state.output = state.answer.as_ref().map(Value::to_string);
        self.end(state, AgentStatus::Completed);
        Ok(())
    }

    /// Sends an answer that does not fit back to the model, with the error.
    #[transition(from = PromptExecuted, to = Ready, priority = 25)]
    #[guard(can_retry_answer)]
    async fn reject_answer(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let error = state.answer_error.take().unwrap_or_default();
        tracing::info!(%error, retry = state.answer_retries + 1, "the answer does not fit; asking again");
        state.answer_retries = state.answer_retries.saturating_add(1);
        let message = last_message(cx, self.conversation_name())?;
        if message.tool_uses().next().is_some() {
            // The `respond` call (and any other) gets its result: the error.
            let results: Vec<ToolResult> = message
                .tool_uses()
                .map(|call| {
                    let content = if call.name == RESPOND_TOOL {
                        format!("the answer does not fit the schema: {error}; call `{RESPOND_TOOL}` again with a fixed answer")
                    } else {
                        "not run: the final answer was given in the same turn".to_owned()
                    };
                    ToolResult { tool_use_id: call.id.clone(), content, is_error: true }
                })
                .collect();
            save_message(cx, &Message::tool_results(results), self.conversation_name(), Default::default())?;
        } else {
            save_message(cx, &feedback(&error, !self.structured), self.conversation_name(), Default::default())?;
        }
        Ok(())
    }

    /// Ends the run when answers still do not fit after the retries.
    #[transition(from = PromptExecuted, to = End, priority = 24)]
    #[guard(answer_rejected)]
    async fn give_up_answer(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let error = state.answer_error.clone().unwrap_or_default();
        self.answer_unrun(cx, &format!("the answer does not fit the schema: {error}"))?;
        self.end(state, AgentStatus::InvalidAnswer { error, retries: state.answer_retries });
        Ok(())
    }

    /// Waits for a person to decide on the calls that need approval.
    #[transition(from = PromptExecuted, to = AwaitingApproval, priority = 20)]
    #[guard(needs_approval)]
    async fn request_approval(&self, state: &mut AgentState, _cx: &mut RunContext) -> Result<(), AgentError> {
        tracing::info!(calls = state.pending_approval.len(), "tool calls wait for approval");
        Ok(())
    }

    /// Takes decisions on waiting calls; the run goes on once all have one.
    #[transition(from = AwaitingApproval, to = PromptExecuted, wait)]
    async fn decide_tools(
        &self,
        state: &mut AgentState,
        _cx: &mut RunContext,
        decisions: ToolDecisions,
    ) -> Result<(), AgentError> {
        for (i, decision) in decisions.decisions.iter().enumerate() {
            if decisions.decisions[..i].iter().any(|d| d.call_id == decision.call_id) {
                return Err(AgentError::DuplicateDecision { call_id: decision.call_id.clone() });
            }
        }
        if let Some(unknown) =
            decisions.decisions.iter().find(|d| !state.pending_approval.iter().any(|p| p.call_id == d.call_id))
        {
            return Err(AgentError::NotPending {
                call_id: unknown.call_id.clone(),
                pending: state.pending_approval.iter().map(|p| p.call_id.clone()).collect(),
            });
        }
        for decision in decisions.decisions {
            state.pending_approval.retain(|p| p.call_id != decision.call_id);
            if !decision.approved {
                state.denied.push(ToolDenial::new(decision.call_id, decision.reason));
            }
        }
        Ok(())
    }

    /// Runs the tool calls (denied ones answer with their denial) and saves their
    /// results.
    #[transition(from = PromptExecuted, to = AwaitingTools, priority = 10)]
    #[guard(has_tool_calls)]
    async fn execute_tool_calls(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let message = last_message(cx, self.conversation_name())?;
        let denied = std::mem::take(&mut state.denied);
        // The state as JSON only when a tool's input mapping may read it.
        let snapshot = if self.tools_need_state { Some(Arc::new(serde_json::to_value(&*state)?)) } else { None };
        let mut options = crate::CallOptions::new().denied(&denied).conversation(self.conversation_name());
        if let Some(snapshot) = &snapshot {
            options = options.state(snapshot);
        }
        let result = self.delegate.call_with(cx, &message, &self.options.tools, &options).await?;
        let run = result.results.len().saturating_sub(denied.len());
        state.tool_calls = state.tool_calls.saturating_add(u32::try_from(run).unwrap_or(u32::MAX));
        state.tools_completed =
            Some(ToolsCompleted { all_completed: result.all_completed, errors: result.error_count });
        if !result.all_completed {
            state.pending_tools = result
                .results
                .iter()
                .filter_map(|r| {
                    let child = r.pending?;
                    Some(PendingTool { call_id: r.tool_use_id.clone(), name: r.name.clone(), child })
                })
                .collect();
            state.tool_results = result.results;
            tracing::info!(pending = state.pending_tools.len(), "tool calls wait for their child runs");
        }
        Ok(())
    }

    /// The end of a pending call's child run: its result. Once the batch has all
    /// its results they are saved, in call order, and the loop goes on. The end of
    /// a child whose call already has its result (it completed within the call) is
    /// ignored.
    #[transition(from = AwaitingTools, to = AwaitingTools, wait)]
    async fn tool_result(
        &self,
        state: &mut AgentState,
        cx: &mut RunContext,
        ended: ChildEnded,
    ) -> Result<(), AgentError> {
        let Some(pos) = state.pending_tools.iter().position(|p| p.child == ended.child) else {
            tracing::debug!(child = %ended.child, "the end of a child whose call has its result");
            return Ok(());
        };
        let pending = state.pending_tools.remove(pos);
        let mut output = crate::child_result(&ended, &self.secrets);
        if let loopstack_core::ToolContent::Text(text) = &mut output.content
            && let std::borrow::Cow::Owned(redacted) = cx.runtime().secrets().redact(text)
        {
            *text = redacted;
        }
        if let Some(slot) = state.tool_results.iter_mut().find(|r| r.tool_use_id == pending.call_id) {
            *slot = ToolCallResult::new(pending.call_id, pending.name, output);
        }
        if state.pending_tools.is_empty() {
            let results = std::mem::take(&mut state.tool_results);
            self.delegate.save_results(cx, &results, self.conversation_name())?;
            let errors = results.iter().filter(|r| r.is_error).count();
            state.tools_completed = Some(ToolsCompleted { all_completed: true, errors });
        }
        Ok(())
    }

    /// Back to the model once every call has its result.
    #[transition(from = AwaitingTools, to = Ready)]
    #[guard(all_tools_complete)]
    async fn tools_complete(&self, _state: &mut AgentState, _cx: &mut RunContext) -> Result<(), AgentError> {
        Ok(())
    }

    /// Ends a run whose answer was cut at the token limit.
    #[transition(from = PromptExecuted, to = End, priority = 5)]
    #[guard(hit_max_tokens)]
    async fn truncated(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        tracing::warn!(turns = state.turns, "the model stopped at its output token limit");
        state.output = Some(last_message(cx, self.conversation_name())?.text());
        self.end(state, AgentStatus::MaxTokens);
        Ok(())
    }

    /// Answers in a chat run, then waits for the user.
    #[transition(from = PromptExecuted, to = AwaitingUser, priority = 3)]
    #[guard(is_chat)]
    async fn chat_reply(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let text = last_message(cx, self.conversation_name())?.text();
        state.status = Some(final_status(state, &text));
        state.output = Some(text);
        Ok(())
    }

    /// The user's next message in a chat run.
    #[transition(from = AwaitingUser, to = Ready, wait)]
    async fn user_message(
        &self,
        state: &mut AgentState,
        cx: &mut RunContext,
        message: UserMessage,
    ) -> Result<(), AgentError> {
        save_message(cx, &Message::user(message.text), self.conversation_name(), Default::default())?;
        state.status = None;
        state.output = None;
        Ok(())
    }

    /// Ends a chat run.
    #[transition(from = AwaitingUser, to = End, wait)]
    async fn end_chat(&self, _state: &mut AgentState, _cx: &mut RunContext) -> Result<(), AgentError> {
        Ok(())
    }

    /// Ends the run with the model's answer.
    #[transition(from = PromptExecuted, to = End)]
    async fn respond(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let text = last_message(cx, self.conversation_name())?.text();
        let status = final_status(state, &text);
        state.output = Some(text);
        self.end(state, status);
        Ok(())
    }

    /// Whether a limit forbids the next turn: the turn, token or cost budget.
    pub fn over_budget(&self, state: &AgentState) -> bool {
        self.budget_reached(state).is_some()
    }

    /// Whether the last turn asked for the calls of the turn before it once too often.
    pub fn repeats_itself(&self, state: &AgentState) -> bool {
        state.last_tool_calls > 0 && state.repeats.times > self.limits.max_repeats.saturating_add(1)
    }

    /// Whether running the last turn's calls would pass the tool-call budget.
    pub fn over_tool_limit(&self, state: &AgentState) -> bool {
        self.limits.max_tool_calls.is_some_and(|max| state.tool_calls as usize + state.last_tool_calls > max as usize)
    }

    /// Whether the last turn gave a typed answer that fits.
    pub fn has_valid_answer(&self, state: &AgentState) -> bool {
        state.answer.is_some()
    }

    /// Whether the last typed answer does not fit and may go back to the model.
    pub fn can_retry_answer(&self, state: &AgentState) -> bool {
        self.answer_rejected(state) && self.answer.as_ref().is_some_and(|a| state.answer_retries < a.retries)
    }

    /// Whether the last typed answer does not fit.
    pub fn answer_rejected(&self, state: &AgentState) -> bool {
        state.answer_error.is_some()
    }

    /// Whether calls of the last turn wait for a person's decision.
    pub fn needs_approval(&self, state: &AgentState) -> bool {
        !state.pending_approval.is_empty()
    }

    /// Whether the last turn asked for tools: its message has tool calls, whatever
    /// the stop reason (see [`GenerateResult::wants_tools`](crate::GenerateResult::wants_tools)).
    pub fn has_tool_calls(&self, state: &AgentState) -> bool {
        state.last_tool_calls > 0
    }

    /// Whether every call of the last batch has its result.
    pub fn all_tools_complete(&self, state: &AgentState) -> bool {
        state.tools_completed.is_some_and(|t| t.all_completed)
    }

    /// Whether the last turn stopped at the output token limit.
    pub fn hit_max_tokens(&self, state: &AgentState) -> bool {
        // A chat session answers (cut short) and waits for the user instead.
        !self.chat && state.last_stop == Some(StopReason::MaxTokens)
    }

    /// Whether the run is a chat session that waits for the user after answering.
    pub fn is_chat(&self, _state: &AgentState) -> bool {
        self.chat
    }
}

impl Agent {
    /// The limit that forbids the next turn, if any.
    fn budget_reached(&self, state: &AgentState) -> Option<Limit> {
        let limits = &self.limits;
        if state.turns >= limits.max_turns {
            return Some(Limit::Turns { max: limits.max_turns });
        }
        let used = state.usage.all_tokens();
        if let Some(max) = limits.max_total_tokens
            && used >= max
        {
            return Some(Limit::TotalTokens { max, used });
        }
        if let Some(max) = limits.max_cost
            && state.cost >= max
        {
            return Some(Limit::Cost { max, spent: state.cost });
        }
        None
    }
}

/// How a turn without tool calls ends the run.
fn final_status(state: &AgentState, text: &str) -> AgentStatus {
    AgentStatus::of_answer(state.last_stop.as_ref().unwrap_or(&StopReason::EndTurn), text)
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
    /// itself, as the agent does with [`Limits::max_repeats`].
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
        let calls: Vec<&ToolUse> = message.tool_uses().collect();
        *self = if calls.is_empty() {
            Self::default()
        } else {
            let fingerprint = fingerprint(&calls);
            let times =
                if self.fingerprint == fingerprint && self.times > 0 { self.times.saturating_add(1) } else { 1 };
            Self { fingerprint, times }
        };
        self.times
    }
}

/// A fingerprint of a turn's calls (names and arguments, in order): FNV-1a over
/// their JSON, stable across builds and restarts.
fn fingerprint(calls: &[&ToolUse]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            hash ^= u32::from(b);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    };
    for call in calls {
        feed(call.name.as_bytes());
        feed(&[0]);
        hash_value(&call.input, &mut feed);
        feed(&[0xff]);
    }
    hash
}

/// Feeds a JSON value to a hash, tagged by kind, without building its text.
fn hash_value(value: &Value, feed: &mut impl FnMut(&[u8])) {
    match value {
        Value::Null => feed(b"n"),
        Value::Bool(b) => feed(if *b { b"t" } else { b"f" }),
        Value::Number(n) => {
            feed(b"#");
            match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => feed(&u.to_le_bytes()),
                (_, Some(i), _) => feed(&i.to_le_bytes()),
                (_, _, Some(f)) => feed(&f.to_bits().to_le_bytes()),
                _ => feed(n.to_string().as_bytes()),
            }
        }
        Value::String(s) => {
            feed(b"s");
            feed(&(s.len() as u64).to_le_bytes());
            feed(s.as_bytes());
        }
        Value::Array(items) => {
            feed(b"[");
            items.iter().for_each(|v| hash_value(v, feed));
            feed(b"]");
        }
        Value::Object(map) => {
            feed(b"{");
            for (k, v) in map {
                feed(&(k.len() as u64).to_le_bytes());
                feed(k.as_bytes());
                hash_value(v, feed);
            }
            feed(b"}");
        }
    }
}

/// The last message of the conversation: the assistant's, right after a turn.
fn last_message(cx: &RunContext, conversation: Option<&str>) -> Result<Arc<Message>, AgentError> {
    let doc = cx.documents().iter().rev().find(|d| crate::generate::in_conversation(d, conversation));
    match doc {
        Some(doc) => Ok(cx.read_shared(doc)?),
        None => Err(AgentError::Document(serde::de::Error::custom("the run has no message document"))),
    }
}
