//! `cargo run --example eval`: the weather agent on the dataset of
//! `examples/data/weather-eval.jsonl`, its report as JSON, a comparison with an
//! earlier report, and the same eval run again over a SQLite file reading its
//! cases back.

use std::process::Command;

use loopstack::RunId;
use serde_json::Value;

mod common;

fn eval(args: &[&str]) -> std::process::Output {
    Command::new(common::example("eval")).args(args).output().unwrap()
}

#[test]
fn the_eval_example_reports_compares_and_resumes() {
    let out = eval(&["--json"]);
    assert!(out.status.success(), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((report["summary"]["passed"].as_u64(), report["summary"]["cases"].as_u64()), (Some(4), Some(4)));
    let cases: Vec<&str> = report["cases"].as_array().unwrap().iter().map(|c| c["case"].as_str().unwrap()).collect();
    assert_eq!(cases, ["one-city", "rain", "two-cities", "no-tool"]);
    let progress = String::from_utf8(out.stderr).unwrap();
    assert!(progress.contains("[4/4]"), "{progress}");

    // Compared with a report where one case failed: it got better.
    let mut before = report.clone();
    before["cases"][2]["scores"][0][1]["value"] = 0.0.into();
    let dir = std::env::temp_dir().join(format!("loopstack-eval-{}", RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    let baseline = dir.join("before.json");
    std::fs::write(&baseline, before.to_string()).unwrap();
    let out = eval(&["--baseline", baseline.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("better: two-cities 0.50 -> 1.00"), "{text}");
    assert!(text.contains("3 the same, 0 added, 0 removed"), "{text}");

    // Over a file, the same id again: the cases are read back (their runs' ids are the same).
    let db = dir.join("eval.db");
    let db = db.to_str().unwrap();
    let first: Value = serde_json::from_slice(&eval(&["--db", db, "--json"]).stdout).unwrap();
    let id = first["id"].as_str().unwrap();
    let again: Value = serde_json::from_slice(&eval(&["--db", db, "--json", "--id", id]).stdout).unwrap();
    assert_eq!(again["cases"], first["cases"]);
    let _ = std::fs::remove_dir_all(&dir);
}
