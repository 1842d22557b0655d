use loopstack::tool;

/// Refunds an order.
#[tool(effect = "at_most_once")]
async fn refund(order: String) -> String {
    order
}

fn main() {}
