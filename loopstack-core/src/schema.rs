//! JSON Schemas compiled once and checked against values: the payload schemas
//! that wait transitions publish (checked against the payloads sent by name), and
//! [`CompiledSchema`] for any other (an MCP tool's output schema).

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

use crate::workflow::Definition;

/// A JSON Schema compiled once, to check values against. Nothing is fetched: a
/// `$ref` that leaves the schema finds nothing, and the schema does not compile.
///
/// ```
/// use loopstack_core::schema::CompiledSchema;
/// use serde_json::json;
///
/// let schema = json!({"type": "object", "properties": {"temp": {"type": "number"}}, "required": ["temp"]});
/// let schema = CompiledSchema::compile(schema).unwrap();
/// assert!(schema.check(&json!({"temp": 14}), "the result").is_ok());
/// let why = schema.check(&json!({"temp": "warm"}), "the result").unwrap_err();
/// assert!(why.starts_with("at `/temp`: "), "{why}");
/// ```
pub struct CompiledSchema {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
}

impl std::fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledSchema").finish_non_exhaustive()
    }
}

/// Schemas are never fetched: a `$ref` that leaves the schema finds nothing.
struct NoLoader;

impl boon::UrlLoader for NoLoader {
    fn load(&self, url: &str) -> Result<Value, Box<dyn std::error::Error>> {
        Err(format!("`{url}` is not loaded: a schema here refers only to itself").into())
    }
}

impl CompiledSchema {
    /// `schema` compiled, or why it does not compile.
    pub fn compile(schema: Value) -> Result<Self, String> {
        let mut schemas = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        compiler.use_loader(Box::new(NoLoader));
        let url = "loopstack:///schema.json";
        let compiled = match compiler.add_resource(url, schema) {
            Ok(()) => compiler.compile(url, &mut schemas),
            Err(e) => Err(e),
        };
        compiled.map(|index| Self { schemas, index }).map_err(|e| e.to_string())
    }

    /// `Ok` when `value` fits; else where and why it does not, each place as
    /// ``at `/path`: reason`` (`whole`, such as "the payload", for the value
    /// itself), separated by `; `.
    pub fn check(&self, value: &Value, whole: &str) -> Result<(), String> {
        self.schemas.validate(value, self.index).map_err(|e| {
            let mut reasons = Vec::new();
            collect(&e, whole, &mut reasons);
            reasons.join("; ")
        })
    }
}

/// The leaf errors of a validation error: where, and what.
fn collect(e: &boon::ValidationError<'_, '_>, whole: &str, out: &mut Vec<String>) {
    if e.causes.is_empty() {
        let at = e.instance_location.to_string();
        let at = if at.is_empty() { whole.to_owned() } else { format!("at `{at}`") };
        out.push(format!("{at}: {}", e.kind));
    }
    for cause in &e.causes {
        collect(cause, whole, out);
    }
}

/// A workflow's payload schemas, compiled on first use.
#[derive(Default)]
pub(crate) struct PayloadSchemas {
    /// By wait transition: its compiled schema.
    compiled: OnceLock<HashMap<&'static str, CompiledSchema>>,
}

impl PayloadSchemas {
    fn compiled(&self, def: &'static Definition) -> &HashMap<&'static str, CompiledSchema> {
        self.compiled.get_or_init(|| {
            let mut by_signal = HashMap::new();
            for t in def.transitions().iter().filter(|t| t.wait) {
                let Some(schema) = t.payload_schema.map(|f| f()) else { continue };
                match CompiledSchema::compile(schema) {
                    Ok(compiled) => {
                        by_signal.insert(t.name, compiled);
                    }
                    // The schema is the workflow's own; one that does not compile is
                    // published as it is, and payloads are read by their type alone.
                    Err(e) => tracing::warn!(workflow = def.name(), signal = t.name, error = %e, "a payload schema does not compile"),
                }
            }
            by_signal
        })
    }

    /// Checks `payload` against the schema of wait transition `signal` of `def`:
    /// the reason it does not fit, naming where, if it does not.
    pub(crate) fn check(&self, def: &'static Definition, signal: &str, payload: &Value) -> Result<(), String> {
        let Some(schema) = self.compiled(def).get(signal) else { return Ok(()) };
        schema
            .check(payload, "the payload")
            .map_err(|reasons| format!("it does not fit the signal's JSON Schema: {reasons}"))
    }
}
