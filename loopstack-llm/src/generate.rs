//! `LlmGenerateText`: one model turn from a workflow transition.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt as _;
use loopstack_core::{DocumentType, EventKind, RunContext, SaveOptions, ToolRegistry, ToolSpec};
use serde::{Deserialize, Serialize};
use tracing::Instrument as _;

use crate::error::AgentError;
use crate::error::LlmError;
use crate::message::{Message, StopReason, Usage, rename_duplicate_ids};
use crate::model::{ChatModel, ChatRequest, ChatResponse, ModelSettings, ResponseSchema, StreamEvent};

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

/// The prefix of the tag that names a conversation: the messages of conversation
/// `critic` are tagged `conversation` and `conversation:critic`.
pub const NAMED_CONVERSATION_PREFIX: &str = "conversation:";

/// The run's default conversation: its message documents tagged `conversation`
/// and belonging to no named conversation, in order.
pub fn conversation(cx: &RunContext) -> Result<Vec<Message>, serde_json::Error> {
    conversation_named(cx, None)
}

/// The messages of one conversation of the run, in order: the default one for
/// `None`, else the one named so (see [`GenerateOptions::conversation`]). A
/// workflow with two agents, or an agent and a critic, keeps one each.
pub fn conversation_named(cx: &RunContext, name: Option<&str>) -> Result<Vec<Message>, serde_json::Error> {
    // Sized first: collecting results cannot reserve, and would grow (and move) the
    // messages as it reads them, every model turn.
    let docs = || cx.documents().iter().filter(|d| in_conversation(d, name));
    let mut messages = Vec::with_capacity(docs().count());
    for doc in docs() {
        // Messages saved in this drive are at hand; older ones are read.
        let mut message = Arc::unwrap_or_clone(cx.read_shared::<Message>(doc)?);
        if crate::image::shows_images(doc) {
            crate::image::resolve_images(cx, &mut message)?;
        }
        messages.push(message);
    }
    Ok(messages)
}

/// What `window` sends of conversation `name`: the messages it leaves out are not read.
fn conversation_window(
    cx: &RunContext,
    name: Option<&str>,
    window: &crate::ContextWindow,
) -> Result<Vec<Message>, serde_json::Error> {
    let docs = cx.documents().iter().filter(|d| in_conversation(d, name));
    let sent = docs.enumerate().filter(|(i, _)| *i == 0 || *i >= window.from);
    let mut messages = Vec::new();
    for (_, doc) in sent {
        let mut message = Arc::unwrap_or_clone(cx.read_shared::<Message>(doc)?);
        if crate::image::shows_images(doc) {
            crate::image::resolve_images(cx, &mut message)?;
        }
        messages.push(message);
    }
    if let Some(first) = messages.first_mut() {
        crate::context::add_summary(first, window);
    }
    Ok(messages)
}

/// Whether a document is a message of conversation `name` (the default for `None`).
pub(crate) fn in_conversation(d: &loopstack_core::Document, name: Option<&str>) -> bool {
    if d.doc_type != MESSAGE_DOCUMENT || !d.has_tag(CONVERSATION_TAG) {
        return false;
    }
    let mut named = d.tags.iter().filter_map(|t| t.strip_prefix(NAMED_CONVERSATION_PREFIX));
    match name {
        None => named.next().is_none(),
        Some(name) => named.any(|n| n == name),
    }
}

/// The tokens of each model turn of a run, in order, from its message documents
/// (each assistant message keeps its turn's usage in its `usage` metadata): pass
/// [`Store::documents`](loopstack_core::Store::documents) or
/// [`RunContext::documents`].
pub fn turn_usage(documents: &[Arc<loopstack_core::Document>]) -> Vec<Usage> {
    documents
        .iter()
        .filter(|d| d.doc_type == MESSAGE_DOCUMENT)
        .filter_map(|d| d.metadata.get("usage"))
        .filter_map(|u| serde_json::from_value(u.clone()).ok())
        .collect()
}

