//! What-if forks with edits on SQLite: another system prompt and model that the
//! fork keeps across a restart, a replaced state, and edits that are refused before
//! anything is stored.

use std::sync::Arc;

use loopstack::llm::{
    Agent, AgentStatus, ChatRequest, GenerateOptions, Limit, Models, ScriptedModel, ToolDecision, ToolDecisions,
};
use loopstack::prelude::*;
use loopstack::{ForkEdits, ForkError, ForkRecord, RunError, SqliteStore, Store};

/// Refunds an order once a person approves the call.
#[tool(approve)]
async fn issue_refund(order: String) -> Result<String, ToolError> {
    Ok(format!("refunded {order}"))
}

/// A model named `label`: asks for the refund, then answers with its label, model
/// name and system prompt, so the reply says who answered under which prompt.
fn model(label: &'static str) -> ScriptedModel {
    ScriptedModel::from_fn(move |r: &ChatRequest| {
        let last = r.messages.last().unwrap();
        Ok(match last.tool_results_iter().next() {
            Some(result) => ScriptedModel::new().text_response(format!(
                "{label}/{} [{}] {}",
                r.model,
                r.settings.system.as_deref().unwrap_or("-"),
                result.content
            )),
            None => ScriptedModel::new().tool_call_response("issue_refund", serde_json::json!({"order": "A-17"})),
        })
    })
}

/// The agent of each process: two models, the first one's turns unless a fork says.
fn agent() -> Agent {
    let models = Models::new().with_named("first", model("first")).with_named("second", model("second"));
    let options = GenerateOptions::new("first", "m1").system("be terse").tools(vec!["issue_refund".to_owned()]);
    Agent::with_models(models, options, ToolRegistry::new().with(IssueRefund).unwrap())
}

async fn open(path: &std::path::Path) -> Arc<dyn Store> {
    Arc::new(SqliteStore::open(path).await.unwrap())
}

