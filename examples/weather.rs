//! The weather agent: a `get_weather` tool and the tool-calling workflow
//! setup -> llm turn -> execute tool calls -> tools complete -> llm turn -> respond.
//!
//! ```text
//! cargo run --example weather                                  # offline, scripted model
//! cargo run --example weather -- --question "How is the weather in Oslo?"
//! cargo run --example weather -- --mermaid                     # print the diagram and exit
//! cargo run --example weather -- --db runs.db                  # keep runs in runs.db (default weather.db)
//! cargo run --example weather -- --resume RUN_ID               # resume a run whose process died
//! cargo run --example weather -- --db memory                   # keep nothing
//! ANTHROPIC_API_KEY=... cargo run --example weather -- --provider anthropic
//! OPENAI_API_KEY=... cargo run --example weather -- --provider openai --model gpt-4o-mini
//! OPENAI_BASE_URL=http://localhost:11434/v1 cargo run --example weather -- --provider openai --model llama3.2
//! ```

use std::process::ExitCode;

use loopstack::llm::{
    ChatRequest, ChatResponse, ContentBlock, DelegateResult, GenerateOptions, GenerateResult, LlmDelegateToolCalls,
    LlmError, LlmGenerateText, Message, Models, Role, ScriptedModel, StopReason, ToolUse, Usage,
};
use loopstack::prelude::*;
use serde::{Deserialize, Serialize};

/// Retrieve weather information.
#[tool]
async fn get_weather(
    /// City or location name
    location: String,
) -> Result<String, ToolError> {
    if location.trim().is_empty() {
        return Err(ToolError::new("the location is empty; name a city"));
    }
    Ok("Mostly sunny, 14C, rain in the afternoon.".to_owned())
}

/// The run's state: the question, the last model turn and the last tool results.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ToolCallState {
    question: String,
    llm_result: Option<GenerateResult>,
    delegate_result: Option<DelegateResult>,
}

impl From<String> for ToolCallState {
    fn from(question: String) -> Self {
        Self { question, ..Self::default() }
    }
}

/// The weather workflow: it holds the LLM steps, like the reference's injected tools.
struct ToolCallWorkflow {
    llm: LlmGenerateText,
    delegate: LlmDelegateToolCalls,
    options: GenerateOptions,
}

#[workflow(input = String)]
impl ToolCallWorkflow {
    #[transition(to = Ready)]
    async fn setup(&self, state: &mut ToolCallState, cx: &mut RunContext) -> Result<()> {
        cx.save(&Message::user(state.question.as_str()))?;
        Ok(())
    }

    #[transition(from = Ready, to = PromptExecuted)]
    async fn llm_turn(&self, state: &mut ToolCallState, cx: &mut RunContext) -> Result<()> {
        state.llm_result = Some(self.llm.call(cx, &self.options).await?);
        state.delegate_result = None;
        Ok(())
    }

    #[transition(from = PromptExecuted, to = AwaitingTools, priority = 10)]
    #[guard(has_tool_calls)]
    async fn execute_tool_calls(&self, state: &mut ToolCallState, cx: &mut RunContext) -> Result<()> {
        let llm = state.llm_result.as_ref().expect("guarded by has_tool_calls");
        state.delegate_result = Some(self.delegate.call(cx, &llm.message, &llm.offered_tools).await?);
        Ok(())
    }

    #[transition(from = AwaitingTools, to = Ready)]
    #[guard(all_tools_complete)]
    async fn tools_complete(&self, _state: &mut ToolCallState, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = PromptExecuted, to = End)]
    async fn respond(&self, _state: &mut ToolCallState, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    fn has_tool_calls(&self, state: &ToolCallState) -> bool {
        // The stop reason says tool use and there is a call to make.
        state.llm_result.as_ref().is_some_and(GenerateResult::wants_tools)
    }

    fn all_tools_complete(&self, state: &ToolCallState) -> bool {
        state.delegate_result.as_ref().is_some_and(|r| r.all_completed)
    }
}

