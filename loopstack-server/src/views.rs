//! How the command line (`--json`), the HTTP API and the MCP server write runs,
//! steps and documents as JSON (one shape for all), what a run waits for in words,
//! and how a drive is kept from being dropped halfway.

use std::fmt::Write as _;

use loopstack_core::serde_json::{self, Value, json};
use loopstack_core::{Document, RunSummary, StepRecord};

/// A run's row: id, workflow and its version, status, place, step, parent, times,
/// error, holder, labels.
pub fn run(run: &RunSummary) -> Value {
    let holder = Holder::of(run, loopstack_core::Timestamp::now());
    json!({
        "run_id": run.run_id,
        "workflow": run.workflow,
        "version": run.version,
        "status": run.status.as_str(),
        "place": run.place,
        "step": run.step,
        "parent": run.parent,
        "forked_from": run.forked_from.map(|(run_id, step)| json!({ "run_id": run_id, "step": step })),
        "created_at": run.created_at.to_string(),
        "updated_at": run.updated_at.to_string(),
        "error": run.error,
        "holder": holder.as_ref().map(|h| json!({
            "owner": h.owner,
            "since": h.since.to_string(),
            "lease_until": h.until.map(|t| t.to_string()),
        })),
        "stalled": holder.is_some_and(|h| h.stalled),
        "labels": run.labels,
    })
}

/// Who drives a running run: the worker or process named in its lease, until when
/// it holds it, and whether that lease ran out (the holder died or stopped: the run
/// is stalled until a worker takes it over).
#[derive(Debug, Clone, Copy)]
pub struct Holder<'a> {
    pub owner: &'a str,
    /// When it took the run.
    pub since: loopstack_core::Timestamp,
    pub until: Option<loopstack_core::Timestamp>,
    pub stalled: bool,
}

impl<'a> Holder<'a> {
    /// The holder of `run` at `now`, if it is running under a lease.
    pub fn of(run: &'a RunSummary, now: loopstack_core::Timestamp) -> Option<Self> {
        if run.status != loopstack_core::RunStatus::Running {
            return None;
        }
        let owner = run.lease_owner.as_deref()?;
        Some(Self {
            owner,
            since: run.held_since.unwrap_or(run.created_at),
            until: run.lease_until,
            stalled: run.lease_until.is_some_and(|until| until <= now),
        })
    }
}

/// A schedule: its id, workflow, input, when it is due, its policy and its last run.
pub fn schedule(s: &loopstack_core::ScheduleRecord) -> Value {
    use loopstack_core::schedule::Recurrence;
    let (cron, timezone, every_ms) = match &s.recurrence {
        Recurrence::Cron { expr, timezone } => (Some(expr.as_str()), Some(timezone.as_deref().unwrap_or("UTC")), None),
        Recurrence::Every { millis } => (None, None, Some(*millis)),
        _ => (None, None, None),
    };
    json!({
        "id": s.id,
        "workflow": s.workflow,
        "input": raw(&s.input),
        "when": s.recurrence.to_string(),
        "cron": cron,
        "timezone": timezone,
        "every_ms": every_ms,
        "missed": s.missed.as_str(),
        "overlap": s.overlap.as_str(),
        "pending_due": s.pending_due.map(|t| t.to_string()),
        "grace_ms": s.grace_ms,
        "paused": s.paused,
        "next_due": s.next_due.to_string(),
        "last_due": s.last_due.map(|t| t.to_string()),
        "last_run": s.last_run,
        "last_error": s.last_error,
        "created_at": s.created_at.to_string(),
    })
}

/// What a fork's edits changed, from its `loopstack_fork` document
/// ([`ForkRecord`](loopstack_core::ForkRecord)): the latest, for a fork of a fork.
pub fn fork_record(documents: &[std::sync::Arc<Document>]) -> Option<loopstack_core::ForkRecord> {
    documents.iter().rev().find(|d| d.doc_type == loopstack_core::fork::FORK_DOCUMENT).and_then(|d| d.read().ok())
}

/// "forked from RUN at step N", and "with: ..." what its edits changed.
pub fn fork_line(forked_from: (loopstack_core::RunId, u64), record: Option<&loopstack_core::ForkRecord>) -> String {
    let (source, step) = forked_from;
    match record.filter(|r| r.source == source) {
        Some(r) if !r.changes.is_empty() => {
            format!("forked from {source} at step {step} with: {}", r.changes.join(", "))
        }
        _ => format!("forked from {source} at step {step}"),
    }
}

