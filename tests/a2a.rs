//! A2A 1.0 at `/a2a`, over a real socket: agent cards, a task that completes with
//! its answer, a call approved through `input-required` (and across a restart of
//! the server), a chat's turns on one task, the stream of a task, a message sent
//! twice, and every bad request answered with the protocol's error. The official
//! SDKs check the same over the wire in `a2a_sdk_*` below.

use std::sync::Arc;

use loopstack::llm::{Agent, ScriptedModel};
use loopstack::prelude::*;
use loopstack::serve::{A2A_CONTEXT_LABEL, ServeOptions, serve};
use loopstack::{MemoryStore, RunQuery, Store};
use serde_json::{Value, json};

mod common;
use common::stores::on_every_store;

/// Today's weather in a city.
#[tool]
async fn weather(city: String) -> Result<String, ToolError> {
    Ok(format!("Sunny in {city}"))
}

/// Restarts a service; a person approves each call.
#[tool(approve)]
async fn restart_service(service: String) -> Result<String, ToolError> {
    Ok(format!("{service} restarted"))
}

/// Calls `tool` first, then answers with the tool's result (or, for a chat's later
/// turns, with what it was told last).
fn model(tool: &'static str, arguments: Value) -> ScriptedModel {
    ScriptedModel::from_fn(move |req| {
        let last = req.messages.last().unwrap();
        Ok(match last.tool_results_iter().next() {
            Some(result) => ScriptedModel::new().text_response(format!("Done: {}", result.content)),
            None if req.messages.len() == 1 => ScriptedModel::new().tool_call_response(tool, arguments.clone()),
            None => ScriptedModel::new().text_response(format!("You said: {}", last.text())),
        })
    })
}

fn runtime(store: Arc<dyn Store>) -> Runtime {
    let weather =
        Agent::new(model("weather", json!({"city": "Paris"})), "m", ToolRegistry::new().with(Weather).unwrap())
            .named("weather")
            .unwrap();
    let ops = Agent::new(
        model("restart_service", json!({"service": "api"})),
        "m",
        ToolRegistry::new().with(RestartService).unwrap(),
    )
    .named("ops")
    .unwrap();
    let chat = Agent::new(model("weather", json!({"city": "Oslo"})), "m", ToolRegistry::new().with(Weather).unwrap())
        .chat(true)
        .named("chat")
        .unwrap();
    Runtime::with_shared_store(store).register(weather).register(ops).register(chat)
}

/// Serves `runtime`; its address and the task serving it.
async fn start(runtime: Runtime, options: ServeOptions) -> (String, tokio::task::JoinHandle<std::io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(serve(listener, runtime, options));
    (address, task)
}

fn client() -> reqwest::Client {
    loopstack_model::http::client_builder().timeout(std::time::Duration::from_secs(30)).build().unwrap()
}

/// One JSON-RPC call of `method` on `path`; the response's body.
async fn call(address: &str, path: &str, method: &str, params: Value) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params });
    let response =
        client().post(format!("http://{address}{path}")).header("A2A-Version", "1.0").json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let value: Value = response.json().await.unwrap();
    assert_eq!((&value["jsonrpc"], &value["id"]), (&json!("2.0"), &json!(7)), "{value}");
    value
}

/// A streaming call: the results of its events, in order.
async fn stream(address: &str, path: &str, method: &str, params: Value) -> Vec<Value> {
    let body = json!({ "jsonrpc": "2.0", "id": "s", "method": method, "params": params });
    let response = client()
        .post(format!("http://{address}{path}"))
        .header("A2A-Version", "1.0")
        .header("Accept", "text/event-stream")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|data| {
            let value: Value = serde_json::from_str(data).unwrap();
            assert_eq!(value["id"], "s", "{value}");
            value
        })
        .collect()
}

fn message(text: &str, id: &str) -> Value {
    json!({ "messageId": id, "role": "ROLE_USER", "parts": [{ "text": text }] })
}

fn result(value: &Value) -> &Value {
    assert!(value.get("error").is_none(), "an error: {value}");
    &value["result"]
}

fn error_code(value: &Value) -> i64 {
    value["error"]["code"].as_i64().unwrap_or_else(|| panic!("not an error: {value}"))
}

