//! Forks of agent runs with another system prompt or model ([`Agent::fork_with`]).

use loopstack_core::{ForkEdits, ForkError, ForkSettings, RunId, Runtime};

use super::{Agent, AgentReply, AskError};
use crate::generate::GenerateOptions;

/// The options of a fork's turns: the agent's, with the fork's system prompt and
/// model in place of its own.
pub(super) fn options(own: &GenerateOptions, settings: &ForkSettings) -> GenerateOptions {
    let mut options = own.clone();
    if let Some(system) = &settings.system {
        options.settings.system = Some(system.clone());
    }
    if let (Some(provider), Some(model)) = (&settings.provider, &settings.model) {
        options.provider.clone_from(provider);
        options.model.clone_from(model);
    }
    options
}

impl Agent {
    /// A what-if with edits: a new run from step `step` of run `source`, as
    /// [`Agent::fork`], with `edits` applied first (see
    /// [`loopstack_core::fork`]): a replaced state, another system prompt or another
    /// model for the fork's turns. The prompt and model are kept in the fork's state
    /// ([`AgentState::fork_settings`](crate::AgentState::fork_settings)), so the
    /// fork keeps them when it is resumed after a restart. A provider this agent has
    /// no model for is refused before anything is stored
    /// ([`ForkError::UnknownModel`]), also when the fork is made by name
    /// ([`Runtime::fork_by_name`]: the HTTP API, the command line).
    ///
    /// ```
    /// use loopstack_core::{ForkEdits, Runtime, ToolRegistry};
    /// use loopstack_llm::{Agent, ChatRequest, ScriptedModel};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let model = ScriptedModel::from_fn(|r: &ChatRequest| {
    ///     Ok(ScriptedModel::new().text_response(format!("({})", r.settings.system.as_deref().unwrap_or(""))))
    /// });
    /// let agent = Agent::new(model, "m", ToolRegistry::new()).system("terse");
    /// let runtime = Runtime::new();
    /// let first = agent.ask(&runtime, "Hi").await?;
    /// // From step 0: the run as created, its prompt saved and no turn taken.
    /// let fork = agent.fork_with(&runtime, first.run_id, 0, ForkEdits::new().system("chatty")).await?;
    /// assert_eq!((first.text.as_str(), fork.text.as_str()), ("(terse)", "(chatty)"));
    /// # Ok::<(), loopstack_llm::AskError>(()) }).unwrap();
    /// ```
    pub async fn fork_with(
        &self,
        runtime: &Runtime,
        source: RunId,
        step: u64,
        edits: ForkEdits,
    ) -> Result<AgentReply, AskError> {
        Ok(self.reply_of(runtime.fork_with(self, source, step, edits).await?))
    }

    /// Refuses a fork's provider that this agent has no model for: its
    /// `#[workflow(fork_check)]`.
    pub(super) fn check_fork_settings(&self, settings: &ForkSettings) -> Result<(), ForkError> {
        match &settings.provider {
            Some(provider) if self.generate.models().get(provider).is_err() => Err(ForkError::UnknownModel {
                provider: provider.clone(),
                registered: self.generate.models().providers(),
            }),
            _ => Ok(()),
        }
    }
}
