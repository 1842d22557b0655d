//! An HTTP API for the runs of your binary, and Studio, the web page over it
//! (feature `serve`): the command line's `serve`, or [`router`] to
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
//! | `POST /ag-ui/{name}` (a `RunAgentInput`) | the agent or workflow `name` over [AG-UI](https://docs.ag-ui.com) 1.0: its events as Server-Sent Events; a thread is one run, interrupts are its waits (see the book's chapter on frontends) |
//! | `POST /ai-sdk/{name}` (`useChat`'s body) | the agent `name` over the AI SDK's UI message stream: a chat is one run, approvals are tool approval requests |
//! | `GET /ai-sdk/{name}/{chat}/stream` | the chat's turn under way, from its beginning, after a reconnect; 204 when none is |
//! | `POST /a2a/{name}`, `GET /a2a/{name}/.well-known/agent-card.json` | the agent `name` over [A2A](https://a2a-protocol.org) 1.0's JSON-RPC binding (feature `a2a`), and its card: a task is a run, approvals and a chat's turns are `input-required` (see the book's chapter on A2A) |
//! | `GET /.well-known/agent-card.json` (also at `/a2a/.well-known/agent-card.json`), `POST /a2a` | the deployment's card, every agent a skill, and its endpoint, where a request names its agent as `tenant` (feature `a2a`); cards are served without the token, which they name |
//! | `POST`, `GET`, `DELETE /mcp` | MCP over streamable HTTP (feature `mcp-server`): the workflows and agents as tools |
//! | `GET /metrics` | the [metrics](loopstack_core::metrics) in Prometheus' text format: those the runtime records, and the run counts read from the store now (503 when the store fails) |
//! | `GET /healthz` | 200 while the process serves; no token needed |
//! | `GET /readyz` | 200 when the store answers a cheap query within 5 s, else 503 with `{"error": reason}`; no token needed |
//!
//! With feature `mcp-server` it also answers MCP at `/mcp`, over
//! streamable HTTP: the registered workflows and agents as tools
//! ([`mcp_server`](crate::mcp_server)), under the same token, Host and Origin
//! rules as every endpoint.
//!
//! Bad requests get a 4xx with `{"error": reason}` and change nothing: a body
//! that is not JSON or does not fit (a signal's payload must fit the JSON Schema
//! its transition publishes, which Studio's form is made from, and is read as the
//! transition's payload type: a 422), an unknown workflow, run
//! or signal (404 / 409), a signal or resume of a run of a version this build
//! neither drives nor migrates, or whose migration fails (409). Secrets
//! registered with the runtime never appear in a
//! response. With a token ([`ServeOptions::token`]; required by the command line
//! for an address beyond loopback), every request needs `Authorization: Bearer
//! <token>`, but `/healthz` and `/readyz`: health probes carry no token, and
//! answer to any Host (a probe names the pod's address), with nothing but the
//! process's and the store's state. `/metrics` is under the token like the API (it
//! names workflows, tools and models: a Prometheus scrape config sends the token as
//! `authorization`); [`metrics_router`] serves it with the probes and without a
//! token, for a port of its own that only the scraper reaches (the command line's
//! `worker --metrics-addr`).

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
mod probes;
mod runs;
mod schedules;
mod threads;

/// The label that keeps an A2A task's context id with its run (feature `a2a`).
#[cfg(feature = "a2a")]
pub use threads::a2a::CONTEXT_LABEL as A2A_CONTEXT_LABEL;

pub use probes::router as metrics_router;

use runs::*;

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
    let probes = probes::probes().with_state(runtime.clone());
    let app = App { runtime, token: options.token.map(Into::into), scheme };
    let router = Router::new();
    // MCP at `/mcp`, behind the same checks as the API (the layer below).
    #[cfg(feature = "mcp-server")]
    let router = router.route_service(
        "/mcp",
        crate::mcp_server::http_service(crate::mcp_server::McpHandler::new(app.runtime.clone())),
    );
    // A2A at `/a2a` and `/a2a/{name}`, each with its agent card.
    #[cfg(feature = "a2a")]
    let router = router
        .route("/.well-known/agent-card.json", get(threads::a2a::root_card))
        .route("/a2a", post(threads::a2a::root_rpc))
        .route("/a2a/.well-known/agent-card.json", get(threads::a2a::root_card))
        .route("/a2a/{name}", post(threads::a2a::agent_rpc))
        .route("/a2a/{name}/.well-known/agent-card.json", get(threads::a2a::agent_card));
    router
        .route("/metrics", get(probes::metrics))
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
        .route("/ag-ui/{name}", post(threads::ag_ui::run))
        .route("/ai-sdk/{name}", post(threads::ai_sdk::chat))
        .route("/ai-sdk/{name}/{chat}/stream", get(threads::ai_sdk::resume))
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
        // Probes carry no token, and name the pod's address as their Host.
        .merge(probes)
}

