//! The chat-model trait, its requests, responses and stream events.

use std::sync::Arc;

use std::collections::BTreeMap;

use serde_json::Value;

use futures::StreamExt as _;
use futures::stream::BoxStream;

use crate::cache::PromptCache;
use crate::error::LlmError;
use crate::message::{ContentBlock, Message, StopReason, Usage};
use crate::tool::ToolDefinition;

/// How a model is asked to answer: the settings a [`ChatRequest`] carries, and
/// with it every model turn (`loopstack_llm::GenerateOptions`) and agent
/// (`loopstack_llm::Agent`). Each of those embeds one and has the same setters
/// (`system`, `max_tokens`, `temperature`, `stop_sequences`, `prompt_cache`,
/// `prompt_cache_key`, `settings`), which set
/// the fields here; a provider reads them from [`ChatRequest::settings`].
///
/// Serialized with its unset fields left out.
///
/// ```
/// use loopstack_model::{ChatRequest, Message, ModelSettings};
///
/// let settings = ModelSettings::new().system("Be brief.").max_tokens(256).stop_sequences(["###"]);
/// let request = ChatRequest::new("gpt-4o-mini", vec![Message::user("Hi")]).settings(settings.clone()).temperature(0.0);
/// assert_eq!(request.settings.system.as_deref(), Some("Be brief."));
/// assert_eq!((request.settings.max_tokens, request.settings.temperature), (Some(256), Some(0.0)));
/// assert_eq!(serde_json::to_value(&settings).unwrap(), serde_json::json!({
///     "system": "Be brief.", "max_tokens": 256, "stop_sequences": ["###"],
/// }));
/// ```
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct ModelSettings {
    /// The system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The most output tokens; providers that require it use their default when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Sequences that stop generation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// Where the prompt is marked for the provider's cache (Anthropic's `cache_control`
    /// breakpoints; [`PromptCache::Auto`] by default). Providers that cache by
    /// themselves ignore it.
    #[serde(default, skip_serializing_if = "PromptCache::is_auto")]
    pub prompt_cache: PromptCache,
    /// A key that groups requests sharing a prompt prefix for the provider's cache
    /// (OpenAI's `prompt_cache_key`); providers without one ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache_key: Option<String>,
    /// How hard the model thinks before it answers, on models that reason (see
    /// [`ReasoningEffort`]); each provider maps it to its own setting, and one whose
    /// model does not reason leaves it out. `None`: the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// The most tokens the model may spend reasoning, where the provider takes a
    /// budget (Anthropic's and Bedrock's `budget_tokens`, Gemini 2.5's
    /// `thinkingBudget`); providers that take only an effort derive none from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_budget: Option<u32>,
    /// Options of one provider that have no common setting (a service tier, safety
    /// settings, a guardrail), by provider name as [`ChatModel::provider`] gives it:
    /// each provider merges the object under its own name into the top level of its
    /// request body, over what it wrote, and ignores the others. Typed helpers in the
    /// provider modules build them; this is also the raw JSON escape hatch.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub provider_options: BTreeMap<String, Value>,
}

/// How hard a model thinks before it answers ([`ModelSettings::reasoning_effort`]).
///
/// Mapped per provider: OpenAI's `reasoning.effort` (Responses) and
/// `reasoning_effort` (Chat Completions) as named; Anthropic's extended thinking and
/// Bedrock's reasoning configuration as a token budget (unless
/// [`ModelSettings::reasoning_budget`] gives one: `Low` 1,024, `Medium` 4,096, `High`
/// 16,384 tokens; `None` turns thinking off); Gemini's `thinkingLevel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReasoningEffort {
    /// No reasoning, on models that allow it.
    None,
    /// As little as the model allows.
    Minimal,
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
}

impl ReasoningEffort {
    /// The effort's name on the wire: `none`, `minimal`, `low`, `medium`, `high`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Minimal => "minimal",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }

