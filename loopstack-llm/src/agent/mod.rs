//! The ready-made agent loop.

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
mod limits;
mod machine;
mod state;
mod status;
mod tool;

use answer::AnswerFormat;
pub use answer::{Answer, DEFAULT_ANSWER_RETRIES, RESPOND_TOOL, TypedAgent};
pub use approval::{
    DECIDE_TOOLS, PendingCall, RESOLVE_TOOLS, ToolDecision, ToolDecisions, decide_by_name, pending_calls,
    takes_decisions,
};
pub use error::AskError;
pub use handoff::TRANSFER_PREFIX;
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
/// start --setup--> ready --llm_turn--> prompt_executed
/// ready --stop_at_limit [over_budget] (10)--> end
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
/// - **At-most-once calls**: a call of a tool marked `#[tool(effect = at_most_once)]`
///   ([`Effect::AtMostOnce`](loopstack_core::Effect::AtMostOnce)) whose drive died
///   mid-call is not run again: the run waits at `awaiting_outcome`
///   ([`AgentStatus::OutcomeUnknown`]) for [`Agent::decide`] with its result
///   ([`ToolDecision::result`]) or an approval to run it again.
/// - **Chat**: with [`Agent::chat`] the run waits for the user's next message
///   ([`Agent::say`]) after each answer instead of ending.
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
    /// The table under the agent's own name and description, set by
    /// [`Agent::named`] and [`Agent::description`].
    table: Option<&'static loopstack_core::Definition>,
    /// Whether [`Agent::named`] named it.
    named: bool,
    /// What each turn sends of a long conversation.
    context: crate::ContextPolicy,
    /// The images of the prompt of the run this agent starts
    /// ([`Agent::ask_with_images`]); saved by `setup`, never in a checkpoint.
    pub(crate) prompt_images: Vec<crate::image::Image>,
    /// The agents the model may hand the conversation to.
    handoffs: handoff::Handoffs,
}

