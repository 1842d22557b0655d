//! Context management: long random conversations (hundreds of turns, parallel calls,
//! errors) compacted by dropping or summarizing the oldest turns; every request sent
//! keeps each tool call with its result, the system prompt and the first user
//! message, and the stored conversation keeps every message.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use loopstack_core::{Runtime, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, WorkflowExt};
use loopstack_llm::context::{SUMMARY_PROMPT, check_pairing};
use loopstack_llm::{
    Agent, AgentPlace, AgentState, AgentStatus, ChatResponse, ContentBlock, ContextPolicy, Limits, Message, Role,
    ScriptedModel, StopReason, ToolUse, Usage,
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Echoes `n` characters, or fails when `n` is a multiple of 7.
struct Echo;

#[async_trait::async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Echoes."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"n": {"type": "integer"}, "pad": {"type": "string"}}})
    }
    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let n = args["n"].as_u64().unwrap_or(0);
        if n.is_multiple_of(7) {
            return Err(ToolError::new(format!("no echo for {n}")));
        }
        Ok(ToolOutput::text("r".repeat((n % 400) as usize)))
    }
}

/// splitmix64: a number from `seed` and `n`.
fn mix(seed: u64, n: u64) -> u64 {
    let mut z = seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What the model saw: every problem found in a request, and each request's length.
#[derive(Default)]
struct Seen {
    problems: Vec<String>,
    lengths: Vec<usize>,
}

/// A model that makes one to three calls a turn, with arguments of random size, for
/// `turns` turns, then answers; summary requests get a numbered summary.
fn model(seed: u64, turns: usize, seen: Arc<Mutex<Seen>>) -> ScriptedModel {
    let counter = Arc::new(AtomicUsize::new(0));
    let summaries = Arc::new(AtomicUsize::new(0));
    ScriptedModel::from_fn(move |request| {
        let usage = Usage::new(10, 5);
        if request.settings.system.as_deref() == Some(SUMMARY_PROMPT) {
            let n = summaries.fetch_add(1, Ordering::SeqCst);
            return Ok(ChatResponse::new(Message::assistant(format!("summary {n}")), StopReason::EndTurn, usage, "m"));
        }
        let mut seen = seen.lock().unwrap();
        if let Err(problem) = check_pairing(&request.messages) {
            seen.problems.push(problem);
        }
        if request.settings.system.as_deref() != Some("Be brief.") {
            seen.problems.push("the system prompt was not sent".into());
        }
        match request.messages.first().map(|m| &m.content[0]) {
            Some(ContentBlock::Text { text }) if text == "Go" => {}
            other => seen.problems.push(format!("the first message is not the user's: {other:?}")),
        }
        seen.lengths.push(request.messages.len());
        let turn = counter.fetch_add(1, Ordering::SeqCst);
        if turn >= turns {
            return Ok(ChatResponse::new(Message::assistant("Done."), StopReason::EndTurn, usage, "m"));
        }
        let r = mix(seed, turn as u64);
        let mut content = Vec::new();
        if r.is_multiple_of(3) {
            content.push(ContentBlock::text("Working."));
        }
        for j in 0..1 + r % 3 {
            let n = mix(seed, (turn as u64) << 8 | j);
            let pad = "p".repeat((n % 200) as usize);
            content.push(ContentBlock::ToolUse(ToolUse::new(
                format!("t{turn}_{j}"),
                "echo",
                json!({"n": n % 1000, "pad": pad}),
            )));
        }
        Ok(ChatResponse::new(Message { role: Role::Assistant, content }, StopReason::ToolUse, usage, "m"))
    })
}

fn agent(model: ScriptedModel, turns: usize, policy: ContextPolicy) -> Agent {
    Agent::new(model, "m", ToolRegistry::new().with(Echo).unwrap())
        .system("Be brief.")
        .limits(Limits::new().max_turns(u32::try_from(turns).unwrap() + 2).max_repeats(u32::MAX - 2))
        .context(policy)
}

/// One `compact` step, read back from the run's checkpoints: the estimated input of
/// the next turn before and after it, where its window starts and how many messages
/// the conversation had then.
#[derive(Debug)]
struct Compaction {
    before: u64,
    after: u64,
    from: usize,
    messages: usize,
}

async fn run(seed: u64, turns: usize, policy: ContextPolicy) -> (Seen, usize, Vec<Compaction>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let runtime = Runtime::new();
    let reply = agent(model(seed, turns, seen.clone()), turns, policy).ask(&runtime, "Go").await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    let store = runtime.store();
    let docs = store.documents(reply.run_id).await.unwrap();
    // Compaction is a step of the run's history like any other.
    let history = store.history(reply.run_id).await.unwrap();
    let mut compactions = Vec::new();
    for step in history.iter().filter(|step| step.transition == "compact").map(|step| step.step) {
        let state_at = async |step| {
            let checkpoint = store.checkpoint(reply.run_id, step).await.unwrap();
            serde_json::from_str::<AgentState>(checkpoint.state.get()).unwrap()
        };
        let (before, after) = (state_at(step - 1).await, state_at(step).await);
        compactions.push(Compaction {
            before: before.input_estimate,
            after: after.input_estimate,
            from: after.context.map_or(0, |window| window.from),
            messages: store.documents_at(reply.run_id, step).await.unwrap().len(),
        });
    }
    let seen = Arc::try_unwrap(seen).ok().unwrap().into_inner().unwrap();
    (seen, docs.len(), compactions)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_request_keeps_calls_with_their_results(
        seed in any::<u64>(),
        turns in 100usize..300,
        max in 400u64..4_000,
        summarize in any::<bool>(),
    ) {
        let policy = if summarize { ContextPolicy::summarize(max) } else { ContextPolicy::drop_oldest(max) };
        let target = max / 2;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (seen, documents, compactions) = rt.block_on(run(seed, turns, policy));
        prop_assert!(seen.problems.is_empty(), "{:?}", &seen.problems[..seen.problems.len().min(5)]);
        // The stored conversation keeps every message: the prompt, a call and its
        // results for each turn, and the answer.
        prop_assert_eq!(documents, 2 * turns + 2);
        prop_assert!(!compactions.is_empty());
        for c in &compactions {
            prop_assert!(c.before > max, "compacted under the threshold {max}: {c:?}");
            // Compaction brings the estimate under the threshold, down to the target
            // (with a summary, the target plus the summary's few tokens), unless only
            // the newest turn (its call at `messages - 2`, then its results) is left,
            // which is always sent.
            let newest_only = c.from == c.messages - 2;
            prop_assert!(c.after <= max || newest_only, "{} tokens after, over the threshold {max}: {c:?}", c.after);
            prop_assert!(
                summarize || c.after <= target || newest_only,
                "{} tokens after, over the target {target}: {c:?}",
                c.after
            );
        }
        // What was sent stayed bounded, while the conversation grew to hundreds of messages.
        let longest = *seen.lengths.iter().max().unwrap();
        prop_assert!(longest < 2 * turns, "{longest} of {}", 2 * turns + 1);
    }
}

#[tokio::test]
async fn without_a_policy_every_message_is_sent() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let runtime = Runtime::new();
    let reply = agent(model(7, 30, seen.clone()), 30, ContextPolicy::Full).ask(&runtime, "Go").await.unwrap();
    assert_eq!(reply.status, AgentStatus::Completed);
    let lengths = seen.lock().unwrap().lengths.clone();
    assert_eq!(lengths, (0..31).map(|t| 2 * t + 1).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_summary_goes_with_the_first_user_message() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let model = model(3, 60, seen.clone());
    let runtime = Runtime::new();
    agent(model.clone(), 60, ContextPolicy::summarize(800)).ask(&runtime, "Go").await.unwrap();
    let requests = model.requests();
    let summarized = requests
        .iter()
        .filter(|r| r.settings.system.as_deref() != Some(SUMMARY_PROMPT))
        .find(|r| r.messages[0].content.len() > 1)
        .expect("a turn after a summary");
    let ContentBlock::Text { text } = &summarized.messages[0].content[1] else { panic!() };
    assert!(text.contains("Summary of the conversation so far") && text.contains("summary 0"), "{text}");
    // The summary call itself read the turns it replaced as text.
    let summary_call = requests.iter().find(|r| r.settings.system.as_deref() == Some(SUMMARY_PROMPT)).unwrap();
    assert!(summary_call.messages[0].text().contains("Assistant called echo"), "{:?}", summary_call.messages[0]);
}

#[test]
fn compaction_is_a_transition_its_guard_decides() {
    let agent = Agent::new(ScriptedModel::new(), "m", ToolRegistry::new()).context(ContextPolicy::drop_oldest(1_000));
    let mut state = AgentState::default();
    state.input_estimate = 900;
    assert_eq!(agent.next_transition(AgentPlace::Ready, &state).unwrap(), Some("llm_turn"));
    state.input_estimate = 1_200;
    assert_eq!(agent.next_transition(AgentPlace::Ready, &state).unwrap(), Some("compact"));
    // Once per turn at most: a window that cannot shrink further does not loop.
    state.compacted_turn = Some(state.turns);
    assert_eq!(agent.next_transition(AgentPlace::Ready, &state).unwrap(), Some("llm_turn"));
    let full = Agent::new(ScriptedModel::new(), "m", ToolRegistry::new());
    state.compacted_turn = None;
    assert_eq!(full.next_transition(AgentPlace::Ready, &state).unwrap(), Some("llm_turn"));
    assert!(agent.mermaid().contains("compact"));
}

#[test]
fn the_pairing_check_finds_a_call_split_from_its_result() {
    let call =
        Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(ToolUse::new("c1", "echo", json!({})))] };
    let result = Message::tool_results([loopstack_llm::ToolResult {
        tool_use_id: "c1".into(),
        content: "r".into(),
        is_error: false,
    }]);
    let question = Message::user("Go");
    assert_eq!(check_pairing(&[question.clone(), call.clone(), result.clone()]), Ok(()));
    assert!(check_pairing(&[question.clone(), result.clone()]).unwrap_err().contains("answers call c1"));
    assert!(check_pairing(&[question.clone(), call.clone(), Message::user("?")]).unwrap_err().contains("no result"));
    // A call with nothing after it is the newest turn, still to be answered.
    assert_eq!(check_pairing(&[question, call]), Ok(()));
}
