//! Replaying a stored run offline: its model turns answered from the record, its
//! tool results from the store (or live), and the first request that departs from
//! the recorded one a typed error with a readable diff.

use std::collections::HashMap;
use std::fmt::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use loopstack_core::{
    Document, RunId, RunStatus, Runtime, Store, StoreError, Tool, ToolContext, ToolError, ToolOptions, ToolOutput,
    ToolRegistry, ToolSpec,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{REQUEST_META, diff};
use crate::agent::{Agent, AgentReply, AskError};
use crate::error::{AgentError, LlmError};
use crate::generate::{MESSAGE_DOCUMENT, NAMED_CONVERSATION_PREFIX};
use crate::message::{Message, Role, StopReason, ToolResult, Usage};
use crate::model::{ChatModel, ChatRequest, ChatResponse};

/// The format version of a [`RunExport`] file.
const EXPORT_FORMAT: u32 = 1;

/// A run as a file: its record and every document, for replaying it elsewhere
/// ([`Recording::from_export`]). `loopstack::cli`'s `export RUN` writes one.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunExport {
    /// The file's format version (1).
    pub format: u32,
    /// The run.
    pub run_id: RunId,
    /// Its workflow.
    pub workflow: String,
    /// How it stood when exported.
    pub status: RunStatus,
    /// The place it was at.
    pub place: String,
    /// Its state then.
    pub state: Value,
    /// Its documents (the conversation among them), in order.
    pub documents: Vec<Document>,
}

impl RunExport {
    /// Reads run `run_id` and its documents from `store`.
    pub async fn of(store: &dyn Store, run_id: RunId) -> Result<Self, StoreError> {
        let record = store.load_run(run_id).await?;
        let documents = store.documents(run_id).await?.iter().map(|d| Document::clone(d)).collect();
        let state = serde_json::from_str(record.state.get()).unwrap_or(Value::Null);
        Ok(Self {
            format: EXPORT_FORMAT,
            run_id,
            workflow: record.workflow.into_owned(),
            status: record.status,
            place: record.place.into_owned(),
            state,
            documents,
        })
    }

    /// The export as JSON text (what a file holds).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("an export is JSON")
    }

    /// An export from its JSON text.
    pub fn from_json(text: &str) -> Result<Self, ReplayError> {
        let export: Self = serde_json::from_str(text).map_err(|e| ReplayError::Export(e.to_string()))?;
        if export.format != EXPORT_FORMAT {
            return Err(ReplayError::Export(format!("format {} is not known (this build reads 1)", export.format)));
        }
        Ok(export)
    }

    /// Reads an export from a file (a blocking read: in async code, call it before
    /// the runtime starts or in `spawn_blocking`).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ReplayError> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).map_err(|e| ReplayError::Export(format!("{}: {e}", path.display())))?;
        Self::from_json(&text)
    }
}

/// Why a replay failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The export could not be read.
    #[error("the run export cannot be read: {0}")]
    Export(String),
    /// The run has no model turn to replay.
    #[error("the run has no model turn to replay")]
    NoTurns,
    /// A request of the replay is not the recorded one: `diff` says how.
    #[error("{0}")]
    Diverged(String),
    /// The replayed run took fewer model turns than the recorded one.
    #[error("the replay ended after {answered} of the {recorded} recorded model turns")]
    Unfinished {
        /// Turns the replay took.
        answered: usize,
        /// Turns the recording has.
        recorded: usize,
    },
    /// The replay's answer is not the recorded one.
    #[error("the replay answered {now:?}, the recorded run {recorded:?}")]
    Answer {
        /// The recorded final answer.
        recorded: Option<String>,
        /// The replay's.
        now: String,
    },
    /// The replayed run failed for another reason.
    #[error(transparent)]
    Run(AskError),
}

/// One recorded model turn: what was sent, and what the model answered.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecordedTurn {
    /// The conversation it sent.
    pub messages: Vec<Message>,
    /// The fingerprint of the rest of the request (model, settings, tools), if recorded.
    pub fingerprint: Option<String>,
    /// That rest itself, from the first turn sent under it.
    pub config: Option<Arc<Value>>,
    /// The answer.
    pub response: ChatResponse,
}