/// Saves `message` to conversation `name` of the run (the default for `None`).
///
/// The data of its images is saved once as image documents of the run, which the
/// message refers to (see [`crate::image`]).
pub fn save_message(
    cx: &mut RunContext,
    message: &Message,
    name: Option<&str>,
    options: SaveOptions,
) -> Result<(), serde_json::Error> {
    if message.content.iter().any(|b| matches!(b, crate::ContentBlock::Image { .. })) {
        return crate::image::save_with_images(cx, message.clone(), name, options);
    }
    save_shared_message(cx, Arc::new(message.clone()), name, options)
}

/// Saves a shared message to conversation `name`; the steps after it read it
/// without parsing it again.
pub(crate) fn save_shared_message(
    cx: &mut RunContext,
    message: Arc<Message>,
    name: Option<&str>,
    options: SaveOptions,
) -> Result<(), serde_json::Error> {
    let options = match name {
        Some(name) => options.tag(format!("{NAMED_CONVERSATION_PREFIX}{name}")),
        None => options,
    };
    cx.save_shared(message, options)?;
    Ok(())
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
    ///
    /// # Panics
    ///
    /// When a model is already registered under that name: the second would
    /// silently replace the first. Register two models of one provider (two
    /// OpenAI-compatible servers, say) under names of your own with
    /// [`Models::with_named`], and name them in [`GenerateOptions::provider`].
    #[must_use]
    #[track_caller]
    pub fn with(self, model: impl ChatModel) -> Self {
        let name = model.provider();
        self.with_named(name, model)
    }

    /// Adds a model under a name of your choice.
    ///
    /// # Panics
    ///
    /// When a model is already registered under `name`; [`Models::insert`]
    /// returns the error instead.
    #[must_use]
    #[track_caller]
    pub fn with_named(mut self, name: impl Into<String>, model: impl ChatModel) -> Self {
        if let Err(e) = self.insert(name, Arc::new(model)) {
            panic!("{e}");
        }
        self
    }

    /// Adds a model under a name of your choice, refusing a name already taken.
    pub fn insert(&mut self, name: impl Into<String>, model: Arc<dyn ChatModel>) -> Result<&mut Self, AgentError> {
        let name = name.into();
        if self.by_provider.contains_key(&name) {
            return Err(AgentError::DuplicateModel { name });
        }
        self.by_provider.insert(name, model);
        Ok(self)
    }

    /// Whether a model is registered under `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.by_provider.contains_key(name)
    }

    /// The names the models are registered under, sorted.
    pub fn providers(&self) -> Vec<String> {
        self.by_provider.keys().cloned().collect()
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
///
/// Serialized flat: the [settings](ModelSettings)' fields sit beside `provider`,
/// `model` and `tools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GenerateOptions {
    /// The provider, a name registered in [`Models`].
    pub provider: String,
    /// The model.
    pub model: String,
    /// The system prompt, output limit, temperature and stop sequences.
    #[serde(flatten)]
    pub settings: ModelSettings,
    /// The names of the tools to offer.
    pub tools: Vec<String>,
    /// The conversation the turn reads and adds to: the run's default one when
    /// `None`. Two agents (or an agent and a critic) in one workflow keep a
    /// conversation each by naming them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    /// Models tried in order when the model before fails with rate limiting,
    /// overload, a server error, a connection error or a timeout, after its own
    /// retries (see [`GenerateOptions::fallback`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<ModelRef>,
}

/// A model of a fallback chain: a provider registered in [`Models`] and a model name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelRef {
    /// The provider, a name registered in [`Models`].
    pub provider: String,
    /// The model.
    pub model: String,
}

impl ModelRef {
    /// `model` of `provider`.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        Self { provider: provider.into(), model: model.into() }
    }
}

