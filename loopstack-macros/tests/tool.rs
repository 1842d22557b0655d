//! What `#[tool]` generates, exercised through the `Tool` trait.

use std::time::Duration;

use loopstack::{
    Json, Tool, ToolContent, ToolContext, ToolError, ToolErrorKind, ToolOptions, ToolOutput, ToolRegistry, tool,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

fn cx() -> ToolContext {
    ToolContext::new("call_1", "test")
}

/// Retrieve weather information.
#[tool]
async fn get_weather(
    /// City or location name
    location: String,
    /// Temperature unit: `celsius` or `fahrenheit`.
    unit: Option<String>,
    cx: &ToolContext,
) -> Result<String, ToolError> {
    if location.is_empty() {
        return Err(ToolError::new("the location is empty"));
    }
    Ok(format!("{location}: 14 degrees {} (call {})", unit.as_deref().unwrap_or("celsius"), cx.call_id()))
}

/// Every object in a schema is closed and nothing refers elsewhere.
fn assert_inlined(schema: &Value) {
    let text = schema.to_string();
    assert!(!text.contains("$ref") && !text.contains("$defs") && !text.contains("definitions"), "{text}");
}

#[tokio::test]
async fn fn_form_name_description_and_schema() {
    let t = GetWeather;
    assert_eq!(t.name(), "get_weather");
    assert_eq!(t.description(), "Retrieve weather information.");
    assert_eq!(t.options(), ToolOptions::default());
    let schema = t.input_schema();
    assert_inlined(&schema);
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["required"], json!(["location"]));
    let props = schema["properties"].as_object().unwrap();
    assert_eq!(props.keys().collect::<Vec<_>>(), ["location", "unit"], "the context is not an argument");
    assert_eq!(props["location"]["type"], "string");
    assert_eq!(props["location"]["description"], "City or location name");
    assert_eq!(props["unit"]["description"], "Temperature unit: `celsius` or `fahrenheit`.");
    assert!(schema.get("title").is_none() && schema.get("description").is_none(), "{schema}");
}

#[tokio::test]
async fn fn_form_calls() {
    let out = GetWeather.call(json!({"location": "Berlin"}), &cx()).await.unwrap();
    assert_eq!(out, ToolOutput::text("Berlin: 14 degrees celsius (call call_1)"));
    let out = GetWeather.call(json!({"location": "Austin", "unit": "fahrenheit"}), &cx()).await.unwrap();
    assert_eq!(out.to_text(), "Austin: 14 degrees fahrenheit (call call_1)");
    // The fn itself is still there, for unit tests.
    assert_eq!(get_weather("Oslo".into(), None, &cx()).await.unwrap(), "Oslo: 14 degrees celsius (call call_1)");
}

#[tokio::test]
async fn bad_arguments_are_invalid_arguments_errors() {
    let err = GetWeather.call(json!({"unit": "celsius"}), &cx()).await.unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::InvalidArguments);
    assert!(err.message().contains("missing field `location`"), "{err}");
    assert!(err.message().contains("get_weather"), "{err}");

    let err = GetWeather.call(json!({"location": 5}), &cx()).await.unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::InvalidArguments);
    assert!(err.message().contains("`location`") && err.message().contains("expected a string"), "{err}");

    let err = GetWeather.call(json!("Berlin"), &cx()).await.unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::InvalidArguments, "{err}");
}

#[tokio::test]
async fn error_results() {
    let err = GetWeather.call(json!({"location": ""}), &cx()).await.unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::Failed);
    assert_eq!(err.message(), "the location is empty");
}

/// Reads a file, failing with an `std::io::Error`.
#[tool]
async fn read_config(path: String) -> std::io::Result<String> {
    Err(std::io::Error::new(std::io::ErrorKind::NotFound, format!("no file at {path}")))
}

#[tokio::test]
async fn error_types_convert_into_tool_errors() {
    let err = ReadConfig.call(json!({"path": "/etc/x"}), &cx()).await.unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::Failed);
    assert_eq!(err.message(), "no file at /etc/x");
}

