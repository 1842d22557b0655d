//! The ready-made agent loop, end to end with the scripted model: the exact documents
//! saved and requests sent, the turn budget, and how each stop reason ends a run.

use loopstack_core::{NewRun, RunId, RunQuery, RunStatus, Runtime, ToolRegistry, Workflow};
use loopstack_llm::{
    Agent, AgentError, AgentStatus, AskError, ChatResponse, ContentBlock, Limit, LlmError, Message, Role,
    ScriptedModel, StopReason, ToolResult, ToolUse, Usage,
};
use serde_json::{Value, json};

mod common;

use common::weather::Weather;

fn tools() -> ToolRegistry {
    ToolRegistry::new().with(Weather::default()).unwrap()
}

fn tool_calls(calls: &[(&str, Value)]) -> ChatResponse {
    let content = calls
        .iter()
        .map(|(id, input)| ContentBlock::ToolUse(ToolUse::new(*id, "get_weather", input.clone())))
        .collect();
    ChatResponse::new(Message { role: Role::Assistant, content }, StopReason::ToolUse, Usage::new(50, 10), "m-1")
}

fn stop(text: &str, reason: StopReason) -> ChatResponse {
    ChatResponse::new(Message::assistant(text), reason, Usage::new(70, 20), "m-1")
}

#[tokio::test]
async fn the_loop_saves_the_exact_documents_and_sends_the_exact_requests() {
    let model = ScriptedModel::new()
        .reply(tool_calls(&[("call_a", json!({"location": "Berlin"})), ("call_b", json!({"location": "Oslo"}))]))
        .reply(stop("Sunny in both.", StopReason::EndTurn));
    let agent = Agent::new(model.clone(), "m-1", tools()).system("You are terse.").max_tokens(256);
    let runtime = Runtime::new();
    let reply = agent.ask(&runtime, "Weather in Berlin and Oslo?").await.unwrap();

    assert_eq!(reply.text, "Sunny in both.");
    assert_eq!(reply.status, AgentStatus::Completed);
    assert_eq!(reply.turns, 2);
    assert_eq!(reply.usage, Usage::new(120, 30), "usage summed over the run");

    let user = Message::user("Weather in Berlin and Oslo?");
    let calls =
        tool_calls(&[("call_a", json!({"location": "Berlin"})), ("call_b", json!({"location": "Oslo"}))]).message;
    let results = Message::tool_results([
        ToolResult { tool_use_id: "call_a".into(), content: "Mostly sunny in Berlin, 14C.".into(), is_error: false },
        ToolResult { tool_use_id: "call_b".into(), content: "Mostly sunny in Oslo, 14C.".into(), is_error: false },
    ]);
    let answer = Message::assistant("Sunny in both.");

    // Documents: the conversation, in order, tagged, with provider metadata on the
    // assistant messages.
    let docs = runtime.store().documents(reply.run_id).await.unwrap();
    let messages: Vec<Message> = docs.iter().map(|d| d.read().unwrap()).collect();
    assert_eq!(messages, [user.clone(), calls.clone(), results.clone(), answer]);
    for doc in &docs {
        assert_eq!(doc.doc_type, "llm_message");
        assert_eq!(doc.tags, ["conversation"]);
    }
    assert!(docs[0].metadata.is_empty());
    let mut meta = docs[1].metadata.to_map();
    // What the turn sent besides the conversation, for replays: the model, settings
    // and tools, with a fingerprint of them.
    let config = meta.remove("request").unwrap();
    assert_eq!(config["fp"].as_str().map(str::len), Some(16));
    assert_eq!(config["model"], "m-1");
    assert_eq!(config["settings"], json!({"system": "You are terse.", "max_tokens": 256}));
    assert!(config["tools"][0].as_str().unwrap().starts_with("get_weather:"));
    assert_eq!(
        Value::Object(meta),
        json!({"provider": "scripted", "model": "m-1", "stop_reason": "tool_use",
               "usage": {"input_tokens": 50, "output_tokens": 10}})
    );
    assert_eq!(docs[3].metadata.get("stop_reason"), Some(json!("end_turn")));
    // The same model, settings and tools: recorded once, with the first turn.
    assert!(!docs[3].metadata.contains_key("request"));

    // Requests: the conversation so far, the system prompt, the offered tool's schema.
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.model, "m-1");
        assert_eq!(r.settings.system.as_deref(), Some("You are terse."));
        assert_eq!(r.settings.max_tokens, Some(256));
        assert_eq!(r.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["get_weather"]);
        assert_eq!(
            r.tools[0].input_schema,
            json!({"type": "object", "properties": {"location": {"type": "string", "description": "City or location name"}},
                   "required": ["location"], "additionalProperties": false})
        );
    }
    assert_eq!(requests[0].messages, [std::sync::Arc::new(user.clone())]);
    assert_eq!(requests[1].messages, [user, calls, results].map(std::sync::Arc::new));

    let record = runtime.store().load_run(reply.run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    let history = runtime.store().history(reply.run_id).await.unwrap();
    let steps: Vec<&str> = history.iter().map(|s| &*s.transition).collect();
    assert_eq!(steps, ["llm_turn", "run_tool_calls", "llm_turn", "respond"]);
    model.assert_finished();
}

