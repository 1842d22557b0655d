//! Typed options of one provider, for what has no common setting: a service tier,
//! safety settings, a guardrail.
//!
//! Each type here writes its provider's own request fields, by the names its API
//! reference gives them, and [`ModelSettings::for_provider`](crate::ModelSettings::for_provider)
//! (on every type with the settings' setters: a request, a model turn's options, an
//! agent) files them under that provider. The provider merges them into the top level
//! of its request body, over what it wrote, and every other provider ignores them:
//! one agent with a fallback can carry the options of both of its providers. What
//! these types do not name goes through
//! [`ModelSettings::provider_options`](crate::ModelSettings::provider_options) as raw
//! JSON.
//!
//! ```
//! use loopstack_model::ModelSettings;
//! use loopstack_model::options::{AnthropicOptions, GeminiOptions, HarmBlockThreshold, OpenAiOptions};
//! use serde_json::json;
//!
//! let settings = ModelSettings::new()
//!     .for_provider(OpenAiOptions::new().service_tier("flex").seed(7))
//!     .for_provider(AnthropicOptions::new().top_k(40))
//!     .for_provider(GeminiOptions::new().safety("HARM_CATEGORY_HARASSMENT", HarmBlockThreshold::BlockOnlyHigh));
//! assert_eq!(settings.provider_options["openai"], json!({"service_tier": "flex", "seed": 7}));
//! assert_eq!(settings.provider_options["anthropic"], json!({"top_k": 40}));
//! assert_eq!(
//!     settings.provider_options["gemini"],
//!     json!({"safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH"}]}),
//! );
//! ```

use serde_json::{Map, Value, json};

/// Options of one provider: the provider they are for, and its request fields.
pub trait ProviderOptions {
    /// The provider, as its [`ChatModel::provider`](crate::ChatModel::provider) names it.
    fn provider(&self) -> &'static str;

    /// The request fields, merged into the top level of the provider's body.
    fn into_fields(self) -> Map<String, Value>;
}

/// Sets `field` when `value` is set.
fn put(fields: &mut Map<String, Value>, field: &str, value: Option<impl Into<Value>>) {
    if let Some(value) = value {
        fields.insert(field.to_owned(), value.into());
    }
}

/// Options of OpenAI's APIs: Chat Completions (provider `openai`, the default) or
/// the Responses API ([`OpenAiOptions::responses`], provider `openai-responses`).
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct OpenAiOptions {
    responses: bool,
    service_tier: Option<String>,
    seed: Option<i64>,
    top_p: Option<f32>,
    safety_identifier: Option<String>,
    parallel_tool_calls: Option<bool>,
}

impl OpenAiOptions {
    /// Options for Chat Completions.
    pub fn new() -> Self {
        Self::default()
    }

    /// For the Responses API instead (provider `openai-responses`). `seed` is not
    /// a field of that API and is left out.
    pub fn responses(mut self) -> Self {
        self.responses = true;
        self
    }

    /// `service_tier`: `auto`, `default`, `flex` or `priority`.
    pub fn service_tier(mut self, tier: impl Into<String>) -> Self {
        self.service_tier = Some(tier.into());
        self
    }

    /// `seed`, for more repeatable sampling (Chat Completions).
    pub fn seed(mut self, seed: i64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// `top_p`, nucleus sampling.
    pub fn top_p(mut self, top_p: f32) -> Self {
        self.top_p = Some(top_p);
        self
    }

    /// `safety_identifier`: a stable, hashed id of your end user, for OpenAI's abuse
    /// detection.
    pub fn safety_identifier(mut self, id: impl Into<String>) -> Self {
        self.safety_identifier = Some(id.into());
        self
    }

    /// `parallel_tool_calls`: whether the model may call several tools in one turn.
    pub fn parallel_tool_calls(mut self, parallel: bool) -> Self {
        self.parallel_tool_calls = Some(parallel);
        self
    }
}

impl ProviderOptions for OpenAiOptions {
    fn provider(&self) -> &'static str {
        if self.responses { "openai-responses" } else { "openai" }
    }

