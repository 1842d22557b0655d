//! The HTTP API over a real socket: start a run, see it wait, answer its signal,
//! read it back; bad bodies get a 4xx with the reason and change nothing; a token
//! guards every request; secrets never appear in a response; live events stream.

use loopstack::prelude::*;
use loopstack::serve::{ServeOptions, serve};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
struct Review {
    text: String,
    approved_by: Option<String>,
}

/// Its schema forbids other fields (`additionalProperties: false`), which serde
/// alone would ignore.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(deny_unknown_fields)]
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

/// A note, saved under one key: a new version at each edit.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Note {
    text: String,
}

impl DocumentType for Note {
    const TYPE: &'static str = "note";
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Edit {
    text: String,
}

struct Revising;

#[workflow(name = "revision", state = Note)]
impl Revising {
    #[transition(to = Drafted)]
    async fn draft(&self, note: &mut Note, cx: &mut RunContext) -> Result<()> {
        cx.save_with(&*note, SaveOptions::new().key("note"))?;
        Ok(())
    }

    #[transition(from = Drafted, to = Drafted, wait)]
    async fn edit(&self, note: &mut Note, cx: &mut RunContext, edit: Edit) -> Result<()> {
        note.text = edit.text;
        cx.save_with(&*note, SaveOptions::new().key("note"))?;
        Ok(())
    }

