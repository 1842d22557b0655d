//! Remote A2A agents as tools (feature `a2a`): an agent any A2A 1.0 server serves
//! (another loopstack deployment, an agent on the Python or JavaScript SDK, ADK,
//! LangGraph's server) becomes a tool of a local agent.
//!
//! ```no_run
//! use loopstack_llm::a2a::A2aAgent;
//! use loopstack_llm::{Agent, ScriptedModel};
//! use loopstack_core::ToolRegistry;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // Reads the agent's card at `<url>/.well-known/agent-card.json`.
//! let billing = A2aAgent::builder("https://billing.example.com/a2a/billing")
//!     .bearer("the server's token")
//!     .connect()
//!     .await?;
//! let tools = ToolRegistry::new().with(billing)?;
//! let desk = Agent::new(ScriptedModel::new(), "a-model", tools);
//! # drop(desk); Ok(()) }
//! ```
//!
//! The model calls the tool with `{"message": "..."}` and reads the remote task's
//! answer (its artifacts' text). A remote agent that needs more input answers with
//! its question and the task's id; the model calls the tool again with
//! `{"message": <its answer>, "task_id": <that id>}` to go on. A task that fails,
//! is rejected or cancelled is an error result the model reads.
//!
//! Each call is one message whose id is made from the call's
//! [idempotency key](loopstack_core::ToolContext::idempotency_key): a call run again
//! after a crash sends the same message, so a server that keeps messages by their
//! id (as loopstack's does) answers with the task the first attempt started, not a
//! second one. The calls of one local run share one remote context. A task still
//! working when the server answers is followed by reading it again (every second,
//! then less often) until it ends or needs input, within the tool's timeout (10
//! minutes unless set).
//!
//! Every request is bounded (30 s to connect and for the card, the tool's timeout
//! for a call); an answer larger than 4 MB, one that is not the protocol's, and an
//! interface on an instance-metadata address are refused with an [`A2aError`].

use std::sync::Arc;
use std::time::Duration;

use ::a2a::{
    AgentCard, JsonRpcId, JsonRpcRequest, JsonRpcResponse, Message, Part, PartContent, Role, SendMessageResponse, Task,
    TaskState,
};
use loopstack_core::{Effect, Tool, ToolContext, ToolError, ToolOptions, ToolOutput};
use serde_json::{Value, json};

/// How long connecting and reading the card may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a call may take unless [`A2aAgentBuilder::timeout`] says.
const CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// The largest answer read from a server.
const MAX_BODY: usize = 4 << 20;

/// The longest wait between two reads of a task still working.
const MAX_POLL: Duration = Duration::from_secs(10);

/// What failed talking to an A2A agent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum A2aError {
    /// The agent's card could not be read, or names no interface this client speaks.
    #[error("A2A agent at {url}: {reason}")]
    Card {
        /// The card's URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The server answered with one of the protocol's errors.
    #[error("A2A agent `{agent}` answered error {code}: {message}")]
    Protocol {
        /// The agent's name.
        agent: String,
        /// The JSON-RPC error's code (`-32001`: the task is not there).
        code: i32,
        /// Its message.
        message: String,
    },
    /// The request failed, or its answer was not the protocol's.
    #[error("A2A agent `{agent}`: {reason}")]
    Transport {
        /// The agent's name.
        agent: String,
        /// Why.
        reason: String,
    },
}

/// Builds an [`A2aAgent`]: see [`A2aAgent::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct A2aAgentBuilder {
    url: String,
    token: Option<String>,
    name: Option<String>,
    timeout: Duration,
}