/// A fork's origin and edits, `{"run_id", "step", "text", "changes"}`, for `show
/// --json` and the API; `None` for a run that is no fork.
pub fn fork(
    forked_from: Option<(loopstack_core::RunId, u64)>,
    documents: &[std::sync::Arc<Document>],
) -> Option<Value> {
    let (source, step) = forked_from?;
    let record = fork_record(documents);
    Some(json!({
        "run_id": source,
        "step": step,
        "text": fork_line((source, step), record.as_ref()),
        "changes": record.map(|r| r.changes).unwrap_or_default(),
    }))
}

/// One step of a run's history.
pub fn step(s: &StepRecord) -> Value {
    json!({ "step": s.step, "transition": s.transition, "from": s.from, "to": s.to, "at": s.at.to_string() })
}

/// A takeover of a run: when, from whom (and until when its lease held), by whom.
pub fn takeover(t: &loopstack_core::Takeover) -> Value {
    json!({
        "at": t.at.to_string(), "from": t.from, "lease_until": t.lease_until.to_string(), "by": t.by, "epoch": t.epoch,
    })
}

/// A takeover as a line of a run's history.
pub fn takeover_line(t: &loopstack_core::Takeover) -> String {
    let by = t.by.as_deref().map(|by| format!(" by {by}")).unwrap_or_default();
    format!("taken over{by} from {}, whose lease ran to {}", t.from, t.lease_until)
}

/// A document version with its content as JSON.
pub fn document(d: &Document) -> Value {
    json!({
        "seq": d.seq, "type": d.doc_type, "key": d.key, "version": d.version, "tags": d.tags,
        "step": d.step, "metadata": d.metadata, "content": d.value().unwrap_or(Value::Null),
    })
}

/// Stored JSON (a state, a payload) as a value; `null` for text that is not JSON,
/// which the stores never hold.
pub fn raw(raw: &serde_json::value::RawValue) -> Value {
    serde_json::from_str(raw.get()).unwrap_or(Value::Null)
}

/// What a waiting run waits for, by this build's table of its workflow: the
/// signals its place takes, the tool calls it waits to have decided (a run of an
/// agent, of any name, at `awaiting_approval`), and its timer.
pub struct Waits {
    /// The wait transitions that leave its place.
    pub signals: Vec<&'static loopstack_core::TransitionDef>,
    /// The calls waiting for a person's decision, when it is an agent's run that
    /// waits for them.
    pub pending: Option<Vec<loopstack_llm::PendingCall>>,
    /// Whether those calls are at-most-once calls whose outcome is unknown (the run
    /// waits at `awaiting_outcome`) rather than calls to approve.
    pub outcome_unknown: bool,
    /// The timed transitions that leave its place.
    pub timers: Vec<&'static loopstack_core::TransitionDef>,
    /// When the first of them is due.
    pub wake_at: Option<loopstack_core::Timestamp>,
}

impl Waits {
    /// What `record` waits for; `None` when it does not wait, or its workflow is
    /// not registered here (its table is unknown).
    pub fn of(
        runtime: &loopstack_core::Runtime,
        record: &loopstack_core::RunRecord,
    ) -> Result<Option<Self>, loopstack_core::RunError> {
        if record.status != loopstack_core::RunStatus::Waiting {
            return Ok(None);
        }
        let Some(def) = runtime.definition_of(&record.workflow) else { return Ok(None) };
        let leaving = |t: &&'static loopstack_core::TransitionDef| t.leaves(&record.place);
        Ok(Some(Self {
            signals: def.transitions().iter().filter(|t| t.wait).filter(leaving).collect(),
            pending: loopstack_llm::pending_calls(def, record)?,
            outcome_unknown: is_outcome_place(&record.place),
            timers: def.transitions().iter().filter(|t| t.is_timer()).filter(leaving).collect(),
            wake_at: record.wake_at,
        }))
    }

