//! An HTTP API for the runs of your binary, and Studio, the web page over it
//! (feature `serve`, on by default): the command line's `serve`, or [`router`] to
//! mount in an axum app of your own.
//!
//! Studio, at `/`, lists runs (filtered by workflow, status and place, a page at a
//! time, read again every few seconds), and shows a run: its state diagram with
//! the place it is at and the path it took, its conversation with tool calls and
//! results, token usage and cost, documents with their versions, the state at each
//! checkpoint, its signals and its error. It answers a waiting run with a form made
//! from each signal's JSON Schema, resumes, retries and cancels runs, starts new
//! ones from a form made from the workflow's input schema, and follows a run live
//! from its events, the model's text as it streams. It is plain HTML, CSS and
//! JavaScript compiled into the binary (the diagram is drawn by a script of its own),
//! fetches nothing from elsewhere, and sends the token, when there is one, as a
//! bearer header.
//!
//! | method and path | what |
//! |---|---|
//! | `GET /api/openapi.json` | this API, described (OpenAPI 3.1) |
//! | `GET /api/workflows` | the registered workflows: version and the versions they migrate from, places, transitions, signals with their payload schemas, the input schema, diagram |
//! | `GET /api/runs?workflow=&status=&place=&parent=&limit=&before=` | runs, newest first, a page at a time |
//! | `POST /api/runs` `{"workflow", "input", "wait", "drive"}` | starts a run: queued; driven to its end or first wait with `"wait": true`; driven in the background, answering at once, with `"drive": true` |
//! | `GET /api/runs/{id}` | a run: status, history with times, state, documents, signals, and what it waits for (`waits_for`: each signal with its payload schema and shape, the timer, an agent's `pending_calls`) |
//! | `GET /api/runs/{id}/checkpoints/{step}` | the state the run's checkpoint of `step` holds (0: the initial state) |
//! | `GET /api/runs/{id}/documents/{type}/{key}` | every version of a keyed document, oldest first |
//! | `GET /api/runs/{id}/pending` | the tool calls an agent's run (of any name) waits to have decided: id, tool, arguments; `outcome_unknown` for at-most-once calls whose process died mid-call, and the `signal` that answers them |
//! | `POST /api/runs/{id}/signals/{name}` (the payload as the body) | sends a signal and drives the run on; an agent's calls are decided with `decide_tools`, `{"decisions": [{"call_id", "approved", "reason"}]}`; calls whose outcome is unknown with `resolve_tools`, the same payload, where a decision's `result` gives the call's result |
//! | `POST /api/runs/{id}/resume`, `/retry`, `/cancel` | as the command line's |
//! | `GET /api/runs/{id}/events` | the run's live events, as Server-Sent Events, with ids that resume after a reconnect (`Last-Event-ID`) over a store with an event log |
//! | `GET /api/schedules` | the schedules: when each is due and next due, its policy, its last run and that run's status |
//! | `POST /api/schedules` `{"id", "workflow", "input", "cron" or "every", "timezone", "missed", "grace", "paused"}` | stores a schedule (201); `every` and `grace` as `15m`, `1h30m`; `missed` is `skip` (the default) or `catch_up_once` |
//! | `POST /api/schedules/{id}/pause`, `/resume` | pauses it, or resumes it next due at its first time from now |
//! | `DELETE /api/schedules/{id}` | deletes it (its runs stay) |
//! | `POST`, `GET`, `DELETE /mcp` | MCP over streamable HTTP (feature `mcp-server`): the workflows and agents as tools |
//!
//! With feature `mcp-server` (on by default) it also answers MCP at `/mcp`, over
//! streamable HTTP: the registered workflows and agents as tools
//! ([`mcp_server`](crate::mcp_server)), under the same token, Host and Origin
//! rules as every endpoint.
//!
//! Bad requests get a 4xx with `{"error": reason}` and change nothing: a body
//! that is not JSON or does not fit (a signal's payload must fit the JSON Schema
//! its transition publishes, which Studio's form is made from, and is read as the
//! transition's payload type: a 422), an unknown workflow, run
//! or signal (404 / 409). Secrets registered with the runtime never appear in a
//! response. With a token ([`ServeOptions::token`]; required by the command line
//! for an address beyond loopback), every request needs `Authorization: Bearer
//! <token>`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use loopstack_core::serde_json::{self, Value, json};
use loopstack_core::{RunError, RunId, RunOutcome, RunQuery, RunStatus, Runtime, StoreError};

