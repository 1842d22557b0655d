//! The agent for production, with the scripted model: run events, tool approval,
//! chat sessions and named conversations, typed answers, limits and loop guards,
//! and the statuses of answers that are not answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loopstack_core::{
    EventKind, RunContext, RunEvents, RunOutcome, RunStatus, Runtime, Tool, ToolContext, ToolError, ToolOptions,
    ToolOutput, ToolRegistry,
};
use loopstack_llm::{
    Agent, AgentError, AgentReply, AgentStatus, AskError, ChatRequest, ChatResponse, ContentBlock, GenerateOptions,
    Limit, Limits, LlmGenerateText, Message, Models, PendingCall, Price, Prices, Role, ScriptedModel, StopReason,
    ToolDecision, ToolDecisions, ToolUse, Usage,
};
use serde_json::{Value, json};

mod common;

use common::weather::Weather;

/// Refunds an order: needs a person's approval.
#[derive(Default, Clone)]
struct Refund {
    calls: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Tool for Refund {
    fn name(&self) -> &str {
        "issue_refund"
    }
    fn description(&self) -> &str {
        "Refunds an order."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]})
    }
    fn options(&self) -> ToolOptions {
        ToolOptions::new().approve(true)
    }
    async fn call(&self, args: Value, _cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutput::text(format!("refunded {}", args["order"].as_str().unwrap_or("?"))))
    }
}

fn calls(calls: &[(&str, &str, Value)]) -> ChatResponse {
    let content =
        calls.iter().map(|(id, name, input)| ContentBlock::ToolUse(ToolUse::new(*id, *name, input.clone()))).collect();
    ChatResponse::new(Message { role: Role::Assistant, content }, StopReason::ToolUse, Usage::new(50, 10), "m-1")
}

fn text(text: &str) -> ChatResponse {
    ChatResponse::new(Message::assistant(text), StopReason::EndTurn, Usage::new(70, 20), "m-1")
}

fn drain(events: &mut RunEvents) -> Vec<EventKind> {
    std::iter::from_fn(|| events.try_recv()).map(|e| e.expect("no lag").kind.clone()).collect()
}

// ---------------------------------------------------------------- run events

#[tokio::test]
async fn events_stream_the_answer_word_by_word_and_report_tool_calls_and_usage() {
    let model = ScriptedModel::new()
        .reply(calls(&[("c1", "get_weather", json!({"location": "Oslo"})), ("c2", "get_weather", json!({"city": 1}))]))
        .reply(text("Sunny in Oslo today."));
    let agent = Agent::new(model, "m-1", ToolRegistry::new().with(Weather::default()).unwrap());
    let runtime = Runtime::new();
    let mut events = runtime.subscribe();
    let reply = agent.ask(&runtime, "Weather in Oslo?").await.unwrap();
    assert_eq!(reply.text, "Sunny in Oslo today.");
    let kinds = drain(&mut events);

    let deltas: Vec<&str> = kinds
        .iter()
        .filter_map(|k| if let EventKind::TextDelta { text } = k { Some(text.as_str()) } else { None })
        .collect();
    assert_eq!(deltas, ["Sunny ", "in ", "Oslo ", "today."]);
    assert_eq!(deltas.concat(), reply.text, "the deltas make up the answer");

    let started: Vec<&str> = kinds
        .iter()
        .filter_map(|k| if let EventKind::ToolCallStarted { call_id, .. } = k { Some(call_id.as_str()) } else { None })
        .collect();
    assert_eq!(started, ["c1", "c2"]);
    // The calls' arguments streamed as the model wrote them, before the calls ran.
    let mut forming: Vec<(String, String, String)> = Vec::new();
    for kind in &kinds {
        if let EventKind::ToolCallDelta { call_id, name, partial_json } = kind {
            match forming.iter_mut().find(|(id, ..)| id == call_id) {
                Some((_, _, json)) => json.push_str(partial_json),
                None => forming.push((call_id.clone(), name.clone(), partial_json.clone())),
            }
        }
    }
    let parsed: Vec<(&str, &str, Value)> = forming
        .iter()
        .map(|(id, name, json)| (id.as_str(), name.as_str(), serde_json::from_str(json).unwrap()))
        .collect();
    assert_eq!(parsed, [("c1", "get_weather", json!({"location": "Oslo"})), ("c2", "get_weather", json!({"city": 1}))]);
    let first_forming = kinds.iter().position(|k| matches!(k, EventKind::ToolCallDelta { .. })).unwrap();
    let first_started = kinds.iter().position(|k| matches!(k, EventKind::ToolCallStarted { .. })).unwrap();
    assert!(first_forming < first_started);
    let finished: Vec<(&str, Option<&str>)> = kinds
        .iter()
        .filter_map(|k| match k {
            EventKind::ToolCallFinished { call_id, error, .. } => Some((call_id.as_str(), error.as_deref())),
            _ => None,
        })
        .collect();
    assert_eq!(finished[0], ("c1", None));
    assert_eq!(finished[1].0, "c2");
    assert!(finished[1].1.unwrap().contains("missing field `location`"), "{finished:?}");

    let usage: Vec<(u64, u64)> = kinds
        .iter()
        .filter_map(|k| match k {
            EventKind::Usage { input_tokens, output_tokens, provider, .. } if provider == "scripted" => {
                Some((*input_tokens, *output_tokens))
            }
            _ => None,
        })
        .collect();
    assert_eq!(usage, [(50, 10), (70, 20)]);
    assert_eq!(kinds.last(), Some(&EventKind::Finished { status: RunStatus::Completed, error: None }));

    // The model's text arrives inside its transition, before that transition commits.
    let pos = |f: &dyn Fn(&EventKind) -> bool| kinds.iter().position(f).unwrap();
    let first_delta = pos(&|k| matches!(k, EventKind::TextDelta { .. }));
    let last_commit = kinds
        .iter()
        .rposition(|k| matches!(k, EventKind::TransitionCommitted { transition, .. } if transition == "llm_turn"))
        .unwrap();
    assert!(first_delta < last_commit);
}

