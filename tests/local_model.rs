//! The weather example against a real small local model (opt-in, not in CI: the model
//! is a 1.1 GB download). Set `LOOPSTACK_LOCAL_MODEL_URL` to the base URL of an
//! OpenAI-compatible server that serves Qwen2.5-Coder-1.5B-Instruct, for instance
//! `../shared/localmodel/` (llama.cpp's server):
//!
//! ```sh
//! bash ../shared/localmodel/setup.sh
//! ~/.cache/loopstack-localmodel-venv/bin/python ../shared/localmodel/serve.py --port 8080 &
//! LOOPSTACK_LOCAL_MODEL_URL=http://127.0.0.1:8080/v1 cargo test --test local_model -- --ignored
//! ```
//!
//! Each question is asked with the book's local-model command (docs/src/providers.md) and must be answered:
//! exit status 0, and an answer that says what the question asked. The test is
//! `#[ignore]`d, so a plain `cargo test` reports it as ignored rather than passing it
//! unrun; asked for with `--ignored`, it fails without the variable.

use std::process::Command;

mod common;

/// The book's system prompt for small local models (docs/src/providers.md).
const SYSTEM: &str = "You answer weather questions. Call get_weather once for each city, then answer in one sentence.";

/// Runs the weather example's command from the book with `question`: its exit status and output.
fn ask(url: &str, question: &str) -> (Option<i32>, String) {
    let out = Command::new(common::example("weather"))
        .args(["--provider", "openai", "--model", "qwen2.5-coder-1.5b", "--text-tool-calls"])
        .args(["--temperature", "0", "--db", "memory", "--system", SYSTEM, "--question", question])
        .env("OPENAI_BASE_URL", url)
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("run the weather example");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// The tool calls and the last answer line of the example's conversation.
fn calls_and_answer(output: &str) -> (Vec<String>, String) {
    let calls = output
        .lines()
        .filter_map(|l| l.trim().strip_prefix("tool call "))
        .map(|c| c.split_once(' ').map_or(c, |(_, call)| call).to_owned())
        .collect();
    let answer = output.lines().filter_map(|l| l.trim().strip_prefix("Assistant: ")).next_back().unwrap_or_default();
    (calls, answer.to_owned())
}

#[test]
#[ignore = "needs a served model: LOOPSTACK_LOCAL_MODEL_URL=http://127.0.0.1:8080/v1 cargo test --test local_model -- --ignored"]
fn the_readme_command_answers_weather_questions_with_a_real_small_model() {
    let url = std::env::var("LOOPSTACK_LOCAL_MODEL_URL").expect(
        "set LOOPSTACK_LOCAL_MODEL_URL to an OpenAI-compatible server with Qwen2.5-Coder-1.5B \
         (see ../shared/localmodel/README.md) to run the weather flows against a real model",
    );
    // (question, a city each call must name, words one of which the answer holds)
    let cases: [(&str, &[&str], &[&str]); 5] = [
        ("How is the weather in Berlin?", &["Berlin"], &["Berlin"]),
        ("Is it going to rain in Oslo today?", &["Oslo"], &["yes", "rain"]),
        ("Should I take an umbrella in London?", &["London"], &["yes", "umbrella"]),
        ("What is the weather in Paris and Rome?", &["Paris", "Rome"], &["Paris"]),
        ("Hello!", &[], &["hello", "help", "assist"]),
    ];
    let mut failures = Vec::new();
    for (question, cities, words) in cases {
        let (status, output) = ask(&url, question);
        let (calls, answer) = calls_and_answer(&output);
        eprintln!("{question}\n  calls: {calls:?}\n  answer: {answer}");
        let lower = answer.to_lowercase();
        let called = cities.iter().all(|city| calls.iter().any(|c| c.contains(&format!("\"{city}\""))));
        let answered = words.iter().any(|w| lower.contains(&w.to_lowercase()));
        if status != Some(0) || !called || !answered || (cities.is_empty() && !calls.is_empty()) {
            failures.push(format!("{question}: exit {status:?}, calls {calls:?}, answer {answer:?}\n{output}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
