//! The agent's transition table: its `#[workflow]` impl, the guards and the
//! helpers its transitions share.

use loopstack_core::{ChildEnded, EventKind, RunContext};
use loopstack_macros::workflow;
use serde_json::Value;

use super::answer::{RESPOND_TOOL, feedback};
use super::{
    Agent, AgentState, AgentStatus, Limit, PendingCall, RaiseLimit, Repeats, ToolDecisions, ToolsCompleted, UserMessage,
};
use crate::context::{ContextPolicy, ContextWindow, estimate_tokens, plan, window_tokens};
use crate::delegate::ToolCallResult;
use crate::error::AgentError;
use crate::message::{Message, StopReason, ToolUse};

use super::steps::{check_decisions, final_status, last_message, shared_conversation};

#[workflow(crate = ::loopstack_core, name = "agent", input = super::AgentInput, definition = Self::table, fork_check = Self::check_fork_settings, on_create = Self::save_prompt)]
impl Agent {
    /// Stops the run before a turn that a limit forbids.
    #[transition(from = [Start, Ready], to = End, priority = 10)]
    #[guard(over_budget)]
    async fn stop_at_limit(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let limit = self.budget_reached(state).expect("checked by the guard");
        tracing::warn!(%limit, "the agent reached a limit");
        self.stop(state, cx, AgentStatus::LimitReached(limit));
        Ok(())
    }

    /// Waits for a raised budget instead of ending the run, when the limits say so.
    #[transition(from = [Start, Ready], to = BudgetSpent, priority = 11)]
    #[guard(pauses_at_budget)]
    async fn pause_at_limit(&self, state: &mut AgentState, _cx: &mut RunContext) -> Result<(), AgentError> {
        let limit = self.budget_reached(state).expect("checked by the guard");
        tracing::info!(%limit, "the agent spent a budget and waits for it to be raised");
        Ok(())
    }

    /// Raises the budgets; the run takes the turn it stopped before (or waits again).
    #[transition(from = BudgetSpent, to = Ready, wait)]
    async fn raise_limit(
        &self,
        state: &mut AgentState,
        _cx: &mut RunContext,
        raise: RaiseLimit,
    ) -> Result<(), AgentError> {
        state.raised = Some(raise.over(state.raised));
        Ok(())
    }

    /// Stops a paused run at the budget it spent.
    #[transition(from = BudgetSpent, to = End, wait)]
    async fn end_at_limit(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let limit = self.budget_reached(state).unwrap_or(Limit::Turns { max: state.turns });
        self.stop(state, cx, AgentStatus::LimitReached(limit));
        Ok(())
    }

    /// Leaves the oldest whole turns out of what is sent (summarized first, with
    /// [`ContextPolicy::Summarize`]) when the next turn's input would pass the
    /// policy's threshold; at most once before each turn.
    #[transition(from = Ready, to = Ready, priority = 5)]
    #[guard(needs_compaction)]
    async fn compact(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let (_, target) = self.context.limits().expect("checked by the guard");
        state.compacted_turn = Some(state.turns);
        let messages = shared_conversation(cx, self.conversation_name())?;
        let current = state.context.clone().unwrap_or_default();
        let Some(from) = plan(&messages, current.from, target) else {
            tracing::warn!(estimate = state.input_estimate, "the conversation cannot be compacted further");
            return Ok(());
        };
        let summary = match self.context {
            ContextPolicy::Summarize { .. } => {
                let left_out = &messages[current.from.max(1)..from];
                let agent = self.active(state)?;
                Some(agent.summarize(&self.prices, state, left_out, current.summary.as_deref()).await?)
            }
            _ => None,
        };
        let window = ContextWindow { from, summary };
        state.input_estimate = window_tokens(&messages, &window);
        tracing::info!(from, estimate = state.input_estimate, "compacted the conversation sent to the model");
        let estimate = state.input_estimate;
        cx.emit(|| EventKind::Custom {
            name: "context_compacted".into(),
            data: serde_json::json!({"from": from, "left_out": from - 1, "estimate": estimate}),
        });
        state.context = Some(window);
        Ok(())
    }

