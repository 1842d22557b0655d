use loopstack::tool;

#[derive(Debug)]
struct NotAnError;

/// Retrieve weather information.
#[tool]
async fn get_weather(location: String) -> Result<String, NotAnError> {
    Ok(location)
}

fn main() {}
