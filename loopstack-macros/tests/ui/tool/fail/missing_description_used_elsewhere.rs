use loopstack::{ToolRegistry, tool};

// The tool is used below; the missing description is the only error.
#[tool]
async fn get_weather(location: String) -> String {
    location
}

fn register() {
    let mut tools = ToolRegistry::new();
    tools.register(GetWeather).unwrap();
    let _ = get_weather(String::new());
}

fn main() {
    register();
}
