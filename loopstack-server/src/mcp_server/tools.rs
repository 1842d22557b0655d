//! The tools the MCP server offers, and what a call of each asks for.

use std::borrow::Cow;
use std::sync::Arc;

use loopstack_core::serde_json::{self, Map, Value, json};
use loopstack_core::{RunId, Runtime};
use rmcp::model::{CallToolResult, Tool};

use super::answer;

/// The tool that sends a signal to a waiting run: `{run_id, signal, payload}`.
pub const SIGNAL_TOOL: &str = "loopstack_signal";
/// The tool that decides on an agent's tool calls that wait for a person:
/// `{run_id, approve, deny, reason}`.
pub const DECIDE_TOOL: &str = "loopstack_decide";
/// The start of the names of the server's own tools: a workflow whose name starts
/// with it is not offered, so no workflow's tool can be taken for one of them.
pub const RESERVED_PREFIX: &str = "loopstack_";
/// The property of a workflow tool's arguments that holds the run's input when the
/// input's schema is not an object (an agent's prompt, say).
pub const INPUT_PROPERTY: &str = "input";

/// What the server tells a client in its handshake.
pub(super) const INSTRUCTIONS: &str = "Each workflow tool starts a run and answers with its output when it ends. \
     A run that waits answers with its run_id and what it waits for: answer a signal with loopstack_signal, \
     and tool calls waiting for approval with loopstack_decide; each answers like the workflow's tool.";

/// The names of the workflows offered as tools.
pub(super) fn served(runtime: &Runtime) -> Vec<&'static str> {
    runtime.workflows().into_iter().filter(|name| offered(name)).collect()
}

/// Whether a workflow of this name is offered as a tool.
fn offered(name: &str) -> bool {
    loopstack_core::is_valid_tool_name(name) && !name.starts_with(RESERVED_PREFIX)
}

/// Whether a schema describes a JSON object, and only objects.
fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// Whether a schema accepts `null` (`()`, an `Option`, any value).
fn takes_null(schema: &Value) -> bool {
    match schema {
        Value::Bool(b) => *b,
        Value::Object(map) => match map.get("type") {
            Some(Value::String(t)) => t == "null",
            Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
            None => ["anyOf", "oneOf"].iter().all(|k| match map.get(*k) {
                Some(Value::Array(options)) => options.iter().any(takes_null),
                _ => true,
            }),
            _ => false,
        },
        _ => false,
    }
}

/// A workflow tool's input schema, and whether its input is wrapped in
/// [`INPUT_PROPERTY`].
fn input_schema(runtime: &Runtime, workflow: &str) -> (Map<String, Value>, bool) {
    let schema = runtime.input_schema_of(workflow);
    if let Some(Value::Object(map)) = &schema
        && is_object_schema(&Value::Object(map.clone()))
    {
        return (map.clone(), false);
    }
    let inner = schema.unwrap_or_else(|| json!({ "description": "The run's input, as JSON." }));
    let required: Vec<&str> = if takes_null(&inner) { Vec::new() } else { vec![INPUT_PROPERTY] };
    let wrapped = json!({
        "type": "object",
        "properties": { INPUT_PROPERTY: inner },
        "required": required,
        "additionalProperties": false,
    });
    let Value::Object(map) = wrapped else { unreachable!("an object literal") };
    (map, true)
}

/// The schema of every answer's structured content (a workflow's, and
/// [`SIGNAL_TOOL`]'s and [`DECIDE_TOOL`]'s, which answer in the same shape): the
/// run, and its output, what it waits for, or its error. A refusal has none: it is
/// a tool error.
fn answer_schema() -> Arc<Map<String, Value>> {
    static SCHEMA: std::sync::OnceLock<Arc<Map<String, Value>>> = std::sync::OnceLock::new();
    let schema = SCHEMA.get_or_init(|| {
        Arc::new(object(json!({
            "type": "object",
            "properties": {
                "run_id": { "type": "string", "description": "The run's id." },
                "workflow": { "type": "string", "description": "The run's workflow (or agent)." },
                "status": {
                    "enum": ["completed", "waiting", "failed", "cancelled", "stopped", "running"],
                    "description": "Where the run stands: `running` when another worker drives it.",
                },
                "output": {
                    "description": "A completed run's output: an agent's answer (text, or the typed answer), a \
                                    workflow's published result, else its final state.",
                },
                "place": { "type": "string", "description": "Where a waiting run waits." },
                "waits_for": {
                    "type": "object",
                    "description": "What a waiting run waits for: signals with their payload's schema, tool calls \
                                    waiting for a decision, a timer.",
                },
                "error": { "description": "Why the run failed, or an agent ended without an answer." },
            },
            "required": ["run_id", "workflow", "status"],
        })))
    });
    Arc::clone(schema)
}

