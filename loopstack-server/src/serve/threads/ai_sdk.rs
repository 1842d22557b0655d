//! `POST /ai-sdk/{name}`: a registered agent, served over the AI SDK's UI message
//! stream protocol (version 1), so a page with `useChat` (and its
//! `DefaultChatTransport`) works against it unchanged; `GET
//! /ai-sdk/{name}/{chat id}/stream` resumes a chat's stream after a reconnect.
//!
//! A chat is one run of the agent, found again by the chat's id ([`RunId::from_key`]
//! of `ai-sdk/`, the agent's name and the chat's id):
//!
//! - the chat's first request starts the run with the last user message; a chat
//!   agent ([`Agent::chat`](loopstack_llm::Agent::chat)) takes each later user
//!   message as its next one; an agent that is not a chat answers once per chat;
//! - the agent's tool calls stream as tool parts (`dynamic-tool`, run by the server:
//!   `providerExecuted`), their results as outputs; a call to approve ends the
//!   request with a `tool-approval-request` (its `approvalId` is
//!   `decide_tools:<call id>`, or `resolve_tools:<call id>` for an at-most-once call
//!   a crash left unknown), and the next request's message answers it
//!   (`addToolApprovalResponse`): the approved call runs (`tool-output-available`),
//!   the denied one is `tool-output-denied`;
//! - tools the page runs itself are declared in the request's body as `tools`
//!   (`[{name, description, parameters}]`, sent with the transport's `body`): the
//!   model may call them, the page answers in `onToolCall` with `addToolOutput`, and
//!   the next request carries the output to the model;
//! - the model's text and reasoning stream as text and reasoning parts; each model
//!   turn is a step (`start-step`, `finish-step`).
//!
//! The stream is the run's events, so a chat whose run a worker drives is followed
//! wherever it runs. Secrets are redacted. A request the run cannot take (a
//! regenerated message, a workflow that is not an agent, an answer to nothing that
//! waits) is refused with a 4xx and `{"error": reason}`; a run that fails or stops
//! ends its stream with an `error` part.

use std::collections::{HashMap, HashSet};

use axum::http::HeaderValue;
use loopstack_core::{Definition, RunRecord};
use loopstack_llm::agent::{DECIDE_TOOLS, RESOLVE_TOOLS};
use serde::Deserialize;

use super::wire::{Event, Outcome};
use super::*;
use crate::serve::runs::json_body;
use crate::views::Waits;

/// The body `useChat`'s transport posts.
#[derive(Debug, Deserialize)]
struct ChatRequest {
    /// The chat.
    id: String,
    #[serde(default)]
    messages: Vec<UiMessage>,
    /// `submit-message` or `regenerate-message`.
    #[serde(default)]
    trigger: Option<String>,
    /// The tools the page runs itself (from the transport's `body`).
    #[serde(default)]
    tools: Vec<ToolSpec>,
}

#[derive(Debug, Deserialize)]
struct UiMessage {
    role: String,
    #[serde(default)]
    parts: Vec<Value>,
}

impl UiMessage {
    /// The text parts, joined.
    fn text(&self) -> String {
        let texts = self.parts.iter().filter(|p| p["type"] == "text").filter_map(|p| p["text"].as_str());
        texts.collect::<Vec<_>>().join("")
    }

    /// The tool parts: `tool-<name>` and `dynamic-tool`.
    fn tool_parts(&self) -> impl Iterator<Item = &Value> {
        self.parts.iter().filter(|p| {
            p["type"].as_str().is_some_and(|t| t == "dynamic-tool" || t.starts_with("tool-"))
                && p["toolCallId"].is_string()
        })
    }
}

#[derive(Debug, Deserialize)]
struct ToolSpec {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default, alias = "inputSchema")]
    parameters: Option<Value>,
}

