//! The weather agent of `examples/weather.rs`, with the `Tool` and `Workflow` impls
//! written by hand: this is what `#[tool]` and `#[workflow]` generate, give or take
//! naming. Switching between the two is not a breaking change.
//!
//! ```text
//! cargo run --example weather_no_macros
//! ```

use loopstack::llm::{
    ChatResponse, ContentBlock, DelegateResult, GenerateOptions, GenerateResult, LlmDelegateToolCalls, LlmGenerateText,
    Message, Models, Role, ScriptedModel, StopReason, ToolUse, Usage,
};
use loopstack::{
    BoxError, BoxFuture, Definition, END, RunContext, RunOutcome, Runtime, START, Tool, ToolContext, ToolError,
    ToolOutput, ToolRegistry, TransitionDef, TransitionError, Workflow, WorkflowExt as _,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

// ---- The tool: what `#[tool] async fn get_weather(location: String)` generates. ----

/// The arguments, with their descriptions for the model.
#[derive(Deserialize, schemars::JsonSchema)]
struct GetWeatherArgs {
    /// City or location name
    location: String,
}

/// Retrieve weather information.
struct GetWeather;

#[async_trait::async_trait]
impl Tool for GetWeather {
    fn name(&self) -> &str {
        "get_weather"
    }

    fn description(&self) -> &str {
        "Retrieve weather information."
    }

    fn input_schema(&self) -> Value {
        // Called once, when the tool is registered.
        loopstack::tool_input_schema::<GetWeatherArgs>()
    }

    async fn call(&self, args: Value, _cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        // Bad arguments become an error result the model can read, never a panic.
        let args: GetWeatherArgs = loopstack::parse_tool_arguments(self.name(), args)?;
        if args.location.trim().is_empty() {
            return Err(ToolError::new("the location is empty; name a city"));
        }
        Ok(ToolOutput::text("Mostly sunny, 14C, rain in the afternoon."))
    }
}

// ---- The workflow: what `#[workflow] impl ToolCallWorkflow { .. }` generates. ----

#[derive(Debug, Default, Serialize, Deserialize)]
struct ToolCallState {
    question: String,
    llm_result: Option<GenerateResult>,
    delegate_result: Option<DelegateResult>,
}

struct ToolCallWorkflow {
    llm: LlmGenerateText,
    delegate: LlmDelegateToolCalls,
    options: GenerateOptions,
}

/// The transition table, in declaration order; places are snake_case strings.
static DEFINITION: Definition = Definition::new(
    "tool_call_workflow",
    &[START, "ready", "prompt_executed", "awaiting_tools", END],
    &[
        TransitionDef::new("setup", &[START], "ready"),
        TransitionDef::new("llm_turn", &["ready"], "prompt_executed"),
        TransitionDef::new("execute_tool_calls", &["prompt_executed"], "awaiting_tools")
            .priority(10)
            .guard("has_tool_calls"),
        TransitionDef::new("tools_complete", &["awaiting_tools"], "ready").guard("all_tools_complete"),
        TransitionDef::new("respond", &["prompt_executed"], END),
    ],
);

impl ToolCallWorkflow {
    async fn setup(&self, state: &mut ToolCallState, cx: &mut RunContext) -> Result<(), BoxError> {
        cx.save(&Message::user(state.question.as_str()))?;
        Ok(())
    }

    async fn llm_turn(&self, state: &mut ToolCallState, cx: &mut RunContext) -> Result<(), BoxError> {
        state.llm_result = Some(self.llm.call(cx, &self.options).await?);
        state.delegate_result = None;
        Ok(())
    }

    async fn execute_tool_calls(&self, state: &mut ToolCallState, cx: &mut RunContext) -> Result<(), BoxError> {
        let llm = state.llm_result.as_ref().expect("guarded by has_tool_calls");
        state.delegate_result = Some(self.delegate.call(cx, &llm.message, &llm.offered_tools).await?);
        Ok(())
    }

    fn has_tool_calls(&self, state: &ToolCallState) -> bool {
        state.llm_result.as_ref().is_some_and(|r| r.stop_reason == StopReason::ToolUse)
    }

    fn all_tools_complete(&self, state: &ToolCallState) -> bool {
        state.delegate_result.as_ref().is_some_and(|r| r.all_completed)
    }
}

impl Workflow for ToolCallWorkflow {
    type State = ToolCallState;
    type Input = String;

    fn definition(&self) -> &'static Definition {
        &DEFINITION
    }

    fn init(&self, question: String) -> ToolCallState {
        ToolCallState { question, ..ToolCallState::default() }
    }

    fn guard(&self, transition: usize, state: &ToolCallState) -> bool {
        match transition {
            2 => self.has_tool_calls(state),
            3 => self.all_tools_complete(state),
            _ => true,
        }
    }

    fn transition<'a>(
        &'a self,
        transition: usize,
        state: &'a mut ToolCallState,
        cx: &'a mut RunContext,
        _payload: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            match transition {
                0 => self.setup(state, cx).await,
                1 => self.llm_turn(state, cx).await,
                2 => self.execute_tool_calls(state, cx).await,
                3 | 4 => Ok(()), // tools_complete and respond do nothing but route
                _ => unreachable!("the table has five transitions"),
            }
            .map_err(TransitionError::Failed)
        })
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    println!("Running offline with the scripted model: no API key or network needed.");
    // Check the hand-written table the way #[workflow] checks one at compile time.
    DEFINITION.check().map_err(|errors| errors.join("; "))?;

    let model = ScriptedModel::new()
        .usage(Usage::new(50, 10))
        .reply(ChatResponse::new(
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse(ToolUse::new(
                    "call_0",
                    "get_weather",
                    serde_json::json!({"location": "Berlin"}),
                ))],
            },
            StopReason::ToolUse,
            Usage::new(50, 10),
            "scripted",
        ))
        .text("It is mostly sunny in Berlin, 14C, with rain in the afternoon.");
    let tools = ToolRegistry::new().with(GetWeather)?;
    let workflow = ToolCallWorkflow {
        llm: LlmGenerateText::new(Models::new().with(model.clone()), tools.clone()),
        delegate: LlmDelegateToolCalls::new(tools),
        options: GenerateOptions::new("scripted", "scripted").tools(["get_weather"]),
    };
    println!("{}", workflow.mermaid());

    let runtime = Runtime::new();
    let report = runtime.start(&workflow, "How is the weather in Berlin?".to_owned()).await?;
    assert_eq!(report.outcome, RunOutcome::Completed);
    for doc in runtime.store().documents(report.run_id).await? {
        let message: Message = doc.read()?;
        println!("{:?}: {}", message.role, serde_json::to_string(&message.content)?);
    }
    model.assert_finished();
    Ok(())
}
