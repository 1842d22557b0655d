use loopstack::{ToolContext, tool};

/// Retrieve weather information.
#[tool]
async fn get_weather(location: String, cx: &mut ToolContext) -> String {
    let _ = cx;
    location
}

fn main() {}
