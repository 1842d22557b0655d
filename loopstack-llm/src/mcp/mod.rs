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
//! cancelled. A server that cannot be started, or does not answer the handshake and
//! list its tools within its [connect timeout](McpServer::connect_timeout) when it is
//! connected, is an [`McpError`]; so is a tool list longer than [`MAX_TOOL_PAGES`]
//! pages or [`MAX_TOOLS`] tools, or one whose pages name a cursor twice (a loop).
//!
//! An image among a result's content is shown to the model when it is one a model
//! can be sent (PNG, JPEG, GIF or WebP, not empty, not over
//! [`DEFAULT_MAX_IMAGE_BYTES`](crate::image::DEFAULT_MAX_IMAGE_BYTES)); any other
//! is not sent, so that the provider does not refuse the whole request: the result's
//! text says in its place why it is not shown (`[image: image/png, not shown: the
//! image is empty]`), and the rest of the result stands.
//!
//! A stdio server's process (and the processes it starts: it leads a process group)
//! is ended when the last of its tools and of its [`McpTools`] handles is dropped.
//! Each call carries its [`idempotency key`](loopstack_core::ToolContext::idempotency_key) in the
//! request's `_meta`, under [`IDEMPOTENCY_KEY_META`], and its call id under
//! [`CALL_ID_META`]. A server's `notifications/tools/list_changed` refreshes
//! [`McpTools::tool_names`]; tools registered already keep their description and
//! schema, a tool the server stopped offering answers each call with an error, and a
//! tool it started offering joins the registries it is registered into afterwards.
//!
//! An agent without MCP tools runs no code of this module.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use loopstack_core::{RegistryError, Tool, ToolRegistry, is_valid_tool_name};
use serde_json::Value;

/// The key of a call's idempotency key in its request's `_meta`.
pub const IDEMPOTENCY_KEY_META: &str = "loopstack/idempotencyKey";
/// The key of a call's id (the provider's, as the model made it) in its request's `_meta`.
pub const CALL_ID_META: &str = "loopstack/callId";
/// How long a server has to start, answer the handshake and list its tools, unless
/// set.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The most pages of a server's tool list that are read (each `tools/list` answer
/// naming a `nextCursor` asks for one more); a longer list is an
/// [`McpError::TooManyToolPages`].
pub const MAX_TOOL_PAGES: usize = 1_000;
/// The most tools taken from one server; more is an [`McpError::TooManyTools`].
pub const MAX_TOOLS: usize = 10_000;
/// The `tracing` target of the lines a stdio server writes to its standard error,
/// with [`McpServer::stderr_to_logs`].
pub const STDERR_TARGET: &str = "loopstack::mcp::stderr";
/// The most bytes of a server's standard error logged as one event: a longer line
/// (or output with no line break at all) is logged in pieces of at most this size,
/// never held whole.
pub const MAX_STDERR_LINE: usize = 16 * 1024;

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
    /// The server's authorization (OAuth 2.1, `McpServer::oauth` with feature
    /// `mcp-oauth`) failed: its metadata, the client's registration, the person's
    /// consent, or the token.
    #[error("the MCP server `{server}` did not authorize this client: {message}")]
    Auth {
        /// The server.
        server: String,
        /// What failed.
        message: String,
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
    /// The server answered the handshake but did not list its tools in time: the
    /// [connect timeout](McpServer::connect_timeout) covers the start, the handshake
    /// and the listing together.
    #[error("the MCP server `{server}` answered the handshake but did not list its tools within {after:?}")]
    ListToolsTimeout {
        /// The server's name.
        server: String,
        /// How long it was given.
        after: Duration,
    },
    /// Each page of the server's tool list named a next one, past [`MAX_TOOL_PAGES`].
    #[error("the MCP server `{server}` lists its tools in more than {limit} pages, the most that are read")]
    TooManyToolPages {
        /// The server's name.
        server: String,
        /// The bound, [`MAX_TOOL_PAGES`].
        limit: usize,
    },
    /// The server lists more than [`MAX_TOOLS`] tools.
    #[error("the MCP server `{server}` lists more than {limit} tools, the most taken from one server")]
    TooManyTools {
        /// The server's name.
        server: String,
        /// The bound, [`MAX_TOOLS`].
        limit: usize,
    },
    /// A page of the server's tool list named, as the next page, a cursor an earlier
    /// page had named: the list would be read in a loop.
    #[error("the MCP server `{server}`'s tool list loops: the cursor `{cursor}` was named twice")]
    RepeatedCursor {
        /// The server's name.
        server: String,
        /// The cursor named twice.
        cursor: String,
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
        /// The option: `allow`, `approve`, `effect` or `tool_timeout`.
        option: &'static str,
        /// The names it does not offer.
        names: Vec<String>,
        /// The names it offers.
        available: Vec<String>,
    },
    /// Two of the server's tools get the same local name (`files.read` and
    /// `files_read` are both `files_read`); nothing is registered. An
    /// [`allow`](McpServer::allow) list that leaves one of them out avoids it.
    #[error(
        "the MCP server `{server}`'s tools `{first}` and `{second}` both get the local name `{name}`; allow only one \
         of them"
    )]
    NameCollision {
        /// The server's name.
        server: String,
        /// The local name both get.
        name: String,
        /// The first tool's name on the server.
        first: String,
        /// The second tool's name on the server.
        second: String,
    },
    /// A tool could not be registered (its name is taken).
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

