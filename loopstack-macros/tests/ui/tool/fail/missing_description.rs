use loopstack::tool;

#[tool]
async fn get_weather(location: String) -> String {
    location
}

fn main() {}