#[tokio::test]
async fn without_a_subscriber_the_model_is_not_streamed() {
    /// Fails if asked to stream.
    struct NoStream(ScriptedModel);
    #[async_trait::async_trait]
    impl loopstack_llm::ChatModel for NoStream {
        fn provider(&self) -> &'static str {
            "scripted"
        }
        async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, loopstack_llm::LlmError> {
            self.0.chat(request).await
        }
        fn stream<'a>(
            &'a self,
            _: &'a ChatRequest,
        ) -> futures::stream::BoxStream<'a, Result<loopstack_llm::StreamEvent, loopstack_llm::LlmError>> {
            panic!("streamed without a subscriber")
        }
    }
    let agent = Agent::new(NoStream(ScriptedModel::new().reply(text("Hi."))), "m-1", ToolRegistry::new());
    assert_eq!(agent.ask(&Runtime::new(), "Hi").await.unwrap().text, "Hi.");
}

// ---------------------------------------------------------------- approval

fn refund_agent(model: ScriptedModel, refund: &Refund, weather: &Weather) -> Agent {
    let tools = ToolRegistry::new().with(refund.clone()).unwrap().with(weather.clone()).unwrap();
    Agent::new(model, "m-1", tools)
}

#[tokio::test]
async fn a_call_that_needs_approval_waits_and_a_denial_is_what_the_model_reads() {
    let model = ScriptedModel::new()
        .reply(calls(&[
            ("r1", "issue_refund", json!({"order": "A-1"})),
            ("w1", "get_weather", json!({"location": "Oslo"})),
        ]))
        .reply(text("I could not refund it."));
    let (refund, weather) = (Refund::default(), Weather::default());
    let agent = refund_agent(model.clone(), &refund, &weather);
    let runtime = Runtime::new();

    let reply = agent.ask(&runtime, "Refund A-1").await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = &reply.status else { panic!("{:?}", reply.status) };
    assert_eq!(
        calls,
        &[PendingCall {
            call_id: "r1".into(),
            name: "issue_refund".into(),
            arguments: json!({"order": "A-1"}),
            client: false,
            input: None
        }]
    );
    assert_eq!(runtime.store().load_run(reply.run_id).await.unwrap().status, RunStatus::Waiting);
    assert_eq!(weather.calls.load(Ordering::SeqCst), 0, "nothing of the batch runs before the decision");

    // A decision on a call that does not wait is refused and changes nothing.
    let err =
        agent.decide(&runtime, reply.run_id, ToolDecisions::new([ToolDecision::approve("nope")])).await.unwrap_err();
    assert!(err.to_string().contains("call `nope` does not wait for a decision; the calls that wait: r1"), "{err}");
    assert_eq!(runtime.store().load_run(reply.run_id).await.unwrap().status, RunStatus::Waiting);

    let decisions = ToolDecisions::new([ToolDecision::deny("r1", "the order is older than 90 days")]);
    let reply = agent.decide(&runtime, reply.run_id, decisions).await.unwrap();
    assert_eq!((reply.status.clone(), reply.text.as_str()), (AgentStatus::Completed, "I could not refund it."));
    assert_eq!(refund.calls.load(Ordering::SeqCst), 0);
    assert_eq!(weather.calls.load(Ordering::SeqCst), 1, "the call that needs no approval ran");
    assert_eq!(reply.tool_calls, 1);
    let results: Vec<_> = model.requests()[1].messages[2].tool_results_iter().cloned().collect();
    assert_eq!(results[0].tool_use_id, "r1");
    assert!(results[0].is_error);
    assert_eq!(results[0].content, "denied by the user: the order is older than 90 days");
    assert_eq!(results[1].content, "Mostly sunny in Oslo, 14C.");
}

