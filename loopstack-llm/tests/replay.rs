//! Replay: a stored run, exported to a file and loaded again, replays offline with a
//! model built from its turns; tool results come from the recording (nothing runs)
//! or from the live tool, chosen per tool; the first request that departs from the
//! recorded one fails with a readable diff.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loopstack_core::{Runtime, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry};
use loopstack_llm::{Agent, AgentStatus, ChatModel, Recording, ReplayError, RunExport, ScriptedModel, ToolDecisions};
use serde_json::{Value, json};

/// The weather, counting its calls.
#[derive(Clone)]
struct Weather {
    calls: Arc<AtomicUsize>,
    answer: &'static str,
}

#[async_trait::async_trait]
impl Tool for Weather {
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> &str {
        "The weather in a city."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]})
    }
    async fn call(&self, _args: Value, _cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Ok(ToolOutput::text(self.answer))
    }
}

fn weather(answer: &'static str) -> (ToolRegistry, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = ToolRegistry::new().with(Weather { calls: calls.clone(), answer }).unwrap();
    (tools, calls)
}

const SYSTEM: &str = "You answer weather questions.\nCall get_weather once for each city.";

fn agent(model: impl ChatModel, tools: ToolRegistry, system: &str) -> Agent {
    Agent::new(model, "m", tools).system(system)
}

/// A recorded run of the weather agent, exported and written to a file: the file.
async fn recorded_run() -> std::path::PathBuf {
    let model = ScriptedModel::new().tool_call("get_weather", json!({"location": "Oslo"})).text("Oslo: 4 C, rain.");
    let (tools, calls) = weather("4 C, rain");
    let runtime = Runtime::new();
    let reply = agent(model, tools, SYSTEM).ask(&runtime, "Weather in Oslo?").await.unwrap();
    assert_eq!((reply.text.as_str(), calls.load(Ordering::Relaxed)), ("Oslo: 4 C, rain.", 1));
    let export = RunExport::of(runtime.store().as_ref(), reply.run_id).await.unwrap();
    let path = std::env::temp_dir().join(format!("loopstack-replay-{}.json", reply.run_id));
    std::fs::write(&path, export.to_json()).unwrap();
    path
}

