use loopstack::tool;

struct Weather;

impl Weather {
    /// Retrieve weather information.
    #[tool]
    async fn get_weather(&self, location: String) -> String {
        location
    }
}

fn main() {}