    /// As JSON: `signals` (name, target place, payload schema and its shape in
    /// words), `pending_calls` (when it waits for decisions) and `timer`.
    pub fn json(&self) -> Value {
        let signals: Vec<Value> = self
            .signals
            .iter()
            .map(|t| {
                let schema = t.payload_schema.map(|f| f());
                let shape = schema.as_ref().map_or_else(|| "null".to_owned(), |s| shape(s, s, 0));
                json!({ "name": t.name, "to": t.to, "payload_schema": schema, "payload": shape })
            })
            .collect();
        let timer = (!self.timers.is_empty()).then(|| {
            let transitions: Vec<Value> = self
                .timers
                .iter()
                .map(|t| {
                    let after_ms = t.after.map(|a| a.as_millis() as u64);
                    json!({ "name": t.name, "to": t.to, "after_ms": after_ms, "after_fn": t.after_fn })
                })
                .collect();
            json!({ "due_at": self.wake_at.map(|t| t.to_string()), "transitions": transitions })
        });
        let mut value = json!({ "signals": signals, "timer": timer });
        if let Some(pending) = &self.pending {
            value["pending_calls"] = json!(pending);
        }
        value
    }
}

/// Who reads what a run waits for, and so how answering it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A person at the command line: `signal RUN NAME PAYLOAD`, `approve RUN`.
    Cli,
    /// An MCP client: the tools `loopstack_signal` and `loopstack_decide`.
    Mcp,
}

/// Whether an agent's run at `place` waits for the outcome of at-most-once calls.
pub fn is_outcome_place(place: &str) -> bool {
    place == loopstack_llm::AgentPlace::AwaitingOutcome.as_str()
}

/// The calls waiting for a decision, one line each, indented; `outcome_unknown`
/// when they are at-most-once calls whose outcome is unknown.
pub fn pending_lines(
    out: &mut String,
    run_id: loopstack_core::RunId,
    pending: &[loopstack_llm::PendingCall],
    outcome_unknown: bool,
    how: Answer,
) {
    if outcome_unknown {
        let hint = match how {
            Answer::Cli => format!(
                "`resolve {run_id} CALL RESULT` gives its result, `approve {run_id} [CALL...]` runs it again, \
                 `deny {run_id} [CALL...] --reason R` answers it as not run"
            ),
            Answer::Mcp => format!(
                "`loopstack_decide` with run_id {run_id} and `results` (the call's result), `approve` (run it \
                 again) or `deny`"
            ),
        };
        let _ = writeln!(
            out,
            "  {} at-most-once tool call(s) stopped mid-call; their outcome is unknown, so they were not run again \
             ({hint}):",
            pending.len()
        );
        for call in pending {
            let _ = writeln!(out, "    {}  {} {}", call.call_id, call.name, call.arguments);
        }
        return;
    }
    let hint = match how {
        Answer::Cli => format!("`approve {run_id} [CALL...]`, `deny {run_id} [CALL...] --reason R`"),
        Answer::Mcp => format!("`loopstack_decide` with run_id {run_id} and the calls to approve or deny"),
    };
    let _ = writeln!(out, "  {} tool call(s) wait for a decision ({hint}):", pending.len());
    for call in pending {
        let _ = writeln!(out, "    {}  {} {}", call.call_id, call.name, call.arguments);
        if let Some(input) = &call.input {
            // A call that ran and asks a person for input: its question and the
            // answer's shape.
            let answer = match how {
                Answer::Cli => format!("`answer {run_id} {} JSON`", call.call_id),
                Answer::Mcp => {
                    "not over MCP yet: the command line's `answer`, or the API's `decide_tools` with `input`".to_owned()
                }
            };
            let shape = shape(&input.schema, &input.schema, 0);
            let _ = writeln!(out, "      asks: {}; answer {shape} ({answer})", input.message);
        }
    }
}

