//! Which steps a batch of tool calls takes: one (`run_tool_calls`, straight back to
//! the model) when every call completes within its step, two (`execute_tool_calls`,
//! then `tools_complete` at `awaiting_tools`) when a tool of the agent may start a
//! child run or has an at-most-once effect; and the typed error of a tool that
//! breaks the one-step path's promise.

use loopstack_core::{Effect, RunId, Runtime, Tool, ToolContext, ToolError, ToolOptions, ToolOutput, ToolRegistry};
use loopstack_llm::{Agent, AgentError, AskError, LlmDelegateToolCalls, ScriptedModel};
use serde_json::{Value, json};

mod common;

use common::weather::Weather;

/// A second tool, plain unless `options` say otherwise; answers "done", or a pending
/// result when `pending`.
struct Probe {
    options: ToolOptions,
    pending: bool,
}

#[async_trait::async_trait]
impl Tool for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    fn description(&self) -> &str {
        "Probes."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn options(&self) -> ToolOptions {
        self.options
    }
    async fn call(&self, _args: Value, _cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(if self.pending { ToolOutput::pending(RunId::new()) } else { ToolOutput::text("done") })
    }
}

fn tools(probe: Probe) -> ToolRegistry {
    ToolRegistry::new().with(Weather::default()).unwrap().with(probe).unwrap()
}

fn model() -> ScriptedModel {
    ScriptedModel::new().tool_call("get_weather", json!({"location": "Oslo"})).text("Sunny.")
}

/// The transitions of a completed run, each with the place it left and reached.
async fn steps(runtime: &Runtime, agent: &Agent) -> Vec<(String, String, String)> {
    let reply = agent.ask(runtime, "Weather in Oslo?").await.unwrap();
    assert_eq!(reply.text, "Sunny.");
    assert_eq!(reply.tool_calls, 1);
    let history = runtime.store().history(reply.run_id).await.unwrap();
    history.into_iter().map(|s| (s.transition.into_owned(), s.from.into_owned(), s.to.into_owned())).collect()
}

fn expected(rows: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    rows.iter().map(|(t, f, p)| ((*t).to_owned(), (*f).to_owned(), (*p).to_owned())).collect()
}

/// The steps of a run whose one batch of calls took one step.
fn one_step() -> Vec<(String, String, String)> {
    expected(&[
        ("llm_turn", "start", "prompt_executed"),
        ("run_tool_calls", "prompt_executed", "ready"),
        ("llm_turn", "ready", "prompt_executed"),
        ("respond", "prompt_executed", "end"),
    ])
}

#[tokio::test]
async fn calls_that_complete_within_their_step_go_back_to_the_model_in_that_step() {
    let plain = Probe { options: ToolOptions::new(), pending: false };
    let agent = Agent::new(model(), "m", tools(plain));
    assert_eq!(steps(&Runtime::new(), &agent).await, one_step());
}

#[tokio::test]
async fn an_agent_with_a_tool_that_may_wait_passes_awaiting_tools() {
    let waits = expected(&[
        ("llm_turn", "start", "prompt_executed"),
        ("execute_tool_calls", "prompt_executed", "awaiting_tools"),
        ("tools_complete", "awaiting_tools", "ready"),
        ("llm_turn", "ready", "prompt_executed"),
        ("respond", "prompt_executed", "end"),
    ]);
    // The call made is a plain one: what decides is what the agent's tools may do.
    let at_most_once = Probe { options: ToolOptions::new().effect(Effect::AtMostOnce), pending: false };
    let agent = Agent::new(model(), "m", tools(at_most_once));
    assert_eq!(steps(&Runtime::new(), &agent).await, waits, "an at-most-once tool");

    let starts_runs = Probe { options: ToolOptions::new().needs_run(true), pending: false };
    let agent = Agent::new(model(), "m", tools(starts_runs));
    assert_eq!(steps(&Runtime::new(), &agent).await, waits, "a tool that may start a child run");

    // The tools that run are the delegate's: replacing it decides again.
    let plain = Probe { options: ToolOptions::new(), pending: false };
    let at_most_once = Probe { options: ToolOptions::new().effect(Effect::AtMostOnce), pending: false };
    let agent = Agent::new(model(), "m", tools(plain)).delegate(LlmDelegateToolCalls::new(tools(at_most_once)));
    assert_eq!(steps(&Runtime::new(), &agent).await, waits, "a delegate with an at-most-once tool");
    let at_most_once = Probe { options: ToolOptions::new().effect(Effect::AtMostOnce), pending: false };
    let plain = Probe { options: ToolOptions::new(), pending: false };
    let agent = Agent::new(model(), "m", tools(at_most_once)).delegate(LlmDelegateToolCalls::new(tools(plain)));
    assert_eq!(steps(&Runtime::new(), &agent).await, one_step(), "a delegate of plain tools");
}

#[tokio::test]
async fn a_pending_result_from_a_tool_that_cannot_start_runs_fails_the_step_with_a_typed_error() {
    let liar = Probe { options: ToolOptions::new(), pending: true };
    let model = ScriptedModel::new().tool_call("probe", json!({})).text("never asked");
    let agent = Agent::new(model.clone(), "m", tools(liar));
    let runtime = Runtime::new();
    let error = agent.ask(&runtime, "Probe.").await.unwrap_err();
    let AskError::Step { run_id, transition, source: AgentError::PendingWithoutRun { call_id, tool } } = &error else {
        panic!("{error:?}")
    };
    assert_eq!((*transition, tool.as_str()), ("run_tool_calls", "probe"));
    assert!(call_id.starts_with("call_"), "{call_id}");
    assert!(error.to_string().contains("#[tool(needs_run)]"), "{error}");
    // Nothing of the failed step was committed: the run failed where it stood, with
    // the model's one turn.
    assert_eq!(model.calls(), 1);
    let history = runtime.store().history(*run_id).await.unwrap();
    assert_eq!(history.iter().map(|s| &*s.transition).collect::<Vec<_>>(), ["llm_turn"]);
}