async fn an_agent_answers_a_message_as_a_completed_task(store: Arc<dyn Store>) {
    let (address, server) = start(runtime(store.clone()), ServeOptions::new()).await;
    let sent =
        call(&address, "/a2a/weather", "SendMessage", json!({ "message": message("Weather in Paris?", "m-1") })).await;
    let task = &result(&sent)["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(
        task["artifacts"],
        json!([{
            "artifactId": "result", "name": "result", "description": "The agent's answer.",
            "parts": [{ "text": "Done: Sunny in Paris" }],
        }])
    );
    let history: Vec<(&str, &str)> = task["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["parts"][0]["text"].as_str().unwrap()))
        .collect();
    assert_eq!(history, [("ROLE_USER", "Weather in Paris?"), ("ROLE_AGENT", "Done: Sunny in Paris")]);
    // The task is the run, its context kept with it.
    let id = task["id"].as_str().unwrap();
    let context = task["contextId"].as_str().unwrap();
    let record = store.load_run(id.parse().unwrap()).await.unwrap();
    assert_eq!(
        (record.workflow.as_ref(), record.labels.get(A2A_CONTEXT_LABEL).map(String::as_str)),
        ("weather", Some(context))
    );
    let got = call(&address, "/a2a/weather", "GetTask", json!({ "id": id, "historyLength": 1 })).await;
    let got = result(&got);
    assert_eq!(
        (&got["id"], &got["contextId"], &got["status"]["state"]),
        (&json!(id), &json!(context), &json!("TASK_STATE_COMPLETED"))
    );
    assert_eq!(got["history"].as_array().unwrap().len(), 1, "{got}");
    // Sent again (the answer was lost): the same task, no second run.
    let again =
        call(&address, "/a2a/weather", "SendMessage", json!({ "message": message("Weather in Paris?", "m-1") })).await;
    assert_eq!(result(&again)["task"]["id"], json!(id));
    let runs = store.list_runs(&RunQuery::new().workflow("weather")).await.unwrap();
    assert_eq!(runs.runs.len(), 1);
    // A client's context is kept.
    let mut given = message("And in Oslo?", "m-2");
    given["contextId"] = json!("ctx-42");
    let sent = call(&address, "/a2a/weather", "SendMessage", json!({ "message": given })).await;
    assert_eq!(result(&sent)["task"]["contextId"], "ctx-42");
    server.abort();
}

async fn an_approval_is_input_required_and_the_next_message_decides_it(store: Arc<dyn Store>) {
    let (address, server) = start(runtime(store.clone()), ServeOptions::new()).await;
    let sent =
        call(&address, "/a2a/ops", "SendMessage", json!({ "message": message("Restart the api", "m-ops") })).await;
    let task = &result(&sent)["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{task}");
    let parts = task["status"]["message"]["parts"].as_array().unwrap();
    assert!(parts[0]["text"].as_str().unwrap().contains("Approve the call of `restart_service`"), "{parts:?}");
    let interrupt = &parts[1]["data"]["interrupts"][0];
    assert_eq!(interrupt["reason"], "tool_approval");
    assert_eq!(interrupt["responseSchema"]["required"], json!(["approved"]));
    let task_id = task["id"].as_str().unwrap().to_owned();
    // The server goes; the run waits in the store.
    server.abort();
    let _ = server.await;
    let (address, server) = start(runtime(store.clone()), ServeOptions::new()).await;
    // An answer that says nothing is refused, and the run still waits.
    let mut vague = message("maybe later", "m-vague");
    vague["taskId"] = json!(task_id);
    let refused = call(&address, "/a2a/ops", "SendMessage", json!({ "message": vague })).await;
    assert_eq!(error_code(&refused), -32602);
    assert!(refused["error"]["message"].as_str().unwrap().contains("`approve` or `deny`"), "{refused}");
    let mut answer = json!({ "messageId": "m-yes", "role": "ROLE_USER", "parts": [{ "data": { "approved": true } }] });
    answer["taskId"] = json!(task_id);
    let done = call(&address, "/a2a/ops", "SendMessage", json!({ "message": answer })).await;
    let task = &result(&done)["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "Done: api restarted");
    // An ended task takes no message.
    let mut late = message("again", "m-late");
    late["taskId"] = json!(task_id);
    let refused = call(&address, "/a2a/ops", "SendMessage", json!({ "message": late })).await;
    assert_eq!(error_code(&refused), -32004);
    // A denial reaches the model as the call's result.
    let sent =
        call(&address, "/a2a/ops", "SendMessage", json!({ "message": message("Restart the api", "m-ops-2") })).await;
    let mut deny = message("deny", "m-no");
    deny["taskId"] = result(&sent)["task"]["id"].clone();
    let done = call(&address, "/a2a/ops", "SendMessage", json!({ "message": deny })).await;
    let answer = result(&done)["task"]["artifacts"][0]["parts"][0]["text"].as_str().unwrap().to_owned();
    assert!(answer.contains("denied"), "{answer}");
    server.abort();
}

async fn a_chat_takes_its_turns_on_one_task(store: Arc<dyn Store>) {
    let (address, server) = start(runtime(store), ServeOptions::new()).await;
    let sent =
        call(&address, "/a2a/chat", "SendMessage", json!({ "message": message("Weather in Oslo?", "c-1") })).await;
    let task = &result(&sent)["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{task}");
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "Done: Sunny in Oslo");
    let mut next = message("Thanks", "c-2");
    next["taskId"] = task["id"].clone();
    let sent = call(&address, "/a2a/chat", "SendMessage", json!({ "message": next })).await;
    let task = &result(&sent)["task"];
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "You said: Thanks");
    assert_eq!(task["history"].as_array().unwrap().len(), 4, "{task}");
    server.abort();
}