/// What a waiting run waits for, in words: its pending tool calls, each signal
/// with its payload's shape, and its timer.
pub fn waits_text(out: &mut String, run_id: loopstack_core::RunId, waits: &Waits, how: Answer) {
    let _ = writeln!(out, "\nwaits for:");
    if let Some(pending) = waits.pending.as_ref().filter(|p| !p.is_empty()) {
        pending_lines(out, run_id, pending, waits.outcome_unknown, how);
    }
    for t in &waits.signals {
        let payload = match t.payload_schema.map(|f| f()) {
            Some(schema) => format!("payload {}", shape(&schema, &schema, 0)),
            None => "no payload".to_owned(),
        };
        let hint = match how {
            Answer::Cli => format!("`signal {run_id} {} PAYLOAD`", t.name),
            Answer::Mcp => format!("`loopstack_signal` with run_id {run_id}, signal \"{}\" and the payload", t.name),
        };
        let _ = writeln!(out, "  signal {} -> {}, {payload} ({hint})", t.name, t.to);
    }
    if !waits.timers.is_empty() {
        let due = waits.wake_at.map_or_else(|| "(no due time stored)".to_owned(), |at| at.to_string());
        let timers: Vec<String> = waits
            .timers
            .iter()
            .map(|t| {
                // A computed delay is the workflow's to give: its due time is the one stored.
                let after = t.after.map(words).or_else(|| t.after_fn.map(|f| format!("`{f}`"))).unwrap_or_default();
                format!("{} -> {} after {after}", t.name, t.to)
            })
            .collect();
        let _ = writeln!(out, "  a timer, due at {due}: {}", timers.join(", "));
    }
    if waits.signals.is_empty() && waits.timers.is_empty() {
        let _ = writeln!(out, "  nothing this build's table knows of: no signal or timer leaves this place");
    }
}

/// A completed run's output, and whether it is an error (an agent that ended
/// without an answer): an agent's answer, or a workflow's published result.
pub fn output(runtime: &loopstack_core::Runtime, record: &loopstack_core::RunRecord) -> (Value, bool) {
    let state = raw(&record.state);
    let agent = runtime.definition_of(&record.workflow).is_some_and(loopstack_llm::agent::takes_decisions);
    if !agent {
        return (loopstack_llm::dispatch::select_result(state).0, false);
    }
    let answer = loopstack_llm::agent::agent_answer(
        &record.workflow,
        record.status,
        &state,
        record.error.as_deref(),
        runtime.secrets(),
    );
    let value = match answer.content {
        loopstack_core::ToolContent::Text(text) => Value::String(text),
        loopstack_core::ToolContent::Json(value) => value,
    };
    (value, answer.is_error)
}

/// A JSON value's text: a string as it is, anything else as compact JSON.
pub fn text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// A duration as a person says it: `7d`, `1h30m`, `90s`, `500ms`.
pub fn words(duration: std::time::Duration) -> String {
    let ms = duration.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let mut secs = duration.as_secs();
    if secs == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            let _ = write!(out, "{}{unit}", secs / size);
            secs %= size;
        }
    }
    out
}

/// Drives a run in a task of its own: a caller that goes away (an HTTP client, an
/// MCP client that cancels) drops the answer, not the drive halfway.
pub async fn detached<F, Fut>(
    runtime: &loopstack_core::Runtime,
    f: F,
) -> Result<loopstack_core::RunOutcome, loopstack_core::RunError>
where
    F: FnOnce(loopstack_core::Runtime) -> Fut,
    Fut: std::future::Future<Output = Result<loopstack_core::RunOutcome, loopstack_core::RunError>> + Send + 'static,
{
    match tokio::spawn(f(runtime.clone())).await {
        Ok(result) => result,
        Err(join) => Err(loopstack_core::RunError::Store(loopstack_core::StoreError::Backend(
            format!("the drive's task failed: {join}").into(),
        ))),
    }
}