/// The server's tools: one per offered workflow, then [`SIGNAL_TOOL`] and [`DECIDE_TOOL`].
pub(super) fn list(runtime: &Runtime) -> Vec<Tool> {
    let mut tools: Vec<Tool> = served(runtime)
        .into_iter()
        .filter_map(|name| runtime.definition_of(name).map(|def| (name, def)))
        .map(|(name, def)| {
            let mut description = def
                .description()
                .map_or_else(|| format!("Runs the workflow `{name}` and answers with its output."), str::to_owned);
            if def.transitions().iter().any(|t| t.waits()) {
                let how = if loopstack_llm::agent::takes_decisions(def) {
                    format!("{DECIDE_TOOL} (tool calls waiting for approval) or {SIGNAL_TOOL}")
                } else {
                    SIGNAL_TOOL.to_owned()
                };
                description.push_str(&format!(
                    "\n\nA run may wait: the result then has its run_id and what it waits for; answer with {how}."
                ));
            }
            let (schema, _) = input_schema(runtime, name);
            Tool::new(name, description, Arc::new(schema))
        })
        .collect();
    tools.push(Tool::new(
        SIGNAL_TOOL,
        "Sends a signal to a run that waits for it (as a workflow's result names them, with the payload's \
         schema), drives the run on, and answers with its output when it ends or with what it waits for next.",
        Arc::new(object(json!({
            "type": "object",
            "properties": {
                "run_id": { "type": "string", "description": "The waiting run's id." },
                "signal": { "type": "string", "description": "The signal (a wait transition's name) the run waits for." },
                "payload": { "description": "The signal's payload, fitting its schema; null when it takes none." },
            },
            "required": ["run_id", "signal"],
            "additionalProperties": false,
        }))),
    ));
    let calls = json!({
        "anyOf": [
            { "type": "array", "items": { "type": "string" } },
            { "const": "all" },
        ],
    });
    let mut approve = calls.clone();
    approve["description"] = json!("The ids of the calls to let run, or \"all\" for every waiting call not denied.");
    let mut deny = calls;
    deny["description"] = json!("The ids of the calls to refuse, or \"all\" for every waiting call not approved.");
    tools.push(Tool::new(
        DECIDE_TOOL,
        "Decides on an agent's tool calls that wait for a person's approval (as a result lists them: id, tool, \
         arguments): approves some, denies others with a reason the model reads; calls not named keep waiting. \
         For at-most-once calls whose outcome is unknown (their process died mid-call), `results` gives a call's \
         result (it is not run again), `approve` runs it again. Drives the run on and answers like the agent's tool.",
        Arc::new(object(json!({
            "type": "object",
            "properties": {
                "run_id": { "type": "string", "description": "The waiting run's id." },
                "approve": approve,
                "deny": deny,
                "reason": { "type": "string", "description": "Why the denied calls are refused, for the model to read." },
                "results": {
                    "type": "object",
                    "additionalProperties": { "type": "string" },
                    "description": "By call id, what a call did, for the model to read as its result; the call is \
                                    not run (for calls whose outcome is unknown).",
                },
            },
            "required": ["run_id"],
            "additionalProperties": false,
        }))),
    ));
    // Every tool answers in the same shape.
    for tool in &mut tools {
        tool.output_schema = Some(answer_schema());
    }
    tools
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Calls named in `approve` or `deny`: some, or all that wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Calls {
    Some(Vec<String>),
    All,
}

/// The arguments of [`DECIDE_TOOL`]: the run, the calls approved and denied, the
/// reason of the denials, and the results given, by call id.
pub(super) type Decide = (RunId, Calls, Calls, Option<String>, Vec<(String, String)>);

/// A call of one of the server's tools, its arguments read.
pub(super) enum Call {
    /// Start a run of `workflow` with `input`.
    Start { workflow: &'static str, input: Result<Value, String> },
    /// Send `signal` with `payload` to `run`.
    Signal(Result<(RunId, String, Value), String>),
    /// Decide on `run`'s waiting calls.
    Decide(Result<Decide, String>),
}

impl Call {
    /// The call of tool `name`, or `None` when there is no such tool. Arguments
    /// that do not read are kept as the error the call answers with.
    pub(super) fn parse(runtime: &Runtime, name: &str, mut arguments: Map<String, Value>) -> Option<Self> {
        match name {
            SIGNAL_TOOL => Some(Self::Signal((|| {
                let run = run_id(&arguments)?;
                let signal = match arguments.get("signal") {
                    Some(Value::String(s)) if !s.is_empty() => s.clone(),
                    _ => return Err("`signal` must be the name of a signal the run waits for".to_owned()),
                };
                let payload = arguments.remove("payload").unwrap_or(Value::Null);
                Ok((run, signal, payload))
            })())),
            DECIDE_TOOL => Some(Self::Decide((|| {
                let run = run_id(&arguments)?;
                let approve = calls(&arguments, "approve")?;
                let deny = calls(&arguments, "deny")?;
                let reason = match arguments.get("reason") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(r)) => Some(r.clone()),
                    Some(_) => return Err("`reason` must be a string".to_owned()),
                };
                let results = match arguments.get("results") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Object(map)) => map
                        .iter()
                        .map(|(id, text)| match text {
                            Value::String(text) => Ok((id.clone(), text.clone())),
                            _ => Err(format!("`results` maps call ids to text; `{id}`'s result is not a string")),
                        })
                        .collect::<Result<_, _>>()?,
                    Some(_) => return Err("`results` must be an object of call ids to results".to_owned()),
                };
                Ok((run, approve, deny, reason, results))
            })())),
            _ => {
                let workflow = served(runtime).into_iter().find(|w| *w == name)?;
                let (_, wrapped) = input_schema(runtime, workflow);
                let input = if wrapped {
                    let unknown: Vec<&String> = arguments.keys().filter(|k| *k != INPUT_PROPERTY).collect();
                    if unknown.is_empty() {
                        Ok(arguments.remove(INPUT_PROPERTY).unwrap_or(Value::Null))
                    } else {
                        Err(format!(
                            "the arguments of `{workflow}` are {{\"{INPUT_PROPERTY}\": ...}}, the run's input; \
                             not {}",
                            unknown.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                        ))
                    }
                } else {
                    Ok(Value::Object(arguments))
                };
                Some(Self::Start { workflow, input })
            }
        }
    }

    /// Does what the call asks and answers with the run as it then stands, or with
    /// why it could not.
    pub(super) async fn run(self, runtime: &Runtime) -> CallToolResult {
        match self {
            Self::Start { workflow, input } => match input {
                Ok(input) => answer::start(runtime, workflow, input).await,
                Err(why) => answer::refused(runtime, &why),
            },
            Self::Signal(Ok((run, signal, payload))) => answer::signal(runtime, run, &signal, payload).await,
            Self::Decide(Ok((run, approve, deny, reason, results))) => {
                answer::decide(runtime, run, approve, deny, reason.as_deref(), results).await
            }
            Self::Signal(Err(why)) | Self::Decide(Err(why)) => answer::refused(runtime, &why),
        }
    }
}

