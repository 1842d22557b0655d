//! Encoding a [`ChatRequest`] as the JSON body of a Converse (or ConverseStream)
//! request.

use serde_json::{Map, Value, json};

use super::PROVIDER;
use crate::cache::{self, PromptCache};
use crate::error::LlmError;
use crate::http;
use crate::image::Image;
use crate::message::{ContentBlock, Message, Role, ToolResult};
use crate::model::{ChatRequest, ReasoningEffort};

/// What a model accepts beyond the Converse API's common fields, from its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ModelFamily {
    /// An Anthropic Claude model: extended thinking, prompt caching of tools,
    /// system and messages.
    pub(super) anthropic: bool,
    /// An Amazon Nova model: prompt caching of system and messages.
    pub(super) nova: bool,
}

impl ModelFamily {
    /// The family of a model id, an inference profile (`us.anthropic.claude-...`) or
    /// an ARN that names one.
    pub(super) fn of(model: &str) -> Self {
        let model = model.to_ascii_lowercase();
        Self {
            anthropic: model.contains("anthropic.") || model.contains("claude"),
            nova: model.contains("amazon.nova"),
        }
    }
}

/// The JSON body of a Converse request: the conversation, the system prompt, the
/// inference settings and tools, `cachePoint` blocks where
/// [`ModelSettings::prompt_cache`](crate::ModelSettings) puts them, Anthropic's
/// extended thinking in `additionalModelRequestFields`, and the request's provider
/// options over it all.
pub(super) fn encode_request(request: &ChatRequest, default_max_tokens: u32) -> Result<Value, LlmError> {
    let settings = &request.settings;
    let family = ModelFamily::of(&request.model);
    // `Auto` marks only models known to cache (others may refuse a cachePoint);
    // breakpoints set by hand are sent to any model.
    let cache = match &settings.prompt_cache {
        PromptCache::Auto if !family.anthropic && !family.nova => &PromptCache::Off,
        cache => cache,
    };
    let (cache_tools, cache_system, cache_messages) = cache::breakpoints(
        cache,
        !request.tools.is_empty() && (family.anthropic || !matches!(cache, PromptCache::Auto)),
        settings.system.is_some(),
        request.messages.iter().map(|m| m.role == Role::User),
    );
    let mut body = Map::new();
    let mut marks = cache_messages.iter().peekable();
    let messages: Vec<Value> = request
        .messages
        .iter()
        .enumerate()
        .map(|(i, message)| {
            let mut content = encode_content(message);
            if marks.next_if_eq(&&i).is_some() && !content.is_empty() {
                content.push(cache_point());
            }
            json!({"role": role(message.role), "content": content})
        })
        .collect();
    body.insert("messages".into(), messages.into());
    if let Some(system) = &settings.system {
        let mut blocks = vec![json!({"text": system})];
        if cache_system {
            blocks.push(cache_point());
        }
        body.insert("system".into(), blocks.into());
    }

    let budget = if family.anthropic { settings.thinking_budget() } else { None };
    let mut inference = Map::new();
    let max_tokens = match (settings.max_tokens, budget) {
        (Some(max), _) => Some(max),
        // The budget must stay under `maxTokens`: room for an answer after the thinking.
        (None, Some(budget)) => Some(budget.saturating_add(default_max_tokens)),
        (None, None) => None,
    };
    if let Some(max) = max_tokens {
        inference.insert("maxTokens".into(), max.into());
    }
    if let Some(temperature) = settings.temperature {
        inference.insert("temperature".into(), http::f32_value(temperature));
    }
    if !settings.stop_sequences.is_empty() {
        inference.insert("stopSequences".into(), settings.stop_sequences.clone().into());
    }
    if !inference.is_empty() {
        body.insert("inferenceConfig".into(), inference.into());
    }

    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                let mut spec = json!({"name": t.name, "inputSchema": {"json": t.input_schema}});
                // The API refuses an empty description.
                if !t.description.is_empty() {
                    spec["description"] = t.description.clone().into();
                }
                json!({ "toolSpec": spec })
            })
            .collect();
        if cache_tools {
            tools.push(cache_point());
        }
        body.insert("toolConfig".into(), json!({ "tools": tools }));
    }

    if family.anthropic {
        let thinking = match (budget, settings.reasoning_effort) {
            (Some(budget), _) => Some(json!({"type": "enabled", "budget_tokens": budget})),
            (None, Some(ReasoningEffort::None)) => Some(json!({"type": "disabled"})),
            (None, _) => None,
        };
        if let Some(thinking) = thinking {
            body.insert("additionalModelRequestFields".into(), json!({ "thinking": thinking }));
        }
    }
    settings.apply_provider_options(PROVIDER, &mut body)?;
    Ok(Value::Object(body))
}