mod events;
mod schedules;

/// How the API is served.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ServeOptions {
    /// The bearer token every request must carry; none when `None`.
    pub token: Option<String>,
    /// Whether browsers reach the API over https (a TLS-terminating proxy in front,
    /// or a TLS server of your own that mounts [`router`]): then a request that
    /// names an `Origin` must name `https://<host>`; by default (`false`),
    /// `http://<host>`, as [`serve`] speaks plain http.
    pub https: bool,
}

impl ServeOptions {
    /// No token.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires `Authorization: Bearer <token>` on every request.
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Says that browsers reach the API over https ([`ServeOptions::https`]).
    #[must_use]
    pub fn https(mut self, https: bool) -> Self {
        self.https = https;
        self
    }
}

#[derive(Clone)]
struct App {
    runtime: Runtime,
    token: Option<Arc<str>>,
    /// The scheme of the origin the API accepts: `http` or `https`.
    scheme: &'static str,
}

/// The API over `runtime`'s store and registered workflows, as an axum router.
pub fn router(runtime: Runtime, options: ServeOptions) -> Router {
    let scheme = if options.https { "https" } else { "http" };
    let app = App { runtime, token: options.token.map(Into::into), scheme };
    let router = Router::new();
    // MCP at `/mcp`, behind the same checks as the API (the layer below).
    #[cfg(feature = "mcp-server")]
    let router = router.route_service(
        "/mcp",
        crate::mcp_server::http_service(crate::mcp_server::McpHandler::new(app.runtime.clone())),
    );
    router
        .route("/api/openapi.json", get(openapi))
        .route("/api/workflows", get(workflows))
        .route("/api/runs", get(list_runs).post(start_run))
        .route("/api/runs/{id}", get(show_run))
        .route("/api/runs/{id}/pending", get(pending_calls))
        .route("/api/runs/{id}/signals/{name}", post(signal_run))
        .route("/api/runs/{id}/resume", post(resume_run))
        .route("/api/runs/{id}/retry", post(retry_run))
        .route("/api/runs/{id}/fork", post(fork_run))
        .route("/api/runs/{id}/cancel", post(cancel_run))
        .route("/api/runs/{id}/events", get(events::run_events))
        .route("/api/runs/{id}/checkpoints/{step}", get(show_checkpoint))
        .route("/api/runs/{id}/documents/{doc_type}/{key}", get(document_versions))
        .route("/api/schedules", get(schedules::list).post(schedules::create))
        .route("/api/schedules/{id}", delete(schedules::delete))
        .route("/api/schedules/{id}/pause", post(schedules::pause))
        .route("/api/schedules/{id}/resume", post(schedules::resume))
        .layer(middleware::from_fn_with_state(app.clone(), authorize))
        // Every answer is what its Content-Type says, never sniffed as a page.
        .layer(middleware::map_response(|mut response: Response| async move {
            response.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff"));
            response
        }))
        .with_state(app)
        // The page itself holds no run data: it is served without the token, and
        // asks for one when the API wants it.
        .merge(crate::studio::router())
}

/// Serves the API on `listener` until the future is dropped.
pub async fn serve(listener: tokio::net::TcpListener, runtime: Runtime, options: ServeOptions) -> std::io::Result<()> {
    axum::serve(listener, router(runtime, options)).await
}

