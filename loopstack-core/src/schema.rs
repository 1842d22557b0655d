//! The JSON Schemas that wait transitions publish for their payloads, compiled once
//! per workflow and checked against the payloads sent by name.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

use crate::workflow::Definition;

/// A workflow's payload schemas, compiled on first use.
#[derive(Default)]
pub(crate) struct PayloadSchemas {
    compiled: OnceLock<Compiled>,
}

struct Compiled {
    schemas: boon::Schemas,
    /// By wait transition: its compiled schema.
    by_signal: HashMap<&'static str, boon::SchemaIndex>,
}

/// Schemas are never fetched: a `$ref` that leaves the schema finds nothing.
struct NoLoader;

impl boon::UrlLoader for NoLoader {
    fn load(&self, url: &str) -> Result<Value, Box<dyn std::error::Error>> {
        Err(format!("`{url}` is not loaded: a payload schema refers only to itself").into())
    }
}

impl PayloadSchemas {
    fn compiled(&self, def: &'static Definition) -> &Compiled {
        self.compiled.get_or_init(|| {
            let mut schemas = boon::Schemas::new();
            let mut by_signal = HashMap::new();
            for t in def.transitions().iter().filter(|t| t.wait) {
                let Some(schema) = t.payload_schema.map(|f| f()) else { continue };
                let mut compiler = boon::Compiler::new();
                compiler.use_loader(Box::new(NoLoader));
                let url = format!("loopstack:///{}/{}.json", def.name(), t.name);
                let compiled = match compiler.add_resource(&url, schema) {
                    Ok(()) => compiler.compile(&url, &mut schemas),
                    Err(e) => Err(e),
                };
                match compiled {
                    Ok(index) => {
                        by_signal.insert(t.name, index);
                    }
                    // The schema is the workflow's own; one that does not compile is
                    // published as it is, and payloads are read by their type alone.
                    Err(e) => tracing::warn!(workflow = def.name(), signal = t.name, error = %e, "a payload schema does not compile"),
                }
            }
            Compiled { schemas, by_signal }
        })
    }

    /// Checks `payload` against the schema of wait transition `signal` of `def`:
    /// the reason it does not fit, naming where, if it does not.
    pub(crate) fn check(&self, def: &'static Definition, signal: &str, payload: &Value) -> Result<(), String> {
        let compiled = self.compiled(def);
        let Some(&index) = compiled.by_signal.get(signal) else { return Ok(()) };
        compiled.schemas.validate(payload, index).map_err(|e| {
            let mut reasons = Vec::new();
            collect(&e, &mut reasons);
            format!("it does not fit the signal's JSON Schema: {}", reasons.join("; "))
        })
    }
}

/// The leaf errors of a validation error: where, and what.
fn collect(e: &boon::ValidationError<'_, '_>, out: &mut Vec<String>) {
    if e.causes.is_empty() {
        let at = e.instance_location.to_string();
        let at = if at.is_empty() { "the payload".to_owned() } else { format!("at `{at}`") };
        out.push(format!("{at}: {}", e.kind));
    }
    for cause in &e.causes {
        collect(cause, out);
    }
}