    /// One model turn.
    #[transition(from = [Start, Ready], to = PromptExecuted)]
    async fn llm_turn(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        if !state.prompt.is_empty() {
            // A run stored by a build whose first step saved the prompt (created
            // before `on_create` did): its state still holds it.
            self.save_prompt(state, cx)?;
        }
        let agent = self.active(state)?;
        // A fork's system prompt and model, in place of the agent's. Both it and the
        // extras are boxed: the turn's future holds them while the model answers, in
        // every run in flight, and most turns have neither.
        let forked = state.fork_settings.as_ref().map(|s| Box::new(super::fork::options(&agent.options, s)));
        let options = forked.as_deref().unwrap_or(&agent.options);
        let extras = self.extras(state, agent).map(Box::new);
        let result = agent.generate.turn(cx, options, extras.as_deref().unwrap_or(&crate::generate::NO_EXTRAS)).await?;
        state.turns = state.turns.saturating_add(1);
        state.usage += result.usage;
        if !self.prices.is_empty() {
            let cost = self
                .prices
                .cost(&options.model, &result.usage)
                .or_else(|| self.prices.cost(&result.model, &result.usage));
            state.last_turn_cost = cost.unwrap_or(0.0);
            state.cost += state.last_turn_cost;
            #[cfg(feature = "metrics")]
            if let (Some(metrics), Some(cost)) = (cx.runtime().metrics(), cost) {
                metrics.cost(result.provider, &result.model, cost);
            }
        }
        if self.context.limits().is_some() {
            // The next turn sends what this one did and its reply: the provider's count
            // of this turn's input, or the estimate of the messages, if that is more.
            let reported = result.usage.input_tokens
                + result.usage.cache_read_input_tokens
                + result.usage.cache_creation_input_tokens;
            let messages = shared_conversation(cx, self.conversation_name())?;
            let (reply, sent) = messages.split_last().expect("the turn saved its reply");
            let window = state.context.clone().unwrap_or_default();
            state.input_estimate = reported.max(window_tokens(sent, &window)) + estimate_tokens(reply);
        }
        state.last_stop = Some(result.stop_reason.clone());
        state.answer_error = None;
        state.tools_completed = None;
        state.pending_approval.clear();
        state.denied.clear();
        state.answered.clear();
        state.unknown_outcome.clear();
        state.inputs.clear();
        state.key_step = None;

        if let Some(transfer) = agent.transfer_in(&result.message) {
            // A handoff: the turn's calls are answered by `hand_off`, none is run,
            // and the streak of repeated calls is broken.
            state.handoff = Some(transfer.target.clone());
            state.last_tool_calls = 0;
            state.repeats = Repeats::default();
            return Ok(());
        }

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
        let tools = agent.generate.tools();
        // The client's tools wait for the client's results as calls to approve wait for
        // a person's decision; a tool of the agent's own takes a clashing name.
        let client = |name: &str| {
            !state.client_tools.is_empty()
                && tools.spec(name).is_none()
                && state.client_tools.iter().any(|t| t.name == name)
        };
        state.pending_approval = calls
            .iter()
            .filter(|c| client(&c.name) || tools.spec(&c.name).is_some_and(|s| s.options.approve))
            .map(|c| PendingCall {
                call_id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.input.clone(),
                client: client(&c.name),
                input: None,
            })
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
        // The calls stay unanswered in the stopped run: a retry with more repeats
        // allowed runs them.
        self.stop(state, cx, AgentStatus::RepeatedToolCalls { tools, times });
        Ok(())
    }

    /// Stops the run when the turn's calls would pass the tool-call budget.
    #[transition(from = PromptExecuted, to = End, priority = 35)]
    #[guard(over_tool_limit)]
    async fn stop_at_tool_limit(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let max = self.limits.max_tool_calls.unwrap_or(0);
        let limit = Limit::ToolCalls { max, used: state.tool_calls, asked: state.last_tool_calls as u32 };
        // The calls stay unanswered in the stopped run: a retry with a larger budget
        // runs them.
        self.stop(state, cx, AgentStatus::LimitReached(limit));
        Ok(())
    }

    /// Hands the conversation to the agent the last turn's transfer call names: it
    /// takes the next turn. The turn's calls are answered (the transfer, and the others
    /// as not run); a name the run does not know is an error result, and the agent
    /// that asked goes on.
    #[transition(from = PromptExecuted, to = Ready, priority = 33)]
    #[guard(hands_off)]
    async fn hand_off(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let target = state.handoff.take().expect("checked by the guard");
        let from = self.active(state)?.name();
        let transfer = format!("{}{target}", super::TRANSFER_PREFIX);
        let Some(to) = self.member(&target).map(Self::name) else {
            tracing::warn!(from, to = %target, "a handoff to an agent this run does not know");
            self.answer_calls(cx, |call| {
                if call.name == transfer {
                    (format!("no agent `{target}` takes handoffs in this run; carry on yourself"), true)
                } else {
                    ("not run: the turn asked for a handoff".to_owned(), true)
                }
            })?;
            return self.count_new_input(state, cx);
        };
        tracing::info!(from, to, "the conversation is handed to another agent");
        self.answer_calls(cx, |call| {
            if call.name == transfer {
                (format!("transferred to {to}: {to} takes the conversation from here"), false)
            } else {
                (format!("not run: the conversation was handed to {to}, who decides what to do"), true)
            }
        })?;
        state.agent = (to != self.name()).then(|| to.to_owned());
        cx.emit(|| EventKind::Custom { name: "handoff".into(), data: serde_json::json!({"from": from, "to": to}) });
        self.count_new_input(state, cx)
    }

