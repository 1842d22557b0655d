//! MCP over streamable HTTP: rmcp's service (sessions for 2025-11-25 and older,
//! stateless for 2026-07-28), behind a guard that answers as the rest of the HTTP
//! API does (`{"error": reason}`):
//!
//! - A body is read under the limit the HTTP API's routes have (axum's
//!   `DefaultBodyLimit`, 2 MB unless the router says otherwise): 413 beyond it.
//! - A session id the server does not know (one that ended, was deleted, or never
//!   was) gets 404, on which a client starts a new session.
//! - An `MCP-Protocol-Version` header naming a version the server does not speak
//!   gets 400.
//!
//! rmcp's own Host check is off: the API's (`serve`'s allowed hosts) comes first.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest as _, Request, State};
use axum::http::{HeaderName, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse as _, Response};
use loopstack_core::serde_json::json;
use rmcp::transport::streamable_http_server::session::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::McpHandler;

const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// The MCP server as a streamable-HTTP service (sessions kept in memory), to
/// mount at a path of an axum router of your own (`router.route_service("/mcp",
/// http_service(handler))`). [`serve::router`](crate::serve::router) mounts it at
/// `/mcp`, behind the API's token, Host and Origin checks: a service mounted
/// elsewhere has only the checks you put in front of it.
///
/// A request body over the router's `DefaultBodyLimit` (2 MB unless set) gets
/// 413, a request with a session id the server does not know (one that ended or
/// was deleted) 404, and one whose `MCP-Protocol-Version` header names a version
/// it does not speak 400, each with `{"error": reason}`.
pub fn http_service(handler: McpHandler) -> axum::routing::MethodRouter {
    let mut sessions = LocalSessionManager::default();
    // A session ends when its client deletes it or the server stops, never for
    // being idle: a call that drives a long run sends nothing until it answers,
    // and an idle timeout would end the session under it.
    sessions.session_config.keep_alive = None;
    let sessions = Arc::new(sessions);
    let mut config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    // The guard has read the body under the router's limit.
    config.max_request_body_bytes = usize::MAX;
    let service = StreamableHttpService::new(move || Ok(handler.clone()), Arc::clone(&sessions), config);
    axum::routing::any_service(service).layer(middleware::from_fn_with_state(sessions, guard))
}

async fn guard(State(sessions): State<Arc<LocalSessionManager>>, request: Request, next: Next) -> Response {
    // The server speaks each revision rmcp knows, 2024-11-05 to 2026-07-28.
    let known = rmcp::model::ProtocolVersion::KNOWN_VERSIONS;
    if let Some(version) = request.headers().get(PROTOCOL_VERSION)
        && !version.to_str().is_ok_and(|asked| known.iter().any(|v| v.as_str() == asked))
    {
        let spoken: Vec<&str> = known.iter().rev().map(|v| v.as_str()).collect();
        let reason =
            format!("MCP-Protocol-Version {version:?} is not a version this server speaks: {}", spoken.join(", "));
        return refuse(StatusCode::BAD_REQUEST, reason);
    }
    let session = request.headers().get(SESSION_ID).map(|id| id.to_str().map(Arc::<str>::from));
    if let Some(id) = session {
        // A closed session's id is removed from the manager, as if never given.
        let known = match id {
            Ok(id) => sessions.has_session(&id).await.unwrap_or(false),
            Err(_) => false,
        };
        if !known {
            return refuse(
                StatusCode::NOT_FOUND,
                "no MCP session of this id: it ended, or never was; `initialize` anew",
            );
        }
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let body = match Bytes::from_request(Request::from_parts(parts.clone(), body), &()).await {
        Ok(body) => body,
        Err(rejection) => return refuse(rejection.status(), rejection.body_text()),
    };
    next.run(Request::from_parts(parts, Body::from(body))).await
}

/// An answer of the guard, in the API's shape: `{"error": reason}`.
fn refuse(status: StatusCode, reason: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": reason.into() }))).into_response()
}
