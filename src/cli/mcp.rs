//! The MCP servers whose tools the app's agents get: declared in code
//! ([`App::mcp_server`](super::App::mcp_server)), in the configuration file
//! (`--config`, `LOOPSTACK_CONFIG`), and with `--mcp`, `--mcp-url` and
//! `--mcp-token-env`; connected for the app's register closure
//! ([`App::run_mcp`](super::App::run_mcp)) by the commands that may drive runs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use loopstack_core::secrets::Secrets;
use loopstack_core::serde_json::{Map, Value};
use loopstack_core::{Runtime, ToolRegistry};
use loopstack_llm::mcp::{McpRegistryExt as _, McpServer};

use super::{App, CliError, Command, CommandContext, NoCommands};

/// The environment variable that names the configuration file when `--config` does not.
pub(super) const CONFIG_ENV: &str = "LOOPSTACK_CONFIG";

impl App {
    /// Declares an MCP server whose tools the app's agents get, for every command
    /// that may drive a run: `run`, `worker`, `serve`, `mcp`, `eval`, `signal`,
    /// `approve`, `deny`, `resolve`, `resume`, `retry`, `fork`, `cancel` (it wakes
    /// a parent run) and the app's own commands. The commands that only read or
    /// store (`workflows`, `runs`, `show`, `export`, `schedule`), `--help` and
    /// `--version` start and connect nothing, and the register closure gets a
    /// registry without the servers' tools: register the same workflows either way.
    ///
    /// Declared servers come first, in the order declared, then those of the
    /// configuration file (`--config FILE` or `LOOPSTACK_CONFIG`; one of the same
    /// [name](McpServer::name) replaces the one declared here), then `--mcp` and
    /// `--mcp-url`. What a stdio server writes to its standard error is logged
    /// (`tracing`, target [`STDERR_TARGET`](loopstack_llm::mcp::STDERR_TARGET), with
    /// the server's name), not written to the terminal; the headers and tokens of an
    /// HTTP server are among the runtime's secrets. The register closure must take
    /// the tools: [`App::run_mcp`] or [`App::run_mcp_with`]; an app built with
    /// [`App::run`] refuses every command with [`CliError::NoMcpTools`].
    ///
    /// ```no_run
    /// use loopstack::llm::{Agent, anthropic::Anthropic};
    /// use loopstack::mcp::McpServer;
    ///
    /// #[tokio::main]
    /// async fn main() -> std::process::ExitCode {
    ///     loopstack::cli::App::new("my-app")
    ///         .mcp_server(McpServer::stdio("npx", ["-y", "@modelcontextprotocol/server-filesystem", "/srv"]).name("files"))
    ///         .mcp_server(McpServer::http("https://mcp.example.com/mcp").name("remote").bearer_from_env("REMOTE_TOKEN"))
    ///         .run_mcp(|runtime, tools| {
    ///             let model = Anthropic::from_env().expect("ANTHROPIC_API_KEY");
    ///             let agent = Agent::new(model, "claude-sonnet-4-5", tools).named("assistant").expect("a valid name");
    ///             runtime.register(agent)
    ///         })
    ///         .await
    /// }
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
    pub fn mcp_server(mut self, server: McpServer) -> Self {
        self.mcp_servers.push(server);
        self
    }

    /// [`App::run_mcp_with`] for an app with no commands of its own.
    ///
    /// ```no_run
    /// use loopstack::llm::{Agent, anthropic::Anthropic};
    ///
    /// #[tokio::main]
    /// async fn main() -> std::process::ExitCode {
    ///     // my-app --mcp "npx -y @modelcontextprotocol/server-everything" run assistant --input '"Add 2 and 40"' --wait
    ///     loopstack::cli::App::new("my-app")
    ///         .run_mcp(|runtime, tools| {
    ///             let model = Anthropic::from_env().expect("ANTHROPIC_API_KEY");
    ///             let agent = Agent::new(model, "claude-sonnet-4-5", tools).named("assistant").expect("a valid name");
    ///             runtime.register(agent)
    ///         })
    ///         .await
    /// }
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
    pub async fn run_mcp(self, register: impl FnOnce(Runtime, ToolRegistry) -> Runtime) -> ExitCode {
        self.run_mcp_with::<NoCommands, _, _>(register, |never, _| async move { match never {} }).await
    }

