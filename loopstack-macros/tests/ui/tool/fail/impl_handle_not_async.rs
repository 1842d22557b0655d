use loopstack::tool;

struct OrderStatus;

/// Look up an order's status.
#[tool]
impl OrderStatus {
    fn handle(&self) -> String {
        String::new()
    }
}

fn main() {}
