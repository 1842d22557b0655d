use loopstack::tool;

struct OrderStatus<C>(C);

/// Look up an order's status.
#[tool]
impl<C: Send + Sync + 'static> OrderStatus<C> {
    async fn handle(&self) -> String {
        String::new()
    }
}

fn main() {}