#[tokio::test]
async fn a_streamed_task_says_each_step_and_ends_with_its_answer() {
    let (address, server) = start(runtime(Arc::new(MemoryStore::new())), ServeOptions::new()).await;
    let events =
        stream(&address, "/a2a/weather", "SendStreamingMessage", json!({ "message": message("Paris?", "s-1") })).await;
    let kinds: Vec<String> = events
        .iter()
        .map(|e| {
            let result = result(e).as_object().unwrap();
            let (kind, value) = result.iter().next().unwrap();
            match kind.as_str() {
                "statusUpdate" => {
                    let data = &value["status"]["message"]["parts"][0]["data"];
                    let what = data.as_object().and_then(|d| d.keys().next().cloned()).unwrap_or_default();
                    format!("status {} {what}", value["status"]["state"].as_str().unwrap())
                }
                kind => kind.to_owned(),
            }
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "task",
            "status TASK_STATE_WORKING ",
            "status TASK_STATE_WORKING toolCall",
            "status TASK_STATE_WORKING toolResult",
            "status TASK_STATE_WORKING ",
            "artifactUpdate",
            "status TASK_STATE_COMPLETED ",
        ]
    );
    let task = &result(&events[0])["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED");
    assert_eq!(result(&events[4])["statusUpdate"]["status"]["message"]["parts"][0]["text"], "Done: Sunny in Paris");
    assert_eq!(result(&events[5])["artifactUpdate"]["artifact"]["parts"][0]["text"], "Done: Sunny in Paris");
    // A task that ended is read, not followed: the stream's one event is the error.
    let id = task["id"].clone();
    let refused = stream(&address, "/a2a/weather", "SubscribeToTask", json!({ "id": id })).await;
    assert_eq!((refused.len(), error_code(&refused[0])), (1, -32004));
    server.abort();
}

