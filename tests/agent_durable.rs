//! The agent's waits survive a restart: a run that waits for tool approval, a chat
//! run that waits for the user, and runs whose workflow tool's child or agent
//! tool's child agent waits for a person are picked up by a new runtime over a new connection to the same store
//! (SQLite and PostgreSQL), which holds nothing of the first one in memory.

use std::sync::Arc;

use loopstack::llm::{Agent, AgentStatus, Message, ScriptedModel, ToolDecision, ToolDecisions};
use loopstack::prelude::*;
use loopstack::{RunStatus, SqliteStore, Store};

mod common;

/// Refunds an order: a person approves each call.
#[tool(approve)]
async fn issue_refund(order: String) -> Result<String, ToolError> {
    Ok(format!("refunded {order}"))
}

/// The model: asks for the refund, then answers from the tool result it reads.
fn model() -> ScriptedModel {
    ScriptedModel::from_fn(|req| {
        let last = req.messages.last().unwrap();
        Ok(match last.tool_results_iter().next() {
            Some(result) => ScriptedModel::new().text_response(format!("Done: {}", result.content)),
            None => ScriptedModel::new().tool_call_response("issue_refund", serde_json::json!({"order": "A-17"})),
        })
    })
}

async fn approval_survives_a_restart(open: impl AsyncFn() -> Arc<dyn Store>) {
    let agent = || Agent::new(model(), "scripted", ToolRegistry::new().with(IssueRefund).unwrap());

    let first = Runtime::with_shared_store(open().await);
    let reply = agent().ask(&first, "Refund A-17").await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = reply.status else { panic!("{:?}", reply.status) };
    let before = first.store().documents(reply.run_id).await.unwrap();
    assert!(before.iter().all(|d| d.read::<Message>().unwrap().tool_results_iter().next().is_none()));
    drop(first);

    let second = Runtime::with_shared_store(open().await);
    assert_eq!(second.store().load_run(reply.run_id).await.unwrap().status, RunStatus::Waiting);
    let decisions = ToolDecisions::new([ToolDecision::approve(&calls[0].call_id)]);
    let done = agent().decide(&second, reply.run_id, decisions).await.unwrap();
    assert_eq!((done.status, done.text.as_str()), (AgentStatus::Completed, "Done: refunded A-17"));
    // The call ran only once approved: before, the run had no tool result.
    let docs = second.store().documents(reply.run_id).await.unwrap();
    let results = docs.iter().filter(|d| d.read::<Message>().unwrap().tool_results_iter().next().is_some()).count();
    assert_eq!(results, 1);
}

/// A run that spent its turn budget waits for it to be raised, across a restart: the
/// new runtime raises it and the run takes the turn it stopped before; a second pause
/// is ended at the limit.
async fn a_paused_budget_survives_a_restart(open: impl AsyncFn() -> Arc<dyn Store>) {
    use loopstack::llm::{Limit, Limits, RaiseLimit};
    let agent = || {
        Agent::new(model(), "scripted", ToolRegistry::new().with(IssueRefund).unwrap())
            .limits(Limits::new().max_turns(1).pause_at_limit(true))
    };
    let first = Runtime::with_shared_store(open().await);
    let reply = agent().ask(&first, "Refund A-17").await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = reply.status else { panic!("{:?}", reply.status) };
    let decisions = ToolDecisions::new([ToolDecision::approve(&calls[0].call_id)]);
    let paused = agent().decide(&first, reply.run_id, decisions).await.unwrap();
    assert_eq!(paused.status, AgentStatus::BudgetSpent(Limit::Turns { max: 1 }));
    assert_eq!(first.store().load_run(reply.run_id).await.unwrap().place.as_ref(), "budget_spent");
    drop(first);

    // Registered: the command line and Studio end a paused run by the signal's name.
    let second = Runtime::with_shared_store(open().await).register(agent());
    let done = agent().raise(&second, reply.run_id, RaiseLimit::new().max_turns(2)).await.unwrap();
    assert_eq!((done.status, done.text.as_str(), done.turns), (AgentStatus::Completed, "Done: refunded A-17", 2));

    // Paused again at a raised budget that still does not allow the turn, then ended.
    let reply = agent().ask(&second, "Refund A-17").await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = reply.status else { panic!("{:?}", reply.status) };
    let decisions = ToolDecisions::new([ToolDecision::approve(&calls[0].call_id)]);
    agent().decide(&second, reply.run_id, decisions).await.unwrap();
    let again = agent().raise(&second, reply.run_id, RaiseLimit::new().max_turns(1)).await.unwrap();
    assert_eq!(again.status, AgentStatus::BudgetSpent(Limit::Turns { max: 1 }));
    let outcome = second.signal_by_name(reply.run_id, "end_at_limit", serde_json::Value::Null).await.unwrap();
    let reason = AgentStatus::LimitReached(Limit::Turns { max: 1 }).stop_reason();
    assert_eq!(outcome, RunOutcome::Stopped { reason: reason.clone() });
    // Ended at the budget it spent: stopped where it paused, with why.
    let record = second.store().load_run(reply.run_id).await.unwrap();
    assert_eq!((record.status, &*record.place, record.error), (RunStatus::Stopped, "budget_spent", Some(reason)));
}

