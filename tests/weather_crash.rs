//! The weather example survives a dead process: it runs against a local server that
//! speaks the OpenAI Chat Completions wire format, is killed with SIGKILL while its
//! model call is in flight, and `--resume RUN_ID` finishes the run from the SQLite
//! file, with exactly the documents of an uninterrupted run.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loopstack::{RunId, RunStatus, SqliteStore, Store};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio::sync::Notify;

mod common;

/// The weather example, built next to this test's binary.
fn example() -> &'static PathBuf {
    static EXAMPLE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXAMPLE.get_or_init(|| common::example("weather"))
}

/// How the fake server answers.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Take the request and never answer: the model call stays in flight.
    Hang,
    /// Answer like a model: first a tool call, then (with a tool result) the answer.
    Answer,
}

fn completion(body: &str) -> String {
    let message = if body.contains("\"role\":\"tool\"") {
        serde_json::json!({"role": "assistant", "content": "It is mostly sunny in Berlin."})
    } else {
        serde_json::json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"location\":\"Berlin\"}"}
        }]})
    };
    let finish = if message.get("tool_calls").is_some() { "tool_calls" } else { "stop" };
    serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
    })
    .to_string()
}

/// Serves `POST /v1/chat/completions` on loopback; counts requests and notifies each.
async fn serve(mode: Mode, requests: Arc<AtomicUsize>, arrived: Arc<Notify>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let (requests, arrived) = (requests.clone(), arrived.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                // Read the head, then the body by its Content-Length.
                let body = loop {
                    let n = socket.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).into_owned();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                            })
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
                        }
                    }
                };
                requests.fetch_add(1, Ordering::SeqCst);
                arrived.notify_one();
                if mode == Mode::Hang {
                    std::future::pending::<()>().await;
                }
                let reply = completion(&body);
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                    reply.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    port
}

fn weather(db: &std::path::Path, port: u16, extra: &[&str]) -> Command {
    let mut cmd = Command::new(example());
    cmd.args(["--provider", "openai", "--model", "test-model", "--db"])
        .arg(db)
        .args(extra)
        .env("OPENAI_BASE_URL", format!("http://127.0.0.1:{port}"))
        .env("OPENAI_API_KEY", "test-key")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_during_a_model_call_resumes_to_completion() {
    let dir = std::env::temp_dir().join(format!("loopstack-weather-crash-{}-{}", std::process::id(), RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("weather.db");

    // 1. The model call hangs; the process is killed while it is in flight.
    let (requests, arrived) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
    let port = serve(Mode::Hang, requests.clone(), arrived.clone()).await;
    let mut child = weather(&db, port, &[]).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let run_id: RunId = loop {
        let line = rx.recv().expect("the example printed its run id");
        if let Some(rest) = line.strip_prefix("Run ") {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    // A guard against a hang, not a timed assertion: the request must come.
    tokio::time::timeout(Duration::from_secs(120), arrived.notified()).await.expect("the model request arrived");
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success());

    let store = SqliteStore::open(&db).await.unwrap();
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.step), (RunStatus::Running, "ready", 1), "{record:?}");
    assert_eq!(store.documents(run_id).await.unwrap().len(), 1, "only the question was committed");
    drop(store);

    // 2. A new process resumes the run from the file; the model now answers.
    let requests = Arc::new(AtomicUsize::new(0));
    let port = serve(Mode::Answer, requests.clone(), Arc::new(Notify::new())).await;
    let out = weather(&db, port, &["--resume", &run_id.to_string()]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("It is mostly sunny in Berlin."), "{stdout}");
    assert_eq!(requests.load(Ordering::SeqCst), 2, "the interrupted model turn ran again, then the final one");

    let store = SqliteStore::open(&db).await.unwrap();
    let record = store.load_run(run_id).await.unwrap();
    assert_eq!((record.status, record.epoch), (RunStatus::Completed, 2), "one takeover");
    let steps: Vec<String> =
        store.history(run_id).await.unwrap().into_iter().map(|s| s.transition.into_owned()).collect();
    assert_eq!(steps, ["setup", "llm_turn", "execute_tool_calls", "tools_complete", "llm_turn", "respond"]);
    // Exactly the documents of an uninterrupted run: question, call, result, answer.
    let docs = store.documents(run_id).await.unwrap();
    let roles: Vec<String> = docs
        .iter()
        .map(|d| d.value().expect("a stored document reads back")["role"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"], "{docs:?}");
    assert_eq!(store.document_versions(run_id).await.unwrap().len(), 4, "nothing committed twice");
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}
