//! A live connection to an MCP server, and its tools as loopstack tools.

use std::collections::HashSet;
use std::process::Stdio;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use loopstack_core::schema::CompiledSchema;
use loopstack_core::{Tool, ToolContext, ToolError, ToolErrorKind, ToolOptions, ToolOutput};
use rmcp::ClientHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
    Implementation, MetaObject, PaginatedRequestParams, ProtocolVersion, RequestMetaObject, ResourceContents,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService, ServiceError};
use serde_json::Value;
use tracing::Instrument as _;

use super::server::{HeaderValue, McpServer, Transport};
use super::{CALL_ID_META, IDEMPOTENCY_KEY_META, MAX_STDERR_LINE, MAX_TOOL_PAGES, MAX_TOOLS, McpError, STDERR_TARGET};

/// The tools a connected server offers now (all of them: the allow-list filters
/// where they are used), shared with the notification handler that refreshes them.
pub(super) type ToolList = Arc<RwLock<Arc<[rmcp::model::Tool]>>>;

/// Answers the server's notifications: a changed tool list is listed again.
pub(super) struct Handler {
    pub(super) server: Arc<str>,
    pub(super) tools: ToolList,
    pub(super) changes: tokio::sync::watch::Sender<Vec<String>>,
    pub(super) config: Arc<McpServer>,
    /// The server's questions during calls, and the answers to them.
    pub(super) elicitations: Arc<super::input::Elicitations>,
}

impl Handler {
    pub(super) fn store(&self, list: Vec<rmcp::model::Tool>) {
        store_tools(&self.config, &self.tools, &self.changes, list);
    }
}

pub(super) fn store_tools(
    config: &McpServer,
    tools: &ToolList,
    changes: &tokio::sync::watch::Sender<Vec<String>>,
    list: Vec<rmcp::model::Tool>,
) {
    // Kept whole, so the option names can be checked against it; the allow-list
    // filters where tools are used.
    let names: Vec<String> =
        list.iter().filter(|t| config.allows(&t.name)).map(|t| config.local_name(&t.name)).collect();
    *tools.write().unwrap_or_else(|e| e.into_inner()) = list.into();
    changes.send_replace(names);
}