    /// The thinking budget in tokens a provider that takes only a budget uses for this
    /// effort when [`ModelSettings::reasoning_budget`] gives none; `None` for no thinking.
    pub fn default_budget(self) -> Option<u32> {
        match self {
            Self::None => None,
            Self::Minimal | Self::Low => Some(1024),
            Self::Medium => Some(4096),
            Self::High => Some(16384),
        }
    }
}

impl ModelSettings {
    /// Merges the options set for `provider` ([`ModelSettings::provider_options`])
    /// into the top level of a request body, over what the provider wrote. Errors
    /// with [`LlmError::Config`] when they are not a JSON object.
    pub fn apply_provider_options(
        &self,
        provider: &'static str,
        body: &mut serde_json::Map<String, Value>,
    ) -> Result<(), LlmError> {
        match self.provider_options.get(provider) {
            None => Ok(()),
            Some(Value::Object(options)) => {
                body.extend(options.iter().map(|(k, v)| (k.clone(), v.clone())));
                Ok(())
            }
            Some(other) => Err(LlmError::Config {
                provider,
                message: format!("the provider options for `{provider}` must be a JSON object, not `{other}`"),
            }),
        }
    }

    /// The thinking budget a provider that takes a budget asks for: the budget set,
    /// or the effort's [default](ReasoningEffort::default_budget); `None` when
    /// neither is set or the effort is [`ReasoningEffort::None`].
    pub fn thinking_budget(&self) -> Option<u32> {
        match (self.reasoning_budget, self.reasoning_effort) {
            (_, Some(ReasoningEffort::None)) => None,
            (Some(budget), _) => Some(budget),
            (None, effort) => effort.and_then(ReasoningEffort::default_budget),
        }
    }
}

/// The settings' setters, written once for [`ModelSettings`] and every type that
/// embeds one: `settings_setters!(s => s.settings)` names where the settings are.
#[doc(hidden)]
#[macro_export]
macro_rules! settings_setters {
    ($this:ident => $place:expr) => {
        /// Sets the system prompt.
        #[must_use]
        pub fn system(mut self, system: impl Into<String>) -> Self {
            let $this = &mut self;
            $place.system = Some(system.into());
            self
        }

        /// Sets the output token limit.
        #[must_use]
        pub fn max_tokens(mut self, max_tokens: u32) -> Self {
            let $this = &mut self;
            $place.max_tokens = Some(max_tokens);
            self
        }

        /// Sets the sampling temperature.
        #[must_use]
        pub fn temperature(mut self, temperature: f32) -> Self {
            let $this = &mut self;
            $place.temperature = Some(temperature);
            self
        }

        /// Sets the sequences that stop generation.
        #[must_use]
        pub fn stop_sequences<S: Into<String>>(mut self, stop: impl IntoIterator<Item = S>) -> Self {
            let $this = &mut self;
            $place.stop_sequences = stop.into_iter().map(Into::into).collect();
            self
        }

        /// Sets where the prompt is marked for the provider's cache (see
        /// [`PromptCache`](crate::PromptCache)); [`PromptCache::Off`](crate::PromptCache::Off)
        /// sends no breakpoints.
        #[must_use]
        pub fn prompt_cache(mut self, cache: $crate::PromptCache) -> Self {
            let $this = &mut self;
            $place.prompt_cache = cache;
            self
        }

        /// Sets how hard the model thinks (see
        /// [`ReasoningEffort`](crate::ReasoningEffort)).
        #[must_use]
        pub fn reasoning_effort(mut self, effort: $crate::ReasoningEffort) -> Self {
            let $this = &mut self;
            $place.reasoning_effort = Some(effort);
            self
        }

        /// Sets the most tokens the model may spend reasoning, where its provider takes
        /// a budget.
        #[must_use]
        pub fn reasoning_budget(mut self, tokens: u32) -> Self {
            let $this = &mut self;
            $place.reasoning_budget = Some(tokens);
            self
        }

        /// Sets options of one provider (by its name, such as `openai`) that have no
        /// common setting; that provider merges them into the top level of its request
        /// body, and a request fails with a configuration error when they are not a
        /// JSON object. Setting one provider's options again merges two objects key by
        /// key.
        #[must_use]
        pub fn provider_options(mut self, provider: impl Into<String>, options: serde_json::Value) -> Self {
            let $this = &mut self;
            match ($place.provider_options.entry(provider.into()), options) {
                (std::collections::btree_map::Entry::Occupied(mut old), serde_json::Value::Object(new)) => {
                    match old.get_mut() {
                        serde_json::Value::Object(old) => old.extend(new),
                        old => *old = serde_json::Value::Object(new),
                    }
                }
                (std::collections::btree_map::Entry::Occupied(mut old), new) => *old.get_mut() = new,
                (std::collections::btree_map::Entry::Vacant(slot), new) => {
                    slot.insert(new);
                }
            }
            self
        }

        /// Sets typed options of one provider (see [`options`](crate::options)):
        /// filed under the provider they are for and merged, key by key, with options
        /// set for it before.
        #[must_use]
        pub fn for_provider(self, options: impl $crate::options::ProviderOptions) -> Self {
            let provider = options.provider();
            self.provider_options(provider, serde_json::Value::Object(options.into_fields()))
        }

        /// Sets the key that groups requests for the provider's prompt cache (OpenAI's
        /// `prompt_cache_key`; ignored by providers without one).
        #[must_use]
        pub fn prompt_cache_key(mut self, key: impl Into<String>) -> Self {
            let $this = &mut self;
            $place.prompt_cache_key = Some(key.into());
            self
        }
    };
}

