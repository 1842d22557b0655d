//! Studio, the web page for runs: static files compiled into the binary and
//! served by [`crate::serve::router`] at `/`. The page calls the JSON API under
//! `/api`; nothing is fetched from elsewhere (the state diagram is drawn by
//! `diagram.js`, which ships here).

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX: &str = include_str!("studio/index.html");
const APP: &str = include_str!("studio/app.js");
const DIAGRAM: &str = include_str!("studio/diagram.js");
const FORMS: &str = include_str!("studio/forms.js");
const STYLE: &str = include_str!("studio/studio.css");

pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { asset(INDEX, "text/html; charset=utf-8") }))
        .route("/studio/app.js", get(|| async { asset(APP, "text/javascript; charset=utf-8") }))
        .route("/studio/diagram.js", get(|| async { asset(DIAGRAM, "text/javascript; charset=utf-8") }))
        .route("/studio/forms.js", get(|| async { asset(FORMS, "text/javascript; charset=utf-8") }))
        .route("/studio/studio.css", get(|| async { asset(STYLE, "text/css; charset=utf-8") }))
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            // The page runs only its own scripts and talks only to this server.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}
