//! The tools of [Model Context Protocol](https://modelcontextprotocol.io) servers as
//! loopstack tools (feature `mcp`, on the [`rmcp`](https://docs.rs/rmcp) crate).
//!
//! Describe a server with [`McpServer`] (a command spoken to over stdio, or a URL
//! spoken to over streamable HTTP) and its options, then connect it:
//! [`McpTools::connect`] lists the server's tools, and each becomes a [`Tool`] of a
//! [`ToolRegistry`] ([`McpTools::register`], or [`McpRegistryExt::add_mcp`] in one
//! step). A model then calls them like any other tool; each call's result (its text
//! content, its structured content, its `isError`) is the tool's result.
//!
//! ```no_run
//! use loopstack_core::ToolRegistry;
//! use loopstack_llm::mcp::{McpRegistryExt as _, McpServer};
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), loopstack_llm::mcp::McpError> {
//! let mut tools = ToolRegistry::new();
//! // The reference file server, its tools as `fs_read_file`, `fs_write_file`, ...
//! let files = McpServer::stdio("npx", ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"])
//!     .prefix("fs_")
//!     .allow(["read_file", "write_file", "list_directory"])
//!     .approve("write_file")
//!     .timeout(Duration::from_secs(10));
//! tools.add_mcp(files).await?;
//! // A remote server over streamable HTTP, its token from the environment.
//! let remote = McpServer::http("https://mcp.example.com/mcp").bearer_from_env("EXAMPLE_TOKEN");
//! tools.add_mcp(remote).await?;
//! # Ok(()) }
//! ```
//!
//! What goes wrong in a call is the call's error result, which the model reads, and
//! the run goes on: an error the server answers with, a server that closes the
//! connection during the call (a stdio server is started again for the next call,
//! an HTTP one connected again),
//! one that cannot be started again, and (through the tool's timeout, as for every
//! tool) a call that takes too long, after which the server is told the call is
//! cancelled. A server that cannot be started or does not answer the handshake when
//! it is connected is an [`McpError`].
//!
//! A stdio server's process (and the processes it starts: it leads a process group)
//! is ended when the last of its tools and of its [`McpTools`] handles is dropped.
//! Each call carries its [`idempotency key`](ToolContext::idempotency_key) in the
//! request's `_meta`, under [`IDEMPOTENCY_KEY_META`], and its call id under
//! [`CALL_ID_META`]. A server's `notifications/tools/list_changed` refreshes
//! [`McpTools::tool_names`]; tools registered already keep their description and
//! schema, a tool the server stopped offering answers each call with an error, and a
//! tool it started offering joins the registries it is registered into afterwards.
//!
//! An agent without MCP tools runs no code of this module.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use loopstack_core::{
    RegistryError, Tool, ToolContext, ToolError, ToolOptions, ToolOutput, ToolRegistry, is_valid_tool_name,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelledNotification, CancelledNotificationParam, ClientCapabilities,
    ClientInfo, ClientRequest, Implementation, Meta, RawContent, Request, RequestId, ResourceContents, ServerResult,
};
use rmcp::service::{NotificationContext, Peer, PeerRequestOptions, RoleClient, RunningService, ServiceError};
use rmcp::{ClientHandler, ServiceExt as _};
use serde_json::Value;
use tracing::Instrument as _;