#[tokio::test]
async fn an_exported_run_replays_unchanged_with_its_tool_results_from_the_recording() {
    let path = recorded_run().await;
    let recording = Recording::from_export(&RunExport::load(&path).unwrap()).unwrap();
    assert_eq!((recording.turns().len(), recording.prompt().as_str()), (2, "Weather in Oslo?"));
    assert_eq!(recording.output(), Some("Oslo: 4 C, rain."));

    let model = recording.model();
    let (live, calls) = weather("this tool should not run");
    let tools = recording.tools(&live).registry().unwrap();
    let reply = model.replay(&agent(model.clone(), tools, SYSTEM), &Runtime::new()).await.unwrap();
    assert_eq!((reply.text.as_str(), model.served()), ("Oslo: 4 C, rain.", 2));
    assert_eq!(calls.load(Ordering::Relaxed), 0, "the tool's result came from the recording");
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn a_live_tool_runs_and_a_changed_result_is_the_diff() {
    let path = recorded_run().await;
    let recording = Recording::from_export(&RunExport::load(&path).unwrap()).unwrap();
    let model = recording.model();

    // Live, with the same answer: it runs, and the replay matches.
    let (live, calls) = weather("4 C, rain");
    let tools = recording.tools(&live).live(["get_weather"]).registry().unwrap();
    model.replay(&agent(model.clone(), tools, SYSTEM), &Runtime::new()).await.unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 1);

    // Live, answering otherwise: the second request carries another tool result.
    let (live, _) = weather("30 C, sun");
    let tools = recording.tools(&live).live(["get_weather"]).registry().unwrap();
    let error = model.replay(&agent(model.clone(), tools, SYSTEM), &Runtime::new()).await.unwrap_err();
    let ReplayError::Diverged(diff) = error else { panic!("{error:?}") };
    assert!(diff.starts_with("request 2 of 2 departs from the recording"), "{diff}");
    assert!(diff.contains("message 3 (User)"), "{diff}");
    assert!(diff.contains(r#"-       "content": "4 C, rain","#), "{diff}");
    assert!(diff.contains(r#"+       "content": "30 C, sun","#), "{diff}");
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn a_changed_system_prompt_or_tool_set_fails_at_the_first_request_with_a_diff() {
    let path = recorded_run().await;
    let recording = Recording::from_export(&RunExport::load(&path).unwrap()).unwrap();
    let model = recording.model();
    let (live, _) = weather("4 C");

    let tools = recording.tools(&live).registry().unwrap();
    let changed = "You answer weather questions.\nCall get_weather once for each city, in Celsius.";
    let error = model.replay(&agent(model.clone(), tools, changed), &Runtime::new()).await.unwrap_err();
    let ReplayError::Diverged(diff) = error else { panic!("{error:?}") };
    assert!(diff.starts_with("request 1 of 2 departs"), "{diff}");
    assert!(diff.contains("the system prompt:"), "{diff}");
    assert!(diff.contains("    - Call get_weather once for each city.\n"), "{diff}");
    assert!(diff.contains("    + Call get_weather once for each city, in Celsius."), "{diff}");
    assert!(diff.contains("      You answer weather questions."), "the unchanged line, for context: {diff}");
    assert!(!diff.contains("message"), "the conversation is the same: {diff}");

    // Without the tool, and on another model name.
    let bare = Agent::new(model.clone(), "m2", ToolRegistry::new()).system(SYSTEM);
    let error = model.replay(&bare, &Runtime::new()).await.unwrap_err();
    let diff = error.to_string();
    assert!(diff.contains("the tool `get_weather` is no longer offered"), "{diff}");
    assert!(diff.contains(r#"the model: recorded "m", now "m2""#), "{diff}");
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn a_replay_that_stops_early_or_answers_otherwise_fails() {
    let path = recorded_run().await;
    let recording = Recording::from_export(&RunExport::load(&path).unwrap()).unwrap();
    let model = recording.model();
    let (live, _) = weather("4 C");
    let tools = recording.tools(&live).registry().unwrap();
    let short = agent(model.clone(), tools, SYSTEM).max_turns(1);
    let error = model.replay(&short, &Runtime::new()).await.unwrap_err();
    assert!(matches!(error, ReplayError::Unfinished { answered: 1, recorded: 2 }), "{error:?}");
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn a_run_that_waited_for_approval_replays_with_the_recorded_decision() {
    let model = ScriptedModel::new().tool_call("get_weather", json!({"location": "Oslo"})).text("I may not look.");
    let (mut tools, calls) = weather("4 C");
    tools.require_approval("get_weather").unwrap();
    let runtime = Runtime::new();
    let recorded = agent(model, tools, SYSTEM);
    let reply = recorded.ask(&runtime, "Weather in Oslo?").await.unwrap();
    let AgentStatus::AwaitingApproval { calls: pending } = reply.status else { panic!() };
    let decisions = ToolDecisions::new([loopstack_llm::ToolDecision::deny(&pending[0].call_id, "not today")]);
    recorded.decide(&runtime, reply.run_id, decisions).await.unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 0);

    // The replay does not wait: the recorded denial is the call's result.
    let recording = Recording::of_run(runtime.store().as_ref(), reply.run_id).await.unwrap();
    let model = recording.model();
    let (live, calls) = weather("4 C");
    let tools = recording.tools(&live).registry().unwrap();
    let replayed = model.replay(&agent(model.clone(), tools, SYSTEM), &Runtime::new()).await.unwrap();
    assert_eq!((replayed.status, replayed.text.as_str()), (AgentStatus::Completed, "I may not look."));
    assert_eq!(calls.load(Ordering::Relaxed), 0);
}

#[test]
fn an_export_that_does_not_read_is_a_typed_error() {
    assert!(matches!(RunExport::from_json("{"), Err(ReplayError::Export(_))));
    let error = RunExport::load("/nonexistent/run.json").unwrap_err();
    assert!(error.to_string().contains("/nonexistent/run.json"), "{error}");
}

/// A fork after the tool result: the other agent (another system prompt) takes the
/// next turn with the conversation so far; the source keeps its own, unchanged.
#[tokio::test]
async fn a_fork_from_a_checkpoint_goes_on_under_another_prompt() {
    let model = ScriptedModel::from_fn(|r: &loopstack_llm::ChatRequest| {
        let script = ScriptedModel::new();
        Ok(match r.messages.last().and_then(|m| m.tool_results_iter().next()) {
            None => script.tool_call_response("get_weather", json!({"location": "Oslo"})),
            Some(result) => {
                let style = r.settings.system.as_deref().unwrap_or_default();
                script.text_response(format!("[{style}] {}", result.content))
            }
        })
    });
    let (tools, calls) = weather("4 C, rain");
    let runtime = Runtime::new();
    let source = agent(model.clone(), tools.clone(), "plain").ask(&runtime, "Oslo?").await.unwrap();
    assert_eq!((source.text.as_str(), calls.load(Ordering::Relaxed)), ("[plain] 4 C, rain", 1));
    // The step whose checkpoint holds the tool result: `run_tool_calls`.
    let history = runtime.store().history(source.run_id).await.unwrap();
    let step = history.iter().find(|s| s.transition == "run_tool_calls").unwrap().step;

    let fork = agent(model, tools, "poetic").fork(&runtime, source.run_id, step).await.unwrap();
    assert_eq!(fork.text, "[poetic] 4 C, rain");
    assert_eq!(calls.load(Ordering::Relaxed), 1, "the tool's result came with the checkpoint");
    let docs = runtime.store().documents(fork.run_id).await.unwrap();
    assert_eq!(docs.len(), 4, "the question, the call, its result and the new answer");
    let source_docs = runtime.store().documents(source.run_id).await.unwrap();
    let last: loopstack_llm::Message = source_docs.last().unwrap().read().unwrap();
    assert_eq!(last.text(), "[plain] 4 C, rain");
}

/// A chart: a tool whose result comes with an image.
struct Chart;

#[async_trait::async_trait]
impl Tool for Chart {
    fn name(&self) -> &str {
        "chart"
    }
    fn description(&self) -> &str {
        "The week's temperatures as a chart."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _args: Value, _cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("the chart of the week").with_image(png(3)))
    }
}

/// A PNG's signature and `extra` more bytes: enough for its media type to be read.
fn png(extra: usize) -> loopstack_llm::image::Image {
    let mut bytes = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d];
    bytes.extend(std::iter::repeat_n(7, extra));
    loopstack_llm::image::Image::from_bytes(&bytes).unwrap()
}

/// Says what it was shown: the images of the whole conversation, by size.
fn image_model() -> ScriptedModel {
    ScriptedModel::from_fn(|r: &loopstack_llm::ChatRequest| {
        let images: Vec<String> = r
            .messages
            .iter()
            .flat_map(|m| m.images())
            .map(|(image, call)| match image {
                loopstack_llm::image::Image::Base64 { data, .. } => {
                    format!("{} from {}", data.len(), if call.is_some() { "the tool" } else { "the user" })
                }
                other => format!("{other:?}"),
            })
            .collect();
        let script = ScriptedModel::new();
        Ok(match r.messages.last().and_then(|m| m.tool_results_iter().next()) {
            None => script.tool_call_response("chart", json!({})),
            Some(_) => script.text_response(format!("I saw {}", images.join(", "))),
        })
    })
}

#[tokio::test]
async fn a_run_with_images_replays_them_from_the_recording() {
    let runtime = Runtime::new();
    let tools = ToolRegistry::new().with(Chart).unwrap();
    let agent = Agent::new(image_model(), "m", tools.clone()).system(SYSTEM);
    let reply = agent.ask_with_images(&runtime, "How was the week?", [png(1)]).await.unwrap();
    assert_eq!(reply.text, "I saw 20 from the user, 20 from the tool", "the question's image and the chart's");
    let file = RunExport::of(runtime.store().as_ref(), reply.run_id).await.unwrap().to_json();

    let recording = Recording::from_export(&RunExport::from_json(&file).unwrap()).unwrap();
    let replay = recording.model();
    let replayed = Agent::new(replay.clone(), "m", recording.tools(&tools).registry().unwrap()).system(SYSTEM);
    let again = replay.replay(&replayed, &Runtime::new()).await.unwrap();
    assert_eq!(again.text, reply.text);
    assert_eq!(replay.served(), 2);
}

#[tokio::test]
async fn a_fork_with_edits_replays_under_its_own_prompt() {
    let model = ScriptedModel::from_fn(|r: &loopstack_llm::ChatRequest| {
        let script = ScriptedModel::new();
        Ok(match r.messages.last().and_then(|m| m.tool_results_iter().next()) {
            None => script.tool_call_response("get_weather", json!({"location": r.messages[0].text()})),
            Some(result) => {
                let style = r.settings.system.as_deref().unwrap_or_default();
                script.text_response(format!("[{style}] {}", result.content))
            }
        })
    });
    let (tools, _) = weather("4 C, rain");
    let runtime = Runtime::new();
    let source = agent(model.clone(), tools.clone(), "plain").ask(&runtime, "Oslo").await.unwrap();
    // From step 0, the question saved: another prompt and another question.
    let edits = loopstack_core::ForkEdits::new().system("poetic").message_text(0, "Bergen");
    let fork = agent(model, tools.clone(), "plain").fork_with(&runtime, source.run_id, 0, edits).await.unwrap();
    assert_eq!(fork.text, "[poetic] 4 C, rain");
    let export = RunExport::of(runtime.store().as_ref(), fork.run_id).await.unwrap();
    let recording = Recording::from_export(&export).unwrap();
    assert_eq!(recording.prompt(), "Bergen", "the fork's question, as edited");

    let replay = recording.model();
    let replayed = agent(replay.clone(), recording.tools(&tools).registry().unwrap(), "poetic");
    assert_eq!(replay.replay(&replayed, &Runtime::new()).await.unwrap().text, "[poetic] 4 C, rain");
    // Under the source's prompt it departs at the first request, saying how.
    let source_prompt = agent(replay.clone(), recording.tools(&tools).registry().unwrap(), "plain");
    let Err(ReplayError::Diverged(diff)) = replay.replay(&source_prompt, &Runtime::new()).await else { panic!() };
    assert!(diff.contains("- poetic") && diff.contains("+ plain"), "{diff}");
}

/// A run whose model reasoned before its call: the reasoning (text and the
/// provider's opaque data) survives the export and the file, and the replay's second
/// request must carry it exactly as the recorded one did, or it departs.
#[tokio::test]
async fn reasoning_is_recorded_and_replayed_with_its_turn() {
    use loopstack_llm::{ContentBlock, Reasoning};
    let thought = Reasoning::new("anthropic", "Oslo: one call.", json!({"signature": "c2lnbmVk"}));
    let script = ScriptedModel::new();
    let mut call = script.tool_call_response("get_weather", json!({"location": "Oslo"}));
    call.message.content.insert(0, ContentBlock::Reasoning(thought.clone()));
    let model = script.reply(call).text("Oslo: 4 C, rain.");
    let (tools, _) = weather("4 C, rain");
    let runtime = Runtime::new();
    let reply = agent(model, tools, SYSTEM).ask(&runtime, "Weather in Oslo?").await.unwrap();
    let export = RunExport::of(runtime.store().as_ref(), reply.run_id).await.unwrap();
    let path = std::env::temp_dir().join(format!("loopstack-replay-reasoning-{}.json", reply.run_id));
    std::fs::write(&path, export.to_json()).unwrap();

    let recording = Recording::from_export(&RunExport::load(&path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    let reasoning = |messages: &[loopstack_llm::Message]| {
        messages.iter().flat_map(|m| &m.content).find_map(|b| match b {
            ContentBlock::Reasoning(r) => Some(r.clone()),
            _ => None,
        })
    };
    let turns = recording.turns();
    assert_eq!(reasoning(&turns[1].messages), Some(thought.clone()), "the second turn was sent the reasoning");

    let model = recording.model();
    let (live, calls) = weather("unused");
    let tools = recording.tools(&live).registry().unwrap();
    let replay_runtime = Runtime::new();
    let replayed = model.replay(&agent(model.clone(), tools, SYSTEM), &replay_runtime).await.unwrap();
    assert_eq!((replayed.text.as_str(), model.served(), calls.load(Ordering::Relaxed)), ("Oslo: 4 C, rain.", 2, 0));
    // The replay's own run keeps the reasoning with the call, as the recorded one did.
    let docs = replay_runtime.store().documents(replayed.run_id).await.unwrap();
    let messages: Vec<loopstack_llm::Message> = docs.iter().filter_map(|d| d.read().ok()).collect();
    assert_eq!(reasoning(&messages), Some(thought));
}
