//! A binary whose workflows and agent are an MCP server's tools, offline: `greet`
//! (ends at once), `review` (waits for a reviewer's `approve` signal) and the `desk`
//! agent (a scripted model; each password reset waits for a person's approval).
//!
//! ```text
//! cargo run --example mcp_server -- mcp              # MCP over stdio, for an MCP client that starts it
//! cargo run --example mcp_server -- serve            # MCP at http://127.0.0.1:7878/mcp, beside the API and Studio
//! cargo run --example mcp_server -- --db memory mcp  # nothing kept between sessions
//! # the agent `relay` calls `greet` of another server: here, this one over stdio
//! cargo run --example mcp_server -- --mcp "target/debug/examples/mcp_server --db memory mcp" run relay --input '"ada"' --wait
//! ```
//!
//! With `--mcp` or `--mcp-url` (`App::run_mcp`), it also registers `relay`, an
//! agent whose tools are those servers'.
//!
//! `tests/mcp_server.rs` drives it with the official MCP Python SDK.

use std::process::ExitCode;

mod desk;

#[tokio::main]
async fn main() -> ExitCode {
    loopstack::cli::App::new("mcp-desk")
        .version(env!("CARGO_PKG_VERSION"))
        .default_db("mcp-desk.db")
        .run_mcp(|runtime, tools| {
            let runtime = desk::register(runtime);
            if tools.is_empty() { runtime } else { runtime.register(desk::relay(tools)) }
        })
        .await
}
