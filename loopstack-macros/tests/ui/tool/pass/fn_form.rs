use loopstack::{Tool, ToolContext, ToolError, ToolRegistry, tool};

/// Retrieve weather information.
#[tool]
async fn get_weather(
    /// City or location name
    location: String,
    unit: Option<String>,
    cx: &ToolContext,
) -> Result<String, ToolError> {
    Ok(format!("{location} {unit:?} {}", cx.call_id()))
}

/// Searches, slowly and alone.
#[tool(name = "search-v2", timeout = 10, concurrent = false, crate = ::loopstack)]
pub async fn search(
    cx: &ToolContext,
    /// What to look for.
    query: String,
    #[serde(default)]
    #[schemars(range(min = 1, max = 50))]
    limit: u32,
) -> std::io::Result<Vec<String>> {
    let _ = cx;
    Ok(vec![query; limit as usize])
}

/// Described by the attribute instead.
#[tool(description = "Tells the time.")]
async fn clock() -> &'static str {
    "noon"
}

/// Compiled out: the generated struct and impl follow the fn's `#[cfg]`.
#[tool]
#[cfg(any())]
async fn compiled_out() -> String {
    NotEvenAType::new()
}

/// Kept: `#[cfg(all())]` is always true.
#[tool]
#[cfg(all())]
async fn kept() -> String {
    String::new()
}

fn main() {
    assert_eq!(Kept.name(), "kept");
    let mut tools = ToolRegistry::new();
    tools.register(GetWeather).unwrap().register(Search).unwrap().register(Clock).unwrap();
    assert_eq!(Search.name(), "search-v2");
}