impl ModelSettings {
    /// No settings: each provider's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    crate::settings_setters!(s => s);
}

/// What is sent to a model.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ChatRequest {
    /// The model, such as `claude-sonnet-4-5` or `gpt-4o-mini`.
    pub model: String,
    /// The system prompt, output limit, temperature and stop sequences.
    pub settings: ModelSettings,
    /// The conversation, oldest first. Shared with the run's documents: a turn sends
    /// the conversation without copying it.
    pub messages: Vec<Arc<Message>>,
    /// The tools offered in this turn.
    pub tools: Vec<Arc<ToolDefinition>>,
    /// A JSON Schema the reply's text must follow, for models with structured
    /// output ([`ChatModel::structured_output`]); others ignore it.
    pub response_schema: Option<ResponseSchema>,
}

/// A JSON Schema for a reply's text. Cheap to clone: the schema is shared.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ResponseSchema {
    /// A name for the schema (`^[a-zA-Z0-9_-]{1,64}$`), as OpenAI asks for.
    pub name: String,
    /// The schema.
    pub schema: Arc<serde_json::Value>,
}

impl ResponseSchema {
    /// A schema named `name`.
    pub fn new(name: impl Into<String>, schema: serde_json::Value) -> Self {
        Self { name: name.into(), schema: Arc::new(schema) }
    }
}

impl ChatRequest {
    /// A request for `model` with these messages (`Message`s or `Arc<Message>`s).
    pub fn new<M: Into<Arc<Message>>>(model: impl Into<String>, messages: impl IntoIterator<Item = M>) -> Self {
        Self { model: model.into(), messages: messages.into_iter().map(Into::into).collect(), ..Self::default() }
    }

    settings_setters!(s => s.settings);

    /// Replaces the settings.
    #[must_use]
    pub fn settings(mut self, settings: ModelSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Sets the tools offered.
    #[must_use]
    pub fn tools(mut self, tools: Vec<Arc<ToolDefinition>>) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the JSON Schema the reply's text must follow.
    #[must_use]
    pub fn response_schema(mut self, schema: ResponseSchema) -> Self {
        self.response_schema = Some(schema);
        self
    }
}

/// What a model answered.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ChatResponse {
    /// The assistant message.
    pub message: Message,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// Tokens used.
    pub usage: Usage,
    /// The model that answered, as the provider reports it.
    pub model: String,
    /// The provider's response id, if it gives one.
    pub id: Option<String>,
}

