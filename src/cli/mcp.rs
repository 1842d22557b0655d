//! `--mcp`, `--mcp-url` and `--mcp-token-env`: the tools of MCP servers named on
//! the command line, connected for the app's register closure
//! ([`App::run_mcp`](super::App::run_mcp)).

use std::process::ExitCode;

use clap::Subcommand;
use loopstack_core::secrets::Secrets;
use loopstack_core::{Runtime, ToolRegistry};
use loopstack_llm::mcp::{McpRegistryExt as _, McpServer};

use super::{App, CliError, CommandContext, NoCommands};

impl App {
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

    /// [`App::run_with`], and `register` also gets the tools of the MCP servers the
    /// command line names before the command, connected: `--mcp "COMMAND ARGS..."` (repeatable; a
    /// server started and spoken to over stdio, ended with the process) and
    /// `--mcp-url URL` (repeatable; streamable HTTP, its bearer token read from the
    /// environment variable `--mcp-token-env` names and kept among the runtime's
    /// secrets). The registry is empty when the command line names none; add your
    /// own tools to it (`tools.with(MyTool)`) and give it to your agents. A server
    /// that does not start or answer is one `error:` line, exit status 1.
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
        }
    }

    /// Whether the command line names any server.
    pub(super) fn is_empty(&self) -> bool {
        self.commands.is_empty() && self.urls.is_empty()
    }

    /// Starts or connects each server, in the order given, and registers its tools
    /// in one registry. An HTTP server's token is read from `--mcp-token-env`'s
    /// variable and kept among `secrets`, so it is redacted from what runs record.
    /// Servers given to an app that takes no tools (`takes`) are refused.
    pub(super) async fn connect(&self, takes: bool, secrets: &Secrets) -> Result<ToolRegistry, CliError> {
        if !takes && !self.is_empty() {
            return Err(CliError::NoMcpTools);
        }
        let mut tools = ToolRegistry::new();
        for line in &self.commands {
            tools.add_mcp(McpServer::command_line(line)?).await?;
        }
        for url in &self.urls {
            let mut server = McpServer::http(url).redact_with(secrets.clone());
            if let Some(var) = &self.token_env {
                server = server.bearer_from_env(var);
            }
            tools.add_mcp(server).await?;
        }
        Ok(tools)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command, Parsed};
    use super::*;

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
}
