//! The runs' endpoints: workflows, list, start, show, pending calls, checkpoints,
//! documents, signal, resume, fork, retry and cancel.

use super::*;

pub(super) async fn workflows(State(app): State<App>) -> Response {
    let list: Vec<Value> = app
        .runtime
        .workflows()
        .into_iter()
        .filter_map(|name| app.runtime.definition_of(name))
        .map(|def| {
            let input_schema = app.runtime.input_schema_of(def.name());
            let signals: Vec<Value> = def
                .transitions()
                .iter()
                .filter(|t| t.wait)
                .map(|t| json!({ "name": t.name, "from": t.from, "to": t.to, "payload_schema": t.payload_schema.map(|f| f()) }))
                .collect();
            let transitions: Vec<Value> = def
                .transitions()
                .iter()
                .map(|t| {
                    json!({ "name": t.name, "from": t.from, "to": t.to, "guard": t.guard, "wait": t.wait,
                            "priority": t.priority, "after_ms": t.after.map(|a| a.as_millis() as u64),
                            "after_fn": t.after_fn })
                })
                .collect();
            json!({ "name": def.name(), "version": def.version(), "migrates_from": def.migrates_from(),
                    "places": def.places(), "transitions": transitions, "signals": signals,
                    "input_schema": input_schema, "mermaid": def.mermaid() })
        })
        .collect();
    ok(&app, StatusCode::OK, json!({ "workflows": list }))
}

#[derive(serde::Deserialize)]
pub(super) struct ListParams {
    workflow: Option<String>,
    status: Option<String>,
    place: Option<String>,
    parent: Option<RunId>,
    limit: Option<u32>,
    before: Option<RunId>,
}

pub(super) async fn list_runs(State(app): State<App>, QueryJson(params): QueryJson<ListParams>) -> Response {
    let mut query = RunQuery::new().limit(params.limit.unwrap_or(50).clamp(1, 500));
    if let Some(w) = params.workflow {
        query = query.workflow(w);
    }
    if let Some(s) = params.status {
        match s.parse::<RunStatus>() {
            Ok(s) => query = query.status(s),
            Err(e) => return error(StatusCode::BAD_REQUEST, e),
        }
    }
    if let Some(p) = params.place {
        query = query.place(p);
    }
    if let Some(p) = params.parent {
        query = query.parent(p);
    }
    if let Some(b) = params.before {
        query = query.before(b);
    }
    match app.runtime.store().list_runs(&query).await {
        Ok(page) => {
            let runs: Vec<Value> = page.runs.iter().map(crate::views::run).collect();
            ok(&app, StatusCode::OK, json!({ "runs": runs, "next": page.next }))
        }
        Err(e) => store_error(&e),
    }
}

#[derive(serde::Deserialize)]
pub(super) struct StartBody {
    workflow: String,
    #[serde(default)]
    input: Value,
    #[serde(default)]
    wait: bool,
    #[serde(default)]
    drive: bool,
}

/// A JSON body, or why it is not one (a message for a 400).
pub(super) fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("the body is not valid: {e}"))
}

