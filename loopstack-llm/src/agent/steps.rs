//! What the agent's transitions share: counting new input, summarizing for the
//! context policy, applying approval decisions, and reading the conversation.

use std::sync::Arc;

use loopstack_core::{InputAnswer, InputResponse, RunContext, ToolOutput};

use super::{
    Agent, AgentState, AgentStatus, Limit, PendingCall, PendingTool, ToolDecision, ToolDecisions, ToolsCompleted,
};
use crate::context::{SUMMARY_PROMPT, estimate_tokens, summary_input};
use crate::delegate::{ToolCallResult, ToolDenial};
use crate::error::AgentError;
use crate::message::{Message, StopReason};

impl Agent {
    /// Saves the user's prompt as the conversation's first message when the run is
    /// created ([`Workflow::on_create`](loopstack_core::Workflow::on_create)): it is a
    /// document from step 0, and the state keeps none of it.
    pub(super) fn save_prompt(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let prompt = Message::user(std::mem::take(&mut state.prompt));
        if !self.prompt_images.is_empty() {
            // Saved once, as image documents the message refers to.
            let prompt = Message { content: [prompt.content, self.prompt_image_blocks()].concat(), ..prompt };
            crate::image::save_with_images(cx, prompt, self.conversation_name(), Default::default())?;
            return Ok(());
        }
        crate::generate::save_shared_message(cx, Arc::new(prompt), self.conversation_name(), Default::default())?;
        Ok(())
    }

    /// Runs the last turn's tool calls (denied ones answer with their denial, answered
    /// ones with their answer) and saves their results once all have one; calls whose
    /// child runs have not ended are kept in the state, and at-most-once calls whose
    /// outcome a dead drive left unknown stop the batch before anything runs.
    pub(super) async fn run_batch(&self, state: &mut AgentState, cx: &mut RunContext) -> Result<(), AgentError> {
        let message = last_message(cx, self.conversation_name())?;
        let agent = self.active(state)?;
        let denied = std::mem::take(&mut state.denied);
        let answered = std::mem::take(&mut state.answered);
        // The state as JSON only when a tool's input mapping may read it.
        let snapshot = if agent.tools_need_state { Some(Arc::new(serde_json::to_value(&*state)?)) } else { None };
        let inputs = std::mem::take(&mut state.inputs);
        let mut options =
            crate::CallOptions::new().denied(&denied).conversation(self.conversation_name()).inputs(&inputs);
        if let Some(snapshot) = &snapshot {
            options = options.state(snapshot);
        }
        if !answered.is_empty() {
            options = options.answered(&answered);
        }
        if let Some(step) = state.key_step {
            options = options.key_step(step);
        }
        let result = agent.delegate.call_with(cx, &message, &agent.options.tools, &options).await?;
        if !result.unknown_outcome.is_empty() {
            // Nothing ran: the batch waits for what happened to these calls, keeping
            // its denials, its answers and its first attempt's step (its keys).
            state.unknown_outcome = result.unknown_outcome;
            state.denied = denied;
            state.answered = answered;
            state.key_step.get_or_insert(cx.step() + 1);
            state.tools_completed = None;
            return Ok(());
        }
        let run = result.results.len().saturating_sub(denied.len() + answered.len());
        state.tool_calls = state.tool_calls.saturating_add(u32::try_from(run).unwrap_or(u32::MAX));
        // Calls that run on as child runs: their results come with the children's ends.
        let pending_tools = |results: &[ToolCallResult]| -> Vec<PendingTool> {
            results
                .iter()
                .filter_map(|r| {
                    let child = r.pending?;
                    Some(PendingTool { call_id: r.tool_use_id.clone(), name: r.name.clone(), child })
                })
                .collect()
        };
        let asking: Vec<&ToolCallResult> = result.results.iter().filter(|r| r.input.is_some()).collect();
        if !asking.is_empty() {
            // Calls that ask a person for input: the run waits for the answers (at
            // `awaiting_approval`, once calls pending as child runs have ended), then
            // runs them again; the batch's other results are kept, not run again.
            let calls: Vec<_> = message.tool_uses().collect();
            state.pending_approval = asking
                .iter()
                .map(|r| PendingCall {
                    call_id: r.tool_use_id.clone(),
                    name: r.name.clone(),
                    arguments: calls
                        .iter()
                        .find(|c| c.id == r.tool_use_id)
                        .map(|c| c.input.clone())
                        .unwrap_or_default(),
                    client: false,
                    input: r.input.as_deref().cloned(),
                })
                .collect();
            tracing::info!(calls = state.pending_approval.len(), "tool calls wait for a person's input");
            state.key_step.get_or_insert(options.key_step.unwrap_or(cx.step() + 1));
            state.tools_completed = None;
            state.pending_tools = pending_tools(&result.results);
            if state.pending_tools.is_empty() {
                state.answered = result.results.into_iter().filter(|r| r.input.is_none()).collect();
            } else {
                state.tool_results = result.results;
            }
            return Ok(());
        }
        state.key_step = None;
        state.tools_completed =
            Some(ToolsCompleted { all_completed: result.all_completed, errors: result.error_count });
        if !result.all_completed {
            state.pending_tools = pending_tools(&result.results);
            state.tool_results = result.results;
            tracing::info!(pending = state.pending_tools.len(), "tool calls wait for their child runs");
        }
        Ok(())
    }

