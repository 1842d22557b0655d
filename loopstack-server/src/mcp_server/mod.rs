//! The registered workflows and agents as the tools of an
//! [MCP](https://modelcontextprotocol.io) server (feature `mcp-server`, on the
//! official `rmcp` crate): the command line's `mcp` serves them over
//! stdio, and [`serve`](crate::serve) (with feature `serve`) over streamable HTTP at
//! `/mcp`, under the HTTP API's token, Host and Origin rules.
//!
//! - **One tool per registered workflow** (an agent is a workflow): its name is
//!   the workflow's, its description the table's
//!   ([`Definition::description`](loopstack_core::Definition::description):
//!   `#[workflow]` takes it from the impl block's doc comment, an agent from
//!   `Agent::description`), and its input schema the input type's. MCP wants an
//!   object: an input whose schema is not `type: object` (an agent's prompt, a
//!   string; a number; an enum; an input without a schema) is the property
//!   [`INPUT_PROPERTY`] (`input`) of the arguments, required unless the input
//!   takes `null`. A workflow whose name is not a valid tool name, or starts with
//!   [`RESERVED_PREFIX`], is not offered.
//! - **A call** starts a run, drives it here and answers when it ends: its output
//!   (a workflow's published `tool_result_value` or `tool_result_text`, else its
//!   final state without `_` keys, as when it is a tool of an agent; an agent's
//!   answer), or `isError` when it failed; or, when it waits, its run id and what it
//!   waits for, in words (as the command line's `show` writes it) and structured:
//!   each signal with its payload's JSON Schema, the tool calls that wait for a
//!   person's decision (id, tool, arguments), the timer.
//! - **Two tools answer a wait**: [`SIGNAL_TOOL`] (`loopstack_signal`, with
//!   `run_id`, `signal` and `payload`) and [`DECIDE_TOOL`] (`loopstack_decide`, with
//!   `run_id`, `approve` and `deny`, each a list of call ids or `"all"`, and a
//!   `reason` for a denial). Each answers in the same shape as a workflow's tool.
//!
//! Every result's structured content is one object: `{"run_id", "workflow",
//! "status", ...}` with `output` once the run completed, `place` and `waits_for`
//! while it waits, `error` when it failed; its text content says the same for a
//! reader (a completed run's text is its output). A call that cannot be done (an
//! unknown run or signal, a payload or input that does not fit, a call id that
//! does not wait) is a tool error (`isError`) whose text says why, and changes
//! nothing. The runtime's secrets never appear in a result.
//!
//! ```no_run
//! # mod loopstack { // the facade's paths, for this crate's doc test
//! #     pub use loopstack_server::mcp_server;
//! #     pub mod prelude { pub use loopstack_core::Runtime; }
//! # }
//! use loopstack::mcp_server::McpHandler;
//! use loopstack::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = Runtime::new(); // .register(..) your workflows and agents
//! // stdio, as `my-app mcp` does: stdout carries only the protocol.
//! loopstack::mcp_server::serve_stdio(McpHandler::new(runtime).server_info("my-app", "1.0.0")).await?;
//! # Ok(()) }
//! ```
//!
//! Nothing here runs for a workflow or agent that is not served.

use std::sync::Arc;

use loopstack_core::Runtime;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};

mod answer;
#[cfg(feature = "serve")]
mod http;
mod stdio;
mod tools;

#[cfg(feature = "serve")]
#[cfg_attr(docsrs, doc(cfg(feature = "serve")))]
pub use http::http_service;
pub use tools::{DECIDE_TOOL, INPUT_PROPERTY, RESERVED_PREFIX, SIGNAL_TOOL};

/// Why the MCP server could not be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpServeError {
    /// The client did not complete the handshake, or the transport failed.
    #[error("the MCP session did not start: {0}")]
    Start(String),
    /// The session ended with an error.
    #[error("the MCP session failed: {0}")]
    Session(String),
}

/// The MCP server over a runtime's registered workflows: an `rmcp`
/// [`ServerHandler`](rmcp::ServerHandler). Serve it with [`serve_stdio`], or over
/// HTTP with [`serve`](crate::serve) (at `/mcp`) or [`http_service`].
///
/// Cheap to clone; clones share the runtime.
#[derive(Clone)]
pub struct McpHandler {
    runtime: Runtime,
    info: Arc<(String, String)>,
}

impl std::fmt::Debug for McpHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHandler")
            .field("server", &self.info.0)
            .field("version", &self.info.1)
            .finish_non_exhaustive()
    }
}

impl McpHandler {
    /// The server over `runtime`'s registered workflows (those registered when a
    /// client lists the tools), named `loopstack` with this crate's version.
    pub fn new(runtime: Runtime) -> Self {
        Self { runtime, info: Arc::new(("loopstack".to_owned(), env!("CARGO_PKG_VERSION").to_owned())) }
    }

    /// Names the server in its handshake (the app's name and version).
    #[must_use]
    pub fn server_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.info = Arc::new((name.into(), version.into()));
        self
    }

    /// The runtime whose workflows it serves.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }
}

impl rmcp::ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(self.info.0.clone(), self.info.1.clone()))
            .with_instructions(tools::INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::list(&self.runtime)))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        match tools::Call::parse(&self.runtime, &request.name, arguments) {
            Some(call) => Ok(call.run(&self.runtime).await.into()),
            None => Err(ErrorData::invalid_params(
                format!(
                    "no tool `{}`: the tools are the workflows {} and {SIGNAL_TOOL}, {DECIDE_TOOL}",
                    request.name,
                    tools::served(&self.runtime).join(", ")
                ),
                None,
            )),
        }
    }
}

/// Serves `handler` over this process's stdin and stdout until the client closes
/// them (or Ctrl-C). Standard output then carries only the protocol: log to
/// standard error.
pub async fn serve_stdio(handler: McpHandler) -> Result<(), McpServeError> {
    use rmcp::ServiceExt as _;
    let transport = stdio::LineTransport::new(tokio::io::stdin(), tokio::io::stdout());
    let running = handler.serve(transport).await.map_err(|e| McpServeError::Start(e.to_string()))?;
    tokio::select! {
        ended = running.waiting() => ended.map(|_| ()).map_err(|e| McpServeError::Session(e.to_string())),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