/// A JSON Schema's shape in a line a person reads: `{reviewer: string}`,
/// `{decisions: [{call_id: string, approved: boolean, input?: any, reason?: string | null, result?: string | null}]}`.
/// Optional properties end in `?`; references are followed (`root` holds the
/// definitions), to a depth.
pub fn shape(schema: &Value, root: &Value, depth: usize) -> String {
    if depth > 8 {
        return "...".to_owned();
    }
    let Some(object) = schema.as_object() else {
        return if schema == &Value::Bool(false) { "nothing".to_owned() } else { "any".to_owned() };
    };
    if let Some(target) = object.get("$ref").and_then(Value::as_str) {
        let found = target.strip_prefix('#').and_then(|pointer| root.pointer(pointer));
        return match found {
            Some(found) => shape(found, root, depth + 1),
            None => target.rsplit('/').next().unwrap_or(target).to_owned(),
        };
    }
    if let Some(value) = object.get("const") {
        return value.to_string();
    }
    if let Some(values) = object.get("enum").and_then(Value::as_array) {
        return values.iter().map(Value::to_string).collect::<Vec<_>>().join(" | ");
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = object.get(key).and_then(Value::as_array) {
            return options.iter().map(|o| shape(o, root, depth + 1)).collect::<Vec<_>>().join(" | ");
        }
    }
    let types: Vec<&str> = match object.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ if object.contains_key("properties") => vec!["object"],
        _ => return "any".to_owned(),
    };
    let one = |t: &str| match t {
        "object" => match object.get("properties").and_then(Value::as_object) {
            Some(properties) if !properties.is_empty() => {
                let required: Vec<&str> = object
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                // The required ones first, in their listed order (the fields' order,
                // which a JSON object's keys may not keep), then the optional ones.
                let names = required
                    .iter()
                    .copied()
                    .filter(|name| properties.contains_key(*name))
                    .chain(properties.keys().map(String::as_str).filter(|name| !required.contains(name)));
                let fields: Vec<String> = names
                    .map(|name| {
                        let optional = if required.contains(&name) { "" } else { "?" };
                        format!("{name}{optional}: {}", shape(&properties[name], root, depth + 1))
                    })
                    .collect();
                format!("{{{}}}", fields.join(", "))
            }
            _ => "object".to_owned(),
        },
        "array" => match object.get("items") {
            Some(items) => format!("[{}]", shape(items, root, depth + 1)),
            None => "array".to_owned(),
        },
        other => other.to_owned(),
    };
    types.into_iter().map(one).collect::<Vec<_>>().join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_a_person_says_them() {
        use std::time::Duration;
        assert_eq!(words(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(words(Duration::from_secs(5_400)), "1h30m");
        assert_eq!(words(Duration::from_millis(1_500)), "1500ms");
        assert_eq!(words(Duration::ZERO), "0s");
    }

    #[test]
    fn a_timer_whose_delay_the_workflow_gives_is_named_by_its_method() {
        use loopstack_core::{Definition, END, START, Timestamp, TransitionDef};
        static TABLE: Definition = Definition::new(
            "incidents",
            &[START, "open", END],
            &[
                TransitionDef::new("open", &[START], "open"),
                TransitionDef::new("escalate", &["open"], END).after_fn("escalation"),
                TransitionDef::new("expire", &["open"], END).after(std::time::Duration::from_secs(86_400)),
            ],
        );
        let waits = Waits {
            signals: Vec::new(),
            pending: None,
            outcome_unknown: false,
            timers: TABLE.transitions()[1..].iter().collect(),
            wake_at: Some(Timestamp::from_millis(0)),
        };
        let timer = &waits.json()["timer"]["transitions"];
        assert_eq!(timer[0], json!({"name": "escalate", "to": "end", "after_ms": null, "after_fn": "escalation"}));
        assert_eq!(timer[1], json!({"name": "expire", "to": "end", "after_ms": 86_400_000, "after_fn": null}));
        let mut text = String::new();
        waits_text(&mut text, loopstack_core::RunId::new(), &waits, Answer::Cli);
        assert!(text.contains(": escalate -> end after `escalation`, expire -> end after 1d\n"), "{text}");
    }

    #[test]
    fn a_schema_reads_as_its_shape() {
        let agent =
            loopstack_llm::Agent::new(loopstack_llm::ScriptedModel::new(), "m", loopstack_core::ToolRegistry::new());
        let table = loopstack_core::Workflow::definition(&agent);
        let decide = table.transitions().iter().find(|t| t.name == loopstack_llm::agent::DECIDE_TOOLS).unwrap();
        let decisions = (decide.payload_schema.unwrap())();
        assert_eq!(
            shape(&decisions, &decisions, 0),
            "{decisions: [{call_id: string, approved: boolean, input?: any, reason?: string | null, result?: string | null}]}"
        );
        let schema = json!({"type": "object", "properties": {"mode": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
                            "required": ["mode"]});
        assert_eq!(shape(&schema, &schema, 0), r#"{mode: "a" | "b", n?: integer}"#);
        assert_eq!(shape(&json!(true), &json!(true), 0), "any");
        assert_eq!(shape(&json!({"type": "object"}), &json!({}), 0), "object");
    }
}