#[tokio::test]
async fn decisions_on_some_calls_keep_the_run_waiting_for_the_rest_and_approved_calls_run() {
    let model = ScriptedModel::new()
        .reply(calls(&[
            ("r1", "issue_refund", json!({"order": "A-1"})),
            ("r2", "issue_refund", json!({"order": "B-2"})),
        ]))
        .reply(text("Both refunded."));
    let (refund, weather) = (Refund::default(), Weather::default());
    let agent = refund_agent(model.clone(), &refund, &weather);
    let runtime = Runtime::new();
    let run_id = agent.ask(&runtime, "Refund both").await.unwrap().run_id;
    // What a person is shown, read from the store: each call's id, tool and arguments.
    let pending = agent.pending(&runtime, run_id).await.unwrap();
    let shown: Vec<_> = pending.iter().map(|c| (c.call_id.as_str(), c.name.as_str(), c.arguments.clone())).collect();
    assert_eq!(
        shown,
        [("r1", "issue_refund", json!({"order": "A-1"})), ("r2", "issue_refund", json!({"order": "B-2"}))]
    );

    let reply = agent.decide(&runtime, run_id, ToolDecisions::new([ToolDecision::approve("r2")])).await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = &reply.status else { panic!("{:?}", reply.status) };
    assert_eq!(calls.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(), ["r1"]);
    assert_eq!(&agent.pending(&runtime, run_id).await.unwrap(), calls);
    assert_eq!(refund.calls.load(Ordering::SeqCst), 0);
    // Another agent's run is not read as this agent's.
    let other = Agent::new(ScriptedModel::new(), "m", ToolRegistry::new()).named("other").unwrap();
    let err = other.pending(&runtime, run_id).await.unwrap_err();
    assert!(err.to_string().contains("workflow `agent`"), "{err}");

    let reply = agent.decide(&runtime, run_id, ToolDecisions::approve_all(calls)).await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    assert!(agent.pending(&runtime, run_id).await.unwrap().is_empty());
    assert_eq!(refund.calls.load(Ordering::SeqCst), 2);
    let results: Vec<String> = model.requests()[1].messages[2].tool_results_iter().map(|r| r.content.clone()).collect();
    assert_eq!(results, ["refunded A-1", "refunded B-2"]);
}

