//! What a call of the server's tools does, and how its answer is written: the run
//! as it stands after the drive, or why nothing was done.

use loopstack_core::serde_json::{Value, json};
use loopstack_core::{RunError, RunId, RunOutcome, RunRecord, RunStatus, Runtime, StoreError};
use rmcp::model::{CallToolResult, ContentBlock};

use super::tools::Calls;
use super::{DECIDE_TOOL, SIGNAL_TOOL};
use crate::views::{Answer, Waits};

/// A tool error that says why the call was not done; nothing changed.
pub(super) fn refused(runtime: &Runtime, why: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(runtime.secrets().redact(why).into_owned())])
}

/// Starts a run of `workflow` and drives it to its end or first wait.
pub(super) async fn start(runtime: &Runtime, workflow: &str, input: Value) -> CallToolResult {
    let run_id = match runtime.submit_by_name(workflow, input).await {
        Ok(id) => id,
        Err(e) => return refused(runtime, &e.to_string()),
    };
    let driven = crate::views::detached(runtime, move |rt| async move { rt.drive_by_name(run_id).await }).await;
    stands(runtime, run_id, driven).await
}

/// Sends `signal` to a run that waits for it and drives it on.
pub(super) async fn signal(runtime: &Runtime, run_id: RunId, signal: &str, payload: Value) -> CallToolResult {
    let (record, waits) = match waits_of(runtime, run_id).await {
        Ok(found) => found,
        Err(why) => return refused(runtime, &why),
    };
    if !waits.as_ref().is_some_and(|w| w.signals.iter().any(|t| t.name == signal)) {
        let why = standing(&record, waits.as_ref());
        return refused(runtime, &format!("run {run_id} does not wait for the signal `{signal}`: {why}"));
    }
    let signal = signal.to_owned();
    let driven =
        crate::views::detached(runtime, move |rt| async move { rt.signal_by_name(run_id, &signal, payload).await })
            .await;
    stands(runtime, run_id, driven).await
}

/// Decides on the waiting tool calls of an agent's run and drives it on.
pub(super) async fn decide(
    runtime: &Runtime,
    run_id: RunId,
    approve: Calls,
    deny: Calls,
    reason: Option<&str>,
    results: Vec<(String, String)>,
) -> CallToolResult {
    let (record, waits) = match waits_of(runtime, run_id).await {
        Ok(found) => found,
        Err(why) => return refused(runtime, &why),
    };
    let pending = match waits.as_ref().and_then(|w| w.pending.as_ref()) {
        Some(pending) if !pending.is_empty() => pending,
        _ => {
            let why = standing(&record, waits.as_ref());
            return refused(runtime, &format!("run {run_id} does not wait for a decision on tool calls: {why}"));
        }
    };
    let waiting: Vec<String> = pending.iter().map(|p| format!("{} ({})", p.call_id, p.name)).collect();
    let named = |calls: &Calls| match calls {
        Calls::Some(ids) => ids.clone(),
        Calls::All => Vec::new(),
    };
    let (approved, denied) = (named(&approve), named(&deny));
    let answered: Vec<String> = results.iter().map(|(id, _)| id.clone()).collect();
    for id in approved.iter().chain(&denied).chain(&answered) {
        if !pending.iter().any(|p| p.call_id == *id) {
            return refused(
                runtime,
                &format!(
                    "call `{id}` does not wait for a decision on run {run_id}; the calls that wait: {}",
                    waiting.join(", ")
                ),
            );
        }
        if [approved.contains(id), denied.contains(id), answered.contains(id)].iter().filter(|b| **b).count() > 1 {
            return refused(runtime, &format!("call `{id}` is named twice among `approve`, `deny` and `results`"));
        }
    }
    let rest = |taken: &[String]| -> Vec<String> {
        pending.iter().map(|p| p.call_id.clone()).filter(|id| !taken.contains(id) && !answered.contains(id)).collect()
    };
    let (approved, denied) = match (&approve, &deny) {
        (Calls::All, Calls::All) => return refused(runtime, "`approve` and `deny` cannot both be \"all\""),
        (Calls::All, _) => (rest(&denied), denied),
        (_, Calls::All) => (approved.clone(), rest(&approved)),
        _ => (approved, denied),
    };
    if approved.is_empty() && denied.is_empty() && results.is_empty() {
        return refused(
            runtime,
            &format!(
                "name the calls to approve or deny (their ids, or \"all\"); the calls that wait: {}",
                waiting.join(", ")
            ),
        );
    }
    let reason = reason.map(str::trim).unwrap_or_default();
    if !denied.is_empty() && reason.is_empty() {
        return refused(runtime, "a denial needs a `reason`: the model reads it to know why its call was refused");
    }
    let decisions = loopstack_llm::ToolDecisions::new(
        approved
            .iter()
            .map(loopstack_llm::ToolDecision::approve)
            .chain(denied.iter().map(|id| loopstack_llm::ToolDecision::deny(id, reason)))
            .chain(results.iter().map(|(id, text)| loopstack_llm::ToolDecision::result(id, text))),
    );
    let driven = crate::views::detached(runtime, move |rt| async move {
        loopstack_llm::decide_by_name(&rt, run_id, &decisions).await
    })
    .await;
    stands(runtime, run_id, driven).await
}