pub(super) async fn start_run(State(app): State<App>, BodyJson(body): BodyJson) -> Response {
    let body: StartBody = match json_body(&body) {
        Ok(b) => b,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let run_id = match app.runtime.submit_by_name(&body.workflow, body.input).await {
        Ok(id) => id,
        Err(e) => return run_error(&app, &e),
    };
    if body.wait {
        let driven = drive(&app, move |rt| async move { rt.drive_by_name(run_id).await }).await;
        // A worker took it first: it is queued, as without `wait`.
        if matches!(driven, Err(RunError::InvalidStatus { .. } | RunError::Store(StoreError::Leased { .. }))) {
            return ok(&app, StatusCode::ACCEPTED, json!({ "run_id": run_id, "status": "queued" }));
        }
        return outcome(&app, run_id, driven).await;
    }
    if body.drive {
        // Driven here, in the background: the answer comes at once, and the run's
        // events (`/events`) show it move. Its end, or failure, is in the store.
        let runtime = app.runtime.clone();
        tokio::spawn(async move { runtime.drive_by_name(run_id).await });
        return ok(&app, StatusCode::ACCEPTED, json!({ "run_id": run_id, "status": "running" }));
    }
    ok(&app, StatusCode::ACCEPTED, json!({ "run_id": run_id, "status": "queued" }))
}

pub(super) async fn show_run(State(app): State<App>, PathJson(id): PathJson<RunId>) -> Response {
    let store = app.runtime.store();
    let (record, history, documents, signals) =
        match (store.load_run(id).await, store.history(id).await, store.documents(id).await, store.signals(id).await) {
            (Ok(r), Ok(h), Ok(d), Ok(s)) => (r, h, d, s),
            (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), _) | (.., Err(e)) => return store_error(&e),
        };
    let mut value = crate::views::run(&record.summary());
    if record.status == RunStatus::Waiting {
        // The signals its place waits for, by this build's table.
        let waiting_for: Vec<&str> = app.runtime.definition_of(&record.workflow).map_or_else(Vec::new, |def| {
            def.transitions().iter().filter(|t| t.wait && t.leaves(&record.place)).map(|t| t.name).collect()
        });
        value["waiting_for"] = json!(waiting_for);
        value["wake_at"] = json!(record.wake_at.map(|t| t.to_string()));
        // In full: each signal with its payload's shape, the timer, and (an agent's
        // run at `awaiting_approval`) the calls to decide, for Studio's buttons.
        match crate::views::Waits::of(&app.runtime, &record) {
            Ok(Some(waits)) => {
                value["waits_for"] = waits.json();
                if let Some(pending) = &waits.pending {
                    value["pending_calls"] = json!(pending);
                    value["pending_signal"] = json!(pending_signal(waits.outcome_unknown));
                    value["outcome_unknown"] = json!(waits.outcome_unknown);
                }
            }
            Ok(None) => {}
            Err(e) => return run_error(&app, &e),
        }
    }
    value["signals"] = signals
        .iter()
        .map(|s| {
            let payload = crate::views::raw(&s.payload);
            json!({ "id": s.id, "name": s.name, "payload": payload, "status": s.status, "received_at": s.received_at.to_string() })
        })
        .collect();
    value["state"] = crate::views::raw(&record.state);
    value["history"] = history.iter().map(crate::views::step).collect();
    let takeovers = match store.takeovers(id).await {
        Ok(takeovers) => takeovers,
        Err(e) => return store_error(&e),
    };
    value["takeovers"] = takeovers.iter().map(crate::views::takeover).collect();
    value["documents"] = documents.iter().map(|d| crate::views::document(d)).collect();
    if let Some(fork) = crate::views::fork(record.forked_from, &documents) {
        value["fork"] = fork;
    }
    ok(&app, StatusCode::OK, value)
}

/// The signal that answers a run's pending calls: decisions, or the outcome of
/// at-most-once calls.
pub(super) fn pending_signal(outcome_unknown: bool) -> &'static str {
    if outcome_unknown { loopstack_llm::agent::RESOLVE_TOOLS } else { loopstack_llm::agent::DECIDE_TOOLS }
}

/// The calls a run waits to have decided: `{"run_id", "awaiting_approval",
/// "outcome_unknown", "signal", "calls"}`, `calls` empty (and both flags false) when
/// it waits for no decision. `outcome_unknown` marks at-most-once calls whose
/// process died mid-call (the run waits at `awaiting_outcome`); `signal` is the one
/// that answers them, with the same `{"decisions": [..]}` payload (a decision's
/// `result` gives a call's result, `approved` runs it again).
pub(super) async fn pending_calls(State(app): State<App>, PathJson(id): PathJson<RunId>) -> Response {
    let record = match app.runtime.store().load_run(id).await {
        Ok(record) => record,
        Err(e) => return store_error(&e),
    };
    let pending =
        match app.runtime.definition_of(&record.workflow).map(|def| loopstack_llm::pending_calls(def, &record)) {
            Some(Err(e)) => return run_error(&app, &e),
            Some(Ok(pending)) => pending,
            None => None,
        };
    let outcome = pending.is_some() && crate::views::is_outcome_place(&record.place);
    let awaiting = pending.is_some() && !outcome;
    let calls = pending.unwrap_or_default();
    let signal = pending_signal(outcome);
    let value = json!({ "run_id": id, "awaiting_approval": awaiting, "outcome_unknown": outcome, "signal": signal, "calls": calls });
    ok(&app, StatusCode::OK, value)
}