impl GenerateOptions {
    /// A turn with `model` of `provider`, no system prompt and no tools.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            model: model.into(),
            settings: ModelSettings::default(),
            tools: Vec::new(),
            conversation: None,
            fallbacks: Vec::new(),
        }
    }

    crate::model::settings_setters!(s => s.settings);

    /// Replaces the settings.
    #[must_use]
    pub fn settings(mut self, settings: ModelSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Sets the tools to offer, by name.
    #[must_use]
    pub fn tools<S: Into<String>>(mut self, tools: impl IntoIterator<Item = S>) -> Self {
        self.tools = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Adds `model` of `provider` (a name registered in [`Models`]) to the end of the
    /// fallback chain.
    ///
    /// A turn asks the options' model first. When that fails with an error that says
    /// the model is unavailable for now ([`LlmError::is_unavailable`]: rate limited,
    /// overloaded, a server or connection error, a timeout), after the provider's own
    /// retries, the turn asks the next model of the chain with the same request
    /// (settings a provider does not have are not sent to it), and so on. Any other
    /// error (a refused request, a wrong key) ends the turn at once. The message saved
    /// says which model answered (metadata `provider` and `model`, and `fallbacks`
    /// with each failure before it); each failure is also an event
    /// ([`EventKind::Custom`] named `model_fallback`). When every model fails, the
    /// error is [`AgentError::AllModelsFailed`], listing each failure. A turn is
    /// committed only when it returns, so a turn run again (after a crash, a retry)
    /// starts from the first model of the chain.
    ///
    /// ```
    /// use loopstack_llm::GenerateOptions;
    ///
    /// let options = GenerateOptions::new("anthropic", "claude-sonnet-4-5")
    ///     .fallback("anthropic", "claude-haiku-4-5")
    ///     .fallback("openai", "gpt-4o-mini");
    /// assert_eq!(options.fallbacks.len(), 2);
    /// ```
    #[must_use]
    pub fn fallback(mut self, provider: impl Into<String>, model: impl Into<String>) -> Self {
        self.fallbacks.push(ModelRef::new(provider, model));
        self
    }

    /// Names the conversation the turn reads and adds to.
    #[must_use]
    pub fn conversation(mut self, name: impl Into<String>) -> Self {
        self.conversation = Some(name.into());
        self
    }
}

/// What a turn offers beyond its options: tools that are not in the registry
/// (such as the agent's `respond` tool for typed answers) and a JSON Schema the
/// reply must follow, for providers with structured output.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TurnExtras {
    /// Tools offered besides the options' tools; the model's calls to them are
    /// the caller's to answer.
    pub tools: Vec<Arc<ToolSpec>>,
    /// The schema the reply's text must follow.
    pub response_schema: Option<ResponseSchema>,
    /// What of the conversation is sent, when not all of it (see
    /// [`ContextPolicy`](crate::ContextPolicy)).
    pub context: Option<crate::ContextWindow>,
    /// The agent taking the turn, recorded in the message's metadata (`agent`) when
    /// a run may be handed between agents.
    pub agent: Option<&'static str>,
}

/// No extras, for turns without any: a static, so a turn's future need not hold one.
pub(crate) static NO_EXTRAS: TurnExtras =
    TurnExtras { tools: Vec::new(), response_schema: None, context: None, agent: None };

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
    /// A turn that produced `message` and stopped for `stop_reason`, with no usage,
    /// an empty provider and model name and no tools offered; set them with the
    /// builder methods. For tests of guards and routing that read a turn:
    ///
    /// ```
    /// use loopstack_llm::{ContentBlock, GenerateResult, Message, Role, StopReason, ToolUse, Usage};
    ///
    /// let call = ToolUse::new("call_1", "get_weather", serde_json::json!({"location": "Oslo"}));
    /// let message = Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] };
    /// let turn = GenerateResult::new(message, StopReason::ToolUse)
    ///     .usage(Usage::new(12, 3))
    ///     .provider("scripted")
    ///     .model("scripted-weather")
    ///     .offered_tools(["get_weather"]);
    /// assert!(turn.wants_tools());
    /// assert!(!GenerateResult::new(Message::assistant("Sunny."), StopReason::EndTurn).wants_tools());
    /// ```
    pub fn new(message: Message, stop_reason: StopReason) -> Self {
        Self {
            message,
            stop_reason,
            usage: Usage::default(),
            provider: String::new(),
            model: String::new(),
            offered_tools: Vec::new(),
        }
    }

    /// Sets the tokens the turn used.
    #[must_use]
    pub fn usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// Sets the provider.
    #[must_use]
    pub fn provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = provider.into();
        self
    }

    /// Sets the model name.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Sets the names of the tools offered in the turn.
    #[must_use]
    pub fn offered_tools<S: Into<String>>(mut self, tools: impl IntoIterator<Item = S>) -> Self {
        self.offered_tools = tools.into_iter().map(Into::into).collect();
        self
    }

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
    /// The replay record last built, by its fingerprint: an agent's runs send the
    /// same settings and tools, so each run's first reply clones it instead of
    /// formatting every tool's entry again.
    recorded: Arc<std::sync::Mutex<Option<(String, serde_json::Value)>>>,
}