    /// Adds the newest message (tool results, a user's message) to the estimate of the
    /// next turn's input, with a context policy.
    pub(super) fn count_new_input(&self, state: &mut AgentState, cx: &RunContext) -> Result<(), AgentError> {
        if self.context.limits().is_some() {
            state.input_estimate += estimate_tokens(&*last_message(cx, self.conversation_name())?);
        }
        Ok(())
    }

    /// Summarizes the turns left out (and the summary before them) with the agent's
    /// model, or the next of its fallback chain when one is unavailable (as a turn
    /// falls back); its tokens and cost (by the run's `prices`) are the run's.
    pub(super) async fn summarize(
        &self,
        prices: &super::Prices,
        state: &mut AgentState,
        left_out: &[Arc<Message>],
        previous: Option<&str>,
    ) -> Result<String, AgentError> {
        let input = summary_input(previous, left_out);
        let first = (&self.options.provider, &self.options.model);
        let chain = std::iter::once(first).chain(self.options.fallbacks.iter().map(|f| (&f.provider, &f.model)));
        let mut failures = Vec::new();
        for (provider, model_name) in chain {
            let model = self.generate.models().get(provider)?;
            let request = crate::ChatRequest::new(model_name.clone(), vec![Message::user(input.clone())])
                .system(SUMMARY_PROMPT)
                .max_tokens(1024);
            match model.chat(&request).await {
                Ok(response) => {
                    state.usage += response.usage;
                    if let Some(cost) = prices.cost(model_name, &response.usage) {
                        state.cost += cost;
                    }
                    return Ok(response.message.text());
                }
                Err(error) if self.options.fallbacks.is_empty() || failures.is_empty() && !error.is_unavailable() => {
                    return Err(error.into());
                }
                Err(error) => {
                    let unavailable = error.is_unavailable();
                    tracing::warn!(%error, provider, model = %model_name, "the summary's model failed");
                    failures.push(error);
                    if !unavailable {
                        break;
                    }
                }
            }
        }
        Err(AgentError::AllModelsFailed { failures })
    }

    /// The limit that forbids the next turn, if any: the agent's limits, or those a
    /// `raise_limit` signal set. The cost budget counts the next turn at what the last
    /// one cost, so a run stops before the turn that would pass it.
    pub(super) fn budget_reached(&self, state: &AgentState) -> Option<Limit> {
        let (limits, raised) = (&self.limits, state.raised.unwrap_or_default());
        let max_turns = raised.max_turns.unwrap_or(limits.max_turns);
        if state.turns >= max_turns {
            return Some(Limit::Turns { max: max_turns });
        }
        let used = state.usage.all_tokens();
        if let Some(max) = raised.max_total_tokens.or(limits.max_total_tokens)
            && used >= max
        {
            return Some(Limit::TotalTokens { max, used });
        }
        if let Some(max) = raised.max_cost.or(limits.max_cost)
            // (A turn that lands on the budget exactly does not pass it.)
            && state.cost + state.last_turn_cost > max + max.abs() * 1e-9
        {
            return Some(Limit::Cost { max, spent: state.cost });
        }
        None
    }
}