pub(super) async fn show_checkpoint(State(app): State<App>, PathJson((id, step)): PathJson<(RunId, u64)>) -> Response {
    match app.runtime.store().checkpoint(id, step).await {
        Ok(c) => {
            let mut value = crate::views::step(&c.step);
            value["state"] = crate::views::raw(&c.state);
            ok(&app, StatusCode::OK, value)
        }
        Err(e) => store_error(&e),
    }
}

pub(super) async fn document_versions(
    State(app): State<App>,
    PathJson((id, doc_type, key)): PathJson<(RunId, String, String)>,
) -> Response {
    match app.runtime.store().document_history(id, &doc_type, &key).await {
        Ok(versions) => {
            let versions: Vec<Value> = versions.iter().map(|d| crate::views::document(d)).collect();
            ok(&app, StatusCode::OK, json!({ "versions": versions }))
        }
        Err(e) => store_error(&e),
    }
}

pub(super) async fn signal_run(
    State(app): State<App>,
    PathJson((id, name)): PathJson<(RunId, String)>,
    BodyJson(body): BodyJson,
) -> Response {
    let payload: Value = if body.is_empty() {
        Value::Null
    } else {
        match json_body(&body) {
            Ok(v) => v,
            Err(why) => return error(StatusCode::BAD_REQUEST, why),
        }
    };
    let driven = drive(&app, move |rt| async move { rt.signal_by_name(id, &name, payload).await }).await;
    outcome(&app, id, driven).await
}

pub(super) async fn resume_run(State(app): State<App>, PathJson(id): PathJson<RunId>) -> Response {
    let driven = drive(&app, move |rt| async move { rt.drive_by_name(id).await }).await;
    outcome(&app, id, driven).await
}

/// `POST /api/runs/{id}/fork` with `{"step": N, "edits": {"state": .., "system": .., "model": "PROVIDER:MODEL"}}`:
/// forks the run at step N with the edits and drives the fork; answers with the fork.
pub(super) async fn fork_run(
    State(app): State<App>,
    PathJson(id): PathJson<RunId>,
    BodyJson(body): BodyJson,
) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct ForkBody {
        step: u64,
        #[serde(default)]
        edits: loopstack_core::ForkEdits,
    }
    let request: ForkBody = match json_body(&body) {
        Ok(request) => request,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let fork = RunId::new();
    let driven =
        drive(&app, move |rt| async move { rt.fork_by_name(id, request.step, request.edits, fork).await }).await;
    if let Err(e @ RunError::Fork(_)) = &driven {
        let status = match e {
            RunError::Fork(loopstack_core::ForkError::UnknownStep { .. }) => StatusCode::NOT_FOUND,
            _ => StatusCode::UNPROCESSABLE_ENTITY,
        };
        return error(status, e);
    }
    outcome(&app, fork, driven).await
}

pub(super) async fn retry_run(State(app): State<App>, PathJson(id): PathJson<RunId>) -> Response {
    let driven = drive(&app, move |rt| async move { rt.retry_by_name(id).await }).await;
    outcome(&app, id, driven).await
}

pub(super) async fn cancel_run(State(app): State<App>, PathJson(id): PathJson<RunId>) -> Response {
    match app.runtime.cancel(id, "cancelled over the HTTP API").await {
        Ok(()) => ok(&app, StatusCode::OK, json!({ "run_id": id, "status": "cancelled" })),
        Err(e) => store_error(&e),
    }
}
