use loopstack::tool;

/// Retrieve weather information.
#[tool(timeout = "10s")]
async fn get_weather(location: String) -> String {
    location
}

fn main() {}