impl ToolCallWorkflow {
    fn new(models: Models, options: GenerateOptions) -> Result<Self, loopstack::RegistryError> {
        let tools = ToolRegistry::new().with(GetWeather)?;
        Ok(Self {
            llm: LlmGenerateText::new(models, tools.clone()),
            delegate: LlmDelegateToolCalls::new(tools),
            options,
        })
    }
}

/// The offline model: it reads the conversation it is given and either asks for the
/// weather of the city in the question, or answers from the tool result.
fn scripted_weather_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().ok_or_else(|| LlmError::Script {
            model: request.model.clone(),
            message: "the conversation is empty".into(),
        })?;
        let usage = Usage::new(50, 10);
        if let Some(result) = last.tool_results_iter().next() {
            let question = request.messages.first().map(Message::text).unwrap_or_default();
            let answer = format!("In {}: {}", city_in(&question), result.content);
            return Ok(ChatResponse::new(Message::assistant(answer), StopReason::EndTurn, usage, "scripted-weather"));
        }
        let call = ToolUse::new("call_0", "get_weather", serde_json::json!({ "location": city_in(&last.text()) }));
        let message = Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] };
        Ok(ChatResponse::new(message, StopReason::ToolUse, usage, "scripted-weather"))
    })
}

/// The word after the last " in ", without punctuation; Berlin if there is none.
fn city_in(question: &str) -> String {
    question
        .rsplit_once(" in ")
        .map(|(_, rest)| rest.trim_matches(|c: char| !c.is_alphanumeric() && c != ' ').to_owned())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "Berlin".to_owned())
}

struct Args {
    provider: String,
    model: Option<String>,
    question: String,
    mermaid: bool,
    db: String,
    resume: Option<RunId>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        provider: "scripted".into(),
        model: None,
        question: "How is the weather in Berlin?".into(),
        mermaid: false,
        db: "weather.db".into(),
        resume: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--provider" => args.provider = value()?,
            "--model" => args.model = Some(value()?),
            "--question" => args.question = value()?,
            "--mermaid" => args.mermaid = true,
            "--db" => args.db = value()?,
            "--resume" => {
                let id = value()?;
                args.resume = Some(id.parse().map_err(|e| format!("--resume `{id}` is not a run id: {e}"))?);
            }
            "-h" | "--help" => {
                return Err("usage: weather [--provider anthropic|openai|scripted] [--model NAME] [--question TEXT] \
                            [--db PATH|memory] [--resume RUN_ID] [--mermaid]"
                    .into());
            }
            other => return Err(format!("unknown flag `{other}`; see --help")),
        }
    }
    Ok(args)
}

fn model_for(provider: &str) -> Result<(Models, &'static str), Box<dyn std::error::Error>> {
    Ok(match provider {
        "scripted" => (Models::new().with(scripted_weather_model()), "scripted-weather"),
        "anthropic" => (Models::new().with(loopstack::llm::anthropic::Anthropic::from_env()?), "claude-sonnet-4-5"),
        "openai" => (Models::new().with(loopstack::llm::openai::OpenAi::from_env()?), "gpt-4o-mini"),
        other => return Err(format!("unknown provider `{other}`; use anthropic, openai or scripted").into()),
    })
}

