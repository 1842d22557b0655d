use loopstack::tool;

struct OrderStatus;

/// Look up an order's status.
#[tool]
impl OrderStatus {
    async fn handle() -> String {
        String::new()
    }
}

fn main() {}