    /// [`App::run_with`], and `register` also gets the tools of the MCP servers
    /// declared in code ([`App::mcp_server`]), in the configuration file
    /// (`--config FILE` or `LOOPSTACK_CONFIG`, see [`App::mcp_server`]) and on the
    /// command line before the command, connected: `--mcp "COMMAND ARGS..."` (repeatable; a
    /// server started and spoken to over stdio, ended with the process) and
    /// `--mcp-url URL` (repeatable; streamable HTTP, its bearer token read from the
    /// environment variable `--mcp-token-env` names and kept among the runtime's
    /// secrets). They are connected only for the commands that may drive a run
    /// ([`App::mcp_server`] lists them); the registry is empty for the others, and
    /// when none is declared. Add your own tools to it (`tools.with(MyTool)`) and
    /// give it to your agents. A server that does not start or answer is one
    /// `error:` line, exit status 1.
    ///
    /// Apps built with [`App::run`] or [`App::run_with`] hide these flags, and
    /// refuse them with [`CliError::NoMcpTools`].
    #[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
    pub async fn run_mcp_with<E, F, Fut>(
        mut self,
        register: impl FnOnce(Runtime, ToolRegistry) -> Runtime,
        handle: F,
    ) -> ExitCode
    where
        E: Subcommand,
        F: FnOnce(E, CommandContext) -> Fut,
        Fut: Future<Output = Result<(), loopstack_core::BoxError>>,
    {
        self.takes_mcp = true;
        self.run_inner(register, handle).await
    }
}

/// The MCP servers a command line names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct McpFlags {
    /// `--mcp "COMMAND ARGS..."`: servers started and spoken to over stdio.
    pub(super) commands: Vec<String>,
    /// `--mcp-url URL`: servers spoken to over streamable HTTP.
    pub(super) urls: Vec<String>,
    /// `--mcp-token-env VAR`: the variable the `--mcp-url` servers' bearer token is read from.
    pub(super) token_env: Option<String>,
    /// `--config FILE` or `LOOPSTACK_CONFIG`: the configuration file, read only by
    /// the commands that connect the servers.
    pub(super) config: Option<PathBuf>,
}

impl McpFlags {
    /// The flags as clap parsed them.
    pub(super) fn from_matches(matches: &clap::ArgMatches) -> Self {
        let many = |id: &str| -> Vec<String> {
            matches.get_many::<String>(id).map(|values| values.cloned().collect()).unwrap_or_default()
        };
        Self {
            commands: many("mcp"),
            urls: many("mcp_url"),
            token_env: matches.get_one::<String>("mcp_token_env").cloned(),
            // An empty LOOPSTACK_CONFIG (as the servers this one starts get) names none.
            config: matches.get_one::<PathBuf>("config").filter(|path| !path.as_os_str().is_empty()).cloned(),
        }
    }

    /// Whether the command line names any server.
    pub(super) fn is_empty(&self) -> bool {
        self.commands.is_empty() && self.urls.is_empty()
    }

