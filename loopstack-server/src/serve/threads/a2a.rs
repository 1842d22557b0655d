//! A2A 1.0 (feature `a2a`): the registered agents as A2A agents, over the
//! protocol's JSON-RPC binding.
//!
//! - `GET /a2a/{name}/.well-known/agent-card.json`: agent `name`'s card (its
//!   description as its one skill, streaming, the bearer token when the server
//!   has one), whose interface is `POST /a2a/{name}`.
//! - `GET /.well-known/agent-card.json`: the deployment's card, every served
//!   agent a skill, whose interface is `POST /a2a`: a request there names its
//!   agent by `tenant` (or the message's `metadata.skill`); with one agent served,
//!   that one.
//!
//! A task is a run of the agent: its id is the run's, so a task lives in the store,
//! outlives the process and shows in Studio. A message without a task starts one
//! (its run's id is [`RunId::from_key`] of the agent and the message's id, so a
//! client that sends a message again after a lost answer gets the same task, not
//! a second run); its context id, the client's or a new one, is kept with the run
//! as label [`CONTEXT_LABEL`]. A run that waits for a person is `input-required`:
//! the status message says which calls wait for a decision (a data part with
//! their ids, arguments and the answer's schema), and the next message on the task
//! answers them (a data part `{"approved": bool, "reason"?, "result"?, "call_id"?}`,
//! a list of them, or the text `approve` or `deny`). A chat agent
//! ([`Agent::chat`](loopstack_llm::Agent::chat)) that answered is `input-required`
//! too, its answer the status message: the next message on the task is the user's
//! next turn. The answer of a run that completed is the task's artifact `result`
//! (text, or data for a typed answer).
//!
//! `SendMessage` answers once the run settles (or at once, `returnImmediately`);
//! `SendStreamingMessage` and `SubscribeToTask` stream the task, then a status
//! update per message, tool call and result, the answer's artifact and the final
//! status, following a run another process drives through the store's event log.
//! `GetTask` (with `historyLength`: the conversation's user and agent texts) and
//! `CancelTask` act on any run of the agent. Push notifications and the extended
//! card are not offered (their errors say so). The `A2A-Version` header, when
//! sent, must name 1.x; a request without it is read as 1.0.

use std::collections::HashMap;

use ::a2a::{
    A2AError, AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Artifact, HttpAuthSecurityScheme, JsonRpcId,
    JsonRpcRequest, JsonRpcResponse, Message, Part, PartContent, Role, SecurityScheme, SendMessageRequest,
    StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent, error_code,
};
use axum::http::HeaderMap;
use loopstack_core::{Definition, Document, RunQuery, RunRecord};
use loopstack_llm::agent::{DECIDE_TOOLS, RESOLVE_TOOLS, USER_MESSAGE};
use loopstack_llm::{Message as LlmMessage, Role as LlmRole};

use super::wire::{Event, Interrupt, Outcome};
use super::*;
use crate::views::Waits;

mod v03;

/// The label that keeps a task's context id with its run.
pub const CONTEXT_LABEL: &str = "a2a.context";

/// The protocol version this server speaks.
const VERSION: &str = "1.0";

/// The longest `messageId` and `contextId` a client may give.
const MAX_ID: usize = 256;

/// The most runs of an agent `ListTasks` reads for its count and pages.
const MAX_LISTED: usize = 10_000;

/// The id of a completed task's artifact: the run's answer.
const RESULT_ARTIFACT: &str = "result";

/// `GET /.well-known/agent-card.json`.
pub(crate) async fn root_card(State(app): State<App>, headers: HeaderMap) -> Response {
    let agents = agents(&app.runtime);
    let card = match agents.as_slice() {
        [only] => card(&app, &headers, only, &format!("/a2a/{}", only.name())),
        _ => {
            let mut card = card_of(&app, &headers, "loopstack", "The agents this deployment serves.", "/a2a");
            card.skills = agents.iter().map(|def| skill(def)).collect();
            card
        }
    };
    card_response(&app, card)
}

/// `GET /a2a/{name}/.well-known/agent-card.json`.
pub(crate) async fn agent_card(
    State(app): State<App>,
    PathJson(name): PathJson<String>,
    headers: HeaderMap,
) -> Response {
    match agent(&app.runtime, &name) {
        Some(def) => card_response(&app, card(&app, &headers, def, &format!("/a2a/{name}"))),
        None => error(StatusCode::NOT_FOUND, format!("no agent named `{name}` is registered")),
    }
}

/// `POST /a2a/{name}`: JSON-RPC for agent `name`.
pub(crate) async fn agent_rpc(
    State(app): State<App>,
    PathJson(name): PathJson<String>,
    headers: HeaderMap,
    BodyJson(body): BodyJson,
) -> Response {
    rpc(app, Some(name), &headers, &body).await
}

/// `POST /a2a`: JSON-RPC for the agent a request names.
pub(crate) async fn root_rpc(State(app): State<App>, headers: HeaderMap, BodyJson(body): BodyJson) -> Response {
    rpc(app, None, &headers, &body).await
}

/// The registered agents, by name.
fn agents(runtime: &Runtime) -> Vec<&'static Definition> {
    let mut names = runtime.workflows();
    names.sort_unstable();
    names.into_iter().filter_map(|name| agent(runtime, name)).collect()
}

/// The registered agent `name`.
fn agent(runtime: &Runtime, name: &str) -> Option<&'static Definition> {
    runtime.definition_of(name).filter(|def| loopstack_llm::agent::takes_decisions(def))
}

fn skill(def: &Definition) -> AgentSkill {
    AgentSkill {
        id: def.name().to_owned(),
        name: def.name().to_owned(),
        description: def.description().unwrap_or("An agent.").to_owned(),
        tags: vec!["agent".to_owned()],
        examples: None,
        input_modes: None,
        output_modes: None,
        security_requirements: None,
    }
}