fn run_id(arguments: &Map<String, Value>) -> Result<RunId, String> {
    match arguments.get("run_id") {
        Some(Value::String(id)) => id.parse().map_err(|e| format!("`run_id` `{id}` is not a run id: {e}")),
        _ => Err("`run_id` must be the id of a run (a string, as a result gave it)".to_owned()),
    }
}

fn calls(arguments: &Map<String, Value>, key: &str) -> Result<Calls, String> {
    match arguments.get(key) {
        None | Some(Value::Null) => Ok(Calls::Some(Vec::new())),
        Some(Value::String(all)) if all == "all" => Ok(Calls::All),
        Some(Value::Array(ids)) => ids
            .iter()
            .map(|id| id.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(Calls::Some)
            .ok_or_else(|| format!("`{key}` must list call ids (strings), or be \"all\"")),
        Some(other) => Err(format!(
            "`{key}` must list call ids or be \"all\", not {}",
            Cow::<str>::Owned(serde_json::to_string(other).unwrap_or_default())
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_that_are_not_objects_are_wrapped() {
        assert!(takes_null(&json!({"type": "null"})));
        assert!(takes_null(&json!({"type": ["string", "null"]})));
        assert!(takes_null(&json!({"anyOf": [{"type": "string"}, {"type": "null"}]})));
        assert!(takes_null(&json!({})));
        assert!(!takes_null(&json!({"type": "string"})));
        assert!(is_object_schema(&json!({"type": "object", "properties": {}})));
        assert!(!is_object_schema(&json!({"type": ["object", "null"]})));
        assert!(offered("review") && !offered("loopstack_signal") && !offered("a b"));
    }

    #[test]
    fn decisions_name_calls_or_all() {
        let args = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(
            calls(&args(json!({"approve": ["c1", "c2"]})), "approve"),
            Ok(Calls::Some(vec!["c1".into(), "c2".into()]))
        );
        assert_eq!(calls(&args(json!({"deny": "all"})), "deny"), Ok(Calls::All));
        assert_eq!(calls(&args(json!({})), "deny"), Ok(Calls::Some(Vec::new())));
        assert!(calls(&args(json!({"deny": 3})), "deny").unwrap_err().contains("call ids"));
        assert!(run_id(&args(json!({"run_id": "nope"}))).unwrap_err().contains("not a run id"));
    }
}
