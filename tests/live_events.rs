//! Live events across processes: a worker process (`examples/worker.rs`) drives
//! runs on a shared store, and this process, which drives nothing of them, sees
//! their events as they happen: through `Runtime::subscribe()` (transitions and the
//! model's streamed text, in order, none twice, and its own drives' events once),
//! and through the HTTP API's event stream, which resumes after a reconnect from
//! `Last-Event-ID` without losing or repeating an event. On a SQLite file and on
//! PostgreSQL (a schema per test).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use loopstack::prelude::*;
use loopstack::serve::{ServeOptions, serve};
use loopstack::{EventKind, RunEvent, RunEvents, RunStatus, Store};
use loopstack_store::SqliteStore;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::worker::{QUESTION, agent, spawn_worker};

const ANSWER: &str = "Here is the weather: Mostly sunny in Berlin, 14C.";
/// The agent loop's transitions, as the worker drives them.
const TRANSITIONS: [&str; 4] = ["llm_turn", "run_tool_calls", "llm_turn", "respond"];
/// How the worker process is started, besides its store.
const WORKER: [&str; 4] = ["--owner", "other-process", "--concurrency", "2"];
/// A guard against a hang, never a timed assertion.
const DEADLINE: Duration = Duration::from_secs(120);

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loopstack-{name}-{}-{}", std::process::id(), RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The next event, within the deadline.
async fn next(events: &mut RunEvents) -> Arc<RunEvent> {
    match tokio::time::timeout(DEADLINE, events.recv()).await {
        Ok(Some(Ok(event))) => event,
        other => panic!("no event: {other:?}"),
    }
}

/// Until a drive of the other process publishes: it checks for listeners once a
/// second, so runs are submitted, one at a time, until one of them is in the log.
async fn until_the_other_process_publishes(runtime: &Runtime) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        assert!(tokio::time::Instant::now() < deadline, "the worker never published an event");
        let id = runtime.submit(&agent(), QUESTION.into()).await.unwrap();
        let done = runtime.wait_for(id, Duration::from_millis(20)).await.unwrap();
        assert_eq!(done.status, RunStatus::Completed);
        // It publishes from then on, while this runtime listens.
        if !runtime.store().read_events(0, Some(id), 1).await.unwrap().is_empty() {
            return;
        }
    }
}

/// Every event of run `id`, from its first to its `finished`.
async fn events_of(events: &mut RunEvents, id: RunId) -> Vec<Arc<RunEvent>> {
    let mut seen = Vec::new();
    loop {
        let event = next(events).await;
        if event.run_id != id {
            continue;
        }
        let last = matches!(event.kind, EventKind::Finished { .. });
        seen.push(event);
        if last {
            return seen;
        }
    }
}

/// The events of a whole agent run, in order: each transition started then
/// committed, once, in the loop's order; the answer's text streamed in pieces that
/// join to the answer, inside the second model turn; and the end.
fn check_run_events(events: &[Arc<RunEvent>]) {
    let mut transitions = Vec::new();
    let mut text = String::new();
    let mut deltas = 0;
    let mut open: Option<u64> = None;
    for event in events {
        match &event.kind {
            EventKind::TransitionStarted { transition, step, .. } => {
                assert_eq!(open, None, "a transition started before the last one committed: {events:#?}");
                assert_eq!(*step, transitions.len() as u64 + 1, "steps in order: {events:#?}");
                open = Some(*step);
                transitions.push(transition.to_string());
            }
            EventKind::TransitionCommitted { step, .. } => {
                assert_eq!(open.take(), Some(*step), "committed once, after it started: {events:#?}");
            }
            EventKind::TextDelta { text: piece } => {
                assert_eq!(open, Some(3), "the answer streams in the second model turn");
                text.push_str(piece);
                deltas += 1;
            }
            _ => {}
        }
    }
    assert_eq!(transitions, TRANSITIONS);
    assert_eq!(text, ANSWER);
    assert!(deltas > 1, "the text came in pieces, as streamed");
    assert!(matches!(events.last().unwrap().kind, EventKind::Finished { status: RunStatus::Completed, .. }));
}

