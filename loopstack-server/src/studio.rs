//! Studio, the web page for runs: static files compiled into the binary and
//! served by [`crate::serve::router`] at `/`. The page calls the JSON API under
//! `/api`; nothing is fetched from elsewhere (the state diagram is drawn by
//! `diagram.js`, which ships here).

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX: &str = include_str!("studio/index.html");
const JS: &str = "text/javascript; charset=utf-8";

/// The page's files under `/studio/`: the stylesheet, the two classic scripts
/// (`forms.js`, `diagram.js`) and the ES modules `app.js` imports.
const ASSETS: &[(&str, &str, &str)] = &[
    ("studio.css", "text/css; charset=utf-8", include_str!("studio/studio.css")),
    ("forms.js", JS, include_str!("studio/forms.js")),
    ("diagram.js", JS, include_str!("studio/diagram.js")),
    ("app.js", JS, include_str!("studio/app.js")),
    ("common.js", JS, include_str!("studio/common.js")),
    ("runs.js", JS, include_str!("studio/runs.js")),
    ("run.js", JS, include_str!("studio/run.js")),
    ("details.js", JS, include_str!("studio/details.js")),
    ("compare.js", JS, include_str!("studio/compare.js")),
];

pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    ASSETS.iter().fold(
        Router::new().route("/", get(|| async { asset(INDEX, "text/html; charset=utf-8") })),
        |router, &(name, content_type, body)| {
            router.route(&format!("/studio/{name}"), get(move || async move { asset(body, content_type) }))
        },
    )
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