#[derive(Debug, Serialize)]
struct Forecast {
    city: String,
    high: i32,
}

/// Plain text.
#[tool]
async fn text_string() -> String {
    "sunny".to_owned()
}

/// A static str.
#[tool]
async fn text_str() -> &'static str {
    "\"quoted\" stays text"
}

/// A serializable struct.
#[tool]
async fn structured(city: String) -> Result<Forecast, ToolError> {
    Ok(Forecast { city, high: 21 })
}

/// A JSON value. (Not named `value`: its struct would be `Value`, which this file
/// imports from `serde_json`.)
#[tool]
async fn json_value() -> Value {
    json!({"ok": true})
}

/// A `Json` wrapper around a string: JSON, not text.
#[tool]
async fn json_wrapped() -> Json<String> {
    Json("quoted".to_owned())
}

/// A ready `ToolOutput`.
#[tool]
async fn ready_output() -> ToolOutput {
    ToolOutput::error("told the model it failed")
}

#[tokio::test]
async fn outputs_text_and_json() {
    let call = |t: &'static dyn Tool, args: Value| async move { t.call(args, &cx()).await.unwrap() };
    assert_eq!(call(&TextString, json!({})).await.content, ToolContent::Text("sunny".into()));
    assert_eq!(call(&TextStr, json!(null)).await.content, ToolContent::Text("\"quoted\" stays text".into()));
    assert_eq!(
        call(&Structured, json!({"city": "Rome"})).await.content,
        ToolContent::Json(json!({"city": "Rome", "high": 21}))
    );
    assert_eq!(call(&JsonValue, json!({})).await.content, ToolContent::Json(json!({"ok": true})));
    assert_eq!(call(&JsonWrapped, json!({})).await.content, ToolContent::Json(json!("quoted")));
    let out = call(&ReadyOutput, json!({})).await;
    assert!(out.is_error);
    assert_eq!(out.to_text(), "told the model it failed");
}

/// A tool with options.
#[tool(name = "slow-search", description = "Searches slowly.", timeout = 10, concurrent = false)]
async fn slow(query: String) -> String {
    query
}

/// A tool whose timeout is "as long as it takes".
#[tool(timeout = 0)]
async fn forever() -> String {
    String::new()
}

/// Refunds an order; a person approves each call.
#[tool(approve)]
async fn refund(order: String) -> String {
    order
}

/// Approval switched off explicitly.
#[tool(approve = false, timeout = 5)]
async fn lookup(order: String) -> String {
    order
}

#[test]
fn approve_marks_the_tool_as_needing_approval() {
    assert!(Refund.options().approve);
    assert!(Refund.options().concurrent);
    assert!(!Lookup.options().approve);
    assert!(!Slow.options().approve);
}

/// Names the workflows of the runtime that drives the call's run.
#[tool(needs_run)]
async fn workflows_here(cx: &ToolContext) -> Result<String, ToolError> {
    Ok(cx.runtime()?.workflows().join(", "))
}

/// Asks for the runtime without `needs_run`.
#[tool]
async fn runtime_unasked(cx: &ToolContext) -> Result<String, ToolError> {
    Ok(cx.runtime()?.workflows().join(", "))
}

#[tokio::test]
async fn needs_run_gives_the_call_its_runtime_and_without_it_the_runtime_is_an_error_saying_so() {
    assert!(WorkflowsHere.options().needs_run);
    assert!(!RuntimeUnasked.options().needs_run && !Refund.options().needs_run);

    let runtime = loopstack::Runtime::new().register(loopstack::llm::Agent::new(
        loopstack::llm::ScriptedModel::new(),
        "m",
        ToolRegistry::new(),
    ));
    let out = WorkflowsHere.call(json!({}), &cx().with_runtime(runtime)).await.unwrap();
    assert_eq!(out, ToolOutput::text("agent"));

    let err = RuntimeUnasked.call(json!({}), &cx()).await.unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::NoRun);
    assert!(err.message().contains("add `#[tool(needs_run)]`"), "{err}");
}

