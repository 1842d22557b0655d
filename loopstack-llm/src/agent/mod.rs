//! The ready-made agent loop: [`Agent`] and what it is built from and answers with.
//!
//! The crate root re-exports the types; the names a program that operates runs by
//! name needs ([`DECIDE_TOOLS`], [`RESOLVE_TOOLS`], [`RESPOND_TOOL`],
//! [`TRANSFER_PREFIX`]) and the default limits live here.

use std::sync::Arc;

use loopstack_core::schemars::{self, JsonSchema};
use loopstack_core::{RunContext, RunId, RunOutcome, RunReport, Runtime, ToolRegistry};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::delegate::LlmDelegateToolCalls;
use crate::error::AgentError;
use crate::generate::{GenerateOptions, LlmGenerateText, Models, TurnExtras, save_message};
use crate::message::{Message, ToolResult, ToolUse, Usage};
use crate::model::ChatModel;

mod answer;
mod approval;
mod error;
mod fork;
mod handoff;
mod input;
mod limits;
mod machine;
mod run;
mod state;
mod status;
mod steps;
mod tool;

use answer::AnswerFormat;
pub use answer::{Answer, DEFAULT_ANSWER_RETRIES, RESPOND_TOOL, TypedAgent};
pub use approval::{
    DECIDE_TOOLS, PendingCall, RESOLVE_TOOLS, ToolDecision, ToolDecisions, decide_by_name, pending_calls,
    takes_decisions,
};
pub use error::AskError;
pub use handoff::TRANSFER_PREFIX;
pub use input::{AgentInput, ClientTool};
pub use limits::{DEFAULT_MAX_REPEATS, DEFAULT_MAX_TURNS, Limit, Limits, Price, Prices, RaiseLimit};
pub use machine::{AgentPlace, AgentSignal};
pub use state::{AgentState, Repeats, ToolsCompleted};
pub use status::{AgentStatus, PendingTool};
pub use tool::{AgentQuestion, AgentTool, AgentToolError, DEFAULT_AGENT_TOOL_TIMEOUT, agent_answer};

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
/// start, ready --llm_turn--> prompt_executed
/// start, ready --stop_at_limit [over_budget] (10)--> end
/// prompt_executed --stop_repeating [repeats_itself] (40)--> end
/// prompt_executed --stop_at_tool_limit [over_tool_limit] (35)--> end
/// prompt_executed --hand_off [hands_off] (33)--> ready
/// prompt_executed --accept_answer [has_valid_answer] (30)--> end
/// prompt_executed --reject_answer [can_retry_answer] (25)--> ready
/// prompt_executed --give_up_answer [answer_rejected] (24)--> end
/// prompt_executed --request_approval [needs_approval] (20)--> awaiting_approval
/// awaiting_approval --decide_tools (wait: ToolDecisions)--> prompt_executed
/// prompt_executed, awaiting_tools --hold_for_outcome [outcome_unknown] (45)--> awaiting_outcome
/// awaiting_outcome --resolve_tools (wait: ToolDecisions)--> prompt_executed
/// prompt_executed --run_tool_calls [has_inline_tool_calls] (11)--> ready
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
///   Reaching one ends the run with a typed [`AgentStatus`], and stops it: its
///   status is `stopped` (not `completed`), its error says why, and a retry after
///   raising the limit goes on from where it stopped. The limits count the
///   whole run: in a chat, every exchange.
/// - **Tool calls in one step**: when no tool of the agent starts a child run
///   (`needs_run`: workflows and agents as tools) or has an at-most-once effect,
///   `run_tool_calls` runs a turn's calls, saves their results and goes back to the
///   model in one step; otherwise `execute_tool_calls` runs them and the run passes
///   `awaiting_tools`, where it waits for child runs and calls of unknown outcome.
/// - **Approval**: calls of tools marked `#[tool(approve)]` (or
///   [`ToolRegistry::require_approval`]) wait for [`Agent::decide`] before they run,
///   durably; a denied call becomes an error result the model reads.
/// - **At-most-once calls**: a call of a tool marked `#[tool(effect = at_most_once)]`
///   ([`Effect::AtMostOnce`](loopstack_core::Effect::AtMostOnce)) whose drive died
///   mid-call is not run again: the run waits at `awaiting_outcome`
///   ([`AgentStatus::OutcomeUnknown`]) for [`Agent::decide`] with its result
///   ([`ToolDecision::result`]) or an approval to run it again.
/// - **Chat**: with [`Agent::chat`] the run waits for the user's next message
///   ([`Agent::say`]) after each answer instead of ending.
/// - **Client tools**: a run started with [`AgentInput::client_tools`] offers the
///   model tools a client (a frontend) answers itself; their calls wait, like calls
///   to approve, for the client's [`ToolDecision::result`].
/// - **Typed answers**: [`Agent::answer`] gives a [`TypedAgent`] whose answer
///   deserializes into a Rust type.
/// - **Handoffs**: [`Agent::handoff`] lets the model hand the conversation to
///   another named agent (a `transfer_to_<name>` tool), which takes the next turns of
///   the same run.
/// - **Agents as tools**: [`Agent::as_tool`] offers a named agent to another as a
///   tool ([`AgentTool`]); each call is a child run, and its tokens and cost count
///   in the caller's limits.
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
    /// Whether every call completes within the step that runs it: no tool starts a
    /// child run or has an at-most-once effect. Then one step runs a turn's calls
    /// and goes back to the model (`run_tool_calls`), where another would wait at
    /// `awaiting_tools` for the batch to complete.
    tools_complete_inline: bool,
    /// The table under the agent's own name and description, set by
    /// [`Agent::named`] and [`Agent::description`].
    table: Option<&'static loopstack_core::Definition>,
    /// Whether [`Agent::named`] named it.
    named: bool,
    /// What each turn sends of a long conversation.
    context: crate::ContextPolicy,
    /// The images of the prompt of the run this agent starts
    /// ([`Agent::ask_with_images`]); saved when the run is created, never in a
    /// checkpoint.
    pub(crate) prompt_images: Vec<crate::image::Image>,
    /// The agents the model may hand the conversation to.
    handoffs: handoff::Handoffs,
}

