//! Evals: an agent on a dataset, each case a run in the store, each scorer judging
//! its outcome; the report's JSON and table; a comparison of two evals; an eval run
//! again under its id reads back the cases that ended instead of running them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loopstack_core::{RunStatus, Runtime, ToolRegistry};
use loopstack_llm::eval::{
    CalledTool, Case, Contains, Dataset, Eval, EvalError, EvalReport, Exact, FitsSchema, Judge, Matches, Score, custom,
};
use loopstack_llm::{Agent, ChatRequest, ScriptedModel, ToolDecisions};
use loopstack_macros::tool;
use serde_json::json;

/// The weather in a city.
#[tool(crate = ::loopstack_core)]
async fn get_weather(location: String) -> Result<String, loopstack_core::ToolError> {
    Ok(if location == "Oslo" { "rain, 4 C".into() } else { "sun, 24 C".into() })
}

/// A model that looks the city up, then answers from the result; it counts its calls.
fn model(calls: Arc<AtomicUsize>) -> ScriptedModel {
    ScriptedModel::from_fn(move |r: &ChatRequest| {
        calls.fetch_add(1, Ordering::SeqCst);
        let question = r.messages[0].text();
        let script = ScriptedModel::new();
        Ok(match r.messages.last().and_then(|m| m.tool_results_iter().next()) {
            Some(result) => script.text_response(format!("It is {}.", result.content)),
            None if question.contains("joke") => script.text_response("No jokes here."),
            None => {
                let city = if question.contains("Oslo") { "Oslo" } else { "Rome" };
                script.tool_call_response("get_weather", json!({"location": city}))
            }
        })
    })
}

fn agent(calls: Arc<AtomicUsize>) -> Agent {
    Agent::new(model(calls), "m", ToolRegistry::new().with(GetWeather).unwrap()).named("weather").unwrap()
}

fn dataset() -> Dataset {
    Dataset::from_jsonl(
        "weather",
        r#"{"id": "oslo", "input": "Weather in Oslo?", "expected": "rain"}
// a comment line, and a blank one

{"id": "rome", "input": "Weather in Rome?", "expected": "rain"}
{"input": "Tell me a joke", "expected": "No jokes here."}"#,
    )
    .unwrap()
}