async fn authorize(State(app): State<App>, headers: HeaderMap, request: Request, next: Next) -> Response {
    if let Some(token) = &app.token {
        let given =
            headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|given| same(given.as_bytes(), token.as_bytes())) {
            return error(StatusCode::UNAUTHORIZED, "a bearer token is required (Authorization: Bearer <token>)");
        }
    } else if !headers.get(header::HOST).and_then(|h| h.to_str().ok()).is_some_and(loopback_host) {
        // Without a token only loopback names are served: a page on another name
        // that resolves here (DNS rebinding) gets nothing.
        return error(StatusCode::FORBIDDEN, "without a token, the API answers only to localhost, 127.0.0.1 or [::1]");
    }
    // A page of another origin may not drive runs: browsers send a cross-origin
    // JSON request only after asking, and a form post is refused here. An origin
    // is its scheme and its host: `https://` is another origin than this `http://`.
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
        let same_origin = origin
            .split_once("://")
            .is_some_and(|(scheme, rest)| scheme.eq_ignore_ascii_case(app.scheme) && rest == host);
        if !same_origin {
            return error(StatusCode::FORBIDDEN, "requests from another origin are refused");
        }
    }
    if request.method() == axum::http::Method::POST {
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|c| c.to_str().ok())
            .is_some_and(|c| c.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json")));
        if !json {
            return error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "send the body as Content-Type: application/json");
        }
    }
    next.run(request).await
}

/// Whether two byte strings are equal, taking as long whatever they hold.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a Host header names this machine's loopback.
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    matches!(name, "localhost" | "127.0.0.1" | "::1")
}

/// The path's parameters, or a 400 with `{"error": reason}` (axum's own rejection
/// is plain text).
struct PathJson<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Send> axum::extract::FromRequestParts<S> for PathJson<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Self(value)),
            Err(rejection) => Err(error(StatusCode::BAD_REQUEST, rejection.body_text())),
        }
    }
}

/// The request's body, or its rejection (a body over the 2 MB limit: 413) with
/// `{"error": reason}` instead of axum's plain text.
struct BodyJson(axum::body::Bytes);

impl<S: Send + Sync> axum::extract::FromRequest<S> for BodyJson {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::body::Bytes::from_request(request, state).await {
            Ok(bytes) => Ok(Self(bytes)),
            Err(rejection) => Err(error(rejection.status(), rejection.body_text())),
        }
    }
}

/// The query's parameters, or a 400 with `{"error": reason}`.
struct QueryJson<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Send> axum::extract::FromRequestParts<S> for QueryJson<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(Self(value)),
            Err(rejection) => Err(error(StatusCode::BAD_REQUEST, rejection.body_text())),
        }
    }
}

/// A JSON error response.
fn error(status: StatusCode, reason: impl std::fmt::Display) -> Response {
    (status, axum::Json(json!({ "error": reason.to_string() }))).into_response()
}

/// A JSON response with the runtime's secrets redacted.
fn ok(app: &App, status: StatusCode, mut value: Value) -> Response {
    app.runtime.secrets().redact_value(&mut value);
    (status, axum::Json(value)).into_response()
}

fn run_error(app: &App, e: &RunError) -> Response {
    let status = match e {
        RunError::UnknownWorkflow { .. } | RunError::Store(StoreError::RunNotFound(_)) => StatusCode::NOT_FOUND,
        RunError::Input { .. }
        | RunError::InvalidSignalPayload { .. }
        | RunError::Mismatch { .. }
        | RunError::UnstorableState { after: None, .. } => StatusCode::UNPROCESSABLE_ENTITY,
        RunError::UnknownSignal { .. }
        | RunError::InvalidStatus { .. }
        | RunError::SignalRefused { .. }
        | RunError::DefinitionChanged { .. } => StatusCode::CONFLICT,
        RunError::Store(e) => return store_error(e),
        // The run failed; the request was fine: the run as it now stands.
        _ => StatusCode::OK,
    };
    let mut body = json!({ "error": e.to_string() });
    app.runtime.secrets().redact_value(&mut body);
    (status, axum::Json(body)).into_response()
}