#[tokio::test]
async fn an_agent_gives_the_runtime_to_a_needs_run_tool_and_to_no_other() {
    use loopstack::llm::{Agent, ScriptedModel};
    let model = ScriptedModel::new()
        .tool_call("workflows_here", json!({}))
        .tool_call("runtime_unasked", json!({}))
        .text("Done.");
    let tools = ToolRegistry::new().with(WorkflowsHere).unwrap().with(RuntimeUnasked).unwrap();
    let agent = Agent::new(model.clone(), "m", tools);
    let runtime = loopstack::Runtime::new().register(agent.clone());
    let reply = agent.ask(&runtime, "Which workflows?").await.unwrap();
    assert_eq!(reply.text, "Done.");
    // What each call answered, as the model read it on its next turn.
    let requests = model.requests();
    let results: Vec<String> = requests[1..]
        .iter()
        .map(|r| {
            let last = r.messages.last().unwrap();
            last.tool_results_iter().next().map(|t| t.content.clone()).unwrap_or_default()
        })
        .collect();
    assert_eq!(results[0], "agent");
    assert!(results[1].contains("add `#[tool(needs_run)]`"), "{results:?}");
}

#[tokio::test]
async fn options_and_overrides() {
    assert_eq!(Slow.name(), "slow-search");
    assert_eq!(Slow.description(), "Searches slowly.");
    let opts = Slow.options();
    assert_eq!(opts.timeout, Some(Duration::from_secs(10)));
    assert!(!opts.concurrent);
    let opts = Forever.options();
    assert_eq!(opts.timeout, Some(Duration::ZERO));
    assert!(opts.concurrent);
    assert_eq!(opts.effective_timeout(Duration::from_secs(30)), Duration::from_secs(24 * 60 * 60));
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Priority {
    Low,
    High,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Address {
    /// Street and number.
    street: String,
    zip: Option<String>,
}

/// Books a delivery.
#[tool]
async fn book_delivery(
    /// Where to deliver.
    address: Address,
    /// How urgent it is.
    priority: Priority,
    /// Items, at least one.
    #[schemars(length(min = 1))]
    items: Vec<String>,
    /// Leave at the door.
    #[serde(default)]
    leave_at_door: bool,
    cx: &ToolContext,
) -> Result<Json<Value>, ToolError> {
    Ok(Json(json!({
        "street": address.street,
        "zip": address.zip,
        "priority": format!("{priority:?}"),
        "items": items.len(),
        "door": leave_at_door,
        "call": cx.call_id(),
    })))
}

#[tokio::test]
async fn nested_and_enum_arguments_are_inlined() {
    let schema = BookDelivery.input_schema();
    assert_inlined(&schema);
    assert_eq!(schema["required"], json!(["address", "priority", "items"]));
    let address = &schema["properties"]["address"];
    assert_eq!(address["type"], "object");
    assert_eq!(address["additionalProperties"], false);
    assert_eq!(address["required"], json!(["street"]));
    assert_eq!(address["properties"]["street"]["description"], "Street and number.");
    let priority = &schema["properties"]["priority"];
    assert_eq!(priority["enum"], json!(["low", "high"]), "{priority}");
    assert_eq!(priority["description"], "How urgent it is.");
    assert_eq!(schema["properties"]["items"]["minItems"], 1);
    assert_eq!(schema["properties"]["leave_at_door"]["default"], false);

    let out = BookDelivery
        .call(json!({"address": {"street": "Main St 1"}, "priority": "high", "items": ["a", "b"]}), &cx())
        .await
        .unwrap();
    assert_eq!(
        out.content,
        ToolContent::Json(json!({
            "street": "Main St 1", "zip": null, "priority": "High", "items": 2, "door": false, "call": "call_1",
        }))
    );
    let err = BookDelivery
        .call(json!({"address": {"street": "x"}, "priority": "urgent", "items": []}), &cx())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::InvalidArguments);
    assert!(err.message().contains("`priority`") && err.message().contains("urgent"), "{err}");
    let err = BookDelivery.call(json!({"address": {}, "priority": "low", "items": []}), &cx()).await.unwrap_err();
    assert!(err.message().contains("`address`") && err.message().contains("street"), "{err}");
}

// The impl form: a tool holding dependencies.

#[derive(Debug, Deserialize, JsonSchema)]
struct OrderQuery {
    /// The order's number, such as `A-17`.
    order_id: String,
    /// Include the line items.
    #[serde(default)]
    with_items: bool,
}

#[derive(Debug, Serialize)]
struct OrderReport {
    order_id: String,
    status: &'static str,
    items: Option<Vec<&'static str>>,
}

struct OrderStatus {
    shipped: Vec<&'static str>,
}

/// Look up an order's status.
///
/// Answers `shipped` or `processing`.
#[tool(timeout = 5)]
impl OrderStatus {
    async fn handle(&self, args: OrderQuery, cx: &ToolContext) -> Result<OrderReport, ToolError> {
        if cx.cancellation().is_cancelled() {
            return Err(ToolError::new("cancelled"));
        }
        let status = if self.is_shipped(&args.order_id) { "shipped" } else { "processing" };
        Ok(OrderReport { order_id: args.order_id, status, items: args.with_items.then(|| vec!["book"]) })
    }

    fn is_shipped(&self, id: &str) -> bool {
        self.shipped.contains(&id)
    }
}

#[tokio::test]
async fn impl_form() {
    let t = OrderStatus { shipped: vec!["A-17"] };
    assert_eq!(t.name(), "order_status");
    assert_eq!(t.description(), "Look up an order's status.\n\nAnswers `shipped` or `processing`.");
    assert_eq!(t.options().timeout, Some(Duration::from_secs(5)));
    let schema = t.input_schema();
    assert_inlined(&schema);
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["order_id"]));
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["properties"]["order_id"]["description"], "The order's number, such as `A-17`.");

    let out = t.call(json!({"order_id": "A-17", "with_items": true}), &cx()).await.unwrap();
    assert_eq!(out.content, ToolContent::Json(json!({"order_id": "A-17", "status": "shipped", "items": ["book"]})));
    let out = t.call(json!({"order_id": "B-2"}), &cx()).await.unwrap();
    assert_eq!(out.content, ToolContent::Json(json!({"order_id": "B-2", "status": "processing", "items": null})));
    let err = t.call(json!({"order_id": 17}), &cx()).await.unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::InvalidArguments);
    assert!(err.message().contains("order_status") && err.message().contains("`order_id`"), "{err}");
}

