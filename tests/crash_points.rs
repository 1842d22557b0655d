//! A real child process, killed with SIGKILL at several points of a run, and the run
//! resumed from its SQLite file in another process (this one), checked against an
//! uninterrupted run:
//!
//! - before a model turn (the second model call has begun),
//! - during tool execution (with the tool's idempotency key, which the rerun repeats),
//! - between transitions (one step committed, the next one just started),
//! - while waiting for a signal (the signal is sent after the process died).
//!
//! The child is this test binary itself, run again with `LOOPSTACK_CRASH_POINT` set: it
//! drives the run in a fresh process and prints a marker when it reaches the point,
//! where it stays until it is killed.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use loopstack::llm::{Agent, ChatRequest, ChatResponse, ContentBlock, Message, Role, ScriptedModel};
use loopstack::llm::{StopReason, ToolUse, Usage};
use loopstack::prelude::*;
use loopstack::{RunOutcome, RunStatus, SqliteStore, Store};

const POINT: &str = "LOOPSTACK_CRASH_POINT";
const DB: &str = "LOOPSTACK_CRASH_DB";
const RUN: &str = "LOOPSTACK_CRASH_RUN";
const KEYS: &str = "LOOPSTACK_CRASH_KEYS";
const QUESTION: &str = "How is the weather in Berlin?";

/// The crash point of this process, if it is a child.
fn point() -> Option<String> {
    std::env::var(POINT).ok()
}

/// Marks that the child reached its crash point, then never returns.
async fn reached(point: &str) -> ! {
    println!("AT {point}");
    std::future::pending::<()>().await;
    unreachable!()
}

/// The agent; in a child, it stops at the model's second call or in the tool.
fn agent() -> Agent {
    let model = ScriptedModel::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().unwrap();
        let usage = Usage::new(20, 5);
        if let Some(result) = last.tool_results_iter().next() {
            if point().as_deref() == Some("model") {
                println!("AT model");
                // The model call never returns: the process dies inside it.
                loop {
                    std::thread::park();
                }
            }
            let answer = Message::assistant(format!("Here is the weather: {}", result.content));
            return Ok(ChatResponse::new(answer, StopReason::EndTurn, usage, "scripted"));
        }
        let call = ToolUse::new("call_0", "get_weather", serde_json::json!({ "location": "Berlin" }));
        let message = Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] };
        Ok(ChatResponse::new(message, StopReason::ToolUse, usage, "scripted"))
    });
    Agent::new(model, "scripted", ToolRegistry::new().with(Weather).unwrap())
}

/// Retrieve weather information; records its idempotency key before its effect (in the
/// child to a file, in this process in `SEEN`).
struct Weather;

static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WeatherArgs {
    /// City or location name
    location: String,
}

/// Retrieve weather information.
#[tool(name = "get_weather")]
impl Weather {
    async fn handle(&self, args: WeatherArgs, cx: &ToolContext) -> Result<String, ToolError> {
        let key = cx.idempotency_key().expect("a call made in a run has a key");
        SEEN.lock().unwrap().push(key.clone());
        if let Ok(path) = std::env::var(KEYS) {
            let mut keys = std::fs::read_to_string(&path).unwrap_or_default();
            keys.push_str(&key);
            keys.push('\n');
            std::fs::write(&path, keys).unwrap();
        }
        if point().as_deref() == Some("tool") {
            reached("tool").await;
        }
        Ok(format!("Mostly sunny in {}, 14C.", args.location))
    }
}

