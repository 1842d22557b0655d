//! An MCP server (stdio, written with rmcp) that misbehaves on request, for the MCP
//! client's tests (tests/mcp.rs): `cargo run --example mcp_fault_server --features mcp`.
//!
//! Started with `--exit` it exits before the handshake, with `--hang` it never
//! answers it. Other flags make it list its tools wrongly:
//!
//! - `--hang-listing`: it answers the handshake, never `tools/list`;
//! - `--endless-pages`: each page of its tool list names a next page, with a new cursor;
//! - `--repeated-cursor`: each page names the same cursor as the next page;
//! - `--wide-pages`: each page lists a thousand tools (`wide_0`, ...) and names a next page;
//! - `--colliding`: it offers `get.time` and `get_time` besides its tools, whose local names are one.
//!
//! Otherwise it serves these tools:
//!
//! - `echo {text}`: the text back;
//! - `weather {city}`: a structured result (`{"city": .., "temperature": 21}`), as
//!   its output schema declares;
//! - `mislabeled`: structured content that does not fit its output schema;
//! - `unstructured`: only text, though it declares an output schema;
//! - `fail`: a result with `isError`;
//! - `reject`: a JSON-RPC error instead of a result;
//! - `sleep`: no answer until the client cancels the call;
//! - `cancelled`: how many calls the client has cancelled;
//! - `die`: the process exits during the call;
//! - `meta`: the request's `_meta` back, as structured content;
//! - `pid`: the process id, to tell a restarted server from the first;
//! - `grow`: offers one more tool, `extra`, and sends `notifications/tools/list_changed`;
//! - `shrink`: offers `extra` no more, and sends `notifications/tools/list_changed`;
//! - `refund {order}`: asks how much to refund (2026-07-28's input-required result,
//!   with the roots besides), and answers with what it was told on the call made
//!   again with the answers and its state.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, InputRequiredResult, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt as _};
use serde_json::{Value, json};

/// How it lists its tools.
#[derive(Clone, Copy, Default, PartialEq)]
enum Listing {
    #[default]
    Plainly,
    Never,
    EndlessPages,
    RepeatedCursor,
    WidePages,
    Colliding,
}

#[derive(Clone, Default)]
struct Faults {
    listing: Listing,
    grown: Arc<AtomicBool>,
    cancelled: Arc<AtomicU64>,
}

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("schemas are objects"),
    }
}

fn no_args() -> Arc<JsonObject> {
    schema(json!({"type": "object", "properties": {}}))
}

impl Faults {
    fn tools(&self) -> Vec<Tool> {
        let text = schema(json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}));
        let city = schema(json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}));
        let weather = schema(json!({
            "type": "object",
            "properties": {"city": {"type": "string"}, "temperature": {"type": "number"}},
            "required": ["city", "temperature"],
        }));
        let mut tools = vec![
            Tool::new("echo", "Echoes the text back.", text),
            Tool::new("weather", "The weather in a city, as structured content.", city)
                .with_raw_output_schema(weather.clone()),
            Tool::new("mislabeled", "Structured content that does not fit its schema.", no_args())
                .with_raw_output_schema(weather.clone()),
            Tool::new("unstructured", "Only text, despite its schema.", no_args()).with_raw_output_schema(weather),
            Tool::new("fail", "Always answers with an error result.", no_args()),
            Tool::new("reject", "Always answers with a JSON-RPC error.", no_args()),
            Tool::new("sleep", "Answers only when cancelled.", no_args()),
            Tool::new("cancelled", "How many calls were cancelled.", no_args()),
            Tool::new("die", "Exits the server during the call.", no_args()),
            Tool::new("meta", "Returns the request's _meta.", no_args()),
            Tool::new("pid", "Returns the server's process id.", no_args()),
            Tool::new("grow", "Offers the tool `extra` from now on.", no_args()),
            Tool::new("shrink", "Offers the tool `extra` no more.", no_args()),
            Tool::new(
                "refund",
                "Refunds an order, asking how much.",
                schema(json!({
                    "type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"],
                })),
            ),
        ];
        if self.grown.load(Ordering::SeqCst) {
            tools.push(Tool::new("extra", "Offered after `grow`.", no_args()));
        }
        if self.listing == Listing::Colliding {
            tools.push(Tool::new("get.time", "The time.", no_args()));
            tools.push(Tool::new("get_time", "The time, too.", no_args()));
        }
        tools
    }
}

