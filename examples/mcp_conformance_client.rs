//! The MCP client as the official conformance suite (`@modelcontextprotocol/
//! conformance`) drives it: started with the URL of the suite's server as its last
//! argument and the scenario in `MCP_CONFORMANCE_SCENARIO`, it connects, lists the
//! tools and makes the call the scenario asks for (`tools_call`: `add_numbers`;
//! `sse-retry`: `test_reconnection`).
//! tests/mcp_conformance.rs runs it; by hand:
//!
//! ```sh
//! npx @modelcontextprotocol/conformance client --scenario initialize \
//!   --command "cargo run -q --example mcp_conformance_client --features mcp --"
//! ```

use loopstack::mcp::{McpServer, McpTools};
use loopstack::{ToolContext, ToolRegistry};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args().next_back().ok_or("the server's URL is the last argument")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let tools = McpTools::connect(McpServer::http(url).name("conformance")).await?;
    eprintln!("connected ({}); tools: {}", tools.protocol_version().unwrap_or_default(), tools.tool_names().join(", "));
    let mut registry = ToolRegistry::new();
    tools.register(&mut registry)?;
    // The call each scenario expects, if any.
    let call = match scenario.as_str() {
        "tools_call" => Some(("add_numbers", serde_json::json!({ "a": 5, "b": 3 }))),
        // The server ends the call's stream before answering: the answer comes on
        // the stream the client opens again.
        "sse-retry" => Some(("test_reconnection", serde_json::json!({}))),
        _ => None,
    };
    if let Some((tool, args)) = call {
        let cx = ToolContext::new("call_1", tool);
        let out = registry.call(tool, args, &cx).await.map_err(|e| e.to_string())?;
        println!("{}", out.to_text());
    }
    Ok(())
}
