use loopstack::tool;

trait Describe {
    fn describe(&self) -> String;
}

struct OrderStatus;

/// Look up an order's status.
#[tool]
impl Describe for OrderStatus {
    fn describe(&self) -> String {
        "order status".into()
    }
}

fn main() {}