/// The server's tools, page by page, within the bounds [`MAX_TOOL_PAGES`] and
/// [`MAX_TOOLS`], refusing a cursor named twice (a loop), and by `deadline`, the end
/// of a budget of `after` (which the timeout's error names).
pub(super) async fn list_tools(
    peer: &Peer<RoleClient>,
    server: &str,
    deadline: tokio::time::Instant,
    after: Duration,
) -> Result<Vec<rmcp::model::Tool>, McpError> {
    let pages = async {
        let mut tools = Vec::new();
        let mut cursors = HashSet::new();
        let mut cursor = None;
        for _ in 0..MAX_TOOL_PAGES {
            let page = peer
                .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
                .await
                .map_err(|e| McpError::ListTools { server: server.to_owned(), message: e.to_string() })?;
            if tools.len() + page.tools.len() > MAX_TOOLS {
                return Err(McpError::TooManyTools { server: server.to_owned(), limit: MAX_TOOLS });
            }
            tools.extend(page.tools);
            let Some(next) = page.next_cursor else { return Ok(tools) };
            if !cursors.insert(next.clone()) {
                return Err(McpError::RepeatedCursor { server: server.to_owned(), cursor: next });
            }
            cursor = Some(next);
        }
        Err(McpError::TooManyToolPages { server: server.to_owned(), limit: MAX_TOOL_PAGES })
    };
    tokio::time::timeout_at(deadline, pages)
        .await
        .map_err(|_| McpError::ListToolsTimeout { server: server.to_owned(), after })?
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let after = self.config.connect_timeout;
        match list_tools(&context.peer, &self.server, tokio::time::Instant::now() + after, after).await {
            Ok(list) => {
                tracing::debug!(server = %self.server, tools = list.len(), "MCP tool list changed");
                self.store(list);
            }
            Err(e) => tracing::warn!(server = %self.server, error = %e, "MCP tool list changed, but listing it failed"),
        }
    }

    /// A question the server asks during a call: answered from a person's answer
    /// when the call was made again after one, else cancelled and asked of the
    /// person by the call (see [`input`](super::input)).
    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let params = serde_json::to_value(&request).unwrap_or(Value::Null);
        Ok(self.elicitations.ask(params))
    }

    fn get_info(&self) -> ClientConfig {
        // Questions in forms (a person answers them, through the run's wait).
        // rmcp's builders come with its server side; the capabilities read as JSON.
        let capabilities: ClientCapabilities =
            serde_json::from_value(serde_json::json!({ "elicitation": { "form": {} } })).unwrap_or_default();
        ClientConfig::new(capabilities, Implementation::new("loopstack", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

pub(super) type Live = RunningService<RoleClient, Handler>;

/// How a connection starts: it asks the server which revisions it speaks
/// (`server/discover`, 2026-07-28, where each request then carries its version and
/// HTTP needs no session), and falls back to the `initialize` handshake of
/// 2025-11-25 (or the older revision the server answers with) when the server does
/// not know the question.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    }
}

/// One server: its configuration, its live connection (started again when it
/// died), and the tools it offers now.
pub(super) struct Connection {
    pub(super) config: Arc<McpServer>,
    pub(super) server: Arc<str>,
    pub(super) live: tokio::sync::Mutex<Option<Live>>,
    pub(super) tools: ToolList,
    pub(super) changes: tokio::sync::watch::Sender<Vec<String>>,
    pub(super) starts: std::sync::atomic::AtomicU64,
    /// The protocol revision the live connection speaks.
    pub(super) version: RwLock<Option<ProtocolVersion>>,
    /// The server's questions during calls, and the answers to them: kept across
    /// restarts of the connection (a call made again may meet a new one).
    pub(super) elicitations: Arc<super::input::Elicitations>,
}

impl Connection {
    /// Starts the server (or opens the HTTP session) and completes the handshake.
    pub(super) async fn start(&self) -> Result<Live, McpError> {
        let server = self.server.to_string();
        // A server that answers `server/discover` wrongly (with an empty result, as
        // some answer any method they do not know) is spoken to anew with the
        // `initialize` handshake: a stdio server is started again for it.
        let connect = async {
            match self.open(lifecycle()).await {
                Err(McpError::Handshake { message, .. }) => {
                    tracing::debug!(server = %self.server, error = %message, "server/discover failed; trying initialize");
                    self.open(ClientLifecycleMode::Initialize).await
                }
                opened => opened,
            }
        };
        // One bound for the start, the handshake and the listing: a server that
        // answers the handshake and never lists its tools holds neither a connect
        // nor the calls that wait for its restart longer than that.
        let after = self.config.connect_timeout;
        let deadline = tokio::time::Instant::now() + after;
        let live = tokio::time::timeout_at(deadline, connect)
            .await
            .map_err(|_| McpError::ConnectTimeout { server: server.clone(), after })??;
        // The tool list is listed when asked and when the server says it changed,
        // never answered from rmcp's cache.
        live.peer().set_response_cache_config(rmcp::service::ClientCacheConfig::disabled()).await;
        // Dropping `live` on an error ends the server it started.
        let list = list_tools(live.peer(), &server, deadline, after).await?;
        store_tools(&self.config, &self.tools, &self.changes, list);
        let version = live.peer().peer_info().map(|info| info.protocol_version.clone());
        tracing::debug!(server = %self.server, version = ?version, "MCP server connected");
        *self.version.write().unwrap_or_else(|e| e.into_inner()) = version;
        self.starts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(live)
    }

    /// Starts the server (or opens the HTTP connection) and completes the handshake
    /// of `lifecycle`.
    async fn open(&self, lifecycle: ClientLifecycleMode) -> Result<Live, McpError> {
        let server = self.server.to_string();
        let handler = Handler {
            server: self.server.clone(),
            tools: self.tools.clone(),
            changes: self.changes.clone(),
            config: self.config.clone(),
            elicitations: self.elicitations.clone(),
        };
        let handshake_failed = |e: rmcp::service::ClientInitializeError| McpError::Handshake {
            server: server.clone(),
            message: e.to_string(),
        };
        match &self.config.transport {
            Transport::Stdio { program, args, env, cwd } => {
                let mut command = tokio::process::Command::new(program);
                command.args(args).envs(env.iter().map(|(k, v)| (k, v))).kill_on_drop(true);
                if let Some(cwd) = cwd {
                    command.current_dir(cwd);
                }
                let mut command = process_wrap::tokio::CommandWrap::from(command);
                // The server leads a process group, so ending it ends what it
                // started (`npx` runs the server as its child).
                #[cfg(unix)]
                command.wrap(process_wrap::tokio::ProcessGroup::leader());
                let stderr = if self.config.stderr_to_logs { Stdio::piped() } else { Stdio::inherit() };
                let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(command)
                    .stderr(stderr)
                    .spawn()
                    .map_err(|source| McpError::Spawn { server: server.clone(), source })?;
                if let Some(stderr) = stderr {
                    // Ends at the end of the pipe: when the server (and what it
                    // started) has exited or been ended.
                    tokio::spawn(log_stderr(stderr, self.server.clone(), self.config.secrets.clone()));
                }
                handler.serve_with_lifecycle(transport, lifecycle).await.map_err(handshake_failed)
            }
            Transport::Http {
                url,
                headers,
                bearer,
                #[cfg(feature = "mcp-oauth")]
                oauth,
            } => {
                let read = |value: &HeaderValue| {
                    let value = match value {
                        HeaderValue::Plain(v) => v.clone(),
                        HeaderValue::Env(var) => std::env::var(var)
                            .map_err(|_| McpError::MissingEnv { server: server.clone(), var: var.clone() })?,
                    };
                    if let Some(secrets) = &self.config.secrets {
                        secrets.register(&value);
                    }
                    Ok::<_, McpError>(value)
                };
                let mut map = reqwest::header::HeaderMap::new();
                for (name, value) in headers {
                    let invalid = |message: String| McpError::InvalidHeader {
                        server: server.clone(),
                        name: name.clone(),
                        message,
                    };
                    let key =
                        reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|e| invalid(e.to_string()))?;
                    let mut value =
                        reqwest::header::HeaderValue::from_str(&read(value)?).map_err(|e| invalid(e.to_string()))?;
                    value.set_sensitive(true);
                    map.append(key, value);
                }
                let client = loopstack_model::http::client_builder().default_headers(map).build().map_err(|e| {
                    McpError::Handshake { server: server.clone(), message: format!("no HTTP client: {e}") }
                })?;
                let mut config =
                    rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                        url.as_str(),
                    )
                    // An expired session is this client's to notice: the call that
                    // met it fails, and the next one connects and lists the tools
                    // again (a new session may offer other tools).
                    .reinit_on_expired_session(false);
                if let Some(token) = bearer {
                    config = config.auth_header(read(token)?);
                }
                #[cfg(feature = "mcp-oauth")]
                if let Some(oauth) = oauth {
                    // The token rides on each request, refreshed by the manager.
                    let manager = oauth.authorize(&server, url, read, self.config.secrets.as_ref()).await?;
                    let client = rmcp::transport::auth::AuthClient::new(client, manager);
                    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
                    return handler.serve_with_lifecycle(transport, lifecycle).await.map_err(handshake_failed);
                }
                let transport = rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
                handler.serve_with_lifecycle(transport, lifecycle).await.map_err(handshake_failed)
            }
        }
    }

    /// The live connection's peer and which start it is of, starting the server
    /// again when it died.
    pub(super) async fn peer(&self) -> Result<(Peer<RoleClient>, u64), McpError> {
        let mut live = self.live.lock().await;
        let start = self.starts.load(std::sync::atomic::Ordering::Relaxed);
        if let Some(current) = live.as_ref()
            && !current.is_closed()
            && !current.peer().is_transport_closed()
        {
            return Ok((current.peer().clone(), start));
        }
        if live.is_some() {
            tracing::info!(server = %self.server, "the MCP server's connection is closed; starting it again");
        }
        // Drop the dead one first (its process is ended, if any is left).
        *live = None;
        let started =
            self.start().instrument(tracing::info_span!("loopstack.mcp.connect", server = %self.server)).await?;
        let peer = started.peer().clone();
        *live = Some(started);
        Ok((peer, self.starts.load(std::sync::atomic::Ordering::Relaxed)))
    }

    /// Drops the connection of start `start` when it is still the live one: a call
    /// on it lost its answer, and the transport may not know it is broken (an HTTP
    /// session whose server went away keeps failing each request), so the next call
    /// connects again.
    pub(super) async fn discard(&self, start: u64) {
        let mut live = self.live.lock().await;
        if self.starts.load(std::sync::atomic::Ordering::Relaxed) == start && live.take().is_some() {
            tracing::info!(server = %self.server, "the MCP server's connection lost a call's answer; connecting again on the next call");
        }
    }

    pub(super) fn current(&self, remote: &str) -> bool {
        self.config.allows(remote)
            && self.tools.read().unwrap_or_else(|e| e.into_inner()).iter().any(|t| t.name == remote)
    }

    pub(super) async fn call(&self, remote: &str, args: Value, cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let server = &*self.server;
        let arguments = match args {
            Value::Object(map) => Some(map),
            Value::Null => None,
            _ => {
                return Err(ToolError::invalid_arguments(format!("the arguments of `{remote}` must be a JSON object")));
            }
        };
        let (peer, start) = self.peer().await.map_err(|e| {
            let kind = if e.is_timeout() { ToolErrorKind::TimedOut } else { ToolErrorKind::Failed };
            let message = format!("the MCP server `{server}` is not running and could not be started again: {e}");
            ToolError::with_kind(kind, message)
        })?;
        if !self.current(remote) {
            return Err(ToolError::new(format!("the MCP server `{server}` no longer offers the tool `{remote}`")));
        }
        let mut meta = serde_json::Map::new();
        meta.insert(CALL_ID_META.into(), Value::String(cx.call_id().to_owned()));
        if let Some(key) = cx.idempotency_key() {
            meta.insert(IDEMPOTENCY_KEY_META.into(), Value::String(key));
        }
        let mut params = CallToolRequestParams::new(remote.to_owned());
        params.arguments = arguments;
        params.meta = Some(RequestMetaObject(MetaObject(meta)));
        // A call made again with a person's answer: its responses and the server's
        // state (a round trip), or answers for the questions it will meet (live).
        if let Some(answer) = cx.input() {
            match super::input::round_trip_answer(answer) {
                Some((responses, state)) => {
                    params.input_responses = Some(responses);
                    params.request_state = state;
                }
                None => self.elicitations.answer(answer),
            }
        }
        let mark = self.elicitations.mark();
        let closed = || {
            let again = if matches!(self.config.transport, Transport::Stdio { .. }) { "started" } else { "connected" };
            ToolError::new(format!(
                "the MCP server `{server}` closed the connection during the call to `{remote}`; it is {again} again \
                 for the next call"
            ))
        };
        // Dropped before the answer (the call timed out, or its run was cancelled),
        // the call tells the server to stop.
        let mut answer = tokio::select! {
            answer = peer.call_tool_once(params.clone()) => answer,
            () = cx.cancellation().cancelled() => {
                return Err(ToolError::new(format!("the call to `{remote}` was cancelled")));
            }
        };
        // Round trips that ask nothing of a person (roots) are made at once, a few.
        for _ in 0..rmcp::model::DEFAULT_MRTR_MAX_ROUNDS {
            let Ok(CallToolResponse::InputRequired(result)) = &answer else { break };
            let output = super::input::round_trip_request(server, remote, result.clone());
            if !super::input::asks_nobody(&output) {
                break;
            }
            let given = loopstack_core::InputAnswer::new(
                output.input.as_deref().cloned().expect("a request"),
                loopstack_core::InputResponse::Accept(Value::Null),
            );
            let (responses, state) = super::input::round_trip_answer(&given).expect("a round trip's state");
            params.input_responses = Some(responses);
            params.request_state = state;
            answer = tokio::select! {
                answer = peer.call_tool_once(params.clone()) => answer,
                () = cx.cancellation().cancelled() => {
                    return Err(ToolError::new(format!("the call to `{remote}` was cancelled")));
                }
            };
        }
        // Questions the server asked while the call ran: the person answers them,
        // whatever the server made of the cancel.
        let asked = self.elicitations.asked_since(mark);
        if !asked.is_empty() && !matches!(answer, Err(ServiceError::TransportClosed | ServiceError::TransportSend(_))) {
            return Ok(super::input::live_request(server, asked));
        }
        match answer {
            Err(ServiceError::TransportClosed | ServiceError::TransportSend(_)) => {
                self.discard(start).await;
                Err(closed())
            }
            Err(ServiceError::McpError(e)) => Err(ToolError::new(format!(
                "the MCP server `{server}` answered the call to `{remote}` with an error: {} (code {})",
                e.message, e.code.0
            ))),
            Err(ServiceError::UnexpectedResponse) => Err(ToolError::new(format!(
                "the MCP server `{server}` answered the call to `{remote}` with something other than a tool result"
            ))),
            Err(e) => Err(ToolError::new(format!("the call to `{remote}` on the MCP server `{server}` failed: {e}"))),
            Ok(CallToolResponse::Complete(result)) => Ok(to_output(result)),
            Ok(CallToolResponse::InputRequired(result)) => Ok(super::input::round_trip_request(server, remote, result)),
            Ok(_) => Err(ToolError::new(format!(
                "the MCP server `{server}` started a task for the call to `{remote}`, which this client does not \
                 follow yet"
            ))),
        }
    }
}

