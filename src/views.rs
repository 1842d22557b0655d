//! How the command line (`--json`) and the HTTP API write runs, steps and
//! documents as JSON: one shape for both.

use loopstack_core::serde_json::{self, Value, json};
use loopstack_core::{Document, RunSummary, StepRecord};

/// A run's row: id, workflow, status, place, step, parent, times, error.
pub(crate) fn run(run: &RunSummary) -> Value {
    json!({
        "run_id": run.run_id,
        "workflow": run.workflow,
        "status": run.status.as_str(),
        "place": run.place,
        "step": run.step,
        "parent": run.parent,
        "created_at": run.created_at.to_string(),
        "updated_at": run.updated_at.to_string(),
        "error": run.error,
    })
}

/// One step of a run's history.
pub(crate) fn step(s: &StepRecord) -> Value {
    json!({ "step": s.step, "transition": s.transition, "from": s.from, "to": s.to, "at": s.at.to_string() })
}

/// A document version with its content as JSON.
pub(crate) fn document(d: &Document) -> Value {
    json!({
        "seq": d.seq, "type": d.doc_type, "key": d.key, "version": d.version, "tags": d.tags,
        "step": d.step, "metadata": d.metadata, "content": d.value().unwrap_or(Value::Null),
    })
}

/// Stored JSON (a state, a payload) as a value; `null` for text that is not JSON,
/// which the stores never hold.
pub(crate) fn raw(raw: &serde_json::value::RawValue) -> Value {
    serde_json::from_str(raw.get()).unwrap_or(Value::Null)
}
