//! Handoffs: an agent hands the conversation to another named agent, which takes
//! the next turns of the same run.

use std::collections::BTreeMap;
use std::sync::Arc;

use loopstack_core::{RegistryError, ToolDefinition, is_valid_tool_name};
use serde_json::json;

use super::{Agent, AgentState, AgentToolError};
use crate::error::AgentError;

/// The prefix of the tools that hand the conversation to another agent: the model
/// of an agent with a handoff to `billing` is offered `transfer_to_billing`.
pub const TRANSFER_PREFIX: &str = "transfer_to_";

/// One handoff an agent offers: the target's name and the tool that hands to it.
#[derive(Debug, Clone)]
pub(super) struct Transfer {
    pub(super) target: String,
    pub(super) spec: Arc<ToolDefinition>,
}

/// The handoffs of an agent: the ones it offers itself, and every agent a run that
/// starts with it may be handed to (its targets, theirs and so on), by name.
#[derive(Debug, Clone, Default)]
pub(super) struct Handoffs {
    pub(super) offered: Vec<Transfer>,
    pub(super) team: Arc<BTreeMap<&'static str, Agent>>,
}

impl Agent {
    /// Lets the model hand the conversation to `target`, a [named](Agent::named)
    /// agent: it is offered a tool `transfer_to_<name>` described by `description`
    /// (what the target does, for the model to choose by), and a call to it makes
    /// the target answer the next turns of the same run, with the conversation so far.
    ///
    /// - **The run**: stays a run of this agent's workflow (it is this agent that is
    ///   registered and resumed); the target is not registered for it. Which agent
    ///   takes the turns is [`AgentState::agent`], kept in every checkpoint, so a run
    ///   resumed after a crash goes on with the agent it was handed to; the
    ///   assistant messages say who wrote them (metadata `agent`), a
    ///   `handoff` event (from, to) is emitted, and Studio shows both.
    /// - **What the target brings**: its model, fallbacks, settings (its system
    ///   prompt), tools and their approvals, and its own handoffs (so a chain
    ///   triage → billing → refunds works; see [`Agent::handoff_by_name`] for a
    ///   handoff back). **What stays the run's** (this agent's): the limits, which
    ///   count every turn of every agent, so a handoff loop stops at the turn budget;
    ///   the prices; chat; the typed answer; the context policy; the conversation's name.
    /// - The turn with the transfer call is answered for the model: the call with
    ///   `transferred to <name>`, any other call of that turn with an error result
    ///   saying it was not run, for the target to decide on.
    ///
    /// ```
    /// use loopstack_core::{Runtime, ToolRegistry};
    /// use loopstack_llm::{Agent, ScriptedModel};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// // One script for the conversation, whichever agent takes the turn.
    /// let model = ScriptedModel::new()
    ///     .tool_call("transfer_to_billing", serde_json::json!({}))
    ///     .text("You paid 20 EUR.")
    ///     .record_requests(true);
    /// let billing = Agent::new(model.clone(), "m", ToolRegistry::new())
    ///     .system("You answer billing questions.")
    ///     .named("billing")?;
    /// let triage = Agent::new(model.clone(), "m", ToolRegistry::new())
    ///     .named("triage")?
    ///     .handoff(&billing, "Answers questions about payments and invoices.")?;
    /// let runtime = Runtime::new().try_register(triage.clone())?;
    /// let reply = triage.ask(&runtime, "What did I pay?").await?;
    /// assert_eq!((reply.text.as_str(), reply.agent.as_str()), ("You paid 20 EUR.", "billing"));
    /// // The second turn was billing's: its system prompt, and the conversation so far.
    /// let second = &model.requests()[1];
    /// assert_eq!(second.settings.system.as_deref(), Some("You answer billing questions."));
    /// assert_eq!(second.messages.len(), 3, "the question, the transfer call and its result");
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`AgentToolError::UnnamedHandoff`] when `target` has no name,
    /// [`AgentToolError::Name`] when `transfer_to_<name>` is not a valid tool name (the
    /// name is longer than 52 characters), is a tool of this agent's already, or names
    /// a handoff this agent has, and [`AgentToolError::HandoffToSelf`] when `target`
    /// has this agent's name.
    pub fn handoff(mut self, target: &Self, description: impl Into<String>) -> Result<Self, AgentToolError> {
        if target.table.is_none() {
            return Err(AgentToolError::UnnamedHandoff);
        }
        let name = target.name();
        self.offer_transfer(name, description.into())?;
        let team = Arc::make_mut(&mut self.handoffs.team);
        // The target's own team first, so the target itself wins over a copy of it
        // in there.
        for (n, agent) in target.handoffs.team.iter() {
            team.entry(n).or_insert_with(|| agent.clone());
        }
        team.insert(name, target.clone());
        Ok(self)
    }

    /// Lets the model hand the conversation to the agent named `name`, which must be
    /// the agent the run starts with or in its team (see [`Agent::handoff`]) when the
    /// run gets there: for a handoff back (billing to triage, when triage hands to
    /// billing), which an agent built before the one it hands back to cannot name
    /// by value. A transfer to a name the run does not know is answered with an error
    /// result, and the agent that called it goes on.
    ///
    /// ```
    /// use loopstack_core::{Runtime, ToolRegistry};
    /// use loopstack_llm::{Agent, ScriptedModel};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let model = ScriptedModel::new()
    ///     .tool_call("transfer_to_billing", serde_json::json!({}))
    ///     .tool_call("transfer_to_triage", serde_json::json!({}))
    ///     .text("Anything else?");
    /// let billing = Agent::new(model.clone(), "m", ToolRegistry::new())
    ///     .named("billing")?
    ///     .handoff_by_name("triage", "Takes every question that is not about billing.")?;
    /// let triage = Agent::new(model, "m", ToolRegistry::new()).named("triage")?.handoff(&billing, "Billing.")?;
    /// let reply = triage.ask(&Runtime::new().try_register(triage.clone())?, "Hi").await?;
    /// assert_eq!((reply.agent.as_str(), reply.turns), ("triage", 3));
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`Agent::handoff`].
    pub fn handoff_by_name(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> Result<Self, AgentToolError> {
        let name = name.into();
        if !is_valid_tool_name(&name) {
            return Err(RegistryError::InvalidName(name).into());
        }
        self.offer_transfer(&name, description.into())?;
        Ok(self)
    }

    fn offer_transfer(&mut self, target: &str, description: String) -> Result<(), AgentToolError> {
        if target == self.name() {
            return Err(AgentToolError::HandoffToSelf { name: target.to_owned() });
        }
        let tool = format!("{TRANSFER_PREFIX}{target}");
        if !is_valid_tool_name(&tool) {
            return Err(RegistryError::InvalidName(tool).into());
        }
        let taken =
            self.generate.tools().spec(&tool).is_some() || self.handoffs.offered.iter().any(|t| t.spec.name == tool);
        if taken {
            return Err(RegistryError::Duplicate { name: tool, existing: "a tool", new: "a handoff" }.into());
        }
        let schema = json!({"type": "object", "properties": {}});
        let spec = Arc::new(ToolDefinition::new(tool, description, schema));
        self.handoffs.offered.push(Transfer { target: target.to_owned(), spec });
        Ok(())
    }

    /// The agent that takes the run's turns: this one, or the one the run was handed to.
    pub(super) fn active(&self, state: &AgentState) -> Result<&Self, AgentError> {
        match state.agent.as_deref() {
            None => Ok(self),
            Some(name) => self.member(name).ok_or_else(|| AgentError::UnknownAgent {
                agent: name.to_owned(),
                known: std::iter::once(self.name()).chain(self.handoffs.team.keys().copied()).map(Into::into).collect(),
            }),
        }
    }

    /// This agent, or the agent of its team, named `name`.
    pub(super) fn member(&self, name: &str) -> Option<&Self> {
        if name == self.name() { Some(self) } else { self.handoffs.team.get(name) }
    }

    /// The handoff a turn's message asks for, among those `self` offers: the first
    /// transfer call's target.
    pub(super) fn transfer_in<'a>(&'a self, message: &crate::Message) -> Option<&'a Transfer> {
        if self.handoffs.offered.is_empty() {
            return None;
        }
        message.tool_uses().find_map(|call| self.handoffs.offered.iter().find(|t| t.spec.name == call.name))
    }

    /// Whether the run may be handed to another agent, so turns record who took them.
    pub(super) fn has_team(&self) -> bool {
        !self.handoffs.offered.is_empty() || !self.handoffs.team.is_empty()
    }
}
