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
        "error: no workflow named `nope` is registered; registered: desk, review\n"
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
    assert!(help.starts_with("The helpdesk: three agents") && help.contains("Usage: helpdesk "), "{help}");
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let ours = [
        "workflows",
        "run",
        "runs",
        "show",
        "export",
        "signal",
        "approve",
        "deny",
        "resume",
        "retry",
        "cancel",
        "worker",
    ];
    for ours in ours.into_iter().chain(["open", "ask"]) {
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
    assert_eq!(String::from_utf8(workflows.stdout).unwrap(), "billing\nticket\ntriage\n");
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

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn a_person_answers_an_agents_tool_calls_from_the_shell_knowing_no_call_id_beforehand() {
    let db = std::env::temp_dir().join(format!("loopstack-cli-{}.db", RunId::new()));

    // The `desk` agent (a named one) asks to reset two passwords; both calls wait.
    let prompt = r#""Reset the passwords of ada and bob""#;
    let out = json(&run(&db, &["run", "desk", "--input", prompt, "--wait", "--json"]));
    assert_eq!((out["status"].as_str(), out["place"].as_str()), (Some("waiting"), Some("awaiting_approval")));
    let run_id = out["run_id"].as_str().unwrap().to_owned();
    let pending = out["pending_calls"].as_array().unwrap();
    let users: Vec<&str> = pending.iter().map(|c| c["arguments"]["user"].as_str().unwrap()).collect();
    assert_eq!(users, ["ada", "bob"]);
    assert!(pending.iter().all(|c| c["name"] == "reset_password"));
    let (ada, bob) = (pending[0]["call_id"].as_str().unwrap(), pending[1]["call_id"].as_str().unwrap());

    // `show` says in words what the run waits for: the calls, and the signal with its payload's shape.
    let shown = stdout(&run(&db, &["show", &run_id]));
    assert!(shown.contains("\nwaits for:\n  2 tool call(s) wait for a decision"), "{shown}");
    assert!(shown.contains(&format!("    {ada}  reset_password {{\"user\":\"ada\"}}\n")), "{shown}");
    assert!(shown.contains(&format!("    {bob}  reset_password {{\"user\":\"bob\"}}\n")), "{shown}");
    assert!(
        shown.contains(
            "  signal decide_tools -> prompt_executed, payload {decisions: [{call_id: string, approved: boolean, \
             input?: any, reason?: string | null, result?: string | null}]}"
        ),
        "{shown}"
    );
    let shown = json(&run(&db, &["show", &run_id, "--json"]));
    assert_eq!(shown["waits_for"]["pending_calls"], out["pending_calls"]);
    assert_eq!(shown["waits_for"]["signals"][0]["name"], "decide_tools");
    assert!(shown["waits_for"]["signals"][0]["payload_schema"].is_object());
    assert_eq!(shown["waits_for"]["timer"], Value::Null);

    // A call that does not wait is refused, naming those that do; nothing changes.
    let unknown = error_line(&run(&db, &["approve", &run_id, ada, "call_nope"]));
    assert!(unknown.contains("call `call_nope` does not wait for a decision"), "{unknown}");
    assert!(unknown.contains(&format!("{ada} (reset_password), {bob} (reset_password)")), "{unknown}");
    let empty = error_line(&run(&db, &["deny", &run_id, "--reason", " "]));
    assert!(empty.contains("the --reason is empty"), "{empty}");
    assert_eq!(run(&db, &["deny", &run_id]).status.code(), Some(2), "deny needs a --reason");
    assert_eq!(json(&run(&db, &["show", &run_id, "--json"]))["waits_for"]["pending_calls"], out["pending_calls"]);

    // Approving one call keeps the run waiting for the other.
    let partial = json(&run(&db, &["approve", &run_id, ada, "--json"]));
    assert_eq!((partial["status"].as_str(), partial["place"].as_str()), (Some("waiting"), Some("awaiting_approval")));
    let left: Vec<&str> =
        partial["pending_calls"].as_array().unwrap().iter().map(|c| c["call_id"].as_str().unwrap()).collect();
    assert_eq!(left, [bob]);

    // Denying with no call named denies every call still waiting; the run goes on to its answer.
    let done = stdout(&run(&db, &["deny", &run_id, "--reason", "bob is on leave"]));
    assert!(done.starts_with(&format!("{run_id} completed")), "{done}");
    let shown = stdout(&run(&db, &["show", &run_id]));
    assert!(shown.contains("Done: the password of ada is reset; denied by the user: bob is on leave."), "{shown}");
    assert!(!shown.contains("waits for:"), "{shown}");

    // A run that has ended, or waits for something else, takes no decision, and says how it stands.
    let ended = error_line(&run(&db, &["approve", &run_id]));
    assert!(ended.contains(&format!("run {run_id} does not wait for approval: it is completed at end")), "{ended}");
    let review = json(&run(&db, &["run", "review", "--input", r#"{"text": "Hi"}"#, "--wait", "--json"]));
    let review = review["run_id"].as_str().unwrap();
    let other = error_line(&run(&db, &["deny", review, "--reason", "no"]));
    assert!(
        other.contains("does not wait for approval: it waits at drafted for the signal approve or a timer"),
        "{other}"
    );
    // Its `show` names the signal's payload and the timer with its due time.
    let shown = stdout(&run(&db, &["show", review]));
    assert!(
        shown.contains(&format!(
            "  signal approve -> end, payload {{reviewer: string}} (`signal {review} approve PAYLOAD`)"
        )),
        "{shown}"
    );
    let due = json(&run(&db, &["show", review, "--json"]))["waits_for"]["timer"]["due_at"].as_str().unwrap().to_owned();
    assert!(shown.contains(&format!("  a timer, due at {due}: expire -> end after 7d\n")), "{shown}");
    let _ = std::fs::remove_file(&db);
}

/// The helpdesk's agents across processes: `ask` runs triage, which asks billing (a
/// child run) and hands the conversation to password, whose reset waits for
/// approval; the process ends. A second process approves (loopstack's `approve`),
/// and the run ends with the password agent's answer; a third shows who said what.
#[test]
fn the_helpdesk_hands_off_waits_for_approval_and_answers_in_another_process() {
    let dir = std::env::temp_dir().join(format!("loopstack-helpdesk-agents-{}", RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    let question = "I'm ada@example.com. I'm locked out of my account, and was I charged twice in May?";

    let asked = desk(&dir, None, &["ask", question]);
    assert!(asked.status.success(), "{asked:?}");
    let out = String::from_utf8(asked.stdout).unwrap();
    assert!(out.contains("[triage] calls billing"), "{out}");
    assert!(out.contains("No, only once"), "billing's answer is the call's result: {out}");
    assert!(out.contains("[triage] hands the conversation to password"), "{out}");
    assert!(out.contains(r#"[password] calls reset_password {"email":"ada@example.com"}"#), "{out}");
    let waits = out.lines().find(|l| l.contains("waits for approval of reset_password")).expect(&out);
    let run = waits.split_whitespace().nth(1).unwrap().to_owned();
    assert!(!out.contains("is reset"), "nothing is reset before the approval: {out}");

    let approved = desk(&dir, None, &["approve", &run]);
    assert!(approved.status.success(), "{approved:?}");
    assert!(String::from_utf8(approved.stdout).unwrap().contains("completed"));

    let shown = json(&desk(&dir, None, &["show", &run, "--json"]));
    assert_eq!((shown["status"].as_str(), shown["workflow"].as_str()), (Some("completed"), Some("triage")));
    assert_eq!(shown["state"]["agent"].as_str(), Some("password"));
    let answer = shown["state"]["output"].as_str().unwrap();
    assert!(answer.starts_with("Done: the password of ada@example.com is reset"), "{answer}");
    assert!(answer.contains("About your bill: No, only once"), "{answer}");
    // The billing agent's run is a child of the triage run, in the same database.
    let runs = json(&desk(&dir, None, &["runs", "--workflow", "billing", "--json"]));
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1);

    // The run, exported for replaying offline: the record and every document, as a
    // recording of its model turns.
    let exported = desk(&dir, None, &["export", &run]);
    assert!(exported.status.success(), "{exported:?}");
    let export = loopstack::llm::RunExport::from_json(std::str::from_utf8(&exported.stdout).unwrap()).unwrap();
    assert_eq!((export.workflow.as_str(), export.run_id.to_string()), ("triage", run.clone()));
    let recording = loopstack::llm::Recording::from_export(&export).unwrap();
    assert_eq!(recording.turns().len(), 4, "two of triage's turns and two of password's");
    assert_eq!(recording.prompt(), question);

    // The same story in one process, approved there: `cargo run --example helpdesk`.
    let story = desk(&dir, None, &[]);
    assert!(story.status.success(), "{story:?}");
    let story = String::from_utf8(story.stdout).unwrap();
    let at = |text: &str| story.find(text).unwrap_or_else(|| panic!("{text:?} missing from {story}"));
    assert!(at("hands the conversation to password") < at("waits for approval"));
    assert!(at("waits for approval") < at("-- approving") && at("-- approving") < at("[password] Done:"));
    assert!(story.contains("completed"), "{story}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example `versions`: one binary, two deploys of the `triage` workflow by
/// `TRIAGE_BUILD`.
fn triage(db: &PathBuf, build: &str, args: &[&str]) -> Output {
    static VERSIONS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let bin = VERSIONS.get_or_init(|| common::example("versions"));
    Command::new(bin).env("TRIAGE_BUILD", build).arg("--db").arg(db).args(args).output().unwrap()
}

#[test]
fn a_run_parked_by_one_deploy_is_migrated_and_finished_by_the_next() {
    let db = std::env::temp_dir().join(format!("loopstack-versions-{}.db", RunId::new()));
    let started = json(&triage(&db, "1", &["run", "triage", "--input", r#"{"title": "printer"}"#, "--wait", "--json"]));
    assert_eq!((started["place"].as_str(), started["version"].as_u64()), (Some("filed"), Some(1)), "{started}");
    let run_id = started["run_id"].as_str().unwrap().to_owned();

    // The next deploy lists the run with the version it was started under.
    let listed = triage(&db, "2", &["runs"]);
    let line = String::from_utf8(listed.stdout).unwrap();
    assert!(line.starts_with(&run_id) && line.contains(" triage ") && line.contains(" v1 "), "{line}");
    assert_eq!(json(&triage(&db, "2", &["runs", "--json"]))["runs"][0]["version"], 1);

    // Its signal migrates the run (a step of its own) and finishes it on version 2.
    let done = json(&triage(&db, "2", &["signal", &run_id, "assign", r#"{"to": "ada"}"#, "--json"]));
    assert_eq!(done["status"].as_str(), Some("completed"), "{done}");
    let shown = json(&triage(&db, "2", &["show", &run_id, "--json"]));
    assert_eq!((shown["version"].as_u64(), shown["state"]["assignee"].as_str()), (Some(2), Some("ada")));
    let steps: Vec<&str> =
        shown["history"].as_array().unwrap().iter().map(|s| s["transition"].as_str().unwrap()).collect();
    assert_eq!(steps, ["file", "migrate v1 -> v2", "assign", "close"]);
    let text = String::from_utf8(triage(&db, "2", &["show", &run_id]).stdout).unwrap();
    assert!(
        text.contains("(workflow triage v2, step 4)") && text.contains("filed -> open (migrate v1 -> v2)"),
        "{text}"
    );

    // The old deploy, still running somewhere, refuses a run of the new version.
    let newer = json(&triage(&db, "2", &["run", "triage", "--input", r#"{"title": "desk"}"#, "--wait", "--json"]));
    let newer_id = newer["run_id"].as_str().unwrap().to_owned();
    let refused = triage(&db, "1", &["resume", &newer_id]);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert!(stderr.contains("is of version 2, which this build cannot drive: it drives version 1"), "{stderr}");
    let still = json(&triage(&db, "2", &["show", &newer_id, "--json"]));
    assert_eq!((still["status"].as_str(), still["place"].as_str()), (Some("waiting"), Some("open")));
    std::fs::remove_file(&db).ok();
}

#[test]
fn a_shell_adds_lists_pauses_resumes_and_deletes_schedules_and_a_worker_starts_one() {
    let db = std::env::temp_dir().join(format!("loopstack-cli-{}.db", RunId::new()));
    let input = r#"{"text": "nightly"}"#;
    // Mistakes: one line on stderr, exit 1, nothing stored.
    let too_long = "213503982334d".repeat(1001); // each part fits; their sum does not
    for (args, message) in [
        (vec!["--cron", "61 * * * *"], "error: invalid cron expression `61 * * * *`"),
        (vec!["--every", too_long.as_str()], "error: invalid interval `213503982334d213503982334d"),
        (vec!["--cron", "0 7 * * *", "--timezone", "Mars/Olympus"], "error: unknown time zone `Mars/Olympus`"),
        (vec!["--every", "soon"], "error: invalid interval `soon`"),
        (vec!["--every", "1h", "--missed", "sometimes"], "error: unknown missed-times policy `sometimes`"),
        (vec!["--every", "1h", "--overlap", "sometimes"], "error: unknown overlap policy `sometimes`"),
        (
            vec!["--cron", "0 25 * * *"],
            "error: invalid cron expression `0 25 * * *`: the hour `25` is out of range 0-23",
        ),
        (vec!["--cron", "0 0 7 * * * 2030"], "error: invalid cron expression `0 0 7 * * * 2030`: expected 5 fields"),
    ] {
        let out = run(&db, &[&["schedule", "add", "nightly", "review", "--input", input][..], &args].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.starts_with(message) && stderr.lines().count() == 1, "{args:?}: {stderr}");
    }
    let unknown = run(&db, &["schedule", "add", "nightly", "no_such_flow", "--every", "1h"]);
    assert!(String::from_utf8(unknown.stderr).unwrap().starts_with("error: workflow `no_such_flow` is not registered"));
    let bad_input = run(&db, &["schedule", "add", "nightly", "review", "--every", "1h", "--input", r#"{"txt": 1}"#]);
    assert!(String::from_utf8(bad_input.stderr).unwrap().starts_with("error: the input of a schedule of `review`"));
    assert_eq!(json(&run(&db, &["schedule", "list", "--json"]))["schedules"], serde_json::json!([]));

    let cron = json(&run(
        &db,
        &[
            "schedule",
            "add",
            "morning",
            "review",
            "--cron",
            "0 7 * * *",
            "--timezone",
            "Europe/Berlin",
            "--overlap",
            "queue",
            "--input",
            input,
            "--json",
        ],
    ));
    assert_eq!(
        (cron["id"].as_str(), cron["timezone"].as_str(), cron["paused"].as_bool(), cron["overlap"].as_str()),
        (Some("morning"), Some("Europe/Berlin"), Some(false), Some("queue_one"))
    );
    assert!(matches!(cron["next_due"].as_str(), Some(t) if t.ends_with(":00:00.000Z")), "{cron}");
    let taken = run(&db, &["schedule", "add", "morning", "review", "--every", "1h", "--input", input]);
    let stderr = String::from_utf8(taken.stderr).unwrap();
    assert!(stderr.starts_with("error: schedule `morning` already exists"), "{stderr}");

    let paused = json(&run(&db, &["schedule", "pause", "morning", "--json"]));
    assert_eq!(paused["paused"].as_bool(), Some(true));
    let listed = String::from_utf8(run(&db, &["schedule", "list"]).stdout).unwrap();
    assert!(
        listed.starts_with(
            "morning  review  cron `0 7 * * *` (Europe/Berlin)  missed: skip  overlap: queue_one  paused  no run yet"
        ),
        "{listed}"
    );
    assert_eq!(json(&run(&db, &["schedule", "resume", "morning", "--json"]))["paused"].as_bool(), Some(false));

    // Every second, started by a worker process once due (each `worker --once`
    // looks, and the first one after the due time starts and drives it).
    json(&run(
        &db,
        &[
            "schedule",
            "add",
            "often",
            "review",
            "--every",
            "1s",
            "--missed",
            "catch-up-once",
            "--input",
            input,
            "--json",
        ],
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let last_run = loop {
        run(&db, &["worker", "--once"]);
        let listed = json(&run(&db, &["schedule", "list", "--json"]));
        let often = listed["schedules"].as_array().unwrap().iter().find(|s| s["id"] == "often").unwrap().clone();
        if let Some(run_id) = often["last_run"].as_str() {
            break run_id.to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "no worker started the schedule: {listed}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let shown = json(&run(&db, &["show", &last_run, "--json"]));
    assert_eq!(shown["workflow"].as_str(), Some("review"));
    assert_eq!(shown["state"]["text"].as_str(), Some("nightly"), "the schedule's input");

    assert_eq!(json(&run(&db, &["schedule", "delete", "often", "--json"]))["deleted"].as_bool(), Some(true));
    let gone = run(&db, &["schedule", "delete", "often"]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(String::from_utf8(gone.stderr).unwrap().starts_with("error: schedule `often` not found"));
    let ids: Vec<String> = json(&run(&db, &["schedule", "list", "--json"]))["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["morning"], "kept in the store across processes");
    let _ = std::fs::remove_file(&db);
}

#[test]
fn a_shell_forks_a_run_with_another_prompt_and_show_says_what_changed() {
    let db = std::env::temp_dir().join(format!("loopstack-cli-{}.db", RunId::new()));
    let out = json(&run(&db, &["run", "desk", "--input", r#""Reset the password of ada""#, "--wait", "--json"]));
    assert_eq!(out["place"].as_str(), Some("awaiting_approval"), "{out}");
    let source = out["run_id"].as_str().unwrap().to_owned();

    let fork = json(&run(&db, &["fork", &source, "--step", "1", "--system", "be kind", "--json"]));
    assert_eq!(fork["place"].as_str(), Some("awaiting_approval"), "{fork}");
    let fork_id = fork["run_id"].as_str().unwrap().to_owned();
    let shown = json(&run(&db, &["show", &fork_id, "--json"]));
    assert_eq!(shown["state"]["fork_settings"]["system"].as_str(), Some("be kind"));
    assert_eq!(shown["fork"]["changes"], serde_json::json!(["system prompt changed"]));
    let text = String::from_utf8(run(&db, &["show", &fork_id]).stdout).unwrap();
    assert!(text.contains(&format!("forked from {source} at step 1 with: system prompt changed")), "{text}");

    // Refused, one line each, exit 1: a model not registered, a workflow without
    // model turns, an unknown step, a state that is not JSON.
    let refused = run(&db, &["fork", &source, "--step", "1", "--model", "nope:m"]);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert!(stderr.contains("no model is registered as provider `nope`") && stderr.lines().count() == 1, "{stderr}");
    let review = json(&run(&db, &["run", "review", "--input", r#"{"text": "Hi"}"#, "--wait", "--json"]));
    let review = review["run_id"].as_str().unwrap().to_owned();
    let refused = run(&db, &["fork", &review, "--step", "1", "--system", "x"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8(refused.stderr).unwrap().contains("takes no system prompt edit"));
    assert_eq!(run(&db, &["fork", &source, "--step", "99"]).status.code(), Some(1));
    assert_eq!(run(&db, &["fork", &source, "--step", "1", "--state", "{nope"]).status.code(), Some(1));
    let runs = json(&run(&db, &["runs", "--json"]));
    assert_eq!(runs["runs"].as_array().unwrap().len(), 3, "the source, its fork, the review");
    let _ = std::fs::remove_file(&db);
}

/// `worker` and `serve --worker` stop on SIGTERM (what Kubernetes and systemd send)
/// as on Ctrl-C: gracefully, with exit status 0, not killed by the signal.
#[test]
fn worker_and_serve_exit_0_on_sigterm() {
    use std::io::{BufRead as _, Read as _};
    let db = std::env::temp_dir().join(format!("loopstack-cli-{}.db", RunId::new()));
    for (args, ready) in
        [(&["worker"][..], "worker: driving"), (&["serve", "--port", "0", "--worker"][..], "Studio on")]
    {
        let mut process = Command::new(ops())
            .arg("--db")
            .arg(&db)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // It says when it is ready (its logs may come first): the signal handlers
        // are installed before.
        let mut stderr = std::io::BufReader::new(process.stderr.take().unwrap());
        let mut line = String::new();
        while !line.starts_with(ready) {
            line.clear();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "{args:?} never said it was ready");
        }
        let pid = nix::unistd::Pid::from_raw(i32::try_from(process.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        // Read to the end, so that what it logs while it stops finds a reader.
        let mut rest = String::new();
        stderr.read_to_string(&mut rest).unwrap();
        let status = process.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{args:?} exits 0 on SIGTERM: {status:?}");
    }
    let _ = std::fs::remove_file(&db);
}

/// A worker logs what it does to standard error, as one JSON object a line with
/// `--log-format json`: here the claim of a queued run, with its id and workflow.
#[test]
fn a_worker_logs_its_claims_as_json_lines() {
    use std::io::{BufRead as _, Read as _};
    let db = std::env::temp_dir().join(format!("loopstack-cli-{}.db", RunId::new()));
    let queued = json(&run(&db, &["run", "review", "--input", r#"{"text": "Hi"}"#, "--json"]));
    let run_id = queued["run_id"].as_str().unwrap().to_owned();
    let mut worker = Command::new(ops())
        .arg("--db")
        .arg(&db)
        .args(["worker", "--log-format", "json"])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(worker.stderr.take().unwrap());
    let mut line = String::new();
    let claim = loop {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "the worker never logged its claim");
        if line.starts_with("worker: driving") {
            continue;
        }
        let logged: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        if logged["fields"]["message"] == "claimed a run" {
            break logged;
        }
    };
    assert_eq!(claim["level"], "INFO");
    assert_eq!(claim["fields"]["run_id"].as_str(), Some(run_id.as_str()));
    assert_eq!(claim["fields"]["workflow"], "review");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(worker.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(worker.wait().unwrap().success());
    let _ = std::fs::remove_file(&db);
}

/// A run whose driver died holding it, its lease still valid: a plain `resume`
/// leaves it alone and says how to take it over; `resume --take-over` takes it (its
/// epoch rises, the dead driver's lease is gone) and drives it on to its wait.
#[test]
fn resume_take_over_drives_on_a_run_a_dead_driver_still_holds() {
    use loopstack::{Claim, Lease, RunStatus, Store as _, Timestamp};
    let db = std::env::temp_dir().join(format!("loopstack-cli-{}.db", RunId::new()));
    let queued = json(&run(&db, &["run", "review", "--input", r#"{"text": "Hi"}"#, "--json"]));
    let run_id = queued["run_id"].as_str().unwrap().to_owned();
    let id: RunId = run_id.parse().unwrap();
    // A driver takes the run with an hour's lease, then dies before its first step.
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = tokio.block_on(loopstack::SqliteStore::open(&db)).unwrap();
    let lease = Lease { owner: "dead-driver".into(), until: Timestamp::now() + std::time::Duration::from_secs(3600) };
    let claim = Claim::new([RunStatus::Queued]).lease(lease);
    let held = tokio.block_on(store.claim(id, &claim)).unwrap();
    assert_eq!((held.status, held.epoch, held.lease_owner.as_deref()), (RunStatus::Running, 1, Some("dead-driver")));

    let refused = run(&db, &["resume", &run_id]);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert!(stderr.contains("--take-over"), "{stderr}");
    assert_eq!(json(&run(&db, &["show", &run_id, "--json"]))["status"].as_str(), Some("running"), "left alone");

    let taken = json(&run(&db, &["resume", &run_id, "--take-over", "--json"]));
    assert_eq!((taken["status"].as_str(), taken["place"].as_str()), (Some("waiting"), Some("drafted")));
    let record = tokio.block_on(store.load_run(id)).unwrap();
    assert_eq!(record.epoch, 2, "taken over");
    assert_ne!(record.lease_owner.as_deref(), Some("dead-driver"));
    let shown = json(&run(&db, &["show", &run_id, "--json"]));
    let steps: Vec<&str> =
        shown["history"].as_array().unwrap().iter().map(|s| s["transition"].as_str().unwrap()).collect();
    assert_eq!(steps, ["draft"], "driven on from where the dead driver took it");
    let _ = std::fs::remove_file(&db);
}

/// `runs` and `show` say which worker holds a running run, and a run whose holder's
/// lease ran out shows as stalled, not running; `--json` says the same.
#[test]
fn listings_show_who_holds_a_run_and_which_runs_stalled() {
    use loopstack::{Claim, Lease, RunStatus, Store as _, Timestamp};
    let db = std::env::temp_dir().join(format!("loopstack-cli-{}.db", RunId::new()));
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let before = Timestamp::now();
    let store_of = |db: &std::path::Path| tokio.block_on(loopstack::SqliteStore::open(db)).unwrap();
    let mut ids = Vec::new();
    for (owner, lease) in [("live-worker", 3600), ("dead-worker", -60)] {
        let queued = json(&run(&db, &["run", "review", "--input", r#"{"text": "Hi"}"#, "--json"]));
        let run_id = queued["run_id"].as_str().unwrap().to_owned();
        let store = tokio.block_on(loopstack::SqliteStore::open(&db)).unwrap();
        let until = Timestamp::from_millis(Timestamp::now().as_millis() + lease * 1000);
        let claim = Claim::new([RunStatus::Queued]).lease(Lease { owner: owner.into(), until });
        tokio.block_on(store.claim(run_id.parse().unwrap(), &claim)).unwrap();
        ids.push(run_id);
    }
    let (live, dead) = (&ids[0], &ids[1]);

    let listed = stdout(&run(&db, &["runs"]));
    let line = |id: &str| listed.lines().find(|l| l.starts_with(id)).unwrap().to_owned();
    assert!(line(live).contains(" running ") && line(live).ends_with("held by live-worker"), "{listed}");
    assert!(line(dead).contains(" stalled ") && line(dead).ends_with("held by dead-worker"), "{listed}");
    let shown = stdout(&run(&db, &["show", live]));
    let since = tokio.block_on(store_of(&db).load_run(live.parse().unwrap())).unwrap().held_since.unwrap();
    assert!(since >= before && since <= Timestamp::now(), "held since its claim: {since}");
    assert!(shown.contains(&format!("held by live-worker since {since} (lease until ")), "{shown}");
    let shown = stdout(&run(&db, &["show", dead]));
    assert!(shown.contains("stalled: the lease of dead-worker ran out at "), "{shown}");

    let listed = json(&run(&db, &["runs", "--json"]));
    let of = |id: &str| listed["runs"].as_array().unwrap().iter().find(|r| r["run_id"] == id).unwrap().clone();
    assert_eq!(
        (of(live)["holder"]["owner"].as_str(), of(live)["stalled"].as_bool()),
        (Some("live-worker"), Some(false))
    );
    assert_eq!(of(live)["holder"]["since"].as_str(), Some(since.to_string().as_str()));
    assert_eq!(
        (of(dead)["holder"]["owner"].as_str(), of(dead)["stalled"].as_bool()),
        (Some("dead-worker"), Some(true))
    );
    assert_eq!(of(dead)["status"], "running", "the stored status is kept beside it");
    let _ = std::fs::remove_file(&db);
}

/// A run taken over from a worker whose lease ran out says so in its history, in
/// `show` and in `show --json`; a plain claim of a queued run does not.
#[test]
fn show_says_when_a_run_was_taken_over_and_from_whom() {
    use loopstack::{Claim, Lease, RunStatus, Store as _, Timestamp};
    let db = std::env::temp_dir().join(format!("loopstack-cli-{}.db", RunId::new()));
    let queued = json(&run(&db, &["run", "review", "--input", r#"{"text": "Hi"}"#, "--json"]));
    let run_id = queued["run_id"].as_str().unwrap().to_owned();
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = tokio.block_on(loopstack::SqliteStore::open(&db)).unwrap();
    // A worker took it, then died; its lease ran out a minute ago.
    let ended = Timestamp::from_millis(Timestamp::now().as_millis() - 60_000);
    let claim = Claim::new([RunStatus::Queued]).lease(Lease { owner: "dead-worker".into(), until: ended });
    tokio.block_on(store.claim(run_id.parse().unwrap(), &claim)).unwrap();
    assert!(json(&run(&db, &["show", &run_id, "--json"]))["takeovers"].as_array().unwrap().is_empty());

    // The worker that takes it over says so in its logs, naming the holder it replaced.
    let drove = Command::new(ops())
        .arg("--db")
        .arg(&db)
        .args(["worker", "--once", "--name", "rescuer", "--json"])
        .env("RUST_LOG", "info")
        .env("LOOPSTACK_LOG_FORMAT", "json")
        .output()
        .unwrap();
    assert_eq!(json(&drove)["driven"], 1);
    let logs = String::from_utf8(drove.stderr).unwrap();
    let logged: Vec<Value> = logs.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let took = logged.iter().find(|l| l["fields"]["message"] == "took over a run whose holder's lease ran out");
    let took = took.unwrap_or_else(|| panic!("no takeover logged: {logs}"));
    assert_eq!((took["level"].as_str(), took["fields"]["from"].as_str()), (Some("WARN"), Some("dead-worker")));
    assert_eq!(took["fields"]["run_id"].as_str(), Some(run_id.as_str()));
    let shown = json(&run(&db, &["show", &run_id, "--json"]));
    let takeovers = shown["takeovers"].as_array().unwrap();
    assert_eq!(takeovers.len(), 1, "{shown}");
    assert_eq!((takeovers[0]["from"].as_str(), takeovers[0]["by"].as_str()), (Some("dead-worker"), Some("rescuer")));
    assert_eq!(takeovers[0]["lease_until"].as_str(), Some(ended.to_string().as_str()));
    let text = stdout(&run(&db, &["show", &run_id]));
    assert!(text.contains(&format!("taken over by rescuer from dead-worker, whose lease ran to {ended}")), "{text}");
    let _ = std::fs::remove_file(&db);
}

/// A run its agent stopped at a limit is `stopped`, not `completed`: `runs --status
/// stopped` lists it alone, and `show` says why.
#[test]
fn runs_lists_a_stopped_run_apart_and_show_says_why() {
    use loopstack::llm::{Agent, ScriptedModel};
    use loopstack::{Runtime, ToolRegistry};
    let db = std::env::temp_dir().join(format!("loopstack-cli-{}.db", RunId::new()));
    let started = json(&run(&db, &["run", "review", "--input", r#"{"text": "Hi"}"#, "--wait", "--json"]));
    let review = started["run_id"].as_str().unwrap().to_owned();
    let done = json(&run(&db, &["signal", &review, "approve", r#"{"reviewer": "ada"}"#, "--json"]));
    assert_eq!(done["status"].as_str(), Some("completed"));
    // An agent whose budget allows no turn, run on the same database.
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = tokio.block_on(loopstack::SqliteStore::open(&db)).unwrap();
    let agent = Agent::new(ScriptedModel::new(), "m", ToolRegistry::new()).max_turns(0).named("looper").unwrap();
    let stopped = tokio.block_on(agent.ask(&Runtime::with_store(store), "Go")).unwrap().run_id.to_string();

    let listed = json(&run(&db, &["runs", "--status", "stopped", "--json"]));
    let ids: Vec<&str> = listed["runs"].as_array().unwrap().iter().filter_map(|r| r["run_id"].as_str()).collect();
    assert_eq!(ids, [stopped.as_str()]);
    let listed = json(&run(&db, &["runs", "--status", "completed", "--json"]));
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1);
    assert_eq!(listed["runs"][0]["run_id"].as_str(), Some(review.as_str()));
    let reason = "the run reached the budget of 0 model turns";
    let shown = json(&run(&db, &["show", &stopped, "--json"]));
    assert_eq!((shown["status"].as_str(), shown["error"].as_str()), (Some("stopped"), Some(reason)));
    let text = String::from_utf8(run(&db, &["show", &stopped]).stdout).unwrap();
    assert!(text.contains(": stopped at start") && text.contains(&format!("error: {reason}")), "{text}");
    let _ = std::fs::remove_file(&db);
}