/// Logs each line of a stdio server's standard error until the pipe ends, a line
/// longer than [`MAX_STDERR_LINE`] in pieces, so a server that never writes a line
/// break costs no more memory than that. Blank lines are not logged.
pub(super) async fn log_stderr(
    stderr: tokio::process::ChildStderr,
    server: Arc<str>,
    secrets: Option<loopstack_core::secrets::Secrets>,
) {
    each_line(stderr, MAX_STDERR_LINE, |line| {
        let line = String::from_utf8_lossy(line);
        let line = line.trim_end_matches(['\r', '\n']);
        if line.trim().is_empty() {
            return;
        }
        let line = secrets.as_ref().map_or(std::borrow::Cow::Borrowed(line), |s| s.redact(line));
        tracing::info!(target: STDERR_TARGET, server = %server, "{line}");
    })
    .await;
}

/// Calls `f` with each line `reader` gives (its line break included) until it ends
/// or fails, a line longer than `max` bytes in pieces of `max` bytes.
pub(super) async fn each_line(reader: impl tokio::io::AsyncRead + Unpin, max: usize, mut f: impl FnMut(&[u8])) {
    use tokio::io::AsyncBufReadExt as _;
    // A piece of no bytes would never end.
    let max = max.max(1);
    let mut reader = tokio::io::BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        let read = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(read) => read,
        };
        let room = &read[..read.len().min(max - line.len())];
        let (taken, ended) = match room.iter().position(|&b| b == b'\n') {
            Some(end) => (end + 1, true),
            None => (room.len(), false),
        };
        line.extend_from_slice(&room[..taken]);
        reader.consume(taken);
        if ended || line.len() >= max {
            f(&line);
            line.clear();
        }
    }
    if !line.is_empty() {
        f(&line);
    }
}