impl LlmGenerateText {
    /// A step over these models and tools.
    pub fn new(models: Models, tools: ToolRegistry) -> Self {
        Self { models, tools, recorded: Arc::default() }
    }

    /// The replay record of `request`, whose fingerprint is `fingerprint`.
    fn record_of(&self, request: &ChatRequest, fingerprint: &str) -> serde_json::Value {
        let mut last = self.recorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((fp, config)) = &*last
            && fp == fingerprint
        {
            return config.clone();
        }
        let config = crate::recording::config(request, fingerprint);
        *last = Some((fingerprint.to_owned(), config.clone()));
        config
    }

    /// The tools.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// The models.
    pub fn models(&self) -> &Models {
        &self.models
    }

    pub(crate) fn models_mut(&mut self) -> &mut Models {
        &mut self.models
    }

    /// Runs one turn.
    pub async fn call(&self, cx: &mut RunContext, options: &GenerateOptions) -> Result<GenerateResult, AgentError> {
        self.call_with(cx, options, &NO_EXTRAS).await
    }

    /// Runs one turn that also offers `extras`.
    ///
    /// When someone subscribed to run events
    /// ([`Runtime::subscribe`](loopstack_core::Runtime::subscribe)) the reply is
    /// streamed and each piece of text is reported as it arrives
    /// ([`EventKind::TextDelta`]); the turn's token usage is reported either way
    /// ([`EventKind::Usage`]). The result is the same whether streamed or not: a
    /// stream that breaks with a retryable error is asked again without streaming.
    pub async fn call_with(
        &self,
        cx: &mut RunContext,
        options: &GenerateOptions,
        extras: &TurnExtras,
    ) -> Result<GenerateResult, AgentError> {
        let turn = self.turn(cx, options, extras).await?;
        Ok(GenerateResult {
            message: Arc::unwrap_or_clone(turn.message),
            stop_reason: turn.stop_reason,
            usage: turn.usage,
            provider: turn.provider.to_owned(),
            model: turn.model,
            offered_tools: options.tools.clone(),
        })
    }

