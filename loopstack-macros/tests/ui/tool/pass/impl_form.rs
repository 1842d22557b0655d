use loopstack::{Json, Tool, ToolContext, ToolError, tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
struct OrderQuery {
    /// The order's number.
    order_id: String,
}

#[derive(Serialize)]
struct OrderReport {
    status: String,
}

struct OrderStatus {
    client: Vec<String>,
}

/// Look up an order's status.
#[tool]
impl OrderStatus {
    async fn handle(&self, cx: &ToolContext, args: OrderQuery) -> Result<Json<OrderReport>, ToolError> {
        let _ = cx;
        Ok(Json(OrderReport { status: format!("{} of {}", args.order_id, self.client.len()) }))
    }

    pub fn new() -> Self {
        Self { client: Vec::new() }
    }
}

struct Ping;

#[tool(name = "ping", description = "Answers pong.")]
impl Ping {
    async fn handle(&self) -> String {
        "pong".into()
    }
}

fn main() {
    assert_eq!(OrderStatus::new().name(), "order_status");
    assert_eq!(Ping.name(), "ping");
}
