//! The HTTP API over a real socket: start a run, see it wait, answer its signal,
//! read it back; bad bodies get a 4xx with the reason and change nothing; a token
//! guards every request; secrets never appear in a response; live events stream.

use loopstack::prelude::*;
use loopstack::serve::{ServeOptions, serve};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[derive(Debug, Default, Serialize, Deserialize)]
struct Review {
    text: String,
    approved_by: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Approval {
    reviewer: String,
}

struct Reviewing;

#[workflow(name = "review", input = Review)]
impl Reviewing {
    #[transition(to = Drafted)]
    async fn draft(&self, _review: &mut Review, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Drafted, to = End, wait)]
    async fn approve(&self, review: &mut Review, _cx: &mut RunContext, approval: Approval) -> Result<()> {
        review.approved_by = Some(approval.reviewer);
        Ok(())
    }
}

async fn start(options: ServeOptions) -> (String, Runtime) {
    let runtime = Runtime::new().register(Reviewing);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(serve(listener, runtime.clone(), options));
    (address, runtime)
}

/// One HTTP/1.1 request, the connection closed after it: (status, body).
async fn http(address: &str, method: &str, path: &str, body: Option<&str>, token: Option<&str>) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let body = body.unwrap_or("");
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

async fn call(address: &str, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    let (status, body) = http(address, method, path, body, None).await;
    (status, serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}")))
}

