use loopstack::tool;

struct OrderStatus;

#[tool]
impl OrderStatus {
    async fn handle(&self) -> String {
        String::new()
    }
}

fn main() {}
