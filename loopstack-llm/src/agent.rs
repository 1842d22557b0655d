//! The ready-made agent loop.

use loopstack_core::{RunContext, RunError, RunId, Runtime, ToolRegistry};
use loopstack_macros::workflow;
use serde::{Deserialize, Serialize};

use crate::delegate::LlmDelegateToolCalls;
use crate::error::AgentError;
use crate::generate::{GenerateOptions, LlmGenerateText, Models, conversation};
use crate::message::{Message, StopReason, Usage};
use crate::model::ChatModel;

/// The default budget of model turns per run.
pub const DEFAULT_MAX_TURNS: u32 = 10;

/// A tool-calling agent: model turn, tool calls, tool results, model turn ... until
/// a model turn has no tool calls.
///
/// A turn with tool calls is a tool-use turn whatever its stop reason (`end_turn`,
/// `max_tokens` ...): its calls are run and answered, so a conversation never ends in
/// unanswered calls.
///
/// It is itself a `#[workflow]`:
///
/// ```text
/// start --setup--> ready --llm_turn--> prompt_executed
/// prompt_executed --execute_tool_calls [has_tool_calls] (10)--> awaiting_tools --tools_complete [all_tools_complete]--> ready
/// prompt_executed --truncated [hit_max_tokens] (5)--> end
/// prompt_executed --respond--> end
/// ```
///
/// A turn budget (default 10) ends a run that keeps asking for tools with
/// [`AgentError::TurnBudgetExceeded`], which carries the conversation. A `max_tokens`
/// stop ends the run with [`AgentStatus::MaxTokens`]. Usage is summed per run.
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
/// # Ok::<(), loopstack_llm::AgentError>(()) }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Agent {
    generate: LlmGenerateText,
    delegate: LlmDelegateToolCalls,
    options: GenerateOptions,
    max_turns: u32,
}

/// How an agent run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentStatus {
    /// The model finished its answer (end turn or stop sequence).
    Completed,
    /// The model ran out of output tokens; the answer may be cut short.
    MaxTokens,
    /// The model stopped for another reason, kept as the provider gave it.
    Stopped(StopReason),
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
    pub turns: u32,
    /// Tokens used by all turns.
    pub usage: Usage,
    /// Why the last model turn stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_stop: Option<StopReason>,
    /// How many tool calls the last model turn asked for.
    pub last_tool_calls: usize,
    /// Whether the last batch of tool calls completed, and its error count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_completed: Option<(bool, usize)>,
    /// Set when the run ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AgentStatus>,
    /// The final answer's text, set when the run ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl From<String> for AgentState {
    fn from(prompt: String) -> Self {
        Self { prompt, ..Self::default() }
    }
}

/// What an agent run answered.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AgentReply {
    /// The run, whose documents hold the whole conversation.
    pub run_id: RunId,
    /// The final answer's text.
    pub text: String,
    /// How the run ended.
    pub status: AgentStatus,
    /// Tokens used by all turns.
    pub usage: Usage,
    /// Model turns taken.
    pub turns: u32,
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
        Self {
            generate: LlmGenerateText::new(models, tools.clone()),
            delegate: LlmDelegateToolCalls::new(tools),
            options,
            max_turns: DEFAULT_MAX_TURNS,
        }
    }

    /// Sets the system prompt.
    #[must_use]
    pub fn system(mut self, system: impl Into<String>) -> Self {
        self.options.system = Some(system.into());
        self
    }

    /// Sets the budget of model turns (default 10).
    #[must_use]
    pub fn max_turns(mut self, max_turns: u32) -> Self {
        self.max_turns = max_turns;
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

    /// Replaces the tool-call step, to set its timeout or concurrency.
    #[must_use]
    pub fn delegate(mut self, delegate: LlmDelegateToolCalls) -> Self {
        self.delegate = delegate;
        self
    }

    /// The options of each model turn.
    pub fn options(&self) -> &GenerateOptions {
        &self.options
    }

    /// Runs the agent on `prompt` and returns its answer. The run and its documents
    /// stay in the runtime's store.
    ///
    /// An error from a step comes back as the step's own [`AgentError`]. To keep the
    /// failed run's id and the transition that failed, drive the same workflow yourself:
    /// `runtime.start(&agent, prompt).run_id(id).await` returns the
    /// [`RunError`](loopstack_core::RunError), whose
    /// [`transition_source`](loopstack_core::RunError::transition_source) downcasts to
    /// `AgentError`.
    pub async fn ask(&self, runtime: &Runtime, prompt: impl Into<String>) -> Result<AgentReply, AgentError> {
        let report = runtime.start(self, prompt.into()).await.map_err(|err| match err {
            RunError::Transition { source, .. } if source.is::<AgentError>() => {
                *source.downcast::<AgentError>().expect("checked with is")
            }
            other => AgentError::Run(other),
        })?;
        let state = report.state;
        Ok(AgentReply {
            run_id: report.run_id,
            text: state.output.unwrap_or_default(),
            status: state.status.unwrap_or(AgentStatus::Completed),
            usage: state.usage,
            turns: state.turns,
        })
    }
}