/// The queue-style scripted model the book teaches (docs/src/testing.md), built anew in the "new process":
/// the resumed run gets the reply of the turn it reached, not the first one again.
async fn a_queue_scripted_model_resumes_at_the_runs_turn(open: impl AsyncFn() -> Arc<dyn Store>) {
    let queue =
        || ScriptedModel::new().tool_call("issue_refund", serde_json::json!({"order": "A-17"})).text("Refunded A-17.");
    let agent = |model| Agent::new(model, "scripted", ToolRegistry::new().with(IssueRefund).unwrap());
    let first = Runtime::with_shared_store(open().await);
    let reply = agent(queue()).ask(&first, "Refund A-17").await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = reply.status else { panic!("{:?}", reply.status) };
    drop(first);

    let second = Runtime::with_shared_store(open().await);
    let model = queue();
    let decisions = ToolDecisions::new([ToolDecision::approve(&calls[0].call_id)]);
    let done = agent(model.clone()).decide(&second, reply.run_id, decisions).await.unwrap();
    assert_eq!((done.status, done.text.as_str()), (AgentStatus::Completed, "Refunded A-17."));
    assert_eq!(model.calls(), 1, "one turn in the new process");
    model.assert_finished();
}

/// What the command line and the HTTP API do after a restart: a named agent's
/// waiting calls are read from the stored run by its id alone (the table comes
/// from the runtime, by the run's workflow), and decided by the workflow's name,
/// with no `Agent` value at hand.
async fn approval_by_name_survives_a_restart(open: impl AsyncFn() -> Arc<dyn Store>) {
    let agent =
        || Agent::new(model(), "scripted", ToolRegistry::new().with(IssueRefund).unwrap()).named("desk").unwrap();
    let first = Runtime::with_shared_store(open().await).register(agent());
    let run_id = agent().ask(&first, "Refund A-17").await.unwrap().run_id;
    drop(first);

    let second = Runtime::with_shared_store(open().await).register(agent());
    let record = second.store().load_run(run_id).await.unwrap();
    let table = second.definition_of(&record.workflow).unwrap();
    let pending = loopstack::llm::pending_calls(table, &record).unwrap().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].name.as_str(), &pending[0].arguments),
        ("issue_refund", &serde_json::json!({"order": "A-17"}))
    );
    let decisions = ToolDecisions::new([ToolDecision::deny(&pending[0].call_id, "refunds are closed today")]);
    let outcome = loopstack::llm::decide_by_name(&second, run_id, &decisions).await.unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    let record = second.store().load_run(run_id).await.unwrap();
    assert_eq!(loopstack::llm::pending_calls(table, &record).unwrap(), None, "it waits for nothing now");
    let state: loopstack::llm::AgentState = serde_json::from_str(record.state.get()).unwrap();
    assert_eq!(state.output.as_deref(), Some("Done: denied by the user: refunds are closed today"));
}

