//! `POST /ag-ui/{name}`: a registered agent or workflow, served over AG-UI 1.0.
//!
//! A thread is one run of the workflow, found again by the thread's id (its run id
//! is [`RunId::from_key`] of the workflow's name and the thread's id), so the
//! conversation lives in the store and survives the process:
//!
//! - the thread's first request starts the run: an agent (whose input is text)
//!   with the last user message; another workflow with `forwardedProps.input`, else
//!   the client's `state`, else the last user message's text;
//! - a chat agent ([`Agent::chat`](loopstack_llm::Agent::chat)) waiting for the user
//!   takes the last user message as its next one;
//! - a run that waits for a person ends the request with an interrupt outcome: one
//!   interrupt per tool call to approve (`decide_tools:<call id>`, answered with
//!   `{"approved": bool, "reason"?: string}`), per at-most-once call whose outcome a
//!   crash left unknown (`resolve_tools:<call id>`, answered with `{"approved":
//!   bool, "result"?: string}`), and per signal its place waits for (the signal's
//!   name, with its payload's JSON Schema as `responseSchema`); a timer that leaves
//!   the place is the interrupts' `expiresAt`. The next request's `resume` answers
//!   them: the calls are decided, the one signal resolved is sent with its payload
//!   (the others cancelled), and a run whose every signal is cancelled is cancelled;
//! - a request with nothing new (a client that reloaded) is answered with where the
//!   run stands: its open interrupts again, or its end.
//!
//! The events: `RUN_STARTED` (its `metadata.loopstackRunId` names the run), a step
//! per transition, the model's text, reasoning and tool calls as they stream
//! (and as stored, when they did not), each tool's result, the run's state (a
//! snapshot, then a delta per step), and `RUN_FINISHED` (with the answer as
//! `result`, the token usage per model, and the outcome) or `RUN_ERROR` (a run
//! that failed or stopped: `code` is `failed` or `stopped`; a request that could
//! not be done: `invalid`). They are the run's events, so a thread whose run a
//! worker drives is followed wherever it runs. Secrets are redacted.
//!
//! Tools the client declares (`tools`) are offered to an agent's model as client
//! tools ([`ClientTool`](loopstack_llm::agent::ClientTool)): a call of one ends the
//! request with `pendingToolCallIds`, and the next request's tool message answers it.
//!
//! Not yet: a client cannot rejoin a stream it lost (its next request says where
//! the run stands).

use loopstack_core::{Definition, RunRecord};
use loopstack_llm::agent::{DECIDE_TOOLS, RESOLVE_TOOLS};

use super::wire::{Event, ResumeStatus, RunAgentInput};
use super::*;
use crate::serve::runs::json_body;
use crate::views::Waits;

