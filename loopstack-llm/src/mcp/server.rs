//! How an MCP server is described: its transport, environment, headers and tool options.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use loopstack_core::{Effect, ToolOptions};

use super::{DEFAULT_CONNECT_TIMEOUT, McpError};

/// A header value: as given, or read from the environment when connecting.
#[derive(Clone)]
pub(super) enum HeaderValue {
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
pub(super) enum Transport {
    Stdio {
        program: OsString,
        args: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        cwd: Option<PathBuf>,
    },
    Http {
        url: String,
        headers: Vec<(String, HeaderValue)>,
        bearer: Option<HeaderValue>,
        #[cfg(feature = "mcp-oauth")]
        oauth: Option<super::McpOAuth>,
    },
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
            Self::Http { url, headers, bearer, .. } => {
                f.debug_struct("Http").field("url", url).field("headers", headers).field("bearer", bearer).finish()
            }
        }
    }
}

/// An MCP server to connect, and how its tools are registered. Build it with
/// [`McpServer::stdio`], [`McpServer::command_line`] or [`McpServer::http`] and the
/// setters, then connect it with [`McpTools::connect`](super::McpTools::connect) or
/// [`McpRegistryExt::add_mcp`](super::McpRegistryExt::add_mcp).
///
/// Tool names in [`allow`](Self::allow), [`approve`](Self::approve),
/// [`effect`](Self::effect) and [`tool_timeout`](Self::tool_timeout) are the server's names, without the prefix;
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
    pub(super) name: Option<String>,
    pub(super) transport: Transport,
    pub(super) prefix: String,
    pub(super) allow: Option<BTreeSet<String>>,
    pub(super) approve: BTreeSet<String>,
    pub(super) effects: BTreeMap<String, Effect>,
    pub(super) timeout: Option<Duration>,
    pub(super) tool_timeouts: BTreeMap<String, Duration>,
    pub(super) connect_timeout: Duration,
    pub(super) secrets: Option<loopstack_core::secrets::Secrets>,
    pub(super) stderr_to_logs: bool,
}

impl McpServer {
    pub(super) fn with_transport(transport: Transport) -> Self {
        Self {
            name: None,
            transport,
            prefix: String::new(),
            allow: None,
            approve: BTreeSet::new(),
            effects: BTreeMap::new(),
            timeout: None,
            tool_timeouts: BTreeMap::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            secrets: None,
            stderr_to_logs: false,
        }
    }

    /// A server started as `program args...` and spoken to over its stdin and
    /// stdout; its stderr is this process's unless
    /// [`stderr_to_logs`](Self::stderr_to_logs).
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
        Self::with_transport(Transport::Http {
            url: url.into(),
            headers: Vec::new(),
            bearer: None,
            #[cfg(feature = "mcp-oauth")]
            oauth: None,
        })
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

    /// Gets the token of a server behind OAuth 2.1 (feature `mcp-oauth`): by the
    /// authorization code flow with PKCE or by client credentials ([`McpOAuth`]), the
    /// server's metadata discovered from its `401`, the client registered
    /// dynamically unless pre-registered, the token refreshed when it expires or is
    /// rejected, and registered with the runtime's secrets
    /// ([`redact_with`](Self::redact_with)). Later connections of this server (a
    /// clone of it shares them) use the token got. Ignored for a stdio server.
    ///
    /// [`McpOAuth`]: super::McpOAuth
    #[cfg(feature = "mcp-oauth")]
    #[must_use]
    pub fn oauth(mut self, auth: super::McpOAuth) -> Self {
        if let Transport::Http { oauth, .. } = &mut self.transport {
            *oauth = Some(auth);
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

    /// Writes each line a stdio server writes to its standard error as a `tracing`
    /// event (level info, target [`STDERR_TARGET`](super::STDERR_TARGET), with the
    /// server's name in the field `server`), in place of this process's standard
    /// error, which the server shares unless set. A line longer than
    /// [`MAX_STDERR_LINE`](super::MAX_STDERR_LINE) bytes is logged in pieces; the
    /// secrets of [`redact_with`](Self::redact_with) are redacted. Ignored for an
    /// HTTP server.
    #[must_use]
    pub fn stderr_to_logs(mut self) -> Self {
        self.stderr_to_logs = true;
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

    /// Sets what a crash during a call of the server's tool `tool` may do to its
    /// side effect (see [`Effect`]): with [`Effect::AtMostOnce`], a call whose run
    /// died mid-call is not sent to the server again; its run waits for a person to
    /// give its result or have it run again. Each call carries its idempotency key
    /// in the request's `_meta` whatever the effect.
    #[must_use]
    pub fn effect(mut self, tool: impl Into<String>, effect: Effect) -> Self {
        self.effects.insert(tool.into(), effect);
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

    /// Sets how long the server has to start, answer the handshake and list its
    /// tools (30 s unless set), when it is connected and each time it is started
    /// again (a call that waits for that start waits no longer), and how long a
    /// listing after `notifications/tools/list_changed` may take.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The name a remote tool gets here: the prefix, then the remote name with each
    /// character a tool name may not have (`.`, `/`, ...) written `_`.
    pub(super) fn local_name(&self, remote: &str) -> String {
        let mut name = self.prefix.clone();
        name.extend(remote.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }));
        name
    }

    pub(super) fn options_for(&self, remote: &str) -> ToolOptions {
        let mut options = ToolOptions::new().approve(self.approve.contains(remote));
        if let Some(effect) = self.effects.get(remote) {
            options = options.effect(*effect);
        }
        if let Some(timeout) = self.tool_timeouts.get(remote).copied().or(self.timeout) {
            options = options.timeout(timeout);
        }
        options
    }

    pub(super) fn allows(&self, remote: &str) -> bool {
        self.allow.as_ref().is_none_or(|allow| allow.contains(remote))
    }
}

/// Splits a command line at whitespace, keeping quoted words whole.
pub(super) fn split_command_line(line: &str) -> Vec<String> {
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