/// Two named agents in one runtime over one database: each run is stored under its
/// agent's name, waits, and after a restart resumes under its own agent's prompt,
/// never the other's. A third agent under a taken name is refused.
async fn named_agents_share_a_store_and_resume_under_their_own_prompts(open: impl AsyncFn() -> Arc<dyn Store>) {
    let triage_model = model();
    let billing_model = model();
    let agents = |triage: &ScriptedModel, billing: &ScriptedModel| {
        let tools = || ToolRegistry::new().with(IssueRefund).unwrap();
        let triage = Agent::new(triage.clone(), "scripted", tools()).system("You are triage.").named("triage").unwrap();
        let billing =
            Agent::new(billing.clone(), "scripted", tools()).system("You are billing.").named("billing").unwrap();
        (triage, billing)
    };
    let (triage, billing) = agents(&triage_model, &billing_model);
    let first = Runtime::with_shared_store(open().await).register(triage.clone()).register(billing.clone());
    assert_eq!(first.workflows(), ["billing", "triage"]);
    let t = triage.ask(&first, "Refund A-17").await.unwrap();
    let b = billing.ask(&first, "Refund A-17").await.unwrap();
    for (run, name) in [(t.run_id, "triage"), (b.run_id, "billing")] {
        let record = first.store().load_run(run).await.unwrap();
        assert_eq!((record.workflow.as_ref(), record.status), (name, RunStatus::Waiting));
    }
    let duplicate = Agent::new(model(), "scripted", ToolRegistry::new()).named("billing").unwrap();
    let err = first.clone().try_register(duplicate).unwrap_err();
    assert!(matches!(err, loopstack::RegistryError::DuplicateWorkflow { ref name, .. } if name == "billing"), "{err}");
    drop(first);

    // A new process: fresh models, so what each agent is asked shows whose run it is.
    let (triage_after, billing_after) = (model(), model());
    let (triage, billing) = agents(&triage_after, &billing_after);
    let second = Runtime::with_shared_store(open().await).register(triage.clone()).register(billing.clone());
    let approve = |reply: &loopstack::llm::AgentReply| {
        let AgentStatus::AwaitingApproval { calls } = &reply.status else { panic!("{:?}", reply.status) };
        ToolDecisions::approve_all(calls)
    };
    let done = billing.decide(&second, b.run_id, approve(&b)).await.unwrap();
    assert_eq!(done.status, AgentStatus::Completed);
    let done = triage.decide(&second, t.run_id, approve(&t)).await.unwrap();
    assert_eq!(done.status, AgentStatus::Completed);
    let systems =
        |m: &ScriptedModel| m.requests().iter().map(|r| r.settings.system.clone().unwrap()).collect::<Vec<_>>();
    assert_eq!(systems(&billing_after), ["You are billing."]);
    assert_eq!(systems(&triage_after), ["You are triage."]);
    // Driving a run of one agent with the other is refused, not resumed.
    let err = billing.decide(&second, t.run_id, ToolDecisions::new([])).await.unwrap_err();
    assert!(err.to_string().contains("triage"), "{err}");
}

async fn chat_survives_a_restart(open: impl AsyncFn() -> Arc<dyn Store>) {
    let model = || {
        ScriptedModel::from_fn(|req| {
            let said: Vec<String> = req.messages.iter().map(|m| m.text()).collect();
            Ok(ScriptedModel::new().text_response(format!("heard {}", said.join(" | "))))
        })
    };
    let agent = || Agent::new(model(), "scripted", ToolRegistry::new()).chat(true);
    let first = Runtime::with_shared_store(open().await);
    let reply = agent().ask(&first, "one").await.unwrap();
    assert_eq!((reply.status, reply.text.as_str()), (AgentStatus::AwaitingUser, "heard one"));
    drop(first);

    let second = Runtime::with_shared_store(open().await);
    let reply = agent().say(&second, reply.run_id, "two").await.unwrap();
    assert_eq!(reply.text, "heard one | heard one | two");
    assert_eq!(agent().close_chat(&second, reply.run_id).await.unwrap().status, AgentStatus::Completed);
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct ReviewArgs {
    topic: String,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    topic: String,
    tool_result_text: Option<String>,
}

/// A child that waits for a person's verdict.
struct Reviewer;

#[workflow(input = Review)]
impl Reviewer {
    #[transition(to = Asked)]
    async fn ask(&self, _review: &mut Review, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Asked, to = End, wait)]
    async fn verdict(&self, review: &mut Review, _cx: &mut RunContext, verdict: String) -> Result<()> {
        review.tool_result_text = Some(format!("{}: {verdict}", review.topic));
        Ok(())
    }
}

