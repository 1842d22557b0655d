//! AG-UI at `POST /ag-ui/{name}`, over a real socket: an agent's answer with its tool
//! call and result, an approval as an interrupt and its resume, a chat thread, a
//! workflow's signal with its payload schema, a client that reloads, a thread that
//! survives its server, and bad requests refused with the reason. The official
//! client checks the same streams in `tests/ag_ui_client.rs`.

use std::sync::Arc;

use loopstack::llm::{Agent, ContentBlock, Reasoning, ScriptedModel};
use loopstack::prelude::*;
use loopstack::serve::{ServeOptions, serve};
use loopstack::{MemoryStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

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

/// Calls `tool` first, then answers with the tool's result, having reasoned (or,
/// for a chat, with what it was told last).
fn model(tool: &'static str, arguments: Value) -> ScriptedModel {
    ScriptedModel::from_fn(move |req| {
        let last = req.messages.last().unwrap();
        Ok(match last.tool_results_iter().next() {
            Some(result) => {
                let mut answer = ScriptedModel::new().text_response(format!("Done: {}", result.content));
                let reasoning = Reasoning::new("scripted", "The tool answered.", Value::Null);
                answer.message.content.insert(0, ContentBlock::Reasoning(reasoning));
                answer
            }
            None if req.messages.len() == 1 => ScriptedModel::new().tool_call_response(tool, arguments.clone()),
            None => ScriptedModel::new().text_response(format!("You said: {}", last.text())),
        })
    })
}

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
struct Review {
    text: String,
    approved_by: Option<String>,
}

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

    #[transition(from = Drafted, to = End, wait)]
    async fn reject(&self, _review: &mut Review, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    /// A review nobody answers in a week lapses.
    #[transition(from = Drafted, to = End, after = "7d")]
    async fn lapse(&self, _review: &mut Review, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }
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
    // No tool of its own: it calls the client's `confirm`.
    let booking = Agent::new(model("confirm", json!({"what": "a table for two"})), "m", ToolRegistry::new())
        .named("booking")
        .unwrap();
    Runtime::with_shared_store(store)
        .register(weather)
        .register(ops)
        .register(chat)
        .register(booking)
        .register(Reviewing)
}

/// Serves `runtime`; the task serving it.
async fn start(runtime: Runtime) -> (String, tokio::task::JoinHandle<std::io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(serve(listener, runtime, ServeOptions::new()));
    (address, task)
}

/// One POST; (status, body).
async fn post(address: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8(response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// The events of one AG-UI request, checked to be a well-formed run: it opens with
/// `RUN_STARTED`, ends with `RUN_FINISHED` or `RUN_ERROR`, and every message, tool
/// call, reasoning span and step it opens it closes before then.
async fn run_agent(address: &str, name: &str, input: Value) -> Vec<Value> {
    let (status, body) = post(address, &format!("/ag-ui/{name}"), &input.to_string()).await;
    checked(&input, status, &body)
}

/// The events of a response, checked as [`run_agent`] says.
fn checked(input: &Value, status: u16, body: &str) -> Vec<Value> {
    assert_eq!(status, 200, "{body}");
    // The body is chunked: the events are its `data:` lines.
    let events: Vec<Value> = body
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data}")))
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"RUN_STARTED"), "{kinds:?}");
    assert!(matches!(kinds.last(), Some(&("RUN_FINISHED" | "RUN_ERROR"))), "{kinds:?}");
    assert_eq!(events[0]["runId"], input["runId"]);
    let mut open: Vec<String> = Vec::new();
    for event in &events[..events.len() - 1] {
        let kind = event["type"].as_str().unwrap();
        let id = ["messageId", "toolCallId", "stepName"].iter().find_map(|k| event[k].as_str()).unwrap_or_default();
        let key = |family: &str| format!("{family}:{id}");
        match kind {
            "TEXT_MESSAGE_START" => open.push(key("text")),
            "TOOL_CALL_START" => open.push(key("tool")),
            "STEP_STARTED" => open.push(key("step")),
            "REASONING_MESSAGE_START" => open.push(key("reasoning")),
            "TEXT_MESSAGE_CONTENT" => assert!(open.contains(&key("text")), "{kind} of a closed message: {kinds:?}"),
            "TOOL_CALL_ARGS" => assert!(open.contains(&key("tool")), "{kind} of a closed call: {kinds:?}"),
            "TEXT_MESSAGE_END" | "TOOL_CALL_END" | "STEP_FINISHED" | "REASONING_MESSAGE_END" => {
                let family = match kind {
                    "TEXT_MESSAGE_END" => "text",
                    "TOOL_CALL_END" => "tool",
                    "STEP_FINISHED" => "step",
                    _ => "reasoning",
                };
                let at = open.iter().position(|o| *o == key(family));
                open.remove(at.unwrap_or_else(|| panic!("{kind} of {id}, never opened: {kinds:?}")));
            }
            "RUN_STARTED" | "RUN_FINISHED" | "RUN_ERROR" => {
                assert!(std::ptr::eq(event, &events[0]), "a second {kind}: {kinds:?}")
            }
            _ => {}
        }
    }
    assert!(open.is_empty(), "left open: {open:?} in {kinds:?}");
    events
}

fn input(thread: &str, run: &str, messages: Value) -> Value {
    json!({"threadId": thread, "runId": run, "state": {}, "messages": messages, "tools": [], "context": [],
           "forwardedProps": {}})
}

fn user(text: &str) -> Value {
    json!([{"id": "u1", "role": "user", "content": text}])
}

fn of<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// The text of the streamed messages, joined.
fn text(events: &[Value]) -> String {
    of(events, "TEXT_MESSAGE_CONTENT").iter().map(|e| e["delta"].as_str().unwrap()).collect()
}