#[tokio::main(flavor = "current_thread")]
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
            // loopstack's errors carry their causes in their messages.
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if args.mermaid {
        // The diagram needs no model: draw it from the transition table.
        let options = GenerateOptions::new("scripted", "scripted-weather");
        let workflow = ToolCallWorkflow::new(Models::new().with(scripted_weather_model()), options)?;
        println!("{}", workflow.mermaid());
        return Ok(());
    }
    if args.provider == "scripted" {
        println!(
            "Running offline with the scripted model: no API key or network needed (use --provider anthropic|openai for a real model)."
        );
    } else {
        println!("Running with provider `{}`.", args.provider);
    }
    let (models, default_model) = model_for(&args.provider)?;
    let model = args.model.unwrap_or_else(|| default_model.to_owned());
    let options = GenerateOptions::new(args.provider.as_str(), model).tools(["get_weather"]).max_tokens(1024);
    let workflow = ToolCallWorkflow::new(models, options)?;

    let runtime = if args.db == "memory" {
        Runtime::new()
    } else {
        Runtime::with_store(loopstack::SqliteStore::open(&args.db).await?)
    };
    // A model that keeps calling tools is stopped after 40 transitions (13 model turns).
    let run_id = match args.resume {
        // A run that already ended is shown as it is.
        Some(run_id) if runtime.store().load_run(run_id).await?.status == loopstack::RunStatus::Completed => {
            println!("Run {run_id} in {} has completed.", args.db);
            run_id
        }
        Some(run_id) => {
            println!("Resuming run {run_id} from {}", args.db);
            runtime.resume(&workflow, run_id).max_steps(40).await?.run_id
        }
        None => {
            let run_id = RunId::new();
            // Printed before the first transition, so a run whose process dies can be resumed.
            println!("Run {run_id} (store: {})", args.db);
            runtime.start(&workflow, args.question).run_id(run_id).max_steps(40).await?.run_id
        }
    };
    let store = runtime.store();

    println!("\nConversation:");
    let mut usage = Usage::default();
    for doc in store.documents(run_id).await? {
        let message: Message = doc.read()?;
        if let Some(u) = doc.metadata.get("usage") {
            usage += serde_json::from_value::<Usage>(u.clone())?;
        }
        for block in &message.content {
            match block {
                ContentBlock::Text { text } => println!("  {:?}: {text}", message.role),
                ContentBlock::ToolUse(call) => println!("  tool call {} {}({})", call.id, call.name, call.input),
                ContentBlock::ToolResult(r) => {
                    let kind = if r.is_error { "tool error" } else { "tool result" };
                    println!("  {kind} {}: {}", r.tool_use_id, r.content);
                }
                ContentBlock::Provider { provider, .. } => println!("  ({provider} block)"),
                _ => {}
            }
        }
    }
    println!("\nTransitions:");
    for step in store.history(run_id).await? {
        println!("  {:>2}. {} -> {} ({})", step.step, step.from, step.to, step.transition);
    }
    println!("\nTokens: {} input, {} output", usage.input_tokens, usage.output_tokens);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopstack::llm::ToolResult;

    fn workflow(model: ScriptedModel) -> ToolCallWorkflow {
        let options = GenerateOptions::new("scripted", "scripted-weather").tools(["get_weather"]);
        ToolCallWorkflow::new(Models::new().with(model), options).unwrap()
    }

    /// A model turn: with a tool call, or with text only.
    fn turn(calls: bool) -> GenerateResult {
        let block = if calls {
            serde_json::json!({"type": "tool_use", "id": "c", "name": "get_weather", "input": {}})
        } else {
            serde_json::json!({"type": "text", "text": "Sunny."})
        };
        let stop_reason = if calls { StopReason::ToolUse } else { StopReason::EndTurn };
        serde_json::from_value(serde_json::json!({
            "message": {"role": "assistant", "content": [block]},
            "stop_reason": stop_reason,
            "usage": {"input_tokens": 0, "output_tokens": 0},
            "provider": "scripted",
            "model": "m",
            "offered_tools": [],
        }))
        .unwrap()
    }

    #[test]
    fn guards() {
        let wf = workflow(ScriptedModel::new());
        let mut state = ToolCallState::default();
        assert!(!wf.has_tool_calls(&state));
        state.llm_result = Some(turn(true));
        assert!(wf.has_tool_calls(&state));
        state.llm_result = Some(turn(false));
        assert!(!wf.has_tool_calls(&state));

        assert!(!wf.all_tools_complete(&state));
        state.delegate_result = Some(DelegateResult::default());
        assert!(!wf.all_tools_complete(&state));
    }

    #[test]
    fn routing() {
        use ToolCallWorkflowPlace as P;
        let wf = workflow(ScriptedModel::new());
        let mut state = ToolCallState::default();
        assert_eq!(wf.next_transition(P::Start, &state).unwrap(), Some("setup"));
        assert_eq!(wf.next_transition(P::Ready, &state).unwrap(), Some("llm_turn"));
        state.llm_result = Some(turn(true));
        assert_eq!(wf.next_transition(P::PromptExecuted, &state).unwrap(), Some("execute_tool_calls"));
        state.llm_result = Some(turn(false));
        assert_eq!(wf.next_transition(P::PromptExecuted, &state).unwrap(), Some("respond"));
        // Tool results not complete: a dead end that names the guard, never a silent park.
        assert_eq!(
            wf.route(P::AwaitingTools, &state).unwrap(),
            Route::DeadEnd { false_guards: vec!["all_tools_complete"] }
        );
    }

    #[test]
    fn the_diagram_matches_the_readme() {
        let wf = workflow(ScriptedModel::new());
        let readme = include_str!("../README.md");
        let diagram = wf.mermaid();
        assert!(readme.contains(&format!("```mermaid\n{diagram}```")), "README diagram is stale:\n{diagram}");
    }

    #[test]
    fn city_extraction() {
        assert_eq!(city_in("How is the weather in Berlin?"), "Berlin");
        assert_eq!(city_in("Weather in New York today"), "New York today");
        assert_eq!(city_in("Hello"), "Berlin");
    }

    #[tokio::test]
    async fn end_to_end_with_the_scripted_model() {
        let model = scripted_weather_model();
        let wf = workflow(model.clone());
        let runtime = Runtime::new();
        let report = runtime.start(&wf, "What is the weather in Oslo?".to_owned()).await.unwrap();
        assert_eq!(report.outcome, RunOutcome::Completed);

        let docs = runtime.store().documents(report.run_id).await.unwrap();
        let messages: Vec<Message> = docs.iter().map(|d| d.read().unwrap()).collect();
        let call = ToolUse::new("call_0", "get_weather", serde_json::json!({"location": "Oslo"}));
        let result = ToolResult {
            tool_use_id: "call_0".into(),
            content: "Mostly sunny, 14C, rain in the afternoon.".into(),
            is_error: false,
        };
        assert_eq!(
            messages,
            [
                Message::user("What is the weather in Oslo?"),
                Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] },
                Message::tool_results([result.clone()]),
                Message::assistant("In Oslo: Mostly sunny, 14C, rain in the afternoon."),
            ]
        );
        assert!(docs.iter().all(|d| d.doc_type == "llm_message" && d.tags == ["conversation"]));
        for i in [1, 3] {
            assert_eq!(docs[i].metadata["provider"], "scripted");
            assert_eq!(docs[i].metadata["model"], "scripted-weather");
            assert_eq!(docs[i].metadata["usage"]["input_tokens"], 50);
        }
        let steps: Vec<String> = runtime
            .store()
            .history(report.run_id)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.transition.into_owned())
            .collect();
        assert_eq!(steps, ["setup", "llm_turn", "execute_tool_calls", "tools_complete", "llm_turn", "respond"]);

        // The model saw the offered tool with its schema, and the conversation so far.
        let requests = model.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].tools.len(), 1);
        assert_eq!(requests[0].tools[0].name, "get_weather");
        assert_eq!(requests[0].tools[0].input_schema["required"], serde_json::json!(["location"]));
        assert_eq!(requests[1].messages.len(), 3);
        assert_eq!(report.state.delegate_result, None, "cleared by the second llm turn");
    }
}