async fn a_waiting_workflow_tool_survives_a_restart(open: impl AsyncFn() -> Arc<dyn Store>) {
    let agent = || {
        let tool = loopstack::llm::WorkflowTool::new::<ReviewArgs>("review", "Asks a person to review.", "reviewer")
            .unwrap()
            .input(
                loopstack::llm::dispatch::ChildInput::mapping(serde_json::json!({"topic": "arguments.topic"})).unwrap(),
            );
        let model = ScriptedModel::from_fn(|req| {
            let last = req.messages.last().unwrap();
            Ok(match last.tool_results_iter().next() {
                Some(result) => ScriptedModel::new().text_response(format!("Reviewed: {}", result.content)),
                None => ScriptedModel::new().tool_call_response("review", serde_json::json!({"topic": "the plan"})),
            })
        });
        Agent::new(model, "scripted", ToolRegistry::new().with(tool).unwrap())
    };
    let runtime = |store| Runtime::with_shared_store(store).register(Reviewer).register(agent());

    let first = runtime(open().await);
    let reply = agent().ask(&first, "Review the plan").await.unwrap();
    let AgentStatus::AwaitingTools { calls } = reply.status else { panic!("{:?}", reply.status) };
    drop(first);

    let second = runtime(open().await);
    second.signal(&Reviewer, calls[0].child, ("verdict", serde_json::json!("approved"))).await.unwrap();
    let record = second.store().load_run(reply.run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    let state: loopstack::llm::AgentState = serde_json::from_str(record.state.get()).unwrap();
    assert_eq!(state.output.as_deref(), Some("Reviewed: the plan: approved"));
}

/// Resets a password: a person approves each call.
#[tool(approve)]
async fn reset_password(user: String) -> Result<String, ToolError> {
    Ok(format!("password of {user} reset"))
}

/// An agent called as a tool by another (`as_tool`) whose call of its own waits
/// for approval: both runs wait across the restart, and the decision given to the
/// new runtime ends the child and wakes the parent, which answers with the child's
/// answer and counts the child's tokens as its own.
async fn an_agent_tool_whose_child_waits_survives_a_restart(open: impl AsyncFn() -> Arc<dyn Store>) {
    let reads = |first: &'static str, call: (&'static str, serde_json::Value)| {
        ScriptedModel::from_fn(move |req| {
            let last = req.messages.last().unwrap();
            Ok(match last.tool_results_iter().next() {
                Some(result) => ScriptedModel::new().text_response(format!("{first}: {}", result.content)),
                None => ScriptedModel::new().tool_call_response(call.0, call.1.clone()),
            })
        })
    };
    let password = move || {
        let model = reads("Done", ("reset_password", serde_json::json!({"user": "ada"})));
        Agent::new(model, "scripted", ToolRegistry::new().with(ResetPassword).unwrap()).named("password").unwrap()
    };
    let helpdesk = move || {
        let tool = password().as_tool("password", "Resets passwords.").unwrap();
        let model = reads("Helpdesk", ("password", serde_json::json!({"question": "Reset Ada's password"})));
        Agent::new(model, "scripted", ToolRegistry::new().with(tool).unwrap()).named("helpdesk").unwrap()
    };
    let runtime = |store| Runtime::with_shared_store(store).register(password()).register(helpdesk());

    let first = runtime(open().await);
    let reply = helpdesk().ask(&first, "I forgot my password").await.unwrap();
    let AgentStatus::AwaitingTools { calls } = reply.status else { panic!("{:?}", reply.status) };
    let child = calls[0].child;
    drop(first);

    let second = runtime(open().await);
    assert_eq!(second.store().load_run(reply.run_id).await.unwrap().status, RunStatus::Waiting);
    let pending = password().pending(&second, child).await.unwrap();
    assert_eq!(pending.len(), 1);
    let done = password().decide(&second, child, ToolDecisions::approve_all(&pending)).await.unwrap();
    assert_eq!(done.text, "Done: password of ada reset");
    let record = second.store().load_run(reply.run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    let state: loopstack::llm::AgentState = serde_json::from_str(record.state.get()).unwrap();
    assert_eq!(state.output.as_deref(), Some("Helpdesk: Done: password of ada reset"));
    assert_eq!(state.usage.all_tokens(), 80, "two turns each, 20 tokens a turn");
}

/// A handoff (triage to password) whose target's call waits for approval: the new
/// runtime, which holds nothing of the first, goes on with the agent the run was
/// handed to (its prompt and tools), and the conversation says who wrote what.
async fn a_handoff_survives_a_restart(open: impl AsyncFn() -> Arc<dyn Store>) {
    let model = || {
        ScriptedModel::from_fn(|req| {
            let script = ScriptedModel::new();
            let last = req.messages.last().unwrap();
            Ok(match (req.settings.system.as_deref(), last.tool_results_iter().next()) {
                (Some("Triage."), _) => script.tool_call_response("transfer_to_password", serde_json::json!({})),
                (Some("Passwords."), Some(r)) if !r.content.starts_with("transferred") => {
                    script.text_response(format!("Done: {}", r.content))
                }
                (Some("Passwords."), _) => {
                    script.tool_call_response("reset_password", serde_json::json!({"user": "ada"}))
                }
                (other, _) => panic!("no script for {other:?}"),
            })
        })
    };
    let triage = move || {
        let password = Agent::new(model(), "scripted", ToolRegistry::new().with(ResetPassword).unwrap())
            .system("Passwords.")
            .named("password")
            .unwrap();
        Agent::new(model(), "scripted", ToolRegistry::new())
            .system("Triage.")
            .named("triage")
            .unwrap()
            .handoff(&password, "Resets passwords.")
            .unwrap()
    };
    let runtime = |store| Runtime::with_shared_store(store).register(triage());

    let first = runtime(open().await);
    let reply = triage().ask(&first, "I forgot my password").await.unwrap();
    assert!(matches!(reply.status, AgentStatus::AwaitingApproval { .. }), "{:?}", reply.status);
    assert_eq!(reply.agent, "password");
    drop(first);

    let second = runtime(open().await);
    let pending = triage().pending(&second, reply.run_id).await.unwrap();
    assert_eq!(pending[0].name, "reset_password");
    let done = triage().decide(&second, reply.run_id, ToolDecisions::approve_all(&pending)).await.unwrap();
    assert_eq!(
        (done.status, done.text.as_str(), done.agent.as_str()),
        (AgentStatus::Completed, "Done: password of ada reset", "password")
    );
    let docs = second.store().documents(reply.run_id).await.unwrap();
    let writers: Vec<_> = docs.iter().filter_map(|d| d.metadata.get("agent")).collect();
    assert_eq!(writers, ["triage", "password", "password"]);
}

fn sqlite_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("loopstack-agent-{}.db", RunId::new()))
}

