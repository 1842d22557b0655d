use loopstack::tool;

struct OrderStatus;

/// Look up an order's status.
#[tool]
impl OrderStatus {
    async fn handle(&self, order_id: String, verbose: bool) -> String {
        let _ = verbose;
        order_id
    }
}

fn main() {}