/// Refuses decisions that name a call twice or a call that does not wait in `pending`.
pub(super) fn check_decisions(decisions: &ToolDecisions, pending: &[PendingCall]) -> Result<(), AgentError> {
    for (i, decision) in decisions.decisions.iter().enumerate() {
        if decisions.decisions[..i].iter().any(|d| d.call_id == decision.call_id) {
            return Err(AgentError::DuplicateDecision { call_id: decision.call_id.clone() });
        }
    }
    if let Some(unknown) = decisions.decisions.iter().find(|d| !pending.iter().any(|p| p.call_id == d.call_id)) {
        return Err(AgentError::NotPending {
            call_id: unknown.call_id.clone(),
            pending: pending.iter().map(|p| p.call_id.clone()).collect(),
        });
    }
    // An answer to a call that asks for input fits what it asks.
    for decision in decisions.decisions.iter().filter(|d| d.approved && d.result.is_none()) {
        let Some(request) = pending.iter().find(|p| p.call_id == decision.call_id).and_then(|p| p.input.as_ref())
        else {
            continue;
        };
        let invalid = |reason: String| AgentError::InvalidInput { call_id: decision.call_id.clone(), reason };
        let schema = loopstack_core::schema::CompiledSchema::compile(request.schema.clone()).map_err(invalid)?;
        let answer = decision.input.clone().unwrap_or_else(|| serde_json::json!({}));
        schema.check(&answer, "the input").map_err(invalid)?;
    }
    Ok(())
}

impl ToolDecision {
    /// Records the decision on `call`: a given result answers it, a denial denies
    /// it, an approval lets it run.
    pub(super) fn apply(self, call: PendingCall, state: &mut AgentState) {
        if let Some(result) = self.result {
            state.answered.push(ToolCallResult::new(call.call_id, call.name, ToolOutput::text(result)));
        } else if let Some(request) = call.input {
            // The call runs again with the answer: what was asked, or a refusal.
            let response = if self.approved {
                InputResponse::Accept(self.input.unwrap_or_else(|| serde_json::json!({})))
            } else {
                InputResponse::Decline
            };
            state.inputs.push(crate::CallInput::new(call.call_id, InputAnswer::new(request, response)));
        } else if call.client && self.approved {
            // The agent cannot run the client's tool: without the client's result the
            // model reads that it got none.
            let error = format!("the client gave no result for its tool `{}`", call.name);
            state.answered.push(ToolCallResult::new(call.call_id, call.name, ToolOutput::error(error)));
        } else if !self.approved {
            state.denied.push(ToolDenial::new(call.call_id, self.reason));
        }
    }
}

/// How a turn without tool calls ends the run.
pub(super) fn final_status(state: &AgentState, text: &str) -> AgentStatus {
    AgentStatus::of_answer(state.last_stop.as_ref().unwrap_or(&StopReason::EndTurn), text)
}

/// The last message of the conversation: the assistant's, right after a turn.
impl Agent {
    /// The table this agent runs under: the macro's (`agent`), or the one renamed
    /// for [`Agent::named`]; marked as an agent's either way, for its runs' spans.
    pub(super) fn table(&self, default: &'static loopstack_core::Definition) -> &'static loopstack_core::Definition {
        // Looked up once: every step of an agent's run asks for its table.
        static AGENT: std::sync::OnceLock<&'static loopstack_core::Definition> = std::sync::OnceLock::new();
        self.table.unwrap_or_else(|| AGENT.get_or_init(|| default.as_agent()))
    }
}

/// The messages of the conversation, shared (not copied).
pub(super) fn shared_conversation(
    cx: &RunContext,
    conversation: Option<&str>,
) -> Result<Vec<Arc<Message>>, AgentError> {
    let docs = cx.documents().iter().filter(|d| crate::generate::in_conversation(d, conversation));
    Ok(docs.map(|d| cx.read_shared::<Message>(d)).collect::<Result<_, _>>()?)
}

pub(super) fn last_message(cx: &RunContext, conversation: Option<&str>) -> Result<Arc<Message>, AgentError> {
    let doc = cx.documents().iter().rev().find(|d| crate::generate::in_conversation(d, conversation));
    match doc {
        Some(doc) => Ok(cx.read_shared(doc)?),
        None => Err(AgentError::Document(serde::de::Error::custom("the run has no message document"))),
    }
}
