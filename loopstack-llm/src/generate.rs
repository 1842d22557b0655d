//! `LlmGenerateText`: one model turn from a workflow transition.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use loopstack_core::{DocumentType, RunContext, SaveOptions, ToolRegistry};
use serde::{Deserialize, Serialize};
use tracing::Instrument as _;

use crate::error::AgentError;
use crate::message::{Message, StopReason, Usage, rename_duplicate_ids};
use crate::model::{ChatModel, ChatRequest};

/// The type name of message documents.
pub const MESSAGE_DOCUMENT: &str = "llm_message";
/// The tag of the documents that make up a run's conversation.
pub const CONVERSATION_TAG: &str = "conversation";

/// A conversation message saved as a run document (type `llm_message`, tagged
/// `conversation`). The conversation sent to a model is the run's message documents
/// in order.
pub type LlmMessageDocument = Message;

impl DocumentType for Message {
    const TYPE: &'static str = MESSAGE_DOCUMENT;
    fn default_tags() -> &'static [&'static str] {
        &[CONVERSATION_TAG]
    }
}

/// The run's conversation: its message documents tagged `conversation`, in order.
pub fn conversation(cx: &RunContext) -> Result<Vec<Message>, serde_json::Error> {
    cx.documents()
        .iter()
        .filter(|d| d.doc_type == MESSAGE_DOCUMENT && d.has_tag(CONVERSATION_TAG))
        .map(|d| d.read())
        .collect()
}

/// The chat models a workflow can use, by provider name. Cloning is cheap.
#[derive(Clone, Default)]
pub struct Models {
    by_provider: BTreeMap<String, Arc<dyn ChatModel>>,
}

impl std::fmt::Debug for Models {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.by_provider.keys()).finish()
    }
}

impl Models {
    /// No models.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a model under its provider's name (`anthropic`, `openai`, `scripted` ...).
    #[must_use]
    pub fn with(mut self, model: impl ChatModel) -> Self {
        self.insert(model.provider(), Arc::new(model));
        self
    }

    /// Adds a model under a name of your choice.
    pub fn insert(&mut self, name: impl Into<String>, model: Arc<dyn ChatModel>) -> &mut Self {
        self.by_provider.insert(name.into(), model);
        self
    }

    /// The model registered under `provider`.
    pub fn get(&self, provider: &str) -> Result<&Arc<dyn ChatModel>, AgentError> {
        self.by_provider.get(provider).ok_or_else(|| AgentError::UnknownProvider {
            provider: provider.to_owned(),
            available: self.by_provider.keys().cloned().collect(),
        })
    }
}

/// How one model turn is made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GenerateOptions {
    /// The provider, a name registered in [`Models`].
    pub provider: String,
    /// The model.
    pub model: String,
    /// The system prompt.
    pub system: Option<String>,
    /// The names of the tools to offer.
    pub tools: Vec<String>,
    /// The output token limit.
    pub max_tokens: Option<u32>,
    /// The temperature.
    pub temperature: Option<f32>,
}

impl GenerateOptions {
    /// A turn with `model` of `provider`, no system prompt and no tools.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            model: model.into(),
            system: None,
            tools: Vec::new(),
            max_tokens: None,
            temperature: None,
        }
    }

    /// Sets the system prompt.
    #[must_use]
    pub fn system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Sets the tools to offer, by name.
    #[must_use]
    pub fn tools<S: Into<String>>(mut self, tools: impl IntoIterator<Item = S>) -> Self {
        self.tools = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the output token limit.
    #[must_use]
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Sets the temperature.
    #[must_use]
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }
}

/// What a model turn produced; small and serde, so a workflow keeps it in its state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GenerateResult {
    /// The assistant message (also saved as a document).
    pub message: Message,
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// Tokens used by this turn.
    pub usage: Usage,
    /// The provider.
    pub provider: String,
    /// The model, as the provider reported it.
    pub model: String,
    /// The tools offered in this turn, for [`LlmDelegateToolCalls`](crate::LlmDelegateToolCalls).
    pub offered_tools: Vec<String>,
}

impl GenerateResult {
    /// Whether the model asked for tools: the message has tool calls, whatever the
    /// stop reason (Anthropic may send calls with `end_turn`, a local server with
    /// `stop`, and a reply cut at `max_tokens` may hold calls); they must be answered
    /// before the conversation goes on.
    pub fn wants_tools(&self) -> bool {
        self.message.tool_uses().next().is_some()
    }
}

/// Makes one model turn from a transition: builds the request from the run's
/// conversation, offers only the listed tools (schemas from the registry, computed at
/// registration), saves the assistant message as a document (metadata: provider,
/// model, usage, stop reason) and returns it.
///
/// Tool call ids are made unique before the message is saved: a call that repeats the
/// id of an earlier call in the same reply gets the id `<id>_dup<n>` (`n` from 2), and
/// a warning is logged. Every call then has an id of its own, runs, and gets its own
/// result, and the conversation sent back to the provider stays consistent.
#[derive(Debug, Clone)]
pub struct LlmGenerateText {
    models: Models,
    tools: ToolRegistry,
}

impl LlmGenerateText {
    /// A step over these models and tools.
    pub fn new(models: Models, tools: ToolRegistry) -> Self {
        Self { models, tools }
    }

    /// The tools.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// The models.
    pub fn models(&self) -> &Models {
        &self.models
    }

    /// Runs one turn.
    pub async fn call(&self, cx: &mut RunContext, options: &GenerateOptions) -> Result<GenerateResult, AgentError> {
        let model = self.models.get(&options.provider)?;
        let tools = options
            .tools
            .iter()
            .map(|name| {
                self.tools.spec(name).cloned().ok_or_else(|| AgentError::UnknownTool {
                    tool: name.clone(),
                    available: self.tools.names().map(str::to_owned).collect(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut request = ChatRequest::new(options.model.clone(), conversation(cx)?).tools(tools);
        request.system.clone_from(&options.system);
        request.max_tokens = options.max_tokens;
        request.temperature = options.temperature;

        let span = tracing::info_span!(
            "loopstack.llm",
            provider = model.provider(),
            model = %options.model,
            input_tokens = tracing::field::Empty,
            output_tokens = tracing::field::Empty,
            stop_reason = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let started = Instant::now();
        let mut response = model.chat(&request).instrument(span.clone()).await?;
        for (old, new) in rename_duplicate_ids(&mut response.message) {
            span.in_scope(|| tracing::warn!(id = %old, new_id = %new, "the model repeated a tool call id; renamed"));
        }
        span.record("input_tokens", response.usage.input_tokens);
        span.record("output_tokens", response.usage.output_tokens);
        span.record("stop_reason", response.stop_reason.as_str());
        span.record("latency_ms", started.elapsed().as_millis() as u64);

        let provider = model.provider().to_owned();
        let meta = SaveOptions::new()
            .meta("provider", provider.as_str())
            .meta("model", response.model.as_str())
            .meta("usage", serde_json::to_value(response.usage)?)
            .meta("stop_reason", response.stop_reason.as_str());
        cx.save_with(&response.message, meta)?;
        Ok(GenerateResult {
            message: response.message,
            stop_reason: response.stop_reason,
            usage: response.usage,
            provider,
            model: response.model,
            offered_tools: options.tools.clone(),
        })
    }
}