    #[transition(from = Drafted, to = End, wait)]
    async fn publish(&self, _note: &mut Note, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

async fn start(options: ServeOptions) -> (String, Runtime) {
    let runtime = Runtime::new().register(Reviewing).register(Revising);
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
    assert_eq!(
        (&workflows["workflows"][0]["version"], &workflows["workflows"][0]["migrates_from"]),
        (&json!(1), &json!([]))
    );
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
    assert_eq!(shown["version"].as_u64(), Some(1), "a run shows the version it started under");

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
    // The same host over another scheme is another origin: this server speaks http.
    let post_from = |origin: &str| {
        format!(
            "POST /api/runs HTTP/1.1\r\nHost: {address}\r\nOrigin: {origin}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    assert_eq!(raw(&address, post_from(&format!("https://{address}"))).await, 403);
    assert_eq!(raw(&address, post_from(&format!("ws://{address}"))).await, 403);
    let rebound = "GET /api/runs HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n".to_owned();
    assert_eq!(raw(&address, rebound).await, 403);
    assert!(
        runtime.store().list_runs(&loopstack::RunQuery::new()).await.unwrap().runs.is_empty(),
        "no run was started"
    );

    // Its own origin is served.
    assert_eq!(raw(&address, post_from(&format!("http://{address}"))).await, 200);
    let (_, run) = call(&address, "POST", "/api/runs", Some(body)).await;
    let id: RunId = run["run_id"].as_str().unwrap().parse().unwrap();
    let before = runtime.store().load_run(id).await.unwrap();
    let (status, _) =
        call(&address, "POST", &format!("/api/runs/{id}/signals/approve"), Some(r#"{"reviewer": 7}"#)).await;
    assert_eq!(status, 422);
    // A field the published schema forbids, as Studio's form would never send it.
    let (status, refused) = call(
        &address,
        "POST",
        &format!("/api/runs/{id}/signals/approve"),
        Some(r#"{"reviewer": "ada", "admin": true}"#),
    )
    .await;
    assert_eq!(status, 422, "{refused}");
    assert!(refused["error"].as_str().is_some_and(|e| e.contains("JSON Schema") && e.contains("admin")), "{refused}");
    let after = runtime.store().load_run(id).await.unwrap();
    assert_eq!((after.epoch, after.signal_seq, after.step), (before.epoch, before.signal_seq, before.step));
    assert!(runtime.store().signals(id).await.unwrap().is_empty(), "nothing was stored");
}

#[tokio::test]
async fn behind_https_only_the_https_origin_is_served() {
    let (address, _runtime) = start(ServeOptions::new().https(true)).await;
    let get_from = |origin: &str| {
        format!("GET /api/runs HTTP/1.1\r\nHost: {address}\r\nOrigin: {origin}\r\nConnection: close\r\n\r\n")
    };
    assert_eq!(raw(&address, get_from(&format!("https://{address}"))).await, 200);
    assert_eq!(raw(&address, get_from(&format!("http://{address}"))).await, 403);
}

/// One HTTP/1.1 GET, the connection closed after it: the whole response, headers
/// included.
async fn get_raw(address: &str, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn studio_is_served_without_the_token_and_the_api_it_reads_needs_it() {
    let (address, _runtime) = start(ServeOptions::new().token("t0ken-123")).await;
    let page = get_raw(&address, "/").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("<script type=\"module\" src=\"/studio/app.js\"></script>"), "{page}");
    // The page runs only its own scripts, and nothing is fetched from elsewhere.
    assert!(page.to_ascii_lowercase().contains("content-security-policy: default-src 'self'"), "{page}");
    assert!(!page.contains("https://"), "the page links outside: {page}");
    // Every file the page loads, and every module those import, is served.
    let mut queue = vec![
        "/studio/app.js".to_owned(),
        "/studio/diagram.js".into(),
        "/studio/forms.js".into(),
        "/studio/studio.css".into(),
    ];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(path) = queue.pop() {
        if !seen.insert(path.clone()) {
            continue;
        }
        let kind = if path.ends_with(".css") { "text/css" } else { "text/javascript" };
        let asset = get_raw(&address, &path).await;
        assert!(asset.starts_with("HTTP/1.1 200"), "{path}: {asset}");
        assert!(asset.to_ascii_lowercase().contains(&format!("content-type: {kind}")), "{path}");
        // The SVG namespace is a name, not an address anything is fetched from.
        let asset = asset.replace("http://www.w3.org/2000/svg", "");
        assert!(!asset.contains("https://") && !asset.contains("http://"), "{path} reaches outside");
        for line in asset.lines().filter(|l| l.starts_with("import ")) {
            let module = line.rsplit_once(" from \"./").and_then(|(_, m)| m.strip_suffix("\";"));
            let module = module.unwrap_or_else(|| panic!("{path}: an import not of a sibling module: {line}"));
            queue.push(format!("/studio/{module}"));
        }
    }
    assert!(seen.len() > 4, "app.js imports its modules: {seen:?}");
    let (status, _) = http(&address, "GET", "/api/workflows", None, None).await;
    assert_eq!(status, 401);
    let refused = get_raw(&address, "/api/runs").await;
    assert!(refused.to_ascii_lowercase().contains("x-content-type-options: nosniff"), "{refused}");
}

#[tokio::test]
async fn the_reads_studio_makes_answer_checkpoints_versions_signals_and_input_schemas() {
    let (address, runtime) = start(ServeOptions::new()).await;
    let (_, workflows) = call(&address, "GET", "/api/workflows", None).await;
    let by_name =
        |name: &str| workflows["workflows"].as_array().unwrap().iter().find(|w| w["name"] == name).cloned().unwrap();
    // The form that starts a run comes from the input's JSON Schema, when it has one.
    assert_eq!(by_name("review")["input_schema"]["properties"]["text"]["type"], "string");
    assert_eq!(by_name("revision")["input_schema"], Value::Null);

    // `drive`: the answer comes at once, and the run moves on in the background.
    let body = r#"{"workflow": "revision", "input": {"text": "first"}, "drive": true}"#;
    let (status, started) = call(&address, "POST", "/api/runs", Some(body)).await;
    assert_eq!((status, started["status"].as_str()), (202, Some("running")), "{started}");
    let id: RunId = started["run_id"].as_str().unwrap().parse().unwrap();
    let record = runtime.wait_for(id, std::time::Duration::from_millis(5)).await.unwrap();
    assert_eq!(record.status, loopstack::RunStatus::Waiting);

    let (_, shown) = call(&address, "GET", &format!("/api/runs/{id}"), None).await;
    assert_eq!(shown["waiting_for"], json!(["edit", "publish"]));
    assert_eq!(shown["signals"], json!([]));

    let edit = r#"{"text": "second"}"#;
    let (status, _) = call(&address, "POST", &format!("/api/runs/{id}/signals/edit"), Some(edit)).await;
    assert_eq!(status, 200);
    let (_, shown) = call(&address, "GET", &format!("/api/runs/{id}"), None).await;
    assert_eq!(shown["signals"][0]["name"], "edit");
    assert_eq!(shown["signals"][0]["payload"], json!({"text": "second"}));
    assert_eq!(shown["signals"][0]["status"], json!({"status": "delivered", "step": 2}));
    assert_eq!(shown["documents"][0]["version"], 2);

    // Every version of the keyed note, oldest first.
    let (status, versions) = call(&address, "GET", &format!("/api/runs/{id}/documents/note/note"), None).await;
    assert_eq!(status, 200, "{versions}");
    let texts: Vec<&Value> = versions["versions"].as_array().unwrap().iter().map(|v| &v["content"]["text"]).collect();
    assert_eq!(texts, [&json!("first"), &json!("second")]);
    let (_, none) = call(&address, "GET", &format!("/api/runs/{id}/documents/note/other"), None).await;
    assert_eq!(none["versions"], json!([]));

    // The state at each checkpoint; a step the run never took is a 404.
    let (status, first) = call(&address, "GET", &format!("/api/runs/{id}/checkpoints/0"), None).await;
    assert_eq!((status, &first["state"]["text"]), (200, &json!("first")));
    let (_, second) = call(&address, "GET", &format!("/api/runs/{id}/checkpoints/2"), None).await;
    assert_eq!((&second["transition"], &second["state"]["text"]), (&json!("edit"), &json!("second")));
    let (status, missing) = call(&address, "GET", &format!("/api/runs/{id}/checkpoints/9"), None).await;
    assert_eq!(status, 404, "{missing}");
    let (status, _) = call(&address, "GET", &format!("/api/runs/{id}/checkpoints/first"), None).await;
    assert_eq!(status, 400);

    // Child runs are listed by their parent; this one has none.
    let (status, children) = call(&address, "GET", &format!("/api/runs?parent={id}"), None).await;
    assert_eq!((status, children["runs"].clone()), (200, json!([])));
}

#[tokio::test]
async fn a_body_over_the_limit_gets_a_json_reason_too() {
    let (address, _runtime) = start(ServeOptions::new()).await;
    let body = format!(r#"{{"workflow": "review", "input": {{"text": "{}"}}}}"#, "x".repeat(3 << 20));
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /api/runs HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // The server may answer and close before it has read it all.
    let _ = stream.write_all(body.as_bytes()).await;
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    let json = response.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    let json: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {response}"));
    assert!(json["error"].as_str().unwrap().contains("length limit"), "{json}");
}

/// Resets a user's password; a person approves each call.
#[tool(approve)]
async fn reset_password(user: String) -> String {
    format!("the password of {user} is reset")
}

/// A helpdesk agent (named `desk`) that asks to reset ada's and bob's passwords,
/// then answers with the results; served, with a token.
async fn start_desk(token: &str) -> (String, Runtime) {
    use loopstack::llm::{Agent, ChatRequest, ScriptedModel};
    let model = ScriptedModel::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().unwrap();
        let results: Vec<String> = last.tool_results_iter().map(|r| r.content.clone()).collect();
        if results.is_empty() {
            let calls = ["ada", "bob"].map(|user| ("reset_password", json!({ "user": user })));
            return Ok(ScriptedModel::new().tool_calls_response(calls));
        }
        Ok(ScriptedModel::new().text_response(results.join("; ")))
    });
    let agent = Agent::new(model, "m", ToolRegistry::new().with(ResetPassword).unwrap()).named("desk").unwrap();
    let runtime = Runtime::new().register(agent).register(Reviewing);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(serve(listener, runtime.clone(), ServeOptions::new().token(token)));
    (address, runtime)
}

#[tokio::test]
async fn an_agents_pending_calls_are_read_and_decided_over_http_under_the_same_rules() {
    let token = Some("t0ken-123");
    let (address, runtime) = start_desk("t0ken-123").await;
    let api = |method: &'static str, path: String, body: Option<String>| {
        let address = address.clone();
        async move {
            let (status, body) = http(&address, method, &path, body.as_deref(), token).await;
            (status, serde_json::from_str::<Value>(&body).unwrap_or_else(|e| panic!("{e}: {body}")))
        }
    };
    let (status, run) = api(
        "POST",
        "/api/runs".into(),
        Some(r#"{"workflow": "desk", "input": "Reset ada and bob", "wait": true}"#.into()),
    )
    .await;
    assert_eq!((status, run["place"].as_str()), (200, Some("awaiting_approval")), "{run}");
    let id = run["run_id"].as_str().unwrap().to_owned();

    // The endpoint is guarded like the rest: the token, and no other origin.
    let (status, _) = http(&address, "GET", &format!("/api/runs/{id}/pending"), None, None).await;
    assert_eq!(status, 401);
    let foreign = format!(
        "GET /api/runs/{id}/pending HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer t0ken-123\r\nOrigin: http://evil.example\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(raw(&address, foreign).await, 403);

    let (status, pending) = api("GET", format!("/api/runs/{id}/pending"), None).await;
    assert_eq!((status, pending["awaiting_approval"].as_bool()), (200, Some(true)), "{pending}");
    let calls = pending["calls"].as_array().unwrap().clone();
    let shown: Vec<(&str, &Value)> = calls.iter().map(|c| (c["name"].as_str().unwrap(), &c["arguments"])).collect();
    assert_eq!(shown, [("reset_password", &json!({"user": "ada"})), ("reset_password", &json!({"user": "bob"}))]);
    // The run's own view carries them too, for Studio.
    let (_, run) = api("GET", format!("/api/runs/{id}"), None).await;
    assert_eq!(run["pending_calls"], pending["calls"]);

    // Decided through the signal endpoint: one call approved, the other still waits.
    let ada = calls[0]["call_id"].as_str().unwrap();
    let bob = calls[1]["call_id"].as_str().unwrap();
    let body = json!({"decisions": [{"call_id": ada, "approved": true}]}).to_string();
    let (status, partial) = api("POST", format!("/api/runs/{id}/signals/decide_tools"), Some(body)).await;
    assert_eq!((status, partial["place"].as_str()), (200, Some("awaiting_approval")), "{partial}");
    let (_, pending) = api("GET", format!("/api/runs/{id}/pending"), None).await;
    assert_eq!(pending["calls"].as_array().unwrap().len(), 1);
    assert_eq!(pending["calls"][0]["call_id"].as_str(), Some(bob));

    // A decision on a call that does not wait is refused and changes nothing.
    let (status, refused) = api(
        "POST",
        format!("/api/runs/{id}/signals/decide_tools"),
        Some(r#"{"decisions": [{"call_id": "call_nope", "approved": true}]}"#.into()),
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("call_nope"), "{refused}");
    let (_, pending) = api("GET", format!("/api/runs/{id}/pending"), None).await;
    assert_eq!(pending["calls"][0]["call_id"].as_str(), Some(bob));

    let body = json!({"decisions": [{"call_id": bob, "approved": false, "reason": "bob is on leave"}]}).to_string();
    let (status, done) = api("POST", format!("/api/runs/{id}/signals/decide_tools"), Some(body)).await;
    assert_eq!((status, done["status"].as_str()), (200, Some("completed")), "{done}");
    let (_, pending) = api("GET", format!("/api/runs/{id}/pending"), None).await;
    assert_eq!((pending["awaiting_approval"].as_bool(), pending["calls"].clone()), (Some(false), json!([])));
    let (_, run) = api("GET", format!("/api/runs/{id}"), None).await;
    assert!(run.get("pending_calls").is_none(), "{run}");

    // A run of another workflow waits for no decision; an unknown run is a 404.
    let review = runtime.submit(&Reviewing, Review::default()).await.unwrap();
    runtime.drive_by_name(review).await.unwrap();
    let (status, pending) = api("GET", format!("/api/runs/{review}/pending"), None).await;
    assert_eq!((status, pending["awaiting_approval"].as_bool()), (200, Some(false)));
    let (status, _) = api("GET", format!("/api/runs/{}/pending", RunId::new()), None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn schedules_are_created_listed_paused_resumed_and_deleted_over_http_under_the_same_rules() {
    let (address, runtime) = start(ServeOptions::new()).await;
    let body = r#"{"id": "nightly", "workflow": "review", "input": {"text": "Hi"}, "cron": "0 7 * * *", "timezone": "Europe/Berlin", "missed": "catch_up_once"}"#;

    // Cross-site, rebound and form posts are refused, as for runs, and store nothing.
    let foreign = format!(
        "POST /api/schedules HTTP/1.1\r\nHost: {address}\r\nOrigin: http://evil.example\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(raw(&address, foreign).await, 403);
    let form = format!(
        "POST /api/schedules HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(raw(&address, form).await, 415);
    let rebound =
        "DELETE /api/schedules/nightly HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n".to_owned();
    assert_eq!(raw(&address, rebound).await, 403);

    // Bad bodies: the reason, and nothing stored.
    for (bad, status, reason) in [
        (
            r#"{"id": "x", "workflow": "review", "input": {"text": "Hi"}, "cron": "61 * * * *"}"#,
            422,
            "invalid cron expression",
        ),
        (
            r#"{"id": "x", "workflow": "review", "input": {"text": "Hi"}, "cron": "0 25 * * *"}"#,
            422,
            "the hour `25` is out of range 0-23",
        ),
        (r#"{"id": "x", "workflow": "review", "input": {"text": "Hi"}, "every": "soon"}"#, 422, "invalid interval"),
        (
            r#"{"id": "x", "workflow": "review", "input": {"text": "Hi"}, "every": "1h", "overlap": "maybe"}"#,
            422,
            "unknown overlap policy `maybe`",
        ),
        (r#"{"id": "x", "workflow": "review", "input": {"text": "Hi"}}"#, 422, "give one of `cron` and `every`"),
        (r#"{"id": "x", "workflow": "review", "input": {"txt": 1}, "every": "1h"}"#, 422, "the input of a schedule"),
        (r#"{"id": "x", "workflow": "nope", "every": "1h"}"#, 404, "workflow `nope` is not registered"),
        (r#"{"id": "x", "workflow": "review", "every": "1h", "cronn": "typo"}"#, 400, "the body is not valid"),
    ] {
        let (got, answer) = call(&address, "POST", "/api/schedules", Some(bad)).await;
        assert_eq!(got, status, "{bad}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains(reason), "{bad}: {answer}");
    }
    assert!(runtime.schedules().await.unwrap().is_empty(), "no schedule was stored");

    let (status, created) = call(&address, "POST", "/api/schedules", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!((created["id"].as_str(), created["timezone"].as_str()), (Some("nightly"), Some("Europe/Berlin")));
    assert_eq!(created["missed"].as_str(), Some("catch_up_once"));
    assert_eq!(created["overlap"].as_str(), Some("skip"), "the default");
    let (status, _) = call(&address, "POST", "/api/schedules", Some(body)).await;
    assert_eq!(status, 409, "the id is taken");

    let (status, listed) = call(&address, "GET", "/api/schedules", None).await;
    assert_eq!(status, 200);
    assert_eq!(listed["schedules"][0]["next_due"], created["next_due"]);
    assert_eq!(listed["schedules"][0]["last_run"], Value::Null);

    let (status, paused) = call(&address, "POST", "/api/schedules/nightly/pause", Some("{}")).await;
    assert_eq!((status, paused["paused"].as_bool()), (200, Some(true)));
    assert!(runtime.store().load_schedule("nightly").await.unwrap().paused);
    let (status, resumed) = call(&address, "POST", "/api/schedules/nightly/resume", Some("{}")).await;
    assert_eq!((status, resumed["paused"].as_bool()), (200, Some(false)));
    let (status, _) = call(&address, "POST", "/api/schedules/nope/pause", Some("{}")).await;
    assert_eq!(status, 404);

    let (status, deleted) = call(&address, "DELETE", "/api/schedules/nightly", None).await;
    assert_eq!((status, deleted["deleted"].as_bool()), (200, Some(true)));
    let (status, _) = call(&address, "DELETE", "/api/schedules/nightly", None).await;
    assert_eq!(status, 404);
    assert!(runtime.schedules().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_token_guards_the_schedules_too() {
    let (address, _runtime) = start(ServeOptions::new().token("t0ken-123")).await;
    let (status, _) = http(&address, "GET", "/api/schedules", None, None).await;
    assert_eq!(status, 401);
    let (status, _) = http(&address, "DELETE", "/api/schedules/x", None, Some("wrong")).await;
    assert_eq!(status, 401);
    let (status, body) = http(&address, "GET", "/api/schedules", None, Some("t0ken-123")).await;
    assert_eq!((status, body.as_str()), (200, r#"{"schedules":[]}"#));
}

#[tokio::test]
async fn a_run_is_forked_with_edits_over_http_under_the_same_rules() {
    let token = Some("t0ken-123");
    let (address, _runtime) = start_desk("t0ken-123").await;
    let api = |method: &'static str, path: String, body: Option<String>| {
        let address = address.clone();
        async move {
            let (status, body) = http(&address, method, &path, body.as_deref(), token).await;
            (status, serde_json::from_str::<Value>(&body).unwrap_or_else(|e| panic!("{e}: {body}")))
        }
    };
    let start = Some(r#"{"workflow": "desk", "input": "Reset ada and bob", "wait": true}"#.to_owned());
    let (_, run) = api("POST", "/api/runs".into(), start).await;
    let id = run["run_id"].as_str().unwrap().to_owned();

    // Guarded like the rest: the token, and no other origin.
    let body = r#"{"step": 0, "edits": {"system": "be kind"}}"#;
    let (status, _) = http(&address, "POST", &format!("/api/runs/{id}/fork"), Some(body), None).await;
    assert_eq!(status, 401);
    let foreign = format!(
        "POST /api/runs/{id}/fork HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer t0ken-123\r\nOrigin: http://evil.example\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(raw(&address, foreign).await, 403);

    let (status, fork) = api("POST", format!("/api/runs/{id}/fork"), Some(body.to_owned())).await;
    assert_eq!((status, fork["place"].as_str()), (200, Some("awaiting_approval")), "{fork}");
    let fork_id = fork["run_id"].as_str().unwrap().to_owned();
    assert_ne!(fork_id, id);
    assert_eq!(fork["forked_from"], json!({"run_id": id, "step": 0}));
    let (_, shown) = api("GET", format!("/api/runs/{fork_id}"), None).await;
    assert_eq!(shown["state"]["fork_settings"]["system"].as_str(), Some("be kind"));
    assert_eq!(shown["fork"]["changes"], json!(["system prompt changed"]));
    assert_eq!(
        shown["fork"]["text"].as_str(),
        Some(format!("forked from {id} at step 0 with: system prompt changed").as_str())
    );

    // Refused with the reason, and nothing stored: an unknown step, a state that does
    // not fit, a model not registered, a body that does not read.
    let (_, before) = api("GET", "/api/runs".into(), None).await;
    for (body, status) in [
        (r#"{"step": 99, "edits": {"system": "x"}}"#, 404),
        (r#"{"step": 1, "edits": {"state": {"turns": "many"}}}"#, 422),
        (r#"{"step": 1, "edits": {"model": "nope:m"}}"#, 422),
        (r#"{"step": 1, "edits": {"colour": "red"}}"#, 400),
        (r#"{"edits": {}}"#, 400),
    ] {
        let (got, refused) = api("POST", format!("/api/runs/{id}/fork"), Some(body.to_owned())).await;
        assert_eq!(got, status, "{body}: {refused}");
        assert!(refused["error"].as_str().is_some(), "{refused}");
    }
    let (_, after) = api("GET", "/api/runs".into(), None).await;
    assert_eq!(before["runs"].as_array().unwrap().len(), after["runs"].as_array().unwrap().len());
}

/// Looks a user up; needs no approval.
#[tool]
async fn look_up(user: String) -> String {
    format!("{user} exists")
}

#[tokio::test]
async fn a_run_stopped_at_a_limit_shows_as_stopped_and_is_listed_apart() {
    use loopstack::llm::{Agent, ScriptedModel};
    // `looper` asks for a tool at every turn, past its budget of 2 turns; `answerer` answers.
    let looping = ScriptedModel::from_fn(|request: &loopstack::llm::ChatRequest| {
        let n = request.messages.len();
        Ok(ScriptedModel::new().tool_calls_response([("look_up", json!({ "user": format!("u{n}") }))]))
    });
    let tools = ToolRegistry::new().with(LookUp).unwrap();
    let looper = Agent::new(looping, "m", tools).max_turns(2).named("looper").unwrap();
    let answerer = Agent::new(ScriptedModel::new().text("Hi."), "m", ToolRegistry::new()).named("answerer").unwrap();
    let address = serve_runtime(Runtime::new().register(looper).register(answerer)).await;

    let reason = "the run reached the budget of 2 model turns";
    let (status, stopped) =
        call(&address, "POST", "/api/runs", Some(r#"{"workflow": "looper", "input": "Go", "wait": true}"#)).await;
    assert_eq!((status, stopped["status"].as_str(), stopped["error"].as_str()), (200, Some("stopped"), Some(reason)));
    let id = stopped["run_id"].as_str().unwrap().to_owned();
    let (status, answered) =
        call(&address, "POST", "/api/runs", Some(r#"{"workflow": "answerer", "input": "Hi", "wait": true}"#)).await;
    assert_eq!((status, answered["status"].as_str()), (200, Some("completed")), "{answered}");
    let (_, shown) = call(&address, "GET", &format!("/api/runs/{id}"), None).await;
    assert_eq!((shown["status"].as_str(), shown["error"].as_str()), (Some("stopped"), Some(reason)));

    let (status, listed) = call(&address, "GET", "/api/runs?status=stopped", None).await;
    let ids: Vec<&str> = listed["runs"].as_array().unwrap().iter().filter_map(|r| r["run_id"].as_str()).collect();
    assert_eq!((status, ids), (200, vec![id.as_str()]));
    let (_, listed) = call(&address, "GET", "/api/runs?status=completed", None).await;
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1);
    assert_eq!(listed["runs"][0]["run_id"], answered["run_id"]);

    // A stopped run may be retried, as a failed one: under the same limit it stops again.
    let (status, retried) = call(&address, "POST", &format!("/api/runs/{id}/retry"), None).await;
    assert_eq!((status, retried["status"].as_str()), (200, Some("stopped")), "{retried}");
    // Finished: it takes no signal.
    let decisions = r#"{"decisions": []}"#;
    let (status, refused) =
        call(&address, "POST", &format!("/api/runs/{id}/signals/decide_tools"), Some(decisions)).await;
    assert_eq!(status, 409, "{refused}");
}

/// Serves `runtime` on a loopback port without a token: its address.
async fn serve_runtime(runtime: Runtime) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(serve(listener, runtime, ServeOptions::new()));
    address
}

/// What a mailbox was sent, in order.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Received {
    payloads: Vec<Value>,
}

/// Keeps whatever JSON it is sent: its signal's payload is a `serde_json::Value`.
struct Mailbox;

#[workflow(name = "mailbox", state = Received)]
impl Mailbox {
    #[transition(to = Open)]
    async fn open(&self, _received: &mut Received, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Open, to = Open, wait)]
    async fn deliver(&self, received: &mut Received, _cx: &mut RunContext, payload: Value) -> Result<()> {
        received.payloads.push(payload);
        Ok(())
    }

    #[transition(from = Open, to = End, wait)]
    async fn close(&self, _received: &mut Received, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn any_json_is_the_payload_of_a_signal_that_takes_a_json_value() {
    let address = serve_runtime(Runtime::new().register(Mailbox)).await;
    // Its published schema, the one payloads are checked against, takes anything.
    let (_, workflows) = call(&address, "GET", "/api/workflows", None).await;
    assert_eq!(workflows["workflows"][0]["signals"][0]["payload_schema"], json!({}), "{workflows}");

    let start = r#"{"workflow": "mailbox", "input": {"payloads": []}, "wait": true}"#;
    let (status, run) = call(&address, "POST", "/api/runs", Some(start)).await;
    assert_eq!(status, 200, "{run}");
    let id = run["run_id"].as_str().unwrap().to_owned();
    let sent = [json!({"any": {"thing": [1, 2]}}), json!([1, "two"]), json!("text"), json!(42), json!(null)];
    for payload in &sent {
        let body = payload.to_string();
        let (status, answer) = call(&address, "POST", &format!("/api/runs/{id}/signals/deliver"), Some(&body)).await;
        assert_eq!((status, answer["status"].as_str()), (200, Some("waiting")), "{payload}: {answer}");
    }
    let (_, shown) = call(&address, "GET", &format!("/api/runs/{id}"), None).await;
    assert_eq!(shown["state"]["payloads"], json!(sent));
}

#[tokio::test]
async fn an_interval_too_long_to_hold_is_refused_with_the_reason() {
    let (address, runtime) = start(ServeOptions::new()).await;
    // Each part fits; their sum does not.
    let every = "213503982334d".repeat(1001);
    for field in ["every", "grace"] {
        let mut body = json!({"id": "x", "workflow": "review", "input": {"text": "Hi"}, "every": "1h"});
        body[field] = json!(every);
        let (status, answer) = call(&address, "POST", "/api/schedules", Some(&body.to_string())).await;
        assert_eq!(status, 422, "{field}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains("too long"), "{field}: {answer}");
    }
    assert!(runtime.schedules().await.unwrap().is_empty(), "no schedule was stored");
}

/// `review` as a later deploy has it: version 2, whose migration from version 1 panics.
struct ReviewingV2;

#[workflow(name = "review", version = 2, input = Review)]
impl ReviewingV2 {
    #[transition(to = Drafted)]
    async fn draft(&self, _review: &mut Review, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Drafted, to = End, wait)]
    async fn approve(&self, review: &mut Review, _cx: &mut RunContext, approval: Approval) -> Result<()> {
        review.approved_by = Some(approval.reviewer);
        Ok(())
    }

    #[migrate(from = 1)]
    fn from_v1(_old: Review) -> (Review, ReviewingV2Place) {
        panic!("the migration is broken")
    }
}

#[tokio::test]
async fn a_signal_or_resume_refused_for_the_runs_version_is_an_error_and_changes_nothing() {
    let store: std::sync::Arc<dyn loopstack::Store> = std::sync::Arc::new(loopstack::MemoryStore::new());
    let v1 = Runtime::with_shared_store(store.clone()).register(Reviewing);
    let v2 = Runtime::with_shared_store(store.clone()).register(ReviewingV2);
    let (v1_address, v2_address) = (serve_runtime(v1.clone()).await, serve_runtime(v2.clone()).await);
    let old = v1.start(&Reviewing, Review::default()).await.unwrap().run_id;
    let new = v2.start(&ReviewingV2, Review::default()).await.unwrap().run_id;

    // Version 2's build cannot migrate the old run (its migration panics); version 1's
    // cannot drive the newer run.
    for (address, id, reason) in
        [(&v2_address, old, "could not be migrated"), (&v1_address, new, "which this build cannot drive")]
    {
        let before = store.load_run(id).await.unwrap();
        for path in [format!("/api/runs/{id}/signals/approve"), format!("/api/runs/{id}/resume")] {
            let (status, answer) = call(address, "POST", &path, Some(r#"{"reviewer": "ada"}"#)).await;
            assert!([409, 422].contains(&status), "{path}: {status} {answer}");
            assert!(answer["error"].as_str().is_some_and(|e| e.contains(reason)), "{path}: {answer}");
        }
        let after = store.load_run(id).await.unwrap();
        assert_eq!(
            (after.status, after.version, after.step, &after.place),
            (before.status, before.version, before.step, &before.place)
        );
    }
}