    fn into_fields(self) -> Map<String, Value> {
        let mut fields = Map::new();
        put(&mut fields, "service_tier", self.service_tier);
        put(&mut fields, "seed", self.seed.filter(|_| !self.responses));
        put(&mut fields, "top_p", self.top_p.map(f64::from));
        put(&mut fields, "safety_identifier", self.safety_identifier);
        put(&mut fields, "parallel_tool_calls", self.parallel_tool_calls);
        fields
    }
}

/// Options of Anthropic's Messages API (provider `anthropic`).
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct AnthropicOptions {
    service_tier: Option<String>,
    top_k: Option<u32>,
    top_p: Option<f32>,
    user_id: Option<String>,
}

impl AnthropicOptions {
    /// No options.
    pub fn new() -> Self {
        Self::default()
    }

    /// `service_tier`: `auto` or `standard_only`.
    pub fn service_tier(mut self, tier: impl Into<String>) -> Self {
        self.service_tier = Some(tier.into());
        self
    }

    /// `top_k`: sample from the k likeliest tokens only.
    pub fn top_k(mut self, top_k: u32) -> Self {
        self.top_k = Some(top_k);
        self
    }

    /// `top_p`, nucleus sampling.
    pub fn top_p(mut self, top_p: f32) -> Self {
        self.top_p = Some(top_p);
        self
    }

    /// `metadata.user_id`: an opaque id of your end user, for Anthropic's abuse
    /// detection.
    pub fn user_id(mut self, id: impl Into<String>) -> Self {
        self.user_id = Some(id.into());
        self
    }
}

impl ProviderOptions for AnthropicOptions {
    fn provider(&self) -> &'static str {
        "anthropic"
    }

    fn into_fields(self) -> Map<String, Value> {
        let mut fields = Map::new();
        put(&mut fields, "service_tier", self.service_tier);
        put(&mut fields, "top_k", self.top_k);
        put(&mut fields, "top_p", self.top_p.map(f64::from));
        put(&mut fields, "metadata", self.user_id.map(|id| json!({ "user_id": id })));
        fields
    }
}

/// How much of a harm category Gemini blocks (`HarmBlockThreshold`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HarmBlockThreshold {
    /// `BLOCK_LOW_AND_ABOVE`.
    BlockLowAndAbove,
    /// `BLOCK_MEDIUM_AND_ABOVE`.
    BlockMediumAndAbove,
    /// `BLOCK_ONLY_HIGH`.
    BlockOnlyHigh,
    /// `BLOCK_NONE`.
    BlockNone,
    /// `OFF`: the safety filter is off.
    Off,
}

impl HarmBlockThreshold {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BlockLowAndAbove => "BLOCK_LOW_AND_ABOVE",
            Self::BlockMediumAndAbove => "BLOCK_MEDIUM_AND_ABOVE",
            Self::BlockOnlyHigh => "BLOCK_ONLY_HIGH",
            Self::BlockNone => "BLOCK_NONE",
            Self::Off => "OFF",
        }
    }
}

/// Options of Google's `generateContent` (provider `gemini`, or `vertex` with
/// [`GeminiOptions::vertex`]).
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct GeminiOptions {
    vertex: bool,
    safety: Vec<(String, HarmBlockThreshold)>,
    cached_content: Option<String>,
}

impl GeminiOptions {
    /// No options, for the Gemini API.
    pub fn new() -> Self {
        Self::default()
    }

    /// For Vertex AI instead (provider `vertex`).
    pub fn vertex(mut self) -> Self {
        self.vertex = true;
        self
    }

    /// A `safetySettings` entry: block `category` (such as
    /// `HARM_CATEGORY_DANGEROUS_CONTENT`) at `threshold`.
    pub fn safety(mut self, category: impl Into<String>, threshold: HarmBlockThreshold) -> Self {
        self.safety.push((category.into(), threshold));
        self
    }

    /// `cachedContent`: the name of a context cache (`cachedContents/...`) the request
    /// reads its prefix from.
    pub fn cached_content(mut self, name: impl Into<String>) -> Self {
        self.cached_content = Some(name.into());
        self
    }
}