/// The key of a call's idempotency key in its request's `_meta`.
pub const IDEMPOTENCY_KEY_META: &str = "loopstack/idempotencyKey";
/// The key of a call's id (the provider's, as the model made it) in its request's `_meta`.
pub const CALL_ID_META: &str = "loopstack/callId";
/// How long a server has to start and answer the handshake, unless set.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an MCP server could not be connected or its tools registered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The command line names no program.
    #[error("the MCP server command line is empty")]
    EmptyCommand,
    /// The server's process could not be started.
    #[error("could not start the MCP server `{server}`: {source}")]
    Spawn {
        /// The server's name.
        server: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The server did not complete the MCP handshake: it exited, spoke something
    /// else, refused, or could not be reached.
    #[error("the MCP server `{server}` did not complete the handshake: {message}")]
    Handshake {
        /// The server's name.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// The server did not answer the handshake in time.
    #[error("the MCP server `{server}` did not answer the handshake within {after:?}")]
    ConnectTimeout {
        /// The server's name.
        server: String,
        /// How long it was given.
        after: Duration,
    },
    /// The server did not list its tools.
    #[error("the MCP server `{server}` did not list its tools: {message}")]
    ListTools {
        /// The server's name.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// An environment variable a header is taken from is not set.
    #[error("the MCP server `{server}` needs the environment variable `{var}`, which is not set")]
    MissingEnv {
        /// The server's name.
        server: String,
        /// The variable.
        var: String,
    },
    /// A header's name or value is not valid in HTTP.
    #[error("the MCP server `{server}`'s header `{name}` is invalid: {message}")]
    InvalidHeader {
        /// The server's name.
        server: String,
        /// The header's name.
        name: String,
        /// Why.
        message: String,
    },
    /// An option names tools the server does not offer (a typo, or a server of
    /// another version).
    #[error("`{option}` names tools the MCP server `{server}` does not offer: {}; it offers: {}", .names.join(", "), .available.join(", "))]
    UnknownTools {
        /// The server's name.
        server: String,
        /// The option: `allow`, `approve` or `tool_timeout`.
        option: &'static str,
        /// The names it does not offer.
        names: Vec<String>,
        /// The names it offers.
        available: Vec<String>,
    },
    /// A tool could not be registered (its name is taken).
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// A header value: as given, or read from the environment when connecting.
#[derive(Clone)]
enum HeaderValue {
    Plain(String),
    Env(String),
}

impl fmt::Debug for HeaderValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // A token is not printed.
            Self::Plain(_) => f.write_str("\"***\""),
            Self::Env(var) => write!(f, "env({var})"),
        }
    }
}

#[derive(Clone)]
enum Transport {
    Stdio { program: OsString, args: Vec<OsString>, env: Vec<(OsString, OsString)>, cwd: Option<PathBuf> },
    Http { url: String, headers: Vec<(String, HeaderValue)>, bearer: Option<HeaderValue> },
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The environment's values (tokens, often) are not printed, only its names.
            Self::Stdio { program, args, env, cwd } => f
                .debug_struct("Stdio")
                .field("program", program)
                .field("args", args)
                .field("env", &env.iter().map(|(k, _)| k).collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish(),
            Self::Http { url, headers, bearer } => {
                f.debug_struct("Http").field("url", url).field("headers", headers).field("bearer", bearer).finish()
            }
        }
    }
}

/// An MCP server to connect, and how its tools are registered. Build it with
/// [`McpServer::stdio`], [`McpServer::command_line`] or [`McpServer::http`] and the
/// setters, then connect it with [`McpTools::connect`] or
/// [`McpRegistryExt::add_mcp`].
///
/// Tool names in [`allow`](Self::allow), [`approve`](Self::approve) and
/// [`tool_timeout`](Self::tool_timeout) are the server's names, without the prefix;
/// a name the server does not offer is an [`McpError::UnknownTools`] when connecting.
///
/// ```
/// use loopstack_llm::mcp::McpServer;
/// use std::time::Duration;
///
/// let server = McpServer::command_line("npx -y @modelcontextprotocol/server-everything")?
///     .name("everything")
///     .env("LOG_LEVEL", "warn")
///     .prefix("ev_")
///     .allow(["echo", "get-sum"])
///     .approve("get-sum")
///     .timeout(Duration::from_secs(5));
/// assert_eq!(server.server_name(), "everything");
/// # Ok::<(), loopstack_llm::mcp::McpError>(())
/// ```
#[derive(Debug, Clone)]
pub struct McpServer {
    name: Option<String>,
    transport: Transport,
    prefix: String,
    allow: Option<BTreeSet<String>>,
    approve: BTreeSet<String>,
    timeout: Option<Duration>,
    tool_timeouts: BTreeMap<String, Duration>,
    connect_timeout: Duration,
    secrets: Option<loopstack_core::secrets::Secrets>,
}

