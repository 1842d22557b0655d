use loopstack::tool;

#[tool(description = "  ")]
async fn get_weather(location: String) -> String {
    location
}

fn main() {}
