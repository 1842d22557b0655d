//! A binary whose workflows and agent are an MCP server's tools, offline: `greet`
//! (ends at once), `review` (waits for a reviewer's `approve` signal) and the `desk`
//! agent (a scripted model; each password reset waits for a person's approval).
//!
//! ```text
//! cargo run --example mcp_server -- mcp              # MCP over stdio, for an MCP client that starts it
//! cargo run --example mcp_server -- serve            # MCP at http://127.0.0.1:7878/mcp, beside the API and Studio
//! cargo run --example mcp_server -- --db memory mcp  # nothing kept between sessions
//! ```
//!
//! `tests/mcp_server.rs` drives it with the official MCP Python SDK.

use std::process::ExitCode;

mod desk;

#[tokio::main]
async fn main() -> ExitCode {
    loopstack::cli::App::new("mcp-desk")
        .version(env!("CARGO_PKG_VERSION"))
        .default_db("mcp-desk.db")
        .run(desk::register)
        .await
}