pub(crate) async fn chat(
    State(app): State<App>,
    PathJson(name): PathJson<String>,
    BodyJson(body): BodyJson,
) -> Response {
    let request: ChatRequest = match json_body(&body) {
        Ok(request) => request,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    if request.id.is_empty() {
        return error(StatusCode::BAD_REQUEST, "the chat's `id` must not be empty");
    }
    if request.trigger.as_deref() == Some("regenerate-message") {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "a message is not regenerated: the chat is a durable run; fork the run at an earlier step instead",
        );
    }
    let def = match agent(&app, &name) {
        Ok(def) => def,
        Err(response) => return *response,
    };
    let run_id = chat_run(&name, &request.id);
    let record = match conversation(&app.runtime, run_id).await {
        Ok(record) => record,
        Err(response) => return *response,
    };
    let tools =
        match request.tools.iter().map(|t| client_tool(&t.name, &t.description, t.parameters.as_ref())).collect() {
            Ok(tools) => tools,
            Err(why) => return error(StatusCode::UNPROCESSABLE_ENTITY, why),
        };
    let answers = record.as_ref().map(|r| answers(&app.runtime, r, &request)).transpose();
    let answers = match answers {
        Ok(answers) => answers.unwrap_or_default(),
        Err(why) => return error(StatusCode::UNPROCESSABLE_ENTITY, why),
    };
    let action = match plan(def, record.as_ref(), &request, tools, &answers) {
        Ok(action) => action,
        Err(why) => return error(StatusCode::UNPROCESSABLE_ENTITY, why),
    };
    let (next, source) = match follow(&app.runtime, run_id, record.is_some()).await {
        Ok(found) => found,
        Err(e) => return store_error(&e),
    };
    let encoder = UiStream::new(request.tools.iter().map(|t| t.name.clone()).collect(), answers.denied);
    let labels = [("ai-sdk.chat".to_owned(), request.id.clone())].into();
    let request = Request {
        app,
        def,
        name,
        thread_id: request.id,
        client_run: String::new(),
        run_id,
        known_results: answers.outputs,
        labels,
    };
    with_header(request.respond(action, record, next, source, encoder).into_response())
}

/// `GET /ai-sdk/{name}/{chat}/stream`: the stream of the chat's turn under way, from
/// its beginning (the messages the turn stored, then its events as they come), or
/// 204 when no turn is under way.
pub(crate) async fn resume(State(app): State<App>, PathJson((name, chat)): PathJson<(String, String)>) -> Response {
    let def = match agent(&app, &name) {
        Ok(def) => def,
        Err(response) => return *response,
    };
    let run_id = chat_run(&name, &chat);
    let record = match conversation(&app.runtime, run_id).await {
        Ok(Some(record)) => record,
        Ok(None) => return StatusCode::NO_CONTENT.into_response(),
        Err(response) => return *response,
    };
    let under_way = matches!(record.status, RunStatus::Queued | RunStatus::Running)
        || record.status == RunStatus::Waiting && waits_on_itself(def, &record.place);
    if !under_way {
        return StatusCode::NO_CONTENT.into_response();
    }
    let source = match Source::open(&app.runtime, run_id).await {
        Ok(source) => source,
        Err(e) => return store_error(&e),
    };
    let turn = match app.runtime.store().documents(run_id).await {
        Ok(documents) => Translator::turn_of(&documents),
        Err(e) => return store_error(&e),
    };
    let request = Request {
        app,
        def,
        name,
        thread_id: chat,
        client_run: String::new(),
        run_id,
        known_results: Vec::new(),
        labels: loopstack_core::Labels::new(),
    };
    let encoder = UiStream::new(HashSet::new(), HashSet::new());
    with_header(request.respond(Action::Follow, Some(record), turn, source, encoder).into_response())
}

/// The chat's run.
fn chat_run(name: &str, chat: &str) -> RunId {
    RunId::from_key(&format!("ai-sdk/{name}/{chat}"))
}

/// The registered agent `name`, or the answer that says why not.
fn agent(app: &App, name: &str) -> Result<&'static Definition, Box<Response>> {
    let Some(def) = app.runtime.definition_of(name) else {
        return Err(Box::new(error(StatusCode::NOT_FOUND, format!("no agent named `{name}` is registered"))));
    };
    if !loopstack_llm::agent::takes_decisions(def) {
        return Err(Box::new(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("`{name}` is a workflow, not an agent: the AI SDK's chat serves agents (AG-UI serves both)"),
        )));
    }
    Ok(def)
}

/// The stream's header, which the AI SDK's transport checks for.
fn with_header(mut response: Response) -> Response {
    response.headers_mut().insert("x-vercel-ai-ui-message-stream", HeaderValue::from_static("v1"));
    response
}