fn card(app: &App, headers: &HeaderMap, def: &Definition, path: &str) -> AgentCard {
    let mut card = card_of(app, headers, def.name(), def.description().unwrap_or("An agent."), path);
    card.version = def.version().to_string();
    card.skills = vec![skill(def)];
    card
}

fn card_of(app: &App, headers: &HeaderMap, name: &str, description: &str, path: &str) -> AgentCard {
    // The Host the request named: the API answers only to names it accepts.
    let host = headers.get(axum::http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    let url = format!("{}://{host}{path}", app.scheme);
    let mut interface = AgentInterface::new(url.clone(), ::a2a::TRANSPORT_PROTOCOL_JSONRPC);
    interface.protocol_version = VERSION.to_owned();
    // The same endpoint answers 0.3's methods.
    let mut legacy = AgentInterface::new(url, ::a2a::TRANSPORT_PROTOCOL_JSONRPC);
    legacy.protocol_version = "0.3".to_owned();
    AgentCard {
        name: name.to_owned(),
        description: description.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        supported_interfaces: vec![interface, legacy],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: None,
            extended_agent_card: Some(false),
        },
        default_input_modes: vec!["text/plain".to_owned(), "application/json".to_owned()],
        default_output_modes: vec!["text/plain".to_owned(), "application/json".to_owned()],
        skills: Vec::new(),
        provider: None,
        documentation_url: None,
        icon_url: None,
        security_schemes: app.token.as_ref().map(|_| {
            HashMap::from([(
                "bearer".to_owned(),
                SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
                    scheme: "Bearer".to_owned(),
                    description: Some("The server's token, as `Authorization: Bearer <token>`.".to_owned()),
                    bearer_format: None,
                }),
            )])
        }),
        security_requirements: None,
        signatures: None,
    }
}

fn card_response(app: &App, card: AgentCard) -> Response {
    let mut value = serde_json::to_value(&card).unwrap_or(Value::Null);
    // What a 0.3 client reads of a card (a 1.0 client ignores it).
    if let Some(url) = card.supported_interfaces.first().map(|i| i.url.clone()) {
        value["url"] = json!(url);
        value["protocolVersion"] = json!("0.3.0");
        value["preferredTransport"] = json!(::a2a::TRANSPORT_PROTOCOL_JSONRPC);
    }
    if app.token.is_some() {
        // As the protocol's JSON has it (a map of scheme to a list of scopes):
        // the SDK's type writes the map bare.
        value["securityRequirements"] = json!([{ "schemes": { "bearer": { "list": [] } } }]);
    }
    ok(app, StatusCode::OK, value)
}

/// One JSON-RPC request on the endpoint of agent `name` (`None`: the root's).
async fn rpc(app: App, name: Option<String>, headers: &HeaderMap, body: &[u8]) -> Response {
    let request: JsonRpcRequest = match serde_json::from_slice::<Value>(body) {
        Err(e) => return rpc_error(JsonRpcId::Null, A2AError::parse_error(format!("the body is not JSON: {e}"))),
        Ok(value) => {
            let id = value.get("id").and_then(|id| serde_json::from_value(id.clone()).ok()).unwrap_or(JsonRpcId::Null);
            match serde_json::from_value(value) {
                Ok(request) => request,
                Err(e) => {
                    return rpc_error(id, A2AError::invalid_request(format!("not a JSON-RPC 2.0 request: {e}")));
                }
            }
        }
    };
    let id = request.id.clone();
    if request.jsonrpc != "2.0" {
        return rpc_error(id, A2AError::invalid_request("`jsonrpc` must be \"2.0\""));
    }
    if let Some(version) = headers.get(::a2a::SVC_PARAM_VERSION).and_then(|v| v.to_str().ok())
        && !version.trim().is_empty()
        && version.trim().split('.').next() != Some("1")
        && !(version.trim() == "0.3" || version.trim().starts_with("0.3."))
    {
        return rpc_error(id, A2AError::version_not_supported(version));
    }
    let (method, legacy) = match v03::method(&request.method) {
        Some(method) => (method, true),
        None => (request.method.as_str(), false),
    };
    let params = request.params.clone().unwrap_or(Value::Null);
    let params = if legacy { v03::params(params) } else { params };
    let streaming = [::a2a::methods::SEND_STREAMING_MESSAGE, ::a2a::methods::SUBSCRIBE_TO_TASK].contains(&method);
    let call = Call { app, id: id.clone(), legacy };
    let answer = match method {
        ::a2a::methods::SEND_MESSAGE => call.send(name, params, false).await,
        ::a2a::methods::SEND_STREAMING_MESSAGE => call.send(name, params, true).await,
        ::a2a::methods::GET_TASK => call.get(name, params).await,
        ::a2a::methods::CANCEL_TASK => call.cancel(name, params).await,
        ::a2a::methods::SUBSCRIBE_TO_TASK => call.subscribe(name, params).await,
        ::a2a::methods::LIST_TASKS => call.list(name, params).await,
        ::a2a::methods::CREATE_PUSH_CONFIG
        | ::a2a::methods::GET_PUSH_CONFIG
        | ::a2a::methods::LIST_PUSH_CONFIGS
        | ::a2a::methods::DELETE_PUSH_CONFIG => Err(A2AError::push_notification_not_supported()),
        ::a2a::methods::GET_EXTENDED_AGENT_CARD => {
            Err(A2AError::new(error_code::EXTENDED_CARD_NOT_CONFIGURED, "this agent has no extended card"))
        }
        method => Err(A2AError::method_not_found(method)),
    };
    match answer {
        Ok(response) => response,
        // A client that asked for a stream reads the error as the stream's one event.
        Err(e) if streaming => sse_error(id, e),
        Err(e) => rpc_error(id, e),
    }
}