impl axum::extract::FromRef<App> for Runtime {
    fn from_ref(app: &App) -> Self {
        app.runtime.clone()
    }
}

/// Serves the API on `listener` until the future is dropped.
pub async fn serve(listener: tokio::net::TcpListener, runtime: Runtime, options: ServeOptions) -> std::io::Result<()> {
    axum::serve(listener, router(runtime, options)).await
}

/// Serves the API on `listener` until `shutdown` is cancelled, then shuts down
/// gracefully: it accepts no new connection and lets the requests in flight finish,
/// up to `drain` (event streams, which never finish, are cut then).
pub async fn serve_until(
    listener: tokio::net::TcpListener,
    runtime: Runtime,
    options: ServeOptions,
    shutdown: loopstack_core::CancellationToken,
    drain: std::time::Duration,
) -> std::io::Result<()> {
    let stopping = shutdown.clone();
    let served = axum::serve(listener, router(runtime, options))
        .with_graceful_shutdown(async move { stopping.cancelled().await })
        .into_future();
    let mut served = std::pin::pin!(served);
    tokio::select! {
        result = &mut served => return result,
        () = shutdown.cancelled() => {}
    }
    match tokio::time::timeout(drain, served).await {
        Ok(result) => result,
        Err(_) => Ok(()),
    }
}

async fn authorize(State(app): State<App>, headers: HeaderMap, request: Request, next: Next) -> Response {
    // An A2A agent card is public, as the protocol has it: a client reads from it how
    // to authenticate (it names the bearer token) before it has the token.
    let public_card = cfg!(feature = "a2a")
        && request.method() == axum::http::Method::GET
        && request.uri().path().ends_with("/.well-known/agent-card.json");
    if let Some(token) = app.token.as_ref().filter(|_| !public_card) {
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
        | RunError::DefinitionChanged { .. }
        // This build cannot drive the run's version, or its migration failed: the
        // run is as it was, so answering with it would read as a success.
        | RunError::UnsupportedVersion { .. }
        | RunError::Migration { .. } => StatusCode::CONFLICT,
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
            "/api/runs/{id}/retry": { "post": op("Retry a failed, cancelled or stopped run") },
            "/api/runs/{id}/fork": { "post": op("Fork a run at a step with edits: {step, edits: {state, system, model}}; answers with the fork") },
            "/api/runs/{id}/cancel": { "post": op("Cancel a run and its children") },
            "/api/runs/{id}/events": { "get": op("The run's live events (text/event-stream), whichever process drives it; each has an id over a store with an event log, and a request with Last-Event-ID resumes right after that event") },
            "/api/runs/{id}/checkpoints/{step}": { "get": op("The state at one checkpoint") },
            "/api/runs/{id}/documents/{type}/{key}": { "get": op("Every version of a keyed document") },
            "/api/schedules": { "get": op("The schedules, with their next due time and last run"), "post": op("Store a schedule: {id, workflow, input, cron or every, timezone, missed, grace, paused}") },
            "/api/schedules/{id}": { "delete": op("Delete a schedule; its runs stay") },
            "/api/schedules/{id}/pause": { "post": op("Pause a schedule") },
            "/api/schedules/{id}/resume": { "post": op("Resume a schedule, next due at its first time from now") },
            "/ag-ui/{name}": { "post": op("Run the agent or workflow `name` over AG-UI 1.0: a RunAgentInput in, its events out (text/event-stream)") },
            "/ai-sdk/{name}": { "post": op("Chat with the agent `name` over the AI SDK's UI message stream (useChat's transport)") },
            "/ai-sdk/{name}/{chat}/stream": { "get": op("Resume the chat's turn under way; 204 when none is") },
        },
    }))
}
