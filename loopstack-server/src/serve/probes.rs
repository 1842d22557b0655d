//! `/metrics`, `/healthz` and `/readyz`: what Prometheus scrapes and what an
//! orchestrator probes.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use loopstack_core::serde_json::json;
use loopstack_core::{RunQuery, Runtime};

/// How long `/readyz` and `/metrics` wait for the store before they answer 503.
pub(super) const STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// `/healthz` and `/readyz`, which need no token: probes carry none.
pub(super) fn probes() -> Router<Runtime> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz))
}

/// 200 while the process serves.
async fn healthz() -> Response {
    (StatusCode::OK, axum::Json(json!({ "status": "ok" }))).into_response()
}

/// 200 when the store answers a cheap query (a listing of one run) in time, else
/// 503 with the reason.
async fn readyz(State(runtime): State<Runtime>) -> Response {
    let listed = tokio::time::timeout(STORE_TIMEOUT, runtime.store().list_runs(&RunQuery::new().limit(1))).await;
    match listed {
        Ok(Ok(_)) => (StatusCode::OK, axum::Json(json!({ "status": "ready" }))).into_response(),
        Ok(Err(e)) => unavailable(&runtime, format!("the store failed: {e}")),
        Err(_) => unavailable(&runtime, format!("the store did not answer within {} s", STORE_TIMEOUT.as_secs())),
    }
}

/// The runtime's metrics, and the run counts read from its store now, in
/// Prometheus' text format; 503 with the reason when the store fails. A runtime
/// given no `Metrics` renders the store's counts alone.
pub(super) async fn metrics(State(runtime): State<Runtime>) -> Response {
    let metrics = runtime.metrics().cloned().unwrap_or_default();
    match tokio::time::timeout(STORE_TIMEOUT, metrics.render(&runtime)).await {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, loopstack_core::metrics::CONTENT_TYPE)], text).into_response(),
        Ok(Err(e)) => unavailable(&runtime, format!("the store failed: {e}")),
        Err(_) => unavailable(&runtime, format!("the store did not answer within {} s", STORE_TIMEOUT.as_secs())),
    }
}

fn unavailable(runtime: &Runtime, reason: String) -> Response {
    let reason = runtime.secrets().redact(&reason).into_owned();
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({ "status": "unavailable", "error": reason }))).into_response()
}

/// `/metrics`, `/healthz` and `/readyz` alone, with no token and for any Host:
/// what a worker serves on a port of its own (the command line's `worker
/// --metrics-addr`).
pub fn router(runtime: Runtime) -> Router {
    probes().route("/metrics", get(metrics)).with_state(runtime)
}
