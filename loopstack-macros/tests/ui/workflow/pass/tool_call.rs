use loopstack::{Result, Route, RunContext, Runtime, Workflow, WorkflowExt, workflow};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Serialize, Deserialize)]
struct ToolCallState {
    wants_tools: bool,
    tools_done: bool,
    approved: Option<bool>,
}

#[derive(Deserialize, JsonSchema)]
struct Approval {
    approved: bool,
}

#[derive(Debug)]
struct MyError;
impl std::fmt::Display for MyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("my error")
    }
}
impl std::error::Error for MyError {}

struct ToolCallWorkflow;

#[workflow]
impl ToolCallWorkflow {
    #[transition(to = Ready)]
    async fn setup(&self, _state: &mut ToolCallState, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Ready, to = PromptExecuted)]
    async fn llm_turn(&self, _state: &mut ToolCallState, _cx: &mut RunContext) -> std::result::Result<(), MyError> {
        Ok(())
    }

    #[transition(from = PromptExecuted, to = AwaitingTools, priority = 10)]
    #[guard(has_tool_calls)]
    async fn execute_tool_calls(&self, _state: &mut ToolCallState, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = [AwaitingTools, Approved], to = Ready)]
    #[guard(all_tools_complete)]
    async fn tools_complete(&self, _state: &mut ToolCallState, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = AwaitingTools, to = AwaitingApproval)]
    async fn ask_approval(&self, _state: &mut ToolCallState, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = AwaitingApproval, to = Approved, wait)]
    async fn approve(&self, state: &mut ToolCallState, _cx: &mut RunContext, decision: Approval) -> Result<()> {
        state.approved = Some(decision.approved);
        Ok(())
    }

    #[transition(from = PromptExecuted, to = End)]
    async fn respond(&self, _state: &mut ToolCallState, _cx: &mut RunContext) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(())
    }

    fn has_tool_calls(&self, state: &ToolCallState) -> bool {
        state.wants_tools
    }

    fn all_tools_complete(&self, state: &ToolCallState) -> bool {
        state.tools_done
    }
}

fn main() {
    let wf = ToolCallWorkflow;
    let state = ToolCallState::default();
    assert_eq!(wf.route(ToolCallWorkflowPlace::PromptExecuted, &state).unwrap().transition_name(), Some("respond"));
    assert_eq!(wf.route(ToolCallWorkflowPlace::End, &state).unwrap(), Route::End);
    assert_eq!(wf.definition().name(), "tool_call_workflow");
    let _ = Runtime::new().start(&wf, state);
}