#[tokio::test]
async fn approval_can_be_required_per_registration() {
    let model = ScriptedModel::new().reply(calls(&[("w1", "get_weather", json!({"location": "Oslo"}))]));
    let weather = Weather::default();
    let mut tools = ToolRegistry::new().with(weather.clone()).unwrap();
    tools.require_approval("get_weather").unwrap();
    assert!(tools.require_approval("missing").is_err());
    let reply = Agent::new(model, "m-1", tools).ask(&Runtime::new(), "Weather?").await.unwrap();
    assert!(matches!(reply.status, AgentStatus::AwaitingApproval { .. }), "{:?}", reply.status);
    assert_eq!(weather.calls.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------- conversations

#[tokio::test]
async fn a_chat_run_waits_for_the_user_after_each_answer() {
    let model = ScriptedModel::new().reply(text("Hello Ada.")).reply(text("You said your name is Ada."));
    let agent = Agent::new(model.clone(), "m-1", ToolRegistry::new()).chat(true);
    let runtime = Runtime::new();
    let first = agent.ask(&runtime, "I am Ada.").await.unwrap();
    assert_eq!((first.status.clone(), first.text.as_str()), (AgentStatus::AwaitingUser, "Hello Ada."));
    let second = agent.say(&runtime, first.run_id, "What is my name?").await.unwrap();
    assert_eq!(
        (second.status.clone(), second.text.as_str()),
        (AgentStatus::AwaitingUser, "You said your name is Ada.")
    );
    assert_eq!(second.turns, 2);
    let sent: Vec<String> = model.requests()[1].messages.iter().map(|m| m.text()).collect();
    assert_eq!(sent, ["I am Ada.", "Hello Ada.", "What is my name?"]);

    let closed = agent.close_chat(&runtime, first.run_id).await.unwrap();
    assert_eq!(closed.status, AgentStatus::Completed);
    assert_eq!(runtime.store().load_run(first.run_id).await.unwrap().status, RunStatus::Completed);
}

/// A workflow with two conversations: a writer and a critic, each with its own.
struct WriterAndCritic {
    llm: LlmGenerateText,
}

#[loopstack_macros::workflow(crate = ::loopstack_core, input = String)]
impl WriterAndCritic {
    #[transition(to = Drafted)]
    async fn draft(&self, topic: &mut String, cx: &mut RunContext) -> Result<(), AgentError> {
        let writer = GenerateOptions::new("scripted", "m-1").conversation("writer");
        loopstack_llm::save_message(
            cx,
            &Message::user(format!("Write about {topic}")),
            Some("writer"),
            Default::default(),
        )?;
        let draft = self.llm.call(cx, &writer).await?.message.text();
        let critic = GenerateOptions::new("scripted", "m-1").conversation("critic");
        loopstack_llm::save_message(
            cx,
            &Message::user(format!("Critique: {draft}")),
            Some("critic"),
            Default::default(),
        )?;
        self.llm.call(cx, &critic).await?;
        Ok(())
    }

    #[transition(from = Drafted, to = End)]
    async fn done(&self, _topic: &mut String, _cx: &mut RunContext) -> Result<(), AgentError> {
        Ok(())
    }
}

#[tokio::test]
async fn two_named_conversations_in_one_run_stay_apart() {
    let model = ScriptedModel::new().reply(text("Rust is fast.")).reply(text("Say why."));
    let wf = WriterAndCritic { llm: LlmGenerateText::new(Models::new().with(model.clone()), ToolRegistry::new()) };
    let runtime = Runtime::new();
    let report = runtime.start(&wf, "Rust".to_owned()).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Completed);
    let requests = model.requests();
    let texts = |i: usize| requests[i].messages.iter().map(|m| m.text()).collect::<Vec<_>>();
    assert_eq!(texts(0), ["Write about Rust"]);
    assert_eq!(texts(1), ["Critique: Rust is fast."], "the critic does not see the writer's conversation");
    let docs = runtime.store().documents(report.run_id).await.unwrap();
    assert!(docs.iter().all(|d| d.has_tag("conversation")));
    assert_eq!(docs.iter().filter(|d| d.has_tag("conversation:writer")).count(), 2);
    assert_eq!(docs.iter().filter(|d| d.has_tag("conversation:critic")).count(), 2);
}

#[test]
fn a_second_model_of_one_provider_is_refused_instead_of_replacing_the_first() {
    let mut models = Models::new().with(ScriptedModel::new());
    let err = models.insert("scripted", Arc::new(ScriptedModel::new())).unwrap_err();
    assert!(matches!(err, AgentError::DuplicateModel { ref name } if name == "scripted"), "{err}");
    models.insert("scripted-2", Arc::new(ScriptedModel::new())).unwrap();
    assert!(models.get("scripted-2").is_ok());
    let panic = std::panic::catch_unwind(|| Models::new().with(ScriptedModel::new()).with(ScriptedModel::new()));
    let message = loopstack_core::panic_message(panic.unwrap_err().as_ref());
    assert!(message.contains("a model is already registered as `scripted`"), "{message}");
}

// ---------------------------------------------------------------- typed answers

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Forecast {
    city: String,
    celsius: i32,
}

#[tokio::test]
async fn a_typed_answer_through_the_respond_tool_is_checked_and_retried_with_the_error() {
    let model = ScriptedModel::new()
        .reply(calls(&[("a1", "respond", json!({"city": "Oslo"}))]))
        .reply(text("It is 14 degrees in Oslo."))
        .reply(calls(&[("a2", "respond", json!({"city": "Oslo", "celsius": 14}))]));
    let agent = Agent::new(model.clone(), "m-1", ToolRegistry::new()).answer::<Forecast>();
    let runtime = Runtime::new();
    let answer = agent.ask(&runtime, "Forecast for Oslo?").await.unwrap();
    assert_eq!(answer.value, Forecast { city: "Oslo".into(), celsius: 14 });
    assert_eq!(answer.reply.turns, 3);

    let requests = model.requests();
    // The model is offered `respond` with the type's schema.
    let respond = requests[0].tools.iter().find(|t| t.name == "respond").unwrap();
    assert_eq!(respond.input_schema["required"], json!(["city", "celsius"]));
    // The bad call gets its error as the call's result ...
    let result = requests[1].messages[2].tool_results_iter().next().unwrap().clone();
    assert!(result.is_error);
    assert!(result.content.contains("missing field `celsius`"), "{}", result.content);
    // ... and a plain text answer is told to use `respond`.
    let feedback = requests[2].messages.last().unwrap().text();
    assert!(feedback.contains("call") && feedback.contains("`respond`"), "{feedback}");
    // The accepted call is answered too: the conversation ends valid.
    let docs = runtime.store().documents(answer.reply.run_id).await.unwrap();
    let last: Message = docs.last().unwrap().read().unwrap();
    assert_eq!(last.tool_results_iter().next().unwrap().tool_use_id, "a2");
}

#[tokio::test]
async fn an_answer_that_never_fits_ends_with_a_typed_error_after_the_retries() {
    let model = ScriptedModel::from_fn(|req| {
        Ok(calls(&[(&format!("a{}", req.messages.len()), "respond", json!({"city": 3}))]))
    });
    let agent = Agent::new(model.clone(), "m-1", ToolRegistry::new()).answer::<Forecast>().retries(1);
    let err = agent.ask(&Runtime::new(), "Forecast?").await.unwrap_err();
    let AskError::InvalidAnswer { retries, error, .. } = &err else { panic!("{err:?}") };
    assert_eq!(*retries, 1);
    assert!(error.contains("invalid type"), "{error}");
    assert_eq!(model.calls(), 2, "one answer and one retry");
}

#[tokio::test]
async fn with_structured_output_the_reply_text_is_the_answer_and_non_objects_are_wrapped() {
    let model = ScriptedModel::new()
        .structured_output(true)
        .reply(text("not json"))
        .reply(text("```json\n{\"answer\": [3, 1, 2]}\n```"));
    let agent = Agent::new(model.clone(), "m-1", ToolRegistry::new()).answer::<Vec<u32>>();
    let answer = agent.ask(&Runtime::new(), "Three numbers?").await.unwrap();
    assert_eq!(answer.value, vec![3, 1, 2]);
    let requests = model.requests();
    assert!(requests[0].tools.is_empty(), "no respond tool when the provider has structured output");
    let schema = requests[0].response_schema.as_ref().expect("the schema is sent");
    assert_eq!(schema.schema["required"], json!(["answer"]));
    assert!(requests[1].messages.last().unwrap().text().contains("the answer is not JSON"));
}

// ---------------------------------------------------------------- limits

#[tokio::test]
async fn token_cost_and_tool_call_budgets_end_the_run_with_their_status() {
    let looping = || {
        ScriptedModel::from_fn(|req| {
            let n = req.messages.len();
            Ok(calls(&[(&format!("c{n}"), "get_weather", json!({"location": format!("City {n}")}))]))
        })
    };
    let tools = || ToolRegistry::new().with(Weather::default()).unwrap();

    let runtime = Runtime::new();
    let reply = Agent::new(looping(), "m-1", tools())
        .limits(Limits::new().max_total_tokens(100))
        .ask(&runtime, "Go")
        .await
        .unwrap();
    assert_eq!(reply.status, AgentStatus::LimitReached(Limit::TotalTokens { max: 100, used: 120 }));
    assert_eq!(reply.turns, 2);
    // Each turn's usage is kept with its message.
    let docs = runtime.store().documents(reply.run_id).await.unwrap();
    assert_eq!(loopstack_llm::turn_usage(&docs), vec![Usage::new(50, 10); 2]);

    let prices = Prices::new().model("m-1", Price::per_million(1_000.0, 10_000.0));
    let reply = Agent::new(looping(), "m-1", tools())
        .prices(prices)
        .limits(Limits::new().max_cost(0.3))
        .ask(&Runtime::new(), "Go")
        .await
        .unwrap();
    // Each turn: 50 input tokens at 1,000 and 10 output at 10,000 per million = 0.15.
    let AgentStatus::LimitReached(Limit::Cost { max, spent }) = reply.status else { panic!("{:?}", reply.status) };
    assert_eq!(max, 0.3);
    assert!((spent - 0.3).abs() < 1e-9 && (reply.cost - 0.3).abs() < 1e-9, "{spent}");
    assert_eq!(reply.usage, Usage::new(100, 20));
    // The next turn is counted at what the last one cost: with 0.25 to spend, a second
    // turn (0.30 in all) would pass the budget, so the run stops after the first.
    let reply = Agent::new(looping(), "m-1", tools())
        .prices(Prices::new().model("m-1", Price::per_million(1_000.0, 10_000.0)))
        .limits(Limits::new().max_cost(0.25))
        .ask(&Runtime::new(), "Go")
        .await
        .unwrap();
    let AgentStatus::LimitReached(Limit::Cost { spent, .. }) = reply.status else { panic!("{:?}", reply.status) };
    assert!((spent - 0.15).abs() < 1e-9 && reply.turns == 1, "{spent}, {} turns", reply.turns);

    let runtime = Runtime::new();
    let reply = Agent::new(looping(), "m-1", tools())
        .limits(Limits::new().max_tool_calls(2))
        .ask(&runtime, "Go")
        .await
        .unwrap();
    assert_eq!(reply.status, AgentStatus::LimitReached(Limit::ToolCalls { max: 2, used: 2, asked: 1 }));
    // Stopped before the call that would pass the budget: it is the conversation's
    // last message, unanswered, for a retry with a larger budget to run.
    let record = runtime.store().load_run(reply.run_id).await.unwrap();
    let reason = "the run reached the budget of 2 tool calls (2 run, 1 more asked for)";
    assert_eq!((record.status, record.error.as_deref()), (RunStatus::Stopped, Some(reason)));
    let docs = runtime.store().documents(reply.run_id).await.unwrap();
    let last: Message = docs.last().unwrap().read().unwrap();
    assert_eq!(last.tool_uses().count(), 1);
}

#[tokio::test]
async fn a_model_that_repeats_the_same_call_is_stopped_with_a_clear_status() {
    let model = ScriptedModel::from_fn(|req| {
        Ok(calls(&[(&format!("c{}", req.messages.len()), "get_weather", json!({"location": "Oslo"}))]))
    });
    let weather = Weather::default();
    let agent = Agent::new(model, "m-1", ToolRegistry::new().with(weather.clone()).unwrap())
        .limits(Limits::new().max_repeats(2).max_turns(50));
    let reply = agent.ask(&Runtime::new(), "Weather?").await.unwrap();
    assert_eq!(reply.status, AgentStatus::RepeatedToolCalls { tools: vec!["get_weather".into()], times: 4 });
    assert_eq!(weather.calls.load(Ordering::SeqCst), 3, "asked once and repeated twice; the fourth ask is stopped");
}

// ---------------------------------------------------------------- answers that are not answers

#[tokio::test]
async fn an_empty_answer_and_an_unparsed_tool_call_have_statuses_of_their_own() {
    let reply = |r: ChatResponse| async move {
        let agent = Agent::new(ScriptedModel::new().reply(r), "m-1", ToolRegistry::new());
        agent.ask(&Runtime::new(), "Weather?").await.unwrap()
    };
    let empty: AgentReply = reply(text("  ")).await;
    assert_eq!(empty.status, AgentStatus::EmptyAnswer);
    let unparsed = reply(text(r#"{"name": "get_weather", "arguments": {"location": "Oslo"}}"#)).await;
    assert_eq!(unparsed.status, AgentStatus::UnparsedToolCall);
    let doubled =
        reply(text("```json\n{{\"name\": \"get_weather\", \"arguments\": {{\"location\": \"Oslo\"}}}}\n```")).await;
    assert_eq!(doubled.status, AgentStatus::UnparsedToolCall);
    assert!(!unparsed.status.is_completed());
}

#[tokio::test]
async fn two_decisions_on_one_call_are_refused_and_change_nothing() {
    let model = ScriptedModel::new().reply(calls(&[("r1", "issue_refund", json!({"order": "A-1"}))])).reply(text("ok"));
    let (refund, weather) = (Refund::default(), Weather::default());
    let agent = refund_agent(model, &refund, &weather);
    let runtime = Runtime::new();
    let run_id = agent.ask(&runtime, "Refund").await.unwrap().run_id;
    let both = ToolDecisions::new([ToolDecision::approve("r1"), ToolDecision::deny("r1", "no")]);
    let err = agent.decide(&runtime, run_id, both).await.unwrap_err();
    assert!(err.to_string().contains("call `r1` has more than one decision"), "{err}");
    let reply = agent.decide(&runtime, run_id, ToolDecisions::new([ToolDecision::approve("r1")])).await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    assert_eq!(refund.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_chat_answer_cut_at_the_token_limit_waits_for_the_user() {
    let cut = ChatResponse::new(Message::assistant("It is a long"), StopReason::MaxTokens, Usage::new(1, 1), "m-1");
    let model = ScriptedModel::new().reply(cut).reply(text("Shorter: sunny."));
    let agent = Agent::new(model, "m-1", ToolRegistry::new()).chat(true);
    let runtime = Runtime::new();
    let first = agent.ask(&runtime, "Tell me everything").await.unwrap();
    assert_eq!((first.status.clone(), first.text.as_str()), (AgentStatus::AwaitingUser, "It is a long"));
    // The reply says the answer was cut, though the run waits as after any answer.
    assert_eq!(first.answer_status, Some(AgentStatus::MaxTokens));
    let second = agent.say(&runtime, first.run_id, "Shorter please").await.unwrap();
    assert_eq!((second.text.as_str(), second.answer_status), ("Shorter: sunny.", None));
}

#[tokio::test]
async fn a_chat_answer_that_is_empty_or_a_call_written_as_text_says_so_while_it_waits() {
    let call = r#"{"name": "get_weather", "arguments": {"location": "Oslo"}}"#;
    let model = ScriptedModel::new().reply(text("  ")).reply(text(call)).reply(text("Sunny."));
    let agent = Agent::new(model, "m-1", ToolRegistry::new()).chat(true);
    let runtime = Runtime::new();
    let first = agent.ask(&runtime, "Weather?").await.unwrap();
    assert_eq!(
        (first.status.clone(), first.answer_status.clone()),
        (AgentStatus::AwaitingUser, Some(AgentStatus::EmptyAnswer))
    );
    let second = agent.say(&runtime, first.run_id, "Again?").await.unwrap();
    assert_eq!(second.answer_status, Some(AgentStatus::UnparsedToolCall));
    let third = agent.say(&runtime, first.run_id, "In words?").await.unwrap();
    assert_eq!((third.status, third.answer_status, third.text.as_str()), (AgentStatus::AwaitingUser, None, "Sunny."));
}

/// Streams a piece of text, then breaks with an overloaded error; answers whole.
struct BreaksMidStream;

#[async_trait::async_trait]
impl loopstack_llm::ChatModel for BreaksMidStream {
    fn provider(&self) -> &'static str {
        "scripted"
    }
    async fn chat(&self, _: &ChatRequest) -> Result<ChatResponse, loopstack_llm::LlmError> {
        Ok(text("Whole answer."))
    }
    fn stream<'a>(
        &'a self,
        _: &'a ChatRequest,
    ) -> futures::stream::BoxStream<'a, Result<loopstack_llm::StreamEvent, loopstack_llm::LlmError>> {
        use futures::StreamExt as _;
        futures::stream::iter([
            Ok(loopstack_llm::StreamEvent::TextDelta { index: 0, text: "Whole ".into() }),
            Err(loopstack_llm::LlmError::Overloaded {
                provider: "scripted",
                model: "m-1".into(),
                message: "busy".into(),
            }),
        ])
        .boxed()
    }
}

#[tokio::test]
async fn a_stream_that_breaks_with_a_retryable_error_is_asked_again_without_streaming() {
    let agent = Agent::new(BreaksMidStream, "m-1", ToolRegistry::new());
    let runtime = Runtime::new();
    let mut events = runtime.subscribe();
    let reply = agent.ask(&runtime, "Hi").await.unwrap();
    assert_eq!(reply.text, "Whole answer.");
    let kinds = drain(&mut events);
    assert!(
        kinds.iter().any(|k| matches!(k, EventKind::Custom { name, .. } if name == "stream_restarted")),
        "{kinds:?}"
    );
}
