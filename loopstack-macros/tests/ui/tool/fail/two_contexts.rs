use loopstack::{ToolContext, tool};

/// Retrieve weather information.
#[tool]
async fn get_weather(cx: &ToolContext, location: String, again: &ToolContext) -> String {
    let _ = (cx, again);
    location
}

fn main() {}