#[tokio::test]
async fn a_fork_keeps_its_edited_prompt_and_model_across_a_restart() {
    let path = std::env::temp_dir().join(format!("loopstack-forks-{}.db", RunId::new()));
    let first = Runtime::with_shared_store(open(&path).await);
    let source = agent().ask(&first, "Refund A-17").await.unwrap();
    assert!(matches!(source.status, AgentStatus::AwaitingApproval { .. }), "{:?}", source.status);

    // From step 0 (the run as created: its prompt saved, no turn taken), under
    // another prompt and model.
    let edits = ForkEdits::new().system("be kind").model("second", "m2");
    let fork = agent().fork_with(&first, source.run_id, 0, edits.clone()).await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = fork.status else { panic!("{:?}", fork.status) };
    let record = first.store().load_run(fork.run_id).await.unwrap();
    assert_eq!(record.forked_from, Some((source.run_id, 0)));
    let history = first.store().history(fork.run_id).await.unwrap();
    assert_eq!(history[0].transition, loopstack::fork::FORK_TRANSITION, "the edits are the fork's step 1");
    let docs = first.store().documents(fork.run_id).await.unwrap();
    let doc = docs.iter().find(|d| d.doc_type == loopstack::fork::FORK_DOCUMENT).expect("the fork says what changed");
    let said: ForkRecord = doc.read().unwrap();
    assert_eq!((said.source, said.step, said.edits), (source.run_id, 0, edits));
    assert_eq!(said.changes, ["system prompt changed", "model: second:m2"]);
    drop(first);

    // A new process, a new agent: the fork's next turn still has its own prompt and model.
    let second = Runtime::with_shared_store(open(&path).await);
    let decisions = ToolDecisions::new([ToolDecision::approve(&calls[0].call_id)]);
    let done = agent().decide(&second, fork.run_id, decisions).await.unwrap();
    assert_eq!(done.text, "second/m2 [be kind] refunded A-17");
    // The source goes on as it was.
    let AgentStatus::AwaitingApproval { calls } = source.status else { unreachable!() };
    let decisions = ToolDecisions::new([ToolDecision::approve(&calls[0].call_id)]);
    let done = agent().decide(&second, source.run_id, decisions).await.unwrap();
    assert_eq!(done.text, "first/m1 [be terse] refunded A-17");
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn a_fork_with_a_replaced_state_drives_from_it() {
    let path = std::env::temp_dir().join(format!("loopstack-forks-{}.db", RunId::new()));
    let runtime = Runtime::with_shared_store(open(&path).await);
    let source = agent().ask(&runtime, "Refund A-17").await.unwrap();
    // The state at step 0 with the turn budget spent: the fork stops at the limit.
    let checkpoint = runtime.store().checkpoint(source.run_id, 0).await.unwrap();
    let mut state: serde_json::Value = serde_json::from_str(checkpoint.state.get()).unwrap();
    state["turns"] = 10.into();
    let fork = agent().fork_with(&runtime, source.run_id, 0, ForkEdits::new().state(state)).await.unwrap();
    assert_eq!(fork.status, AgentStatus::LimitReached(Limit::Turns { max: 10 }));
    assert_eq!(fork.turns, 10);
    let docs = runtime.store().documents(fork.run_id).await.unwrap();
    let said: ForkRecord = docs.iter().find(|d| d.doc_type == loopstack::fork::FORK_DOCUMENT).unwrap().read().unwrap();
    assert_eq!(said.changes, ["state replaced"]);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn edits_that_do_not_fit_are_refused_and_store_nothing() {
    let path = std::env::temp_dir().join(format!("loopstack-forks-{}.db", RunId::new()));
    let runtime = Runtime::with_shared_store(open(&path).await).register(agent());
    let source = agent().ask(&runtime, "Refund A-17").await.unwrap();
    let runs = || async { runtime.store().list_runs(&loopstack::RunQuery::new()).await.unwrap().runs.len() };
    let before = runs().await;

    let bad_state = ForkEdits::new().state(serde_json::json!({"turns": "many"}));
    let err = agent().fork_with(&runtime, source.run_id, 1, bad_state).await.unwrap_err();
    assert!(matches!(err, loopstack::llm::AskError::Run(RunError::Fork(ForkError::BadState { .. }))), "{err}");
    let err = agent().fork_with(&runtime, source.run_id, 99, ForkEdits::new().system("x")).await.unwrap_err();
    assert!(
        matches!(err, loopstack::llm::AskError::Run(RunError::Fork(ForkError::UnknownStep { step: 99, .. }))),
        "{err}"
    );
    let err = agent().fork_with(&runtime, source.run_id, 1, ForkEdits::new().model("third", "m3")).await.unwrap_err();
    let loopstack::llm::AskError::Run(RunError::Fork(ForkError::UnknownModel { provider, registered })) = err else {
        panic!("{err}")
    };
    assert_eq!((provider.as_str(), registered), ("third", vec!["first".to_owned(), "second".to_owned()]));
    // By name too (the HTTP API, the command line): the agent's check runs.
    let edits = ForkEdits::new().model("third", "m3");
    let err = runtime.fork_by_name(source.run_id, 1, edits, RunId::new()).await.unwrap_err();
    assert!(matches!(err, RunError::Fork(ForkError::UnknownModel { .. })), "{err}");
    let err =
        runtime.fork_by_name(source.run_id, 2, ForkEdits::new().keep_messages(2), RunId::new()).await.unwrap_err();
    assert!(matches!(err, RunError::Fork(ForkError::NothingToDrop { messages: 2, keep: 2, .. })), "{err}");
    let mut unwritten = ForkEdits::new();
    unwritten.model = Some("no-colon".to_owned());
    let err = runtime.fork_by_name(source.run_id, 1, unwritten, RunId::new()).await.unwrap_err();
    assert!(matches!(err, RunError::Fork(ForkError::BadModel { .. })), "{err}");
    assert_eq!(runs().await, before, "a refused fork stores nothing");
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn a_fork_that_drops_messages_starts_before_the_first_one_dropped() {
    let path = std::env::temp_dir().join(format!("loopstack-forks-{}.db", RunId::new()));
    let runtime = Runtime::with_shared_store(open(&path).await);
    let waiting = agent().ask(&runtime, "Refund A-17").await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = waiting.status else { panic!("{:?}", waiting.status) };
    let decisions = ToolDecisions::new([ToolDecision::approve(&calls[0].call_id)]);
    let source = agent().decide(&runtime, waiting.run_id, decisions).await.unwrap();
    assert_eq!(source.status, AgentStatus::Completed);
    let last = runtime.store().load_run(source.run_id).await.unwrap().step;
    let messages = |docs: &[Arc<Document>]| docs.iter().filter(|d| d.has_tag("conversation")).count();
    assert_eq!(messages(&runtime.store().documents(source.run_id).await.unwrap()), 4);

    // The prompt only: the fork starts where the first turn had not been taken.
    let fork = agent().fork_with(&runtime, source.run_id, last, ForkEdits::new().keep_messages(1)).await.unwrap();
    assert!(matches!(fork.status, AgentStatus::AwaitingApproval { .. }), "{:?}", fork.status);
    let record = runtime.store().load_run(fork.run_id).await.unwrap();
    assert_eq!(record.forked_from, Some((source.run_id, 0)));
    let docs = runtime.store().documents(fork.run_id).await.unwrap();
    assert_eq!(messages(&docs), 2, "the prompt and the fork's own first turn");
    let said: ForkRecord = docs.iter().find(|d| d.doc_type == loopstack::fork::FORK_DOCUMENT).unwrap().read().unwrap();
    assert_eq!((said.step, said.changes), (0, vec!["conversation cut to its first 1 messages".to_owned()]));
    let _ = std::fs::remove_file(&path);
}

/// Answers with the text of the conversation's first message, and says how many
/// messages it was sent.
fn echo_agent() -> Agent {
    let echo = ScriptedModel::from_fn(|r: &ChatRequest| {
        let first = r.messages.first().map(|m| m.text()).unwrap_or_default();
        Ok(ScriptedModel::new().text_response(format!("you said: {first} ({} sent)", r.messages.len())))
    });
    Agent::with_models(Models::new().with_named("echo", echo), GenerateOptions::new("echo", "e1"), ToolRegistry::new())
}

#[tokio::test]
async fn a_fork_can_edit_a_message_and_keeps_the_old_text_in_its_history() {
    let path = std::env::temp_dir().join(format!("loopstack-forks-{}.db", RunId::new()));
    let runtime = Runtime::with_shared_store(open(&path).await);
    let source = echo_agent().ask(&runtime, "Refund A-17").await.unwrap();
    assert_eq!(source.text, "you said: Refund A-17 (1 sent)");

    // From step 0 (the question saved, no turn taken), with the question reworded.
    let edits = ForkEdits::new().message_text(0, "Refund B-9, please");
    let fork = echo_agent().fork_with(&runtime, source.run_id, 0, edits).await.unwrap();
    assert_eq!(fork.text, "you said: Refund B-9, please (1 sent)");
    let docs = runtime.store().documents(fork.run_id).await.unwrap();
    let said: ForkRecord = docs.iter().find(|d| d.doc_type == loopstack::fork::FORK_DOCUMENT).unwrap().read().unwrap();
    assert_eq!(said.changes, ["message 0 edited"]);
    let question: loopstack::llm::Message = docs[0].read().unwrap();
    assert_eq!((question.role, question.text()), (loopstack::llm::Role::User, "Refund B-9, please".to_owned()));
    assert_eq!((docs[0].version, docs[0].step), (2, 1), "the edits step saved the new version");
    // The copied version keeps the old text; the source is untouched.
    let versions = runtime.store().document_versions(fork.run_id).await.unwrap();
    let old: loopstack::llm::Message = versions.iter().find(|d| d.seq == 0 && d.version == 1).unwrap().read().unwrap();
    assert_eq!(old.text(), "Refund A-17");
    let source_docs = runtime.store().documents(source.run_id).await.unwrap();
    assert_eq!(source_docs[0].read::<loopstack::llm::Message>().unwrap().text(), "Refund A-17");

    // On the command line: `fork RUN --step 0 --message 0=TEXT`.
    use clap::Parser as _;
    let runtime = runtime.register(echo_agent());
    let run = source.run_id.to_string();
    let args = |message: &str| ["app", "fork", run.as_str(), "--step", "0", "--message", message].map(str::to_owned);
    let cli = loopstack::cli::Cli::try_parse_from(args("0=Refund C-3")).unwrap();
    let out = loopstack::cli::execute(&runtime, &cli).await.unwrap();
    assert!(out.contains("completed"), "{out}");
    let fork = runtime.store().list_runs(&loopstack::RunQuery::new()).await.unwrap().runs[0].run_id;
    let docs = runtime.store().documents(fork).await.unwrap();
    assert_eq!(docs[0].read::<loopstack::llm::Message>().unwrap().text(), "Refund C-3");
    let err = loopstack::cli::Cli::try_parse_from(args("first=Refund C-3")).unwrap_err();
    assert!(err.to_string().contains("`first` is not a message number"), "{err}");
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn a_message_edit_that_does_not_fit_is_refused_and_stores_nothing() {
    let path = std::env::temp_dir().join(format!("loopstack-forks-{}.db", RunId::new()));
    let runtime = Runtime::with_shared_store(open(&path).await).register(agent());
    let source = agent().ask(&runtime, "Refund A-17").await.unwrap();
    let AgentStatus::AwaitingApproval { calls } = source.status else { panic!("{:?}", source.status) };
    let decisions = ToolDecisions::new([ToolDecision::approve(&calls[0].call_id)]);
    let done = agent().decide(&runtime, source.run_id, decisions).await.unwrap();
    assert_eq!(done.status, AgentStatus::Completed);
    let last = runtime.store().load_run(source.run_id).await.unwrap().step;
    let runs = || async { runtime.store().list_runs(&loopstack::RunQuery::new()).await.unwrap().runs.len() };
    let before = runs().await;

    // Question, the model's call, the call's result, the answer: four messages.
    let err = agent().fork_with(&runtime, source.run_id, last, ForkEdits::new().message_text(4, "x")).await;
    let Err(loopstack::llm::AskError::Run(RunError::Fork(ForkError::NoMessage { index, messages, .. }))) = err else {
        panic!("{err:?}")
    };
    assert_eq!((index, messages), (4, 4));
    // The model's call and the tool's result have no text to replace.
    for index in [1, 2] {
        let edits = ForkEdits::new().message_text(index, "x");
        let err = runtime.fork_by_name(source.run_id, last, edits, RunId::new()).await.unwrap_err();
        assert!(matches!(err, RunError::Fork(ForkError::NoText { index: i, .. }) if i == index), "{err}");
    }
    // By name, as the HTTP API and the command line send it, an edit that fits goes through.
    let edits: ForkEdits =
        serde_json::from_value(serde_json::json!({"messages": [{"index": 3, "text": "Refunded, all done."}]})).unwrap();
    assert_eq!(runs().await, before, "a refused fork stores nothing");
    let fork = RunId::new();
    let outcome = runtime.fork_by_name(source.run_id, last, edits, fork).await.unwrap();
    assert_eq!(outcome, RunOutcome::Completed, "the fork took its edits step and ended");
    let answer: loopstack::llm::Message = runtime.store().documents(fork).await.unwrap()[3].read().unwrap();
    assert_eq!(answer.text(), "Refunded, all done.");
    let _ = std::fs::remove_file(&path);
}
