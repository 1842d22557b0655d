use loopstack::tool;

/// Retrieve weather information.
#[tool]
async fn get_weather(location: &str) -> String {
    location.to_owned()
}

fn main() {}
