//! The `eval` command (`examples/eval_cli.rs`) as a shell runs it: a table, JSON, a
//! comparison, exit status 3 when cases fail; and an eval whose process is killed
//! (SIGKILL) mid-case, run again with its id, resumes: the cases that finished are
//! read back, not run again, and the one in flight is taken over.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use loopstack::{RunId, RunStatus, SqliteStore, Store};
use serde_json::Value;

mod common;

fn binary() -> &'static PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| common::example("eval_cli"))
}

fn eval(db: &Path, args: &[&str]) -> Output {
    Command::new(binary()).arg("--db").arg(db).arg("eval").args(args).env_remove("WEATHER_STALL").output().unwrap()
}

/// Four cases: three the agent answers, one it cannot (it says "Hello!").
const DATASET: &str = r#"{"id": "berlin", "input": "Weather in Berlin?", "expected": "Berlin"}
{"id": "oslo", "input": "Weather in Oslo?", "expected": "Oslo"}
{"id": "atlantis", "input": "Weather in Atlantis?", "expected": "Atlantis"}
{"id": "greeting", "input": "Hi there", "expected": "Bonjour"}
"#;

fn setup() -> (PathBuf, PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("loopstack-eval-cli-{}", RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    let dataset = dir.join("weather.jsonl");
    std::fs::write(&dataset, DATASET).unwrap();
    (dir.join("eval.db"), dataset, dir)
}

#[test]
fn an_eval_reports_a_table_json_and_a_comparison_and_exits_3_when_cases_fail() {
    let (db, dataset, dir) = setup();
    let dataset = dataset.to_str().unwrap();
    let out = eval(&db, &[dataset, "--agent", "weather", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((report["summary"]["passed"].as_u64(), report["summary"]["cases"].as_u64()), (Some(3), Some(4)));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("[4/4]") && stderr.ends_with("error: 1 of 4 eval cases failed\n"), "{stderr}");

    // Compared with a report in which berlin failed: it got better.
    let mut before = report.clone();
    before["cases"][0]["scores"][0][1]["value"] = 0.0.into();
    let old = db.with_file_name("before.json");
    std::fs::write(&old, before.to_string()).unwrap();
    let out = eval(&db, &[dataset, "--agent", "weather", "--compare", old.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(text.contains("greeting") && text.contains("FAIL"), "{text}");
    assert!(text.contains("better: berlin 0.00 -> 1.00") && text.contains("3 the same"), "{text}");

    // All pass, exit 0; mistakes are errors (1), not failed cases.
    let out = eval(&db, &[dataset, "--agent", "weather", "--scorer", "matches:.", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let out = eval(&db, &[dataset, "--agent", "nobody"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr).unwrap().contains("registered: weather"));
    assert_eq!(eval(&db, &[dataset, "--agent", "weather", "--scorer", "vibes"]).status.code(), Some(1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_eval_killed_mid_case_resumes_with_its_id_without_running_finished_cases_again() {
    let (db, dataset, dir) = setup();
    let dataset = dataset.to_str().unwrap();
    let id = RunId::new().to_string();
    let mut child = Command::new(binary())
        .arg("--db")
        .arg(&db)
        .args(["eval", dataset, "--agent", "weather", "--concurrency", "1", "--id", &id])
        .env("WEATHER_STALL", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Two cases done, one at a time, and the third (atlantis) in its stalled lookup.
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains("Atlantis does not answer")) {
        seen.push(lines.next().unwrap_or_else(|| panic!("the eval ended early: {seen:?}")).unwrap());
    }
    assert_eq!(seen, ["[1/4] berlin pass", "[2/4] oslo pass", "get_weather: Atlantis does not answer"]);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let eval_id: RunId = id.parse().unwrap();
    // The runs of the cases, as the eval derives their ids.
    let cases = loopstack::llm::eval::Dataset::from_jsonl("weather", DATASET).unwrap();
    let killed_eval = loopstack::llm::eval::Eval::named(cases.clone(), "weather").id(eval_id);
    let case_run = |case: usize| killed_eval.case_run_id(&cases.cases()[case], 0);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let records = |which: &[usize]| {
        rt.block_on(async {
            let store = SqliteStore::open(&db).await.unwrap();
            let mut out = Vec::new();
            for &case in which {
                out.push(store.load_run(case_run(case)).await.unwrap());
            }
            out
        })
    };
    let killed = records(&[0, 1, 2]);
    assert_eq!(
        killed.iter().map(|r| r.status).collect::<Vec<_>>(),
        [RunStatus::Completed, RunStatus::Completed, RunStatus::Running]
    );
    let missing = rt.block_on(async { SqliteStore::open(&db).await.unwrap().load_run(case_run(3)).await });
    assert!(missing.is_err(), "the fourth case had not started");

    let out = eval(&db, &[dataset, "--agent", "weather", "--concurrency", "1", "--id", &id, "--json"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let statuses: Vec<(&str, bool)> = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["case"].as_str().unwrap(), c["passed"].as_bool().unwrap()))
        .collect();
    assert_eq!(statuses, [("berlin", true), ("oslo", true), ("atlantis", true), ("greeting", false)]);
    let resumed = records(&[0, 1, 2]);
    // The finished cases were read back: their runs were not written again.
    for (before, after) in killed.iter().zip(&resumed).take(2) {
        assert_eq!((before.epoch, before.step, before.updated_at), (after.epoch, after.step, after.updated_at));
    }
    // The one in flight was taken over from the dead process and finished.
    assert_eq!(resumed[2].status, RunStatus::Completed);
    assert!(resumed[2].epoch > killed[2].epoch);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A workflow that is no agent: it prices an order, ten off with a coupon.
mod pricing {
    use loopstack::prelude::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Default, Serialize, Deserialize)]
    pub(crate) struct Quote {
        pub(crate) total: u32,
        #[serde(default)]
        pub(crate) coupon: Option<String>,
        #[serde(default)]
        pub(crate) price: u32,
    }

    pub(crate) struct Pricing;

    #[workflow(name = "pricing")]
    impl Pricing {
        #[transition(to = End)]
        async fn price(&self, quote: &mut Quote, _cx: &mut RunContext) -> Result<()> {
            quote.price = if quote.coupon.is_some() { quote.total.saturating_sub(10) } else { quote.total };
            Ok(())
        }
    }
}

/// Any registered workflow is a target, in code and on the command line: a case's
/// input is the run's input as JSON, and the scorers read its final state.
#[tokio::test]
async fn an_eval_of_a_workflow_that_is_not_an_agent_scores_its_final_state() {
    use clap::Parser as _;
    use loopstack::eval::{Contains, Dataset, Eval, FitsSchema};
    let dataset = Dataset::from_jsonl(
        "pricing",
        r#"{"id": "plain", "input": {"total": 50}, "expected": "\"price\":50"}
{"id": "coupon", "input": {"total": 50, "coupon": "TEN"}, "expected": "\"price\":40"}
{"id": "wrong", "input": {"total": 50}, "expected": "\"price\":45"}
"#,
    )
    .unwrap();
    let runtime = loopstack::Runtime::new().register(pricing::Pricing);
    let schema =
        serde_json::json!({"type": "object", "required": ["price"], "properties": {"price": {"type": "integer"}}});
    let eval = Eval::workflow(dataset, "pricing").scorer(Contains::expected()).scorer(FitsSchema::new(schema).unwrap());
    let report = eval.run(&runtime).await.unwrap();
    let passed: Vec<(&str, bool)> = report.cases.iter().map(|c| (c.case.as_str(), c.passed)).collect();
    assert_eq!(passed, [("plain", true), ("coupon", true), ("wrong", false)]);
    let state = runtime.store().load_run(report.cases[1].run_id).await.unwrap().state;
    assert!(state.get().contains("\"price\":40"), "each case is a run of the workflow: {}", state.get());

    // On the command line: `eval FILE --workflow pricing`, scored the same.
    let dir = std::env::temp_dir().join(format!("loopstack-eval-workflow-{}", RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pricing.jsonl");
    std::fs::write(
        &file,
        "{\"id\": \"coupon\", \"input\": {\"total\": 30, \"coupon\": \"TEN\"}, \"expected\": \"\\\"price\\\":20\"}\n",
    )
    .unwrap();
    let args = ["app", "--json", "eval", file.to_str().unwrap(), "--workflow", "pricing"];
    let out = loopstack::cli::execute(&runtime, &loopstack::cli::Cli::try_parse_from(args).unwrap()).await.unwrap();
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["summary"]["passed"], 1, "{report}");
    // An agent or a workflow, not both.
    let both = ["app", "eval", "x.jsonl", "--agent", "weather", "--workflow", "pricing"];
    assert!(loopstack::cli::Cli::try_parse_from(both).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