/// What the request's last message answers of the calls the run waits on.
#[derive(Debug, Default)]
struct Answers {
    /// The signal that takes the decisions, and the decisions.
    decisions: Option<(&'static str, Vec<Value>)>,
    /// The calls whose results the page gave.
    outputs: Vec<String>,
    /// The calls the page denied.
    denied: HashSet<String>,
}

/// The decisions the request's last message (an assistant message with tool parts
/// answered) gives the calls run `record` waits on.
fn answers(runtime: &Runtime, record: &RunRecord, request: &ChatRequest) -> Result<Answers, String> {
    let mut answers = Answers::default();
    let Some(last) = request.messages.last().filter(|m| m.role == "assistant") else { return Ok(answers) };
    let Some(waits) = Waits::of(runtime, record).map_err(|e| e.to_string())? else { return Ok(answers) };
    let Some(pending) = waits.pending.as_ref().filter(|p| !p.is_empty()) else { return Ok(answers) };
    let signal = if waits.outcome_unknown { RESOLVE_TOOLS } else { DECIDE_TOOLS };
    let mut decisions = Vec::new();
    for part in last.tool_parts() {
        let call_id = part["toolCallId"].as_str().unwrap_or_default();
        let Some(call) = pending.iter().find(|p| p.call_id == call_id) else { continue };
        match part["state"].as_str() {
            Some("approval-responded") if !call.client => {
                let approval = &part["approval"];
                if approval["id"].as_str() != Some(format!("{signal}:{call_id}").as_str()) {
                    return Err(format!("the approval of call `{call_id}` answers a request this run did not make"));
                }
                let Some(approved) = approval["approved"].as_bool() else {
                    return Err(format!("the approval of call `{call_id}` has no `approved`"));
                };
                let reason = approval["reason"].as_str().map(str::to_owned);
                let reason =
                    if approved { reason } else { Some(reason.unwrap_or_else(|| "the user denied the call".into())) };
                if !approved {
                    answers.denied.insert(call_id.to_owned());
                }
                decisions.push(json!({ "call_id": call_id, "approved": approved, "reason": reason }));
            }
            Some(state @ ("output-available" | "output-error")) if call.client => {
                let result = if state == "output-error" {
                    format!("error: {}", part["errorText"].as_str().unwrap_or("the tool failed"))
                } else {
                    crate::views::text(&part["output"])
                };
                answers.outputs.push(call_id.to_owned());
                decisions.push(json!({ "call_id": call_id, "approved": true, "result": result }));
            }
            _ => {}
        }
    }
    if !decisions.is_empty() {
        answers.decisions = Some((signal, decisions));
    }
    Ok(answers)
}

/// What a request does to the chat's run.
fn plan(
    def: &Definition,
    record: Option<&RunRecord>,
    request: &ChatRequest,
    tools: Vec<loopstack_llm::agent::ClientTool>,
    answers: &Answers,
) -> Result<Action, String> {
    let last_user = request.messages.last().filter(|m| m.role == "user").map(UiMessage::text);
    let Some(record) = record else {
        let prompt = last_user
            .ok_or_else(|| format!("`{}` starts with a user message, and the request has none", def.name()))?;
        return Ok(Action::Start(if tools.is_empty() {
            Value::String(prompt)
        } else {
            json!({ "prompt": prompt, "client_tools": tools })
        }));
    };
    Ok(match record.status {
        RunStatus::Queued | RunStatus::Running => Action::Follow,
        RunStatus::Waiting if awaits_user(def, &record.place) => match last_user {
            Some(text) => Action::Signal(
                loopstack_llm::agent::USER_MESSAGE.to_owned(),
                json!({ "text": text, "client_tools": tools }),
            ),
            None => Action::Show,
        },
        RunStatus::Waiting if waits_on_itself(def, &record.place) => Action::Follow,
        RunStatus::Waiting => match &answers.decisions {
            Some((signal, decisions)) => Action::Signal((*signal).to_owned(), json!({ "decisions": decisions })),
            // A new message while calls wait for their answers is not taken: it would
            // be lost, as the run reads none until they are answered.
            None if last_user.is_some() => Action::Refuse(format!(
                "the chat's run {} waits at `{}` for its tool calls to be answered (approve or deny them, or give \
                 the page's tools their output) before it takes another message",
                record.run_id, record.place
            )),
            None => Action::Show,
        },
        _ if last_user.is_some() => Action::Refuse(format!(
            "the chat's run {} ended ({}); a chat is one run of `{}`: start a new chat, or serve a chat agent \
             (`Agent::chat(true)`), whose run waits for the next message",
            record.run_id,
            record.status.as_str(),
            def.name()
        )),
        _ => Action::Show,
    })
}

/// The UI message stream: AG-UI's events as the AI SDK's chunks.
struct UiStream {
    /// The tools the page runs itself: their calls are not `providerExecuted`.
    client_tools: HashSet<String>,
    /// The calls the page denied: their results are `tool-output-denied`.
    denied: HashSet<String>,
    /// Each call's tool and the arguments streamed so far.
    calls: HashMap<String, (String, String)>,
    /// Whether a model turn's step is open.
    step: bool,
}

impl UiStream {
    fn new(client_tools: HashSet<String>, denied: HashSet<String>) -> Self {
        Self { client_tools, denied, calls: HashMap::new(), step: false }
    }

