//! An eval of the weather agent on a small dataset (`examples/data/weather-eval.jsonl`):
//! each case a run in the store, scored, reported as a table (or JSON), and compared
//! with an earlier report. Offline with the scripted model; opt-in against a real
//! local model.
//!
//! ```text
//! cargo run --example eval                                  # the scripted model, a table
//! cargo run --example eval -- --json > before.json          # the report as JSON
//! cargo run --example eval -- --baseline before.json        # which cases got better or worse
//! cargo run --example eval -- --db eval.db --id RUN_ID      # the same eval again: ended cases are read back
//! # the real small model of ../shared/localmodel (llama.cpp's server on port 8080):
//! cargo run --example eval -- --local http://127.0.0.1:8080/v1 --model qwen2.5-coder-1.5b
//! ```

use std::process::ExitCode;

use loopstack::eval::{Case, Contains, Dataset, Eval, EvalReport, Outcome, Score, custom};
use loopstack::llm::{Agent, ChatRequest, ScriptedModel};
use loopstack::prelude::*;

const SYSTEM: &str = "You answer weather questions. Call get_weather once for each city, then answer in one sentence.";
const CITIES: [&str; 5] = ["Berlin", "Oslo", "Paris", "Rome", "Lisbon"];

/// Retrieve weather information.
#[tool]
async fn get_weather(
    /// City or location name
    location: String,
) -> Result<String, ToolError> {
    if location.contains(',') || location.contains(" and ") {
        return Err(ToolError::new("one city per call: call get_weather once for each city"));
    }
    Ok(format!("{location}: 14 C, light rain"))
}

/// The scripted stand-in: one call per city the question names, then an answer
/// from the results; a greeting needs no tool.
fn scripted() -> ScriptedModel {
    ScriptedModel::from_fn(|r: &ChatRequest| {
        let question = r.messages.first().map(|m| m.text()).unwrap_or_default();
        let script = ScriptedModel::new();
        let results: Vec<String> =
            r.messages.iter().flat_map(|m| m.tool_results_iter()).map(|t| t.content.clone()).collect();
        let cities: Vec<&str> = CITIES.into_iter().filter(|c| question.contains(c)).collect();
        Ok(if cities.is_empty() {
            script.text_response("Hello!")
        } else if results.is_empty() {
            script.tool_calls_response(cities.iter().map(|c| ("get_weather", serde_json::json!({"location": c}))))
        } else {
            script.text_response(results.join("; "))
        })
    })
}

/// The cities a case's question names, and whether the run looked each up once.
fn one_call_per_city(case: &Case, outcome: &Outcome) -> Score {
    let mut asked: Vec<String> = outcome
        .tool_calls
        .iter()
        .filter(|c| c.name == "get_weather")
        .filter_map(|c| c.input["location"].as_str().map(str::to_owned))
        .collect();
    asked.sort();
    let mut cities: Vec<String> = CITIES.into_iter().filter(|c| case.input.contains(c)).map(str::to_owned).collect();
    cities.sort();
    Score::check(asked == cities, || format!("asked for {asked:?}, the question names {cities:?}"))
}

struct Args {
    db: String,
    id: Option<RunId>,
    json: bool,
    baseline: Option<String>,
    local: Option<String>,
    model: String,
}

fn parse() -> Result<Args, String> {
    let mut args =
        Args { db: "memory".into(), id: None, json: false, baseline: None, local: None, model: "local".into() };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--db" => args.db = value()?,
            "--id" => args.id = Some(value()?.parse().map_err(|e| format!("--id: {e}"))?),
            "--json" => args.json = true,
            "--baseline" => args.baseline = Some(value()?),
            "--local" => args.local = Some(value()?),
            "--model" => args.model = value()?,
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    Ok(args)
}

async fn run(args: Args) -> Result<bool, BoxError> {
    let tools = ToolRegistry::new().with(GetWeather)?;
    let agent = match &args.local {
        None => Agent::new(scripted(), "scripted", tools),
        Some(url) => {
            let model = loopstack::llm::openai::OpenAi::new().base_url(url.as_str()).text_tool_calls(true);
            Agent::new(model, args.model.clone(), tools).temperature(0.0)
        }
    };
    let agent = agent.system(SYSTEM).max_turns(6).named("weather")?;
    let runtime = Runtime::with_shared_store(loopstack::cli::open(&args.db).await?).try_register(agent.clone())?;
    let dataset = Dataset::load_jsonl(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/weather-eval.jsonl"))?;
    let mut eval = Eval::new(dataset, &agent)
        .scorer(Contains::expected())
        .scorer(custom("one_call_per_city", one_call_per_city))
        .concurrency(if args.local.is_some() { 1 } else { 4 })
        .on_progress(|done, total, case| {
            eprintln!("[{done}/{total}] {} {}", case.case, if case.passed { "pass" } else { "FAIL" })
        });
    if let Some(id) = args.id {
        eval = eval.id(id);
    }
    let report = eval.run(&runtime).await?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.table());
        println!("eval {} (run it again with --id {} over the same --db)", report.eval, report.id);
    }
    if let Some(path) = &args.baseline {
        let before = EvalReport::from_json(&std::fs::read_to_string(path)?)?;
        print!("{}", report.compare(&before).text());
    }
    Ok(report.summary.passed == report.summary.cases)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
