//! Handoffs (`Agent::handoff`): the model of one agent hands the conversation to
//! another named agent, which takes the next turns of the same run with its own
//! prompt, model and tools; who has the conversation is in the state, the messages'
//! metadata and the events; the run's limits bound a handoff loop. Each agent has a
//! scripted model of its own, so which model answered shows which agent took a turn.

use std::collections::VecDeque;
use std::sync::Mutex;

use loopstack_core::{EventKind, RegistryError, Runtime, ToolRegistry};
use loopstack_llm::{
    Agent, AgentError, AgentPlace, AgentState, AgentStatus, AgentToolError, AskError, ChatResponse, Limit, Message,
    ScriptedModel, ToolDecisions, ToolResult,
};
use loopstack_macros::tool;
use serde_json::json;

/// Resets a user's password.
#[tool(crate = ::loopstack_core, approve)]
async fn reset_password(user: String) -> Result<String, loopstack_core::ToolError> {
    Ok(format!("password of {user} reset"))
}

/// Looks up what a user paid.
#[tool(crate = ::loopstack_core)]
async fn charges(user: String) -> Result<String, loopstack_core::ToolError> {
    Ok(format!("{user} paid 20 EUR on 1 May"))
}

/// A model of one agent's own: `script`'s replies in order. (A queued `ScriptedModel`
/// skips as many replies as the conversation has assistant turns, as it does for a
/// resumed run; here other agents' models took some of those turns.)
fn own_model(script: impl FnOnce(&ScriptedModel) -> Vec<ChatResponse>) -> ScriptedModel {
    let replies = Mutex::new(VecDeque::from(script(&ScriptedModel::new())));
    ScriptedModel::from_fn(move |_| {
        Ok(replies.lock().unwrap().pop_front().expect("the agent's model has a reply left"))
    })
}

fn agent(model: &ScriptedModel, system: &str, tools: ToolRegistry, name: &str) -> Agent {
    Agent::new(model.clone(), "m", tools).system(system).named(name).unwrap()
}

fn results_in(message: &Message) -> Vec<ToolResult> {
    message.tool_results_iter().cloned().collect()
}

#[tokio::test]
async fn the_target_takes_the_next_turns_with_its_prompt_and_tools_and_the_conversation() {
    let triage_model = own_model(|m| vec![m.tool_call_response("transfer_to_billing", json!({}))]);
    let billing_model = own_model(|m| {
        vec![m.tool_call_response("charges", json!({"user": "ada"})), m.text_response("You paid 20 EUR on 1 May.")]
    });
    let billing =
        agent(&billing_model, "You answer billing questions.", ToolRegistry::new().with(Charges).unwrap(), "billing");
    let triage = agent(&triage_model, "You route questions.", ToolRegistry::new(), "triage")
        .handoff(&billing, "Answers questions about payments.")
        .unwrap();
    let runtime = Runtime::new().try_register(triage.clone()).unwrap();
    let mut events = runtime.subscribe();

    let reply = triage.ask(&runtime, "What did I pay?").await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    assert_eq!((reply.text.as_str(), reply.agent.as_str(), reply.turns), ("You paid 20 EUR on 1 May.", "billing", 3));
    // Triage's model took one turn, billing's the two after the handoff: the answer
    // is billing's model's.
    assert_eq!((triage_model.calls(), billing_model.calls()), (1, 2));

    // Triage's turn: its prompt, the transfer tool and none of billing's tools.
    let request = triage_model.last_request().unwrap();
    assert_eq!(request.settings.system.as_deref(), Some("You route questions."));
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["transfer_to_billing"]);
    assert_eq!(request.tools[0].description, "Answers questions about payments.");
    // Billing's turns: its prompt and tools, the whole conversation so far.
    let requests = billing_model.requests();
    for request in &requests {
        assert_eq!(request.settings.system.as_deref(), Some("You answer billing questions."));
        let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(offered, ["charges"]);
    }
    assert_eq!(requests[0].messages[0].text(), "What did I pay?");
    let transferred = results_in(&requests[0].messages[2]);
    assert_eq!(transferred.len(), 1);
    assert!(!transferred[0].is_error);
    assert!(transferred[0].content.starts_with("transferred to billing"), "{}", transferred[0].content);

    // The state says who has the conversation; each assistant message who wrote it.
    let record = runtime.store().load_run(reply.run_id).await.unwrap();
    assert_eq!(record.workflow.as_ref(), "triage", "the run stays the triage agent's");
    let state: AgentState = serde_json::from_str(record.state.get()).unwrap();
    assert_eq!(state.agent.as_deref(), Some("billing"));
    let docs = runtime.store().documents(reply.run_id).await.unwrap();
    let writers: Vec<serde_json::Value> = docs
        .iter()
        .filter(|d| d.read::<Message>().unwrap().role == loopstack_llm::Role::Assistant)
        .map(|d| d.metadata.get("agent").unwrap())
        .collect();
    assert_eq!(writers, ["triage", "billing", "billing"]);

    // One handoff event, from triage to billing.
    let mut handoffs = Vec::new();
    while let Some(Ok(event)) = events.try_recv() {
        if let EventKind::Custom { name, data } = &event.kind
            && name == "handoff"
        {
            handoffs.push(data.clone());
        }
    }
    assert_eq!(handoffs, [json!({"from": "triage", "to": "billing"})]);
}