    fn end_step(&mut self, out: &mut Vec<Value>) {
        if std::mem::take(&mut self.step) {
            out.push(json!({ "type": "finish-step" }));
        }
    }

    /// Whether the server runs the tool (the page runs its own).
    fn provider_executed(&self, tool: &str) -> bool {
        !self.client_tools.contains(tool)
    }
}

impl Encoder for UiStream {
    fn encode(&mut self, event: Event, out: &mut Vec<Value>) {
        match event {
            Event::RunStarted { .. } => out.push(json!({ "type": "start" })),
            Event::StepStarted { step_name } if step_name == "llm_turn" => {
                self.end_step(out);
                self.step = true;
                out.push(json!({ "type": "start-step" }));
            }
            Event::TextMessageStart { message_id, .. } => out.push(json!({ "type": "text-start", "id": message_id })),
            Event::TextMessageContent { message_id, delta } => {
                out.push(json!({ "type": "text-delta", "id": message_id, "delta": delta }));
            }
            Event::TextMessageEnd { message_id } => out.push(json!({ "type": "text-end", "id": message_id })),
            Event::ReasoningMessageStart { message_id, .. } => {
                out.push(json!({ "type": "reasoning-start", "id": message_id }));
            }
            Event::ReasoningMessageContent { message_id, delta } => {
                out.push(json!({ "type": "reasoning-delta", "id": message_id, "delta": delta }));
            }
            Event::ReasoningMessageEnd { message_id } => out.push(json!({ "type": "reasoning-end", "id": message_id })),
            Event::ToolCallStart { tool_call_id, tool_call_name, .. } => {
                let mut chunk = json!({ "type": "tool-input-start", "toolCallId": tool_call_id,
                                        "toolName": tool_call_name, "dynamic": true });
                if self.provider_executed(&tool_call_name) {
                    chunk["providerExecuted"] = json!(true);
                }
                out.push(chunk);
                self.calls.insert(tool_call_id, (tool_call_name, String::new()));
            }
            Event::ToolCallArgs { tool_call_id, delta } => {
                if let Some((_, args)) = self.calls.get_mut(&tool_call_id) {
                    args.push_str(&delta);
                }
                out.push(json!({ "type": "tool-input-delta", "toolCallId": tool_call_id, "inputTextDelta": delta }));
            }
            Event::ToolCallEnd { tool_call_id } => {
                let (tool, args) = self.calls.get(&tool_call_id).cloned().unwrap_or_default();
                let mut chunk = match serde_json::from_str::<Value>(if args.is_empty() { "{}" } else { &args }) {
                    Ok(input) => json!({ "type": "tool-input-available", "toolCallId": tool_call_id,
                                         "toolName": tool, "input": input, "dynamic": true }),
                    Err(e) => json!({ "type": "tool-input-error", "toolCallId": tool_call_id, "toolName": tool,
                                      "input": args, "errorText": format!("the arguments are not JSON: {e}"),
                                      "dynamic": true }),
                };
                if self.provider_executed(&tool) {
                    chunk["providerExecuted"] = json!(true);
                }
                out.push(chunk);
            }
            Event::ToolCallResult { tool_call_id, content, is_error, .. } => {
                let chunk = if self.denied.contains(&tool_call_id) {
                    json!({ "type": "tool-output-denied", "toolCallId": tool_call_id })
                } else if is_error {
                    json!({ "type": "tool-output-error", "toolCallId": tool_call_id, "errorText": content,
                            "providerExecuted": true, "dynamic": true })
                } else {
                    json!({ "type": "tool-output-available", "toolCallId": tool_call_id, "output": content,
                            "providerExecuted": true, "dynamic": true })
                };
                out.push(chunk);
            }
            Event::RunFinished { outcome, .. } => {
                let reason = match &outcome {
                    Outcome::Interrupt { interrupts } => {
                        for interrupt in interrupts {
                            match &interrupt.tool_call_id {
                                Some(call) => out.push(json!({ "type": "tool-approval-request",
                                    "approvalId": interrupt.id, "toolCallId": call, "reason": interrupt.message })),
                                None => out.push(json!({ "type": "error", "errorText": interrupt.message })),
                            }
                        }
                        "tool-calls"
                    }
                    Outcome::Success { pending_tool_call_ids } if !pending_tool_call_ids.is_empty() => "tool-calls",
                    Outcome::Success { .. } => "stop",
                    Outcome::Cancelled => "other",
                };
                self.end_step(out);
                out.push(json!({ "type": "finish", "finishReason": reason }));
            }
            Event::RunError { message, .. } => {
                self.end_step(out);
                out.push(json!({ "type": "error", "errorText": message }));
            }
            _ => {}
        }
    }