/// An error as the one event of a stream.
fn sse_error(id: JsonRpcId, e: A2AError) -> Response {
    let body = rpc_error_value(id, e);
    let event = SseEvent::default().data(body.to_string());
    Sse::new(futures::stream::iter([Ok::<_, std::convert::Infallible>(event)])).into_response()
}

/// A JSON-RPC error answer; an error of the protocol's carries its reason as a
/// `google.rpc.ErrorInfo` in `data`, as 1.0 has it.
fn rpc_error(id: JsonRpcId, e: A2AError) -> Response {
    (StatusCode::OK, axum::Json(rpc_error_value(id, e))).into_response()
}

/// A JSON-RPC error answer, as JSON.
fn rpc_error_value(id: JsonRpcId, e: A2AError) -> Value {
    let mut error = e.to_jsonrpc_error();
    let reason = match e.code {
        error_code::TASK_NOT_FOUND => Some("TASK_NOT_FOUND"),
        error_code::TASK_NOT_CANCELABLE => Some("TASK_NOT_CANCELABLE"),
        error_code::PUSH_NOTIFICATION_NOT_SUPPORTED => Some("PUSH_NOTIFICATION_NOT_SUPPORTED"),
        error_code::UNSUPPORTED_OPERATION => Some("UNSUPPORTED_OPERATION"),
        error_code::CONTENT_TYPE_NOT_SUPPORTED => Some("CONTENT_TYPE_NOT_SUPPORTED"),
        error_code::EXTENDED_CARD_NOT_CONFIGURED => Some("EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
        error_code::VERSION_NOT_SUPPORTED => Some("VERSION_NOT_SUPPORTED"),
        error_code::INVALID_PARAMS => Some("INVALID_PARAMS"),
        _ => None,
    };
    if let Some(reason) = reason {
        error.data = Some(json!([{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "a2a-protocol.org",
        }]));
    }
    serde_json::to_value(JsonRpcResponse::error(id, error)).unwrap_or(Value::Null)
}

/// The request's parameters as `T`.
fn params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, A2AError> {
    serde_json::from_value(params).map_err(|e| A2AError::invalid_params(format!("the params do not fit: {e}")))
}

fn store_failed(e: &StoreError) -> A2AError {
    A2AError::internal(format!("the store failed: {e}"))
}

/// The run of task `id` on the endpoint of `name`: a run of that agent (any served
/// agent's on the root endpoint).
async fn task_run(app: &App, name: Option<&str>, id: &str) -> Result<(&'static Definition, RunRecord), A2AError> {
    let run_id = id.parse::<RunId>().map_err(|_| A2AError::task_not_found(id))?;
    let record = match app.runtime.store().load_run(run_id).await {
        Ok(record) => record,
        Err(StoreError::RunNotFound(_)) => return Err(A2AError::task_not_found(id)),
        Err(e) => return Err(store_failed(&e)),
    };
    let def = agent(&app.runtime, &record.workflow)
        .filter(|_| name.is_none_or(|name| name == record.workflow))
        .ok_or_else(|| A2AError::task_not_found(id))?;
    Ok((def, record))
}

/// One JSON-RPC call.
struct Call {
    app: App,
    id: JsonRpcId,
    /// Whether the request was 0.3's, and is answered in 0.3's shapes.
    legacy: bool,
}

impl Call {
    fn result(&self, result: impl serde::Serialize) -> Result<Response, A2AError> {
        let mut value = serde_json::to_value(result).map_err(|e| A2AError::internal(e.to_string()))?;
        if self.legacy {
            value = v03::result(value);
        }
        self.app.runtime.secrets().redact_value(&mut value);
        Ok((StatusCode::OK, axum::Json(JsonRpcResponse::success(self.id.clone(), value))).into_response())
    }

    /// `SendMessage` and `SendStreamingMessage`.
    async fn send(self, name: Option<String>, params: Value, streaming: bool) -> Result<Response, A2AError> {
        let request: SendMessageRequest = self::params(params)?;
        let immediately = request.configuration.as_ref().and_then(|c| c.return_immediately).unwrap_or(false);
        let history = match request.configuration.as_ref().and_then(|c| c.history_length) {
            Some(n) if n < 0 => return Err(A2AError::invalid_params("`historyLength` must not be negative")),
            n => n.map(|n| n as usize),
        };
        let message = request.message;
        if message.message_id.is_empty() {
            return Err(A2AError::invalid_params("the message has no `messageId`"));
        }
        // Ids are kept with the run (the context as a label, the message in its id's
        // key): a client's are ids, not documents.
        for (what, id) in [("messageId", Some(&message.message_id)), ("contextId", message.context_id.as_ref())] {
            if id.is_some_and(|id| id.len() > MAX_ID) {
                return Err(A2AError::invalid_params(format!("`{what}` is longer than {MAX_ID} bytes")));
            }
        }
        let text = message_text(&message)?;
        let (def, record, action, run_id, context) = match &message.task_id {
            Some(task) => {
                let (def, record) = task_run(&self.app, name.as_deref(), task).await?;
                let context = context_of(&record);
                if message.context_id.as_ref().is_some_and(|c| *c != context) {
                    return Err(A2AError::invalid_params(format!(
                        "task {task} is in context `{context}`, not `{}`",
                        message.context_id.as_deref().unwrap_or_default()
                    )));
                }
                let action = continue_task(&self.app.runtime, def, &record, &message, text)?;
                (def, Some(record), action, record_id(task)?, context)
            }
            None => {
                let def = self.agent_named(name.as_deref(), request.tenant.as_deref(), &message)?;
                let run_id = RunId::from_key(&format!("a2a/{}/{}", def.name(), message.message_id));
                let record = match app_conversation(&self.app, run_id).await? {
                    // The same message again: its task, as it stands.
                    Some(record) => return self.answer_existing(def, record, streaming).await,
                    None => None,
                };
                let context = message.context_id.clone().unwrap_or_else(|| RunId::new().to_string());
                (def, record, Action::Start(Value::String(text)), run_id, context)
            }
        };
        let task_id = run_id.to_string();
        let (next, source) = follow(&self.app.runtime, run_id, record.is_some()).await.map_err(|e| store_failed(&e))?;
        let labels = [(CONTEXT_LABEL.to_owned(), context.clone())].into();
        let request = Request {
            app: self.app.clone(),
            def,
            name: def.name().to_owned(),
            thread_id: context.clone(),
            client_run: task_id.clone(),
            run_id,
            known_results: Vec::new(),
            labels,
        };
        // What the client sees first: the task as the message left it.
        let submitted = Task {
            id: task_id.clone(),
            context_id: context.clone(),
            status: TaskStatus {
                state: if record.is_some() { TaskState::Working } else { TaskState::Submitted },
                message: None,
                timestamp: Some(chrono::Utc::now()),
            },
            artifacts: None,
            history: Some(vec![Message {
                task_id: Some(task_id.clone()),
                context_id: Some(context.clone()),
                ..message.clone()
            }]),
            metadata: None,
        };
        let encoder = A2aStream::new(self.id.clone(), self.legacy, task_id, context, Some(submitted.clone()));
        if streaming {
            return Ok(sse(request.respond(action, record, next, source, encoder)));
        }
        let mut receiver = request.spawn(action, record, next, source, encoder);
        if immediately {
            // The run goes on; the client reads it with GetTask or SubscribeToTask.
            tokio::spawn(async move { while receiver.recv().await.is_some() {} });
            return self.result(json!({ "task": submitted }));
        }
        // The run settles (or waits for a person) before the answer: the stream
        // ends then.
        while receiver.recv().await.is_some() {}
        let record = self.app.runtime.store().load_run(run_id).await.map_err(|e| store_failed(&e))?;
        let task = task(&self.app, def, &record, history).await?;
        self.result(json!({ "task": task }))
    }

    /// The answer to a message sent again: its task, or its stream from now.
    async fn answer_existing(
        self,
        def: &'static Definition,
        record: RunRecord,
        streaming: bool,
    ) -> Result<Response, A2AError> {
        if streaming {
            return self.stream_task(def, record).await;
        }
        let task = task(&self.app, def, &record, None).await?;
        self.result(json!({ "task": task }))
    }

    /// The agent a new message goes to.
    fn agent_named(
        &self,
        name: Option<&str>,
        tenant: Option<&str>,
        message: &Message,
    ) -> Result<&'static Definition, A2AError> {
        let skill = message.metadata.as_ref().and_then(|m| m.get("skill")).and_then(Value::as_str);
        let named = name.or(tenant.filter(|t| !t.is_empty())).or(skill);
        if let Some(name) = named {
            return agent(&self.app.runtime, name)
                .ok_or_else(|| A2AError::invalid_params(format!("no agent named `{name}` is served here")));
        }
        match agents(&self.app.runtime).as_slice() {
            [only] => Ok(only),
            all => Err(A2AError::invalid_params(format!(
                "this endpoint serves several agents: name one as `tenant` (or the message's `metadata.skill`), or \
                 send to /a2a/<agent>: {}",
                all.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// `GetTask`.
    async fn get(self, name: Option<String>, params: Value) -> Result<Response, A2AError> {
        let request: ::a2a::GetTaskRequest = self::params(params)?;
        let (def, record) = task_run(&self.app, name.as_deref(), &request.id).await?;
        let history = match request.history_length {
            Some(n) if n < 0 => return Err(A2AError::invalid_params("`historyLength` must not be negative")),
            n => n.map(|n| n as usize),
        };
        let task = task(&self.app, def, &record, history).await?;
        self.result(task)
    }

    /// `CancelTask`.
    async fn cancel(self, name: Option<String>, params: Value) -> Result<Response, A2AError> {
        let request: ::a2a::CancelTaskRequest = self::params(params)?;
        let (def, record) = task_run(&self.app, name.as_deref(), &request.id).await?;
        if record.status.is_finished() {
            return Err(A2AError::task_not_cancelable(&request.id));
        }
        // A run that ended meanwhile is answered as it ended, below.
        let _ = self.app.runtime.cancel(record.run_id, "cancelled by an A2A client").await;
        let record = self.app.runtime.store().load_run(record.run_id).await.map_err(|e| store_failed(&e))?;
        if !record.status.is_finished() {
            return Err(A2AError::task_not_cancelable(&request.id));
        }
        let task = task(&self.app, def, &record, None).await?;
        self.result(task)
    }

    /// `ListTasks`: the agent's tasks (every served agent's on the root endpoint),
    /// newest first, filtered by context, state and the time of their last change,
    /// a page at a time. The count and the pages come from reading up to
    /// [`MAX_LISTED`] of the agent's runs.
    async fn list(self, name: Option<String>, params: Value) -> Result<Response, A2AError> {
        let request: ::a2a::ListTasksRequest = self::params(params)?;
        let size = match request.page_size {
            None => 50,
            Some(n @ 1..=100) => n as usize,
            Some(n) => return Err(A2AError::invalid_params(format!("`pageSize` is 1 to 100, not {n}"))),
        };
        let history = match request.history_length {
            Some(n) if n < 0 => return Err(A2AError::invalid_params("`historyLength` must not be negative")),
            n => n.map(|n| n as usize),
        };
        let after =
            match request.page_token.as_deref().filter(|t| !t.is_empty()) {
                Some(token) => Some(token.parse::<RunId>().map_err(|_| {
                    A2AError::invalid_params(format!("`pageToken` `{token}` is not one this server gave"))
                })?),
                None => None,
            };
        let agents: Vec<&'static Definition> = match name.as_deref() {
            Some(name) => agent(&self.app.runtime, name).into_iter().collect(),
            None => agents(&self.app.runtime),
        };
        let mut query = RunQuery::new().limit(1000);
        if let [only] = agents.as_slice() {
            query = query.workflow(only.name());
        }
        if let Some(context) = &request.context_id {
            query = query.label(CONTEXT_LABEL, context.clone());
        }
        // The runs that match, newest first.
        let mut matched: Vec<(&'static Definition, RunRecord)> = Vec::new();
        let mut read = 0;
        loop {
            let page = self.app.runtime.store().list_runs(&query).await.map_err(|e| store_failed(&e))?;
            read += page.runs.len();
            for summary in page.runs {
                let Some(def) = agents.iter().find(|d| d.name() == summary.workflow).copied() else { continue };
                if request.status_timestamp_after.is_some_and(|t| {
                    chrono::DateTime::from_timestamp_millis(summary.updated_at.as_millis()).is_none_or(|at| at <= t)
                }) {
                    continue;
                }
                let record = match self.app.runtime.store().load_run(summary.run_id).await {
                    Ok(record) => record,
                    Err(StoreError::RunNotFound(_)) => continue,
                    Err(e) => return Err(store_failed(&e)),
                };
                if let Some(state) = &request.status
                    && state_of(&self.app, def, &record) != *state
                {
                    continue;
                }
                matched.push((def, record));
            }
            match page.next {
                Some(next) if read < MAX_LISTED => query = query.before(next),
                _ => break,
            }
        }
        let start = match after {
            Some(after) => matched.iter().position(|(_, r)| r.run_id == after).map_or(matched.len(), |i| i + 1),
            None => 0,
        };
        let total = matched.len();
        let page: Vec<_> = matched.into_iter().skip(start).take(size).collect();
        let next = if start + page.len() < total { page.last().map(|(_, r)| r.run_id.to_string()) } else { None };
        let mut tasks = Vec::with_capacity(page.len());
        for (def, record) in &page {
            let mut task = task(&self.app, def, record, history).await?;
            if !request.include_artifacts.unwrap_or(false) {
                task.artifacts = None;
            }
            tasks.push(task);
        }
        self.result(json!({
            "tasks": tasks,
            "nextPageToken": next.unwrap_or_default(),
            "pageSize": tasks.len(),
            "totalSize": total,
        }))
    }

    /// `SubscribeToTask`.
    async fn subscribe(self, name: Option<String>, params: Value) -> Result<Response, A2AError> {
        let request: ::a2a::SubscribeToTaskRequest = self::params(params)?;
        let (def, record) = task_run(&self.app, name.as_deref(), &request.id).await?;
        if record.status.is_finished() {
            return Err(A2AError::unsupported_operation(format!(
                "task {} has ended ({}): read it with GetTask",
                request.id,
                record.status.as_str()
            )));
        }
        self.stream_task(def, record).await
    }

    /// The stream of a task from where it stands.
    async fn stream_task(self, def: &'static Definition, record: RunRecord) -> Result<Response, A2AError> {
        let run_id = record.run_id;
        let task = task(&self.app, def, &record, None).await?;
        let (next, source) = follow(&self.app.runtime, run_id, true).await.map_err(|e| store_failed(&e))?;
        let context = task.context_id.clone();
        let encoder = A2aStream::new(self.id.clone(), self.legacy, run_id.to_string(), context.clone(), Some(task));
        let action = match record.status {
            RunStatus::Queued | RunStatus::Running => Action::Follow,
            RunStatus::Waiting if waits_on_itself(def, &record.place) => Action::Follow,
            _ => Action::Show,
        };
        let request = Request {
            app: self.app,
            def,
            name: def.name().to_owned(),
            thread_id: context,
            client_run: run_id.to_string(),
            run_id,
            known_results: Vec::new(),
            labels: loopstack_core::Labels::new(),
        };
        Ok(sse(request.respond(action, Some(record), next, source, encoder)))
    }
}

/// The text a message gives the agent: its text parts, and its data parts as JSON,
/// one after another. Files are refused: an agent's input is text.
fn message_text(message: &Message) -> Result<String, A2AError> {
    if message.role != Role::User {
        return Err(A2AError::invalid_params("a message to an agent has the role `ROLE_USER`"));
    }
    let mut text = String::new();
    for part in &message.parts {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        match &part.content {
            PartContent::Text(t) => text.push_str(t),
            PartContent::Data(value) => text.push_str(&value.to_string()),
            PartContent::Raw(_) | PartContent::Url(_) => {
                return Err(A2AError::new(
                    error_code::CONTENT_TYPE_NOT_SUPPORTED,
                    "content type not supported (incompatible content types): this agent reads text and data parts, \
                     not files",
                ));
            }
        }
    }
    if text.trim().is_empty() {
        return Err(A2AError::invalid_params("the message has no text or data part"));
    }
    Ok(text)
}

fn record_id(task: &str) -> Result<RunId, A2AError> {
    task.parse::<RunId>().map_err(|_| A2AError::task_not_found(task))
}

async fn app_conversation(app: &App, run_id: RunId) -> Result<Option<RunRecord>, A2AError> {
    match app.runtime.store().load_run(run_id).await {
        Ok(record) => Ok(Some(record)),
        Err(StoreError::RunNotFound(_)) => Ok(None),
        Err(e) => Err(store_failed(&e)),
    }
}

/// The context id of a task's run: its label, or (a run started elsewhere) its id.
fn context_of(record: &RunRecord) -> String {
    record.labels.get(CONTEXT_LABEL).cloned().unwrap_or_else(|| record.run_id.to_string())
}

/// What a message on an existing task does to its run.
fn continue_task(
    runtime: &Runtime,
    def: &Definition,
    record: &RunRecord,
    message: &Message,
    text: String,
) -> Result<Action, A2AError> {
    let task = record.run_id;
    match record.status {
        RunStatus::Waiting if awaits_user(def, &record.place) => {
            Ok(Action::Signal(USER_MESSAGE.to_owned(), json!({ "text": text })))
        }
        RunStatus::Waiting if !waits_on_itself(def, &record.place) => {
            let waits = Waits::of(runtime, record)
                .map_err(|e| A2AError::internal(e.to_string()))?
                .ok_or_else(|| A2AError::internal(format!("task {task} waits for nothing this build knows")))?;
            decide(&waits, message, &text).map_err(A2AError::invalid_params)
        }
        status if status.is_finished() => Err(A2AError::unsupported_operation(format!(
            "task {task} has ended ({}): send the message without `taskId` (in the same context) for a new task",
            status.as_str()
        ))),
        _ => Err(A2AError::unsupported_operation(format!(
            "task {task} is working and takes no message until it needs input: follow it with SubscribeToTask"
        ))),
    }
}

/// The decisions a message gives the calls a run waits on.
fn decide(waits: &Waits, message: &Message, text: &str) -> Result<Action, String> {
    let pending: Vec<_> = waits.pending.iter().flatten().filter(|call| !call.client).collect();
    if pending.is_empty() {
        return Err("the task waits for nothing a message answers".to_owned());
    }
    if pending.iter().any(|call| call.input.is_some()) {
        return answer_questions(waits, &pending, message, text);
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer {
        #[serde(default)]
        call_id: Option<String>,
        approved: bool,
        #[serde(default)]
        reason: Option<String>,
        #[serde(default)]
        result: Option<String>,
    }
    let how = "answer with a data part {\"approved\": bool, \"reason\"?: string, \"result\"?: string, \"call_id\"?: \
               string} (a list of them, one per call, when several wait), or the text `approve` or `deny`";
    let data: Vec<&Value> = message
        .parts
        .iter()
        .filter_map(|p| match &p.content {
            PartContent::Data(value) => Some(value),
            _ => None,
        })
        .collect();
    let answers: Vec<Answer> = match data.as_slice() {
        [] => match text.trim().to_ascii_lowercase().as_str() {
            "approve" | "approved" | "yes" => {
                vec![Answer { call_id: None, approved: true, reason: None, result: None }]
            }
            "deny" | "denied" | "no" | "reject" => vec![Answer {
                call_id: None,
                approved: false,
                reason: Some("the A2A client denied the call".to_owned()),
                result: None,
            }],
            _ => return Err(format!("the task waits for decisions on its tool calls: {how}")),
        },
        [Value::Object(o)] if o.contains_key("decisions") => {
            serde_json::from_value(o["decisions"].clone()).map_err(|e| format!("{e}: {how}"))?
        }
        [Value::Array(list)] => {
            serde_json::from_value(Value::Array(list.clone())).map_err(|e| format!("{e}: {how}"))?
        }
        values => values
            .iter()
            .map(|v| serde_json::from_value((*v).clone()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{e}: {how}"))?,
    };
    let mut decisions = Vec::with_capacity(pending.len());
    for call in &pending {
        let answer = match answers.as_slice() {
            [one] if one.call_id.is_none() => one,
            _ => answers
                .iter()
                .find(|a| a.call_id.as_deref() == Some(call.call_id.as_str()))
                .ok_or_else(|| format!("call `{}` of `{}` has no decision: {how}", call.call_id, call.name))?,
        };
        let reason = match (answer.approved, &answer.reason) {
            (false, None) => Some("the A2A client denied the call".to_owned()),
            (_, reason) => reason.clone(),
        };
        decisions.push(json!({
            "call_id": call.call_id,
            "approved": answer.approved,
            "reason": reason,
            "result": answer.result,
        }));
    }
    if let Some(stray) =
        answers.iter().filter_map(|a| a.call_id.as_deref()).find(|id| !pending.iter().any(|c| c.call_id == *id))
    {
        return Err(format!("call `{stray}` does not wait for a decision on this task"));
    }
    let signal = if waits.outcome_unknown { RESOLVE_TOOLS } else { DECIDE_TOOLS };
    Ok(Action::Signal(signal.to_owned(), json!({ "decisions": decisions })))
}

/// The answers a message gives calls that ask a person for input: a data part that
/// fits the question's schema (one question), or an object of them by call id
/// (several); the text `deny` declines them.
fn answer_questions(
    waits: &Waits,
    pending: &[&loopstack_llm::PendingCall],
    message: &Message,
    text: &str,
) -> Result<Action, String> {
    let data = message.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(value) => Some(value.clone()),
        _ => None,
    });
    let declined = data.is_none() && matches!(text.trim().to_ascii_lowercase().as_str(), "deny" | "no" | "decline");
    if data.is_none() && !declined {
        return Err(
            "the task asks questions: answer with a data part that fits the question's schema (an object of answers \
             by call id when several wait), or the text `deny`"
                .to_owned(),
        );
    }
    let decisions: Vec<Value> = pending
        .iter()
        .map(|call| {
            let input = match (&data, pending.len()) {
                (Some(value), 1) => value.clone(),
                (Some(value), _) => value.get(&call.call_id).cloned().unwrap_or_else(|| json!({})),
                (None, _) => Value::Null,
            };
            json!({ "call_id": call.call_id, "approved": !declined, "input": (!declined).then_some(input) })
        })
        .collect();
    let signal = if waits.outcome_unknown { RESOLVE_TOOLS } else { DECIDE_TOOLS };
    Ok(Action::Signal(signal.to_owned(), json!({ "decisions": decisions })))
}

/// The state of the task that run `record` of agent `def` is (as [`task`] says it).
fn state_of(app: &App, def: &Definition, record: &RunRecord) -> TaskState {
    match record.status {
        RunStatus::Queued => TaskState::Submitted,
        RunStatus::Running => TaskState::Working,
        RunStatus::Waiting if waits_on_itself(def, &record.place) => TaskState::Working,
        RunStatus::Waiting if awaits_user(def, &record.place) => TaskState::InputRequired,
        RunStatus::Waiting => match Waits::of(&app.runtime, record) {
            Ok(Some(waits)) if !interrupts(record, &waits).is_empty() => TaskState::InputRequired,
            _ => TaskState::Working,
        },
        RunStatus::Completed if crate::views::output(&app.runtime, record).1 => TaskState::Failed,
        RunStatus::Completed => TaskState::Completed,
        RunStatus::Failed | RunStatus::Stopped => TaskState::Failed,
        RunStatus::Cancelled => TaskState::Canceled,
        _ => TaskState::Working,
    }
}

/// The task that run `record` of agent `def` is, with the last `history` messages
/// of its conversation (all when `None`).
async fn task(app: &App, def: &Definition, record: &RunRecord, history: Option<usize>) -> Result<Task, A2AError> {
    let task_id = record.run_id.to_string();
    let context = context_of(record);
    let documents = app.runtime.store().documents(record.run_id).await.map_err(|e| store_failed(&e))?;
    let mut messages = conversation_messages(&documents, &task_id, &context);
    let agent_message = |text: String| Message {
        message_id: format!("{task_id}-status-{}", record.step),
        context_id: Some(context.clone()),
        task_id: Some(task_id.clone()),
        role: Role::Agent,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    };
    let mut artifacts = None;
    let (state, message) = match record.status {
        RunStatus::Queued => (TaskState::Submitted, None),
        RunStatus::Running => (TaskState::Working, None),
        RunStatus::Waiting if waits_on_itself(def, &record.place) => (TaskState::Working, None),
        RunStatus::Waiting if awaits_user(def, &record.place) => {
            let last = messages.iter().rev().find(|m| m.role == Role::Agent).cloned();
            (TaskState::InputRequired, last)
        }
        RunStatus::Waiting => match Waits::of(&app.runtime, record).map_err(|e| A2AError::internal(e.to_string()))? {
            Some(waits) => {
                let open = interrupts(record, &waits);
                if open.is_empty() {
                    // A timer moves it on.
                    (TaskState::Working, None)
                } else {
                    let mut message = agent_message(interrupt_text(&open));
                    message.parts.push(Part::data(interrupt_data(&open)));
                    (TaskState::InputRequired, Some(message))
                }
            }
            None => (TaskState::Working, None),
        },
        RunStatus::Completed => {
            let (output, is_error) = crate::views::output(&app.runtime, record);
            if is_error {
                (TaskState::Failed, Some(agent_message(crate::views::text(&output))))
            } else {
                artifacts = Some(vec![result_artifact(output)]);
                (TaskState::Completed, None)
            }
        }
        RunStatus::Failed | RunStatus::Stopped => (
            TaskState::Failed,
            Some(agent_message(record.error.clone().unwrap_or_else(|| "no reason was recorded".to_owned()))),
        ),
        RunStatus::Cancelled => (TaskState::Canceled, None),
        _ => (TaskState::Working, None),
    };
    if let Some(n) = history {
        let skip = messages.len().saturating_sub(n);
        messages.drain(..skip);
    }
    Ok(Task {
        id: task_id,
        context_id: context,
        status: TaskStatus { state, message, timestamp: timestamp(record.updated_at) },
        artifacts,
        history: Some(messages),
        metadata: None,
    })
}

fn timestamp(at: loopstack_core::Timestamp) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::from_timestamp_millis(at.as_millis())
}

/// The user's and the agent's texts of a run's conversation, in order.
fn conversation_messages(documents: &[std::sync::Arc<Document>], task_id: &str, context: &str) -> Vec<Message> {
    documents
        .iter()
        .filter(|d| super::translate::is_message(d))
        .filter_map(|doc| {
            let message = doc.read::<LlmMessage>().ok()?;
            let text = message.text();
            if text.is_empty() {
                return None;
            }
            Some(Message {
                message_id: format!("{task_id}-m{}", doc.seq),
                context_id: Some(context.to_owned()),
                task_id: Some(task_id.to_owned()),
                role: match message.role {
                    LlmRole::User => Role::User,
                    LlmRole::Assistant => Role::Agent,
                },
                parts: vec![Part::text(text)],
                metadata: None,
                extensions: None,
                reference_task_ids: None,
            })
        })
        .collect()
}

/// The run's answer as the task's artifact: text, or data for a typed answer.
fn result_artifact(output: Value) -> Artifact {
    let part = match output {
        Value::String(text) => Part::text(text),
        value => Part::data(value),
    };
    Artifact {
        artifact_id: RESULT_ARTIFACT.to_owned(),
        name: Some(RESULT_ARTIFACT.to_owned()),
        description: Some("The agent's answer.".to_owned()),
        parts: vec![part],
        metadata: None,
        extensions: None,
    }
}

/// What a task that needs input asks, in words.
fn interrupt_text(open: &[Interrupt]) -> String {
    let mut text: Vec<String> = open.iter().map(|i| i.message.clone()).collect();
    text.push(
        "Answer with a message on this task: a data part {\"approved\": bool, \"reason\"?: string, \"result\"?: \
         string, \"call_id\"?: string} (one per call, with its call_id, when several wait), or the text `approve` \
         or `deny`."
            .to_owned(),
    );
    text.join("\n")
}

/// What a task that needs input asks, as data: the calls, their ids, and the
/// answer's schema.
fn interrupt_data(open: &[Interrupt]) -> Value {
    json!({ "interrupts": open })
}

fn sse(sse: Sse<impl futures::Stream<Item = Result<SseEvent, std::convert::Infallible>> + Send + 'static>) -> Response {
    sse.into_response()
}

/// A2A's encoding of a task's stream: each event a JSON-RPC response whose result
/// is a `StreamResponse`.
struct A2aStream {
    id: JsonRpcId,
    /// Whether the events are written in 0.3's shapes.
    legacy: bool,
    task_id: String,
    context_id: String,
    /// The task as it stood when the stream began, sent first.
    first: Option<Task>,
    /// Whether the `working` status was sent.
    working: bool,
    /// The text of the agent's message being streamed.
    text: String,
    /// The last message the agent finished: a chat's answer.
    last_text: Option<String>,
    /// The arguments of the calls being streamed, by call id: name and arguments.
    calls: Vec<(String, String, String)>,
}

impl A2aStream {
    fn new(id: JsonRpcId, legacy: bool, task_id: String, context_id: String, first: Option<Task>) -> Self {
        Self {
            id,
            legacy,
            task_id,
            context_id,
            first,
            working: false,
            text: String::new(),
            last_text: None,
            calls: Vec::new(),
        }
    }

    fn push(&self, response: StreamResponse, out: &mut Vec<Value>) {
        let mut result = serde_json::to_value(response).unwrap_or(Value::Null);
        if self.legacy {
            result = v03::event(result);
        }
        out.push(serde_json::to_value(JsonRpcResponse::success(self.id.clone(), result)).unwrap_or(Value::Null));
    }

    fn message(&self, id: String, parts: Vec<Part>) -> Message {
        Message {
            message_id: id,
            context_id: Some(self.context_id.clone()),
            task_id: Some(self.task_id.clone()),
            role: Role::Agent,
            parts,
            metadata: None,
            extensions: None,
            reference_task_ids: None,
        }
    }

    fn status(&mut self, state: TaskState, message: Option<Message>, out: &mut Vec<Value>) {
        let update = TaskStatusUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status: TaskStatus { state, message, timestamp: Some(chrono::Utc::now()) },
            metadata: None,
        };
        self.push(StreamResponse::StatusUpdate(update), out);
    }

    /// The `working` status, once, before the first progress.
    fn working(&mut self, out: &mut Vec<Value>) {
        if !self.working {
            self.working = true;
            self.status(TaskState::Working, None, out);
        }
    }
}

impl Encoder for A2aStream {
    fn encode(&mut self, event: Event, out: &mut Vec<Value>) {
        match event {
            Event::RunStarted { .. } => {
                if let Some(task) = self.first.take() {
                    self.working = task.status.state == TaskState::Working;
                    self.push(StreamResponse::Task(task), out);
                }
            }
            Event::StepStarted { .. } => self.working(out),
            Event::TextMessageStart { .. } => self.text.clear(),
            Event::TextMessageContent { delta, .. } => self.text.push_str(&delta),
            Event::TextMessageEnd { message_id } => {
                let text = std::mem::take(&mut self.text);
                if !text.is_empty() {
                    self.working(out);
                    let message = self.message(format!("{}-{message_id}", self.task_id), vec![Part::text(&text)]);
                    self.status(TaskState::Working, Some(message), out);
                    self.last_text = Some(text);
                }
            }
            Event::ToolCallStart { tool_call_id, tool_call_name, .. } => {
                self.calls.push((tool_call_id, tool_call_name, String::new()));
            }
            Event::ToolCallArgs { tool_call_id, delta } => {
                if let Some(call) = self.calls.iter_mut().find(|c| c.0 == tool_call_id) {
                    call.2.push_str(&delta);
                }
            }
            Event::ToolCallEnd { tool_call_id } => {
                let Some(index) = self.calls.iter().position(|c| c.0 == tool_call_id) else { return };
                let (id, name, arguments) = self.calls.remove(index);
                let arguments: Value = serde_json::from_str(&arguments).unwrap_or(Value::String(arguments));
                self.working(out);
                let data = json!({ "toolCall": { "id": id, "name": name, "arguments": arguments } });
                let message = self.message(format!("{}-call-{id}", self.task_id), vec![Part::data(data)]);
                self.status(TaskState::Working, Some(message), out);
            }
            Event::ToolCallResult { tool_call_id, content, is_error, .. } => {
                self.working(out);
                let data = json!({ "toolResult": { "id": tool_call_id, "content": content, "isError": is_error } });
                let message = self.message(format!("{}-result-{tool_call_id}", self.task_id), vec![Part::data(data)]);
                self.status(TaskState::Working, Some(message), out);
            }
            Event::RunFinished { result, outcome, .. } => match (result, outcome) {
                (Some(output), Outcome::Success { .. }) => {
                    let update = TaskArtifactUpdateEvent {
                        task_id: self.task_id.clone(),
                        context_id: self.context_id.clone(),
                        artifact: result_artifact(output),
                        append: Some(false),
                        last_chunk: Some(true),
                        metadata: None,
                    };
                    self.push(StreamResponse::ArtifactUpdate(update), out);
                    self.status(TaskState::Completed, None, out);
                }
                (None, Outcome::Success { .. }) => {
                    // A chat that answered: its answer, and the next turn is the user's.
                    let message = self.last_text.take().map(|text| {
                        self.message(format!("{}-answer-{}", self.task_id, RunId::new()), vec![Part::text(text)])
                    });
                    self.status(TaskState::InputRequired, message, out);
                }
                (_, Outcome::Interrupt { interrupts }) => {
                    let parts = vec![Part::text(interrupt_text(&interrupts)), Part::data(interrupt_data(&interrupts))];
                    let message = self.message(format!("{}-input-{}", self.task_id, RunId::new()), parts);
                    self.status(TaskState::InputRequired, Some(message), out);
                }
                (_, Outcome::Cancelled) => self.status(TaskState::Canceled, None, out),
            },
            Event::RunError { message, code } => match code {
                "failed" | "stopped" => {
                    let message = self.message(format!("{}-error", self.task_id), vec![Part::text(message)]);
                    self.status(TaskState::Failed, Some(message), out);
                }
                "waiting" | "running" => self.status(TaskState::Working, None, out),
                _ => {
                    let e = A2AError::internal(message);
                    out.push(
                        serde_json::to_value(JsonRpcResponse::error(self.id.clone(), e.to_jsonrpc_error()))
                            .unwrap_or(Value::Null),
                    );
                }
            },
            _ => {}
        }
    }
}