/// The name of the signal that gives a chat run ([`Agent::chat`]) the user's next
/// message ([`UserMessage`]), for callers that send it by name.
///
/// ```
/// use loopstack_core::{ToolRegistry, Workflow};
/// use loopstack_llm::{Agent, ScriptedModel, agent::USER_MESSAGE};
///
/// let agent = Agent::new(ScriptedModel::new(), "m", ToolRegistry::new()).chat(true);
/// assert!(Workflow::definition(&agent).transitions().iter().any(|t| t.wait && t.name == USER_MESSAGE));
/// ```
pub const USER_MESSAGE: &str = "user_message";

/// The payload of the agent's `user_message` signal: the user's next message in a
/// chat run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct UserMessage {
    /// What the user says.
    pub text: String,
    /// The tools the client answers itself from now on ([`ClientTool`]), in place of
    /// those the run had; `None` keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_tools: Option<Vec<ClientTool>>,
}

impl UserMessage {
    /// The user's next message, `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Self { text: text.into(), client_tools: None }
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
    /// The agent that took the run's last turn: the one asked, or the one it
    /// handed the conversation to ([`Agent::handoff`]).
    pub agent: String,
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
        let (tools_need_state, tools_complete_inline) = tool_kinds(&tools);
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
            tools_complete_inline,
            table: None,
            named: false,
            context: crate::ContextPolicy::Full,
            prompt_images: Vec::new(),
            handoffs: handoff::Handoffs::default(),
        }
    }

    loopstack_model::settings_setters!(s => s.options.settings);

    /// Adds `model_name` of `model` to the end of the turn's fallback chain (see
    /// [`GenerateOptions::fallback`] for when the chain moves on, what is recorded and
    /// the error when every model fails). `model` is registered under its provider's
    /// name unless a model is already registered there, which is then used (a second
    /// model name of the same provider needs no second instance); register a second
    /// configuration of one provider (a cloud and a local OpenAI-compatible server)
    /// with [`Agent::fallback_named`].
    ///
    /// ```
    /// use loopstack_core::{Runtime, ToolRegistry};
    /// use loopstack_llm::{Agent, LlmError, ScriptedModel};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let busy = ScriptedModel::from_fn(|r| {
    ///     Err(LlmError::Overloaded { provider: "scripted", model: r.model.clone(), message: "busy".into() })
    /// });
    /// let spare = ScriptedModel::new().text("Sunny.");
    /// let agent = Agent::new(busy, "big", ToolRegistry::new()).fallback_named("spare", spare, "small");
    /// let reply = agent.ask(&Runtime::new(), "Weather?").await?;
    /// assert_eq!(reply.text, "Sunny.");
    /// # Ok::<_, Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    #[must_use]
    pub fn fallback(self, model: impl ChatModel, model_name: impl Into<String>) -> Self {
        let provider = model.provider();
        self.fallback_named(provider, model, model_name)
    }

    /// Adds `model_name` of `model`, registered under `name` (unless a model is
    /// registered there already, which is then used), to the end of the fallback chain.
    #[must_use]
    pub fn fallback_named(
        mut self,
        name: impl Into<String>,
        model: impl ChatModel,
        model_name: impl Into<String>,
    ) -> Self {
        let name = name.into();
        let models = self.generate.models_mut();
        if !models.contains(&name) {
            models.insert(name.clone(), Arc::new(model)).expect("the name is free");
        }
        self.options.fallbacks.push(crate::ModelRef::new(name, model_name));
        self
    }

    /// Keeps what each turn sends within the model's context window: past a threshold
    /// the oldest whole turns are left out (or summarized first), by the agent's
    /// `compact` transition; the stored conversation keeps every message. Every message
    /// is sent by default ([`ContextPolicy::Full`](crate::ContextPolicy::Full)); a
    /// policy costs nothing until its threshold is near.
    ///
    /// ```
    /// use loopstack_core::{ToolRegistry, WorkflowExt};
    /// use loopstack_llm::{Agent, ContextPolicy, ScriptedModel};
    ///
    /// let agent = Agent::new(ScriptedModel::new(), "m", ToolRegistry::new())
    ///     .context(ContextPolicy::summarize(150_000).target_tokens(60_000));
    /// assert!(agent.mermaid().contains("compact"));
    /// ```
    #[must_use]
    pub fn context(mut self, policy: crate::ContextPolicy) -> Self {
        self.context = policy;
        self
    }

    /// Replaces the settings of each model turn.
    #[must_use]
    pub fn settings(mut self, settings: crate::ModelSettings) -> Self {
        self.options.settings = settings;
        self
    }

    /// Names the agent: it becomes a workflow of its own, registered, stored with
    /// its runs and started under this name, so several agents (a triage agent, a
    /// billing agent) share one runtime, one worker and one database, and each
    /// run resumes under its own agent's prompt and tools. An agent without a name
    /// is the workflow `agent`. The name is validated like a tool's (1 to 64 ASCII
    /// letters, digits, `_` or `-`).
    ///
    /// ```
    /// use loopstack_core::{Runtime, ToolRegistry};
    /// use loopstack_llm::{Agent, ScriptedModel};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let triage = Agent::new(ScriptedModel::new().text("Routing you."), "m", ToolRegistry::new()).named("triage")?;
    /// let billing = Agent::new(ScriptedModel::new().text("Paid."), "m", ToolRegistry::new()).named("billing")?;
    /// let runtime = Runtime::new().try_register(triage.clone())?.try_register(billing.clone())?;
    /// assert_eq!(runtime.workflows(), ["billing", "triage"]);
    /// let reply = billing.ask(&runtime, "Was I charged?").await?;
    /// assert_eq!(runtime.store().load_run(reply.run_id).await?.workflow.as_ref(), "billing");
    /// // A second agent under a taken name is refused, not swapped in.
    /// let again = Agent::new(ScriptedModel::new(), "m", ToolRegistry::new()).named("billing")?;
    /// assert!(runtime.try_register(again).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    pub fn named(mut self, name: impl Into<String>) -> Result<Self, loopstack_core::RegistryError> {
        let name = name.into();
        if !loopstack_core::is_valid_tool_name(&name) {
            return Err(loopstack_core::RegistryError::InvalidWorkflowName(name));
        }
        let table = loopstack_core::Workflow::definition(&self);
        self.table = Some(table.renamed(&name));
        self.named = true;
        Ok(self)
    }

    /// Says what the agent does, for clients that list it: the MCP server
    /// (`loopstack::mcp_server`) offers a registered agent as a tool with this
    /// description. It is kept with the agent's table (under its name, in either
    /// order with [`Agent::named`]) and does not change the table's hash, so runs
    /// stored before resume.
    ///
    /// ```
    /// use loopstack_core::ToolRegistry;
    /// use loopstack_llm::{Agent, ScriptedModel};
    ///
    /// let billing = Agent::new(ScriptedModel::new(), "m", ToolRegistry::new())
    ///     .description("Answers questions about invoices and payments.")
    ///     .named("billing")?;
    /// let table = loopstack_core::Workflow::definition(&billing);
    /// assert_eq!((table.name(), table.description()), ("billing", Some("Answers questions about invoices and payments.")));
    /// # Ok::<(), loopstack_core::RegistryError>(())
    /// ```
    #[must_use]
    pub fn description(mut self, description: impl AsRef<str>) -> Self {
        let table = loopstack_core::Workflow::definition(&self);
        self.table = Some(table.described(description.as_ref()));
        self
    }

    /// The agent's name: its workflow's, `agent` unless [named](Agent::named).
    pub fn name(&self) -> &'static str {
        loopstack_core::Workflow::definition(self).name()
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

    /// Replaces the tool-call step, to set its timeout or concurrency.
    #[must_use]
    pub fn delegate(mut self, delegate: LlmDelegateToolCalls) -> Self {
        (self.tools_need_state, self.tools_complete_inline) = tool_kinds(delegate.tools());
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
}

/// Whether some tool of `tools` needs the run, and whether every call of them
/// completes within its step (no tool needs the run or has an at-most-once effect).
fn tool_kinds(tools: &ToolRegistry) -> (bool, bool) {
    let needs_run = tools.specs().any(|s| s.options.needs_run);
    let at_most_once = tools.specs().any(|s| s.options.effect.is_at_most_once());
    (needs_run, !needs_run && !at_most_once)
}