impl McpServer {
    fn with_transport(transport: Transport) -> Self {
        Self {
            name: None,
            transport,
            prefix: String::new(),
            allow: None,
            approve: BTreeSet::new(),
            timeout: None,
            tool_timeouts: BTreeMap::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            secrets: None,
        }
    }

    /// A server started as `program args...` and spoken to over its stdin and
    /// stdout; its stderr is this process's.
    pub fn stdio<I, S>(program: impl Into<OsString>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Self::with_transport(Transport::Stdio {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            cwd: None,
        })
    }

    /// A stdio server from one command line, split at whitespace; a word in single
    /// or double quotes may contain whitespace (`"npx -y 'my server'"`). There is
    /// no other shell syntax: no variables, escapes or pipes.
    pub fn command_line(line: &str) -> Result<Self, McpError> {
        let mut words = split_command_line(line).into_iter();
        let program = words.next().ok_or(McpError::EmptyCommand)?;
        Ok(Self::stdio(program, words))
    }

    /// A server spoken to over streamable HTTP at `url` (for instance
    /// `http://127.0.0.1:3001/mcp`).
    pub fn http(url: impl Into<String>) -> Self {
        Self::with_transport(Transport::Http { url: url.into(), headers: Vec::new(), bearer: None })
    }

    /// Names the server in errors, logs and spans (the program's file name, or the
    /// URL, unless set).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The server's name: as set with [`name`](Self::name), or the program's file
    /// name, or the URL.
    pub fn server_name(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        match &self.transport {
            Transport::Stdio { program, args, .. } => {
                let program = std::path::Path::new(program)
                    .file_name()
                    .map_or_else(|| program.to_string_lossy(), |f| f.to_string_lossy())
                    .into_owned();
                // `npx -y pkg` and `node server.js` are named by what they run.
                match (program.as_str(), args.iter().find(|a| !a.to_string_lossy().starts_with('-'))) {
                    ("npx" | "node" | "uvx" | "python" | "python3" | "deno" | "bunx", Some(what)) => {
                        format!("{program} {}", what.to_string_lossy())
                    }
                    _ => program,
                }
            }
            Transport::Http { url, .. } => url.clone(),
        }
    }

