//! What-if forks: a new run from a past checkpoint of another, with edits.
//!
//! [`Runtime::fork`](crate::Runtime::fork) copies a run up to a step and drives the
//! copy on; [`Runtime::fork_with`](crate::Runtime::fork_with) first applies
//! [`ForkEdits`]: a replaced state, and for workflows that take model turns (the
//! agent), another system prompt or model for the fork's turns.
//!
//! The edits are one step of the fork's own history, transition [`FORK_TRANSITION`]
//! (from the checkpoint's place to the same place), with the edited state and a
//! [`FORK_DOCUMENT`] document that says what changed ([`ForkRecord`]): what Studio
//! and `show` print as "forked from RUN at step N with: system prompt changed". The
//! store writes that step in the transaction that copies the source
//! ([`Store::fork`](crate::Store::fork) with a [`ForkStep`](crate::ForkStep)), so
//! no fork is ever stored without its edits. Everything is checked before anything
//! is stored. A system prompt or model lives
//! in the state under [`FORK_SETTINGS_KEY`] ([`ForkSettings`]), so a fork resumed
//! after a restart keeps it; a workflow whose state has no such field refuses them
//! ([`ForkError::Unsupported`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::RunId;

/// The transition name of the step that applies a fork's edits.
pub const FORK_TRANSITION: &str = "fork_edits";
/// The document type of a fork's [`ForkRecord`].
pub const FORK_DOCUMENT: &str = "loopstack_fork";
/// The field of a workflow's state (a JSON object) that keeps a fork's
/// [`ForkSettings`]; the agent's state has it.
pub const FORK_SETTINGS_KEY: &str = "fork_settings";

/// How a fork differs from the checkpoint it starts from.
///
/// ```
/// use loopstack_core::ForkEdits;
///
/// let edits = ForkEdits::new().system("Answer in French.").model("scripted", "m2");
/// assert_eq!(edits.changes(), ["system prompt changed", "model: scripted:m2"]);
/// let from_json: ForkEdits = serde_json::from_value(serde_json::json!({"model": "scripted:m2"})).unwrap();
/// assert_eq!(from_json.model.as_deref(), Some("scripted:m2"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ForkEdits {
    /// The whole state in place of the checkpoint's, as JSON: it must read as the
    /// workflow's state type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    /// The system prompt of the fork's model turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The model of the fork's turns, as `PROVIDER:MODEL` (a provider the workflow
    /// registered, and its model name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Keeps the first this many messages of the conversation (the documents
    /// tagged `conversation`) and drops the rest: the fork starts from the step
    /// before the one that saved the first message dropped, which must be at or
    /// before the step asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_messages: Option<usize>,
    /// Conversation messages whose text the fork replaces (see [`MessageEdit`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<MessageEdit>,
}

/// A conversation message whose text a fork replaces: message `index` (from 0, in
/// the order of the documents tagged `conversation` at the fork's step) keeps its
/// role and its other blocks (tool calls, tool results, images), and its text blocks
/// become one block of `text`, where the first was. The old text stays in the
/// document's history; the fork's edits step saves the new version.
///
/// A conversation document holds a message as `loopstack::llm::Message` serializes
/// it: `{"role": .., "content": [{"type": "text", "text": ..}, ..]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct MessageEdit {
    /// The message's position in the conversation, from 0.
    pub index: usize,
    /// Its new text.
    pub text: String,
}

impl ForkEdits {
    /// No edits: a plain fork.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the state.
    #[must_use]
    pub fn state(mut self, state: Value) -> Self {
        self.state = Some(state);
        self
    }

    /// Sets the system prompt of the fork's turns.
    #[must_use]
    pub fn system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Sets the provider and model of the fork's turns.
    #[must_use]
    pub fn model(mut self, provider: &str, model: &str) -> Self {
        self.model = Some(format!("{provider}:{model}"));
        self
    }

    /// Keeps the first `messages` messages of the conversation.
    #[must_use]
    pub fn keep_messages(mut self, messages: usize) -> Self {
        self.keep_messages = Some(messages);
        self
    }

    /// Replaces the text of conversation message `index` (from 0): see
    /// [`MessageEdit`]. Edits of one message: the last one counts.
    #[must_use]
    pub fn message_text(mut self, index: usize, text: impl Into<String>) -> Self {
        self.messages.push(MessageEdit { index, text: text.into() });
        self
    }

    /// Whether there is nothing to edit.
    pub fn is_empty(&self) -> bool {
        self.state.is_none()
            && self.system.is_none()
            && self.model.is_none()
            && self.keep_messages.is_none()
            && self.messages.is_empty()
    }

