use loopstack::tool;

/// Refunds an order.
#[tool(approve = "yes")]
async fn refund(order: String) -> String {
    order
}

fn main() {}
