//! The weather tool the agent tests call: "Mostly sunny in <city>, 14C.", with a
//! count of its calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loopstack_core::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::Value;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Location {
    /// City or location name
    location: String,
}

/// Weather for a city; counts its calls.
#[derive(Default, Clone)]
pub struct Weather {
    pub calls: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Tool for Weather {
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "Retrieve weather information."
    }
    fn input_schema(&self) -> Value {
        loopstack_core::tool_input_schema::<Location>()
    }
    async fn call(&self, args: Value, _cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let args: Location = loopstack_core::parse_tool_arguments(self.name(), args)?;
        Ok(ToolOutput::text(format!("Mostly sunny in {}, 14C.", args.location)))
    }
}