impl A2aAgentBuilder {
    /// Sends `token` as `Authorization: Bearer <token>`, for the card and every call.
    pub fn bearer(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The tool's name, instead of the card's name (made a valid tool name).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How long one call of the tool may take, following its task (10 minutes
    /// unless set).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Reads the agent's card and picks its JSON-RPC interface of protocol 1.x.
    pub async fn connect(self) -> Result<A2aAgent, A2aError> {
        let card_url = if self.url.ends_with(".json") {
            self.url.clone()
        } else {
            format!("{}/.well-known/agent-card.json", self.url.trim_end_matches('/'))
        };
        let card_error = |reason: String| A2aError::Card { url: card_url.clone(), reason };
        let http = loopstack_model::http::client_builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| card_error(e.to_string()))?;
        // Servers that still speak 0.3 answer a request without the version with
        // 0.3's card.
        let mut request = http.get(&card_url).timeout(CONNECT_TIMEOUT).header(::a2a::SVC_PARAM_VERSION, ::a2a::VERSION);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| card_error(e.to_string()))?;
        if !response.status().is_success() {
            return Err(card_error(format!("the card's URL answered {}", response.status())));
        }
        let body = read(response).await.map_err(card_error)?;
        let card: AgentCard =
            serde_json::from_slice(&body).map_err(|e| card_error(format!("not an A2A 1.0 agent card: {e}")))?;
        let interface = card
            .supported_interfaces
            .iter()
            .find(|i| {
                i.protocol_binding.eq_ignore_ascii_case(::a2a::TRANSPORT_PROTOCOL_JSONRPC)
                    && i.protocol_version.split('.').next() == Some("1")
            })
            .ok_or_else(|| card_error("the card names no JSON-RPC interface of protocol 1.x".to_owned()))?;
        let endpoint = interface.url.clone();
        let parsed = reqwest::Url::parse(&endpoint).map_err(|e| card_error(format!("interface `{endpoint}`: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") || metadata_host(parsed.host_str().unwrap_or_default()) {
            return Err(card_error(format!(
                "the interface `{endpoint}` is refused: not HTTP, or an instance-metadata address"
            )));
        }
        let tool_name = tool_name(self.name.as_deref().unwrap_or(&card.name));
        let description = description(&card);
        Ok(A2aAgent {
            inner: Arc::new(Inner {
                card,
                endpoint,
                tool_name,
                description,
                http,
                token: self.token,
                timeout: self.timeout,
            }),
        })
    }
}

/// A remote A2A agent, as a [`Tool`] (see the [module](self)).
#[derive(Clone)]
pub struct A2aAgent {
    inner: Arc<Inner>,
}

struct Inner {
    card: AgentCard,
    endpoint: String,
    tool_name: String,
    description: String,
    http: reqwest::Client,
    token: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for A2aAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("A2aAgent").field("name", &self.inner.tool_name).field("endpoint", &self.inner.endpoint).finish()
    }
}

impl A2aAgent {
    /// A builder for the agent at `url`: its base (whose card is at
    /// `<url>/.well-known/agent-card.json`) or its card's URL.
    pub fn builder(url: impl Into<String>) -> A2aAgentBuilder {
        A2aAgentBuilder { url: url.into(), token: None, name: None, timeout: CALL_TIMEOUT }
    }

    /// Connects to the agent at `url` without a token: [`A2aAgent::builder`] then
    /// [`connect`](A2aAgentBuilder::connect).
    pub async fn connect(url: impl Into<String>) -> Result<Self, A2aError> {
        Self::builder(url).connect().await
    }

    /// The agent's card, as read.
    pub fn card(&self) -> &AgentCard {
        &self.inner.card
    }

    /// The JSON-RPC endpoint calls go to.
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    /// Sends `text` as message `message_id` (on task `task_id`, or in context
    /// `context_id` for a new task), and follows the task until it ends or needs
    /// input: the task as it then stands.
    pub async fn ask(
        &self,
        text: &str,
        message_id: &str,
        task_id: Option<&str>,
        context_id: Option<&str>,
    ) -> Result<Task, A2aError> {
        let message = Message {
            message_id: message_id.to_owned(),
            context_id: if task_id.is_some() { None } else { context_id.map(str::to_owned) },
            task_id: task_id.map(str::to_owned),
            role: Role::User,
            parts: vec![Part::text(text)],
            metadata: None,
            extensions: None,
            reference_task_ids: None,
        };
        let sent = self.call(::a2a::methods::SEND_MESSAGE, json!({ "message": message })).await?;
        let mut task = match serde_json::from_value::<SendMessageResponse>(sent).map_err(|e| self.malformed(e))? {
            SendMessageResponse::Task(task) => task,
            // An answer without a task: done at once.
            SendMessageResponse::Message(message) => Task {
                id: message.task_id.clone().unwrap_or_default(),
                context_id: message.context_id.clone().unwrap_or_default(),
                status: ::a2a::TaskStatus { state: TaskState::Completed, message: Some(message), timestamp: None },
                artifacts: None,
                history: None,
                metadata: None,
            },
        };
        let mut wait = Duration::from_secs(1);
        while matches!(task.status.state, TaskState::Submitted | TaskState::Working | TaskState::Unspecified) {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(MAX_POLL);
            task = self.task(&task.id).await?;
        }
        Ok(task)
    }