#[tokio::test]
async fn each_case_is_a_run_scored_by_each_scorer() {
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = agent(calls.clone());
    let runtime = Runtime::new();
    let report = Eval::new(dataset(), &agent)
        .scorer(Contains::expected())
        .scorer(CalledTool::new("get_weather").with(json!({"location": "Oslo"})))
        .scorer(Matches::new(r"^It is \w+, \d+ C\.$").unwrap())
        .scorer(custom("short", |_, outcome| Score::check(outcome.text.len() < 40, || "too long".into())))
        .run(&runtime)
        .await
        .unwrap();
    let ids: Vec<&str> = report.cases.iter().map(|c| c.case.as_str()).collect();
    assert_eq!(ids, ["oslo", "rome", "5"], "in the dataset's order; an id-less case is named by its line");
    let passed = |id: &str, scorer: usize| report.cases.iter().find(|c| c.case == id).unwrap().scores[scorer].1.passed;
    assert!(passed("oslo", 0) && passed("oslo", 1) && passed("oslo", 2) && passed("oslo", 3));
    assert!(!passed("rome", 0), "sun is not rain");
    assert!(!passed("rome", 1), "Rome, not Oslo");
    assert!(!passed("5", 1) && !passed("5", 2) && passed("5", 0));
    assert_eq!((report.summary.passed, report.summary.cases), (1, 3));
    let rome = &report.cases[1];
    assert!(rome.scores[1].1.reason.as_deref().unwrap().contains(r#"not called with {"location":"Oslo"}"#));
    // Each case is a run of the agent in the store.
    for case in &report.cases {
        let record = runtime.store().load_run(case.run_id).await.unwrap();
        assert_eq!((record.workflow.as_ref(), record.status), ("weather", RunStatus::Completed));
        assert_eq!(case.tokens, if case.case == "5" { 20 } else { 40 });
    }
    // The table and the JSON.
    let table = report.table();
    assert!(table.lines().next().unwrap().starts_with("case  status"), "{table}");
    assert!(table.contains("1 of 3 passed (33%)"), "{table}");
    assert!(table.contains(r#"rome contains: "rain" is not in "It is sun, 24 C.""#), "{table}");
    let back = EvalReport::from_json(&report.to_json()).unwrap();
    assert_eq!(back, report);
}

#[tokio::test]
async fn an_eval_run_again_under_its_id_reads_back_the_cases_that_ended() {
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = agent(calls.clone());
    let runtime = Runtime::new();
    let eval = || Eval::new(dataset(), &agent).scorer(Contains::expected()).repeats(2).concurrency(2);
    let first = eval().run(&runtime).await.unwrap();
    assert_eq!(first.summary.cases, 6);
    let asked = calls.load(Ordering::SeqCst);
    assert_eq!(asked, 2 * (2 + 2 + 1));

    let again = eval().id(first.id).run(&runtime).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), asked, "no case ran again");
    assert_eq!(again.cases, first.cases);
    // A new id runs them anew.
    let fresh = eval().run(&runtime).await.unwrap();
    assert_ne!(fresh.id, first.id);
    assert_eq!(calls.load(Ordering::SeqCst), 2 * asked);
}

/// Run again under its id with a changed dataset (a new case first, a case moved, a
/// case's input changed), an eval reads back only the cases it ran as they are now,
/// runs the others anew, and reports each case's own run.
#[tokio::test]
async fn an_eval_run_again_with_a_changed_dataset_reports_each_cases_own_run() {
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = agent(calls.clone());
    let runtime = Runtime::new();
    let first = Dataset::new("weather")
        .case(Case::new("oslo", "Weather in Oslo?").expected("rain"))
        .case(Case::new("rome", "Weather in Rome?").expected("sun"));
    let first = Eval::new(first, &agent).scorer(Contains::expected()).run(&runtime).await.unwrap();
    assert_eq!(first.summary.passed, 2);
    let asked = calls.load(Ordering::SeqCst);

    let changed = Dataset::new("weather")
        .case(Case::new("joke", "Tell me a joke").expected("No jokes here."))
        .case(Case::new("oslo", "Weather in Oslo?").expected("rain"))
        .case(Case::new("rome", "Weather in Oslo, not Rome?").expected("rain"));
    let again = Eval::new(changed, &agent).id(first.id).scorer(Contains::expected()).run(&runtime).await.unwrap();
    let texts: Vec<(&str, &str)> = again.cases.iter().map(|c| (c.case.as_str(), c.text.as_str())).collect();
    assert_eq!(texts, [("joke", "No jokes here."), ("oslo", "It is rain, 4 C."), ("rome", "It is rain, 4 C.")]);
    assert_eq!(again.summary.passed, 3, "{}", again.table());
    assert_eq!(again.cases[1].run_id, first.cases[0].run_id, "the unchanged case was read back");
    assert_ne!(again.cases[2].run_id, first.cases[1].run_id, "the changed case ran anew");
    assert_eq!(calls.load(Ordering::SeqCst), asked + 1 + 2, "the joke and the changed case ran");
}

/// A scorer of your own that panics scores its case as an error, with the panic's
/// message; the other cases and scorers, the report and the eval's record are kept.
#[tokio::test]
async fn a_scorer_that_panics_scores_its_case_as_an_error() {
    let agent = agent(Arc::default());
    let runtime = Runtime::new();
    let picky =
        custom("picky", |case, _| if case.id == "rome" { panic!("cannot judge {}", case.id) } else { Score::pass() });
    let report = Eval::new(dataset(), &agent).scorer(Contains::expected()).scorer(picky).run(&runtime).await.unwrap();
    let rome = report.cases.iter().find(|c| c.case == "rome").unwrap();
    let (name, score) = &rome.scores[1];
    assert_eq!((name.as_str(), score.passed), ("picky", false));
    assert_eq!(score.reason.as_deref(), Some("a scorer: `picky` panicked: cannot judge rome"));
    assert!(report.cases.iter().filter(|c| c.case != "rome").all(|c| c.scores[1].1.passed), "{report:?}");
    assert!(report.cases[0].scores[0].1.passed, "the other scorers scored");
    let record = runtime.store().load_run(report.id).await.unwrap();
    assert_eq!(&*record.workflow, loopstack_llm::eval::EVAL_WORKFLOW);
}

/// Resets a password: each call needs a person's approval.
#[tool(crate = ::loopstack_core, approve)]
async fn reset_password(user: String) -> Result<String, loopstack_core::ToolError> {
    Ok(format!("password of {user} reset"))
}

#[tokio::test]
async fn a_case_that_waits_fails_until_it_is_answered_and_the_eval_is_run_again() {
    let model = ScriptedModel::from_fn(|r: &ChatRequest| {
        let script = ScriptedModel::new();
        Ok(match r.messages.last().and_then(|m| m.tool_results_iter().next()) {
            Some(result) => script.text_response(format!("Done: {}", result.content)),
            None => script.tool_call_response("reset_password", json!({"user": "ada"})),
        })
    });
    let agent = Agent::new(model, "m", ToolRegistry::new().with(ResetPassword).unwrap()).named("desk").unwrap();
    let runtime = Runtime::new().try_register(agent.clone()).unwrap();
    let dataset = Dataset::new("desk").case(Case::new("reset", "Reset ada's password").expected("reset"));
    let eval = || Eval::new(dataset.clone(), &agent).scorer(Contains::expected());
    let first = eval().run(&runtime).await.unwrap();
    assert_eq!((first.cases[0].status, first.cases[0].passed), (RunStatus::Waiting, false));
    assert!(first.table().contains("FAIL (waiting)"), "{}", first.table());

    let run = first.cases[0].run_id;
    let pending = agent.pending(&runtime, run).await.unwrap();
    agent.decide(&runtime, run, ToolDecisions::approve_all(&pending)).await.unwrap();
    let again = eval().id(first.id).run(&runtime).await.unwrap();
    assert!(again.cases[0].passed, "{again:?}");
    assert_eq!(again.compare(&first).better, [("reset".to_owned(), 0.0, 1.0)]);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Forecast {
    city: String,
    celsius: i32,
}

#[tokio::test]
async fn exact_schema_and_judge_scorers() {
    let model = ScriptedModel::from_fn(|r: &ChatRequest| {
        let text = if r.messages[0].text().contains("JSON") { r#"{"city": "Oslo", "celsius": 4}"# } else { "4" };
        Ok(ScriptedModel::new().text_response(text))
    });
    let agent = Agent::new(model, "m", ToolRegistry::new());
    // The judge: a model that passes answers mentioning a number, through its verdict tool.
    let judge_model = ScriptedModel::from_fn(|r: &ChatRequest| {
        assert!(r.settings.system.as_deref().unwrap().contains("Criteria: gives a number"));
        assert_eq!(r.tools[0].name, "verdict");
        let answer = r.messages[0].text();
        let passed = answer.contains("Answer:\n4");
        let verdict = json!({"passed": passed, "score": if passed { 0.9 } else { 0.1 }, "reason": "read it"});
        Ok(ScriptedModel::new().tool_call_response("verdict", verdict))
    })
    .record_requests(true);
    let dataset = Dataset::new("forms")
        .case(Case::new("plain", "How cold is Oslo?").expected("4"))
        .case(Case::new("json", "Oslo as JSON").expected(json!({"city": "Oslo", "celsius": 4})));
    let report = Eval::new(dataset, &agent)
        .scorer(Exact)
        .scorer(FitsSchema::of::<Forecast>().unwrap())
        .scorer(Judge::new(judge_model.clone(), "judge-1", "gives a number"))
        .run(&Runtime::new())
        .await
        .unwrap();
    let plain = &report.cases[0].scores;
    assert!(plain[0].1.passed, "exact");
    assert!(!plain[1].1.passed && plain[1].1.reason.as_deref().unwrap().contains("does not fit"), "{plain:?}");
    assert_eq!((plain[2].1.passed, plain[2].1.value), (true, 0.9));
    let json = &report.cases[1].scores;
    assert!(!json[0].1.passed, "the expected JSON, as text, is not the answer's text");
    assert!(json[1].1.passed, "it fits the schema");
    assert_eq!((json[2].1.passed, json[2].1.value), (false, 0.1));
    assert_eq!(judge_model.requests().len(), 2);
    assert_eq!(report.summary.scorers[2].0, "judge");
    assert!((report.summary.scorers[2].1 - 0.5).abs() < 1e-9);
}

#[test]
fn a_dataset_or_scorer_that_does_not_read_is_a_typed_error() {
    let error = Dataset::from_jsonl("d", "{\"input\": \"a\"}\n{oops").unwrap_err();
    assert!(matches!(&error, EvalError::Dataset(m) if m.starts_with("line 2:")), "{error}");
    let twice = Dataset::from_jsonl("d", "{\"id\": \"a\", \"input\": \"x\"}\n{\"id\": \"a\", \"input\": \"y\"}");
    assert!(matches!(twice, Err(EvalError::Dataset(m)) if m.contains("two cases are named `a`")));
    assert!(matches!(Matches::new("("), Err(EvalError::Scorer(_))));
    assert!(matches!(FitsSchema::new(json!({"type": 7})), Err(EvalError::Scorer(_))));
}