#[tokio::test]
async fn a_run_is_started_waits_is_answered_and_read_back_over_http() {
    let (address, _runtime) = start(ServeOptions::new()).await;
    let (status, workflows) = call(&address, "GET", "/api/workflows", None).await;
    assert_eq!(status, 200);
    assert_eq!(workflows["workflows"][0]["signals"][0]["name"], "approve");
    assert_eq!(workflows["workflows"][0]["signals"][0]["payload_schema"]["required"], json!(["reviewer"]));

    let (status, run) =
        call(&address, "POST", "/api/runs", Some(r#"{"workflow": "review", "input": {"text": "Hi"}, "wait": true}"#))
            .await;
    assert_eq!(status, 200, "{run}");
    assert_eq!((run["status"].as_str(), run["waiting_for"].clone()), (Some("waiting"), json!(["approve"])));
    let id = run["run_id"].as_str().unwrap().to_owned();

    // Bad bodies: a 4xx with the reason, and the run still waits at step 1.
    let (status, bad) = call(&address, "POST", &format!("/api/runs/{id}/signals/approve"), Some("{not json")).await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad["error"].as_str().unwrap().starts_with("the body is not valid"));
    let (status, bad) =
        call(&address, "POST", &format!("/api/runs/{id}/signals/approve"), Some(r#"{"reviewer": 7}"#)).await;
    assert_eq!(status, 422, "{bad}");
    let (status, _) = call(&address, "POST", &format!("/api/runs/{id}/signals/publish"), Some("{}")).await;
    assert_eq!(status, 409);
    let (status, _) = call(&address, "POST", "/api/runs", Some(r#"{"workflow": "nope"}"#)).await;
    assert_eq!(status, 404);
    let (_, shown) = call(&address, "GET", &format!("/api/runs/{id}"), None).await;
    assert_eq!((shown["status"].as_str(), shown["step"].as_u64()), (Some("waiting"), Some(1)));

    let (status, done) =
        call(&address, "POST", &format!("/api/runs/{id}/signals/approve"), Some(r#"{"reviewer": "ada"}"#)).await;
    assert_eq!((status, done["status"].as_str()), (200, Some("completed")));
    let (_, shown) = call(&address, "GET", &format!("/api/runs/{id}"), None).await;
    assert_eq!(shown["state"]["approved_by"], "ada");
    assert_eq!(shown["history"].as_array().unwrap().len(), 2);
    let (_, listed) = call(&address, "GET", "/api/runs?status=completed", None).await;
    assert_eq!(listed["runs"][0]["run_id"].as_str(), Some(id.as_str()));
    let (status, _) = call(&address, "GET", "/api/runs?status=sleeping", None).await;
    assert_eq!(status, 400);
    let (status, api) = call(&address, "GET", "/api/openapi.json", None).await;
    assert_eq!((status, api["openapi"].as_str()), (200, Some("3.1.0")));
}

#[tokio::test]
async fn a_token_guards_every_request_and_secrets_never_appear() {
    let (address, runtime) = start(ServeOptions::new().token("t0ken-123")).await;
    let (status, _) = http(&address, "GET", "/api/runs", None, None).await;
    assert_eq!(status, 401);
    let (status, _) = http(&address, "GET", "/api/runs", None, Some("wrong")).await;
    assert_eq!(status, 401);
    runtime.secrets().register("sk-live-abcdef");
    let body = r#"{"workflow": "review", "input": {"text": "key sk-live-abcdef"}, "wait": true}"#;
    let (status, run) = http(&address, "POST", "/api/runs", Some(body), Some("t0ken-123")).await;
    assert_eq!(status, 200, "{run}");
    let id = serde_json::from_str::<Value>(&run).unwrap()["run_id"].as_str().unwrap().to_owned();
    let (_, shown) = http(&address, "GET", &format!("/api/runs/{id}"), None, Some("t0ken-123")).await;
    assert!(!shown.contains("sk-live-abcdef") && shown.contains("[redacted]"), "{shown}");
}

#[tokio::test]
async fn a_runs_live_events_stream_as_server_sent_events() {
    let (address, runtime) = start(ServeOptions::new()).await;
    let id = runtime.submit(&Reviewing, Review::default()).await.unwrap();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request = format!("GET /api/runs/{id}/events HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    // Wait for the response head, so the subscription exists before the run moves.
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("\r\n\r\n") {
        let n = stream.read(&mut buf).await.unwrap();
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.contains("text/event-stream"), "{seen}");
    runtime.drive_by_name(id).await.unwrap();
    while !seen.contains(r#""type":"waiting""#) {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "the stream ended: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.contains(r#""type":"transition_started""#), "{seen}");
    // The answer ends the run, and the stream ends with it.
    runtime.signal(&Reviewing, id, ReviewingSignal::Approve(Approval { reviewer: "ada".into() })).await.unwrap();
    let mut rest = String::new();
    stream.read_to_string(&mut rest).await.unwrap();
    assert!(rest.contains(r#""type":"finished""#), "{rest}");
}

#[tokio::test]
async fn bad_path_ids_and_queries_get_a_json_reason() {
    let (address, _runtime) = start(ServeOptions::new()).await;
    let (status, body) = call(&address, "GET", "/api/runs/not-an-id", None).await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("not-an-id") || body["error"].is_string(), "{body}");
    let (status, body) = call(&address, "GET", "/api/runs?limit=-1", None).await;
    assert_eq!(status, 400);
    assert!(body["error"].is_string(), "{body}");
}

async fn raw(address: &str, request: String) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response[9..12].parse().unwrap()
}

#[tokio::test]
async fn cross_site_requests_and_other_host_names_are_refused_and_a_bad_payload_changes_nothing() {
    let (address, runtime) = start(ServeOptions::new()).await;
    let body = r#"{"workflow": "review", "input": {"text": "Hi"}, "wait": true}"#;
    let form = format!(
        "POST /api/runs HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(raw(&address, form).await, 415);
    let foreign = format!(
        "POST /api/runs HTTP/1.1\r\nHost: {address}\r\nOrigin: http://evil.example\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(raw(&address, foreign).await, 403);
    let rebound = "GET /api/runs HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n".to_owned();
    assert_eq!(raw(&address, rebound).await, 403);
    assert!(
        runtime.store().list_runs(&loopstack::RunQuery::new()).await.unwrap().runs.is_empty(),
        "no run was started"
    );

    let (_, run) = call(&address, "POST", "/api/runs", Some(body)).await;
    let id: RunId = run["run_id"].as_str().unwrap().parse().unwrap();
    let before = runtime.store().load_run(id).await.unwrap();
    let (status, _) =
        call(&address, "POST", &format!("/api/runs/{id}/signals/approve"), Some(r#"{"reviewer": 7}"#)).await;
    assert_eq!(status, 422);
    let after = runtime.store().load_run(id).await.unwrap();
    assert_eq!((after.epoch, after.signal_seq, after.step), (before.epoch, before.signal_seq, before.step));
    assert!(runtime.store().signals(id).await.unwrap().is_empty(), "nothing was stored");
}