/// The model turns and tool results of a stored run, to replay it: see
/// [`Recording::model`] and [`Recording::tools`].
///
/// ```
/// use loopstack_core::{Runtime, ToolRegistry};
/// use loopstack_llm::{Agent, Recording, ScriptedModel};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let runtime = Runtime::new();
/// let agent = Agent::new(ScriptedModel::new().text("Sunny."), "m", ToolRegistry::new()).system("Be brief.");
/// let run = agent.ask(&runtime, "Weather?").await?.run_id;
///
/// // The same agent, its model replaced by the recording: the run replays offline.
/// let recording = Recording::of_run(runtime.store().as_ref(), run).await?;
/// let model = recording.model();
/// let same = Agent::new(model.clone(), "m", ToolRegistry::new()).system("Be brief.");
/// assert_eq!(model.replay(&same, &Runtime::new()).await?.text, "Sunny.");
///
/// // Another system prompt: the first request that differs fails, and says how.
/// let changed = Agent::new(model.clone(), "m", ToolRegistry::new()).system("Be verbose.");
/// let diff = model.replay(&changed, &Runtime::new()).await.unwrap_err().to_string();
/// assert!(diff.contains("- Be brief.") && diff.contains("+ Be verbose."), "{diff}");
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Recording {
    run_id: RunId,
    turns: Vec<RecordedTurn>,
    results: HashMap<String, RecordedResult>,
    output: Option<String>,
}

/// A tool call's recorded result, with the images its tool returned.
#[derive(Debug, Clone)]
struct RecordedResult {
    result: ToolResult,
    images: Vec<crate::image::Image>,
}

impl Recording {
    /// The recording of run `run_id` in `store`.
    pub async fn of_run(store: &dyn Store, run_id: RunId) -> Result<Self, ReplayError> {
        let export = RunExport::of(store, run_id).await.map_err(|e| ReplayError::Export(e.to_string()))?;
        Self::from_export(&export)
    }

    /// The recording in an export.
    pub fn from_export(export: &RunExport) -> Result<Self, ReplayError> {
        let mut conversations: HashMap<Option<String>, Vec<Message>> = HashMap::new();
        // By conversation: what was last recorded, which the turns after it that record
        // nothing were sent under.
        let mut current: HashMap<Option<String>, Arc<Value>> = HashMap::new();
        let (mut turns, mut results) = (Vec::new(), HashMap::<String, RecordedResult>::new());
        let images = stored_images(export)?;
        for doc in export.documents.iter().filter(|d| d.doc_type == MESSAGE_DOCUMENT) {
            let mut message: Message = doc.read().map_err(|e| ReplayError::Export(e.to_string()))?;
            // As a request shows them: with their data, not the run's references.
            resolve_images(&mut message, &images)?;
            let name = doc.tags.iter().find_map(|t| t.strip_prefix(NAMED_CONVERSATION_PREFIX)).map(str::to_owned);
            let conversation = conversations.entry(name.clone()).or_default();
            for result in message.tool_results_iter() {
                results
                    .insert(result.tool_use_id.clone(), RecordedResult { result: result.clone(), images: Vec::new() });
            }
            for (image, call) in message.images() {
                if let Some(recorded) = call.and_then(|call| results.get_mut(call)) {
                    recorded.images.push(image.clone());
                }
            }
            if message.role == Role::Assistant {
                let meta = |name: &str| doc.metadata.get_raw(name);
                // A turn that records nothing was sent under the last one recorded.
                let (fingerprint, config) = match meta(REQUEST_META) {
                    Some(config) => {
                        let config: Arc<Value> = Arc::new(serde_json::from_str(config.get()).unwrap_or_default());
                        current.insert(name.clone(), config.clone());
                        (config["fp"].as_str().map(str::to_owned), Some(config))
                    }
                    None => match current.get(&name) {
                        Some(config) => (config["fp"].as_str().map(str::to_owned), Some(config.clone())),
                        None => (None, None),
                    },
                };
                let meta_of = &doc.metadata;
                let stop_reason = meta_of.read("stop_reason").and_then(Result::ok).unwrap_or(StopReason::EndTurn);
                let usage: Option<Usage> = meta_of.read("usage").and_then(Result::ok);
                let model: Option<String> = meta_of.read("model").and_then(Result::ok);
                let model = model.as_deref().unwrap_or("replay");
                let response = ChatResponse::new(message.clone(), stop_reason, usage.unwrap_or_default(), model);
                turns.push(RecordedTurn { messages: conversation.clone(), fingerprint, config, response });
            }
            conversation.push(message);
        }
        if turns.is_empty() {
            return Err(ReplayError::NoTurns);
        }
        let output = export.state.get("output").and_then(Value::as_str).map(str::to_owned);
        Ok(Self { run_id: export.run_id, turns, results, output })
    }

    /// The run recorded.
    pub fn run_id(&self) -> RunId {
        self.run_id
    }

