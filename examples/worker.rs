//! A worker process: drives the queued, interrupted, signalled and timer-due runs of the
//! weather agent from a shared store, until it is stopped (Ctrl-C or SIGTERM). Start as
//! many as you like on one PostgreSQL database; `tests/workers.rs` starts three and
//! kills one with SIGKILL.
//!
//! ```text
//! cargo run --example worker -- --postgres postgres://postgres@127.0.0.1:5432/postgres
//! cargo run --example worker -- --sqlite runs.db --submit 10       # queue 10 runs, then drive them
//! ```
//!
//! Flags: `--schema NAME` (PostgreSQL schema), `--owner NAME` (the lease holder's name),
//! `--lease-ms N`, `--concurrency N`, `--model-latency-ms N` (the scripted model's
//! latency per turn), `--drain-ms N` (how long the steps in flight may finish after
//! SIGTERM; 25 s unless given), `--submit N` (queue N runs first).

use std::process::ExitCode;
use std::time::Duration;

use loopstack::llm::{Agent, ChatRequest, ChatResponse, ContentBlock, LlmError, Message, Role, ScriptedModel};
use loopstack::llm::{StopReason, ToolUse, Usage};
use loopstack::prelude::*;
use loopstack::{Store, Worker};
use loopstack_store::{PostgresStore, SqliteStore};

/// Retrieve weather information.
#[tool]
async fn get_weather(
    /// City or location name
    location: String,
) -> Result<String, ToolError> {
    Ok(format!("Mostly sunny in {location}, 14C."))
}

/// The question every submitted run asks.
pub const QUESTION: &str = "How is the weather in Berlin?";

/// A stateless scripted model: it asks for the weather, then answers from the result.
fn model(latency: Duration) -> ScriptedModel {
    ScriptedModel::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().ok_or_else(|| LlmError::Script {
            model: request.model.clone(),
            message: "the conversation is empty".into(),
        })?;
        let usage = Usage::new(20, 5);
        if let Some(result) = last.tool_results_iter().next() {
            let answer = Message::assistant(format!("Here is the weather: {}", result.content));
            return Ok(ChatResponse::new(answer, StopReason::EndTurn, usage, "scripted"));
        }
        let call = ToolUse::new("call_0", "get_weather", serde_json::json!({ "location": "Berlin" }));
        let message = Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] };
        Ok(ChatResponse::new(message, StopReason::ToolUse, usage, "scripted"))
    })
    .latency(latency)
    .record_requests(false)
}

/// The agent the worker drives.
fn agent(latency: Duration) -> Result<Agent, BoxError> {
    Ok(Agent::new(model(latency), "scripted", ToolRegistry::new().with(GetWeather)?))
}

struct Args {
    sqlite: Option<String>,
    postgres: Option<String>,
    schema: Option<String>,
    owner: Option<String>,
    lease: Duration,
    concurrency: usize,
    latency: Duration,
    drain: Duration,
    submit: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        sqlite: None,
        postgres: None,
        schema: None,
        owner: None,
        lease: loopstack_store::DEFAULT_LEASE,
        concurrency: 8,
        latency: Duration::ZERO,
        drain: loopstack::DEFAULT_DRAIN_TIMEOUT,
        submit: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--sqlite" => args.sqlite = Some(value()?),
            "--postgres" => args.postgres = Some(value()?),
            "--schema" => args.schema = Some(value()?),
            "--owner" => args.owner = Some(value()?),
            "--lease-ms" => args.lease = Duration::from_millis(number(value()?)?),
            "--concurrency" => args.concurrency = number(value()?)? as usize,
            "--model-latency-ms" => args.latency = Duration::from_millis(number(value()?)?),
            "--drain-ms" => args.drain = Duration::from_millis(number(value()?)?),
            "--submit" => args.submit = number(value()?)? as usize,
            other => return Err(format!("unknown flag `{other}`; see the example's docs")),
        }
    }
    if args.sqlite.is_some() == args.postgres.is_some() {
        return Err("give one of --sqlite PATH or --postgres URL".into());
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), BoxError> {
    let store: std::sync::Arc<dyn Store> = match (&args.sqlite, &args.postgres) {
        (Some(path), _) => std::sync::Arc::new(SqliteStore::open(path).await?.with_lease(Some(args.lease))),
        (_, Some(url)) => std::sync::Arc::new(match &args.schema {
            Some(schema) => PostgresStore::connect_schema(url, schema).await?.with_lease(Some(args.lease)),
            None => PostgresStore::connect(url).await?.with_lease(Some(args.lease)),
        }),
        _ => unreachable!("checked by parse_args"),
    };
    let mut runtime = Runtime::with_shared_store(store).max_steps(40);
    if let Some(owner) = &args.owner {
        runtime = runtime.owner(owner.clone());
    }
    let agent = agent(args.latency)?;
    for _ in 0..args.submit {
        println!("submitted {}", runtime.submit(&agent, QUESTION.into()).await?);
    }
    // Cancelled on SIGTERM or Ctrl-C: the worker then lets its steps in flight
    // finish, gives their runs back to the other workers, and returns.
    let shutdown = loopstack::cli::shutdown_on_signal();
    println!("worker {} ready", args.owner.as_deref().unwrap_or("(unnamed)"));
    Worker::new(runtime)
        .register(agent)
        .concurrency(args.concurrency)
        .poll_interval(Duration::from_millis(50))
        .drain_timeout(args.drain)
        .run(shutdown)
        .await?;
    Ok(())
}