fn store_error(e: &StoreError) -> Response {
    match e {
        StoreError::RunNotFound(_) | StoreError::CheckpointNotFound { .. } => error(StatusCode::NOT_FOUND, e),
        StoreError::Backend(_) | StoreError::Corrupt(_) => error(StatusCode::SERVICE_UNAVAILABLE, e),
        // Another driver holds the run, it moved on, or it ended.
        _ => error(StatusCode::CONFLICT, e),
    }
}

async fn outcome(app: &App, run_id: RunId, outcome: Result<RunOutcome, RunError>) -> Response {
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => {
            let response = run_error(app, &e);
            if response.status() != StatusCode::OK {
                return response;
            }
            // The run failed: answered with the run, its status and error.
            RunOutcome::Completed
        }
    };
    match app.runtime.store().load_run(run_id).await {
        Ok(record) => {
            let mut value = crate::views::run(&record.summary());
            if let RunOutcome::Waiting { signals, .. } = &outcome {
                value["waiting_for"] = json!(signals);
            }
            if let RunOutcome::Queued { signal } = outcome {
                value["queued_signal"] = json!(signal);
            }
            ok(app, StatusCode::OK, value)
        }
        Err(e) => store_error(&e),
    }
}

/// Drives a run in a task of its own ([`crate::views::detached`]).
async fn drive<F, Fut>(app: &App, f: F) -> Result<RunOutcome, RunError>
where
    F: FnOnce(Runtime) -> Fut,
    Fut: std::future::Future<Output = Result<RunOutcome, RunError>> + Send + 'static,
{
    crate::views::detached(&app.runtime, f).await
}

async fn openapi() -> axum::Json<Value> {
    let op = |summary: &str| json!({ "summary": summary, "responses": { "200": { "description": "OK" }, "4XX": { "description": "{\"error\": reason}" } } });
    axum::Json(json!({
        "openapi": "3.1.0",
        "info": { "title": "loopstack runs", "version": env!("CARGO_PKG_VERSION") },
        "paths": {
            "/api/workflows": { "get": op("The registered workflows, their transitions and signal payload schemas") },
            "/api/runs": { "get": op("Runs, newest first"), "post": op("Start a run: {workflow, input, wait, drive}") },
            "/api/runs/{id}": { "get": op("A run: status, history, state, documents") },
            "/api/runs/{id}/pending": { "get": op("The tool calls an agent's run waits to have decided") },
            "/api/runs/{id}/signals/{name}": { "post": op("Send a signal; the body is its payload") },
            "/api/runs/{id}/resume": { "post": op("Resume a run from its last checkpoint") },
            "/api/runs/{id}/retry": { "post": op("Retry a failed or cancelled run") },
            "/api/runs/{id}/fork": { "post": op("Fork a run at a step with edits: {step, edits: {state, system, model}}; answers with the fork") },
            "/api/runs/{id}/cancel": { "post": op("Cancel a run and its children") },
            "/api/runs/{id}/events": { "get": op("The run's live events (text/event-stream), whichever process drives it; each has an id over a store with an event log, and a request with Last-Event-ID resumes right after that event") },
            "/api/runs/{id}/checkpoints/{step}": { "get": op("The state at one checkpoint") },
            "/api/runs/{id}/documents/{type}/{key}": { "get": op("Every version of a keyed document") },
            "/api/schedules": { "get": op("The schedules, with their next due time and last run"), "post": op("Store a schedule: {id, workflow, input, cron or every, timezone, missed, grace, paused}") },
            "/api/schedules/{id}": { "delete": op("Delete a schedule; its runs stay") },
            "/api/schedules/{id}/pause": { "post": op("Pause a schedule") },
            "/api/schedules/{id}/resume": { "post": op("Resume a schedule, next due at its first time from now") },
        },
    }))
}