/// A call's result as the tool's output: the text of the content blocks, one a
/// line, for the model, with the images among them (PNG, JPEG, GIF, WebP, not empty,
/// up to the size limit) shown to it too, and any other image named in the text with
/// why it is not shown; the structured content as the value a program reads. A
/// result whose text is only its structured content as JSON (or that has no text)
/// is a JSON result. `isError` makes it an error result, without a value.
pub(super) fn to_output(result: CallToolResult) -> ToolOutput {
    let is_error = result.is_error.unwrap_or(false);
    let structured = result.structured_content.filter(|_| !is_error);
    // An image of a type and size a model takes is also shown to the model.
    let mut images = Vec::new();
    let text: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => t.text.clone(),
            // One a model cannot be sent (empty, say) would have the provider refuse
            // the whole request: the model reads why it is not shown instead.
            ContentBlock::Image(i) => match crate::image::Image::base64(&i.mime_type, i.data.clone()) {
                Ok(image) => {
                    images.push(image);
                    format!("[image: {}, {} bytes of base64]", i.mime_type, i.data.len())
                }
                Err(e) => format!("[image: {}, not shown: {e}]", i.mime_type),
            },
            ContentBlock::Audio(a) => format!("[audio: {}, {} bytes of base64]", a.mime_type, a.data.len()),
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => format!("[resource {uri}]\n{text}"),
                ResourceContents::BlobResourceContents { uri, mime_type, .. } => {
                    format!("[resource {uri}: {}]", mime_type.as_deref().unwrap_or("binary"))
                }
                _ => "[a resource of a kind this client does not know]".to_owned(),
            },
            ContentBlock::ResourceLink(link) => format!("[resource link: {} ({})]", link.uri, link.name),
            _ => "[content of a kind this client does not know]".to_owned(),
        })
        .collect();
    let text = text.join("\n");
    let output = match structured {
        None if is_error => ToolOutput::error(text),
        None => ToolOutput::text(text),
        Some(value) if text.is_empty() || serde_json::from_str::<Value>(&text).is_ok_and(|t| t == value) => {
            ToolOutput::json(value)
        }
        Some(value) => ToolOutput::text(text).with_value(value),
    };
    images.into_iter().fold(output, ToolOutput::with_image)
}