    /// Reads task `id`.
    pub async fn task(&self, id: &str) -> Result<Task, A2aError> {
        let task = self.call(::a2a::methods::GET_TASK, json!({ "id": id })).await?;
        serde_json::from_value(task).map_err(|e| self.malformed(e))
    }

    /// Cancels task `id`: the task as it then stands.
    pub async fn cancel(&self, id: &str) -> Result<Task, A2aError> {
        let task = self.call(::a2a::methods::CANCEL_TASK, json!({ "id": id })).await?;
        serde_json::from_value(task).map_err(|e| self.malformed(e))
    }

    fn malformed(&self, e: impl std::fmt::Display) -> A2aError {
        A2aError::Transport {
            agent: self.inner.card.name.clone(),
            reason: format!("an answer that is not A2A 1.0's: {e}"),
        }
    }

    /// One JSON-RPC call: its result.
    async fn call(&self, method: &str, params: Value) -> Result<Value, A2aError> {
        let agent = || self.inner.card.name.clone();
        let id = JsonRpcId::String(loopstack_core::RunId::new().to_string());
        let body = JsonRpcRequest::new(id.clone(), method, Some(params));
        let mut request = self
            .inner
            .http
            .post(&self.inner.endpoint)
            .timeout(self.inner.timeout)
            .header(::a2a::SVC_PARAM_VERSION, ::a2a::VERSION)
            .header(reqwest::header::ACCEPT, "application/json")
            .json(&body);
        if let Some(token) = &self.inner.token {
            request = request.bearer_auth(token);
        }
        let response =
            request.send().await.map_err(|e| A2aError::Transport { agent: agent(), reason: e.to_string() })?;
        let status = response.status();
        let bytes = read(response).await.map_err(|reason| A2aError::Transport { agent: agent(), reason })?;
        let answer: JsonRpcResponse = serde_json::from_slice(&bytes).map_err(|e| A2aError::Transport {
            agent: agent(),
            reason: format!("HTTP {status}, and not a JSON-RPC answer: {e}"),
        })?;
        if answer.id != id {
            return Err(A2aError::Transport { agent: agent(), reason: "the answer is to another request".to_owned() });
        }
        if let Some(error) = answer.error {
            return Err(A2aError::Protocol { agent: agent(), code: error.code, message: error.message });
        }
        answer
            .result
            .ok_or_else(|| A2aError::Transport { agent: agent(), reason: "the answer has no result".to_owned() })
    }
}

#[async_trait::async_trait]
impl Tool for A2aAgent {
    fn name(&self) -> &str {
        &self.inner.tool_name
    }

    fn description(&self) -> &str {
        &self.inner.description
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "message": { "type": "string", "description": "What to tell or ask the agent." },
                "task_id": {
                    "type": "string",
                    "description": "The task to go on with, when the agent asked for more input; leave it out for a new task.",
                },
            },
            "required": ["message"],
            "additionalProperties": false,
        })
    }

    fn options(&self) -> ToolOptions {
        ToolOptions::new().effect(Effect::Idempotent).timeout(self.inner.timeout)
    }

    async fn call(&self, args: Value, cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Args {
            message: String,
            #[serde(default)]
            task_id: Option<String>,
        }
        let args: Args = loopstack_core::parse_tool_arguments(self.name(), args)?;
        // The same call sends the same message, every attempt.
        let message_id = match cx.idempotency_key() {
            Some(key) => format!("loopstack:{key}"),
            None => format!("loopstack:{}", loopstack_core::RunId::new()),
        };
        let context = cx.run_id().map(|run| format!("loopstack:{run}"));
        let task = self
            .ask(&args.message, &message_id, args.task_id.as_deref(), context.as_deref())
            .await
            .map_err(ToolError::new)?;
        self.output(task)
    }
}