    /// The tools of the app's servers ([`App::mcp_server`]), the configuration
    /// file's and the command line's, each started or connected in that order and
    /// registered in one registry, when `command` may drive a run ([`connects`]);
    /// an empty registry otherwise, with nothing started and the file not read.
    /// Servers given to an app that takes no tools are refused, whatever the command.
    pub(super) async fn connect(
        &self,
        app: &App,
        command: Option<&Command>,
        secrets: &Secrets,
    ) -> Result<ToolRegistry, CliError> {
        let given = !self.is_empty() || !app.mcp_servers.is_empty();
        if given && !app.takes_mcp {
            return Err(CliError::NoMcpTools);
        }
        let mut tools = ToolRegistry::new();
        if !connects(command) {
            return Ok(tools);
        }
        let configured = match &self.config {
            Some(path) => read_config(path)?,
            None => Vec::new(),
        };
        if !app.takes_mcp && !configured.is_empty() {
            return Err(CliError::NoMcpTools);
        }
        let named = |server: &McpServer| configured.iter().any(|c| c.server_name() == server.server_name());
        // A loopstack app a stdio server runs does not read this process's file.
        let declared = app.mcp_servers.iter().filter(|server| !named(server)).map(|s| s.clone().env(CONFIG_ENV, ""));
        let mut servers: Vec<McpServer> = declared.chain(configured.iter().cloned()).collect();
        for line in &self.commands {
            servers.push(McpServer::command_line(line)?.env(CONFIG_ENV, ""));
        }
        for url in &self.urls {
            let mut server = McpServer::http(url);
            if let Some(var) = &self.token_env {
                server = server.bearer_from_env(var);
            }
            servers.push(server);
        }
        for server in servers {
            tools.add_mcp(server.stderr_to_logs().redact_with(secrets.clone())).await?;
        }
        Ok(tools)
    }
}

/// Whether `command` (`None`: one of the app's own) may drive a run, and so needs
/// the agents' tools: every command but those that only read or store.
pub(super) fn connects(command: Option<&Command>) -> bool {
    let Some(command) = command else { return true };
    match command {
        Command::Workflows | Command::Runs { .. } | Command::Show { .. } | Command::Export { .. } => false,
        // A schedule's runs are started by workers.
        Command::Schedule { .. } => false,
        _ => true,
    }
}

/// The MCP servers a configuration file declares, in the order of their names:
///
/// ```json
/// {"mcp": {"servers": {
///     "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"],
///               "env": {"LOG_LEVEL": "warn"}, "cwd": "/srv", "prefix": "fs_", "approve": ["write_file"]},
///     "remote": {"url": "https://mcp.example.com/mcp", "token_env": "REMOTE_TOKEN", "allow": ["search"]}
/// }}}
/// ```
///
/// A server has `command` (with `args`, `env`, `cwd`) or `url` (with
/// `token_env`), and may have `prefix`, `allow` and `approve`; any other key is
/// refused, so a misspelt one is not silently ignored. A stdio server started from
/// the file gets `LOOPSTACK_CONFIG` empty unless its `env` sets it, so a loopstack
/// app it runs does not read this file and start its servers in turn.
pub(super) fn read_config(path: &Path) -> Result<Vec<McpServer>, CliError> {
    let error = |message: String| CliError::Config { path: path.display().to_string(), message };
    let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
    let config: Value = loopstack_core::serde_json::from_str(&text).map_err(|e| error(e.to_string()))?;
    parse_config(&config).map_err(error)
}