    /// The recorded model turns, in order.
    pub fn turns(&self) -> &[RecordedTurn] {
        &self.turns
    }

    /// The first user message: an agent run's prompt.
    pub fn prompt(&self) -> String {
        self.turns[0].messages.first().map(Message::text).unwrap_or_default()
    }

    /// The images shown with the prompt.
    pub fn prompt_images(&self) -> Vec<crate::image::Image> {
        let first = self.turns[0].messages.first();
        first
            .map(|m| m.images().filter(|(_, call)| call.is_none()).map(|(i, _)| i.clone()).collect())
            .unwrap_or_default()
    }

    /// The recorded run's final answer (an agent's `output`), if it has one.
    pub fn output(&self) -> Option<&str> {
        self.output.as_deref()
    }

    /// A model that answers each request with the recorded turn it matches, and fails
    /// with [`LlmError::Replay`] (a readable diff) at the first request that differs
    /// from the recorded one: its conversation, model name, settings (the system
    /// prompt among them), tools or response schema. Turns are matched by the
    /// assistant messages a request holds, so a replay resumed after a crash goes on
    /// at its turn.
    pub fn model(&self) -> ReplayModel {
        ReplayModel { recording: Arc::new(self.clone()), served: Arc::new(AtomicUsize::new(0)) }
    }

    /// Tools with the names, descriptions, schemas and options of `live`'s that
    /// answer each call with its recorded result (by call id), without running
    /// anything; [`ReplayTools::live`] names tools that run for real instead. The
    /// replayed calls do not wait for approval: the recorded result (a denial too) is
    /// the decision.
    pub fn tools(&self, live: &ToolRegistry) -> ReplayTools {
        ReplayTools { live: live.clone(), results: Arc::new(self.results.clone()), run_live: Vec::new() }
    }
}

/// The tools of a replay ([`Recording::tools`]): recorded results, or live tools.
#[derive(Debug, Clone)]
pub struct ReplayTools {
    live: ToolRegistry,
    results: Arc<HashMap<String, RecordedResult>>,
    run_live: Vec<String>,
}

impl ReplayTools {
    /// Runs these tools for real (with their approvals) instead of replaying their results.
    #[must_use]
    pub fn live<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.run_live.extend(names.into_iter().map(Into::into));
        self
    }

    /// The registry to build the replayed agent with.
    pub fn registry(&self) -> Result<ToolRegistry, loopstack_core::RegistryError> {
        let mut registry = ToolRegistry::new();
        for spec in self.live.specs() {
            match self.live.get(&spec.name) {
                Some(tool) if self.run_live.contains(&spec.name) => {
                    registry.register_arc(tool.clone())?;
                    if spec.options.approve {
                        registry.require_approval(&spec.name)?;
                    }
                }
                _ => {
                    let stub = Recorded { spec: spec.clone(), results: self.results.clone() };
                    registry.register(stub)?;
                }
            }
        }
        Ok(registry)
    }
}

/// A tool that answers with recorded results.
struct Recorded {
    spec: Arc<ToolSpec>,
    results: Arc<HashMap<String, RecordedResult>>,
}

#[async_trait::async_trait]
impl Tool for Recorded {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn description(&self) -> &str {
        &self.spec.description
    }

    fn input_schema(&self) -> Value {
        self.spec.input_schema.clone()
    }

    fn options(&self) -> ToolOptions {
        let mut options = self.spec.options;
        options.approve = false;
        options
    }

    async fn call(&self, _args: Value, cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        match self.results.get(cx.call_id()) {
            Some(RecordedResult { result, .. }) if result.is_error => Ok(ToolOutput::error(result.content.clone())),
            Some(RecordedResult { result, images }) => {
                Ok(images.iter().fold(ToolOutput::text(result.content.clone()), |out, i| out.with_image(i.clone())))
            }
            None => Err(ToolError::new(format!(
                "the recording has no result for call `{}` to `{}`",
                cx.call_id(),
                self.spec.name
            ))),
        }
    }
}

/// The model of a replay ([`Recording::model`]). Clones share what was served.
#[derive(Debug, Clone)]
pub struct ReplayModel {
    recording: Arc<Recording>,
    served: Arc<AtomicUsize>,
}

impl ReplayModel {
    /// The recorded turns it answered so far.
    pub fn served(&self) -> usize {
        self.served.load(Ordering::Relaxed)
    }