/// The run and what it waits for, or why it cannot be read (as the error's text).
async fn waits_of(runtime: &Runtime, run_id: RunId) -> Result<(RunRecord, Option<Waits>), String> {
    let record = runtime.store().load_run(run_id).await.map_err(|e| e.to_string())?;
    let waits = Waits::of(runtime, &record).map_err(|e| e.to_string())?;
    Ok((record, waits))
}

/// How a run that does not take what was sent stands, in words.
fn standing(record: &RunRecord, waits: Option<&Waits>) -> String {
    if record.status != RunStatus::Waiting {
        return format!("it is {} at {}", record.status.as_str(), record.place);
    }
    let Some(waits) = waits else {
        return format!("it is a run of workflow `{}`, which this server does not serve", record.workflow);
    };
    let mut takes = Vec::new();
    if waits.pending.as_ref().is_some_and(|p| !p.is_empty()) {
        takes.push(format!("decisions on its tool calls ({DECIDE_TOOL})"));
    }
    let signals: Vec<&str> =
        waits.signals.iter().map(|t| t.name).filter(|n| *n != loopstack_llm::agent::DECIDE_TOOLS).collect();
    if !signals.is_empty() {
        takes.push(format!("the signal {} ({SIGNAL_TOOL})", signals.join(", ")));
    }
    if !waits.timers.is_empty() {
        takes.push("a timer".to_owned());
    }
    format!(
        "it waits at {} for {}",
        record.place,
        if takes.is_empty() { "nothing known".to_owned() } else { takes.join(", or ") }
    )
}

/// The answer after a drive: the run's output, what it waits for, or its failure;
/// a tool error when the drive was refused and nothing changed.
async fn stands(runtime: &Runtime, run_id: RunId, driven: Result<RunOutcome, RunError>) -> CallToolResult {
    let record = match runtime.store().load_run(run_id).await {
        Ok(record) => record,
        Err(e) => return refused(runtime, &e.to_string()),
    };
    let elsewhere = matches!(
        &driven,
        Ok(RunOutcome::Queued { .. })
            | Err(RunError::InvalidStatus { .. } | RunError::Store(StoreError::Leased { .. }))
    );
    if let Err(e) = &driven
        && !elsewhere
        && !matches!(record.status, RunStatus::Failed | RunStatus::Cancelled | RunStatus::Stopped)
    {
        return refused(runtime, &e.to_string());
    }
    let mut structured = json!({ "run_id": run_id, "workflow": record.workflow, "status": record.status.as_str() });
    let (text, is_error) = match record.status {
        RunStatus::Completed => {
            let (output, is_error) = crate::views::output(runtime, &record);
            let text = crate::views::text(&output);
            structured[if is_error { "error" } else { "output" }] = output;
            (text, is_error)
        }
        RunStatus::Waiting => match Waits::of(runtime, &record) {
            Ok(Some(waits)) => {
                let mut text = format!("run {run_id} waits at {}.\n", record.place);
                crate::views::waits_text(&mut text, run_id, &waits, Answer::Mcp);
                structured["place"] = json!(record.place);
                structured["waits_for"] = waits.json();
                (text, false)
            }
            Ok(None) => (format!("run {run_id} waits at {}", record.place), false),
            Err(e) => return refused(runtime, &e.to_string()),
        },
        RunStatus::Failed | RunStatus::Cancelled | RunStatus::Stopped => {
            let error = record.error.clone().unwrap_or_else(|| "no reason was recorded".to_owned());
            structured["error"] = json!(error);
            (format!("run {run_id} {}: {error}", record.status.as_str()), true)
        }
        _ => {
            structured["status"] = json!("running");
            (format!("run {run_id} is driven by another worker; it answers nothing here"), false)
        }
    };
    runtime.secrets().redact_value(&mut structured);
    let text = runtime.secrets().redact(&text).into_owned();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result.is_error = Some(is_error);
    result
}