/// The servers of a configuration file's JSON, or what is wrong with it.
fn parse_config(config: &Value) -> Result<Vec<McpServer>, String> {
    let top = object(config, "the file")?;
    known(top, "the file", &["mcp"])?;
    let Some(mcp) = top.get("mcp") else { return Ok(Vec::new()) };
    let mcp = object(mcp, "`mcp`")?;
    known(mcp, "`mcp`", &["servers"])?;
    let Some(servers) = mcp.get("servers") else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for (name, server) in object(servers, "`mcp.servers`")? {
        let at = format!("mcp.servers.{name}");
        let server = object(server, &format!("`{at}`"))?;
        let text = |key: &str| -> Result<Option<&str>, String> {
            server.get(key).map(|v| v.as_str().ok_or_else(|| format!("`{at}.{key}` must be a string"))).transpose()
        };
        let texts = |key: &str| -> Result<Vec<String>, String> {
            let Some(value) = server.get(key) else { return Ok(Vec::new()) };
            let list = value.as_array().ok_or_else(|| format!("`{at}.{key}` must be an array of strings"))?;
            list.iter()
                .map(|v| {
                    v.as_str().map(str::to_owned).ok_or_else(|| format!("`{at}.{key}` must be an array of strings"))
                })
                .collect()
        };
        let common = ["prefix", "allow", "approve"];
        let mut mcp = match (text("command")?, text("url")?) {
            (Some(command), None) => {
                known(server, &format!("`{at}`"), &[&common[..], &["command", "args", "env", "cwd"][..]].concat())?;
                // Not this file for a loopstack app the server runs (its own `env` may say otherwise).
                let mut stdio = McpServer::stdio(command, texts("args")?).env(CONFIG_ENV, "");
                if let Some(env) = server.get("env") {
                    for (key, value) in object(env, &format!("`{at}.env`"))? {
                        let value = value.as_str().ok_or_else(|| format!("`{at}.env.{key}` must be a string"))?;
                        stdio = stdio.env(key, value);
                    }
                }
                if let Some(cwd) = text("cwd")? {
                    stdio = stdio.current_dir(cwd);
                }
                stdio
            }
            (None, Some(url)) => {
                known(server, &format!("`{at}`"), &[&common[..], &["url", "token_env"][..]].concat())?;
                let http = McpServer::http(url);
                match text("token_env")? {
                    Some(var) => http.bearer_from_env(var),
                    None => http,
                }
            }
            (Some(_), Some(_)) => return Err(format!("`{at}` has both `command` and `url`; give one")),
            (None, None) => return Err(format!("`{at}` has neither `command` (stdio) nor `url` (streamable HTTP)")),
        };
        mcp = mcp.name(name.as_str());
        if let Some(prefix) = text("prefix")? {
            mcp = mcp.prefix(prefix);
        }
        if server.contains_key("allow") {
            mcp = mcp.allow(texts("allow")?);
        }
        for tool in texts("approve")? {
            mcp = mcp.approve(tool);
        }
        out.push(mcp);
    }
    Ok(out)
}

/// `value` as a JSON object, or an error that names it (`what`).
fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    value.as_object().ok_or_else(|| format!("{what} must be a JSON object"))
}

