use loopstack::tool;

/// Retrieve weather information.
#[tool]
fn get_weather(location: String) -> String {
    location
}

fn main() {}
