use loopstack::tool;

struct Forecast {
    high: i32,
}

/// Retrieve weather information.
#[tool]
async fn get_weather(location: String) -> Forecast {
    let _ = location;
    Forecast { high: 21 }
}

fn main() {}
