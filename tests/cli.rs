//! The command line in a user's binary (`examples/ops.rs`): run, list, show, signal,
//! cancel, retry, with exit codes and `--json` output scripts can rely on, over a
//! SQLite file, run as separate processes the way a shell runs them.

use std::path::PathBuf;
use std::process::{Command, Output};

use loopstack::RunId;
use serde_json::Value;

mod common;

fn ops() -> &'static PathBuf {
    static OPS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    OPS.get_or_init(|| common::example("ops"))
}

fn run(db: &PathBuf, args: &[&str]) -> Output {
    Command::new(ops()).arg("--db").arg(db).args(args).output().unwrap()
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_shell_starts_a_run_sees_it_wait_answers_it_and_reads_it_back() {
    let db = std::env::temp_dir().join(format!("loopstack-cli-{}.db", RunId::new()));

    let out = json(&run(&db, &["run", "review", "--input", r#"{"text": " Hello "}"#, "--wait", "--json"]));
    assert_eq!((out["status"].as_str(), out["place"].as_str()), (Some("waiting"), Some("drafted")));
    assert_eq!(out["waiting_for"], serde_json::json!(["approve"]));
    let run_id = out["run_id"].as_str().unwrap().to_owned();

    let listed = json(&run(&db, &["runs", "--status", "waiting", "--json"]));
    assert_eq!(listed["runs"][0]["run_id"].as_str(), Some(run_id.as_str()));

    // A payload that is not JSON, and a refused signal: one line on stderr, exit 1,
    // and the run still waits.
    let bad = run(&db, &["signal", &run_id, "approve", "{not json"]);
    assert_eq!(bad.status.code(), Some(1));
    let stderr = String::from_utf8(bad.stderr).unwrap();
    assert!(stderr.starts_with("error: the payload is not valid JSON") && stderr.lines().count() == 1, "{stderr}");
    let refused = run(&db, &["signal", &run_id, "approve", r#"{"reviewer": " "}"#]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8(refused.stderr).unwrap().contains("the reviewer has no name"));
    let unknown = run(&db, &["signal", &run_id, "publish", "{}"]);
    assert_eq!(unknown.status.code(), Some(1));
    // A message that holds line breaks (here a workflow's name) is still one line.
    let broken = run(&db, &["run", "no\nsuch\r\nworkflow\u{2028}here"]);
    assert_eq!(broken.status.code(), Some(1));
    let stderr = String::from_utf8(broken.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    assert!(stderr.starts_with("error: ") && stderr.contains(r"no\nsuch\r\nworkflow\u{2028}here"), "{stderr:?}");

    let done = json(&run(&db, &["signal", &run_id, "approve", r#"{"reviewer": "ada"}"#, "--json"]));
    assert_eq!(done["status"].as_str(), Some("completed"));

    let shown = json(&run(&db, &["show", &run_id, "--json"]));
    assert_eq!(shown["state"]["approved_by"].as_str(), Some("ada"));
    assert_eq!(shown["state"]["text"].as_str(), Some("Hello"));
    let steps: Vec<&str> =
        shown["history"].as_array().unwrap().iter().map(|s| s["transition"].as_str().unwrap()).collect();
    assert_eq!(steps, ["draft", "approve"]);
    let text = run(&db, &["show", &run_id]);
    assert!(String::from_utf8(text.stdout).unwrap().starts_with(&format!("run {run_id}: completed at end")));
    let _ = std::fs::remove_file(&db);
}

#[test]
fn queued_runs_go_to_a_worker_cancelled_ones_can_be_retried_and_mistakes_exit_non_zero() {
    let db = std::env::temp_dir().join(format!("loopstack-cli-{}.db", RunId::new()));
    let queued = json(&run(&db, &["run", "review", "--input", r#"{"text": "Hi"}"#, "--json"]));
    assert_eq!(queued["status"].as_str(), Some("queued"));
    let run_id = queued["run_id"].as_str().unwrap().to_owned();
    assert_eq!(json(&run(&db, &["worker", "--once", "--json"]))["driven"], 1);
    assert_eq!(json(&run(&db, &["show", &run_id, "--json"]))["status"].as_str(), Some("waiting"));

    assert!(run(&db, &["cancel", &run_id]).status.success());
    assert_eq!(json(&run(&db, &["show", &run_id, "--json"]))["status"].as_str(), Some("cancelled"));
    let retried = json(&run(&db, &["retry", &run_id, "--json"]));
    assert_eq!(retried["status"].as_str(), Some("waiting"));

    let unknown = run(&db, &["run", "nope"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(unknown.stderr).unwrap(),
        "error: no workflow named `nope` is registered; registered: review\n"
    );
    assert_eq!(run(&db, &["show", "not-a-run-id"]).status.code(), Some(2));
    assert_eq!(run(&db, &["frobnicate"]).status.code(), Some(2));
    let help = run(&db, &["--help"]);
    assert!(help.status.success() && String::from_utf8(help.stdout).unwrap().contains("Operate loopstack runs"));
    let _ = std::fs::remove_file(&db);
}

#[test]
fn serve_with_worker_drives_the_runs_queued_from_a_shell() {
    let db = std::env::temp_dir().join(format!("loopstack-cli-{}.db", RunId::new()));
    let queued = json(&run(&db, &["run", "review", "--input", r#"{"text": "Hi"}"#, "--json"]));
    let run_id = queued["run_id"].as_str().unwrap().to_owned();
    let mut serve = Command::new(ops())
        .arg("--db")
        .arg(&db)
        .args(["serve", "--port", "0", "--worker"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The server's worker takes the queued run to its wait; asked until it has.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        let shown = json(&run(&db, &["show", &run_id, "--json"]));
        let status = shown["status"].as_str().unwrap().to_owned();
        if status != "queued" && status != "running" || std::time::Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(status, "waiting");
    let _ = std::fs::remove_file(&db);
}