/// Three steps and a wait: `first` saves a note, `second` another, then the run waits
/// for `approve`.
struct Steps;

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct StepState {
    log: Vec<String>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Note(String);

impl DocumentType for Note {
    const TYPE: &'static str = "note";
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Approval {
    by: String,
}

#[workflow(name = "steps", input = ())]
impl Steps {
    #[transition(to = One)]
    async fn first(&self, state: &mut StepState, cx: &mut RunContext) -> Result<()> {
        state.log.push("first".into());
        cx.save(&Note("first".into()))?;
        Ok(())
    }

    #[transition(from = One, to = Two)]
    async fn second(&self, state: &mut StepState, cx: &mut RunContext) -> Result<()> {
        if point().as_deref() == Some("between") {
            reached("between").await;
        }
        state.log.push("second".into());
        cx.save(&Note("second".into()))?;
        Ok(())
    }

    #[transition(from = Two, to = End, wait)]
    async fn approve(&self, state: &mut StepState, cx: &mut RunContext, approval: Approval) -> Result<()> {
        state.log.push(format!("approved by {}", approval.by));
        cx.save(&Note(format!("approved by {}", approval.by)))?;
        Ok(())
    }
}

impl From<()> for StepState {
    fn from((): ()) -> Self {
        Self::default()
    }
}

/// What a run keeps: its transitions, and its documents as (type, content).
async fn snapshot(store: &dyn Store, run_id: RunId) -> (Vec<String>, Vec<(String, String)>) {
    let steps = store.history(run_id).await.unwrap().into_iter().map(|s| s.transition.into_owned()).collect();
    let docs = store.documents(run_id).await.unwrap();
    (steps, docs.iter().map(|d| (d.doc_type.to_string(), d.content.get().to_owned())).collect())
}

/// The child: drives a run of the workflow the point belongs to, with the given id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child() {
    let Some(point) = point() else { return };
    let store = SqliteStore::open(std::env::var(DB).unwrap()).await.unwrap();
    let runtime = Runtime::with_store(store);
    let run_id: RunId = std::env::var(RUN).unwrap().parse().unwrap();
    match point.as_str() {
        "model" | "tool" => {
            runtime.start(&agent(), QUESTION.into()).run_id(run_id).await.unwrap();
        }
        "between" => {
            runtime.start(&Steps, ()).run_id(run_id).await.unwrap();
        }
        "waiting" => {
            let report = runtime.start(&Steps, ()).run_id(run_id).await.unwrap();
            assert!(matches!(report.outcome, RunOutcome::Waiting { .. }));
            reached("waiting").await;
        }
        other => panic!("unknown crash point {other}"),
    }
    panic!("the child passed its crash point `{point}`");
}

/// Runs the child to `point`, kills it there (SIGKILL), and returns the run's id.
fn crash_at(point: &str, db: &Path, keys: &Path) -> RunId {
    let run_id = RunId::new();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads", "1"])
        .env(POINT, point)
        .env(DB, db)
        .env(RUN, run_id.to_string())
        .env(KEYS, keys)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let marker = format!("AT {point}");
    let mut seen = false;
    for line in stdout.lines() {
        if line.unwrap().contains(&marker) {
            seen = true;
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(seen, "the child reached `{point}` (it exited with {status})");
    assert!(!status.success());
    run_id
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loopstack-crash-{}", RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An uninterrupted run of the agent, for comparison.
async fn agent_reference() -> (Vec<String>, Vec<(String, String)>) {
    let runtime = Runtime::new();
    let reply = agent().ask(&runtime, QUESTION).await.unwrap();
    snapshot(&**runtime.store(), reply.run_id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_before_a_model_turn_the_run_resumes_to_the_same_result() {
    if point().is_some() {
        return;
    }
    let dir = tempdir();
    let (db, keys) = (dir.join("runs.db"), dir.join("keys"));
    let run_id = crash_at("model", &db, &keys);
    let store = Arc::new(SqliteStore::open(&db).await.unwrap());
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.step), (RunStatus::Running, "ready", 2), "{record:?}");

    let runtime = Runtime::with_shared_store(store.clone());
    let report = runtime.resume(&agent(), run_id).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(snapshot(&*store, run_id).await, agent_reference().await);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_during_a_tool_call_the_call_runs_again_with_the_same_idempotency_key() {
    if point().is_some() {
        return;
    }
    let dir = tempdir();
    let (db, keys) = (dir.join("runs.db"), dir.join("keys"));
    let run_id = crash_at("tool", &db, &keys);
    let store = Arc::new(SqliteStore::open(&db).await.unwrap());
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.step), (RunStatus::Running, "prompt_executed", 1));

    let runtime = Runtime::with_shared_store(store.clone());
    let agent = agent();
    let report = runtime.resume(&agent, run_id).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(snapshot(&*store, run_id).await, agent_reference().await);
    // The interrupted call and its rerun carried one key: run, step 2, call id.
    let key = format!("{run_id}/2/call_0");
    let recorded = std::fs::read_to_string(&keys).unwrap();
    assert_eq!(recorded.lines().collect::<Vec<_>>(), [key.as_str()], "the killed call's key");
    let rerun: Vec<String> =
        SEEN.lock().unwrap().iter().filter(|k| k.starts_with(&run_id.to_string())).cloned().collect();
    assert_eq!(rerun, [key], "the rerun carried the same key");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_transitions_the_run_resumes_after_its_last_commit() {
    if point().is_some() {
        return;
    }
    let dir = tempdir();
    let (db, keys) = (dir.join("runs.db"), dir.join("keys"));
    let run_id = crash_at("between", &db, &keys);
    let store = Arc::new(SqliteStore::open(&db).await.unwrap());
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.step), (RunStatus::Running, "one", 1));

    let runtime = Runtime::with_shared_store(store.clone());
    let report = runtime.resume(&Steps, run_id).await.unwrap();
    assert!(matches!(report.outcome, RunOutcome::Waiting { place: "two", .. }), "{:?}", report.outcome);
    let report = runtime.signal(&Steps, run_id, ("approve", serde_json::json!({"by": "ada"}))).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    let (steps, docs) = snapshot(&*store, run_id).await;
    assert_eq!(steps, ["first", "second", "approve"]);
    let notes: Vec<&str> = docs.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(notes, [r#""first""#, r#""second""#, r#""approved by ada""#]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_waiting_the_run_takes_its_signal_in_another_process() {
    if point().is_some() {
        return;
    }
    let dir = tempdir();
    let (db, keys) = (dir.join("runs.db"), dir.join("keys"));
    let run_id = crash_at("waiting", &db, &keys);
    let store = Arc::new(SqliteStore::open(&db).await.unwrap());
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.step), (RunStatus::Waiting, "two", 2));
    assert_eq!(record.waiting_for, ["approve"]);
    assert_eq!(record.lease_owner, None, "a waiting run holds no lease");

    let runtime = Runtime::with_shared_store(store.clone());
    let report = runtime.signal(&Steps, run_id, ("approve", serde_json::json!({"by": "ada"}))).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    assert_eq!(report.state.log, ["first", "second", "approved by ada"]);
    let (steps, _) = snapshot(&*store, run_id).await;
    assert_eq!(steps, ["first", "second", "approve"]);
    std::fs::remove_dir_all(dir).unwrap();
}