#[tokio::test]
async fn other_calls_of_the_handoff_turn_are_answered_as_not_run() {
    let triage_model = own_model(|m| {
        vec![m.tool_calls_response([("charges", json!({"user": "ada"})), ("transfer_to_billing", json!({}))])]
    });
    let billing_model = own_model(|m| vec![m.text_response("Billing here.")]);
    let billing = agent(&billing_model, "Billing.", ToolRegistry::new(), "billing");
    let triage = agent(&triage_model, "Triage.", ToolRegistry::new().with(Charges).unwrap(), "triage")
        .handoff(&billing, "Billing.")
        .unwrap();
    let reply = triage.ask(&Runtime::new(), "Hi").await.unwrap();
    assert_eq!((reply.text.as_str(), reply.tool_calls), ("Billing here.", 0), "`charges` did not run");
    assert_eq!((triage_model.calls(), billing_model.calls()), (1, 1), "billing's model answered");
    let request = billing_model.last_request().unwrap();
    let results = results_in(&request.messages[2]);
    assert_eq!(results.len(), 2, "both calls answered, in one message");
    let calls: Vec<_> = request.messages[1].tool_uses().map(|c| c.id.clone()).collect();
    assert_eq!((&results[0].tool_use_id, results[0].is_error), (&calls[0], true));
    assert!(results[0].content.contains("handed to billing"), "{}", results[0].content);
    assert_eq!((&results[1].tool_use_id, results[1].is_error), (&calls[1], false));
}

#[tokio::test]
async fn a_handoff_loop_stops_at_the_runs_turn_budget() {
    // Each agent hands straight back to the other.
    let model = ScriptedModel::from_fn(|req| {
        let to = if req.settings.system.as_deref() == Some("Ping.") { "pong" } else { "ping" };
        Ok(ScriptedModel::new().tool_call_response(format!("transfer_to_{to}"), json!({})))
    });
    let pong = agent(&model, "Pong.", ToolRegistry::new(), "pong").handoff_by_name("ping", "Ping.").unwrap();
    let ping = agent(&model, "Ping.", ToolRegistry::new(), "ping").max_turns(5).handoff(&pong, "Pong.").unwrap();
    let reply = ping.ask(&Runtime::new(), "Go").await.unwrap();
    assert_eq!(reply.status, AgentStatus::LimitReached(Limit::Turns { max: 5 }));
    assert_eq!(reply.turns, 5);
    // Five turns, alternating: the last (the fifth, ping's) handed to pong.
    assert_eq!(reply.agent, "pong");
}