impl A2aAgent {
    /// What the model reads of a task that ended or needs input.
    fn output(&self, task: Task) -> Result<ToolOutput, ToolError> {
        let status_text = task.status.message.as_ref().map(|m| parts_text(&m.parts)).unwrap_or_default();
        let value = json!({ "task_id": task.id, "context_id": task.context_id, "state": task.status.state });
        match task.status.state {
            TaskState::Completed => {
                let artifacts: Vec<String> =
                    task.artifacts.iter().flatten().map(|a| parts_text(&a.parts)).filter(|t| !t.is_empty()).collect();
                let text = if artifacts.is_empty() { status_text } else { artifacts.join("\n\n") };
                Ok(ToolOutput::text(text).with_value(value))
            }
            TaskState::InputRequired | TaskState::AuthRequired => {
                let what = if task.status.state == TaskState::AuthRequired { "authorization" } else { "input" };
                Ok(ToolOutput::text(format!(
                    "`{}` needs {what} to go on with task {}: {status_text}\nCall `{}` again with task_id \"{}\" and \
                     the answer as message.",
                    self.inner.card.name, task.id, self.inner.tool_name, task.id
                ))
                .with_value(value))
            }
            state => Err(ToolError::new(format!(
                "`{}`'s task {} ended {}: {status_text}",
                self.inner.card.name,
                task.id,
                match state {
                    TaskState::Failed => "failed",
                    TaskState::Canceled => "cancelled",
                    TaskState::Rejected => "rejected",
                    _ => "in a state this client does not know",
                }
            ))),
        }
    }
}

/// The text of parts: text as it is, data as JSON, files by their URL or name.
fn parts_text(parts: &[Part]) -> String {
    parts
        .iter()
        .map(|p| match &p.content {
            PartContent::Text(text) => text.clone(),
            PartContent::Data(value) => value.to_string(),
            PartContent::Url(url) => format!("(a file at {url})"),
            PartContent::Raw(bytes) => {
                format!(
                    "(a file of {} bytes{})",
                    bytes.len(),
                    p.filename.as_deref().map(|n| format!(", {n}")).unwrap_or_default()
                )
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The card's name as a tool's name: letters, digits, `_` and `-`, at most 64.
fn tool_name(name: &str) -> String {
    let name: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(64)
        .collect();
    if name.is_empty() { "a2a_agent".to_owned() } else { name }
}

/// What the model reads of the agent: its description and skills.
fn description(card: &AgentCard) -> String {
    let mut text = format!("The remote agent `{}`: {}", card.name, card.description);
    for skill in &card.skills {
        text.push_str(&format!("\n- {}: {}", skill.name, skill.description));
    }
    text.push_str("\nWhen it needs more input it says so with a task id: call again with that task_id and the answer.");
    text
}

/// A response's body, at most [`MAX_BODY`] bytes.
async fn read(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(format!("the answer is larger than {MAX_BODY} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Whether `host` is an instance-metadata address (link-local, or the clouds'
/// names for it): a hostile card must not send calls there.
fn metadata_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_link_local(),
        Ok(std::net::IpAddr::V6(ip)) => (ip.segments()[0] & 0xffc0) == 0xfe80,
        Err(_) => matches!(host, "metadata" | "metadata.google.internal" | "metadata.azure.internal"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_tool_names_and_metadata_hosts_are_refused() {
        assert_eq!(tool_name("Billing Agent (EU)"), "Billing_Agent__EU_");
        assert_eq!(tool_name(""), "a2a_agent");
        assert_eq!(tool_name(&"x".repeat(100)).len(), 64);
        for host in ["169.254.169.254", "[fe80::1]", "metadata.google.internal"] {
            assert!(metadata_host(host), "{host}");
        }
        for host in ["127.0.0.1", "agents.example.com", "[::1]"] {
            assert!(!metadata_host(host), "{host}");
        }
    }
}