    /// The model edit as (provider, model), checked.
    pub fn provider_and_model(&self) -> Result<Option<(&str, &str)>, ForkError> {
        let Some(model) = self.model.as_deref() else { return Ok(None) };
        match model.split_once(':') {
            Some((provider, name)) if !provider.is_empty() && !name.is_empty() => Ok(Some((provider, name))),
            _ => Err(ForkError::BadModel { model: model.to_owned() }),
        }
    }

    /// What the edits change, one line each, as `show` and Studio list them.
    pub fn changes(&self) -> Vec<String> {
        let mut changes = Vec::new();
        if self.state.is_some() {
            changes.push("state replaced".to_owned());
        }
        if self.system.is_some() {
            changes.push("system prompt changed".to_owned());
        }
        if let Some(model) = &self.model {
            changes.push(format!("model: {model}"));
        }
        if let Some(keep) = self.keep_messages {
            changes.push(format!("conversation cut to its first {keep} messages"));
        }
        let mut edited: Vec<usize> = self.messages.iter().map(|m| m.index).collect();
        edited.sort_unstable();
        edited.dedup();
        changes.extend(edited.into_iter().map(|i| format!("message {i} edited")));
        changes
    }
}

/// The system prompt and model a fork's turns use, kept in the state under
/// [`FORK_SETTINGS_KEY`]; `None` fields keep the workflow's own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ForkSettings {
    /// The system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The provider, registered with the workflow's models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// What a fork's [`FORK_DOCUMENT`] document holds: where it came from and what
/// changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ForkRecord {
    /// The run forked.
    pub source: RunId,
    /// Its step the fork started from.
    pub step: u64,
    /// What changed, one line each ([`ForkEdits::changes`]).
    pub changes: Vec<String>,
    /// The edits as asked.
    pub edits: ForkEdits,
}

/// Why a fork was refused; nothing was stored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ForkError {
    /// The source run has no checkpoint at that step.
    #[error("run {run_id} has no step {step}: its last step is {last}")]
    UnknownStep {
        /// The source run.
        run_id: RunId,
        /// The step asked for.
        step: u64,
        /// The source's last step.
        last: u64,
    },
    /// The replacement state does not read as the workflow's state type.
    #[error("the state does not fit workflow `{workflow}`: {reason}")]
    BadState {
        /// The workflow.
        workflow: &'static str,
        /// Why it does not read.
        reason: String,
    },
    /// The model is not written `PROVIDER:MODEL`.
    #[error("model `{model}`: expected PROVIDER:MODEL, such as openai:gpt-4o-mini")]
    BadModel {
        /// As given.
        model: String,
    },
    /// The provider is not one the workflow has a model for.
    #[error("no model is registered as provider `{provider}`; registered: {}", registered.join(", "))]
    UnknownModel {
        /// The provider asked for.
        provider: String,
        /// The providers registered.
        registered: Vec<String>,
    },
    /// The conversation at the step asked for has no message to drop.
    #[error("run {run_id} has {messages} messages at step {step}: there is none to drop after the first {keep}")]
    NothingToDrop {
        /// The source run.
        run_id: RunId,
        /// The step asked for.
        step: u64,
        /// Its messages at that step.
        messages: usize,
        /// The messages to keep.
        keep: usize,
    },
    /// The last message kept and the first one dropped were saved by one step,
    /// which a fork cannot split.
    #[error("run {run_id}: messages {kept} and {dropped} were saved by one step ({step}); keep fewer or more")]
    SplitStep {
        /// The source run.
        run_id: RunId,
        /// The index of the last message kept.
        kept: usize,
        /// The index of the first message dropped.
        dropped: usize,
        /// The step that saved both.
        step: u64,
    },
    /// The conversation at the fork's step has no message at that index.
    #[error("run {run_id} has {messages} messages at step {step}: there is no message {index} to edit")]
    NoMessage {
        /// The source run.
        run_id: RunId,
        /// The fork's step.
        step: u64,
        /// The index asked for.
        index: usize,
        /// The messages at that step.
        messages: usize,
    },
    /// The message has no text block to replace (only tool calls or results), or
    /// does not read as a message.
    #[error("message {index} has no text to edit: {reason}")]
    NoText {
        /// The message's index.
        index: usize,
        /// What it holds instead.
        reason: &'static str,
    },
    /// The workflow's state keeps no system prompt or model.
    #[error(
        "workflow `{workflow}` takes no {edit} edit: its state has no `fork_settings`; only agents take model turns"
    )]
    Unsupported {
        /// The workflow.
        workflow: &'static str,
        /// The edit refused.
        edit: &'static str,
    },
}

