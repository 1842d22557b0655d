//! `GET /api/runs/{id}/events`: a run's live events as Server-Sent Events.
//!
//! Over a store with an event log (SQLite, PostgreSQL), the stream follows the log
//! ([`Runtime::follow_log`]): it carries the events of whichever process drives the
//! run, each with its id in the log as the SSE `id:`, and a client that reconnects
//! with `Last-Event-ID` (a browser's `EventSource` sends it by itself; Studio sends
//! it with its `fetch`) goes on right after that event, losing and repeating
//! nothing (unless the log was pruned past it). Without `Last-Event-ID` it starts
//! with the next event.
//!
//! Over a store without a log (the in-memory store), the stream carries the events
//! of the drives of this process only, without ids; `Last-Event-ID` is ignored, and
//! what happened while a client was away is not sent again (a subscriber that falls
//! behind gets `{"type": "lagged", "skipped": n}`).
//!
//! Either way the stream ends after the event that says the drive ended (a run that
//! waits keeps it open for the drive that answers it).

use std::convert::Infallible;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use loopstack_core::serde_json::{self, Value, json};
use loopstack_core::{EventKind, RunEvent, RunId};

use super::{App, PathJson, store_error};

/// The event as the stream sends it: JSON, with the runtime's secrets redacted.
fn data(app: &App, event: &RunEvent) -> String {
    let mut value = serde_json::to_value(event).unwrap_or(Value::Null);
    app.runtime.secrets().redact_value(&mut value);
    value.to_string()
}

fn ends_drive(event: &RunEvent) -> bool {
    matches!(event.kind, EventKind::Finished { .. })
}

pub(super) async fn run_events(State(app): State<App>, PathJson(id): PathJson<RunId>, headers: HeaderMap) -> Response {
    if let Err(e) = app.runtime.store().load_run(id).await {
        return store_error(&e);
    }
    let after = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    let log = match app.runtime.follow_log(Some(id), after).await {
        Ok(log) => log,
        Err(e) => return store_error(&e),
    };
    let keep_alive = KeepAlive::default();
    if let Some(log) = log {
        let stream = futures::stream::unfold((log, app, false), |(mut log, app, ended)| async move {
            if ended {
                return None;
            }
            // A store error ends the stream: the client reconnects from its last id.
            let logged = log.recv().await.ok()?;
            let event = Event::default().id(logged.id.to_string()).data(data(&app, &logged.event));
            let ended = ends_drive(&logged.event);
            Some((Ok::<_, Infallible>(event), (log, app, ended)))
        });
        return Sse::new(stream).keep_alive(keep_alive).into_response();
    }
    let events = app.runtime.subscribe().run(id).into_stream();
    let stream = futures::stream::unfold((events, app, false), |(mut events, app, ended)| async move {
        if ended {
            return None;
        }
        let (text, ended) = match events.next().await? {
            Ok(event) => (data(&app, &event), ends_drive(&event)),
            Err(lagged) => (json!({ "type": "lagged", "skipped": lagged.0 }).to_string(), false),
        };
        Some((Ok::<_, Infallible>(Event::default().data(text)), (events, app, ended)))
    });
    Sse::new(stream).keep_alive(keep_alive).into_response()
}
