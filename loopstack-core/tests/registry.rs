//! The tool registry with hand-written tools.

use std::sync::atomic::{AtomicUsize, Ordering};

use loopstack_core::*;
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Args {
    /// City or location name
    location: String,
    /// Unit, `c` or `f`
    unit: Option<String>,
    nested: Option<Inner>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Inner {
    depth: u32,
}

static SCHEMA_CALLS: AtomicUsize = AtomicUsize::new(0);

struct Weather;

#[async_trait::async_trait]
impl Tool for Weather {
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "Retrieve weather information."
    }
    fn input_schema(&self) -> Value {
        tool_input_schema::<Args>()
    }
    async fn call(&self, args: Value, _cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        // Echo what the tool received, to show unknown arguments were dropped.
        let _: Args = parse_tool_arguments(self.name(), args.clone())?;
        Ok(ToolOutput::json(args))
    }
}

/// Counts how often its schema is generated.
struct Counted;

#[async_trait::async_trait]
impl Tool for Counted {
    fn name(&self) -> &str {
        "counted"
    }
    fn description(&self) -> &str {
        "Counts schema generations."
    }
    fn input_schema(&self) -> Value {
        SCHEMA_CALLS.fetch_add(1, Ordering::SeqCst);
        tool_input_schema::<Args>()
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("ok"))
    }
}

struct Impostor;

#[async_trait::async_trait]
impl Tool for Impostor {
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "Also weather."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("rain"))
    }
}

#[test]
fn the_input_schema_is_inlined_closed_and_lists_required_fields() {
    let schema = tool_input_schema::<Args>();
    assert_eq!(
        schema,
        json!({
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City or location name"},
                "unit": {"type": ["string", "null"], "description": "Unit, `c` or `f`"},
                "nested": {
                    "type": ["object", "null"],
                    "properties": {"depth": {"type": "integer", "format": "uint32", "minimum": 0}},
                    "required": ["depth"],
                    "additionalProperties": false
                }
            },
            "required": ["location"],
            "additionalProperties": false
        })
    );
    assert!(!schema.to_string().contains("$ref") && !schema.to_string().contains("$defs"));
}

#[tokio::test]
async fn the_registry_computes_schemas_once_and_refuses_duplicates() {
    let mut tools = ToolRegistry::new();
    tools.register(Weather).unwrap();
    tools.register(Counted).unwrap();
    assert_eq!(SCHEMA_CALLS.load(Ordering::SeqCst), 1);
    let clone = tools.clone();
    for _ in 0..3 {
        assert_eq!(clone.spec("counted").unwrap().input_schema["required"], json!(["location"]));
        let out = clone.call("counted", json!({"location": "Berlin"}), &ToolContext::new("c", "counted")).await;
        assert!(out.is_ok());
    }
    assert_eq!(SCHEMA_CALLS.load(Ordering::SeqCst), 1, "no schema generation per call");

    let err = tools.register(Impostor).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("`get_weather`") && msg.contains("registry::Weather") && msg.contains("registry::Impostor"),
        "{msg}"
    );
    assert_eq!(tools.names().collect::<Vec<_>>(), ["get_weather", "counted"]);
}

#[tokio::test]
async fn unknown_tools_name_the_tools_that_exist() {
    let tools = ToolRegistry::new().with(Weather).unwrap();
    let err = tools.call("get_wether", json!({}), &ToolContext::new("c", "get_wether")).await.unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::UnknownTool);
    assert_eq!(err.to_string(), "unknown tool `get_wether`; the available tools are: get_weather");
}

#[tokio::test]
async fn unknown_arguments_are_dropped_and_bad_ones_explained() {
    let tools = ToolRegistry::new().with(Weather).unwrap();
    let cx = ToolContext::new("c", "get_weather");
    let out = tools.call("get_weather", json!({"location": "Berlin", "mood": "sunny"}), &cx).await.unwrap();
    assert_eq!(out.content, ToolContent::Json(json!({"location": "Berlin"})));

    let err = tools.call("get_weather", json!({"unit": "c"}), &cx).await.unwrap_err();
    assert_eq!(err.kind(), ToolErrorKind::InvalidArguments);
    assert_eq!(err.to_string(), "invalid arguments for tool `get_weather`: missing field `location`");

    let err = tools.call("get_weather", json!({"location": "x", "nested": {"depth": -1}}), &cx).await.unwrap_err();
    assert!(err.to_string().contains("at `nested.depth`"), "{err}");

    // Several values where the tool takes one: the error says to call it once for each.
    let err = tools.call("get_weather", json!({"location": ["Paris", "Rome"]}), &cx).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid arguments for tool `get_weather` at `location`: invalid type: sequence, expected a string; \
         it takes one value: for several, call `get_weather` once for each"
    );
}