    /// Sets an environment variable of a stdio server's process (it inherits this
    /// process's environment besides). Ignored for an HTTP server.
    #[must_use]
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        if let Transport::Stdio { env, .. } = &mut self.transport {
            env.push((key.into(), value.into()));
        }
        self
    }

    /// Sets the working directory of a stdio server's process. Ignored for an HTTP
    /// server.
    #[must_use]
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        if let Transport::Stdio { cwd, .. } = &mut self.transport {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Sends a header with every request to an HTTP server. Ignored for a stdio
    /// server.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Http { headers, .. } = &mut self.transport {
            headers.push((name.into(), HeaderValue::Plain(value.into())));
        }
        self
    }

    /// Sends a header whose value is read from the environment variable `var` each
    /// time the server is connected. Ignored for a stdio server.
    #[must_use]
    pub fn header_from_env(mut self, name: impl Into<String>, var: impl Into<String>) -> Self {
        if let Transport::Http { headers, .. } = &mut self.transport {
            headers.push((name.into(), HeaderValue::Env(var.into())));
        }
        self
    }

    /// Sends `Authorization: Bearer <token>` to an HTTP server. Ignored for a stdio
    /// server.
    #[must_use]
    pub fn bearer(mut self, token: impl Into<String>) -> Self {
        if let Transport::Http { bearer, .. } = &mut self.transport {
            *bearer = Some(HeaderValue::Plain(token.into()));
        }
        self
    }

    /// Sends `Authorization: Bearer <token>`, the token read from the environment
    /// variable `var` each time the server is connected (an unset variable is an
    /// [`McpError::MissingEnv`]). Ignored for a stdio server.
    #[must_use]
    pub fn bearer_from_env(mut self, var: impl Into<String>) -> Self {
        if let Transport::Http { bearer, .. } = &mut self.transport {
            *bearer = Some(HeaderValue::Env(var.into()));
        }
        self
    }

    /// Registers the values of the headers and the bearer token (those read from the
    /// environment too, when they are read) with `secrets`, such as
    /// [`Runtime::secrets`](loopstack_core::Runtime::secrets), so they are redacted
    /// from tool results, documents and logs.
    #[must_use]
    pub fn redact_with(mut self, secrets: loopstack_core::secrets::Secrets) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// Puts `prefix` before each tool's name, against clashes with other tools
    /// (`fs_` makes `read_file` the tool `fs_read_file`).
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Registers only these tools of the server (all of them unless set). Calling
    /// it again adds to the list.
    #[must_use]
    pub fn allow<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allow.get_or_insert_with(BTreeSet::new).extend(tools.into_iter().map(Into::into));
        self
    }

    /// Makes each call of the server's tool `tool` wait for a person's approval (see
    /// [`ToolOptions::approve`]).
    #[must_use]
    pub fn approve(mut self, tool: impl Into<String>) -> Self {
        self.approve.insert(tool.into());
        self
    }

    /// Sets the timeout of each call of the server's tools (the caller's default,
    /// 30 s in an agent, unless set). A call that outlives it is the call's error
    /// result, and the server is told the call is cancelled.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the timeout of the server's tool `tool`, over [`timeout`](Self::timeout).
    #[must_use]
    pub fn tool_timeout(mut self, tool: impl Into<String>, timeout: Duration) -> Self {
        self.tool_timeouts.insert(tool.into(), timeout);
        self
    }

    /// Sets how long the server has to start and answer the handshake (30 s unless
    /// set), when it is connected and each time it is started again.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The name a remote tool gets here: the prefix, then the remote name with each
    /// character a tool name may not have (`.`, `/`, ...) written `_`.
    fn local_name(&self, remote: &str) -> String {
        let mut name = self.prefix.clone();
        name.extend(remote.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }));
        name
    }

    fn options_for(&self, remote: &str) -> ToolOptions {
        let mut options = ToolOptions::new().approve(self.approve.contains(remote));
        if let Some(timeout) = self.tool_timeouts.get(remote).copied().or(self.timeout) {
            options = options.timeout(timeout);
        }
        options
    }

    fn allows(&self, remote: &str) -> bool {
        self.allow.as_ref().is_none_or(|allow| allow.contains(remote))
    }
}

