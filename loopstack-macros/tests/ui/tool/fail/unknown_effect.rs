use loopstack::tool;

/// Refunds an order.
#[tool(effect = exactly_once)]
async fn refund(order: String) -> String {
    order
}

fn main() {}