/// The payload of the agent's `user_message` signal: the user's next message in a
/// chat run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UserMessage {
    /// What the user says.
    pub text: String,
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
            table: None,
            named: false,
            context: crate::ContextPolicy::Full,
            prompt_images: Vec::new(),
            handoffs: handoff::Handoffs::default(),
        }
    }

    crate::model::settings_setters!(s => s.options.settings);

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

    /// The calls run `run_id` waits to have decided ([`Agent::decide`]), each with
    /// its id, tool and arguments, for showing to a person; empty when the run
    /// waits for no decision. It reads the run from the store and drives nothing.
    ///
    /// # Errors
    /// [`AskError::Run`] when the store cannot be read, the run is of another
    /// workflow (another agent's, say), or its state does not read.
    ///
    /// ```
    /// use loopstack_core::{Runtime, ToolRegistry};
    /// use loopstack_llm::{Agent, ScriptedModel, ToolDecisions};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let mut tools = ToolRegistry::new();
    /// # struct Reset;
    /// # #[async_trait::async_trait]
    /// # impl loopstack_core::Tool for Reset {
    /// #     fn name(&self) -> &str { "reset_password" }
    /// #     fn description(&self) -> &str { "Resets a password." }
    /// #     fn input_schema(&self) -> serde_json::Value { serde_json::json!({"type": "object"}) }
    /// #     async fn call(&self, _: serde_json::Value, _: &loopstack_core::ToolContext)
    /// #         -> Result<loopstack_core::ToolOutput, loopstack_core::ToolError> { Ok(loopstack_core::ToolOutput::text("done")) }
    /// # }
    /// tools.register(Reset)?;
    /// tools.require_approval("reset_password")?;
    /// let model = ScriptedModel::new().tool_call("reset_password", serde_json::json!({"user": "ada"})).text("Reset.");
    /// let agent = Agent::new(model, "m", tools);
    /// let runtime = Runtime::new();
    /// let reply = agent.ask(&runtime, "Reset Ada's password").await?;
    /// let pending = agent.pending(&runtime, reply.run_id).await?;
    /// assert_eq!((pending[0].name.as_str(), &pending[0].arguments), ("reset_password", &serde_json::json!({"user": "ada"})));
    /// agent.decide(&runtime, reply.run_id, ToolDecisions::approve_all(&pending)).await?;
    /// assert!(agent.pending(&runtime, reply.run_id).await?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    pub async fn pending(&self, runtime: &Runtime, run_id: RunId) -> Result<Vec<PendingCall>, AskError> {
        let record = runtime.store().load_run(run_id).await.map_err(loopstack_core::RunError::Store)?;
        let workflow = self.name();
        if *record.workflow != *workflow {
            let reason = format!("it is a run of workflow `{}`", record.workflow);
            return Err(AskError::Run(loopstack_core::RunError::Mismatch { workflow, run_id, reason }));
        }
        let outcome = &*record.place == AgentPlace::AwaitingOutcome.as_str();
        if record.status != loopstack_core::RunStatus::Waiting
            || !outcome && &*record.place != AgentPlace::AwaitingApproval.as_str()
        {
            return Ok(Vec::new());
        }
        let state: AgentState = serde_json::from_str(record.state.get())
            .map_err(|source| AskError::Run(loopstack_core::RunError::State { workflow, run_id, source }))?;
        Ok(if outcome { state.unknown_outcome } else { state.pending_approval })
    }

    /// Decides on calls a run waits to have approved, and drives it on: approved
    /// calls run, denied ones answer `denied by the user: <reason>`. Decisions for
    /// some of the calls keep the run waiting for the rest; a decision on a call
    /// that does not wait is refused and changes nothing.
    ///
    /// A run that waits at `awaiting_outcome` (at-most-once calls whose outcome is
    /// unknown after a crash, [`AgentStatus::OutcomeUnknown`]) is answered the same
    /// way, with its [`RESOLVE_TOOLS`] signal: a decision with a
    /// [`result`](ToolDecision::result) gives the call's result, an approved call
    /// runs again, a denied one answers with its denial.
    pub async fn decide(
        &self,
        runtime: &Runtime,
        run_id: RunId,
        decisions: ToolDecisions,
    ) -> Result<AgentReply, AskError> {
        let record = runtime.store().load_run(run_id).await.map_err(loopstack_core::RunError::Store)?;
        let signal = if &*record.place == AgentPlace::AwaitingOutcome.as_str() {
            AgentSignal::ResolveTools(decisions)
        } else {
            AgentSignal::DecideTools(decisions)
        };
        Ok(self.reply_of(runtime.signal(self, run_id, signal).await?))
    }

    /// Raises the budgets of a run that waits because one was spent (the signal
    /// `raise_limit`; see
    /// [`Limits::pause_at_limit`]) and drives it on: it takes the turn it stopped
    /// before, or waits again when the raised budgets still do not allow it.
    ///
    /// ```
    /// use loopstack_core::{Runtime, ToolRegistry};
    /// use loopstack_llm::{Agent, AgentStatus, Limits, RaiseLimit, ScriptedModel};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let model = ScriptedModel::new().text("Done.");
    /// let agent = Agent::new(model, "m", ToolRegistry::new()).limits(Limits::new().max_turns(0).pause_at_limit(true));
    /// let runtime = Runtime::new();
    /// let paused = agent.ask(&runtime, "Hi").await?;
    /// assert!(matches!(paused.status, AgentStatus::BudgetSpent(_)));
    /// let reply = agent.raise(&runtime, paused.run_id, RaiseLimit::new().max_turns(1)).await?;
    /// assert_eq!((reply.status, reply.text.as_str()), (AgentStatus::Completed, "Done."));
    /// # Ok::<_, Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    pub async fn raise(&self, runtime: &Runtime, run_id: RunId, raise: RaiseLimit) -> Result<AgentReply, AskError> {
        Ok(self.reply_of(runtime.signal(self, run_id, AgentSignal::RaiseLimit(raise)).await?))
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

    /// A what-if: a new run from step `step` of run `source` (its conversation, state
    /// and place as they were after that step), driven by this agent, which may
    /// differ from the source's in its system prompt, model, tools or limits (it must
    /// have the source's name). The source run is left as it is; the fork's record
    /// says where it came from (`forked_from`).
    ///
    /// ```
    /// use loopstack_core::{Runtime, ToolRegistry};
    /// use loopstack_llm::{Agent, ChatRequest, ScriptedModel};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// // A model that answers by its system prompt.
    /// let model = ScriptedModel::from_fn(|r: &ChatRequest| {
    ///     Ok(ScriptedModel::new().text_response(format!("({})", r.settings.system.as_deref().unwrap_or("-"))))
    /// });
    /// let runtime = Runtime::new();
    /// let terse = Agent::new(model.clone(), "m", ToolRegistry::new()).system("terse");
    /// let first = terse.ask(&runtime, "Hi").await?;
    /// // The same run from step 1 (the prompt saved, no turn taken) under another prompt.
    /// let chatty = Agent::new(model, "m", ToolRegistry::new()).system("chatty");
    /// let fork = chatty.fork(&runtime, first.run_id, 1).await?;
    /// assert_eq!((first.text.as_str(), fork.text.as_str()), ("(terse)", "(chatty)"));
    /// let record = runtime.store().load_run(fork.run_id).await?;
    /// assert_eq!(record.forked_from, Some((first.run_id, 1)));
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    pub async fn fork(&self, runtime: &Runtime, source: RunId, step: u64) -> Result<AgentReply, AskError> {
        Ok(self.reply_of(runtime.fork(self, source, step).await?))
    }

    /// What a drive's report says, as a reply.
    pub fn reply_of(&self, report: RunReport<AgentState>) -> AgentReply {
        let RunReport { run_id, outcome, state, .. } = report;
        let agent = state.agent.clone().unwrap_or_else(|| self.name().to_owned());
        let mut answer_status = None;
        let status = match outcome {
            RunOutcome::Waiting { place, .. } if place == AgentPlace::AwaitingApproval.as_str() => {
                AgentStatus::AwaitingApproval { calls: state.pending_approval }
            }
            RunOutcome::Waiting { place, .. } if place == AgentPlace::AwaitingOutcome.as_str() => {
                AgentStatus::OutcomeUnknown { calls: state.unknown_outcome }
            }
            RunOutcome::Waiting { place, .. } if place == AgentPlace::AwaitingUser.as_str() => {
                answer_status = state.status.filter(|s| *s != AgentStatus::Completed);
                AgentStatus::AwaitingUser
            }
            RunOutcome::Waiting { place, .. } if place == AgentPlace::AwaitingTools.as_str() => {
                AgentStatus::AwaitingTools { calls: state.pending_tools }
            }
            RunOutcome::Waiting { place, .. } if place == AgentPlace::BudgetSpent.as_str() => {
                AgentStatus::BudgetSpent(self.budget_reached(&state).unwrap_or(Limit::Turns { max: state.turns }))
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
            agent,
        }
    }

    /// What a turn of `agent` (this one, or the one the run was handed to) offers
    /// besides its tools: the run's answer format and context window, and the
    /// agent's handoffs; `None` for a plain turn.
    fn extras(&self, state: &AgentState, agent: &Self) -> Option<TurnExtras> {
        let team = self.has_team();
        if self.answer.is_none() && state.context.is_none() && !team {
            return None;
        }
        let mut extras = TurnExtras::default();
        if let Some(answer) = &self.answer {
            if agent.structured {
                extras.response_schema = Some(answer.schema.clone());
            } else {
                extras.tools.push(answer.tool.clone());
            }
        }
        extras.tools.extend(agent.handoffs.offered.iter().map(|t| t.spec.clone()));
        extras.context.clone_from(&state.context);
        if team {
            extras.agent = Some(agent.name());
        }
        Some(extras)
    }

    fn conversation_name(&self) -> Option<&str> {
        self.options.conversation.as_deref()
    }

    /// Answers every call of the last turn with `text` as an error result, so the
    /// conversation stays valid when the run stops before running them.
    fn answer_unrun(&self, cx: &mut RunContext, text: &str) -> Result<(), AgentError> {
        self.answer_calls(cx, |_| (text.to_owned(), true)).map(drop)
    }

    /// Answers every call of the last turn without running it, with the text and
    /// error flag `answer` gives for it, in one tool-result message; `false` (and
    /// nothing saved) when the turn has no calls.
    fn answer_calls(
        &self,
        cx: &mut RunContext,
        answer: impl Fn(&ToolUse) -> (String, bool),
    ) -> Result<bool, AgentError> {
        let message = machine::last_message(cx, self.conversation_name())?;
        let results: Vec<ToolResult> = message
            .tool_uses()
            .map(|call| {
                let (content, is_error) = answer(call);
                ToolResult { tool_use_id: call.id.clone(), content, is_error }
            })
            .collect();
        if results.is_empty() {
            return Ok(false);
        }
        self.save(cx, &Message::tool_results(results))?;
        Ok(true)
    }

    /// Saves a message to the agent's conversation.
    fn save(&self, cx: &mut RunContext, message: &Message) -> Result<(), AgentError> {
        save_message(cx, message, self.conversation_name(), Default::default())?;
        Ok(())
    }

    fn end(&self, state: &mut AgentState, status: AgentStatus) {
        tracing::info!(?status, turns = state.turns, "agent run ends");
        state.status = Some(status);
    }
}
