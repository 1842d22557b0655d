//! Typed answers: an agent whose final answer must deserialize into a Rust type.

use std::marker::PhantomData;
use std::sync::Arc;

use loopstack_core::{RunId, Runtime, ToolDefinition, schemars::JsonSchema};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Agent, AgentReply, AgentStatus, AskError};
use crate::message::Message;
use crate::model::ResponseSchema;

/// The name of the tool a model answers through when its provider has no
/// structured output.
pub const RESPOND_TOOL: &str = "respond";
/// How many times by default an answer that does not fit goes back to the model.
pub const DEFAULT_ANSWER_RETRIES: u32 = 2;

/// How an agent's final answer is checked; built once per answer type.
pub(crate) struct AnswerFormat {
    /// The `respond` tool, for providers without structured output.
    pub(crate) tool: Arc<ToolDefinition>,
    /// The schema the reply follows, for providers with structured output.
    pub(crate) schema: ResponseSchema,
    /// Whether the type is not an object and is wrapped as `{"answer": ...}`.
    pub(crate) wrapped: bool,
    /// Whether the JSON deserializes into the type; the error in the model's terms.
    pub(crate) check: fn(&Value) -> Result<(), String>,
    /// How many times an answer that does not fit goes back to the model.
    pub(crate) retries: u32,
}

impl std::fmt::Debug for AnswerFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerFormat").field("schema", &self.schema.name).field("retries", &self.retries).finish()
    }
}

fn check<T: DeserializeOwned>(value: &Value) -> Result<(), String> {
    T::deserialize(value).map(drop).map_err(|e| e.to_string())
}

impl AnswerFormat {
    pub(crate) fn of<T: JsonSchema + DeserializeOwned>(retries: u32) -> Self {
        let schema = loopstack_core::tool_input_schema::<T>();
        let wrapped = schema.get("type").and_then(Value::as_str) != Some("object");
        let schema = if wrapped {
            serde_json::json!({
                "type": "object",
                "properties": {"answer": schema},
                "required": ["answer"],
                "additionalProperties": false,
            })
        } else {
            schema
        };
        let name: String =
            T::schema_name().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(64).collect();
        let tool = ToolDefinition::new(
            RESPOND_TOOL,
            "Gives your final answer. Call it once, when you have everything you need; its arguments are the answer.",
            schema.clone(),
        );
        Self {
            tool: Arc::new(tool),
            schema: ResponseSchema::new(if name_ok(&name) { name } else { "answer".to_owned() }, schema),
            wrapped,
            check: check::<T>,
            retries,
        }
    }

    /// The answer in `value` (a `respond` call's arguments or the parsed reply),
    /// unwrapped, or why it does not fit.
    pub(crate) fn accept(&self, value: &Value) -> Result<Value, String> {
        let value = if self.wrapped {
            match value.get("answer") {
                Some(inner) => inner,
                None => return Err("missing field `answer`".to_owned()),
            }
        } else {
            value
        };
        (self.check)(value)?;
        Ok(value.clone())
    }

    /// Reads the answer from a final reply's text: JSON, perhaps in a fenced block.
    pub(crate) fn accept_text(&self, text: &str) -> Result<Value, String> {
        let json = strip_fence(text);
        let value: Value = serde_json::from_str(json).map_err(|e| format!("the answer is not JSON: {e}"))?;
        self.accept(&value)
    }
}

fn name_ok(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64
}

/// The inside of a fenced code block that makes up the whole text, else the text.
pub(crate) fn strip_fence(text: &str) -> &str {
    let t = text.trim();
    if let Some(rest) = t.strip_prefix("```")
        && let Some(body) = rest.strip_suffix("```")
    {
        // Skip the info string (`json`) up to the end of the first line.
        return body.split_once('\n').map_or(body, |(_, b)| b).trim();
    }
    t
}

