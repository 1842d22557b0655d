//! A model fallback chain: which errors move a turn to the next model, what the saved
//! message and the events say about it, the error when every model fails, and a turn
//! run again starting from the first model.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use loopstack_core::{EventKind, RunStatus, Runtime, ToolRegistry};
use loopstack_llm::{Agent, AgentError, AskError, LlmError, Message, ScriptedModel};

mod common;

use common::weather::Weather;

fn tools() -> ToolRegistry {
    ToolRegistry::new().with(Weather::default()).unwrap()
}

/// A model that fails with `error` while `failing` is set (counting its calls), and
/// answers `text` after.
fn flaky(
    error: fn(&str) -> LlmError,
    failing: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
    text: &'static str,
) -> ScriptedModel {
    ScriptedModel::from_fn(move |request| {
        calls.fetch_add(1, Ordering::SeqCst);
        if failing.load(Ordering::SeqCst) {
            Err(error(&request.model))
        } else {
            Ok(loopstack_llm::ChatResponse::new(
                Message::assistant(text),
                loopstack_llm::StopReason::EndTurn,
                loopstack_llm::Usage::new(10, 2),
                request.model.clone(),
            ))
        }
    })
}

fn overloaded(model: &str) -> LlmError {
    LlmError::Overloaded { provider: "scripted", model: model.to_owned(), message: "overloaded".into() }
}

fn rate_limited(model: &str) -> LlmError {
    LlmError::RateLimited {
        provider: "scripted",
        model: model.to_owned(),
        retry_after: None,
        message: "slow down".into(),
    }
}

fn refused(model: &str) -> LlmError {
    LlmError::InvalidRequest { provider: "scripted", model: model.to_owned(), status: 400, message: "bad".into() }
}

struct Chain {
    agent: Agent,
    failing: [Arc<AtomicBool>; 2],
    calls: [Arc<AtomicUsize>; 2],
}

/// A primary (`big`) and a fallback (`small`, registered as `spare`), each failing with
/// its error until told otherwise.
fn chain(first: fn(&str) -> LlmError, second: fn(&str) -> LlmError) -> Chain {
    let failing = [Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false))];
    let calls = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
    let primary = flaky(first, failing[0].clone(), calls[0].clone(), "From the big model.");
    let spare = flaky(second, failing[1].clone(), calls[1].clone(), "From the small model.");
    let agent = Agent::new(primary, "big", tools()).fallback_named("spare", spare, "small");
    Chain { agent, failing, calls }
}

#[tokio::test]
async fn an_overloaded_model_falls_back_and_the_message_says_which_answered() {
    let chain = chain(overloaded, refused);
    let runtime = Runtime::new();
    let mut events = runtime.subscribe();
    let reply = chain.agent.ask(&runtime, "Weather?").await.unwrap();
    assert_eq!(reply.text, "From the small model.");
    // (Subscribed, the turn streams: a stream that fails is asked once more unstreamed
    // before the chain moves on, so the first model saw two requests.)
    assert_eq!(chain.calls[1].load(Ordering::SeqCst), 1);

    let docs = runtime.store().documents(reply.run_id).await.unwrap();
    let answer = docs.last().unwrap();
    assert_eq!(answer.metadata.get("model"), Some(serde_json::json!("small")));
    assert_eq!(answer.metadata.get("provider"), Some(serde_json::json!("scripted")));
    assert_eq!(
        answer.metadata.get("fallbacks"),
        Some(
            serde_json::json!([{"provider": "scripted", "model": "big", "error": "scripted (big): overloaded: overloaded"}])
        )
    );
    let mut fallbacks = Vec::new();
    while let Some(event) = events.try_recv() {
        if let EventKind::Custom { name, data } = &event.unwrap().kind
            && name == "model_fallback"
        {
            fallbacks.push((data["model"].clone(), data["next_provider"].clone(), data["next_model"].clone()));
        }
    }
    assert_eq!(fallbacks, [("big".into(), "spare".into(), "small".into())]);
}