impl McpError {
    /// Whether the server did not start, answer the handshake or list its tools
    /// within its [connect timeout](McpServer::connect_timeout).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::ConnectTimeout { .. } | Self::ListToolsTimeout { .. })
    }
}

mod connection;
mod input;
#[cfg(feature = "mcp-oauth")]
mod oauth;
mod server;

use connection::{Connection, McpTool, OutputSchema};
#[cfg(feature = "mcp-oauth")]
pub use oauth::{AuthorizeFuture, McpOAuth};
pub use server::McpServer;

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
    /// lists its tools, all within the server's
    /// [connect timeout](McpServer::connect_timeout).
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
            version: RwLock::new(None),
            elicitations: Arc::default(),
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
        unknown("effect", &mut config.effects.keys())?;
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

    /// The protocol revision spoken with the server as last connected: `2026-07-28`
    /// with a server that answers `server/discover` (each request carries its
    /// version; over HTTP, no session), else the one its `initialize` answered
    /// (`2025-11-25`, or an older one it speaks).
    pub fn protocol_version(&self) -> Option<String> {
        let version = self.connection.version.read().unwrap_or_else(|e| e.into_inner());
        version.as_ref().map(ToString::to_string)
    }

    /// The server's tools as [`Tool`]s, one per tool it offers now.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.mcp_tools().into_iter().map(|t| Arc::new(t) as Arc<dyn Tool>).collect()
    }

    fn mcp_tools(&self) -> Vec<McpTool> {
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
                McpTool {
                    connection: self.connection.clone(),
                    local: config.local_name(&t.name),
                    remote: t.name.to_string(),
                    description,
                    schema: Value::Object((*t.input_schema).clone()),
                    options: config.options_for(&t.name),
                    output: t
                        .output_schema
                        .as_ref()
                        .and_then(|schema| OutputSchema::compile(&self.connection.server, &t.name, schema)),
                }
            })
            .collect()
    }

    /// Registers each of the server's tools (see [`tools`](Self::tools)). Every
    /// name is checked before any tool is registered, and nothing is registered
    /// when one is refused: a name already taken is an [`McpError::Registry`] (a
    /// [`prefix`](McpServer::prefix) avoids it), two of the server's tools with the
    /// same local name an [`McpError::NameCollision`].
    pub fn register(&self, registry: &mut ToolRegistry) -> Result<(), McpError> {
        let tools = self.mcp_tools();
        // The server's name of each local name.
        let mut remotes: HashMap<&str, &str> = HashMap::with_capacity(tools.len());
        for tool in &tools {
            if !is_valid_tool_name(&tool.local) {
                return Err(RegistryError::InvalidName(tool.local.clone()).into());
            }
            if let Some(first) = remotes.insert(&tool.local, &tool.remote) {
                return Err(McpError::NameCollision {
                    server: self.connection.server.to_string(),
                    name: tool.local.clone(),
                    first: first.to_owned(),
                    second: tool.remote.clone(),
                });
            }
            if registry.get(&tool.local).is_some() {
                return Err(RegistryError::Duplicate {
                    name: tool.local.clone(),
                    existing: "a registered tool",
                    new: "an MCP tool",
                }
                .into());
            }
        }
        for tool in tools {
            registry.register_arc(Arc::new(tool))?;
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
    use loopstack_core::ToolOutput;
    use rmcp::model::CallToolResult;

    use super::connection::{each_line, to_output};
    use super::server::split_command_line;
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
            .effect("get-sum", loopstack_core::Effect::AtMostOnce)
            .timeout(Duration::from_secs(5))
            .tool_timeout("echo", Duration::from_secs(1));
        assert_eq!(server.server_name(), "npx @modelcontextprotocol/server-everything");
        assert_eq!(server.local_name("get-sum"), "ev_get-sum");
        assert_eq!(server.local_name("files.read/all"), "ev_files_read_all");
        assert!(server.options_for("get-sum").approve);
        assert_eq!(server.options_for("get-sum").timeout, Some(Duration::from_secs(5)));
        assert_eq!(server.options_for("echo").timeout, Some(Duration::from_secs(1)));
        assert!(!server.options_for("echo").approve);
        assert_eq!(server.options_for("get-sum").effect, loopstack_core::Effect::AtMostOnce);
        assert_eq!(server.options_for("echo").effect, loopstack_core::Effect::AtLeastOnce);
        assert_eq!(McpServer::stdio("/usr/bin/my-server", ["--x"]).server_name(), "my-server");
        assert_eq!(McpServer::http("http://h/mcp").name("h").server_name(), "h");
        let token = McpServer::http("http://h/mcp").bearer("s3cret").header("x-api-key", "k3y");
        assert!(!format!("{token:?}").contains("s3cret") && !format!("{token:?}").contains("k3y"));
        let env = McpServer::stdio("server", ["--x"]).env("API_KEY", "s3cret");
        assert!(format!("{env:?}").contains("API_KEY") && !format!("{env:?}").contains("s3cret"));
    }

    #[tokio::test]
    async fn a_servers_standard_error_is_read_a_line_at_a_time_and_a_long_line_in_pieces() {
        let mut lines = Vec::new();
        let text = b"starting\r\n\nready\n0123456789abcdefghij tail";
        each_line(&text[..], 8, |line| lines.push(String::from_utf8_lossy(line).into_owned())).await;
        assert_eq!(lines, ["starting", "\r\n", "\n", "ready\n", "01234567", "89abcdef", "ghij tai", "l"]);
    }

    #[test]
    fn results_become_outputs() {
        use rmcp::model::ContentBlock as Content;
        let text = CallToolResult::success(vec![Content::text("a"), Content::text("b")]);
        assert_eq!(to_output(text), ToolOutput::text("a\nb"));
        let failed = CallToolResult::error(vec![Content::text("no such file")]);
        assert_eq!(to_output(failed), ToolOutput::error("no such file"));
        // Structured content whose text is its JSON (as the spec asks for): a JSON result.
        let structured = CallToolResult::structured(serde_json::json!({"temperature": 21}));
        assert_eq!(to_output(structured), ToolOutput::json(serde_json::json!({"temperature": 21})));
        let mut bare = CallToolResult::success(Vec::new());
        bare.structured_content = Some(serde_json::json!([1, 2]));
        assert_eq!(to_output(bare), ToolOutput::json(serde_json::json!([1, 2])));
        // Structured content beside other text (a file server's read): the model reads
        // the text, a program the value.
        let mut file = CallToolResult::success(vec![Content::text("line one\nline two")]);
        file.structured_content = Some(serde_json::json!({"content": "line one\nline two"}));
        let read = to_output(file);
        assert_eq!(read.to_text(), "line one\nline two");
        assert_eq!(read.value(), Some(&serde_json::json!({"content": "line one\nline two"})));
        // An error's structured content is not a value.
        let mut failed = CallToolResult::error(vec![Content::text("denied")]);
        failed.structured_content = Some(serde_json::json!({"code": 403}));
        let failed = to_output(failed);
        assert!(failed.is_error && failed.value().is_none() && failed.to_text() == "denied", "{failed:?}");
    }

    #[test]
    fn an_image_a_model_cannot_be_sent_is_named_in_the_text_and_not_sent() {
        use rmcp::model::ContentBlock as Content;
        let png = "iVBORw0KGgo=";
        let shown =
            to_output(CallToolResult::success(vec![Content::text("a chart"), Content::image(png, "image/png")]));
        assert_eq!(shown.to_text(), "a chart\n[image: image/png, 12 bytes of base64]");
        assert_eq!(shown.images, [crate::image::Image::base64("image/png", png).unwrap()]);
        // Empty, or of a type no provider takes: the model reads why, and the rest
        // of the result stands.
        let content =
            vec![Content::text("a chart"), Content::image("", "image/png"), Content::image("AAAA", "image/tiff")];
        let refused = to_output(CallToolResult::success(content));
        assert!(refused.images.is_empty() && !refused.is_error);
        assert_eq!(
            refused.to_text(),
            "a chart\n[image: image/png, not shown: the image is empty]\n[image: image/tiff, not shown: `image/tiff` is \
             not an image type a model is sent (image/png, image/jpeg, image/gif or image/webp)]"
        );
    }
}