/// A tool of an MCP server, registered under its local name.
pub(super) struct McpTool {
    pub(super) connection: Arc<Connection>,
    pub(super) local: String,
    pub(super) remote: String,
    pub(super) description: String,
    pub(super) schema: Value,
    pub(super) options: ToolOptions,
    /// The tool's output schema, compiled, when it declares one.
    pub(super) output: Option<Arc<OutputSchema>>,
}

/// A tool's declared output schema, against which each of its results' structured
/// content is checked (as the protocol asks a client to).
pub(super) struct OutputSchema(CompiledSchema);

impl OutputSchema {
    /// `schema` compiled; `None`, with a warning, when it does not compile (the
    /// results are then taken unchecked, as from a tool that declares none).
    pub(super) fn compile(server: &str, tool: &str, schema: &rmcp::model::JsonObject) -> Option<Arc<Self>> {
        match CompiledSchema::compile(Value::Object(schema.clone())) {
            Ok(compiled) => Some(Arc::new(Self(compiled))),
            Err(e) => {
                tracing::warn!(server, tool, error = %e, "an MCP tool's output schema does not compile; its results are not checked");
                None
            }
        }
    }

    /// Why `output`, a result that is not an error, does not keep to the schema.
    fn check(&self, output: &ToolOutput) -> Result<(), String> {
        let Some(value) = output.value() else {
            return Err("it declares an output schema but answered without structured content".to_owned());
        };
        self.0
            .check(value, "the result")
            .map_err(|reasons| format!("its structured content does not fit its output schema: {reasons}"))
    }
}

#[async_trait::async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.local
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    fn options(&self) -> ToolOptions {
        self.options
    }

    async fn call(&self, args: Value, cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let span = tracing::info_span!(
            "loopstack.mcp.call",
            server = %self.connection.server,
            tool = %self.remote,
            call_id = %cx.call_id(),
        );
        let output = self.connection.call(&self.remote, args, cx).instrument(span).await?;
        match &self.output {
            Some(schema) if !output.is_error => match schema.check(&output) {
                Ok(()) => Ok(output),
                // The model reads what is wrong instead of a result that is not
                // what the tool promised.
                Err(why) => Ok(ToolOutput::error(format!(
                    "the MCP server `{}` answered the call to `{}` wrongly: {why}",
                    self.connection.server, self.remote
                ))),
            },
            _ => Ok(output),
        }
    }
}