fn role(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

/// A `cachePoint` block: the prompt up to here is cached.
fn cache_point() -> Value {
    json!({"cachePoint": {"type": "default"}})
}

/// A message's content blocks. A tool's image goes into the content of its call's
/// `toolResult`; reasoning and blocks of other providers are left out.
fn encode_content(message: &Message) -> Vec<Value> {
    let mut content: Vec<Value> = Vec::with_capacity(message.content.len());
    for block in &message.content {
        match block {
            // The API refuses blank text.
            ContentBlock::Text { text } if text.trim().is_empty() => {}
            ContentBlock::Text { text } => content.push(json!({ "text": text })),
            ContentBlock::ToolUse(tool) => {
                // The API takes an object only. Arguments that did not parse are answered
                // by an error result that quotes them; the call is sent without them.
                let input = if tool.input.is_object() { tool.input.clone() } else { json!({}) };
                content.push(json!({"toolUse": {"toolUseId": tool.id, "name": tool.name, "input": input}}));
            }
            ContentBlock::ToolResult(result) => content.push(tool_result(result)),
            ContentBlock::Image { source, tool_use_id: Some(call) } => {
                let result = content.iter_mut().rev().find(|b| b["toolResult"]["toolUseId"].as_str() == Some(call));
                match result.and_then(|r| r["toolResult"]["content"].as_array_mut()) {
                    Some(blocks) => blocks.push(image(source)),
                    None => content.push(image(source)),
                }
            }
            ContentBlock::Image { source, tool_use_id: None } => content.push(image(source)),
            ContentBlock::Reasoning(reasoning) if reasoning.provider == PROVIDER => {
                let data = &reasoning.data;
                let block = match data.get("redacted") {
                    Some(redacted) => json!({ "redactedContent": redacted }),
                    None => {
                        let mut text = json!({ "text": reasoning.text });
                        if let Some(signature) = data.get("signature") {
                            text["signature"] = signature.clone();
                        }
                        json!({ "reasoningText": text })
                    }
                };
                content.push(json!({ "reasoningContent": block }));
            }
            ContentBlock::Provider { provider, raw } if provider == PROVIDER => content.push(raw.clone()),
            // Another provider's reasoning and blocks: no provider reads another's.
            _ => {}
        }
    }
    content
}

fn tool_result(result: &ToolResult) -> Value {
    let status = if result.is_error { "error" } else { "success" };
    // The API refuses blank text; an empty result still says so.
    let text = if result.content.trim().is_empty() { "(no output)" } else { result.content.as_str() };
    json!({"toolResult": {"toolUseId": result.tool_use_id, "content": [{ "text": text }], "status": status}})
}

/// An image block: its bytes, base64 on the JSON wire. Bedrock fetches no URLs: an
/// image at a URL (or one not loaded) is shown to the model as a line of text saying so.
fn image(image: &Image) -> Value {
    match image {
        Image::Base64 { media_type, data } => {
            let format = media_type.as_str().trim_start_matches("image/");
            json!({"image": {"format": format, "source": {"bytes": &**data}}})
        }
        Image::Url { url } => {
            json!({ "text": format!("[an image at {url}, not shown: Bedrock takes image bytes only]") })
        }
        _ => json!({"text": "[an image that was not loaded]"}),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::message::{Reasoning, ToolUse};
    use crate::{CacheBreakpoint, ModelSettings, ToolDefinition};

    const CLAUDE: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";

    fn tool() -> Arc<ToolDefinition> {
        Arc::new(ToolDefinition::new("get_weather", "Gets the weather.", json!({"type": "object"})))
    }

    #[test]
    fn families_come_from_the_model_id() {
        assert!(ModelFamily::of(CLAUDE).anthropic);
        assert!(ModelFamily::of("arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-haiku").anthropic);
        assert!(ModelFamily::of("amazon.nova-pro-v1:0").nova);
        assert_eq!(ModelFamily::of("meta.llama3-70b-instruct-v1:0"), ModelFamily { anthropic: false, nova: false });
    }

    #[test]
    fn encodes_settings_tools_and_cache_points() {
        let request = ChatRequest::new(CLAUDE, vec![Message::user("Hi")])
            .system("Be brief.")
            .max_tokens(300)
            .temperature(0.2)
            .stop_sequences(["###"])
            .tools(vec![tool()]);
        let body = encode_request(&request, 4096).unwrap();
        assert_eq!(
            body,
            json!({
                "messages": [{"role": "user", "content": [{"text": "Hi"}, {"cachePoint": {"type": "default"}}]}],
                "system": [{"text": "Be brief."}, {"cachePoint": {"type": "default"}}],
                "inferenceConfig": {"maxTokens": 300, "temperature": 0.2, "stopSequences": ["###"]},
                "toolConfig": {"tools": [
                    {"toolSpec": {"name": "get_weather", "description": "Gets the weather.", "inputSchema": {"json": {"type": "object"}}}},
                    {"cachePoint": {"type": "default"}},
                ]},
            })
        );
        // A model not known to cache gets no cache points unless they are set by hand.
        let llama = ChatRequest::new("meta.llama3-70b-instruct-v1:0", vec![Message::user("Hi")]).system("S");
        let body = encode_request(&llama, 4096).unwrap();
        assert_eq!(
            body,
            json!({"messages": [{"role": "user", "content": [{"text": "Hi"}]}], "system": [{"text": "S"}]})
        );
        let by_hand = llama.prompt_cache(PromptCache::At(vec![CacheBreakpoint::System]));
        let body = encode_request(&by_hand, 4096).unwrap();
        assert_eq!(body["system"], json!([{"text": "S"}, {"cachePoint": {"type": "default"}}]));
        assert_eq!(body["messages"][0]["content"], json!([{"text": "Hi"}]));
        // Nova: system and messages, not tools.
        let nova = ChatRequest::new("amazon.nova-lite-v1:0", vec![Message::user("Hi")]).tools(vec![tool()]);
        let body = encode_request(&nova, 4096).unwrap();
        assert_eq!(body["toolConfig"]["tools"].as_array().unwrap().len(), 1);
        assert_eq!(body["messages"][0]["content"][1], cache_point());
    }

    #[test]
    fn thinking_is_an_additional_field_of_anthropic_models() {
        let request = ChatRequest::new(CLAUDE, vec![Message::user("Hi")])
            .prompt_cache(PromptCache::Off)
            .reasoning_effort(ReasoningEffort::Medium);
        let body = encode_request(&request, 4096).unwrap();
        assert_eq!(
            body["additionalModelRequestFields"],
            json!({"thinking": {"type": "enabled", "budget_tokens": 4096}})
        );
        assert_eq!(body["inferenceConfig"], json!({"maxTokens": 8192}));
        let off = request.clone().reasoning_effort(ReasoningEffort::None);
        let body = encode_request(&off, 4096).unwrap();
        assert_eq!(body["additionalModelRequestFields"], json!({"thinking": {"type": "disabled"}}));
        assert!(body.get("inferenceConfig").is_none());
        let budget = request.clone().reasoning_budget(2000).max_tokens(9000);
        let body = encode_request(&budget, 4096).unwrap();
        assert_eq!(body["additionalModelRequestFields"]["thinking"]["budget_tokens"], 2000);
        assert_eq!(body["inferenceConfig"]["maxTokens"], 9000);
        // Other models: no thinking field (provider options carry theirs).
        let nova = ChatRequest::new("amazon.nova-pro-v1:0", vec![Message::user("Hi")])
            .reasoning_effort(ReasoningEffort::High)
            .provider_options(
                "bedrock",
                json!({"additionalModelRequestFields": {"reasoningConfig": {"type": "enabled"}}}),
            )
            .provider_options("openai", json!({"service_tier": "flex"}));
        let body = encode_request(&nova, 4096).unwrap();
        assert_eq!(body["additionalModelRequestFields"], json!({"reasoningConfig": {"type": "enabled"}}));
        assert!(body.get("service_tier").is_none() && body.get("inferenceConfig").is_none());
        let bad = ChatRequest::new(CLAUDE, vec![Message::user("Hi")])
            .settings(ModelSettings::new().provider_options("bedrock", json!("guardrail")));
        assert!(matches!(encode_request(&bad, 4096), Err(LlmError::Config { provider: "bedrock", .. })));
    }

    #[test]
    fn encodes_tool_calls_results_images_and_reasoning() {
        let png = Image::base64("image/png", "iVBORw0KGgo=").unwrap();
        let assistant = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Reasoning(Reasoning::new("bedrock", "Think.", json!({"signature": "sig"}))),
                ContentBlock::Reasoning(Reasoning::new("bedrock", "", json!({"redacted": "cmVk"}))),
                ContentBlock::Reasoning(Reasoning::new("anthropic", "Theirs.", json!({"signature": "a"}))),
                ContentBlock::Provider { provider: "openai".into(), raw: json!({"x": 1}) },
                ContentBlock::text(""),
                ContentBlock::ToolUse(ToolUse::new("t1", "get_weather", json!({"city": "Oslo"}))),
                ContentBlock::ToolUse(ToolUse::from_raw_arguments("t2", "get_weather", "{bad")),
            ],
        };
        let mut results = Message::tool_results([
            ToolResult { tool_use_id: "t1".into(), content: "Sunny".into(), is_error: false },
            ToolResult { tool_use_id: "t2".into(), content: String::new(), is_error: true },
        ]);
        results.content.push(ContentBlock::Image { source: png.clone(), tool_use_id: Some("t1".into()) });
        let user = Message::user("Look").with_image(png).with_image(Image::url("https://x.test/a.png").unwrap());
        let request = ChatRequest::new("mistral.large", vec![user, assistant, results]);
        let body = encode_request(&request, 4096).unwrap();
        let image = json!({"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}});
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [
                    {"text": "Look"}, image,
                    {"text": "[an image at https://x.test/a.png, not shown: Bedrock takes image bytes only]"},
                ]},
                {"role": "assistant", "content": [
                    {"reasoningContent": {"reasoningText": {"text": "Think.", "signature": "sig"}}},
                    {"reasoningContent": {"redactedContent": "cmVk"}},
                    {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Oslo"}}},
                    {"toolUse": {"toolUseId": "t2", "name": "get_weather", "input": {}}},
                ]},
                {"role": "user", "content": [
                    {"toolResult": {"toolUseId": "t1", "content": [{"text": "Sunny"}, image], "status": "success"}},
                    {"toolResult": {"toolUseId": "t2", "content": [{"text": "(no output)"}], "status": "error"}},
                ]},
            ])
        );
    }
}