#[tokio::test]
async fn the_turn_budget_stops_the_run_with_a_typed_status_and_the_documents_keep_the_conversation() {
    // Tool calls for three turns, then an answer that a fourth turn would give.
    let model = ScriptedModel::from_fn(|req| {
        let n = req.messages.len();
        if n > 6 {
            return Ok(ScriptedModel::new().text_response("Done."));
        }
        Ok(tool_calls(&[(&format!("call_{n}"), json!({"location": format!("City {n}")}))]))
    });
    let agent = Agent::new(model.clone(), "m-1", tools()).max_turns(3);
    let runtime = Runtime::new();
    let reply = agent.ask(&runtime, "Loop forever").await.unwrap();
    assert_eq!(reply.status, AgentStatus::LimitReached(Limit::Turns { max: 3 }));
    assert_eq!((reply.turns, reply.tool_calls), (3, 3));
    // Stopped, not completed: the run did not answer, and its error says why.
    let record = runtime.store().load_run(reply.run_id).await.unwrap();
    assert_eq!(
        (record.status, record.error.as_deref(), &*record.place),
        (RunStatus::Stopped, Some("the run reached the budget of 3 model turns"), "ready")
    );
    let stopped = runtime.store().list_runs(&RunQuery::new().status(RunStatus::Stopped)).await.unwrap();
    assert_eq!(stopped.runs.iter().map(|r| r.run_id).collect::<Vec<_>>(), [reply.run_id]);
    // The prompt, then three rounds of tool calls and tool results, in the run's documents.
    let docs = runtime.store().documents(reply.run_id).await.unwrap();
    let conversation: Vec<Message> = docs.iter().map(|d| d.read().unwrap()).collect();
    assert_eq!(conversation.len(), 7);
    assert_eq!(conversation[0], Message::user("Loop forever"));
    assert!(conversation[6].tool_results_iter().all(|r| !r.is_error));
    assert_eq!(model.calls(), 3);

    // A retry with a larger budget takes the turn the run stopped before, and answers.
    let raised = Agent::new(model.clone(), "m-1", tools()).max_turns(4);
    let done = raised.reply_of(runtime.retry(&raised, reply.run_id).await.unwrap());
    assert_eq!((done.status, done.text.as_str(), done.turns), (AgentStatus::Completed, "Done.", 4));
    let record = runtime.store().load_run(reply.run_id).await.unwrap();
    assert_eq!((record.status, record.error), (RunStatus::Completed, None));
    assert!(runtime.store().list_runs(&RunQuery::new().status(RunStatus::Stopped)).await.unwrap().runs.is_empty());
}

#[tokio::test]
async fn a_max_tokens_stop_ends_the_run_with_a_clear_status() {
    let model = ScriptedModel::new().reply(stop("It is mostly sun", StopReason::MaxTokens));
    let reply = Agent::new(model, "m-1", tools()).ask(&Runtime::new(), "Weather?").await.unwrap();
    assert_eq!(reply.status, AgentStatus::MaxTokens);
    assert_eq!(reply.text, "It is mostly sun");
}

#[tokio::test]
async fn other_stop_reasons_end_the_run_and_are_kept() {
    let model = ScriptedModel::new().reply(stop("", StopReason::Other("content_filter".into())));
    let reply = Agent::new(model, "m-1", tools()).ask(&Runtime::new(), "Weather?").await.unwrap();
    assert_eq!(reply.status, AgentStatus::Stopped(StopReason::Other("content_filter".into())));

    // A tool-use stop without any tool call cannot loop: the run ends.
    let model = ScriptedModel::new().reply(stop("nothing to call", StopReason::ToolUse));
    let reply = Agent::new(model, "m-1", tools()).ask(&Runtime::new(), "Weather?").await.unwrap();
    assert_eq!(reply.status, AgentStatus::Stopped(StopReason::ToolUse));
}