    /// Ends the run with a typed answer that fits.
    #[transition(from = PromptExecuted, to = End, priority = 30)]
    #[guard(has_valid_answer)]
    async fn accept_answer(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        self.answer_calls(cx, |call| {
            if call.name == RESPOND_TOOL {
                ("answer accepted".to_owned(), false)
            } else {
                ("not run: the final answer was given in the same turn".to_owned(), true)
            }
        })?;
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
        // The `respond` call (and any other) gets its result: the error.
        let answered = self.answer_calls(cx, |call| {
            let content = if call.name == RESPOND_TOOL {
                format!("the answer does not fit the schema: {error}; call `{RESPOND_TOOL}` again with a fixed answer")
            } else {
                "not run: the final answer was given in the same turn".to_owned()
            };
            (content, true)
        })?;
        if !answered {
            self.save(cx, &feedback(&error, !self.structured))?;
        }
        self.count_new_input(state, cx)?;
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

    /// Waits for a person's input to calls that asked for it
    /// ([`ToolOutput::needs_input`](loopstack_core::ToolOutput::needs_input)), once
    /// the batch's calls pending as child runs have ended; `decide_tools` answers them.
    #[transition(from = [Ready, AwaitingTools], to = AwaitingApproval, priority = 60)]
    #[guard(awaits_input)]
    async fn request_input(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        tracing::info!(calls = state.pending_approval.len(), "tool calls wait for a person's input");
        let calls = &state.pending_approval;
        cx.emit(|| EventKind::Custom { name: "input_requested".into(), data: serde_json::json!({"calls": calls}) });
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
        check_decisions(&decisions, &state.pending_approval)?;
        for decision in decisions.decisions {
            let Some(pos) = state.pending_approval.iter().position(|p| p.call_id == decision.call_id) else { continue };
            let call = state.pending_approval.remove(pos);
            decision.apply(call, state);
        }
        Ok(())
    }

    /// Waits for a person to say what happened to at-most-once calls whose outcome
    /// is unknown (a drive died between their intent and their result); none of the
    /// batch runs meanwhile.
    #[transition(from = [AwaitingTools, PromptExecuted], to = AwaitingOutcome, priority = 45)]
    #[guard(outcome_unknown)]
    async fn hold_for_outcome(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        tracing::warn!(calls = state.unknown_outcome.len(), "at-most-once tool calls wait for their outcome");
        let calls = &state.unknown_outcome;
        cx.emit(|| EventKind::Custom { name: "outcome_unknown".into(), data: serde_json::json!({"calls": calls}) });
        Ok(())
    }

    /// What happened to calls whose outcome is unknown, as a person says it: a
    /// decision with a `result` is the call's result (the model reads it, the tool
    /// is not run); an approved one runs the call again; a denied one answers with
    /// its denial. The batch runs once every call has an answer.
    #[transition(from = AwaitingOutcome, to = PromptExecuted, wait)]
    async fn resolve_tools(
        &self,
        state: &mut AgentState,
        _cx: &mut RunContext,
        decisions: ToolDecisions,
    ) -> Result<(), AgentError> {
        check_decisions(&decisions, &state.unknown_outcome)?;
        for decision in decisions.decisions {
            let Some(pos) = state.unknown_outcome.iter().position(|p| p.call_id == decision.call_id) else { continue };
            let call = state.unknown_outcome.remove(pos);
            // Approved: the call runs again in the batch's next step, of this drive,
            // whose commit of this decision is the call's new intent.
            decision.apply(call, state);
        }
        Ok(())
    }

    /// Runs the tool calls (denied ones answer with their denial) and goes straight
    /// back to the model, in one step, when every call completes within it: no tool
    /// of the agent starts a child run or has an at-most-once effect. The step a
    /// batch would take at `awaiting_tools` (`tools_complete`) is not taken: a
    /// checkpoint, a commit and an fsync less per batch.
    #[transition(from = PromptExecuted, to = Ready, priority = 11)]
    #[guard(has_inline_tool_calls)]
    async fn run_tool_calls(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        self.run_batch(state, cx).await?;
        if let Some(pending) = state.pending_tools.first() {
            // A tool without `needs_run` answered with a pending result: this step
            // goes back to the model, which would see no result for the call.
            return Err(AgentError::PendingWithoutRun { call_id: pending.call_id.clone(), tool: pending.name.clone() });
        }
        if !state.pending_approval.is_empty() {
            // Calls wait for a person's input: no results were saved.
            return Ok(());
        }
        self.count_new_input(state, cx)
    }

    /// Runs the tool calls (denied ones answer with their denial) and saves their
    /// results; the run waits at `awaiting_tools` for the calls' child runs, if any.
    #[transition(from = PromptExecuted, to = AwaitingTools, priority = 10)]
    #[guard(has_tool_calls)]
    async fn execute_tool_calls(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        self.run_batch(state, cx).await
    }

    /// The end of a pending call's child run: its result (a child agent's answer,
    /// whose tokens and cost join the run's, see [`AgentTool`](super::AgentTool)). Once the batch has all
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
        // An agent called as a tool answers with its answer, and its usage is the
        // parent's too; any other workflow with what it published.
        let mut output = match super::tool::agent_child_result(cx, &ended).await {
            Some((output, usage, cost)) => {
                state.usage += usage;
                state.cost += cost;
                output
            }
            None => crate::workflow_tool::child_result(&ended, cx.runtime().secrets()),
        };
        // Redacted of the runtime's secrets like every result the delegate gives.
        crate::delegate::redact_output(cx.runtime().secrets(), &mut output);
        if let Some(slot) = state.tool_results.iter_mut().find(|r| r.tool_use_id == pending.call_id) {
            *slot = ToolCallResult::new(pending.call_id, pending.name, output);
        }
        if state.pending_tools.is_empty() && !state.pending_approval.is_empty() {
            // Calls of the batch wait for a person's input: the results so far are
            // kept, and given (not run again) when the batch runs with the answers.
            state.answered =
                std::mem::take(&mut state.tool_results).into_iter().filter(|r| r.input.is_none()).collect();
        } else if state.pending_tools.is_empty() {
            let results = std::mem::take(&mut state.tool_results);
            self.active(state)?.delegate.save_results(cx, &results, self.conversation_name())?;
            let errors = results.iter().filter(|r| r.is_error).count();
            state.tools_completed = Some(ToolsCompleted { all_completed: true, errors });
        }
        Ok(())
    }

