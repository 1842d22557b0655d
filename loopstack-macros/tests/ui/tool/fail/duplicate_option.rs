use loopstack::tool;

/// Retrieve weather information.
#[tool(timeout = 10, timeout = 20)]
async fn get_weather(location: String) -> String {
    location
}

fn main() {}