    fn end(&self) -> Option<&'static str> {
        Some("[DONE]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::threads::wire::Interrupt;

    fn encode(stream: &mut UiStream, events: Vec<Event>) -> Vec<Value> {
        let mut out = Vec::new();
        for event in events {
            stream.encode(event, &mut out);
        }
        out
    }

    fn start(id: &str, tool: &str) -> Event {
        Event::ToolCallStart { tool_call_id: id.into(), tool_call_name: tool.into(), parent_message_id: None }
    }

    #[test]
    fn arguments_that_are_not_json_are_an_input_error_and_the_pages_tools_are_not_provider_executed() {
        let mut stream = UiStream::new(HashSet::from(["confirm".to_owned()]), HashSet::new());
        let out = encode(
            &mut stream,
            vec![
                start("c1", "weather"),
                Event::ToolCallArgs { tool_call_id: "c1".into(), delta: "{\"city\": ".into() },
                Event::ToolCallEnd { tool_call_id: "c1".into() },
                start("c2", "confirm"),
                Event::ToolCallEnd { tool_call_id: "c2".into() },
            ],
        );
        assert_eq!(out[2]["type"], "tool-input-error");
        assert_eq!((&out[2]["input"], out[2]["providerExecuted"].as_bool()), (&json!("{\"city\": "), Some(true)));
        assert!(out[2]["errorText"].as_str().unwrap().starts_with("the arguments are not JSON"));
        // The page's own tool: an empty input is `{}`, and the page runs it.
        assert_eq!((&out[4]["type"], &out[4]["input"]), (&json!("tool-input-available"), &json!({})));
        assert!(out[3].get("providerExecuted").is_none() && out[4].get("providerExecuted").is_none());
    }

    #[test]
    fn results_are_outputs_errors_or_denials_and_a_run_ends_with_its_reason() {
        let mut stream = UiStream::new(HashSet::new(), HashSet::from(["c3".to_owned()]));
        let result = |id: &str, is_error: bool| Event::ToolCallResult {
            message_id: "m".into(),
            tool_call_id: id.into(),
            content: "text".into(),
            role: "tool",
            is_error,
        };
        let interrupt = Interrupt {
            id: "decide_tools:c4".into(),
            reason: "tool_approval",
            message: "Approve?".into(),
            tool_call_id: Some("c4".into()),
            response_schema: None,
            expires_at: None,
        };
        let out = encode(
            &mut stream,
            vec![
                Event::StepStarted { step_name: "llm_turn".into() },
                result("c1", false),
                result("c2", true),
                result("c3", true),
                Event::RunFinished {
                    thread_id: String::new(),
                    run_id: String::new(),
                    result: None,
                    outcome: Outcome::Interrupt { interrupts: vec![interrupt] },
                    usage: Vec::new(),
                },
            ],
        );
        let kinds: Vec<&str> = out.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "start-step",
                "tool-output-available",
                "tool-output-error",
                "tool-output-denied",
                "tool-approval-request",
                "finish-step",
                "finish"
            ]
        );
        assert_eq!((&out[4]["approvalId"], &out[4]["toolCallId"]), (&json!("decide_tools:c4"), &json!("c4")));
        assert_eq!(out[6]["finishReason"], "tool-calls");
        let failed = encode(&mut stream, vec![Event::RunError { message: "down".into(), code: "failed" }]);
        assert_eq!(failed, [json!({"type": "error", "errorText": "down"})]);
        assert_eq!(stream.end(), Some("[DONE]"));
    }
}