#[tokio::test]
async fn a_chain_and_a_handoff_back_by_name() {
    let triage_model =
        own_model(|m| vec![m.tool_call_response("transfer_to_billing", json!({})), m.text_response("Triage again.")]);
    let billing_model = own_model(|m| vec![m.tool_call_response("transfer_to_refunds", json!({}))]);
    let refunds_model = own_model(|m| vec![m.tool_call_response("transfer_to_triage", json!({}))]);
    let refunds = agent(&refunds_model, "Refunds.", ToolRegistry::new(), "refunds")
        .handoff_by_name("triage", "Everything else.")
        .unwrap();
    let billing =
        agent(&billing_model, "Billing.", ToolRegistry::new(), "billing").handoff(&refunds, "Refunds.").unwrap();
    let triage = agent(&triage_model, "Triage.", ToolRegistry::new(), "triage").handoff(&billing, "Billing.").unwrap();
    let runtime = Runtime::new().try_register(triage.clone()).unwrap();
    let reply = triage.ask(&runtime, "Refund me").await.unwrap();
    assert_eq!((reply.text.as_str(), reply.agent.as_str(), reply.turns), ("Triage again.", "triage", 4));
    // Each agent's turns were its own model's, with its own prompt: triage's model
    // wrote the answer after the chain came back.
    for (model, system, calls) in
        [(&triage_model, "Triage.", 2), (&billing_model, "Billing.", 1), (&refunds_model, "Refunds.", 1)]
    {
        assert_eq!(model.calls(), calls, "{system}");
        assert!(model.requests().iter().all(|r| r.settings.system.as_deref() == Some(system)), "{system}");
    }
    // Back with the agent the run started with: the state names no other.
    let state: AgentState =
        serde_json::from_str(runtime.store().load_run(reply.run_id).await.unwrap().state.get()).unwrap();
    assert_eq!(state.agent, None);
}

#[tokio::test]
async fn a_handoff_to_a_name_the_run_does_not_know_is_an_error_result() {
    let model = ScriptedModel::new()
        .tool_call("transfer_to_nobody", json!({}))
        .text("I will help you myself.")
        .record_requests(true);
    let triage = agent(&model, "Triage.", ToolRegistry::new(), "triage").handoff_by_name("nobody", "No one.").unwrap();
    let reply = triage.ask(&Runtime::new(), "Hi").await.unwrap();
    assert_eq!((reply.text.as_str(), reply.agent.as_str()), ("I will help you myself.", "triage"));
    let results = results_in(&model.requests()[1].messages[2]);
    assert!(results[0].is_error);
    assert!(results[0].content.contains("no agent `nobody`"), "{}", results[0].content);
}

#[tokio::test]
async fn an_approval_in_the_target_waits_and_is_decided_through_the_run() {
    let triage_model = own_model(|m| vec![m.tool_call_response("transfer_to_password", json!({}))]);
    let password_model = own_model(|m| {
        vec![m.tool_call_response("reset_password", json!({"user": "ada"})), m.text_response("Your password is reset.")]
    });
    let password = agent(&password_model, "Passwords.", ToolRegistry::new().with(ResetPassword).unwrap(), "password");
    let triage =
        agent(&triage_model, "Triage.", ToolRegistry::new(), "triage").handoff(&password, "Passwords.").unwrap();
    let runtime = Runtime::new().try_register(triage.clone()).unwrap();
    let reply = triage.ask(&runtime, "Reset my password").await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = &reply.status else { panic!("{:?}", reply.status) };
    assert_eq!((calls[0].name.as_str(), &calls[0].arguments), ("reset_password", &json!({"user": "ada"})));
    assert_eq!(reply.agent, "password");
    // Pending calls and decisions go through the run's agent, triage.
    let pending = triage.pending(&runtime, reply.run_id).await.unwrap();
    let done = triage.decide(&runtime, reply.run_id, ToolDecisions::approve_all(&pending)).await.unwrap();
    assert_eq!(
        (done.status, done.text.as_str(), done.tool_calls),
        (AgentStatus::Completed, "Your password is reset.", 1)
    );
    // After the decision the target's model, not triage's, answered.
    assert_eq!((triage_model.calls(), password_model.calls()), (1, 2));
}