/// Refuses a key of `map` (at `what`) that is not among `keys`.
fn known(map: &Map<String, Value>, what: &str, keys: &[&str]) -> Result<(), String> {
    match map.keys().find(|key| !keys.contains(&key.as_str())) {
        Some(key) => Err(format!("{what} has no setting `{key}` (it takes {})", keys.join(", "))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Parsed};
    use super::*;
    use loopstack_core::serde_json;

    #[derive(Debug, PartialEq, Subcommand)]
    enum Own {
        /// Says hello.
        Hello {
            #[arg(long)]
            to: String,
        },
    }

    #[test]
    fn mcp_servers_are_named_anywhere_on_the_line_and_shown_only_by_apps_that_take_them() {
        let app = App::new("desk");
        let line = [
            "desk",
            "--mcp",
            "npx -y a",
            "--mcp",
            "b",
            "--mcp-url",
            "http://h/mcp",
            "--mcp-token-env",
            "T",
            "run",
            "x",
        ];
        let (parsed, servers, _) = app.parse::<Own, _, _>(line).unwrap();
        assert!(matches!(parsed, Parsed::Loopstack(Cli { command: Command::Run { .. }, .. })));
        assert_eq!(
            (servers.commands, servers.urls),
            (vec!["npx -y a".to_owned(), "b".to_owned()], vec!["http://h/mcp".to_owned()])
        );
        assert_eq!(servers.token_env.as_deref(), Some("T"));
        let (parsed, servers, _) = app.parse::<Own, _, _>(["desk", "--mcp", "c", "hello", "--to", "ada"]).unwrap();
        assert!(matches!(parsed, Parsed::App { .. }));
        assert_eq!(servers.commands, ["c"]);
        // They are the app's options, before the command (a command's own come after it).
        assert!(app.parse::<Own, _, _>(["desk", "runs", "--mcp", "c"]).is_err());
        let hidden =
            |app: &App| app.command::<Own>().get_arguments().find(|a| a.get_id() == "mcp").unwrap().is_hide_set();
        assert!(hidden(&app));
        let mut taking = App::new("desk");
        taking.takes_mcp = true;
        assert!(!hidden(&taking));
    }

    /// The command `args` (after the binary's name) parse to.
    fn command(args: &[&str]) -> Command {
        let line = std::iter::once("desk").chain(args.iter().copied());
        match App::new("desk").parse::<Own, _, _>(line).unwrap().0 {
            Parsed::Loopstack(cli) => cli.command,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_the_commands_that_may_drive_a_run_connect_the_servers() {
        let run = loopstack_core::RunId::new().to_string();
        let driving: &[&[&str]] = &[
            &["run", "w"],
            &["run", "w", "--wait"],
            &["worker"],
            &["worker", "--once"],
            &["serve"],
            &["mcp"],
            &["eval", "cases.jsonl", "--agent", "a"],
            &["signal", &run, "go"],
            &["approve", &run],
            &["deny", &run, "--reason", "no"],
            &["resolve", &run, "c", "r"],
            &["resume", &run],
            &["retry", &run],
            &["fork", &run, "--step", "1"],
            &["cancel", &run],
        ];
        for args in driving {
            assert!(connects(Some(&command(args))), "{args:?}");
        }
        let reading: &[&[&str]] = &[
            &["workflows"],
            &["runs"],
            &["show", &run],
            &["export", &run],
            &["schedule", "list"],
            &["schedule", "add", "s", "w", "--every", "1h"],
            &["schedule", "delete", "s"],
        ];
        for args in reading {
            assert!(!connects(Some(&command(args))), "{args:?}");
        }
        // The app's own commands get the runtime, and may drive runs with it.
        assert!(connects(None));
    }

    #[tokio::test]
    async fn a_server_declared_in_code_is_started_only_for_a_command_that_may_drive_a_run() {
        let missing = std::env::temp_dir().join(format!("loopstack-no-such-server-{}", loopstack_core::RunId::new()));
        let mut app = App::new("desk").mcp_server(McpServer::stdio(&missing, ["--x"]).name("gone"));
        let secrets = Secrets::new();
        let flags = McpFlags::default();
        // The app's register closure must take the tools, whatever the command.
        let refused = flags.connect(&app, Some(&command(&["runs"])), &secrets).await.unwrap_err();
        assert!(matches!(refused, CliError::NoMcpTools), "{refused:?}");
        app.takes_mcp = true;
        // Nothing is started for a command that only reads: the server, which
        // cannot be started, is not tried.
        let tools = flags.connect(&app, Some(&command(&["runs"])), &secrets).await.unwrap();
        assert!(tools.is_empty());
        let error = flags.connect(&app, Some(&command(&["run", "w", "--wait"])), &secrets).await.unwrap_err();
        assert!(
            matches!(&error, CliError::Mcp(loopstack_llm::mcp::McpError::Spawn { server, .. }) if server == "gone"),
            "{error:?}"
        );
        // The configuration file is read only then too, and its server of the same
        // name replaces the app's.
        let dir = std::env::temp_dir().join(format!("loopstack-cli-config-{}", loopstack_core::RunId::new()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("loopstack.json");
        let flags = McpFlags { config: Some(config.clone()), ..McpFlags::default() };
        let show = command(&["show", &loopstack_core::RunId::new().to_string()]);
        assert!(flags.connect(&app, Some(&show), &secrets).await.unwrap().is_empty());
        let unread = flags.connect(&app, Some(&command(&["worker"])), &secrets).await.unwrap_err();
        assert!(matches!(&unread, CliError::Config { .. }), "{unread:?}");
        // Nothing listens on port 1: the handshake fails, where the app's server did not start.
        let replacing = serde_json::json!({"mcp": {"servers": {"gone": {"url": "http://127.0.0.1:1/mcp"}}}});
        std::fs::write(&config, replacing.to_string()).unwrap();
        let error = flags.connect(&app, Some(&command(&["worker"])), &secrets).await.unwrap_err();
        assert!(
            matches!(&error, CliError::Mcp(loopstack_llm::mcp::McpError::Handshake { server, .. }) if server == "gone"),
            "{error:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_configuration_file_declares_stdio_and_http_servers_and_refuses_what_it_does_not_know() {
        let config = serde_json::json!({"mcp": {"servers": {
            "files": {"command": "npx", "args": ["-y", "server-files", "/srv"], "env": {"LOG_LEVEL": "warn"},
                      "cwd": "/srv", "prefix": "fs_", "allow": ["read_file", "write_file"], "approve": ["write_file"]},
            "remote": {"url": "http://127.0.0.1:3001/mcp", "token_env": "REMOTE_TOKEN"},
        }}});
        let servers = parse_config(&config).unwrap();
        let names: Vec<String> = servers.iter().map(McpServer::server_name).collect();
        assert_eq!(names, ["files", "remote"]);
        let files = format!("{:?}", servers[0]);
        for part in ["\"npx\"", "\"server-files\"", "LOG_LEVEL", "LOOPSTACK_CONFIG", "\"/srv\"", "fs_", "write_file"] {
            assert!(files.contains(part), "{part} is not in {files}");
        }
        assert!(format!("{:?}", servers[1]).contains("env(REMOTE_TOKEN)"), "{:?}", servers[1]);
        // Nothing declared is no server.
        assert!(parse_config(&serde_json::json!({})).unwrap().is_empty());
        assert!(parse_config(&serde_json::json!({"mcp": {}})).unwrap().is_empty());
        let refused = |config: Value| parse_config(&config).unwrap_err();
        assert_eq!(
            refused(serde_json::json!({"mcp": {"servers": {"a": {"comand": "x"}}}})),
            "`mcp.servers.a` has neither `command` (stdio) nor `url` (streamable HTTP)"
        );
        assert_eq!(
            refused(serde_json::json!({"mcp": {"servers": {"a": {"command": "x", "arg": ["y"]}}}})),
            "`mcp.servers.a` has no setting `arg` (it takes prefix, allow, approve, command, args, env, cwd)"
        );
        assert_eq!(
            refused(serde_json::json!({"mcp": {"servers": {"a": {"url": "http://h", "command": "x"}}}})),
            "`mcp.servers.a` has both `command` and `url`; give one"
        );
        assert_eq!(
            refused(serde_json::json!({"mcp": {"servers": {"a": {"command": "x", "args": "y"}}}})),
            "`mcp.servers.a.args` must be an array of strings"
        );
        assert_eq!(refused(serde_json::json!({"mpc": {}})), "the file has no setting `mpc` (it takes mcp)");
        assert_eq!(refused(serde_json::json!([])), "the file must be a JSON object");
    }

    #[test]
    fn the_configuration_file_is_named_by_config_or_loopstack_config_and_hidden_unless_the_app_takes_servers() {
        let app = App::new("desk");
        let (_, servers, _) = app.parse::<Own, _, _>(["desk", "--config", "desk.json", "runs"]).unwrap();
        assert_eq!(servers.config.as_deref(), Some(std::path::Path::new("desk.json")));
        let (_, servers, _) = app.parse::<Own, _, _>(["desk", "--config", "", "runs"]).unwrap();
        assert_eq!(servers.config, None);
        let hidden =
            |app: &App| app.command::<Own>().get_arguments().find(|a| a.get_id() == "config").unwrap().is_hide_set();
        assert!(hidden(&app));
        let mut taking = App::new("desk");
        taking.takes_mcp = true;
        assert!(!hidden(&taking));
    }
}