/// Splits a command line at whitespace, keeping quoted words whole.
fn split_command_line(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The tools a connected server offers now (all of them: the allow-list filters
/// where they are used), shared with the notification handler that refreshes them.
type ToolList = Arc<RwLock<Arc<[rmcp::model::Tool]>>>;

/// Answers the server's notifications: a changed tool list is listed again.
struct Handler {
    server: Arc<str>,
    tools: ToolList,
    changes: tokio::sync::watch::Sender<Vec<String>>,
    config: Arc<McpServer>,
}

impl Handler {
    fn store(&self, list: Vec<rmcp::model::Tool>) {
        store_tools(&self.config, &self.tools, &self.changes, list);
    }
}

fn store_tools(
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

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        match context.peer.list_all_tools().await {
            Ok(list) => {
                tracing::debug!(server = %self.server, tools = list.len(), "MCP tool list changed");
                self.store(list);
            }
            Err(e) => tracing::warn!(server = %self.server, error = %e, "MCP tool list changed, but listing it failed"),
        }
    }

    fn get_info(&self) -> ClientInfo {
        ClientInfo {
            meta: None,
            protocol_version: Default::default(),
            capabilities: ClientCapabilities::default(),
            client_info: Implementation {
                name: "loopstack".into(),
                title: None,
                version: env!("CARGO_PKG_VERSION").into(),
                description: None,
                icons: None,
                website_url: None,
            },
        }
    }
}

type Live = RunningService<RoleClient, Handler>;

/// One server: its configuration, its live connection (started again when it
/// died), and the tools it offers now.
struct Connection {
    config: Arc<McpServer>,
    server: Arc<str>,
    live: tokio::sync::Mutex<Option<Live>>,
    tools: ToolList,
    changes: tokio::sync::watch::Sender<Vec<String>>,
    starts: std::sync::atomic::AtomicU64,
}

impl Connection {
    /// Starts the server (or opens the HTTP session) and completes the handshake.
    async fn start(&self) -> Result<Live, McpError> {
        let server = self.server.to_string();
        let handler = Handler {
            server: self.server.clone(),
            tools: self.tools.clone(),
            changes: self.changes.clone(),
            config: self.config.clone(),
        };
        let handshake_failed = |e: rmcp::service::ClientInitializeError| McpError::Handshake {
            server: server.clone(),
            message: e.to_string(),
        };
        let connect = async {
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
                    let (transport, _) = rmcp::transport::TokioChildProcess::builder(command)
                        .stderr(Stdio::inherit())
                        .spawn()
                        .map_err(|source| McpError::Spawn { server: server.clone(), source })?;
                    handler.serve(transport).await.map_err(handshake_failed)
                }
                Transport::Http { url, headers, bearer } => {
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
                        let key = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                            .map_err(|e| invalid(e.to_string()))?;
                        let mut value = reqwest::header::HeaderValue::from_str(&read(value)?)
                            .map_err(|e| invalid(e.to_string()))?;
                        value.set_sensitive(true);
                        map.append(key, value);
                    }
                    let client = reqwest::Client::builder().default_headers(map).build().map_err(|e| {
                        McpError::Handshake { server: server.clone(), message: format!("no HTTP client: {e}") }
                    })?;
                    let mut config =
                        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                            url.as_str(),
                        );
                    if let Some(token) = bearer {
                        config = config.auth_header(read(token)?);
                    }
                    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
                    handler.serve(transport).await.map_err(handshake_failed)
                }
            }
        };
        let after = self.config.connect_timeout;
        let live = tokio::time::timeout(after, connect)
            .await
            .map_err(|_| McpError::ConnectTimeout { server: server.clone(), after })??;
        let list = live
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| McpError::ListTools { server: server.clone(), message: e.to_string() })?;
        store_tools(&self.config, &self.tools, &self.changes, list);
        self.starts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(live)
    }

    /// The live connection's peer and which start it is of, starting the server
    /// again when it died.
    async fn peer(&self) -> Result<(Peer<RoleClient>, u64), McpError> {
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
    async fn discard(&self, start: u64) {
        let mut live = self.live.lock().await;
        if self.starts.load(std::sync::atomic::Ordering::Relaxed) == start && live.take().is_some() {
            tracing::info!(server = %self.server, "the MCP server's connection lost a call's answer; connecting again on the next call");
        }
    }

    fn current(&self, remote: &str) -> bool {
        self.config.allows(remote)
            && self.tools.read().unwrap_or_else(|e| e.into_inner()).iter().any(|t| t.name == remote)
    }

    async fn call(&self, remote: &str, args: Value, cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let server = &*self.server;
        let arguments = match args {
            Value::Object(map) => Some(map),
            Value::Null => None,
            _ => {
                return Err(ToolError::invalid_arguments(format!("the arguments of `{remote}` must be a JSON object")));
            }
        };
        let (peer, start) = self.peer().await.map_err(|e| {
            ToolError::new(format!("the MCP server `{server}` is not running and could not be started again: {e}"))
        })?;
        if !self.current(remote) {
            return Err(ToolError::new(format!("the MCP server `{server}` no longer offers the tool `{remote}`")));
        }
        let mut meta = Meta::new();
        meta.0.insert(CALL_ID_META.into(), Value::String(cx.call_id().to_owned()));
        if let Some(key) = cx.idempotency_key() {
            meta.0.insert(IDEMPOTENCY_KEY_META.into(), Value::String(key));
        }
        let params = CallToolRequestParams { meta: None, name: remote.to_owned().into(), arguments, task: None };
        let request = ClientRequest::CallToolRequest(Request::new(params));
        let options = PeerRequestOptions { timeout: None, meta: Some(meta) };
        let closed = || {
            let again = if matches!(self.config.transport, Transport::Stdio { .. }) { "started" } else { "connected" };
            ToolError::new(format!(
                "the MCP server `{server}` closed the connection during the call to `{remote}`; it is {again} again \
                 for the next call"
            ))
        };
        let handle = match peer.send_cancellable_request(request, options).await {
            Ok(handle) => handle,
            Err(_) => {
                self.discard(start).await;
                return Err(closed());
            }
        };
        // Dropped before the answer (the call timed out, or its run was cancelled):
        // the server is told to stop.
        let mut guard = CancelOnDrop { peer: Some(handle.peer.clone()), id: handle.id.clone() };
        let mut rx = handle.rx;
        let answer = tokio::select! {
            answer = &mut rx => answer,
            () = cx.cancellation().cancelled() => {
                return Err(ToolError::new(format!("the call to `{remote}` was cancelled")));
            }
        };
        guard.peer = None;
        match answer {
            Err(_) | Ok(Err(ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                self.discard(start).await;
                Err(closed())
            }
            Ok(Err(ServiceError::McpError(e))) => Err(ToolError::new(format!(
                "the MCP server `{server}` answered the call to `{remote}` with an error: {} (code {})",
                e.message, e.code.0
            ))),
            Ok(Err(e)) => {
                Err(ToolError::new(format!("the call to `{remote}` on the MCP server `{server}` failed: {e}")))
            }
            Ok(Ok(ServerResult::CallToolResult(result))) => Ok(to_output(result)),
            Ok(Ok(_)) => Err(ToolError::new(format!(
                "the MCP server `{server}` answered the call to `{remote}` with something other than a tool result"
            ))),
        }
    }
}

/// Tells the server a call is cancelled when its future is dropped unanswered.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let notification = CancelledNotification {
            params: CancelledNotificationParam {
                request_id: self.id.clone(),
                reason: Some("the caller stopped waiting (timeout or cancellation)".into()),
            },
            method: Default::default(),
            extensions: Default::default(),
        };
        runtime.spawn(async move {
            let _ = peer.send_notification(notification.into()).await;
        });
    }
}