/// This process subscribes, the worker process drives; and a run this process
/// drives itself is seen once, though its events also go through the log.
async fn subscribers_see_another_process(store: Arc<dyn Store>, store_args: &[String]) {
    let _worker = spawn_worker(store_args, &WORKER);
    let runtime = Runtime::with_shared_store(store);
    let mut events = runtime.subscribe();
    until_the_other_process_publishes(&runtime).await;

    // A run of this process's own, while it listens (so it publishes too).
    let own = agent().ask(&runtime, QUESTION).await.unwrap();
    assert_eq!(own.text, ANSWER);

    // A run the other process drives, from its start, in order.
    let id = runtime.submit(&agent(), QUESTION.into()).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let event = next(&mut events).await;
        let end = event.run_id == id && matches!(event.kind, EventKind::Finished { .. });
        seen.push(event);
        if end {
            break;
        }
    }
    let theirs: Vec<_> = seen.iter().filter(|e| e.run_id == id).cloned().collect();
    check_run_events(&theirs);
    // This process's own run reached the subscriber directly; the follower reads
    // the log in order, so by the other run's end it read past the own run's
    // events there too: each arrived once (a second copy breaks the order checked).
    let ours: Vec<_> = seen.iter().filter(|e| e.run_id == own.run_id).cloned().collect();
    check_run_events(&ours);
    let in_log = runtime.store().read_events(0, Some(own.run_id), 1000).await.unwrap();
    assert!(!in_log.is_empty(), "this process published its own run too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_subscribers_see_runs_another_process_drives() {
    let dir = tempdir("live-events");
    let path = dir.join("runs.db");
    let store = SqliteStore::open(&path).await.unwrap();
    subscribers_see_another_process(Arc::new(store), &["--sqlite".to_owned(), path.display().to_string()]).await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_subscribers_see_runs_another_process_drives() {
    let (schema, store) = common::postgres::TestSchema::connect("live_events").await;
    subscribers_see_another_process(Arc::new(store), &schema.args()).await;
    schema.drop().await;
}

/// An SSE stream of run `id` from after `last` (none: from now), read until
/// `count` events or the stream's end: (id, event) pairs.
async fn sse(address: &str, id: RunId, last: Option<u64>, count: usize) -> Vec<(u64, Value)> {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let resume = last.map(|l| format!("Last-Event-ID: {l}\r\n")).unwrap_or_default();
    let request = format!("GET /api/runs/{id}/events HTTP/1.1\r\nHost: {address}\r\n{resume}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let mut events = Vec::new();
    let mut buf = [0u8; 8192];
    while events.len() < count {
        let n = tokio::time::timeout(DEADLINE, stream.read(&mut buf)).await.expect("the stream stalled").unwrap();
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        events = parse_sse(&raw);
    }
    events.truncate(count);
    events
}

/// The events of a chunked `text/event-stream` response read so far.
fn parse_sse(raw: &[u8]) -> Vec<(u64, Value)> {
    let text = String::from_utf8_lossy(raw);
    let Some((head, mut body)) = text.split_once("\r\n\r\n") else { return Vec::new() };
    assert!(head.starts_with("HTTP/1.1 200") && head.contains("text/event-stream"), "{head}");
    // Undo the chunked encoding: a hex size line, that many bytes, CRLF.
    let mut data = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { break };
        if size == 0 || rest.len() < size {
            break;
        }
        data.push_str(&rest[..size]);
        body = rest[size..].strip_prefix("\r\n").unwrap_or(&rest[size..]);
    }
    let mut events = Vec::new();
    for block in data.split("\n\n") {
        let id = block.lines().find_map(|l| l.strip_prefix("id:")).map(|v| v.trim().parse::<u64>().unwrap());
        let body = block.lines().find_map(|l| l.strip_prefix("data:"));
        if let (Some(id), Some(body)) = (id, body) {
            events.push((id, serde_json::from_str(body.trim()).unwrap()));
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_resumes_from_last_event_id_without_gaps_or_repeats() {
    let dir = tempdir("sse-resume");
    let path = dir.join("runs.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let _worker = spawn_worker(&["--sqlite".to_owned(), path.display().to_string()], &WORKER);
    let runtime = Runtime::with_store(store).register(agent());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(serve(listener, runtime.clone(), ServeOptions::new()));

    // Listen (so the worker publishes) until a run the worker drove is in the log
    // whole, from its first transition to its end.
    let mut events = runtime.subscribe();
    until_the_other_process_publishes(&runtime).await;
    let id = runtime.submit(&agent(), QUESTION.into()).await.unwrap();
    let live = events_of(&mut events, id).await;
    check_run_events(&live);

    // The whole run from the log over HTTP (id 0: from the beginning), then the
    // same in two connections: the second resumes after the first's last id.
    let whole = sse(&address, id, Some(0), usize::MAX).await;
    assert_eq!(whole.len(), live.len(), "the stream ends with the run's end: {whole:#?}");
    assert!(whole.windows(2).all(|w| w[0].0 < w[1].0), "ids rise");
    for ((_, event), live) in whole.iter().zip(&live) {
        assert_eq!(*event, serde_json::to_value(&**live).unwrap());
    }
    let half = whole.len() / 2;
    let first = sse(&address, id, Some(0), half).await;
    let rest = sse(&address, id, Some(first.last().unwrap().0), usize::MAX).await;
    let joined: Vec<_> = first.into_iter().chain(rest).collect();
    assert_eq!(joined, whole, "no event lost or repeated across the reconnect");

    // Live: a stream that resumes from the log's newest id before a run was
    // submitted gets all of that run's events as the worker drives it.
    let mark = runtime.store().last_event_id().await.unwrap();
    let id = runtime.submit(&agent(), QUESTION.into()).await.unwrap();
    let streamed = sse(&address, id, Some(mark), usize::MAX).await;
    let streamed: Vec<Arc<RunEvent>> =
        streamed.into_iter().map(|(_, e)| Arc::new(serde_json::from_value(e).unwrap())).collect();
    check_run_events(&streamed);
    drop(events);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_nobody_follows_writes_no_events_and_one_followed_does() {
    let dir = tempdir("no-listener");
    let store = SqliteStore::open(dir.join("runs.db")).await.unwrap();
    let runtime = Runtime::with_store(store);
    let reply = agent().ask(&runtime, QUESTION).await.unwrap();
    assert_eq!(reply.text, ANSWER);
    runtime.flush_events().await;
    assert_eq!(runtime.store().last_event_id().await.unwrap(), 0, "nobody listened: nothing written");

    // A follower of the log, in this process or any other, makes drives publish.
    let mut log = runtime.follow_log(None, None).await.unwrap().unwrap();
    let reply = agent().ask(&runtime, QUESTION).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let logged = tokio::time::timeout(DEADLINE, log.recv()).await.unwrap().unwrap();
        let end = matches!(logged.event.kind, EventKind::Finished { .. });
        seen.push(Arc::new(logged.event));
        if end {
            break;
        }
    }
    assert!(seen.iter().all(|e| e.run_id == reply.run_id));
    check_run_events(&seen);
    std::fs::remove_dir_all(dir).unwrap();
}
