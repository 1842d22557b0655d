use loopstack::tool;

#[derive(schemars::JsonSchema)]
struct Place {
    city: String,
}

/// Retrieve weather information.
#[tool]
async fn get_weather(place: Place) -> String {
    place.city
}

fn main() {}
