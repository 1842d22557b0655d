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

/// Refunds an order, never twice.
#[tool(effect = at_most_once)]
async fn refund(order: String) -> String {
    order
}

/// Charges a card under the call's idempotency key.
#[tool(effect = idempotent, approve)]
async fn charge(cx: &ToolContext) -> String {
    cx.idempotency_key().unwrap_or_default()
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
    assert_eq!(Refund.options().effect, loopstack::Effect::AtMostOnce);
    assert_eq!((Charge.options().effect, Charge.options().approve), (loopstack::Effect::Idempotent, true));
    assert_eq!(Clock.options().effect, loopstack::Effect::AtLeastOnce);
}