#[test]
fn invalid_names_are_refused() {
    struct Bad;
    #[async_trait::async_trait]
    impl Tool for Bad {
        fn name(&self) -> &str {
            "get weather!"
        }
        fn description(&self) -> &str {
            "x"
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object"})
        }
        async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
            unreachable!()
        }
    }
    assert!(matches!(ToolRegistry::new().register(Bad), Err(RegistryError::InvalidName(_))));
    assert!(is_valid_tool_name("a-b_C9") && !is_valid_tool_name("") && !is_valid_tool_name(&"x".repeat(65)));
}

#[test]
fn outputs_keep_text_as_text() {
    assert_eq!(ToolOutput::text("Mostly sunny").to_text(), "Mostly sunny");
    assert_eq!(ToolOutput::json(json!({"t": 14})).to_text(), r#"{"t":14}"#);
    assert_eq!(String::from("x").into_tool_output(), ToolOutput::text("x"));
    assert_eq!(Json(vec![1, 2]).into_tool_output(), ToolOutput::json(json!([1, 2])));
    let err: ToolError = "x".parse::<i32>().unwrap_err().into();
    assert_eq!(ToolOutput::from(err), ToolOutput::error("invalid digit found in string"));
}

/// What to look up: an enum of argument shapes.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[allow(dead_code)] // read through Debug
enum Lookup {
    /// By city.
    City { name: String },
    /// By coordinates.
    Coordinates { lat: f64, lon: f64 },
}

/// Flattened extra fields.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)] // read through Debug
struct Tagged {
    label: String,
    #[serde(flatten)]
    extra: std::collections::BTreeMap<String, String>,
}

struct Shaped;

#[async_trait::async_trait]
impl Tool for Shaped {
    fn name(&self) -> &str {
        "lookup"
    }
    fn description(&self) -> &str {
        "Enum arguments."
    }
    fn input_schema(&self) -> Value {
        tool_input_schema::<Lookup>()
    }
    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Lookup = parse_tool_arguments(self.name(), args)?;
        Ok(ToolOutput::text(format!("{args:?}")))
    }
}

struct Open;

#[async_trait::async_trait]
impl Tool for Open {
    fn name(&self) -> &str {
        "tagged"
    }
    fn description(&self) -> &str {
        "Flattened arguments."
    }
    fn input_schema(&self) -> Value {
        tool_input_schema::<Tagged>()
    }
    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Tagged = parse_tool_arguments(self.name(), args)?;
        Ok(ToolOutput::text(format!("{args:?}")))
    }
}

#[tokio::test]
async fn enum_and_flattened_arguments_reach_the_tool() {
    let schema = tool_input_schema::<Lookup>();
    assert_eq!(schema["type"], "object");
    assert!(schema.get("properties").is_none(), "{schema}");
    assert_eq!(schema["oneOf"].as_array().unwrap().len(), 2);
    assert!(schema["oneOf"].as_array().unwrap().iter().all(|s| s["additionalProperties"] == false));

    let tagged = tool_input_schema::<Tagged>();
    assert_eq!(tagged["additionalProperties"], json!({"type": "string"}));

    let tools = ToolRegistry::new().with(Shaped).unwrap().with(Open).unwrap();
    let cx = ToolContext::new("c", "lookup");
    let out = tools.call("lookup", json!({"kind": "coordinates", "lat": 1.5, "lon": 2.0}), &cx).await.unwrap();
    assert_eq!(out.to_text(), "Coordinates { lat: 1.5, lon: 2.0 }");
    let out = tools.call("tagged", json!({"label": "x", "color": "red"}), &cx).await.unwrap();
    assert_eq!(out.to_text(), r#"Tagged { label: "x", extra: {"color": "red"} }"#);
}