/// Whether a final answer looks like a tool call the model wrote as text instead
/// of calling the tool: a JSON object with a `name` and `arguments` (or
/// `parameters`), or an array of such objects; the whole text, perhaps fenced,
/// perhaps with doubled braces, or a fenced block or the JSON at the end of some
/// prose (`I'll check. ```json {...} ````).
pub(crate) fn looks_like_tool_call(text: &str) -> bool {
    // A call is an object, or an array of them: most answers are prose without a
    // brace, told apart by one search for it.
    if !text.contains('{') {
        return false;
    }
    // Checked in turn, without collecting them: every final answer is checked.
    if is_call_json(strip_fence(text)) {
        return true;
    }
    // Fenced blocks anywhere in the text: none without a backtick (looked for byte
    // by byte before a substring search is built).
    let mut rest = if text.as_bytes().contains(&b'`') { text } else { "" };
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let Some(close) = after.find("```") else { break };
        let body = &after[..close];
        if is_call_json(body.split_once('\n').map_or(body, |(_, b)| b).trim()) {
            return true;
        }
        rest = &after[close + 3..];
    }
    // The JSON that ends some prose.
    text.bytes().position(|b| b == b'{' || b == b'[').is_some_and(|at| is_call_json(text[at..].trim()))
}

fn is_call_json(text: &str) -> bool {
    // Only an object or an array can be a call: other text is not parsed (a parse
    // error allocates, and most answers are prose). serde_json skips these
    // whitespace characters before a value.
    if !matches!(text.trim_start_matches([' ', '\t', '\n', '\r']).as_bytes().first(), Some(b'{' | b'[')) {
        return false;
    }
    let parsed = if text.starts_with("{{") {
        serde_json::from_str::<Value>(&text.replace("{{", "{").replace("}}", "}"))
    } else {
        serde_json::from_str::<Value>(text)
    };
    let is_call = |v: &Value| {
        v.as_object().is_some_and(|map| {
            map.get("name").is_some_and(Value::is_string)
                && (map.contains_key("arguments") || map.contains_key("parameters"))
        })
    };
    match parsed {
        Ok(Value::Array(items)) => items.first().is_some_and(is_call),
        Ok(value) => is_call(&value),
        Err(_) => false,
    }
}

/// What a typed agent answered: the typed value and the reply it came with.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Answer<T> {
    /// The answer.
    pub value: T,
    /// The run's reply: its id, usage, turns.
    pub reply: AgentReply,
}

/// An agent whose final answer must deserialize into `T`; see [`Agent::answer`].
///
/// The model answers through its provider's structured output where the provider
/// has one ([`ChatModel::structured_output`](crate::ChatModel::structured_output)),
/// else by calling a `respond` tool whose arguments are the answer. An answer that
/// does not fit goes back to the model with the error, up to the set number of
/// retries (default 2); then the run ends with
/// [`AgentStatus::InvalidAnswer`] and [`TypedAgent::ask`] returns
/// [`AskError::InvalidAnswer`].
pub struct TypedAgent<T> {
    agent: Agent,
    marker: PhantomData<fn() -> T>,
}

impl<T> Clone for TypedAgent<T> {
    fn clone(&self) -> Self {
        Self { agent: self.agent.clone(), marker: PhantomData }
    }
}

impl<T> std::fmt::Debug for TypedAgent<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedAgent").field("agent", &self.agent).field("type", &std::any::type_name::<T>()).finish()
    }
}

impl<T: JsonSchema + DeserializeOwned> TypedAgent<T> {
    pub(crate) fn new(agent: Agent, retries: u32) -> Self {
        let mut agent = agent;
        agent.answer = Some(Arc::new(AnswerFormat::of::<T>(retries)));
        Self { agent, marker: PhantomData }
    }

    /// Sets how many times an answer that does not fit goes back to the model.
    #[must_use]
    pub fn retries(self, retries: u32) -> Self {
        Self::new(self.agent, retries)
    }

    /// The agent underneath: the workflow to drive, signal or resume.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// Runs the agent on `prompt` and returns its typed answer.
    pub async fn ask(&self, runtime: &Runtime, prompt: impl Into<String>) -> Result<Answer<T>, AskError> {
        let reply = self.agent.ask(runtime, prompt).await?;
        self.typed(reply)
    }