#[tokio::test]
async fn cards_describe_the_agents_and_their_endpoints() {
    let (address, server) = start(runtime(Arc::new(MemoryStore::new())), ServeOptions::new()).await;
    let card: Value = client()
        .get(format!("http://{address}/a2a/ops/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(card["name"], "ops");
    let url = format!("http://{address}/a2a/ops");
    assert_eq!(
        card["supportedInterfaces"],
        json!([
            { "url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0" },
            { "url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3" },
        ])
    );
    // What a 0.3 client reads.
    assert_eq!(
        (&card["url"], &card["protocolVersion"], &card["preferredTransport"]),
        (&json!(url), &json!("0.3.0"), &json!("JSONRPC"))
    );
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["skills"][0]["id"], "ops");
    assert!(card.get("securitySchemes").is_none());
    let root: Value = client()
        .get(format!("http://{address}/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let skills: Vec<&str> = root["skills"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(skills, ["chat", "ops", "weather"]);
    assert_eq!(root["supportedInterfaces"][0]["url"], format!("http://{address}/a2a"));
    // The root endpoint takes the agent as `tenant`, and needs one here.
    let sent =
        call(&address, "/a2a", "SendMessage", json!({ "message": message("Paris?", "r-1"), "tenant": "weather" }))
            .await;
    assert_eq!(result(&sent)["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    let refused = call(&address, "/a2a", "SendMessage", json!({ "message": message("Paris?", "r-2") })).await;
    assert_eq!(error_code(&refused), -32602);
    assert!(refused["error"]["message"].as_str().unwrap().contains("chat, ops, weather"), "{refused}");
    server.abort();
    // With a token, the card says how to send it, and is public; the agent is not.
    let (address, server) = start(runtime(Arc::new(MemoryStore::new())), ServeOptions::new().token("s3cret")).await;
    let url = format!("http://{address}/a2a/ops/.well-known/agent-card.json");
    let card: Value = client().get(&url).send().await.unwrap().json().await.unwrap();
    let rpc = json!({ "jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": { "id": "x" } });
    let refused = client().post(format!("http://{address}/a2a/ops")).json(&rpc).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let root = client().get(format!("http://{address}/a2a/.well-known/agent-card.json")).send().await.unwrap();
    assert_eq!(root.status(), 200);
    assert_eq!(card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer");
    assert_eq!(card["securityRequirements"], json!([{ "schemes": { "bearer": { "list": [] } } }]));
    server.abort();
}

#[tokio::test]
async fn bad_requests_get_the_protocols_errors_and_change_nothing() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (address, server) = start(runtime(store.clone()), ServeOptions::new()).await;
    let post = |body: String, version: Option<&'static str>| {
        let address = address.clone();
        async move {
            let mut request = client()
                .post(format!("http://{address}/a2a/weather"))
                .header("Content-Type", "application/json")
                .body(body);
            if let Some(version) = version {
                request = request.header("A2A-Version", version);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }
    };
    assert_eq!(error_code(&post("{not json".into(), None).await), -32700);
    assert_eq!(error_code(&post(json!({ "id": 1 }).to_string(), None).await), -32600);
    let rpc = |method: &str, params: Value| json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let version = post(rpc("GetTask", json!({ "id": "x" })).to_string(), Some("2.0")).await;
    assert_eq!(error_code(&version), -32009);
    assert_eq!(error_code(&post(rpc("tasks/frobnicate", json!({})).to_string(), None).await), -32601);
    assert_eq!(error_code(&call(&address, "/a2a/weather", "GetTask", json!({ "id": "nope" })).await), -32001);
    let unknown = RunId::new().to_string();
    assert_eq!(error_code(&call(&address, "/a2a/weather", "CancelTask", json!({ "id": unknown })).await), -32001);
    assert_eq!(error_code(&call(&address, "/a2a/weather", "GetTask", json!({ "task": 1 })).await), -32602);
    let file = json!({ "messageId": "f", "role": "ROLE_USER", "parts": [{ "url": "https://example.com/a.pdf" }] });
    assert_eq!(error_code(&call(&address, "/a2a/weather", "SendMessage", json!({ "message": file })).await), -32005);
    let long =
        json!({ "messageId": "m", "contextId": "c".repeat(257), "role": "ROLE_USER", "parts": [{ "text": "hi" }] });
    assert_eq!(error_code(&call(&address, "/a2a/weather", "SendMessage", json!({ "message": long })).await), -32602);
    let agent = json!({ "messageId": "a", "role": "ROLE_AGENT", "parts": [{ "text": "hi" }] });
    assert_eq!(error_code(&call(&address, "/a2a/weather", "SendMessage", json!({ "message": agent })).await), -32602);
    let push = call(&address, "/a2a/weather", "CreateTaskPushNotificationConfig", json!({})).await;
    assert_eq!(error_code(&push), -32003);
    assert!(store.list_runs(&RunQuery::new()).await.unwrap().runs.is_empty());
    // A task of another agent is not this endpoint's; an ended one cannot be cancelled.
    let sent = call(&address, "/a2a/weather", "SendMessage", json!({ "message": message("Paris?", "b-1") })).await;
    let id = result(&sent)["task"]["id"].clone();
    assert_eq!(error_code(&call(&address, "/a2a/ops", "GetTask", json!({ "id": id })).await), -32001);
    assert_eq!(error_code(&call(&address, "/a2a/weather", "CancelTask", json!({ "id": id })).await), -32002);
    server.abort();
}

#[tokio::test]
async fn tasks_are_listed_by_context_and_state_a_page_at_a_time() {
    let (address, server) = start(runtime(Arc::new(MemoryStore::new())), ServeOptions::new()).await;
    for (id, context) in [("l-1", "ctx-a"), ("l-2", "ctx-a"), ("l-3", "ctx-b")] {
        let mut m = message("Paris?", id);
        m["contextId"] = json!(context);
        call(&address, "/a2a/weather", "SendMessage", json!({ "message": m })).await;
    }
    call(&address, "/a2a/ops", "SendMessage", json!({ "message": message("Restart", "l-4") })).await;
    let listed = call(&address, "/a2a/weather", "ListTasks", json!({ "contextId": "ctx-a" })).await;
    let listed = result(&listed);
    assert_eq!(
        (&listed["totalSize"], &listed["pageSize"], &listed["nextPageToken"]),
        (&json!(2), &json!(2), &json!(""))
    );
    assert!(
        listed["tasks"].as_array().unwrap().iter().all(|t| t["contextId"] == "ctx-a" && t.get("artifacts").is_none())
    );
    // A page at a time, newest first.
    let first = call(&address, "/a2a/weather", "ListTasks", json!({ "pageSize": 2 })).await;
    let first = result(&first);
    assert_eq!((&first["totalSize"], &first["pageSize"]), (&json!(3), &json!(2)));
    let token = first["nextPageToken"].as_str().unwrap().to_owned();
    let second = call(
        &address,
        "/a2a/weather",
        "ListTasks",
        json!({ "pageSize": 2, "pageToken": token, "includeArtifacts": true }),
    )
    .await;
    let second = result(&second);
    assert_eq!((&second["pageSize"], &second["nextPageToken"]), (&json!(1), &json!("")));
    assert_eq!(second["tasks"][0]["artifacts"][0]["parts"][0]["text"], "Done: Sunny in Paris");
    // By state: the agent that waits for an approval, on the root endpoint.
    let waiting = call(&address, "/a2a", "ListTasks", json!({ "status": "TASK_STATE_INPUT_REQUIRED" })).await;
    let waiting = result(&waiting)["tasks"].as_array().unwrap().clone();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    for bad in [
        json!({ "pageSize": 0 }),
        json!({ "pageSize": 101 }),
        json!({ "pageToken": "nope" }),
        json!({ "historyLength": -1 }),
        json!({ "status": "BOGUS" }),
    ] {
        assert_eq!(error_code(&call(&address, "/a2a/weather", "ListTasks", bad.clone()).await), -32602, "{bad}");
    }
    server.abort();
}

#[tokio::test]
async fn a_task_that_needs_input_is_cancelled() {
    let (address, server) = start(runtime(Arc::new(MemoryStore::new())), ServeOptions::new()).await;
    let sent = call(&address, "/a2a/ops", "SendMessage", json!({ "message": message("Restart", "x-1") })).await;
    let id = result(&sent)["task"]["id"].clone();
    let cancelled = call(&address, "/a2a/ops", "CancelTask", json!({ "id": id })).await;
    assert_eq!(result(&cancelled)["status"]["state"], "TASK_STATE_CANCELED");
    server.abort();
}

on_every_store!(an_agent_answers_a_message_as_a_completed_task);
on_every_store!(an_approval_is_input_required_and_the_next_message_decides_it);
on_every_store!(a_chat_takes_its_turns_on_one_task);

/// The pinned version `.ci/protocol-clients` installs of the official Python SDK.
const A2A_PYTHON_VERSION: &str = "1.3.0";

/// A Python with the official A2A SDK, or `None` (the test is skipped, saying so)
/// when there is none outside CI.
fn python() -> Option<std::path::PathBuf> {
    let python = std::env::var_os("LOOPSTACK_A2A_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/a2a-python/bin/python"));
    let has_sdk = std::process::Command::new(&python)
        .args(["-c", "import a2a.client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_sdk {
        return Some(python);
    }
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !ci,
        "the A2A SDK tests need the official Python SDK at {} where CI is set: run `.ci/protocol-clients` (as \
         .ci/run does), or set LOOPSTACK_A2A_PYTHON to a Python that has `a2a-sdk`",
        python.display()
    );
    use std::io::Write as _;
    // Straight to the terminal: the harness hides the output of tests that pass.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: the A2A SDK test needs the official Python SDK at {}; run `.ci/protocol-clients` (python3 -m venv \
         and pip install a2a-sdk=={A2A_PYTHON_VERSION} under target/a2a-python), then `cargo test --test a2a \
         --features a2a,macros,sqlite,postgres`",
        python.display()
    );
    None
}

/// Runs `script` with `program` and `args`; the JSON object it printed.
async fn script(program: &std::path::Path, script: &std::path::Path, args: &[&str]) -> Value {
    let output = tokio::process::Command::new(program).arg(script).args(args).kill_on_drop(true).output();
    let output =
        tokio::time::timeout(std::time::Duration::from_secs(120), output).await.expect("the client hangs").unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the client failed: {stderr}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

/// The first key of an object: a `StreamResponse`'s kind.
fn kind(event: &Value) -> &str {
    event.as_object().and_then(|o| o.keys().next()).map_or("", String::as_str)
}

#[tokio::test]
async fn the_official_python_sdk_streams_approves_cancels_and_chats() {
    let Some(python) = python() else { return };
    let (address, server) = start(runtime(Arc::new(MemoryStore::new())), ServeOptions::new()).await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/a2a_sdk_client.py");
    let seen = script(&python, &path, &[&format!("http://{address}")]).await;
    let stream = seen["stream"].as_array().unwrap();
    let kinds: Vec<&str> = stream.iter().map(kind).collect();
    assert_eq!(kinds.first(), Some(&"task"), "{seen}");
    assert_eq!(kinds[kinds.len() - 2..], ["artifactUpdate", "statusUpdate"], "{seen}");
    assert_eq!(stream.last().unwrap()["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED");
    let task = &seen["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "Done: Sunny in Paris");
    assert_eq!(task["history"].as_array().unwrap().len(), 2);
    assert_eq!(seen["needs_input"][0]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let approved = &seen["approved"][0]["task"];
    assert_eq!(approved["status"]["state"], "TASK_STATE_COMPLETED", "{seen}");
    assert_eq!(approved["artifacts"][0]["parts"][0]["text"], "Done: api restarted");
    assert_eq!(seen["cancelled"]["status"]["state"], "TASK_STATE_CANCELED");
    assert_eq!(seen["unknown"], "TaskNotFoundError");
    let first = &seen["chat_first"]["statusUpdate"]["status"];
    assert_eq!(
        (&first["state"], &first["message"]["parts"][0]["text"]),
        (&json!("TASK_STATE_INPUT_REQUIRED"), &json!("Done: Sunny in Oslo"))
    );
    let second = &seen["chat_second"]["statusUpdate"]["status"];
    assert_eq!(second["message"]["parts"][0]["text"], "You said: Thanks", "{seen}");
    // Subscribing to a task that waits for input: the task as it stands, then its state again.
    let subscribed = seen["subscribe"].as_array().unwrap();
    assert_eq!(subscribed[0]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{seen}");
    // The SDK's 0.3 client: the same task, in 0.3's words, read back as 1.0's by the SDK.
    assert_eq!(seen["legacy_transport"], "CompatJsonRpcTransport");
    let legacy = seen["legacy_stream"].as_array().unwrap();
    assert_eq!(legacy[0]["task"]["status"]["state"], "TASK_STATE_SUBMITTED", "{seen}");
    assert_eq!(legacy.last().unwrap()["statusUpdate"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{seen}");
    let approved = seen["legacy_approved"].as_array().unwrap();
    assert_eq!(approved.last().unwrap()["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED", "{seen}");
    assert_eq!(seen["legacy_task"]["artifacts"][0]["parts"][0]["text"], "Done: api restarted", "{seen}");
    server.abort();
}

/// The pinned version `.ci/protocol-clients` installs of the official JavaScript SDK.
const A2A_JS_VERSION: &str = "1.3.0";

/// The folder with Node.js 22 and `@a2a-js/sdk` in its `node_modules`, or `None`
/// (the test is skipped, saying so) when it is missing outside CI.
fn node_clients() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("LOOPSTACK_PROTOCOL_CLIENTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/protocol-clients"));
    let installed =
        ["node_modules/.bin/node", "node_modules/@a2a-js/sdk/package.json", "node_modules/express/package.json"];
    if installed.iter().all(|p| dir.join(p).exists()) {
        return Some(dir);
    }
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !ci,
        "the A2A JavaScript SDK test needs {} where CI is set: run `.ci/protocol-clients` (as .ci/run does)",
        dir.display()
    );
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "skipped: the A2A JavaScript SDK test needs {}; run `.ci/protocol-clients` (npm installs node@22 and \
         @a2a-js/sdk@{A2A_JS_VERSION} under target/protocol-clients), then `cargo test --test a2a --features \
         a2a,macros,sqlite,postgres`",
        dir.display()
    );
    None
}

#[tokio::test]
async fn the_official_javascript_sdk_streams_and_approves() {
    let Some(dir) = node_clients() else { return };
    let (address, server) = start(runtime(Arc::new(MemoryStore::new())), ServeOptions::new()).await;
    // Node resolves the script's imports from where the script is: next to the SDK.
    let copy = dir.join("a2a_js_client.mjs");
    std::fs::copy(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/a2a_js_client.mjs"), &copy).unwrap();
    let seen = script(&dir.join("node_modules/.bin/node"), &copy, &[&format!("http://{address}")]).await;
    let stream: Vec<&str> = seen["stream"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert_eq!(stream.first(), Some(&"task"), "{seen}");
    assert_eq!(stream[stream.len() - 2..], ["artifactUpdate", "statusUpdate TASK_STATE_COMPLETED"], "{seen}");
    assert_eq!(seen["answer"], "Done: Sunny in Paris");
    assert_eq!(
        seen["task"],
        json!({ "state": "TASK_STATE_COMPLETED", "history": 2, "artifact": "Done: Sunny in Paris" })
    );
    assert_eq!(seen["waiting"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert!(seen["waiting"]["asks"].as_str().unwrap().contains("restart_service"), "{seen}");
    assert_eq!(seen["approved"], json!({ "state": "TASK_STATE_COMPLETED", "artifact": "Done: api restarted" }));
    assert_eq!(seen["unknown"], "JsonRpcTaskNotFoundError");
    server.abort();
}

// The client: remote A2A agents as tools.

use loopstack::llm::a2a::{A2aAgent, A2aError};
use loopstack::{Effect, Tool, ToolContext};

#[tokio::test]
async fn a_remote_agent_is_a_tool_whose_call_is_one_task_however_often_it_runs() {
    let remote: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (address, server) = start(runtime(remote.clone()), ServeOptions::new()).await;
    let weather = A2aAgent::connect(format!("http://{address}/a2a/weather")).await.unwrap();
    assert_eq!((weather.name(), weather.endpoint()), ("weather", format!("http://{address}/a2a/weather").as_str()));
    assert!(weather.description().contains("remote agent `weather`"), "{}", weather.description());
    assert_eq!(weather.options().effect, Effect::Idempotent);
    let cx = ToolContext::new("call-1", "weather").with_run_id(RunId::new()).with_step(3);
    let first = weather.call(json!({ "message": "Weather in Paris?" }), &cx).await.unwrap();
    assert_eq!(first.to_text(), "Done: Sunny in Paris");
    // The call again (its run resumed after a crash): the same task, no second run.
    let again = weather.call(json!({ "message": "Weather in Paris?" }), &cx).await.unwrap();
    assert_eq!(again.value().unwrap()["task_id"], first.value().unwrap()["task_id"]);
    assert_eq!(remote.list_runs(&RunQuery::new()).await.unwrap().runs.len(), 1);
    // The calls of one run share a context.
    let record = remote.list_runs(&RunQuery::new()).await.unwrap().runs.remove(0);
    assert_eq!(record.labels[A2A_CONTEXT_LABEL], format!("loopstack:{}", cx.run_id().unwrap()));
    // Input the remote agent asks for: its question and task, then the answer.
    let ops = A2aAgent::connect(format!("http://{address}/a2a/ops/")).await.unwrap();
    let asked = ops.call(json!({ "message": "Restart the api" }), &ToolContext::new("c2", "ops")).await.unwrap();
    let task = asked.value().unwrap()["task_id"].as_str().unwrap().to_owned();
    assert_eq!(asked.value().unwrap()["state"], "TASK_STATE_INPUT_REQUIRED");
    assert!(asked.to_text().contains("`ops` needs input") && asked.to_text().contains(&task), "{}", asked.to_text());
    let done =
        ops.call(json!({ "message": "approve", "task_id": task }), &ToolContext::new("c3", "ops")).await.unwrap();
    assert_eq!(done.to_text(), "Done: api restarted");
    // A message the remote agent refuses is an error the model reads.
    let refused =
        ops.call(json!({ "message": "approve", "task_id": task }), &ToolContext::new("c4", "ops")).await.unwrap_err();
    assert!(refused.to_string().contains("-32004"), "{refused}");
    let bad = ops.call(json!({ "text": "hi" }), &ToolContext::new("c5", "ops")).await.unwrap_err();
    assert_eq!(bad.kind(), loopstack::ToolErrorKind::InvalidArguments);
    server.abort();
}

#[tokio::test]
async fn a_local_agent_delegates_to_a_remote_one_over_a2a() {
    let (address, server) = start(runtime(Arc::new(MemoryStore::new())), ServeOptions::new().token("t0k")).await;
    let url = format!("http://{address}/a2a/weather");
    // The card is public; the agent answers only with the token.
    let anonymous = A2aAgent::connect(url.clone()).await.unwrap();
    let refused = anonymous.task("x").await.unwrap_err();
    assert!(matches!(&refused, A2aError::Transport { reason, .. } if reason.contains("401")), "{refused}");
    let remote = A2aAgent::builder(url).bearer("t0k").named("forecaster").connect().await.unwrap();
    let model = ScriptedModel::from_fn(|req| {
        let last = req.messages.last().unwrap();
        Ok(match last.tool_results_iter().next() {
            Some(result) => ScriptedModel::new().text_response(format!("The forecaster says: {}", result.content)),
            None => ScriptedModel::new().tool_call_response("forecaster", json!({ "message": "Weather in Paris?" })),
        })
    });
    let desk = Agent::new(model, "m", ToolRegistry::new().with(remote).unwrap()).named("desk").unwrap();
    let local = Runtime::new().register(desk.clone());
    let report = local.start(&desk, "How is Paris?".into()).await.unwrap();
    assert_eq!(desk.reply_of(report).text, "The forecaster says: Done: Sunny in Paris");
    server.abort();
}

/// Serves an official SDK's agent (`script` run by `program`); its URL and process.
async fn sdk_server(program: &std::path::Path, script: &std::path::Path) -> (String, tokio::process::Child) {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = tokio::process::Command::new(program)
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(std::time::Duration::from_secs(60), lines.next_line())
        .await
        .expect("the SDK's server does not start")
        .unwrap()
        .expect("the SDK's server said nothing");
    let port = line.strip_prefix("PORT ").unwrap_or_else(|| panic!("not a port: {line}"));
    (format!("http://127.0.0.1:{port}"), child)
}

#[tokio::test]
async fn an_agent_on_the_official_python_sdk_is_a_tool() {
    let Some(python) = python() else { return };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/a2a_sdk_server.py");
    let (url, _server) = sdk_server(&python, &script).await;
    the_desk_is_a_tool(&url).await;
}

#[tokio::test]
async fn an_agent_on_the_official_javascript_sdk_is_a_tool() {
    let Some(dir) = node_clients() else { return };
    // Node resolves the script's imports from where the script is: next to the SDK.
    let copy = dir.join("a2a_js_server.mjs");
    std::fs::copy(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/a2a_js_server.mjs"), &copy).unwrap();
    let (url, _server) = sdk_server(&dir.join("node_modules/.bin/node"), &copy).await;
    the_desk_is_a_tool(&url).await;
}

/// The SDKs' agent (tests/a2a_sdk_server.py, tests/a2a_js_server.mjs) at `url`, as a tool.
async fn the_desk_is_a_tool(url: &str) {
    let desk = A2aAgent::connect(url).await.unwrap();
    assert_eq!(desk.name(), "desk");
    assert!(desk.description().contains("- book: Books a table."), "{}", desk.description());
    let echo = desk.call(json!({ "message": "hello" }), &ToolContext::new("p1", "desk")).await.unwrap();
    assert_eq!(echo.to_text(), "Echo: hello");
    let asked = desk.call(json!({ "message": "book a table" }), &ToolContext::new("p2", "desk")).await.unwrap();
    assert!(asked.to_text().contains("For how many people?"), "{}", asked.to_text());
    let task = asked.value().unwrap()["task_id"].clone();
    let booked =
        desk.call(json!({ "message": "four", "task_id": task }), &ToolContext::new("p3", "desk")).await.unwrap();
    assert_eq!(booked.to_text(), "Booked a table for four");
    let unknown = desk.task("no-such-task").await.unwrap_err();
    assert!(matches!(unknown, A2aError::Protocol { code: -32001, .. }), "{unknown}");
}

/// A server that answers every request with `status` and `body`, or never.
async fn hostile(answer: Option<(u16, &'static str)>) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let card = json!({
        "name": "hostile", "description": "d", "version": "1",
        "supportedInterfaces": [{ "url": format!("http://{address}/rpc"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0" }],
        "capabilities": {}, "defaultInputModes": [], "defaultOutputModes": [], "skills": [],
    })
    .to_string();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let card = card.clone();
            tokio::spawn(async move {
                let mut request = vec![0; 8192];
                let n = socket.read(&mut request).await.unwrap_or(0);
                let is_card = String::from_utf8_lossy(&request[..n]).starts_with("GET");
                let (status, body) = match (is_card, answer) {
                    (true, _) => (200, card),
                    (false, Some((status, body))) => (status, body.to_owned()),
                    // Holds the call: never answers.
                    (false, None) => return std::future::pending::<()>().await,
                };
                let response = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    address
}

#[tokio::test]
async fn a_hostile_or_silent_server_is_a_typed_error_within_its_bound() {
    let cx = ToolContext::new("h", "hostile");
    let not_json = hostile(Some((200, "<html>"))).await;
    let e = A2aAgent::connect(format!("http://{not_json}")).await.unwrap().task("t").await.unwrap_err();
    assert!(matches!(&e, A2aError::Transport { reason, .. } if reason.contains("not a JSON-RPC answer")), "{e}");
    let wrong_id = hostile(Some((200, r#"{"jsonrpc":"2.0","id":"x","result":{}}"#))).await;
    let e = A2aAgent::connect(format!("http://{wrong_id}")).await.unwrap().task("t").await.unwrap_err();
    assert!(matches!(&e, A2aError::Transport { reason, .. } if reason.contains("another request")), "{e}");
    // A server that holds the call: the tool's timeout ends it.
    let silent = A2aAgent::builder(format!("http://{}", hostile(None).await))
        .timeout(std::time::Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let e = silent.call(json!({ "message": "hi" }), &cx).await.unwrap_err();
    assert!(e.to_string().contains("hostile"), "{e}");
    // A card that sends calls to an instance-metadata address.
    let metadata = {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = vec![0; 4096];
            let _ = socket.read(&mut buf).await;
            let body = json!({
                "name": "m", "description": "d", "version": "1",
                "supportedInterfaces": [{ "url": "http://169.254.169.254/latest", "protocolBinding": "JSONRPC", "protocolVersion": "1.0" }],
                "capabilities": {}, "defaultInputModes": [], "defaultOutputModes": [], "skills": [],
            })
            .to_string();
            let response =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = socket.write_all(response.as_bytes()).await;
        });
        A2aAgent::connect(format!("http://{address}")).await.unwrap_err()
    };
    assert!(matches!(&metadata, A2aError::Card { reason, .. } if reason.contains("instance-metadata")), "{metadata}");
}