pub(crate) async fn run(
    State(app): State<App>,
    PathJson(name): PathJson<String>,
    BodyJson(body): BodyJson,
) -> Response {
    let input: RunAgentInput = match json_body(&body) {
        Ok(input) => input,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    if input.thread_id.is_empty() || input.run_id.is_empty() {
        return error(StatusCode::BAD_REQUEST, "`threadId` and `runId` must not be empty");
    }
    let Some(def) = app.runtime.definition_of(&name) else {
        return error(StatusCode::NOT_FOUND, format!("no agent or workflow named `{name}` is registered"));
    };
    let run_id = RunId::from_key(&format!("ag-ui/{name}/{}", input.thread_id));
    let record = match conversation(&app.runtime, run_id).await {
        Ok(record) => record,
        Err(response) => return *response,
    };
    let action = match &record {
        None => match start_input(&app.runtime, def, &input) {
            Ok(value) => Action::Start(value),
            Err(why) => return error(StatusCode::UNPROCESSABLE_ENTITY, why),
        },
        Some(record) => match plan(&app.runtime, def, record, &input) {
            Ok(action) => action,
            Err(why) => return error(StatusCode::UNPROCESSABLE_ENTITY, why),
        },
    };
    let (next, source) = match follow(&app.runtime, run_id, record.is_some()).await {
        Ok(found) => found,
        Err(e) => return store_error(&e),
    };
    let known_results: Vec<String> =
        input.messages.iter().filter(|m| m.role == "tool").filter_map(|m| m.tool_call_id.clone()).collect();
    let labels = [("ag-ui.thread".to_owned(), input.thread_id.clone())].into();
    let request =
        Request { app, def, name, thread_id: input.thread_id, client_run: input.run_id, run_id, known_results, labels };
    request.respond(action, record, next, source, AgUi).into_response()
}

/// AG-UI's encoding: each event as it is.
struct AgUi;

impl Encoder for AgUi {
    fn encode(&mut self, event: Event, out: &mut Vec<Value>) {
        out.push(serde_json::to_value(&event).unwrap_or(Value::Null));
    }
}

/// The input a thread's first request starts the run with.
fn start_input(runtime: &Runtime, def: &Definition, input: &RunAgentInput) -> Result<Value, String> {
    if let Some(value) = input.forwarded_props.as_ref().and_then(|p| p.get("input")) {
        return Ok(value.clone());
    }
    let last_user = last_user_message(input);
    if loopstack_llm::agent::takes_decisions(def) {
        let prompt = last_user
            .ok_or_else(|| format!("`{}` starts with a user message, and the request has none", def.name()))?;
        let tools = client_tools(input)?;
        return Ok(if tools.is_empty() {
            Value::String(prompt)
        } else {
            json!({ "prompt": prompt, "client_tools": tools })
        });
    }
    let takes_text = runtime
        .input_schema_of(def.name())
        .is_some_and(|schema| schema.get("type").and_then(Value::as_str) == Some("string"));
    if takes_text {
        return last_user
            .map(Value::String)
            .ok_or_else(|| format!("`{}` starts with a user message, and the request has none", def.name()));
    }
    let state = input.state.as_ref().filter(|s| !s.is_null() && s.as_object().is_none_or(|o| !o.is_empty()));
    Ok(match (state, last_user) {
        (Some(state), _) => state.clone(),
        (None, Some(text)) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        (None, None) => Value::Null,
    })
}

/// The request's tools, as an agent's client tools.
fn client_tools(input: &RunAgentInput) -> Result<Vec<loopstack_llm::agent::ClientTool>, String> {
    input.tools.iter().map(|t| client_tool(&t.name, &t.description, t.parameters.as_ref())).collect()
}

/// The results the request's tool messages give calls of the client's tools that
/// `waits` has pending: call id and text.
fn client_results(input: &RunAgentInput, waits: &Waits) -> Vec<(String, String)> {
    let pending = waits.pending.as_deref().unwrap_or_default();
    input
        .messages
        .iter()
        .filter(|m| m.role == "tool")
        .filter_map(|m| Some((m.tool_call_id.clone()?, m.text())))
        .filter(|(id, _)| pending.iter().any(|p| p.client && p.call_id == *id))
        .collect()
}

/// The text of the request's last message, when the user wrote it.
fn last_user_message(input: &RunAgentInput) -> Option<String> {
    input.messages.last().filter(|m| m.role == "user").map(wire::InputMessage::text)
}

/// What a request on a thread whose run exists does.
fn plan(runtime: &Runtime, def: &Definition, record: &RunRecord, input: &RunAgentInput) -> Result<Action, String> {
    let resume = input.resume.as_deref().unwrap_or_default();
    match record.status {
        RunStatus::Queued | RunStatus::Running => Ok(Action::Follow),
        RunStatus::Waiting if awaits_user(def, &record.place) => Ok(match last_user_message(input) {
            Some(text) => Action::Signal(
                loopstack_llm::agent::USER_MESSAGE.to_owned(),
                json!({ "text": text, "client_tools": client_tools(input)? }),
            ),
            None => Action::Show,
        }),
        RunStatus::Waiting if waits_on_itself(def, &record.place) => Ok(Action::Follow),
        RunStatus::Waiting => {
            let waits = Waits::of(runtime, record).map_err(|e| e.to_string())?;
            let Some(waits) = waits else {
                return Err(format!("run {} waits for nothing this build knows", record.run_id));
            };
            let results = client_results(input, &waits);
            if resume.is_empty() && results.is_empty() {
                return Ok(Action::Show);
            }
            answer(record, &waits, resume, &results)
        }
        _ if last_user_message(input).is_some() && resume.is_empty() => Ok(Action::Refuse(format!(
            "the thread's run {} ended ({}); a thread is one run of `{}`: start a new thread{}",
            record.run_id,
            record.status.as_str(),
            def.name(),
            if loopstack_llm::agent::takes_decisions(def) {
                ", or serve a chat agent (`Agent::chat(true)`), whose run waits for the next message"
            } else {
                ""
            }
        ))),
        _ => Ok(Action::Show),
    }
}

/// The action a request's resume entries ask of a run that waits.
fn answer(
    record: &RunRecord,
    waits: &Waits,
    resume: &[wire::ResumeEntry],
    results: &[(String, String)],
) -> Result<Action, String> {
    let open = interrupts(record, waits);
    let ids: Vec<&str> = open.iter().map(|i| i.id.as_str()).collect();
    for entry in resume {
        if !ids.contains(&entry.interrupt_id.as_str()) {
            return Err(format!(
                "interrupt `{}` is not open on run {}; the open ones: {}",
                entry.interrupt_id,
                record.run_id,
                ids.join(", ")
            ));
        }
    }
    if let Some(missing) = ids.iter().find(|id| !resume.iter().any(|e| e.interrupt_id == **id)) {
        return Err(format!("interrupt `{missing}` is not answered: a resume answers every open interrupt"));
    }
    if let Some(pending) = waits.pending.as_ref().filter(|p| !p.is_empty()) {
        let signal = if waits.outcome_unknown { RESOLVE_TOOLS } else { DECIDE_TOOLS };
        let mut decisions = Vec::with_capacity(pending.len());
        for call in pending {
            if call.client {
                // Answered by the client's tool message, or still waiting for it.
                if let Some((_, text)) = results.iter().find(|(id, _)| *id == call.call_id) {
                    decisions.push(json!({ "call_id": call.call_id, "approved": true, "result": text }));
                }
                continue;
            }
            let id = format!("{signal}:{}", call.call_id);
            let entry = resume.iter().find(|e| e.interrupt_id == id).expect("every interrupt is answered");
            if call.input.is_some() {
                // The answer to what the call asks is the payload itself; a cancelled
                // interrupt declines it.
                let approved = entry.status == ResumeStatus::Resolved;
                let input = entry.payload.clone().unwrap_or_else(|| json!({}));
                decisions
                    .push(json!({ "call_id": call.call_id, "approved": approved, "input": approved.then_some(input) }));
                continue;
            }
            decisions.push(decision(&call.call_id, entry)?);
        }
        return Ok(Action::Signal(signal.to_owned(), json!({ "decisions": decisions })));
    }
    let resolved: Vec<&wire::ResumeEntry> = resume.iter().filter(|e| e.status == ResumeStatus::Resolved).collect();
    match resolved.as_slice() {
        [] => Ok(Action::Cancel),
        [entry] => {
            let payload = entry.payload.clone().unwrap_or(Value::Null);
            let transition = waits.signals.iter().find(|t| t.name == entry.interrupt_id).expect("an open signal");
            if let Some(schema) = transition.payload_schema.map(|f| f()) {
                let schema = loopstack_core::schema::CompiledSchema::compile(schema)?;
                schema.check(&payload, "the payload")?;
            }
            Ok(Action::Signal(entry.interrupt_id.clone(), payload))
        }
        _ => Err(format!(
            "the run goes on by one signal, and {} were resolved: resolve one and cancel the others",
            resolved.len()
        )),
    }
}

/// A decision on call `call_id` from its resume entry: a cancelled interrupt denies it.
fn decision(call_id: &str, entry: &wire::ResumeEntry) -> Result<Value, String> {
    if entry.status == ResumeStatus::Cancelled {
        return Ok(json!({ "call_id": call_id, "approved": false, "reason": "the user cancelled the call" }));
    }
    let payload = entry.payload.clone().unwrap_or(Value::Null);
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer {
        approved: bool,
        #[serde(default)]
        reason: Option<String>,
        #[serde(default)]
        result: Option<String>,
    }
    let answer: Answer = serde_json::from_value(payload).map_err(|e| {
        format!(
            "the answer to `{}` is not {{\"approved\": bool, \"reason\"?: string, \"result\"?: string}}: {e}",
            entry.interrupt_id
        )
    })?;
    let reason = match (answer.approved, answer.reason) {
        (false, None) => Some("the user denied the call".to_owned()),
        (_, reason) => reason,
    };
    Ok(json!({ "call_id": call_id, "approved": answer.approved, "reason": reason, "result": answer.result }))
}