struct Clock {
    now: &'static str,
}

#[tool(name = "clock", description = "Tells the time.")]
impl Clock {
    async fn handle(&self) -> &'static str {
        self.now
    }
}

#[tokio::test]
async fn impl_form_without_arguments() {
    let t = Clock { now: "12:00" };
    assert_eq!(
        t.input_schema(),
        json!({"type": "object", "properties": {}, "required": [], "additionalProperties": false})
    );
    assert_eq!(t.call(json!({}), &cx()).await.unwrap(), ToolOutput::text("12:00"));
    assert_eq!(t.call(Value::Null, &cx()).await.unwrap(), ToolOutput::text("12:00"));
}

#[tokio::test]
async fn tools_register_and_run_through_a_registry() {
    let mut tools = ToolRegistry::new();
    tools.register(GetWeather).unwrap().register(OrderStatus { shipped: vec![] }).unwrap().register(Slow).unwrap();
    assert_eq!(tools.names().collect::<Vec<_>>(), ["get_weather", "order_status", "slow-search"]);
    let spec = tools.spec("get_weather").unwrap();
    assert_eq!(spec.description, "Retrieve weather information.");
    // Arguments the schema does not list are dropped before the tool sees them.
    let out = tools.call("get_weather", json!({"location": "Lima", "extra": 1}), &cx()).await.unwrap();
    assert_eq!(out.to_text(), "Lima: 14 degrees celsius (call call_1)");
}

#[test]
fn the_struct_is_a_plain_unit_struct() {
    fn traits<T: std::fmt::Debug + Clone + Copy + Default + Send + Sync + 'static>() {}
    traits::<GetWeather>();
    assert_eq!(format!("{:?}", GetWeather), "GetWeather");
}
