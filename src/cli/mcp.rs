//! `--mcp`, `--mcp-url` and `--mcp-token-env`: the tools of MCP servers named on
//! the command line, connected for the app's register closure
//! ([`App::run_mcp`](super::App::run_mcp)).

use loopstack_core::ToolRegistry;
use loopstack_core::secrets::Secrets;
use loopstack_llm::mcp::{McpRegistryExt as _, McpServer};

use super::CliError;

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
