use loopstack::tool;

#[derive(serde::Deserialize)]
struct OrderQuery {
    order_id: String,
}

struct OrderStatus;

/// Look up an order's status.
#[tool]
impl OrderStatus {
    async fn handle(&self, args: OrderQuery) -> String {
        args.order_id
    }
}

fn main() {}
