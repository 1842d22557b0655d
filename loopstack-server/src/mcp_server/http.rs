//! MCP over streamable HTTP: rmcp's service, behind a guard of our own for the
//! transport rules rmcp 0.15 does not keep.
//!
//! - It reads a body whole, however long: the guard reads it first, under the
//!   limit the HTTP API's routes have (axum's `DefaultBodyLimit`, 2 MB unless the
//!   router says otherwise), and answers 413 beyond it.
//! - It answers 401 to a session id it does not know (one that ended, was deleted,
//!   or never was), where the transport wants 404, on which a client starts a new
//!   session.
//! - It echoes any protocol version a client's `initialize` asks for that sorts
//!   before its own (it compares them as strings), and does not look at the
//!   `MCP-Protocol-Version` header. The guard answers 400 to a header naming a
//!   version the server does not speak, and reads an `initialize` that asks for
//!   one as asking for the newest it speaks, which is then the one answered (a
//!   `ServerHandler` cannot fix it: rmcp replaces its answer's version after it).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest as _, Request, State};
use axum::http::{HeaderName, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse as _, Response};
use loopstack_core::serde_json::{self, Value, json};
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
    let sessions = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::clone(&sessions),
        StreamableHttpServerConfig::default(),
    );
    axum::routing::any_service(service).layer(middleware::from_fn_with_state(sessions, guard))
}

async fn guard(State(sessions): State<Arc<LocalSessionManager>>, request: Request, next: Next) -> Response {
    if let Some(version) = request.headers().get(PROTOCOL_VERSION)
        && !version.to_str().is_ok_and(super::speaks)
    {
        let reason = format!(
            "MCP-Protocol-Version {version:?} is not a version this server speaks: {}",
            super::spoken_versions().join(", ")
        );
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
    // Without a session the message can only be an `initialize`.
    let body = if parts.headers.contains_key(SESSION_ID) { body } else { with_spoken_version(body) };
    next.run(Request::from_parts(parts, Body::from(body))).await
}

/// An `initialize` request's body that asks for a version the server does not
/// speak, asking for the newest it does instead; any other body as it is.
fn with_spoken_version(body: Bytes) -> Bytes {
    let Ok(mut message) = serde_json::from_slice::<Value>(&body) else { return body };
    if message.get("method").and_then(Value::as_str) != Some("initialize") {
        return body;
    }
    let Some(Value::String(asked)) = message.pointer_mut("/params/protocolVersion") else { return body };
    if super::speaks(asked) {
        return body;
    }
    *asked = rmcp::model::ProtocolVersion::LATEST.to_string();
    serde_json::to_vec(&message).map_or(body, Bytes::from)
}

/// An answer of the guard, in the API's shape: `{"error": reason}`.
fn refuse(status: StatusCode, reason: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": reason.into() }))).into_response()
}