/// Applies `edits` to the JSON of a checkpoint's state: the replacement state, and
/// the system prompt and model merged into its [`FORK_SETTINGS_KEY`] object.
pub(crate) fn edit_state(workflow: &'static str, mut state: Value, edits: &ForkEdits) -> Result<Value, ForkError> {
    if let Some(replaced) = &edits.state {
        state = replaced.clone();
    }
    let provider_and_model = edits.provider_and_model()?;
    if edits.system.is_none() && provider_and_model.is_none() {
        return Ok(state);
    }
    let edit = if edits.system.is_some() { "system prompt" } else { "model" };
    let Value::Object(object) = &mut state else {
        return Err(ForkError::Unsupported { workflow, edit });
    };
    let settings = object.entry(FORK_SETTINGS_KEY).or_insert_with(|| Value::Object(Default::default()));
    let mut current: ForkSettings = serde_json::from_value(settings.clone()).unwrap_or_default();
    if let Some(system) = &edits.system {
        current.system = Some(system.clone());
    }
    if let Some((provider, model)) = provider_and_model {
        current.provider = Some(provider.to_owned());
        current.model = Some(model.to_owned());
    }
    *settings = serde_json::to_value(current).map_err(|e| ForkError::BadState { workflow, reason: e.to_string() })?;
    Ok(state)
}

/// The step to fork run `run_id` from so that its conversation keeps its first
/// `keep` messages: the one before the step that saved message `keep`.
pub(crate) fn step_keeping(
    documents: &[std::sync::Arc<crate::Document>],
    run_id: RunId,
    step: u64,
    keep: usize,
) -> Result<u64, ForkError> {
    let messages: Vec<u64> =
        documents.iter().filter(|d| d.step <= step && d.has_tag("conversation")).map(|d| d.step).collect();
    let Some(&dropped) = messages.get(keep) else {
        return Err(ForkError::NothingToDrop { run_id, step, messages: messages.len(), keep });
    };
    if keep > 0 && messages[keep - 1] == dropped {
        return Err(ForkError::SplitStep { run_id, kept: keep - 1, dropped: keep, step: dropped });
    }
    Ok(dropped.saturating_sub(1))
}

/// The fork settings a state's JSON keeps, if any.
pub(crate) fn settings_of(state: &str) -> Option<ForkSettings> {
    #[derive(Deserialize)]
    struct Settings {
        fork_settings: Option<ForkSettings>,
    }
    serde_json::from_str::<Settings>(state).ok().and_then(|s| s.fork_settings)
}

/// Whether a state's JSON (as the workflow serializes it again) kept its settings.
pub(crate) fn kept_settings(state: &Value) -> bool {
    state.get(FORK_SETTINGS_KEY).is_some_and(|s| s.as_object().is_some_and(|o| !o.is_empty()))
}

/// The new versions of the conversation messages `edits` change, from `documents`
/// (the run's documents as they were at `step`), to be saved by the fork's edits
/// step as `saved_by`.
pub(crate) fn edit_messages(
    documents: &[std::sync::Arc<crate::Document>],
    run_id: RunId,
    step: u64,
    edits: &[MessageEdit],
    saved_by: u64,
) -> Result<Vec<crate::Document>, ForkError> {
    let messages: Vec<&crate::Document> =
        documents.iter().filter(|d| d.has_tag("conversation")).map(|d| &**d).collect();
    let mut edited: Vec<(usize, Value)> = Vec::new();
    for edit in edits {
        let Some(doc) = messages.get(edit.index) else {
            return Err(ForkError::NoMessage { run_id, step, index: edit.index, messages: messages.len() });
        };
        let position = match edited.iter().position(|(i, _)| *i == edit.index) {
            Some(p) => p,
            None => {
                let value =
                    doc.value().map_err(|_| ForkError::NoText { index: edit.index, reason: "it is not JSON" })?;
                edited.push((edit.index, value));
                edited.len() - 1
            }
        };
        replace_text(&mut edited[position].1, &edit.text)
            .map_err(|reason| ForkError::NoText { index: edit.index, reason })?;
    }
    edited
        .into_iter()
        .map(|(index, value)| {
            let doc = messages[index];
            let content = serde_json::value::to_raw_value(&value)
                .map_err(|_| ForkError::NoText { index, reason: "it does not write as JSON" })?;
            Ok(crate::Document { version: doc.version + 1, content, step: saved_by, ..doc.clone() })
        })
        .collect()
}

/// Replaces the text blocks of a message's JSON with one block of `text`.
fn replace_text(message: &mut Value, text: &str) -> Result<(), &'static str> {
    let Some(blocks) = message.get_mut("content").and_then(Value::as_array_mut) else {
        return Err("it is not a message with content blocks");
    };
    let is_text = |b: &Value| b.get("type").and_then(Value::as_str) == Some("text");
    let Some(first) = blocks.iter().position(is_text) else {
        return Err("it holds only tool calls, tool results or images");
    };
    let mut i = 0;
    blocks.retain(|b| {
        let keep = i <= first || !is_text(b);
        i += 1;
        keep
    });
    // The first text block keeps its other fields (a cache breakpoint, say).
    blocks[first]["text"] = Value::String(text.to_owned());
    Ok(())
}
