//! The ready-made agent as a child run: a workflow wraps it (a review step before,
//! an approval after) instead of copying its loop, and runs one agent per item of a
//! list, a bounded number at once.

use loopstack_core::{ChildEnded, RunContext, RunId, RunOutcome, RunQuery, RunStatus, Runtime, ToolRegistry};
use loopstack_llm::{Agent, AgentError, AgentState, ChatRequest, ScriptedModel};
use loopstack_macros::workflow;
use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Serialize, Deserialize)]
struct Batch {
    questions: Vec<String>,
    children: Vec<RunId>,
    answers: Vec<(RunId, String)>,
    approved_by: Option<String>,
}

impl From<Vec<String>> for Batch {
    fn from(questions: Vec<String>) -> Self {
        Self { questions, ..Self::default() }
    }
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Approval {
    by: String,
}

/// Reviews the questions, runs one agent per question, waits for all, then waits
/// for a person to approve the answers.
struct Desk {
    agent: Agent,
}

#[workflow(crate = ::loopstack_core, input = Vec<String>)]
impl Desk {
    /// A review step before the agent: drop empty questions.
    #[transition(to = Reviewed)]
    async fn review(&self, batch: &mut Batch, _cx: &mut RunContext) -> Result<(), AgentError> {
        batch.questions.retain(|q| !q.trim().is_empty());
        Ok(())
    }

    /// One agent run per question.
    #[transition(from = Reviewed, to = Asking)]
    async fn ask_all(&self, batch: &mut Batch, cx: &mut RunContext) -> Result<(), AgentError> {
        for question in batch.questions.clone() {
            let child = cx.start_child(&self.agent, question.into(), "answered").await?;
            batch.children.push(child);
        }
        Ok(())
    }

    /// An agent ended.
    #[transition(from = Asking, to = Asking, wait)]
    async fn answered(&self, batch: &mut Batch, _cx: &mut RunContext, ended: ChildEnded) -> Result<(), AgentError> {
        let state: AgentState = ended.output_as().map_err(AgentError::Document)?;
        batch.answers.push((ended.child, state.output.unwrap_or_default()));
        Ok(())
    }

    /// An approval step after the agents.
    #[transition(from = Asking, to = Answered)]
    #[guard(all_answered)]
    async fn collect(&self, _batch: &mut Batch, _cx: &mut RunContext) -> Result<(), AgentError> {
        Ok(())
    }

    #[transition(from = Answered, to = End, wait)]
    async fn approve(&self, batch: &mut Batch, _cx: &mut RunContext, approval: Approval) -> Result<(), AgentError> {
        batch.approved_by = Some(approval.by);
        Ok(())
    }

    fn all_answered(&self, batch: &Batch) -> bool {
        batch.answers.len() == batch.children.len()
    }
}

fn echo_agent() -> Agent {
    let model = ScriptedModel::from_fn(|req: &ChatRequest| {
        let q = req.messages.last().map(|m| m.text()).unwrap_or_default();
        Ok(ScriptedModel::new().text_response(format!("answer to {q}")))
    });
    Agent::new(model, "echo", ToolRegistry::new())
}

#[tokio::test]
async fn a_workflow_wraps_the_agent_and_runs_one_per_item_bounded() {
    let agent = echo_agent();
    let desk = Desk { agent: agent.clone() };
    let runtime = Runtime::new().register(agent).child_concurrency(2);
    let questions = vec!["one".to_owned(), " ".to_owned(), "two".to_owned(), "three".to_owned()];
    let report = runtime.start(&desk, questions).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Waiting { place: "answered", signals: vec!["approve"] });
    let mut answers: Vec<String> = report.state.answers.iter().map(|(_, a)| a.clone()).collect();
    answers.sort();
    assert_eq!(answers, ["answer to one", "answer to three", "answer to two"]);

    // Each agent is a run of its own, with its own conversation, recording its parent.
    let children = runtime.store().list_runs(&RunQuery::new().parent(report.run_id)).await.unwrap().runs;
    assert_eq!(children.len(), 3);
    assert!(children.iter().all(|c| c.workflow == "agent" && c.status == RunStatus::Completed));

    let done = runtime.signal(&desk, report.run_id, DeskSignal::Approve(Approval { by: "ada".into() })).await.unwrap();
    assert_eq!(done.outcome, RunOutcome::Completed);
    assert_eq!(done.state.approved_by.as_deref(), Some("ada"));
}