#[tokio::test]
async fn a_provider_error_fails_the_run_with_the_typed_error() {
    let model = ScriptedModel::new().reply(tool_calls(&[("c", json!({"location": "Rome"}))]));
    let runtime = Runtime::new();
    let err = Agent::new(model, "m-1", tools()).ask(&runtime, "Weather?").await.unwrap_err();
    // The error keeps the run and the transition that failed, and the step's own error.
    let AskError::Step { run_id, transition, source: AgentError::Llm(LlmError::Script { .. }) } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*transition, "llm_turn");
    assert_eq!(err.run_id(), Some(*run_id));
    assert!(matches!(err.agent_error(), Some(AgentError::Llm(_))));
    assert_eq!(runtime.store().load_run(*run_id).await.unwrap().status, RunStatus::Failed);
    assert!(err.to_string().starts_with(&format!("agent run {run_id} failed in `llm_turn`: ")), "{err}");
}

#[tokio::test]
async fn bad_tool_calls_reach_the_model_as_error_results() {
    let model = ScriptedModel::new()
        .reply(tool_calls(&[("c1", json!({"city": "Rome"}))]))
        .reply(stop("Sorry.", StopReason::EndTurn));
    let reply = Agent::new(model.clone(), "m-1", tools()).ask(&Runtime::new(), "Weather?").await.unwrap();
    assert_eq!(reply.text, "Sorry.");
    let sent = &model.requests()[1].messages[2];
    let result = sent.tool_results_iter().next().unwrap();
    assert!(result.is_error);
    assert_eq!(result.content, "invalid arguments for tool `get_weather`: missing field `location`");
}

#[test]
fn the_tool_batch_outcome_keeps_its_stored_form() {
    // Checkpoints store it as `[all_completed, errors]`; ones written before it had
    // field names read back the same.
    let state: loopstack_llm::AgentState = serde_json::from_value(json!({"tools_completed": [true, 2]})).unwrap();
    let done = state.tools_completed.unwrap();
    assert_eq!((done.all_completed, done.errors), (true, 2));
    assert_eq!(serde_json::to_value(&state).unwrap()["tools_completed"], json!([true, 2]));
}

#[test]
fn agent_names_are_validated_and_a_taken_name_is_refused_not_replaced() {
    use loopstack_core::RegistryError;
    let agent = || Agent::new(ScriptedModel::new(), "m", ToolRegistry::new());
    assert_eq!(agent().name(), "agent");
    assert_eq!(agent().named("billing").unwrap().name(), "billing");
    assert_eq!(agent().named("billing").unwrap().named("support").unwrap().name(), "support");
    for bad in ["", "bad name", "billing/eu", &"x".repeat(65)] {
        let err = agent().named(bad).unwrap_err();
        assert_eq!(err, RegistryError::InvalidWorkflowName(bad.to_owned()));
    }
    let runtime = Runtime::new().register(agent()).register(agent().named("billing").unwrap());
    assert_eq!(runtime.workflows(), ["agent", "billing"]);
    for taken in [agent(), agent().named("billing").unwrap()] {
        let err = runtime.clone().try_register(taken).unwrap_err();
        assert!(matches!(err, RegistryError::DuplicateWorkflow { .. }), "{err}");
    }
    // `register` says so by panicking with the same words (as `Models::with` does).
    let panic = std::panic::catch_unwind(|| Runtime::new().register(agent()).register(agent())).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("a workflow named `agent` is registered already"), "{message}");
}

/// A run stored by an older build, whose agent saved its prompt in a `setup` step of
/// its own, holds the prompt in its step-0 state and no message yet: its first turn
/// saves it, and sends it.
#[tokio::test]
async fn a_run_stored_with_its_prompt_in_the_state_saves_it_at_its_first_turn() {
    let model = ScriptedModel::new().text("Hello!");
    let agent = Agent::new(model.clone(), "m-1", tools());
    let runtime = Runtime::new();
    let (def, run_id) = (agent.definition(), RunId::new());
    let state = serde_json::value::to_raw_value(&json!({"prompt": "Hi"})).unwrap();
    runtime.store().create_run(NewRun::new(run_id, def.name(), def.hash(), state).queued()).await.unwrap();

    let reply = agent.resume(&runtime, run_id).await.unwrap();
    assert_eq!((reply.status, reply.text.as_str()), (AgentStatus::Completed, "Hello!"));
    assert_eq!(model.requests()[0].messages, [std::sync::Arc::new(Message::user("Hi"))]);
    let docs = runtime.store().documents(run_id).await.unwrap();
    let texts: Vec<(u64, String)> = docs.iter().map(|d| (d.step, d.read::<Message>().unwrap().text())).collect();
    assert_eq!(texts, [(1, "Hi".to_owned()), (1, "Hello!".to_owned())], "both saved by the first turn");
    let first = runtime.store().checkpoint(run_id, 1).await.unwrap();
    assert!(!first.state.get().contains("prompt"), "{}", first.state.get());
}