#[tokio::test]
async fn a_refused_request_does_not_fall_back() {
    let chain = chain(refused, overloaded);
    let err = chain.agent.ask(&Runtime::new(), "Weather?").await.unwrap_err();
    let AskError::Step { source: AgentError::Llm(LlmError::InvalidRequest { model, .. }), .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(model, "big");
    assert_eq!(chain.calls[1].load(Ordering::SeqCst), 0, "the fallback was not asked");
}

#[tokio::test]
async fn when_every_model_fails_one_error_lists_each_failure() {
    let chain = chain(overloaded, rate_limited);
    chain.failing[1].store(true, Ordering::SeqCst);
    let runtime = Runtime::new();
    let err = chain.agent.ask(&runtime, "Weather?").await.unwrap_err();
    let AskError::Step { run_id, source: AgentError::AllModelsFailed { failures }, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(matches!(&failures[..], [LlmError::Overloaded { .. }, LlmError::RateLimited { .. }]), "{failures:?}");
    assert_eq!(
        err.to_string().split_once(": ").unwrap().1,
        "every model failed: scripted (big): overloaded: overloaded; scripted (small): rate limited: slow down"
    );
    assert_eq!(runtime.store().load_run(*run_id).await.unwrap().status, RunStatus::Failed);

    // Run again (as after a crash, or a retry), the turn starts from the first model.
    chain.failing[0].store(false, Ordering::SeqCst);
    chain.failing[1].store(false, Ordering::SeqCst);
    runtime.retry(&chain.agent, *run_id).await.unwrap();
    let docs = runtime.store().documents(*run_id).await.unwrap();
    assert_eq!(docs.last().unwrap().metadata.get("model"), Some(serde_json::json!("big")));
    assert_eq!(docs.last().unwrap().metadata.get("fallbacks"), None);
    assert_eq!((chain.calls[0].load(Ordering::SeqCst), chain.calls[1].load(Ordering::SeqCst)), (2, 1));
}

#[tokio::test]
async fn a_fallback_that_is_not_registered_is_an_error_before_any_model_is_asked() {
    let calls = Arc::new(AtomicUsize::new(0));
    let primary = flaky(overloaded, Arc::new(AtomicBool::new(false)), calls.clone(), "ok");
    let models = loopstack_llm::Models::new().with(primary);
    let options = loopstack_llm::GenerateOptions::new("scripted", "big").fallback("missing", "m");
    let agent = Agent::with_models(models, options, tools());
    let err = agent.ask(&Runtime::new(), "Weather?").await.unwrap_err();
    assert!(
        matches!(&err, AskError::Step { source: AgentError::UnknownProvider { provider, .. }, .. } if provider == "missing"),
        "{err:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// The summary of a context policy goes down the chain like a turn: the first model
/// is overloaded for it, the spare summarizes, and the run goes on compacted.
#[tokio::test]
async fn a_summary_falls_back_like_a_turn() {
    use loopstack_llm::ContextPolicy;
    use loopstack_llm::context::SUMMARY_PROMPT;
    let overloaded =
        |model: &str| LlmError::Overloaded { provider: "scripted", model: model.into(), message: "busy".into() };
    // The first model: a long tool call each turn (so the context fills), but no summaries.
    let turns = Arc::new(AtomicUsize::new(0));
    let first = ScriptedModel::from_fn(move |request| {
        if request.settings.system.as_deref() == Some(SUMMARY_PROMPT) {
            return Err(overloaded(&request.model));
        }
        let turn = turns.fetch_add(1, Ordering::SeqCst);
        let script = ScriptedModel::new();
        Ok(if turn < 6 {
            script.tool_call_response(
                "get_weather",
                serde_json::json!({"location": format!("{turn}{}", "x".repeat(400))}),
            )
        } else {
            script.text_response("Done.")
        })
    })
    .record_requests(true);
    let spare = ScriptedModel::from_fn(|_| Ok(ScriptedModel::new().text_response("the summary"))).record_requests(true);
    let agent = Agent::new(first.clone(), "big", tools())
        .max_turns(12)
        .context(ContextPolicy::summarize(600))
        .fallback_named("spare", spare.clone(), "small");
    let reply = agent.ask(&Runtime::new(), "Go").await.unwrap();
    assert_eq!(reply.text, "Done.", "{:?}", reply.status);
    let summaries = spare.requests();
    assert!(!summaries.is_empty(), "the spare was asked for the summary");
    assert!(summaries.iter().all(|r| r.settings.system.as_deref() == Some(SUMMARY_PROMPT) && r.model == "small"));
    let after = first.requests().into_iter().rev().find(|r| r.messages[0].content.len() > 1).expect("a compacted turn");
    assert!(after.messages[0].text().contains("the summary"), "{:?}", after.messages[0]);
}

/// Reasoning stays with the provider that wrote it: Anthropic thinks (signed) and
/// calls a tool, then is overloaded; the OpenAI model that answers instead is sent the
/// call and its result but not the thinking, which it could not read. The thinking is
/// still in the run's conversation, so a later Anthropic turn is sent it unchanged.
#[tokio::test]
async fn a_fallback_leaves_out_the_reasoning_of_another_provider() {
    use common::{Reply, Server};
    use loopstack_llm::{Anthropic, ContentBlock, OpenAi, Reasoning, RetryPolicy};
    use serde_json::json;

    let thinking = json!({"type": "thinking", "thinking": "Paris: call the tool.", "signature": "c2ln"});
    let claude = Server::start(vec![
        Reply::json(200, json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "stop_reason": "tool_use",
            "content": [thinking, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}],
            "usage": {"input_tokens": 10, "output_tokens": 20},
        })),
        Reply::json(529, json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
    ])
    .await;
    let gpt = Server::start(vec![Reply::json(200, json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Sunny in Paris."}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 5},
    }))])
    .await;
    let anthropic = Anthropic::new("key").base_url(claude.url()).retry_policy(RetryPolicy::disabled());
    let openai = OpenAi::new().api_key("key").base_url(gpt.url()).retry_policy(RetryPolicy::disabled());
    let agent = Agent::new(anthropic, "claude-test", tools()).fallback(openai, "gpt-test");

    let runtime = Runtime::new();
    let reply = agent.ask(&runtime, "Weather in Paris?").await.unwrap();
    assert_eq!(reply.text, "Sunny in Paris.");

    // OpenAI saw the call and its result, and no trace of the thinking.
    let sent = &gpt.requests()[0].body;
    let assistant = sent["messages"].as_array().unwrap().iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["tool_calls"][0]["id"], "toolu_1");
    assert!(!sent.to_string().contains("Paris: call the tool."), "{sent}");
    assert!(!sent.to_string().contains("c2ln"), "{sent}");

    // The conversation keeps the reasoning for the provider that wrote it.
    let docs = runtime.store().documents(reply.run_id).await.unwrap();
    let kept = docs.iter().filter_map(|d| d.read::<Message>().ok()).flat_map(|m| m.content).find_map(|b| match b {
        ContentBlock::Reasoning(r) => Some(r),
        _ => None,
    });
    assert_eq!(kept, Some(Reasoning::new("anthropic", "Paris: call the tool.", json!({"signature": "c2ln"}))));
}