#[workflow(crate = ::loopstack_core, name = "agent", input = String)]
impl Agent {
    /// Saves the user's prompt as the first message.
    #[transition(to = Ready)]
    async fn setup(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        // The prompt lives on in the documents; the state stays small.
        cx.save(&Message::user(std::mem::take(&mut state.prompt)))?;
        Ok(())
    }

    /// One model turn, within the turn budget.
    #[transition(from = Ready, to = PromptExecuted)]
    async fn llm_turn(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        if state.turns >= self.max_turns {
            return Err(AgentError::TurnBudgetExceeded { max_turns: self.max_turns, conversation: conversation(cx)? });
        }
        let result = self.generate.call(cx, &self.options).await?;
        state.turns = state.turns.saturating_add(1);
        state.usage += result.usage;
        state.last_tool_calls = result.message.tool_uses().count();
        state.last_stop = Some(result.stop_reason);
        Ok(())
    }

    /// Runs the tool calls and saves their results.
    #[transition(from = PromptExecuted, to = AwaitingTools, priority = 10)]
    #[guard(has_tool_calls)]
    async fn execute_tool_calls(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let message = last_message(cx)?;
        let result = self.delegate.call(cx, &message, &self.options.tools).await?;
        state.tools_completed = Some((result.all_completed, result.error_count));
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
        state.status = Some(AgentStatus::MaxTokens);
        state.output = Some(last_message(cx)?.text());
        Ok(())
    }

    /// Ends the run with the model's answer.
    #[transition(from = PromptExecuted, to = End)]
    async fn respond(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        state.output = Some(last_message(cx)?.text());
        let stop = state.last_stop.clone().unwrap_or(StopReason::EndTurn);
        state.status = Some(match stop {
            StopReason::EndTurn | StopReason::StopSequence => AgentStatus::Completed,
            other => AgentStatus::Stopped(other),
        });
        Ok(())
    }

    /// Whether the last turn asked for tools: its message has tool calls, whatever
    /// the stop reason (see [`GenerateResult::wants_tools`](crate::GenerateResult::wants_tools)).
    pub fn has_tool_calls(&self, state: &AgentState) -> bool {
        state.last_tool_calls > 0
    }

    /// Whether every call of the last batch has its result.
    pub fn all_tools_complete(&self, state: &AgentState) -> bool {
        state.tools_completed.is_some_and(|(done, _)| done)
    }

    /// Whether the last turn stopped at the output token limit.
    pub fn hit_max_tokens(&self, state: &AgentState) -> bool {
        state.last_stop == Some(StopReason::MaxTokens)
    }
}

/// The last message of the run's conversation: the assistant's, right after a turn.
fn last_message(cx: &RunContext) -> Result<Message, AgentError> {
    match cx.latest::<Message>() {
        Some(message) => Ok(message?),
        None => Err(AgentError::Document(serde::de::Error::custom("the run has no message document"))),
    }
}