    /// Replays the recorded run with `agent` (built with this model) on `runtime`:
    /// asks it the recorded prompt and checks that every request matched, that it
    /// took every recorded turn and that its answer is the recorded one.
    pub async fn replay(&self, agent: &Agent, runtime: &Runtime) -> Result<AgentReply, ReplayError> {
        self.served.store(0, Ordering::Relaxed);
        let (prompt, images) = (self.recording.prompt(), self.recording.prompt_images());
        let asked = if images.is_empty() {
            agent.ask(runtime, prompt).await
        } else {
            agent.ask_with_images(runtime, prompt, images).await
        };
        let reply = match asked {
            Ok(reply) => reply,
            Err(AskError::Step { source: AgentError::Llm(LlmError::Replay { diff, .. }), .. }) => {
                return Err(ReplayError::Diverged(diff));
            }
            Err(e) => return Err(ReplayError::Run(e)),
        };
        let recorded = self.recording.turns.len();
        if self.served() < recorded {
            return Err(ReplayError::Unfinished { answered: self.served(), recorded });
        }
        if let Some(output) = self.recording.output()
            && output != reply.text
        {
            return Err(ReplayError::Answer { recorded: Some(output.to_owned()), now: reply.text });
        }
        Ok(reply)
    }

    fn turn_for(&self, request: &ChatRequest) -> Result<&RecordedTurn, LlmError> {
        let answered = request.messages.iter().filter(|m| m.role == Role::Assistant).count();
        let turns = &self.recording.turns;
        let mut candidates =
            turns.iter().filter(|t| t.messages.iter().filter(|m| m.role == Role::Assistant).count() == answered);
        let first = candidates.clone().next();
        candidates.find(|t| t.messages.first() == request.messages.first().map(|m| &**m)).or(first).ok_or_else(|| {
            LlmError::Replay {
                turn: answered + 1,
                diff: format!(
                    "request {} of the replay has no recorded turn: the run {} recorded {} model turns",
                    answered + 1,
                    self.recording.run_id,
                    turns.len()
                ),
            }
        })
    }
}

#[async_trait::async_trait]
impl ChatModel for ReplayModel {
    fn provider(&self) -> &'static str {
        "replay"
    }

    fn structured_output(&self) -> bool {
        self.recording.turns.iter().any(|t| t.config.as_ref().is_some_and(|c| c.get("schema").is_some()))
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let turn = self.turn_for(request)?;
        let number = self.recording.turns.iter().position(|t| std::ptr::eq(t, turn)).unwrap_or(0) + 1;
        let mut out = String::new();
        if let Some(recorded) = &turn.fingerprint {
            let live = super::fingerprint_text(super::fingerprint(request));
            if *live != **recorded {
                match &turn.config {
                    Some(config) => diff::config(&mut out, config, &super::config(request, &live)),
                    None => {
                        out.push_str("  the model, settings or tools (the recording keeps only their fingerprint)\n")
                    }
                }
            }
        }
        if !turn.messages.iter().eq(request.messages.iter().map(|m| &**m)) {
            diff::messages(&mut out, &turn.messages, &request.messages);
        }
        if !out.is_empty() {
            let mut diff = format!(
                "request {number} of {} departs from the recording of run {}:\n",
                self.recording.turns.len(),
                self.recording.run_id
            );
            let _ = write!(diff, "{out}");
            return Err(LlmError::Replay { turn: number, diff: diff.trim_end().to_owned() });
        }
        self.served.fetch_add(1, Ordering::Relaxed);
        Ok(turn.response.clone())
    }
}

/// The images an export's messages refer to, by key: the data of its
/// [`IMAGE_DOCUMENT`](crate::image::IMAGE_DOCUMENT) documents.
fn stored_images(export: &RunExport) -> Result<HashMap<&str, crate::image::Image>, ReplayError> {
    let mut images = HashMap::new();
    for doc in export.documents.iter().filter(|d| d.doc_type == crate::image::IMAGE_DOCUMENT) {
        let Some(key) = doc.key.as_deref() else { continue };
        let saved: crate::image::ImageDocument = doc.read().map_err(|e| ReplayError::Export(e.to_string()))?;
        images.insert(key, crate::image::Image::Base64 { media_type: saved.media_type, data: saved.data });
    }
    Ok(images)
}

/// Replaces a message's references to stored images with their data.
fn resolve_images(message: &mut Message, images: &HashMap<&str, crate::image::Image>) -> Result<(), ReplayError> {
    for block in &mut message.content {
        let crate::message::ContentBlock::Image { source, .. } = block else { continue };
        let crate::image::Image::Stored { key, .. } = &*source else { continue };
        let Some(data) = images.get(key.as_str()) else {
            return Err(ReplayError::Export(format!("the image `{key}` a message refers to is not in the export")));
        };
        *source = data.clone();
    }
    Ok(())
}