    /// Back to the model once every call has its result.
    #[transition(from = AwaitingTools, to = Ready)]
    #[guard(all_tools_complete)]
    async fn tools_complete(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        self.count_new_input(state, cx)
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
        self.save(cx, &Message::user(message.text))?;
        if let Some(tools) = message.client_tools {
            state.client_tools = tools;
        }
        self.count_new_input(state, cx)?;
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

    /// Whether the next turn's input would pass the context policy's threshold, and
    /// the agent has not compacted before this turn yet.
    pub fn needs_compaction(&self, state: &AgentState) -> bool {
        self.context.limits().is_some_and(|(max, _)| state.input_estimate > max)
            && state.compacted_turn != Some(state.turns)
    }

    /// Whether a limit forbids the next turn and the run waits for it to be raised
    /// ([`Limits::pause_at_limit`](crate::Limits::pause_at_limit)).
    pub fn pauses_at_budget(&self, state: &AgentState) -> bool {
        self.limits.pause && self.over_budget(state)
    }

    /// Whether the last turn asked for the calls of the turn before it once too often.
    pub fn repeats_itself(&self, state: &AgentState) -> bool {
        state.last_tool_calls > 0 && state.repeats.times > self.limits.max_repeats.saturating_add(1)
    }

    /// Whether running the last turn's calls would pass the tool-call budget.
    pub fn over_tool_limit(&self, state: &AgentState) -> bool {
        self.limits.max_tool_calls.is_some_and(|max| state.tool_calls as usize + state.last_tool_calls > max as usize)
    }

    /// Whether the last turn asked to hand the conversation to another agent.
    pub fn hands_off(&self, state: &AgentState) -> bool {
        state.handoff.is_some()
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

    /// Whether at-most-once calls of the last batch have an unknown outcome.
    pub fn outcome_unknown(&self, state: &AgentState) -> bool {
        !state.unknown_outcome.is_empty()
    }

    /// Whether calls of the last turn wait for a person's decision.
    pub fn needs_approval(&self, state: &AgentState) -> bool {
        !state.pending_approval.is_empty()
    }

    /// Whether calls of the last batch wait for a person's input, and no call of it
    /// waits for a child run.
    pub fn awaits_input(&self, state: &AgentState) -> bool {
        !state.pending_approval.is_empty() && state.pending_tools.is_empty()
    }

    /// Whether the last turn asked for tools: its message has tool calls, whatever
    /// the stop reason (see [`GenerateResult::wants_tools`](crate::GenerateResult::wants_tools)).
    pub fn has_tool_calls(&self, state: &AgentState) -> bool {
        state.last_tool_calls > 0
    }

    /// Whether the last turn asked for tools and every call completes within the
    /// step that runs it: the agent taking the turn has no tool that starts a child
    /// run or has an at-most-once effect.
    pub fn has_inline_tool_calls(&self, state: &AgentState) -> bool {
        self.has_tool_calls(state) && self.active(state).is_ok_and(|agent| agent.tools_complete_inline)
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
