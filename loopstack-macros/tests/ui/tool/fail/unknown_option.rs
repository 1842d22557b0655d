use loopstack::tool;

/// Retrieve weather information.
#[tool(nmae = "weather")]
async fn get_weather(location: String) -> String {
    location
}

fn main() {}