    /// Sends decisions to a run that waits for tool approval, as
    /// [`Agent::decide`] does, and returns its typed answer once it has one.
    pub async fn decide(
        &self,
        runtime: &Runtime,
        run_id: RunId,
        decisions: super::ToolDecisions,
    ) -> Result<Answer<T>, AskError> {
        let reply = self.agent.decide(runtime, run_id, decisions).await?;
        self.typed(reply)
    }

    fn typed(&self, reply: AgentReply) -> Result<Answer<T>, AskError> {
        match (&reply.status, &reply.answer) {
            (AgentStatus::Completed, Some(value)) => {
                let value = T::deserialize(value).map_err(|e| AskError::InvalidAnswer {
                    run_id: reply.run_id,
                    error: e.to_string(),
                    retries: 0,
                })?;
                Ok(Answer { value, reply })
            }
            (AgentStatus::InvalidAnswer { error, retries }, _) => {
                Err(AskError::InvalidAnswer { run_id: reply.run_id, error: error.clone(), retries: *retries })
            }
            _ => Err(AskError::NoAnswer { run_id: reply.run_id, status: reply.status.clone() }),
        }
    }
}

/// The feedback a rejected answer gets, as a user message.
pub(crate) fn feedback(error: &str, via_tool: bool) -> Message {
    if via_tool {
        Message::user(format!(
            "Your answer does not fit the required format: {error}. Give your final answer by calling the \
             `{RESPOND_TOOL}` tool with arguments that match its schema."
        ))
    } else {
        Message::user(format!(
            "Your answer does not fit the required format: {error}. Answer again with only a JSON value that \
             matches the schema."
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_and_text_tool_calls() {
        assert_eq!(strip_fence("```json\n{\"a\": 1}\n```"), "{\"a\": 1}");
        assert_eq!(strip_fence("  {\"a\": 1} "), "{\"a\": 1}");
        assert!(looks_like_tool_call(r#"{"name": "get_weather", "arguments": {"city": "Oslo"}}"#));
        assert!(looks_like_tool_call("```json\n{\"name\": \"get_weather\", \"parameters\": {}}\n```"));
        assert!(looks_like_tool_call(r#"{{"name": "get_weather", "arguments": {{"city": "Oslo"}}}}"#));
        assert!(!looks_like_tool_call("It is sunny in Oslo."));
        assert!(looks_like_tool_call("I'll check.\n```json\n{\"name\": \"get_weather\", \"arguments\": {}}\n```"));
        assert!(looks_like_tool_call(r#"[{"name": "get_weather", "arguments": {"city": "Oslo"}}]"#));
        assert!(looks_like_tool_call(r#"Calling: {"name": "get_weather", "arguments": {"city": "Oslo"}}"#));
        assert!(!looks_like_tool_call("Use {curly} braces, e.g. [1, 2]."));
        assert!(!looks_like_tool_call(r#"{"name": "Ada"}"#));
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Weather {
        city: String,
        celsius: i32,
    }

    #[test]
    fn objects_are_checked_as_they_are_and_other_types_are_wrapped() {
        let f = AnswerFormat::of::<Weather>(2);
        assert!(!f.wrapped);
        assert_eq!(f.accept(&serde_json::json!({"city": "Oslo", "celsius": 14})).unwrap()["city"], "Oslo");
        let err = f.accept(&serde_json::json!({"city": "Oslo"})).unwrap_err();
        assert!(err.contains("celsius"), "{err}");
        assert!(f.accept_text("```json\n{\"city\": \"Oslo\", \"celsius\": 14}\n```").is_ok());
        assert!(f.accept_text("It is 14 degrees.").unwrap_err().starts_with("the answer is not JSON"));

        let list = AnswerFormat::of::<Vec<u32>>(2);
        assert!(list.wrapped);
        assert_eq!(list.tool.input_schema["required"], serde_json::json!(["answer"]));
        assert_eq!(list.accept(&serde_json::json!({"answer": [1, 2]})).unwrap(), serde_json::json!([1, 2]));
        assert_eq!(list.accept(&serde_json::json!([1, 2])).unwrap_err(), "missing field `answer`");
    }
}
