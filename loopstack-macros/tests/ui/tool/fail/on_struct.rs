use loopstack::tool;

/// Retrieve weather information.
#[tool]
struct GetWeather;

fn main() {}
