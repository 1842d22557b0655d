//! The command line in a user's binary (`examples/ops.rs`): run, list, show, signal,
//! cancel, retry, with exit codes and `--json` output scripts can rely on, over a
//! SQLite file, run as separate processes the way a shell runs them; and built on by
//! an app (`examples/helpdesk.rs`) with its own name, version, database and command.

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
    // Reading runs from a database that is not there says so, and creates none.
    let missing = run(&db, &["runs"]);
    assert_eq!(missing.status.code(), Some(1));
    let stderr = String::from_utf8(missing.stderr).unwrap();
    assert!(stderr.starts_with("error: there is no database at ") && stderr.lines().count() == 1, "{stderr}");
    assert!(!db.exists());
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

/// `examples/helpdesk.rs`: an app with its own name, version, default database
/// (`helpdesk.db`, in the directory it runs in) and variable (`HELPDESK_DB`), and a
/// command of its own (`open`).
fn helpdesk() -> &'static PathBuf {
    static HELPDESK: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HELPDESK.get_or_init(|| common::example("helpdesk"))
}

/// The helpdesk run in `dir`, with `HELPDESK_DB` as given (unset when `None`).
fn desk(dir: &std::path::Path, env: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(helpdesk());
    command.current_dir(dir).args(args).env_remove("HELPDESK_DB");
    if let Some(db) = env {
        command.env("HELPDESK_DB", db);
    }
    command.output().unwrap()
}

/// A command that failed: exit 1 and one line `error: ...` on stderr; the line.
fn error_line(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8(out.stderr.clone()).unwrap();
    assert!(stderr.starts_with("error: ") && stderr.lines().count() == 1, "{stderr:?}");
    stderr
}

fn run_ids(out: &Output) -> Vec<String> {
    json(out)["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn an_app_names_its_command_line_versions_it_and_adds_its_own_commands() {
    let dir = std::env::temp_dir().join(format!("loopstack-helpdesk-{}", RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();

    let version = desk(&dir, None, &["--version"]);
    assert!(version.status.success(), "{version:?}");
    assert_eq!(String::from_utf8(version.stdout).unwrap(), format!("helpdesk {}\n", env!("CARGO_PKG_VERSION")));

    let help = desk(&dir, None, &["--help"]);
    assert!(help.status.success(), "{help:?}");
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.starts_with("The helpdesk: open tickets") && help.contains("Usage: helpdesk "), "{help}");
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for ours in ["workflows", "run", "runs", "show", "signal", "resume", "retry", "cancel", "worker", "open"] {
        assert!(commands.contains(&ours), "{ours} missing from {commands:?}");
    }
    assert!(help.contains("[default: helpdesk.db] [env: HELPDESK_DB]"), "{help}");

    // Listing, showing or listing workflows before anything ran creates no store,
    // and says so for the commands that read one.
    let missing = error_line(&desk(&dir, None, &["runs"]));
    assert!(missing.contains("no database at `helpdesk.db`") && missing.contains("`runs`"), "{missing}");
    let missing = error_line(&desk(&dir, None, &["show", &RunId::new().to_string()]));
    assert!(missing.contains("no database at `helpdesk.db`") && missing.contains("`show`"), "{missing}");
    let workflows = desk(&dir, None, &["workflows"]);
    assert_eq!(String::from_utf8(workflows.stdout).unwrap(), "ticket\n");
    assert!(!dir.join("helpdesk.db").exists() && !dir.join("loopstack.db").exists());

    // The app's own command runs the app's code, over the app's database.
    let opened = json(&desk(&dir, None, &["open", "--subject", "The printer", "--json"]));
    let ticket = opened["ticket"].as_str().unwrap().to_owned();
    assert!(dir.join("helpdesk.db").exists() && !dir.join("loopstack.db").exists());
    let refused = error_line(&desk(&dir, None, &["open", "--subject", " "]));
    assert_eq!(refused, "error: a ticket needs a subject\n");

    // loopstack's commands read the same database.
    assert_eq!(run_ids(&desk(&dir, None, &["runs", "--json"])), [ticket.as_str()]);
    let shown = json(&desk(&dir, None, &["show", &ticket, "--json"]));
    assert_eq!((shown["status"].as_str(), shown["place"].as_str()), (Some("waiting"), Some("open")));
    assert_eq!(shown["state"]["subject"].as_str(), Some("The printer"));
    assert!(!dir.join("loopstack.db").exists());

    // The variable names another database, for every command; --db wins over it.
    let other = dir.join("other.db");
    let other = other.to_str().unwrap();
    let missing = error_line(&desk(&dir, Some(other), &["runs"]));
    assert!(missing.contains(&format!("no database at `{other}`")), "{missing}");
    let second = json(&desk(&dir, Some(other), &["open", "--subject", "The coffee", "--json"]));
    let second = second["ticket"].as_str().unwrap().to_owned();
    assert_eq!(run_ids(&desk(&dir, Some(other), &["runs", "--json"])), [second.as_str()]);
    assert_eq!(run_ids(&desk(&dir, None, &["runs", "--json"])), [ticket.as_str()]);
    assert_eq!(run_ids(&desk(&dir, Some(other), &["--db", "helpdesk.db", "runs", "--json"])), [ticket.as_str()]);
    assert_eq!(run_ids(&desk(&dir, Some(other), &["runs", "--db", "helpdesk.db", "--json"])), [ticket.as_str()]);
    // An empty variable is no variable.
    assert_eq!(run_ids(&desk(&dir, Some(""), &["runs", "--json"])), [ticket.as_str()]);

    let closed = json(&desk(&dir, None, &["signal", &ticket, "close", r#"{"resolution": "toner"}"#, "--json"]));
    assert_eq!(closed["status"].as_str(), Some("completed"));
    let _ = std::fs::remove_dir_all(&dir);
}