/// A call's result as the tool's output: the structured content as JSON when there
/// is some, else the text of the content blocks, one a line; `isError` makes it an
/// error result.
fn to_output(result: CallToolResult) -> ToolOutput {
    let is_error = result.is_error.unwrap_or(false);
    if let Some(structured) = result.structured_content
        && !is_error
    {
        return ToolOutput::json(structured);
    }
    let text: Vec<String> = result
        .content
        .iter()
        .map(|block| match &block.raw {
            RawContent::Text(t) => t.text.clone(),
            RawContent::Image(i) => format!("[image: {}, {} bytes of base64]", i.mime_type, i.data.len()),
            RawContent::Audio(a) => format!("[audio: {}, {} bytes of base64]", a.mime_type, a.data.len()),
            RawContent::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => format!("[resource {uri}]\n{text}"),
                ResourceContents::BlobResourceContents { uri, mime_type, .. } => {
                    format!("[resource {uri}: {}]", mime_type.as_deref().unwrap_or("binary"))
                }
            },
            RawContent::ResourceLink(link) => format!("[resource link: {} ({})]", link.uri, link.name),
        })
        .collect();
    let text = text.join("\n");
    if is_error { ToolOutput::error(text) } else { ToolOutput::text(text) }
}

/// A tool of an MCP server, registered under its local name.
struct McpTool {
    connection: Arc<Connection>,
    local: String,
    remote: String,
    description: String,
    schema: Value,
    options: ToolOptions,
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
        self.connection.call(&self.remote, args, cx).instrument(span).await
    }
}

/// A connected MCP server: its tools, to register into [`ToolRegistry`]s.
///
/// Clones share the connection. The connection (and a stdio server's process) lives
/// as long as this handle or any tool registered from it.
///
/// ```no_run
/// use loopstack_core::ToolRegistry;
/// use loopstack_llm::mcp::{McpServer, McpTools};
///
/// # async fn demo() -> Result<(), loopstack_llm::mcp::McpError> {
/// let everything = McpTools::connect(McpServer::command_line("npx -y @modelcontextprotocol/server-everything")?).await?;
/// println!("{} offers {}", everything.server_name(), everything.tool_names().join(", "));
/// // One connection, its tools in two registries (one agent's, another's).
/// let (mut triage, mut billing) = (ToolRegistry::new(), ToolRegistry::new());
/// everything.register(&mut triage)?;
/// everything.register(&mut billing)?;
/// // Told when the server's tool list changes.
/// let mut changes = everything.subscribe();
/// # let _ = changes.changed().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpTools {
    connection: Arc<Connection>,
}

