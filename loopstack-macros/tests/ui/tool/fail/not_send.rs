use std::rc::Rc;

use loopstack::tool;

async fn fetch() {}

/// Retrieve weather information.
#[tool]
async fn get_weather(location: String) -> String {
    let shared = Rc::new(location);
    fetch().await;
    shared.to_string()
}

fn main() {}