async fn an_agent_answers_with_its_tool_call_and_result(store: Arc<dyn Store>) {
    let (address, _server) = start(runtime(store.clone())).await;
    let events = run_agent(&address, "weather", input("t-1", "r-1", user("Weather in Paris?"))).await;

    let started = &events[0];
    assert_eq!((started["threadId"].as_str(), started["protocolVersion"].as_str()), (Some("t-1"), Some("1.0")));
    let run_id: RunId = started["metadata"]["loopstackRunId"].as_str().unwrap().parse().unwrap();
    assert_eq!(store.load_run(run_id).await.unwrap().workflow.as_ref(), "weather");

    let call = of(&events, "TOOL_CALL_START");
    assert_eq!((call.len(), call[0]["toolCallName"].as_str()), (1, Some("weather")));
    let id = call[0]["toolCallId"].as_str().unwrap();
    let args: String = of(&events, "TOOL_CALL_ARGS")
        .iter()
        .filter(|e| e["toolCallId"] == id)
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&args).unwrap(), json!({"city": "Paris"}));
    let result = of(&events, "TOOL_CALL_RESULT");
    assert_eq!((result.len(), result[0]["toolCallId"].as_str()), (1, Some(id)));
    assert_eq!((result[0]["content"].as_str(), result[0]["role"].as_str()), (Some("Sunny in Paris"), Some("tool")));
    // The answer streamed, after the result, and the reasoning before it.
    assert_eq!(text(&events), "Done: Sunny in Paris");
    let reasoning: Vec<&str> = events
        .iter()
        .filter(|e| e["type"].as_str().unwrap().starts_with("REASONING"))
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasoning,
        [
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END"
        ]
    );
    assert_eq!(of(&events, "REASONING_MESSAGE_CONTENT")[0]["delta"], "The tool answered.");
    let at = |kind: &str| events.iter().position(|e| e["type"] == kind).unwrap();
    assert!(at("TOOL_CALL_RESULT") < at("REASONING_START") && at("REASONING_END") < at("TEXT_MESSAGE_START"));

    // A step per transition; the state as a snapshot (read when the first step
    // commits: the drive may be further by then), then deltas.
    let steps: Vec<&str> = of(&events, "STEP_STARTED").iter().map(|e| e["stepName"].as_str().unwrap()).collect();
    assert_eq!(steps, ["llm_turn", "run_tool_calls", "llm_turn", "respond"]);
    assert_eq!(of(&events, "STATE_SNAPSHOT").len(), 1);

    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "RUN_FINISHED");
    assert_eq!(
        (finished["outcome"]["type"].as_str(), finished["result"].as_str()),
        (Some("success"), Some("Done: Sunny in Paris"))
    );
    assert_eq!(finished["usage"][0]["provider"], "scripted");
    assert!(finished["usage"][0]["totalTokens"].as_u64().unwrap() > 0);

    // The thread's run ended: a new message on it says so, and changes nothing.
    let again = run_agent(&address, "weather", input("t-1", "r-2", user("And tomorrow?"))).await;
    let last = again.last().unwrap();
    assert_eq!((last["type"].as_str(), last["code"].as_str()), (Some("RUN_ERROR"), Some("invalid")));
    assert!(last["message"].as_str().unwrap().contains("start a new thread"), "{last}");
    // A reload (no new message) says how it ended.
    let reload = run_agent(&address, "weather", input("t-1", "r-3", json!([]))).await;
    assert_eq!(reload.last().unwrap()["result"], "Done: Sunny in Paris");
    assert_eq!(store.list_runs(&loopstack::RunQuery::new()).await.unwrap().runs.len(), 1);
}