impl ChatResponse {
    /// A response.
    pub fn new(message: Message, stop_reason: StopReason, usage: Usage, model: impl Into<String>) -> Self {
        Self { message, stop_reason, usage, model: model.into(), id: None }
    }
}

/// One event of a streamed response.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// Text was added to content block `index`.
    TextDelta {
        /// The content block's index.
        index: usize,
        /// The new text.
        text: String,
    },
    /// A tool call started at content block `index`.
    ToolUseStart {
        /// The content block's index.
        index: usize,
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// Reasoning text was added to content block `index` (a
    /// [`ContentBlock::Reasoning`]).
    ReasoningDelta {
        /// The content block's index.
        index: usize,
        /// The new text.
        text: String,
    },
    /// A piece of a tool call's JSON arguments arrived.
    ToolInputDelta {
        /// The content block's index.
        index: usize,
        /// The piece of JSON.
        partial_json: String,
    },
    /// The response is complete; this equals what [`ChatModel::chat`] returns.
    Done(ChatResponse),
}

/// A chat model: a provider's API, a local server, or the scripted model.
///
/// Object safe: hold one as `Arc<dyn ChatModel>`.
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync + 'static {
    /// The provider's name, such as `anthropic`, `openai` or `scripted`.
    fn provider(&self) -> &'static str;

    /// Whether the model honours [`ChatRequest::response_schema`]: its answer is
    /// JSON text matching the schema (structured output). `false` unless the model
    /// says so; the agent then asks for typed answers through a `respond` tool.
    fn structured_output(&self) -> bool {
        false
    }

    /// Sends the request and returns the whole response.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError>;

    /// Sends the request and streams the response. The last item is
    /// [`StreamEvent::Done`] with the same response `chat` returns.
    ///
    /// The default calls [`ChatModel::chat`] and replays the result as events.
    fn stream<'a>(&'a self, request: &'a ChatRequest) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
        futures::stream::once(async move { self.chat(request).await })
            .flat_map(|r| {
                let events: Vec<Result<StreamEvent, LlmError>> = match r {
                    Ok(resp) => replay(resp).into_iter().map(Ok).collect(),
                    Err(e) => vec![Err(e)],
                };
                futures::stream::iter(events)
            })
            .boxed()
    }
}

/// The events a streamed version of `response` would have produced.
pub fn replay(response: ChatResponse) -> Vec<StreamEvent> {
    let mut events = Vec::new();
    for (index, block) in response.message.content.iter().enumerate() {
        match block {
            ContentBlock::Text { text } => events.push(StreamEvent::TextDelta { index, text: text.clone() }),
            ContentBlock::Reasoning(r) if !r.text.is_empty() => {
                events.push(StreamEvent::ReasoningDelta { index, text: r.text.clone() });
            }
            ContentBlock::ToolUse(t) => {
                events.push(StreamEvent::ToolUseStart { index, id: t.id.clone(), name: t.name.clone() });
                let partial_json = match &t.invalid_input {
                    Some(bad) => bad.raw.clone(),
                    None => t.input.to_string(),
                };
                events.push(StreamEvent::ToolInputDelta { index, partial_json });
            }
            _ => {}
        }
    }
    events.push(StreamEvent::Done(response));
    events
}

#[async_trait::async_trait]
impl<M: ChatModel + ?Sized> ChatModel for Arc<M> {
    fn provider(&self) -> &'static str {
        (**self).provider()
    }
    fn structured_output(&self) -> bool {
        (**self).structured_output()
    }
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        (**self).chat(request).await
    }
    fn stream<'a>(&'a self, request: &'a ChatRequest) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
        (**self).stream(request)
    }
}
