//! The MCP client as the official conformance suite (`@modelcontextprotocol/
//! conformance`) drives it: started with the URL of the suite's server as its last
//! argument and the scenario in `MCP_CONFORMANCE_SCENARIO`, it connects, lists the
//! tools and makes the call the scenario asks for (`tools_call`: `add_numbers`;
//! `sse-retry`: `test_reconnection`; the `auth/` scenarios: `test-tool`, after
//! getting a token from the suite's authorization server: by client credentials
//! when `MCP_CONFORMANCE_CONTEXT` gives a client id and secret, else by the
//! authorization code flow, whose consent the suite's server gives at once).
//! tests/mcp_conformance.rs runs it; by hand:
//!
//! ```sh
//! npx @modelcontextprotocol/conformance client --scenario initialize \
//!   --command "cargo run -q --example mcp_conformance_client --features mcp --"
//! ```

use loopstack::mcp::{McpOAuth, McpServer, McpTools};
use loopstack::{ToolContext, ToolRegistry};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args().next_back().ok_or("the server's URL is the last argument")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let mut server = McpServer::http(url).name("conformance");
    if scenario.starts_with("auth/") {
        server = server.oauth(oauth()?);
    }
    let tools = McpTools::connect(server).await?;
    eprintln!("connected ({}); tools: {}", tools.protocol_version().unwrap_or_default(), tools.tool_names().join(", "));
    let mut registry = ToolRegistry::new();
    tools.register(&mut registry)?;
    // The call each scenario expects, if any.
    let call = match scenario.as_str() {
        "tools_call" => Some(("add_numbers", serde_json::json!({ "a": 5, "b": 3 }))),
        // The server ends the call's stream before answering: the answer comes on
        // the stream the client opens again.
        "sse-retry" => Some(("test_reconnection", serde_json::json!({}))),
        auth if auth.starts_with("auth/") => Some(("test-tool", serde_json::json!({}))),
        _ => None,
    };
    if let Some((tool, args)) = call {
        let cx = ToolContext::new("call_1", tool);
        let out = registry.call(tool, args, &cx).await.map_err(|e| e.to_string())?;
        println!("{}", out.to_text());
    }
    Ok(())
}

/// The OAuth of the `auth/` scenarios: client credentials when the suite gives them,
/// else the authorization code flow, where "the person" follows the authorization
/// URL and reads where the suite's server sends them back.
fn oauth() -> Result<McpOAuth, Box<dyn std::error::Error>> {
    let context: serde_json::Value = match std::env::var("MCP_CONFORMANCE_CONTEXT") {
        Ok(json) => serde_json::from_str(&json)?,
        Err(_) => serde_json::Value::Null,
    };
    if let (Some(id), Some(secret)) = (context["client_id"].as_str(), context["client_secret"].as_str()) {
        return Ok(McpOAuth::client_credentials(id, secret));
    }
    Ok(McpOAuth::authorization_code("http://127.0.0.1:3000/callback", |url: String| async move {
        let client = loopstack_model::http::client_builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| e.to_string())?;
        let response = client.get(&url).send().await.map_err(|e| e.to_string())?;
        let location = response.headers().get("location").and_then(|l| l.to_str().ok());
        location.map(str::to_owned).ok_or_else(|| format!("the authorization server answered {}", response.status()))
    }))
}