impl ProviderOptions for GeminiOptions {
    fn provider(&self) -> &'static str {
        if self.vertex { "vertex" } else { "gemini" }
    }

    fn into_fields(self) -> Map<String, Value> {
        let mut fields = Map::new();
        if !self.safety.is_empty() {
            let settings: Vec<Value> = self
                .safety
                .into_iter()
                .map(|(category, threshold)| json!({"category": category, "threshold": threshold.as_str()}))
                .collect();
            fields.insert("safetySettings".into(), settings.into());
        }
        put(&mut fields, "cachedContent", self.cached_content);
        fields
    }
}

/// Options of Bedrock's Converse API (provider `bedrock`).
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct BedrockOptions {
    guardrail: Option<(String, String, bool)>,
    performance_latency: Option<String>,
    request_metadata: Map<String, Value>,
}

impl BedrockOptions {
    /// No options.
    pub fn new() -> Self {
        Self::default()
    }

    /// `guardrailConfig`: the guardrail (its id or ARN, and version) that checks the
    /// request and the answer; with `trace`, the answer says what it did.
    pub fn guardrail(mut self, id: impl Into<String>, version: impl Into<String>, trace: bool) -> Self {
        self.guardrail = Some((id.into(), version.into(), trace));
        self
    }

    /// `performanceConfig.latency`: `standard` or `optimized`.
    pub fn latency(mut self, latency: impl Into<String>) -> Self {
        self.performance_latency = Some(latency.into());
        self
    }

    /// A `requestMetadata` entry, for filtering invocation logs.
    pub fn request_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.request_metadata.insert(key.into(), Value::String(value.into()));
        self
    }
}

impl ProviderOptions for BedrockOptions {
    fn provider(&self) -> &'static str {
        "bedrock"
    }

    fn into_fields(self) -> Map<String, Value> {
        let mut fields = Map::new();
        if let Some((id, version, trace)) = self.guardrail {
            let trace = if trace { "enabled" } else { "disabled" };
            fields.insert(
                "guardrailConfig".into(),
                json!({"guardrailIdentifier": id, "guardrailVersion": version, "trace": trace}),
            );
        }
        put(&mut fields, "performanceConfig", self.performance_latency.map(|l| json!({ "latency": l })));
        if !self.request_metadata.is_empty() {
            fields.insert("requestMetadata".into(), Value::Object(self.request_metadata));
        }
        fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ModelSettings;

    #[test]
    fn each_provider_gets_its_own_fields_and_options_merge() {
        let settings = ModelSettings::new()
            .for_provider(OpenAiOptions::new().service_tier("flex").seed(7).responses())
            .for_provider(OpenAiOptions::new().responses().safety_identifier("u-1"))
            .for_provider(BedrockOptions::new().guardrail("gr-1", "2", true).request_metadata("team", "ops"))
            .for_provider(AnthropicOptions::new().user_id("u-2").top_p(0.5))
            .for_provider(GeminiOptions::new().vertex().cached_content("cachedContents/c1"));
        assert_eq!(
            settings.provider_options["openai-responses"],
            json!({"service_tier": "flex", "safety_identifier": "u-1"})
        );
        assert_eq!(
            settings.provider_options["bedrock"],
            json!({
                "guardrailConfig": {"guardrailIdentifier": "gr-1", "guardrailVersion": "2", "trace": "enabled"},
                "requestMetadata": {"team": "ops"},
            })
        );
        assert_eq!(settings.provider_options["anthropic"], json!({"top_p": 0.5, "metadata": {"user_id": "u-2"}}));
        assert_eq!(settings.provider_options["vertex"], json!({"cachedContent": "cachedContents/c1"}));
        assert!(!settings.provider_options.contains_key("openai"));
    }

    #[test]
    fn options_reach_the_top_of_the_body_and_a_non_object_is_a_configuration_error() {
        let settings = ModelSettings::new().for_provider(AnthropicOptions::new().top_k(3));
        let mut body = Map::new();
        body.insert("top_k".into(), json!(1));
        settings.apply_provider_options("anthropic", &mut body).unwrap();
        settings.apply_provider_options("openai", &mut body).unwrap();
        assert_eq!(Value::Object(body), json!({"top_k": 3}));

        let raw = ModelSettings::new().provider_options("openai", json!(["not", "an", "object"]));
        let err = raw.apply_provider_options("openai", &mut Map::new()).unwrap_err();
        assert!(matches!(err, crate::LlmError::Config { provider: "openai", .. }), "{err}");
    }
}
