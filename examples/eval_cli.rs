//! The `eval` command of loopstack's command line, over an app's agent: each case of
//! a JSONL dataset a run of the registered `weather` agent, scored, shown as a table
//! (or JSON), compared with an earlier report; run again with the same `--id` it
//! resumes, reading back the cases that finished. Offline: the model is scripted.
//!
//! ```text
//! cargo run --example eval_cli -- --db eval.db eval examples/data/weather-eval.jsonl --agent weather
//! cargo run --example eval_cli -- --db eval.db eval examples/data/weather-eval.jsonl --agent weather --json > before.json
//! cargo run --example eval_cli -- --db eval.db eval examples/data/weather-eval.jsonl --agent weather --compare before.json
//! cargo run --example eval_cli -- --db eval.db eval examples/data/weather-eval.jsonl --agent weather --id EVAL_ID
//! ```
//!
//! With `WEATHER_STALL` set, a lookup of Atlantis never answers: the tests kill the
//! process there, mid-eval, and run the eval again.

use std::process::ExitCode;

use loopstack::llm::{Agent, ChatRequest, ScriptedModel};
use loopstack::prelude::*;

const CITIES: [&str; 6] = ["Berlin", "Oslo", "Paris", "Rome", "Lisbon", "Atlantis"];

/// Retrieve weather information.
#[tool]
async fn get_weather(
    /// City or location name
    location: String,
) -> String {
    if location == "Atlantis" && std::env::var_os("WEATHER_STALL").is_some() {
        // A lookup that never answers (without blocking the runtime), said on
        // standard error so that a test knows when to kill the process.
        eprintln!("get_weather: Atlantis does not answer");
        std::future::pending::<()>().await;
    }
    format!("{location}: 14 C, light rain")
}

/// One call per city the question names, then an answer from the results; a
/// greeting needs no tool.
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

#[tokio::main]
async fn main() -> ExitCode {
    loopstack::cli::main(|runtime| {
        let tools = ToolRegistry::new().with(GetWeather).expect("one tool");
        let agent = Agent::new(scripted(), "scripted", tools).max_turns(6).named("weather").expect("a valid name");
        runtime.register(agent)
    })
    .await
}