#[tokio::test]
async fn a_run_handed_to_an_agent_the_build_no_longer_has_fails_with_a_typed_error() {
    let model = ScriptedModel::new()
        .tool_call("transfer_to_password", json!({}))
        .tool_call("reset_password", json!({"user": "ada"}))
        .text("Done.");
    let password = agent(&model, "Passwords.", ToolRegistry::new().with(ResetPassword).unwrap(), "password");
    let triage = agent(&model, "Triage.", ToolRegistry::new(), "triage").handoff(&password, "Passwords.").unwrap();
    let runtime = Runtime::new().try_register(triage.clone()).unwrap();
    let reply = triage.ask(&runtime, "Reset my password").await.unwrap();
    assert!(matches!(reply.status, AgentStatus::AwaitingApproval { .. }));

    // The same run, driven by a triage agent without the handoff.
    let lost = agent(&model, "Triage.", ToolRegistry::new(), "triage");
    let pending = lost.pending(&runtime, reply.run_id).await.unwrap();
    let error = lost.decide(&runtime, reply.run_id, ToolDecisions::approve_all(&pending)).await.unwrap_err();
    match error {
        AskError::Step { source: AgentError::UnknownAgent { agent, known }, .. } => {
            assert_eq!((agent.as_str(), known), ("password", vec!["triage".to_owned()]));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_handoff_is_refused_when_it_cannot_be_offered() {
    let model = ScriptedModel::new();
    let unnamed = Agent::new(model.clone(), "m", ToolRegistry::new());
    let triage = || agent(&model, "Triage.", ToolRegistry::new().with(Charges).unwrap(), "triage");
    assert!(matches!(triage().handoff(&unnamed, "x"), Err(AgentToolError::UnnamedHandoff)));
    let myself = triage();
    assert!(matches!(triage().handoff(&myself, "x"), Err(AgentToolError::HandoffToSelf { .. })));
    let billing = agent(&model, "Billing.", ToolRegistry::new(), "billing");
    let twice = triage().handoff(&billing, "x").unwrap().handoff(&billing, "y");
    assert!(matches!(twice, Err(AgentToolError::Name(RegistryError::Duplicate { .. }))), "{twice:?}");
    let long = agent(&model, "Long.", ToolRegistry::new(), &"a".repeat(60));
    assert!(matches!(triage().handoff(&long, "x"), Err(AgentToolError::Name(RegistryError::InvalidName(_)))));
    // A tool of the agent's own under the transfer tool's name.
    let shadowed = agent(&model, "Triage.", ToolRegistry::new().with(TransferToBilling).unwrap(), "triage");
    let clash = shadowed.handoff(&billing, "x");
    assert!(matches!(clash, Err(AgentToolError::Name(RegistryError::Duplicate { .. }))), "{clash:?}");
}

/// A tool of the user's that happens to have a transfer tool's name.
#[tool(crate = ::loopstack_core)]
async fn transfer_to_billing() -> Result<String, loopstack_core::ToolError> {
    Ok("mine".into())
}

#[test]
fn the_routing_takes_a_handoff_before_running_tools() {
    let model = ScriptedModel::new();
    let billing = agent(&model, "Billing.", ToolRegistry::new(), "billing");
    let triage = agent(&model, "Triage.", ToolRegistry::new(), "triage").handoff(&billing, "Billing.").unwrap();
    let mut state = AgentState::default();
    state.handoff = Some("billing".into());
    state.last_tool_calls = 1;
    use loopstack_core::WorkflowExt;
    assert_eq!(triage.next_transition(AgentPlace::PromptExecuted, &state).unwrap(), Some("hand_off"));
    assert!(triage.mermaid().contains("hand_off"));
}