async fn workflows(State(app): State<App>) -> Response {
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
                            "priority": t.priority, "after_ms": t.after.map(|a| a.as_millis() as u64) })
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
struct ListParams {
    workflow: Option<String>,
    status: Option<String>,
    place: Option<String>,
    parent: Option<RunId>,
    limit: Option<u32>,
    before: Option<RunId>,
}

async fn list_runs(State(app): State<App>, QueryJson(params): QueryJson<ListParams>) -> Response {
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
struct StartBody {
    workflow: String,
    #[serde(default)]
    input: Value,
    #[serde(default)]
    wait: bool,
    #[serde(default)]
    drive: bool,
}

/// A JSON body, or why it is not one (a message for a 400).
fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("the body is not valid: {e}"))
}

async fn start_run(State(app): State<App>, BodyJson(body): BodyJson) -> Response {
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

async fn show_run(State(app): State<App>, PathJson(id): PathJson<RunId>) -> Response {
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
    value["documents"] = documents.iter().map(|d| crate::views::document(d)).collect();
    if let Some(fork) = crate::views::fork(record.forked_from, &documents) {
        value["fork"] = fork;
    }
    ok(&app, StatusCode::OK, value)
}

/// The signal that answers a run's pending calls: decisions, or the outcome of
/// at-most-once calls.
fn pending_signal(outcome_unknown: bool) -> &'static str {
    if outcome_unknown { loopstack_llm::RESOLVE_TOOLS } else { loopstack_llm::DECIDE_TOOLS }
}

/// The calls a run waits to have decided: `{"run_id", "awaiting_approval",
/// "outcome_unknown", "signal", "calls"}`, `calls` empty (and both flags false) when
/// it waits for no decision. `outcome_unknown` marks at-most-once calls whose
/// process died mid-call (the run waits at `awaiting_outcome`); `signal` is the one
/// that answers them, with the same `{"decisions": [..]}` payload (a decision's
/// `result` gives a call's result, `approved` runs it again).
async fn pending_calls(State(app): State<App>, PathJson(id): PathJson<RunId>) -> Response {
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

async fn show_checkpoint(State(app): State<App>, PathJson((id, step)): PathJson<(RunId, u64)>) -> Response {
    match app.runtime.store().checkpoint(id, step).await {
        Ok(c) => {
            let mut value = crate::views::step(&c.step);
            value["state"] = crate::views::raw(&c.state);
            ok(&app, StatusCode::OK, value)
        }
        Err(e) => store_error(&e),
    }
}

async fn document_versions(
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

async fn signal_run(
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

async fn resume_run(State(app): State<App>, PathJson(id): PathJson<RunId>) -> Response {
    let driven = drive(&app, move |rt| async move { rt.drive_by_name(id).await }).await;
    outcome(&app, id, driven).await
}

/// `POST /api/runs/{id}/fork` with `{"step": N, "edits": {"state": .., "system": .., "model": "PROVIDER:MODEL"}}`:
/// forks the run at step N with the edits and drives the fork; answers with the fork.
async fn fork_run(State(app): State<App>, PathJson(id): PathJson<RunId>, BodyJson(body): BodyJson) -> Response {
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

async fn retry_run(State(app): State<App>, PathJson(id): PathJson<RunId>) -> Response {
    let driven = drive(&app, move |rt| async move { rt.retry_by_name(id).await }).await;
    outcome(&app, id, driven).await
}

async fn cancel_run(State(app): State<App>, PathJson(id): PathJson<RunId>) -> Response {
    match app.runtime.cancel(id, "cancelled over the HTTP API").await {
        Ok(()) => ok(&app, StatusCode::OK, json!({ "run_id": id, "status": "cancelled" })),
        Err(e) => store_error(&e),
    }
}