impl fmt::Debug for McpTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTools").field("server", &self.connection.server).field("tools", &self.tool_names()).finish()
    }
}

impl McpTools {
    /// Starts the server (or opens the HTTP session), completes the handshake and
    /// lists its tools.
    pub async fn connect(server: McpServer) -> Result<Self, McpError> {
        let name: Arc<str> = server.server_name().into();
        let (changes, _) = tokio::sync::watch::channel(Vec::new());
        let connection = Arc::new(Connection {
            config: Arc::new(server),
            server: name.clone(),
            live: tokio::sync::Mutex::new(None),
            tools: Arc::new(RwLock::new(Arc::from(Vec::new()))),
            changes,
            starts: std::sync::atomic::AtomicU64::new(0),
        });
        connection.peer().await?;
        let this = Self { connection };
        this.check_names()?;
        Ok(this)
    }

    fn check_names(&self) -> Result<(), McpError> {
        let config = &self.connection.config;
        let offered: BTreeSet<String> = {
            let tools = self.connection.tools.read().unwrap_or_else(|e| e.into_inner());
            tools.iter().map(|t| t.name.to_string()).collect()
        };
        let unknown = |option: &'static str, names: &mut dyn Iterator<Item = &String>| {
            let names: Vec<String> = names.filter(|n| !offered.contains(*n)).cloned().collect();
            if names.is_empty() {
                Ok(())
            } else {
                Err(McpError::UnknownTools {
                    server: self.connection.server.to_string(),
                    option,
                    names,
                    available: offered.iter().cloned().collect(),
                })
            }
        };
        if let Some(allow) = &config.allow {
            unknown("allow", &mut allow.iter())?;
        }
        unknown("approve", &mut config.approve.iter())?;
        unknown("tool_timeout", &mut config.tool_timeouts.keys())
    }

    /// The server's name.
    pub fn server_name(&self) -> &str {
        &self.connection.server
    }

    /// The local names (prefixed) of the tools the server offers now, as the
    /// allow-list lets them through.
    pub fn tool_names(&self) -> Vec<String> {
        self.connection.changes.borrow().clone()
    }

    /// A receiver of [`tool_names`](Self::tool_names), marked changed each time the
    /// server's tools are listed again (after `notifications/tools/list_changed`,
    /// or when it is started again).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Vec<String>> {
        self.connection.changes.subscribe()
    }

    /// How many times the server was started (or its HTTP session opened): 1 after
    /// [`connect`](Self::connect), one more each time it was started again after
    /// it died.
    pub fn starts(&self) -> u64 {
        self.connection.starts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The server's tools as [`Tool`]s, one per tool it offers now.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let config = &self.connection.config;
        let list = self.connection.tools.read().unwrap_or_else(|e| e.into_inner()).clone();
        list.iter()
            .filter(|t| config.allows(&t.name))
            .map(|t| {
                let description = t.description.as_deref().filter(|d| !d.is_empty()).map_or_else(
                    || {
                        t.title.clone().unwrap_or_else(|| {
                            format!("The tool `{}` of the MCP server `{}`.", t.name, self.connection.server)
                        })
                    },
                    str::to_owned,
                );
                Arc::new(McpTool {
                    connection: self.connection.clone(),
                    local: config.local_name(&t.name),
                    remote: t.name.to_string(),
                    description,
                    schema: Value::Object((*t.input_schema).clone()),
                    options: config.options_for(&t.name),
                }) as Arc<dyn Tool>
            })
            .collect()
    }

    /// Registers each of the server's tools (see [`tools`](Self::tools)); a name
    /// already taken is an [`McpError::Registry`] (a [`prefix`](McpServer::prefix)
    /// avoids it), and nothing is registered then.
    pub fn register(&self, registry: &mut ToolRegistry) -> Result<(), McpError> {
        let tools = self.tools();
        for tool in &tools {
            if !is_valid_tool_name(tool.name()) {
                return Err(RegistryError::InvalidName(tool.name().to_owned()).into());
            }
            if registry.get(tool.name()).is_some() {
                return Err(RegistryError::Duplicate {
                    name: tool.name().to_owned(),
                    existing: "a registered tool",
                    new: "an MCP tool",
                }
                .into());
            }
        }
        for tool in tools {
            registry.register_arc(tool)?;
        }
        Ok(())
    }
}