impl ServerHandler for Faults {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // The page asked for: 0 without a cursor, else the one after the cursor's.
        let page = request.and_then(|r| r.cursor).map_or(0, |c| c.parse::<u64>().unwrap_or_default() + 1);
        let page_of = |tools: Vec<Tool>, cursor: u64| {
            let mut result = ListToolsResult::with_all_items(tools);
            result.next_cursor = Some(cursor.to_string());
            result
        };
        Ok(match self.listing {
            Listing::Plainly | Listing::Colliding => ListToolsResult::with_all_items(self.tools()),
            Listing::Never => std::future::pending().await,
            Listing::EndlessPages => page_of(vec![Tool::new("echo", "Echoes.", no_args())], page),
            Listing::RepeatedCursor => page_of(Vec::new(), 0),
            Listing::WidePages => {
                let tools = (0..1000).map(|i| Tool::new(format!("wide_{}", page * 1000 + i), "Wide.", no_args()));
                page_of(tools.collect(), page)
            }
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "refund" {
            return Ok(refund(request));
        }
        self.call(request, context).await.map(Into::into)
    }
}

impl Faults {
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let arg = |name: &str| args.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
        match &*request.name {
            "echo" => Ok(CallToolResult::success(vec![ContentBlock::text(arg("text"))])),
            "weather" => Ok(CallToolResult::structured(json!({"city": arg("city"), "temperature": 21}))),
            "mislabeled" => Ok(CallToolResult::structured(json!({"city": "Oslo", "temperature": "cold"}))),
            "unstructured" => Ok(CallToolResult::success(vec![ContentBlock::text("21 degrees")])),
            "fail" => Ok(CallToolResult::error(vec![ContentBlock::text("the disk is full")])),
            "reject" => Err(ErrorData::invalid_params("the fault server rejects this call", None)),
            "sleep" => {
                context.ct.cancelled().await;
                self.cancelled.fetch_add(1, Ordering::SeqCst);
                Ok(CallToolResult::error(vec![ContentBlock::text("cancelled")]))
            }
            "cancelled" => {
                Ok(CallToolResult::success(vec![ContentBlock::text(self.cancelled.load(Ordering::SeqCst).to_string())]))
            }
            "die" => std::process::exit(3),
            "meta" => {
                let mut meta = context.meta.0.0.clone();
                if let Some(own) = request.meta {
                    meta.extend(own.0.0);
                }
                Ok(CallToolResult::structured(Value::Object(meta)))
            }
            "pid" => Ok(CallToolResult::success(vec![ContentBlock::text(std::process::id().to_string())])),
            "grow" | "shrink" => {
                self.grown.store(&*request.name == "grow", Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                Ok(CallToolResult::success(vec![ContentBlock::text("done")]))
            }
            "extra" if self.grown.load(Ordering::SeqCst) => {
                Ok(CallToolResult::success(vec![ContentBlock::text("extra")]))
            }
            other => Err(ErrorData::invalid_params(format!("no tool named {other}"), None)),
        }
    }
}

/// `refund`: a round trip. Asked without answers, it asks (and lists the roots);
/// asked again, it reads the answer and the state it gave.
fn refund(request: CallToolRequestParams) -> CallToolResponse {
    let order = request.arguments.as_ref().and_then(|a| a.get("order")).and_then(Value::as_str).unwrap_or_default();
    let Some(responses) = request.input_responses else {
        let requests = serde_json::from_value(json!({
            "amount": {"method": "elicitation/create", "params": {
                "mode": "form",
                "message": format!("How much of order {order} is refunded?"),
                "requestedSchema": {"type": "object", "properties": {"eur": {"type": "integer", "minimum": 1}}, "required": ["eur"]},
            }},
            "roots": {"method": "roots/list"},
        }))
        .expect("input requests");
        return InputRequiredResult::new(Some(requests), Some(format!("order={order}"))).into();
    };
    let text = match (&responses["amount"]["action"], request.request_state.as_deref()) {
        (Value::String(action), Some(state)) if action == "accept" => {
            format!(
                "refunded {} EUR ({state}, roots {})",
                responses["amount"]["content"]["eur"], responses["roots"]["roots"]
            )
        }
        (action, state) => format!("not refunded: {action} ({})", state.unwrap_or("no state")),
    };
    CallToolResult::success(vec![ContentBlock::text(text)]).into()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listing = match std::env::args().nth(1).as_deref() {
        Some("--exit") => std::process::exit(2),
        Some("--hang") => {
            // Reads nothing, answers nothing, until it is killed.
            std::future::pending::<()>().await;
            unreachable!("pending never ends")
        }
        Some("--hang-listing") => Listing::Never,
        Some("--endless-pages") => Listing::EndlessPages,
        Some("--repeated-cursor") => Listing::RepeatedCursor,
        Some("--wide-pages") => Listing::WidePages,
        Some("--colliding") => Listing::Colliding,
        _ => Listing::Plainly,
    };
    let service = Faults { listing, ..Faults::default() }.serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}