async fn an_approval_is_an_interrupt_and_the_resume_decides_it(store: Arc<dyn Store>) {
    let (address, _server) = start(runtime(store.clone())).await;
    let events = run_agent(&address, "ops", input("t-ops", "r-1", user("Restart the api"))).await;
    let finished = events.last().unwrap();
    assert_eq!(finished["outcome"]["type"], "interrupt", "{finished}");
    let interrupts = finished["outcome"]["interrupts"].as_array().unwrap();
    assert_eq!(interrupts.len(), 1);
    let interrupt = &interrupts[0];
    let call = of(&events, "TOOL_CALL_START")[0]["toolCallId"].as_str().unwrap().to_owned();
    assert_eq!(interrupt["id"].as_str().unwrap(), format!("decide_tools:{call}"));
    assert_eq!(
        (interrupt["reason"].as_str(), interrupt["toolCallId"].as_str()),
        (Some("tool_approval"), Some(call.as_str()))
    );
    assert!(interrupt["message"].as_str().unwrap().contains("restart_service"));
    assert_eq!(interrupt["responseSchema"]["required"], json!(["approved"]));
    // Nothing ran before the decision.
    assert!(of(&events, "TOOL_CALL_RESULT").is_empty());

    // A reload shows the same interrupt again; a resume that misses it, or names
    // one that is not open, is refused and changes nothing.
    let reload = run_agent(&address, "ops", input("t-ops", "r-2", json!([]))).await;
    assert_eq!(reload.last().unwrap()["outcome"]["interrupts"][0]["id"], interrupt["id"]);
    let mut wrong = input("t-ops", "r-3", json!([]));
    wrong["resume"] =
        json!([{"interruptId": "decide_tools:nope", "status": "resolved", "payload": {"approved": true}}]);
    let (status, body) = post(&address, "/ag-ui/ops", &wrong.to_string()).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("not open") && body.contains(&call), "{body}");
    let mut bad = input("t-ops", "r-3", json!([]));
    bad["resume"] = json!([{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approve": "yes"}}]);
    let (status, body) = post(&address, "/ag-ui/ops", &bad.to_string()).await;
    assert_eq!(status, 422, "{body}");

    let mut resume = input("t-ops", "r-4", json!([]));
    resume["resume"] = json!([{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": true}}]);
    let events = run_agent(&address, "ops", resume).await;
    let result = of(&events, "TOOL_CALL_RESULT");
    assert_eq!((result.len(), result[0]["content"].as_str()), (1, Some("api restarted")));
    assert_eq!(result[0]["toolCallId"].as_str(), Some(call.as_str()));
    assert_eq!(text(&events), "Done: api restarted");
    assert_eq!(events.last().unwrap()["outcome"]["type"], "success");
}

async fn a_cancelled_interrupt_denies_the_call(store: Arc<dyn Store>) {
    let (address, _server) = start(runtime(store)).await;
    let events = run_agent(&address, "ops", input("t-deny", "r-1", user("Restart the api"))).await;
    let id = events.last().unwrap()["outcome"]["interrupts"][0]["id"].clone();
    let mut resume = input("t-deny", "r-2", json!([]));
    resume["resume"] = json!([{"interruptId": id, "status": "cancelled"}]);
    let events = run_agent(&address, "ops", resume).await;
    let result = of(&events, "TOOL_CALL_RESULT");
    assert!(result[0]["content"].as_str().unwrap().contains("the user cancelled the call"), "{}", result[0]);
    assert!(text(&events).starts_with("Done: "));
}

async fn a_chat_thread_goes_on_with_each_message(store: Arc<dyn Store>) {
    let (address, _server) = start(runtime(store.clone())).await;
    let first = run_agent(&address, "chat", input("t-chat", "r-1", user("Weather in Oslo?"))).await;
    assert_eq!(text(&first), "Done: Sunny in Oslo");
    assert_eq!(first.last().unwrap()["outcome"]["type"], "success");
    let run_id: RunId = first[0]["metadata"]["loopstackRunId"].as_str().unwrap().parse().unwrap();

    // The client sends the whole conversation; its last user message is the new one.
    let messages = json!([
        {"id": "u1", "role": "user", "content": "Weather in Oslo?"},
        {"id": "a1", "role": "assistant", "content": "Done: Sunny in Oslo"},
        {"id": "u2", "role": "user", "content": [{"type": "text", "text": "Thanks!"}]},
    ]);
    let second = run_agent(&address, "chat", input("t-chat", "r-2", messages)).await;
    assert_eq!(text(&second), "You said: Thanks!");
    // Only what is new is sent: not the first answer again, not the first call.
    assert!(of(&second, "TOOL_CALL_START").is_empty());
    assert_eq!(second[0]["metadata"]["loopstackRunId"], first[0]["metadata"]["loopstackRunId"]);
    assert_eq!(store.load_run(run_id).await.unwrap().place.as_ref(), "awaiting_user");
}

/// The tool the booking page answers itself.
fn confirm_tool() -> Value {
    json!([{"name": "confirm", "description": "Asks the user to confirm a booking.",
            "parameters": {"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]}}])
}

async fn a_frontend_tool_is_called_and_answered_by_the_client(store: Arc<dyn Store>) {
    let (address, _server) = start(runtime(store)).await;
    let mut first = input("t-book", "r-1", user("Book a table"));
    first["tools"] = confirm_tool();
    let events = run_agent(&address, "booking", first).await;
    let call = of(&events, "TOOL_CALL_START");
    assert_eq!(call[0]["toolCallName"], "confirm");
    let id = call[0]["toolCallId"].as_str().unwrap().to_owned();
    // The run did its part: the call is the client's to answer.
    assert!(of(&events, "TOOL_CALL_RESULT").is_empty());
    let finished = events.last().unwrap();
    assert_eq!(finished["outcome"], json!({"type": "success", "pendingToolCallIds": [id]}), "{finished}");

    // A reload without the answer shows the same; the client's tool message answers it.
    let reload = run_agent(&address, "booking", input("t-book", "r-2", json!([]))).await;
    assert_eq!(reload.last().unwrap()["outcome"]["pendingToolCallIds"], json!([id]));
    let mut answered = input(
        "t-book",
        "r-3",
        json!([
            {"id": "u1", "role": "user", "content": "Book a table"},
            {"id": "a1", "role": "assistant", "toolCalls": [{"id": id, "type": "function",
                "function": {"name": "confirm", "arguments": "{\"what\":\"a table for two\"}"}}]},
            {"id": "t1", "role": "tool", "toolCallId": id, "content": "yes"},
        ]),
    );
    answered["tools"] = confirm_tool();
    let events = run_agent(&address, "booking", answered).await;
    // The client has the result: it is not sent back.
    assert!(of(&events, "TOOL_CALL_RESULT").is_empty());
    assert_eq!(text(&events), "Done: yes");
    assert_eq!(events.last().unwrap()["outcome"], json!({"type": "success"}));
}

async fn a_workflow_signal_is_an_interrupt_with_its_schema(store: Arc<dyn Store>) {
    let (address, _server) = start(runtime(store.clone())).await;
    let mut start = input("t-review", "r-1", json!([]));
    start["forwardedProps"] = json!({"input": {"text": "Ship it"}});
    let events = run_agent(&address, "review", start).await;
    let finished = events.last().unwrap();
    let interrupts = finished["outcome"]["interrupts"].as_array().unwrap();
    let ids: Vec<&str> = interrupts.iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["approve", "reject"]);
    assert_eq!(interrupts[0]["reason"], "signal");
    assert_eq!(interrupts[0]["responseSchema"]["required"], json!(["reviewer"]));
    // Answerable until the timer that leaves the place is due: the run's stored due time.
    let run_id: RunId = events[0]["metadata"]["loopstackRunId"].as_str().unwrap().parse().unwrap();
    let due = store.load_run(run_id).await.unwrap().wake_at.expect("a due time").to_string();
    assert_eq!((interrupts[0]["expiresAt"].as_str(), interrupts[1]["expiresAt"].as_str()), (Some(&*due), Some(&*due)));
    assert_eq!(of(&events, "STATE_SNAPSHOT")[0]["snapshot"]["text"], "Ship it");

    // One signal resolved, the other cancelled; a payload that does not fit the
    // schema is refused first.
    let resume = |payload: Value| {
        let mut resume = input("t-review", "r-2", json!([]));
        resume["resume"] = json!([
            {"interruptId": "approve", "status": "resolved", "payload": payload},
            {"interruptId": "reject", "status": "cancelled"},
        ]);
        resume
    };
    let (status, body) = post(&address, "/ag-ui/review", &resume(json!({"reviewer": 7})).to_string()).await;
    assert_eq!(status, 422, "{body}");
    let events = run_agent(&address, "review", resume(json!({"reviewer": "ada"}))).await;
    let finished = events.last().unwrap();
    assert_eq!(finished["outcome"]["type"], "success", "{finished}");
    let delta = &of(&events, "STATE_DELTA")[0]["delta"];
    assert_eq!(delta, &json!([{"op": "replace", "path": "/approved_by", "value": "ada"}]));
}

async fn cancelling_every_signal_cancels_the_run(store: Arc<dyn Store>) {
    let (address, _server) = start(runtime(store)).await;
    let mut start = input("t-cancel", "r-1", json!([]));
    start["forwardedProps"] = json!({"input": {"text": "Ship it"}});
    run_agent(&address, "review", start).await;
    let mut resume = input("t-cancel", "r-2", json!([]));
    resume["resume"] = json!([
        {"interruptId": "approve", "status": "cancelled"},
        {"interruptId": "reject", "status": "cancelled"},
    ]);
    let events = run_agent(&address, "review", resume).await;
    assert_eq!(events.last().unwrap()["outcome"]["type"], "cancelled");
}

on_every_store!(an_agent_answers_with_its_tool_call_and_result);
on_every_store!(an_approval_is_an_interrupt_and_the_resume_decides_it);
on_every_store!(a_cancelled_interrupt_denies_the_call);
on_every_store!(a_chat_thread_goes_on_with_each_message);
on_every_store!(a_workflow_signal_is_an_interrupt_with_its_schema);
on_every_store!(a_frontend_tool_is_called_and_answered_by_the_client);
on_every_store!(cancelling_every_signal_cancels_the_run);

/// A thread outlives its server: a second server over the same database (nothing
/// of the first in memory) shows the open interrupt, and its resume finishes the
/// run the first one started.
#[tokio::test]
async fn a_waiting_thread_survives_its_server() {
    let path = std::env::temp_dir().join(format!("loopstack-ag-ui-{}.db", RunId::new()));
    let open = || async { Arc::new(loopstack::SqliteStore::open(&path).await.unwrap()) as Arc<dyn Store> };
    let (address, server) = start(runtime(open().await)).await;
    let events = run_agent(&address, "ops", input("t-restart", "r-1", user("Restart the api"))).await;
    let interrupt = events.last().unwrap()["outcome"]["interrupts"][0].clone();
    server.abort();
    let _ = server.await;

    let (address, _server) = start(runtime(open().await)).await;
    let reload = run_agent(&address, "ops", input("t-restart", "r-2", json!([]))).await;
    assert_eq!(reload.last().unwrap()["outcome"]["interrupts"][0], interrupt);
    let mut resume = input("t-restart", "r-3", json!([]));
    resume["resume"] = json!([{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": true}}]);
    let events = run_agent(&address, "ops", resume).await;
    assert_eq!(text(&events), "Done: api restarted");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// A workflow whose one step holds until the test opens its gate.
struct Held {
    entered: Arc<tokio::sync::Notify>,
    gate: Arc<tokio::sync::Notify>,
}

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
struct Count {
    n: u32,
}

#[workflow(name = "held", input = Count)]
impl Held {
    #[transition(to = End)]
    async fn work(&self, count: &mut Count, _cx: &mut RunContext) -> Result<()> {
        self.entered.notify_one();
        self.gate.notified().await;
        count.n += 1;
        Ok(())
    }
}

/// A request on a thread whose run is being driven (by another request here, by a
/// worker elsewhere) follows that drive to its end instead of starting anything.
async fn a_thread_being_driven_is_followed(store: Arc<dyn Store>) {
    let (entered, gate) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
    let held = Held { entered: entered.clone(), gate: gate.clone() };
    let (address, _server) = start(runtime(store.clone()).register(held)).await;
    let mut first = input("t-held", "r-1", json!([]));
    first["forwardedProps"] = json!({"input": {"n": 1}});
    let driving = tokio::spawn({
        let address = address.clone();
        async move { run_agent(&address, "held", first).await }
    });
    entered.notified().await;
    let run_id = RunId::from_key("ag-ui/held/t-held");
    assert_eq!(store.load_run(run_id).await.unwrap().status, loopstack::RunStatus::Running);
    // A second request while the step holds: once its stream has begun, it has
    // found the run running and follows it; then the step is let go.
    let follow = input("t-held", "r-2", json!([]));
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let body = follow.to_string();
    let request = format!(
        "POST /ag-ui/held HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    while !String::from_utf8_lossy(&response).contains("RUN_STARTED") {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the stream ended before it began: {}", String::from_utf8_lossy(&response));
        response.extend_from_slice(&chunk[..n]);
    }
    gate.notify_one();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8(response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let followed = checked(&follow, head[9..12].parse().unwrap(), body);
    let driven = driving.await.unwrap();
    for events in [&driven, &followed] {
        let finished = events.last().unwrap();
        assert_eq!(
            (finished["type"].as_str(), &finished["result"]),
            (Some("RUN_FINISHED"), &json!({"n": 2})),
            "{events:?}"
        );
    }
    assert_eq!(followed[0]["runId"], "r-2");
    assert_eq!(store.list_runs(&loopstack::RunQuery::new()).await.unwrap().runs.len(), 1);
}

on_every_store!(a_thread_being_driven_is_followed);

#[tokio::test]
async fn bad_requests_are_refused_with_the_reason() {
    let (address, _server) = start(runtime(Arc::new(MemoryStore::new()))).await;
    let (status, body) = post(&address, "/ag-ui/weather", "{not json").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(&address, "/ag-ui/nobody", &input("t", "r", user("hi")).to_string()).await;
    assert_eq!((status, body.contains("no agent or workflow named `nobody`")), (404, true), "{body}");
    let (status, body) = post(&address, "/ag-ui/weather", &input("", "r", user("hi")).to_string()).await;
    assert_eq!(status, 400, "{body}");
    // An agent starts with a user message.
    let (status, body) = post(&address, "/ag-ui/weather", &input("t", "r", json!([])).to_string()).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("user message"), "{body}");
    // Fields of the wrong type, a tool the model could not call, a resume that is
    // not a list: refused with the reason, nothing started.
    let (status, body) = post(&address, "/ag-ui/weather", r#"{"threadId": 5, "runId": "r", "messages": []}"#).await;
    assert_eq!(status, 400, "{body}");
    let mut bad_tool = input("t-bad", "r", user("hi"));
    bad_tool["tools"] = json!([{"name": "no spaces allowed", "description": ""}]);
    let (status, body) = post(&address, "/ag-ui/weather", &bad_tool.to_string()).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("no spaces allowed"), "{body}");
    let mut bad_resume = input("t-bad", "r", user("hi"));
    bad_resume["resume"] = json!({"interruptId": "x"});
    let (status, body) = post(&address, "/ag-ui/weather", &bad_resume.to_string()).await;
    assert_eq!(status, 400, "{body}");
    // A body over the API's limit (2 MB) is refused before it is read whole.
    let huge = input("t-big", "r", user(&"x".repeat(3 << 20)));
    let (status, _) = post(&address, "/ag-ui/weather", &huge.to_string()).await;
    assert_eq!(status, 413);
}

/// The pinned versions `.ci/protocol-clients` installs.
const AG_UI_VERSION: &str = "1.0.4";
const AI_SDK_VERSION: &str = "7.0.185";

/// The folder with Node.js 22 and the AG-UI client in its `node_modules`, or `None`
/// (the test is skipped, saying so) when it is missing outside CI.
fn clients() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("LOOPSTACK_PROTOCOL_CLIENTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/protocol-clients"));
    let installed =
        ["node_modules/.bin/node", "node_modules/@ag-ui/client/package.json", "node_modules/ai/package.json"];
    if installed.iter().all(|path| dir.join(path).exists()) {
        return Some(dir);
    }
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !ci,
        "the AG-UI client test needs {} where CI is set: run `.ci/protocol-clients` (as .ci/run does), or set \
         LOOPSTACK_PROTOCOL_CLIENTS to a folder whose node_modules has `node` 22, @ag-ui/client and ai",
        dir.display()
    );
    use std::io::Write as _;
    // Straight to the terminal: the harness hides the output of tests that pass.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: the AG-UI and AI SDK client tests need {}; run `.ci/protocol-clients` (npm installs node@22, \
         @ag-ui/client@{AG_UI_VERSION} and ai@{AI_SDK_VERSION} under target/protocol-clients), then `cargo test --test \
         frontends --features serve`",
        dir.display()
    );
    None
}

/// Runs `script` (of tests/) with the official clients in `dir`, against a server of
/// [`runtime`]; what it printed.
async fn client(dir: &std::path::Path, script: &str) -> Value {
    let (address, _server) = start(runtime(Arc::new(MemoryStore::new()))).await;
    // Node resolves the script's imports from where the script is: next to the client.
    let copy = dir.join(script);
    std::fs::copy(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(script), &copy).unwrap();
    let output = tokio::process::Command::new(dir.join("node_modules/.bin/node"))
        .arg(&copy)
        .arg(format!("http://{address}"))
        .kill_on_drop(true)
        .output();
    let output =
        tokio::time::timeout(std::time::Duration::from_secs(120), output).await.expect("the client hangs").unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the client failed: {stderr}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

/// The official client (`@ag-ui/client`'s HttpAgent, which checks every event
/// against the protocol's schemas and order) runs an agent with a tool, an approval
/// and its resume, and a chat; every event is also checked to carry only the fields
/// its schema names.
#[tokio::test]
async fn the_official_client_runs_an_agent_an_approval_and_a_chat() {
    let Some(dir) = clients() else { return };
    let seen = client(&dir, "ag_ui_client.mjs").await;
    assert_eq!(seen["objections"], json!([]), "the client stripped what its schemas do not name");

    // The client assembled the conversation: the call, its result, the answer.
    let weather = &seen["weather"];
    assert_eq!(weather["result"], "Done: Sunny in Paris");
    let messages = weather["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "reasoning", "assistant"], "{messages:?}");
    assert_eq!(messages[1]["toolCalls"][0]["function"]["name"], "weather");
    assert_eq!(messages[1]["toolCalls"][0]["function"]["arguments"], r#"{"city":"Paris"}"#);
    assert_eq!(messages[2]["content"], "Sunny in Paris");
    assert_eq!(messages[2]["toolCallId"], messages[1]["toolCalls"][0]["id"]);
    assert_eq!(messages[3]["content"], "The tool answered.");
    assert_eq!(messages[4]["content"], "Done: Sunny in Paris");
    assert_eq!(weather["state"]["status"], "completed");

    // The approval: an interrupt the client holds, refuses to pass unanswered, and
    // resumes with the call's result and the answer.
    let approval = &seen["approval"];
    assert_eq!(approval["finished"]["outcome"]["type"], "interrupt");
    assert_eq!(approval["pending"][0]["reason"], "tool_approval");
    assert!(approval["unanswered"].as_str().unwrap().contains("not addressed by resume"), "{approval}");
    let resumed = &seen["resumed"];
    assert_eq!(resumed["finished"]["outcome"]["type"], "success");
    assert_eq!(resumed["pending"], json!([]));
    let messages = resumed["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["content"], "Done: api restarted");
    assert!(messages.iter().any(|m| m["role"] == "tool" && m["content"] == "api restarted"), "{messages:?}");

    // The frontend tool: called, left for the page, answered, and read by the model.
    let frontend = &seen["frontend"];
    assert_eq!(frontend["call"]["function"]["arguments"], r#"{"what":"a table for two"}"#);
    assert_eq!(frontend["finished"]["outcome"]["pendingToolCallIds"], json!([frontend["call"]["id"]]));
    let done = &seen["frontendDone"];
    assert_eq!(done["finished"]["outcome"]["type"], "success");
    let messages = done["messages"].as_array().unwrap();
    assert_eq!(messages.iter().filter(|m| m["role"] == "tool").count(), 1, "{messages:?}");
    assert_eq!(messages.last().unwrap()["content"], "Done: yes");

    // The chat's second run added only the new answer.
    let chat = &seen["chat"];
    let contents: Vec<&str> =
        chat["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(contents.last(), Some(&"You said: Thanks!"));
    assert_eq!(chat["newMessages"].as_array().unwrap().len(), 1, "{chat}");
}

/// The AI SDK's chat (`ai`'s AbstractChat, what `useChat` runs, over its
/// DefaultChatTransport) runs an agent with a tool, an approval granted and one
/// denied, a tool the page runs itself, and a chat; every chunk is checked to be
/// one the protocol names, with only its fields.
#[tokio::test]
async fn the_ai_sdks_chat_runs_tools_approvals_page_tools_and_a_chat() {
    let Some(dir) = clients() else { return };
    let seen = client(&dir, "ai_sdk_client.mjs").await;
    assert_eq!(seen["objections"], json!([]));
    assert_eq!(seen["chunks"].as_array().unwrap().iter().filter(|c| *c == "[DONE]").count(), 9, "{}", seen["chunks"]);

    // The assistant's message: a step with the tool's call and output, a step with
    // the reasoning and the answer.
    let weather = &seen["weather"];
    assert_eq!((&weather["status"], &weather["errors"]), (&json!("ready"), &json!([])), "{weather}");
    let parts = weather["messages"][1]["parts"].as_array().unwrap();
    let kinds: Vec<&str> = parts.iter().map(|p| p["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["step-start", "dynamic-tool", "step-start", "reasoning", "text"], "{parts:?}");
    let tool = &parts[1];
    assert_eq!((tool["toolName"].as_str(), tool["state"].as_str()), (Some("weather"), Some("output-available")));
    assert_eq!((&tool["input"], &tool["output"]), (&json!({"city": "Paris"}), &json!("Sunny in Paris")));
    assert_eq!(tool["providerExecuted"], true);
    assert_eq!(parts[3]["text"], "The tool answered.");
    assert_eq!(parts[4]["text"], "Done: Sunny in Paris");

    // The approval: requested, then granted: the call ran and the model answered.
    let part = |chat: &Value| {
        chat["messages"].as_array().unwrap().last().unwrap()["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["type"] == "dynamic-tool")
            .cloned()
            .unwrap()
    };
    let requested = part(&seen["approval"]);
    assert_eq!(requested["state"], "approval-requested");
    assert!(requested["approval"]["id"].as_str().unwrap().starts_with("decide_tools:"));
    let approved = &seen["approved"];
    assert_eq!(approved["errors"], json!([]), "{approved}");
    let ran = part(approved);
    assert_eq!((ran["state"].as_str(), &ran["output"]), (Some("output-available"), &json!("api restarted")));
    let text = |chat: &Value| -> String {
        chat["messages"].as_array().unwrap().last().unwrap()["parts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["type"] == "text")
            .map(|p| p["text"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(text(approved), "Done: api restarted");
    // Denied: not run, and the model read why.
    let denied = &seen["denied"];
    assert_eq!(part(denied)["state"], "output-denied", "{denied}");
    assert!(text(denied).contains("not now"), "{denied}");

    // The page's own tool: called once, answered by the page, read by the model.
    let booking = &seen["booking"];
    assert_eq!(booking["errors"], json!([]), "{booking}");
    assert_eq!(booking["calls"].as_array().unwrap().len(), 1);
    assert_eq!(booking["calls"][0]["input"], json!({"what": "a table for two"}));
    assert_eq!(text(booking), "Done: yes");

    // The chat: two exchanges, and nothing under way to resume.
    let chat = &seen["chat"];
    assert_eq!((&chat["status"], &chat["errors"]), (&json!("ready"), &json!([])), "{chat}");
    let messages = chat["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4);
    assert_eq!(text(chat), "You said: Thanks!");
}

/// A tool that holds until the test opens its gate.
#[derive(Clone)]
struct Gate {
    entered: Arc<tokio::sync::Notify>,
    open: Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl loopstack::Tool for Gate {
    fn name(&self) -> &str {
        "gate"
    }
    fn description(&self) -> &str {
        "Waits for the gate."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _: Value, _: &loopstack::ToolContext) -> Result<loopstack::ToolOutput, ToolError> {
        self.entered.notify_one();
        self.open.notified().await;
        Ok(loopstack::ToolOutput::text("opened"))
    }
}

/// The `data:` of each Server-Sent Event of a body read so far.
fn chunks(body: &str) -> Vec<String> {
    body.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_owned).collect()
}

/// A page that reloads while its chat's turn is under way resumes the turn's stream
/// from its beginning: what the turn stored, then its events as they come; once the
/// turn is over there is nothing to resume (204).
async fn a_chat_stream_resumes_after_a_reconnect(store: Arc<dyn Store>) {
    let gate = Gate { entered: Arc::default(), open: Arc::default() };
    let slow = Agent::new(model("gate", json!({})), "m", ToolRegistry::new().with(gate.clone()).unwrap())
        .named("slow")
        .unwrap();
    let (address, _server) = start(runtime(store).register(slow)).await;
    let body = json!({"id": "c-1", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Go"}]}],
                      "trigger": "submit-message"});
    let first = tokio::spawn({
        let address = address.clone();
        async move { post(&address, "/ai-sdk/slow", &body.to_string()).await }
    });
    gate.entered.notified().await;

    // The page reloaded: it asks for the chat's stream.
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request = format!("GET /ai-sdk/slow/c-1/stream HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    // The turn so far, stored before the reconnect: the call, whole.
    while !String::from_utf8_lossy(&response).contains("tool-input-available") {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the stream ended early: {}", String::from_utf8_lossy(&response));
        response.extend_from_slice(&chunk[..n]);
    }
    gate.open.notify_one();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8(response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.to_ascii_lowercase().contains("x-vercel-ai-ui-message-stream: v1"), "{response}");
    let resumed: Vec<Value> =
        chunks(&response).iter().filter(|d| *d != "[DONE]").map(|d| serde_json::from_str(d).unwrap()).collect();
    let kinds: Vec<&str> = resumed.iter().map(|c| c["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"start"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"finish"), "{kinds:?}");
    assert!(kinds.contains(&"tool-input-start") && kinds.contains(&"tool-output-available"), "{kinds:?}");
    let text: String =
        resumed.iter().filter(|c| c["type"] == "text-delta").map(|c| c["delta"].as_str().unwrap()).collect();
    assert_eq!(text, "Done: opened");
    assert_eq!(chunks(&response).last().map(String::as_str), Some("[DONE]"));

    // The first request's stream saw the same turn end.
    let (status, first) = first.await.unwrap();
    assert_eq!(status, 200);
    assert!(first.contains("Done: ") && first.contains("[DONE]"), "{first}");
    // Nothing under way now.
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 204"), "{response}");
}

on_every_store!(a_chat_stream_resumes_after_a_reconnect);

#[tokio::test]
async fn ai_sdk_requests_it_cannot_take_are_refused_with_the_reason() {
    let (address, _server) = start(runtime(Arc::new(MemoryStore::new()))).await;
    let chat = |id: &str, trigger: &str| {
        json!({"id": id, "trigger": trigger,
               "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}]})
        .to_string()
    };
    let (status, body) = post(&address, "/ai-sdk/review", &chat("c", "submit-message")).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("not an agent"), "{body}");
    let (status, body) = post(&address, "/ai-sdk/weather", &chat("c", "regenerate-message")).await;
    assert_eq!(status, 422, "{body}");
    let (status, _) = post(&address, "/ai-sdk/nobody", &chat("c", "submit-message")).await;
    assert_eq!(status, 404);
    let (status, body) = post(&address, "/ai-sdk/weather", "{\"messages\": 3}").await;
    assert_eq!(status, 400, "{body}");
    // A new message while a call waits for approval is refused in the stream, and the
    // call still waits.
    let (status, first) = post(&address, "/ai-sdk/ops", &chat("c-wait", "submit-message")).await;
    assert_eq!(status, 200);
    assert!(first.contains("tool-approval-request"), "{first}");
    let (status, again) = post(&address, "/ai-sdk/ops", &chat("c-wait", "submit-message")).await;
    assert_eq!(status, 200);
    assert!(again.contains(r#""type":"error""#) && again.contains("waits at `awaiting_approval`"), "{again}");
    let (_, reload) = post(&address, "/ai-sdk/ops", &json!({"id": "c-wait", "messages": []}).to_string()).await;
    assert!(reload.contains("tool-approval-request"), "{reload}");
}

/// Restarts a service once a person approves, and then holds until the test opens
/// its gate (a long call, under way while the page reloads).
#[derive(Clone)]
struct GatedRestart {
    entered: Arc<tokio::sync::Notify>,
    open: Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl loopstack::Tool for GatedRestart {
    fn name(&self) -> &str {
        "restart_service"
    }
    fn description(&self) -> &str {
        "Restarts a service."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"service": {"type": "string"}}})
    }
    fn options(&self) -> loopstack::ToolOptions {
        loopstack::ToolOptions::default().approve(true)
    }
    async fn call(&self, args: Value, _: &loopstack::ToolContext) -> Result<loopstack::ToolOutput, ToolError> {
        self.entered.notify_one();
        self.open.notified().await;
        Ok(loopstack::ToolOutput::text(format!("{} restarted", args["service"].as_str().unwrap_or("?"))))
    }
}

/// A chat page on the AI SDK's chat in Chromium: it chats, approves the agent's
/// call with its button, reloads while the approved call runs, and picks the turn
/// up where it is, to its answer.
#[tokio::test]
async fn a_chat_page_chats_approves_a_call_and_resumes_after_a_reload() {
    use common::browser::{PATIENCE, click, fill, session, until};

    let Some((chromium, driver)) = common::browser::browser() else { return };
    let Some(dir) = clients() else { return };
    // The page, bundled from tests/chat_page.mjs next to the `ai` it imports.
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/chat_page.mjs"), dir.join("chat_page.mjs")).unwrap();
    let bundled = std::process::Command::new(dir.join("node_modules/.bin/esbuild"))
        .current_dir(&dir)
        .args(["chat_page.mjs", "--bundle", "--format=iife", "--platform=browser", "--outfile=chat_page.js"])
        .output()
        .unwrap();
    assert!(bundled.status.success(), "{}", String::from_utf8_lossy(&bundled.stderr));
    let script = std::fs::read_to_string(dir.join("chat_page.js")).unwrap();

    let gate = GatedRestart { entered: Arc::default(), open: Arc::default() };
    let desk = Agent::new(
        model("restart_service", json!({"service": "api"})),
        "m",
        ToolRegistry::new().with(gate.clone()).unwrap(),
    )
    .named("desk")
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runtime = runtime(store.clone()).register(desk);
    let page = axum::Router::new()
        .route(
            "/chat",
            axum::routing::get(|| async {
                axum::response::Html(
                    r#"<!doctype html><html><body><div id="app"></div><script src="/chat.js"></script></body></html>"#,
                )
            }),
        )
        .route(
            "/chat.js",
            axum::routing::get(move || async move { ([("content-type", "text/javascript")], script.clone()) }),
        );
    let app = loopstack::serve::router(runtime, ServeOptions::new()).merge(page);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let _server = tokio::spawn(async move { axum::serve(listener, app).await });
    let profile = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chat-page-profile");
    let _ = std::fs::remove_dir_all(&profile);
    let (_browser, client) = session(&chromium, &driver, &profile).await;

    client.goto(&format!("{base}/chat")).await.unwrap();
    fill(&client, "#prompt", "Restart the api").await;
    click(&client, "#send").await;
    until(
        &client,
        "the call to approve",
        "document.querySelector('.tool[data-state=\"approval-requested\"] .approve')",
    )
    .await;
    click(&client, ".approve").await;
    // The approved call runs, and holds: the page reloads meanwhile.
    tokio::time::timeout(PATIENCE, gate.entered.notified()).await.expect("the approved call runs");
    client.refresh().await.unwrap();
    until(&client, "the turn under way, resumed", "document.querySelector('.message[data-role=\"assistant\"] .tool')")
        .await;
    gate.open.notify_one();
    until(
        &client,
        "the answer",
        "[...document.querySelectorAll('.text')].some((t) => t.textContent === 'Done: api restarted')",
    )
    .await;
    until(&client, "the chat ready", "window.chat.status === 'ready'").await;
    let errors: Value = client.execute("return document.getElementById('errors').innerText;", vec![]).await.unwrap();
    assert_eq!(errors, "", "the page's chat failed");
    let tool: Value = client
        .execute("return document.querySelector('.message[data-role=\"assistant\"] .tool').dataset.state;", vec![])
        .await
        .unwrap();
    assert_eq!(tool, "output-available");
    // One run: the page's chat.
    let runs = store.list_runs(&loopstack::RunQuery::new()).await.unwrap().runs;
    assert_eq!((runs.len(), runs[0].status), (1, loopstack::RunStatus::Completed));
    client.close().await.unwrap();
}

/// Refunds an order, at most once: a call whose drive died mid-call is not run again
/// without a person saying so. Holds until its gate opens (it never does here: the
/// drive dies first).
#[derive(Clone)]
struct HeldRefund {
    entered: Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl loopstack::Tool for HeldRefund {
    fn name(&self) -> &str {
        "refund"
    }
    fn description(&self) -> &str {
        "Refunds an order."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"order": {"type": "string"}}})
    }
    fn options(&self) -> loopstack::ToolOptions {
        loopstack::ToolOptions::new().effect(loopstack::Effect::AtMostOnce)
    }
    async fn call(&self, _: Value, _: &loopstack::ToolContext) -> Result<loopstack::ToolOutput, ToolError> {
        self.entered.notify_one();
        std::future::pending().await
    }
}

/// A call whose drive died mid-call, at most once: the thread shows it as an
/// interrupt that asks what happened, and the answer with the call's result is what
/// the model reads; the call is never run again.
async fn an_outcome_a_crash_left_unknown_is_an_interrupt(store: Arc<dyn Store>) {
    let tool = HeldRefund { entered: Arc::default() };
    let refunds =
        Agent::new(model("refund", json!({"order": "A-17"})), "m", ToolRegistry::new().with(tool.clone()).unwrap())
            .named("refunds")
            .unwrap();
    let runtime = runtime(store).register(refunds);
    let (address, _server) = start(runtime.clone()).await;
    // The thread's run is driven into the call, and its drive dies there.
    let run_id = RunId::from_key("ag-ui/refunds/t-crash");
    let drive = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.start_by_name("refunds", json!("Refund A-17"), run_id).await }
    });
    tool.entered.notified().await;
    drive.abort();
    let _ = drive.await;
    // Recovered (as a worker does once the lease runs out): it waits to be told.
    runtime.resume_by_name(run_id).await.unwrap();

    let events = run_agent(&address, "refunds", input("t-crash", "r-1", json!([]))).await;
    let finished = events.last().unwrap();
    let interrupt = &finished["outcome"]["interrupts"][0];
    assert!(interrupt["id"].as_str().unwrap().starts_with("resolve_tools:"), "{finished}");
    assert_eq!(interrupt["reason"], "tool_outcome_unknown");
    assert!(interrupt["responseSchema"]["properties"]["result"].is_object());
    let mut resume = input("t-crash", "r-2", json!([]));
    resume["resume"] = json!([{"interruptId": interrupt["id"], "status": "resolved",
                               "payload": {"approved": true, "result": "refunded A-17 (checked)"}}]);
    let events = run_agent(&address, "refunds", resume).await;
    assert_eq!(text(&events), "Done: refunded A-17 (checked)");
}

on_every_store!(an_outcome_a_crash_left_unknown_is_an_interrupt);

/// A secret registered with the runtime never reaches a client: not in a tool's
/// result, not in the answer, not in the state, over either protocol.
#[tokio::test]
async fn secrets_never_reach_a_frontend() {
    let runtime = runtime(Arc::new(MemoryStore::new()));
    runtime.secrets().register("Sunny in Paris");
    let (address, _server) = start(runtime).await;
    let (_, body) = post(&address, "/ag-ui/weather", &input("t-secret", "r-1", user("Weather?")).to_string()).await;
    assert!(!body.contains("Sunny in Paris") && body.contains("TOOL_CALL_RESULT"), "{body}");
    let chat = json!({"id": "c-secret", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Weather?"}]}]});
    let (_, body) = post(&address, "/ai-sdk/weather", &chat.to_string()).await;
    assert!(!body.contains("Sunny in Paris") && body.contains("tool-output-available"), "{body}");
}

/// A real small model (`../shared/localmodel/`, opt-in: `LOOPSTACK_LOCAL_MODEL_URL`)
/// answers a weather question over AG-UI and over the AI SDK's stream, its tool call
/// and result among the events.
#[tokio::test]
#[ignore = "needs a served model: LOOPSTACK_LOCAL_MODEL_URL=http://127.0.0.1:8080/v1 cargo test --test frontends --features serve -- --ignored real_small_model"]
async fn a_real_small_model_answers_over_ag_ui_and_the_ai_sdk() {
    let url = std::env::var("LOOPSTACK_LOCAL_MODEL_URL").expect("LOOPSTACK_LOCAL_MODEL_URL names the served model");
    let model = loopstack::llm::openai::OpenAi::new().base_url(url).text_tool_calls(true);
    let agent = Agent::new(model, "qwen2.5-coder-1.5b", ToolRegistry::new().with(Weather).unwrap())
        .system("You answer weather questions. Call weather once for each city, then answer in one sentence.")
        .temperature(0.0)
        .named("local")
        .unwrap();
    let (address, _server) = start(runtime(Arc::new(MemoryStore::new())).register(agent)).await;

    let events = run_agent(&address, "local", input("t-local", "r-1", user("How is the weather in Berlin?"))).await;
    let call = of(&events, "TOOL_CALL_START");
    assert_eq!(call.first().map(|c| &c["toolCallName"]), Some(&json!("weather")), "{events:?}");
    assert_eq!(of(&events, "TOOL_CALL_RESULT")[0]["content"], "Sunny in Berlin");
    let finished = events.last().unwrap();
    assert_eq!(finished["outcome"]["type"], "success", "{finished}");
    assert!(finished["result"].as_str().unwrap().contains("Berlin"), "{finished}");

    let chat = json!({"id": "c-local", "messages": [{"id": "u1", "role": "user",
                      "parts": [{"type": "text", "text": "How is the weather in Oslo?"}]}]});
    let (status, body) = post(&address, "/ai-sdk/local", &chat.to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""output":"Sunny in Oslo""#) && body.contains("[DONE]"), "{body}");
}