    /// [`LlmGenerateText::call_with`], with the message shared with the saved
    /// document: the agent's turns read it without a copy.
    pub(crate) async fn turn(
        &self,
        cx: &mut RunContext,
        options: &GenerateOptions,
        extras: &TurnExtras,
    ) -> Result<Turn, AgentError> {
        let model = self.models.get(&options.provider)?;
        // The chain is checked before the first model is asked, so that a fallback
        // that is not registered is an error at once, not when it is needed.
        let fallbacks = options
            .fallbacks
            .iter()
            .map(|f| Ok((self.models.get(&f.provider)?, f)))
            .collect::<Result<Vec<_>, AgentError>>()?;
        let mut tools = options
            .tools
            .iter()
            .map(|name| {
                self.tools.spec(name).cloned().ok_or_else(|| AgentError::UnknownTool {
                    tool: name.clone(),
                    available: self.tools.names().map(str::to_owned).collect(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        tools.extend(extras.tools.iter().cloned());
        let messages = match &extras.context {
            Some(window) => conversation_window(cx, options.conversation.as_deref(), window)?,
            None => conversation_named(cx, options.conversation.as_deref())?,
        };
        let mut request = ChatRequest::new(options.model.clone(), messages).tools(tools);
        request.settings.clone_from(&options.settings);
        request.response_schema.clone_from(&extras.response_schema);
        // What the turn sent besides the conversation, for replays: its fingerprint
        // and itself, with the first reply sent under it (the replies after it that
        // sent the same record nothing).
        let fingerprint = crate::recording::fingerprint_text(crate::recording::fingerprint(&request));
        let recorded = (!crate::recording::same_as_last(cx, options.conversation.as_deref(), &fingerprint))
            .then(|| self.record_of(&request, &fingerprint));

        // Named after OpenTelemetry's GenAI conventions, so an OTLP exporter (the
        // `otel` feature) sends what trace backends read: a span `chat {model}`.
        let span = tracing::info_span!(
            "loopstack.llm",
            // Formatted only when the span is recorded.
            otel.name = tracing::field::display(format_args!("chat {}", options.model)),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = model.provider(),
            gen_ai.request.model = %options.model,
            // The agent that has the conversation (a team's member), else the run's workflow.
            gen_ai.agent.name = extras.agent.unwrap_or(cx.workflow()),
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.response.finish_reasons = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let started = Instant::now();
        let first = ask(model.as_ref(), &request, cx).instrument(span.clone()).await;
        let (mut response, model, failures) = match first {
            Ok(response) => (response, model, Vec::new()),
            Err(error) if fallbacks.is_empty() || !error.is_unavailable() => return Err(error.into()),
            Err(error) => {
                // Boxed: only turns whose model failed pay for the chain's state.
                Box::pin(fall_back(model, &options.model, error, &fallbacks, &mut request, cx))
                    .instrument(span.clone())
                    .await?
            }
        };
        for (old, new) in rename_duplicate_ids(&mut response.message) {
            span.in_scope(|| tracing::warn!(id = %old, new_id = %new, "the model repeated a tool call id; renamed"));
        }
        // Nobody listens to a disabled span: its fields would only cost (tracing's
        // `log` feature turns each record into a check of the logger).
        if !span.is_disabled() {
            // As i64: tracing-opentelemetry exports a u64 field as a string.
            span.record("gen_ai.response.model", response.model.as_str());
            span.record("gen_ai.usage.input_tokens", crate::usage::as_i64(response.usage.input_tokens));
            span.record("gen_ai.usage.output_tokens", crate::usage::as_i64(response.usage.output_tokens));
            span.record("gen_ai.response.finish_reasons", response.stop_reason.as_str());
            span.record("latency_ms", crate::usage::as_i64(started.elapsed().as_millis()));
        }

        let provider = model.provider();
        cx.emit(|| EventKind::Usage {
            provider: provider.to_owned(),
            model: response.model.clone(),
            input_tokens: response.usage.input_tokens,
            output_tokens: response.usage.output_tokens,
            cache_read_input_tokens: response.usage.cache_read_input_tokens,
            cache_creation_input_tokens: response.usage.cache_creation_input_tokens,
        });
        let mut meta = SaveOptions::new()
            .meta("provider", provider)
            .meta("model", response.model.as_str())
            .meta("usage", serde_json::to_value(response.usage)?)
            .meta("stop_reason", response.stop_reason.as_str());
        if !failures.is_empty() {
            meta = meta.meta("fallbacks", serde_json::to_value(&failures)?);
        }
        if let Some(agent) = extras.agent {
            meta = meta.meta("agent", agent);
        }
        if let Some(config) = recorded {
            meta = meta.meta(crate::recording::REQUEST_META, config);
        }
        // Kept shared in the context, so the steps after this turn read the message
        // without parsing it again.
        let message = Arc::new(response.message);
        save_shared_message(cx, message.clone(), options.conversation.as_deref(), meta)?;
        Ok(Turn { message, stop_reason: response.stop_reason, usage: response.usage, provider, model: response.model })
    }
}

/// One model turn as [`LlmGenerateText::turn`] gives it: a [`GenerateResult`] whose
/// message is the saved document's, shared.
#[derive(Debug)]
pub(crate) struct Turn {
    pub(crate) message: Arc<Message>,
    pub(crate) stop_reason: StopReason,
    pub(crate) usage: Usage,
    pub(crate) provider: &'static str,
    pub(crate) model: String,
}

/// One model's reply: streamed when someone subscribed to the run's events.
async fn ask(model: &dyn ChatModel, request: &ChatRequest, cx: &RunContext) -> Result<ChatResponse, LlmError> {
    if cx.events_enabled() {
        // Boxed: only subscribed runs stream, and its state would otherwise sit in
        // every model turn's future.
        Box::pin(streamed(model, request, cx)).await
    } else {
        model.chat(request).await
    }
}

/// A model of the chain that failed, as the saved message's metadata and
/// [`AgentError::AllModelsFailed`] list it.
#[derive(Debug, Serialize)]
pub(crate) struct Failure {
    provider: &'static str,
    model: String,
    error: String,
}

/// Asks the fallbacks in turn after the first model failed with `error`: the reply,
/// the model that gave it, and the failures before it.
async fn fall_back<'a>(
    first: &'a Arc<dyn ChatModel>,
    first_name: &str,
    error: LlmError,
    fallbacks: &[(&'a Arc<dyn ChatModel>, &ModelRef)],
    request: &mut ChatRequest,
    cx: &RunContext,
) -> Result<(ChatResponse, &'a Arc<dyn ChatModel>, Vec<Failure>), AgentError> {
    let mut errors = vec![(first.provider(), first_name.to_owned(), error)];
    for (model, to) in fallbacks {
        let (provider, from, error) = errors.last().expect("one failure at least");
        tracing::warn!(%error, next_provider = %to.provider, next_model = %to.model, "the model failed; falling back");
        cx.emit(|| EventKind::Custom {
            name: "model_fallback".into(),
            data: serde_json::json!({
                "provider": provider, "model": from, "error": error.to_string(),
                "next_provider": to.provider, "next_model": to.model,
            }),
        });
        request.model.clone_from(&to.model);
        match ask(model.as_ref(), request, cx).await {
            Ok(response) => {
                let failures = errors.iter().map(Failure::of).collect();
                return Ok((response, model, failures));
            }
            Err(error) => {
                let unavailable = error.is_unavailable();
                errors.push((model.provider(), to.model.clone(), error));
                if !unavailable {
                    break;
                }
            }
        }
    }
    Err(AgentError::AllModelsFailed { failures: errors.into_iter().map(|(_, _, error)| error).collect() })
}

impl Failure {
    fn of((provider, model, error): &(&'static str, String, LlmError)) -> Self {
        Self { provider, model: model.clone(), error: error.to_string() }
    }
}

/// Streams a reply, reporting its text as it arrives.
/// An error that breaks a stream after it started is not retried by the transport
/// (the reply had begun); a retryable one (overloaded, rate limited, a server error)
/// is, here, by asking again without streaming, which retries as a turn without a
/// subscriber would: the result does not depend on whether anyone listens. The text
/// already reported belongs to the broken reply; a [`EventKind::Custom`] event named
/// `stream_restarted` says so.
async fn streamed(model: &dyn ChatModel, request: &ChatRequest, cx: &RunContext) -> Result<ChatResponse, LlmError> {
    let mut stream = model.stream(request);
    // The calls being written: content index, id and tool name.
    let mut calls: Vec<(usize, String, String)> = Vec::new();
    let error = loop {
        match stream.next().await {
            Some(Ok(StreamEvent::TextDelta { text, .. })) => cx.emit(|| EventKind::TextDelta { text }),
            Some(Ok(StreamEvent::ToolUseStart { index, id, name })) => {
                cx.emit(|| EventKind::ToolCallDelta {
                    call_id: id.clone(),
                    name: name.clone(),
                    partial_json: String::new(),
                });
                calls.push((index, id, name));
            }
            Some(Ok(StreamEvent::ToolInputDelta { index, partial_json })) => {
                if let Some((_, id, name)) = calls.iter().find(|(i, ..)| *i == index) {
                    cx.emit(|| EventKind::ToolCallDelta { call_id: id.clone(), name: name.clone(), partial_json });
                }
            }
            Some(Ok(StreamEvent::Done(response))) => return Ok(response),
            Some(Err(e)) => break e,
            None => {
                break LlmError::MalformedResponse {
                    provider: model.provider(),
                    model: request.model.clone(),
                    message: "the stream ended without a complete response".to_owned(),
                };
            }
        }
    };
    drop(stream);
    if !error.is_retryable() {
        return Err(error);
    }
    tracing::warn!(%error, "the stream broke; asking again without streaming");
    cx.emit(|| EventKind::Custom {
        name: "stream_restarted".into(),
        data: serde_json::json!({ "error": error.to_string() }),
    });
    model.chat(request).await
}
