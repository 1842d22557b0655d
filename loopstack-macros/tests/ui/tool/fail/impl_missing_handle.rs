use loopstack::tool;

struct OrderStatus;

/// Look up an order's status.
#[tool]
impl OrderStatus {
    async fn call(&self) -> String {
        String::new()
    }
}

fn main() {}
