//! Running an agent: asking it, deciding its calls, talking on, resuming, forking.

use super::*;

impl Agent {
    /// Runs the agent on `prompt` and returns its answer, or where it waits (for
    /// approval, or in a chat for the user). The run and its documents stay in the
    /// runtime's store.
    pub async fn ask(&self, runtime: &Runtime, prompt: impl Into<String>) -> Result<AgentReply, AskError> {
        Ok(self.reply_of(runtime.start(self, super::AgentInput::new(prompt)).await?))
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
        let message = UserMessage::new(text);
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
    /// // The same run from step 0 (as created: the prompt saved, no turn taken) under
    /// // another prompt.
    /// let chatty = Agent::new(model, "m", ToolRegistry::new()).system("chatty");
    /// let fork = chatty.fork(&runtime, first.run_id, 0).await?;
    /// assert_eq!((first.text.as_str(), fork.text.as_str()), ("(terse)", "(chatty)"));
    /// let record = runtime.store().load_run(fork.run_id).await?;
    /// assert_eq!(record.forked_from, Some((first.run_id, 0)));
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
    pub(super) fn extras(&self, state: &AgentState, agent: &Self) -> Option<TurnExtras> {
        let team = self.has_team();
        if self.answer.is_none() && state.context.is_none() && !team && state.client_tools.is_empty() {
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
        let own = agent.generate.tools();
        extras.tools.extend(state.client_tools.iter().filter(|t| own.spec(&t.name).is_none()).map(|t| t.definition()));
        extras.context.clone_from(&state.context);
        if team {
            extras.agent = Some(agent.name());
        }
        Some(extras)
    }

    pub(super) fn conversation_name(&self) -> Option<&str> {
        self.options.conversation.as_deref()
    }

    /// Answers every call of the last turn with `text` as an error result, so the
    /// conversation stays valid when the run stops before running them.
    pub(super) fn answer_unrun(&self, cx: &mut RunContext, text: &str) -> Result<(), AgentError> {
        self.answer_calls(cx, |_| (text.to_owned(), true)).map(drop)
    }

    /// Answers every call of the last turn without running it, with the text and
    /// error flag `answer` gives for it, in one tool-result message; `false` (and
    /// nothing saved) when the turn has no calls.
    pub(super) fn answer_calls(
        &self,
        cx: &mut RunContext,
        answer: impl Fn(&ToolUse) -> (String, bool),
    ) -> Result<bool, AgentError> {
        let message = steps::last_message(cx, self.conversation_name())?;
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
    pub(super) fn save(&self, cx: &mut RunContext, message: &Message) -> Result<(), AgentError> {
        save_message(cx, message, self.conversation_name(), Default::default())?;
        Ok(())
    }

    pub(super) fn end(&self, state: &mut AgentState, status: AgentStatus) {
        tracing::info!(?status, turns = state.turns, "agent run ends");
        state.status = Some(status);
    }

    /// Stops the run at a limit or a safety stop: its status is `stopped`, with
    /// `status` in words as its error, and nothing of this step is stored
    /// ([`RunContext::stop`]), so a retry after raising the limit takes the step
    /// again. The caller's reply says `status`.
    pub(super) fn stop(&self, state: &mut AgentState, cx: &mut RunContext, status: AgentStatus) {
        cx.stop(status.stop_reason());
        self.end(state, status);
    }
}