#[tokio::test]
async fn on_sqlite_a_waiting_approval_chat_and_workflow_tool_survive_a_restart() {
    let path = sqlite_path();
    let open = async || -> Arc<dyn Store> {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).await.unwrap());
        store
    };
    approval_survives_a_restart(open).await;
    approval_by_name_survives_a_restart(open).await;
    named_agents_share_a_store_and_resume_under_their_own_prompts(open).await;
    chat_survives_a_restart(open).await;
    a_waiting_workflow_tool_survives_a_restart(open).await;
    a_paused_budget_survives_a_restart(open).await;
    a_queue_scripted_model_resumes_at_the_runs_turn(open).await;
    an_agent_tool_whose_child_waits_survives_a_restart(open).await;
    a_handoff_survives_a_restart(open).await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn on_postgres_a_waiting_approval_chat_and_workflow_tool_survive_a_restart() {
    let schema = common::postgres::TestSchema::new("agent");
    let open = async || -> Arc<dyn Store> {
        let store: Arc<dyn Store> = Arc::new(schema.store().await);
        store
    };
    approval_survives_a_restart(open).await;
    approval_by_name_survives_a_restart(open).await;
    named_agents_share_a_store_and_resume_under_their_own_prompts(open).await;
    chat_survives_a_restart(open).await;
    a_waiting_workflow_tool_survives_a_restart(open).await;
    a_paused_budget_survives_a_restart(open).await;
    a_queue_scripted_model_resumes_at_the_runs_turn(open).await;
    an_agent_tool_whose_child_waits_survives_a_restart(open).await;
    a_handoff_survives_a_restart(open).await;
    schema.drop().await;
}
