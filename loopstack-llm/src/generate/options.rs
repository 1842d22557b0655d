//! What a model turn is asked with and what it gives back: the models by provider,
//! [`GenerateOptions`], [`TurnExtras`] and [`GenerateResult`].

use super::*;

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

    loopstack_model::settings_setters!(s => s.settings);

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
    pub tools: Vec<Arc<loopstack_model::ToolDefinition>>,
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