/// [`McpTools::connect`] and [`McpTools::register`] in one call on a registry.
///
/// ```no_run
/// use loopstack_core::ToolRegistry;
/// use loopstack_llm::mcp::{McpRegistryExt as _, McpServer};
///
/// # async fn demo() -> Result<(), loopstack_llm::mcp::McpError> {
/// let mut tools = ToolRegistry::new();
/// let server = tools.add_mcp(McpServer::http("http://127.0.0.1:3001/mcp").prefix("ev_")).await?;
/// assert_eq!(tools.len(), server.tool_names().len());
/// # Ok(()) }
/// ```
pub trait McpRegistryExt {
    /// Connects `server` and registers its tools here; returns the connection, for
    /// its tool list.
    fn add_mcp(&mut self, server: McpServer) -> impl Future<Output = Result<McpTools, McpError>> + Send;
}

impl McpRegistryExt for ToolRegistry {
    async fn add_mcp(&mut self, server: McpServer) -> Result<McpTools, McpError> {
        let tools = McpTools::connect(server).await?;
        tools.register(self)?;
        Ok(tools)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_split_at_whitespace_and_keep_quoted_words() {
        assert_eq!(split_command_line("  npx -y  pkg "), ["npx", "-y", "pkg"]);
        assert_eq!(split_command_line(r#"node "my server.js" 'a b' x"y z""#), ["node", "my server.js", "a b", "xy z"]);
        assert_eq!(split_command_line("run ''"), ["run", ""]);
        assert!(split_command_line("   ").is_empty());
        assert!(matches!(McpServer::command_line(" "), Err(McpError::EmptyCommand)));
    }

    #[test]
    fn names_options_and_the_server_name() {
        let server = McpServer::command_line("npx -y @modelcontextprotocol/server-everything stdio")
            .unwrap()
            .prefix("ev_")
            .approve("get-sum")
            .timeout(Duration::from_secs(5))
            .tool_timeout("echo", Duration::from_secs(1));
        assert_eq!(server.server_name(), "npx @modelcontextprotocol/server-everything");
        assert_eq!(server.local_name("get-sum"), "ev_get-sum");
        assert_eq!(server.local_name("files.read/all"), "ev_files_read_all");
        assert!(server.options_for("get-sum").approve);
        assert_eq!(server.options_for("get-sum").timeout, Some(Duration::from_secs(5)));
        assert_eq!(server.options_for("echo").timeout, Some(Duration::from_secs(1)));
        assert!(!server.options_for("echo").approve);
        assert_eq!(McpServer::stdio("/usr/bin/my-server", ["--x"]).server_name(), "my-server");
        assert_eq!(McpServer::http("http://h/mcp").name("h").server_name(), "h");
        let token = McpServer::http("http://h/mcp").bearer("s3cret").header("x-api-key", "k3y");
        assert!(!format!("{token:?}").contains("s3cret") && !format!("{token:?}").contains("k3y"));
        let env = McpServer::stdio("server", ["--x"]).env("API_KEY", "s3cret");
        assert!(format!("{env:?}").contains("API_KEY") && !format!("{env:?}").contains("s3cret"));
    }

    #[test]
    fn results_become_outputs() {
        use rmcp::model::Content;
        let text = CallToolResult::success(vec![Content::text("a"), Content::text("b")]);
        assert_eq!(to_output(text), ToolOutput::text("a\nb"));
        let failed = CallToolResult::error(vec![Content::text("no such file")]);
        assert_eq!(to_output(failed), ToolOutput::error("no such file"));
        let structured = CallToolResult::structured(serde_json::json!({"temperature": 21}));
        assert_eq!(to_output(structured), ToolOutput::json(serde_json::json!({"temperature": 21})));
    }
}
