use loopstack::tool;

/// Retrieve weather information.
#[tool(name = "get weather")]
async fn get_weather(location: String) -> String {
    location
}

fn main() {}
