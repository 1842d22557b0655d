//! What an agent's run starts from: the prompt, and the tools a client answers itself.

use std::borrow::Cow;
use std::sync::Arc;

use loopstack_core::schemars::{self, JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// What an agent's run starts from: the user's prompt and, from a frontend, the
/// tools the frontend answers itself ([`ClientTool`]).
///
/// A prompt converts into it (`agent.ask(&runtime, "...")`, `runtime.start(&agent,
/// "...".into())`). As JSON (the command line's `--input`, the HTTP API, a
/// schedule) it is the prompt as a string, or `{"prompt": "...", "client_tools":
/// [...]}`; its JSON Schema is the string's, the form a person or a model writes.
///
/// ```
/// use loopstack_llm::agent::{AgentInput, ClientTool};
/// use serde_json::json;
///
/// let input: AgentInput = serde_json::from_value(json!("Book a table")).unwrap();
/// assert_eq!(input, AgentInput::from("Book a table"));
/// let with_tools: AgentInput = serde_json::from_value(json!({
///     "prompt": "Book a table",
///     "client_tools": [{"name": "confirm", "description": "Asks the user.", "parameters": {"type": "object"}}],
/// }))
/// .unwrap();
/// assert_eq!(with_tools.client_tools[0].name, "confirm");
/// let bad = json!({"prompt": "Hi", "client_tools": [{"name": "no spaces", "description": ""}]});
/// assert!(serde_json::from_value::<AgentInput>(bad).is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentInput {
    /// What the user asks.
    pub prompt: String,
    /// Tools offered to the model besides the agent's own, which the client answers:
    /// a call of one waits, like a call to approve, for the client's result.
    pub client_tools: Vec<ClientTool>,
}

impl AgentInput {
    /// A run that starts with `prompt`.
    pub fn new(prompt: impl Into<String>) -> Self {
        Self { prompt: prompt.into(), client_tools: Vec::new() }
    }

    /// Offers `tools`, answered by the client, besides the agent's own.
    #[must_use]
    pub fn client_tools(mut self, tools: impl IntoIterator<Item = ClientTool>) -> Self {
        self.client_tools = tools.into_iter().collect();
        self
    }
}

impl From<String> for AgentInput {
    fn from(prompt: String) -> Self {
        Self::new(prompt)
    }
}

impl From<&str> for AgentInput {
    fn from(prompt: &str) -> Self {
        Self::new(prompt)
    }
}

impl Serialize for AgentInput {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The object form, written.
        #[derive(Serialize)]
        struct Full<'a> {
            prompt: &'a str,
            client_tools: &'a [ClientTool],
        }
        if self.client_tools.is_empty() {
            return serializer.serialize_str(&self.prompt);
        }
        Full { prompt: &self.prompt, client_tools: &self.client_tools }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for AgentInput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// The object form, read.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            prompt: String,
            #[serde(default)]
            client_tools: Vec<ClientTool>,
        }
        #[derive(Deserialize)]
        #[serde(untagged, expecting = "the prompt, or {\"prompt\", \"client_tools\"}")]
        enum Wire {
            Prompt(String),
            Full(Full),
        }
        let input = match Wire::deserialize(deserializer)? {
            Wire::Prompt(prompt) => Self::new(prompt),
            Wire::Full(full) => Self { prompt: full.prompt, client_tools: full.client_tools },
        };
        if let Some(bad) = input.client_tools.iter().find(|t| !loopstack_core::is_valid_tool_name(&t.name)) {
            return Err(serde::de::Error::custom(format!(
                "client tool `{}`: a tool's name is 1 to 64 ASCII letters, digits, `_` or `-`",
                bad.name
            )));
        }
        Ok(input)
    }
}

impl JsonSchema for AgentInput {
    fn schema_name() -> Cow<'static, str> {
        "AgentInput".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "description": "What the user asks." })
    }
}

/// A tool a client declares for a run and answers itself (a frontend's tool, such as
/// one that asks the user to confirm): offered to the model like the agent's own
/// tools, its calls are never run by the agent. A call waits, durably, like a call
/// to approve ([`PendingCall::client`](super::PendingCall::client)), until the client
/// gives its result ([`ToolDecision::result`](super::ToolDecision::result)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClientTool {
    /// The tool's name, as the model calls it.
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of its arguments.
    #[serde(default = "any_object", skip_serializing_if = "is_any_object")]
    pub parameters: Value,
}

impl ClientTool {
    /// A tool named `name` that does what `description` says, taking arguments of the
    /// JSON Schema `parameters`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self { name: name.into(), description: description.into(), parameters }
    }

    /// Its definition, as a model turn offers it.
    pub(crate) fn definition(&self) -> Arc<loopstack_model::ToolDefinition> {
        Arc::new(loopstack_model::ToolDefinition::new(&self.name, &self.description, self.parameters.clone()))
    }
}

fn any_object() -> Value {
    serde_json::json!({ "type": "object" })
}

fn is_any_object(value: &Value) -> bool {
    *value == any_object()
}
