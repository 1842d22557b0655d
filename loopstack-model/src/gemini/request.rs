//! Encoding a [`ChatRequest`] as the JSON body of a `generateContent` request.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{Gemini, THOUGHT_SIGNATURE, schema};
use crate::error::LlmError;
use crate::http;
use crate::image::{Image, MediaType};
use crate::message::{ContentBlock, MAX_JSON_DEPTH, Message, Role, ToolResult, nests_deeper_than};
use crate::model::{ChatRequest, ModelSettings, ReasoningEffort};

/// How a model's requests are written, from its settings.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wire {
    /// `gemini` or `vertex`: whose reasoning is sent back, whose provider options apply.
    pub provider: &'static str,
    /// Whether thought summaries are asked for.
    pub include_thoughts: bool,
}

/// The JSON body of a `generateContent` (or `streamGenerateContent`) request.
pub(super) fn encode_request(request: &ChatRequest, wire: Wire) -> Result<Value, LlmError> {
    let invalid = |message: String| LlmError::InvalidRequest {
        provider: wire.provider,
        model: request.model.clone(),
        status: 400,
        message: format!("not sent: {message}"),
    };
    let settings = &request.settings;
    let mut body = Map::new();
    body.insert("contents".into(), encode_messages(&request.messages, wire.provider).map_err(invalid)?.into());
    if let Some(system) = settings.system.as_ref().filter(|s| !s.is_empty()) {
        body.insert("systemInstruction".into(), json!({"parts": [{"text": system}]}));
    }
    if !request.tools.is_empty() {
        let mut declarations = Vec::with_capacity(request.tools.len());
        for tool in &request.tools {
            let mut declaration = json!({"name": tool.name, "description": tool.description});
            let parameters = schema::parameters(&tool.input_schema).map_err(|e| {
                invalid(format!("the parameters of tool `{}` cannot be sent to Gemini: {e}", tool.name))
            })?;
            if let Some(parameters) = parameters {
                declaration["parameters"] = parameters;
            }
            declarations.push(declaration);
        }
        body.insert("tools".into(), json!([{"functionDeclarations": declarations}]));
    }
    let mut config = Map::new();
    if let Some(max_tokens) = settings.max_tokens {
        config.insert("maxOutputTokens".into(), max_tokens.into());
    }
    if let Some(temperature) = settings.temperature {
        config.insert("temperature".into(), http::f32_value(temperature));
    }
    if !settings.stop_sequences.is_empty() {
        config.insert("stopSequences".into(), settings.stop_sequences.clone().into());
    }
    if let Some(format) = &request.response_schema {
        config.insert("responseMimeType".into(), "application/json".into());
        config.insert("responseJsonSchema".into(), (*format.schema).clone());
    }
    if let Some(thinking) = thinking_config(settings, &request.model, wire.include_thoughts) {
        config.insert("thinkingConfig".into(), thinking);
    }
    // The keys of a `generationConfig` among the provider options join the ones written.
    if let Some(Value::Object(options)) = settings.provider_options.get(wire.provider)
        && let Some(Value::Object(extra)) = options.get("generationConfig")
    {
        config.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    settings.apply_provider_options(wire.provider, &mut body)?;
    if config.is_empty() {
        body.remove("generationConfig");
    } else {
        body.insert("generationConfig".into(), config.into());
    }
    Ok(Value::Object(body))
}

/// The `thinkingConfig`: a level on Gemini 3 and later, a budget on Gemini 2.x (which
/// takes no level) or when a budget is set; thought summaries asked for unless
/// thinking is off or `include_thoughts` is not.
fn thinking_config(settings: &ModelSettings, model: &str, include_thoughts: bool) -> Option<Value> {
    let name = model.rsplit('/').next().unwrap_or(model);
    let budget_only = name.starts_with("gemini-2") || name.starts_with("gemini-1");
    let mut config = Map::new();
    let off = match (settings.reasoning_budget, settings.reasoning_effort) {
        (_, Some(ReasoningEffort::None)) if budget_only => {
            config.insert("thinkingBudget".into(), 0.into());
            true
        }
        (_, Some(ReasoningEffort::None)) => {
            config.insert("thinkingLevel".into(), "MINIMAL".into());
            false
        }
        (Some(budget), _) => {
            config.insert("thinkingBudget".into(), budget.into());
            budget == 0
        }
        (None, Some(effort)) if budget_only => {
            let budget = effort.default_budget().unwrap_or(0);
            config.insert("thinkingBudget".into(), budget.into());
            budget == 0
        }
        (None, Some(effort)) => {
            let level = match effort {
                ReasoningEffort::None | ReasoningEffort::Minimal => "MINIMAL",
                ReasoningEffort::Low => "LOW",
                ReasoningEffort::Medium => "MEDIUM",
                _ => "HIGH",
            };
            config.insert("thinkingLevel".into(), level.into());
            false
        }
        (None, None) => false,
    };
    if include_thoughts && !off {
        config.insert("includeThoughts".into(), true.into());
    }
    (!config.is_empty()).then_some(Value::Object(config))
}

/// The `contents` of a conversation. Errs (with what to say) when a tool result
/// answers no call of the conversation: Gemini needs the function's name.
pub(super) fn encode_messages(messages: &[Arc<Message>], provider: &str) -> Result<Vec<Value>, String> {
    let mut names: HashMap<&str, &str> = HashMap::new();
    for call in messages.iter().flat_map(|m| m.tool_uses()) {
        names.entry(call.id.as_str()).or_insert(call.name.as_str());
    }
    let mut contents = Vec::with_capacity(messages.len());
    for message in messages {
        let parts = encode_parts(message, provider, &names)?;
        if parts.is_empty() {
            continue;
        }
        let role = match message.role {
            Role::User => "user",
            Role::Assistant => "model",
        };
        contents.push(json!({"role": role, "parts": parts}));
    }
    Ok(contents)
}

/// Adds a part, with the signature waiting for it.
fn push(parts: &mut Vec<Value>, mut part: Value, pending: &mut Option<Value>) {
    if let Some(signature) = pending.take()
        && part.get("thoughtSignature").is_none()
    {
        part["thoughtSignature"] = signature;
    }
    parts.push(part);
}

/// The parts of one message. A signature-only reasoning block's signature goes on the
/// part of the next block (or, with none after it, on an empty text part of its own);
/// a model turn whose first function call has no signature gets
/// [`Gemini::SKIP_THOUGHT_SIGNATURE`].
fn encode_parts(message: &Message, provider: &str, names: &HashMap<&str, &str>) -> Result<Vec<Value>, String> {
    let mut parts: Vec<Value> = Vec::with_capacity(message.content.len());
    let mut pending: Option<Value> = None;
    for block in &message.content {
        match block {
            ContentBlock::Text { text } if text.is_empty() => {}
            ContentBlock::Text { text } => push(&mut parts, json!({"text": text}), &mut pending),
            ContentBlock::ToolUse(call) => {
                // Gemini takes an object; arguments that did not parse are answered by an
                // error result, and the call itself is sent with none.
                let args = if call.input.is_object() { call.input.clone() } else { json!({}) };
                let part = json!({"functionCall": {"id": call.id, "name": call.name, "args": args}});
                push(&mut parts, part, &mut pending);
            }
            ContentBlock::ToolResult(result) => {
                let name = names.get(result.tool_use_id.as_str()).ok_or_else(|| {
                    format!("the tool result for `{}` answers no function call of the conversation", result.tool_use_id)
                })?;
                push(&mut parts, function_response(result, name), &mut pending);
            }
            ContentBlock::Image { source, .. } => push(&mut parts, image_part(source), &mut pending),
            ContentBlock::Reasoning(reasoning) if reasoning.provider == provider => {
                let signature = reasoning.data.get(THOUGHT_SIGNATURE).filter(|s| s.is_string()).cloned();
                if reasoning.text.is_empty() {
                    if let Some(signature) = signature {
                        // Two signatures in a row: the first had no part after it.
                        if let Some(earlier) = pending.replace(signature) {
                            parts.push(json!({"text": "", "thoughtSignature": earlier}));
                        }
                    }
                    continue;
                }
                if let Some(earlier) = pending.take() {
                    parts.push(json!({"text": "", "thoughtSignature": earlier}));
                }
                let mut part = json!({"text": reasoning.text, "thought": true});
                if let Some(signature) = signature {
                    part["thoughtSignature"] = signature;
                }
                parts.push(part);
            }
            ContentBlock::Provider { provider: owner, raw } if owner == provider && raw.is_object() => {
                push(&mut parts, raw.clone(), &mut pending);
            }
            // Another provider's reasoning and blocks: no provider reads another's.
            ContentBlock::Reasoning(_) | ContentBlock::Provider { .. } => {}
        }
    }
    if let Some(signature) = pending {
        parts.push(json!({"text": "", "thoughtSignature": signature}));
    }
    if message.role == Role::Assistant
        && let Some(first_call) = parts.iter_mut().find(|p| p.get("functionCall").is_some())
        && first_call.get("thoughtSignature").is_none()
    {
        first_call["thoughtSignature"] = Gemini::SKIP_THOUGHT_SIGNATURE.into();
    }
    Ok(parts)
}

/// A `functionResponse`: `{"result": ..}`, or `{"error": ..}` for an error result; a
/// result that is a JSON object or array (not nested too deep) is sent as JSON.
fn function_response(result: &ToolResult, name: &str) -> Value {
    let trimmed = result.content.trim_start();
    let value = if trimmed.starts_with(['{', '[']) && !nests_deeper_than(trimmed.as_bytes(), MAX_JSON_DEPTH) {
        serde_json::from_str(trimmed).unwrap_or_else(|_| Value::String(result.content.clone()))
    } else {
        Value::String(result.content.clone())
    };
    let key = if result.is_error { "error" } else { "result" };
    json!({"functionResponse": {"id": result.tool_use_id, "name": name, "response": {key: value}}})
}

/// An image as a part: base64 data as `inlineData`, a URL as `fileData` (its type from
/// its extension, when it has a known one).
fn image_part(image: &Image) -> Value {
    match image {
        Image::Base64 { media_type, data } => json!({"inlineData": {"mimeType": media_type, "data": &**data}}),
        Image::Url { url } => {
            let path = url.split(['?', '#']).next().unwrap_or(url);
            let media_type = path.rsplit_once('.').and_then(|(_, ext)| MediaType::from_extension(ext));
            match media_type {
                Some(media_type) => json!({"fileData": {"mimeType": media_type, "fileUri": url}}),
                None => json!({"fileData": {"fileUri": url}}),
            }
        }
        // Not resolved: the request was built from stored messages by hand.
        _ => json!({"text": "[an image that was not loaded]"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Reasoning, ToolUse};
    use crate::{ResponseSchema, ToolDefinition};

    const WIRE: Wire = Wire { provider: "gemini", include_thoughts: true };

    fn signature(sig: &str) -> ContentBlock {
        ContentBlock::Reasoning(Reasoning::new("gemini", "", json!({"thought_signature": sig})))
    }

    #[test]
    fn signatures_go_on_the_part_after_them() {
        let turn = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Reasoning(Reasoning::new(
                    "gemini",
                    "Thinking of Paris.",
                    json!({"thought_signature": "c2lnMA=="}),
                )),
                ContentBlock::Reasoning(Reasoning::new("anthropic", "hmm", json!({"signature": "x"}))),
                ContentBlock::text("Let me check."),
                signature("c2lnMQ=="),
                ContentBlock::ToolUse(ToolUse::new("call_0", "w", json!({"city": "Paris"}))),
                ContentBlock::ToolUse(ToolUse::new("call_1", "w", json!({"city": "Rome"}))),
                signature("c2lnMg=="),
            ],
        };
        let parts = encode_parts(&turn, "gemini", &HashMap::new()).unwrap();
        assert_eq!(
            parts,
            vec![
                json!({"text": "Thinking of Paris.", "thought": true, "thoughtSignature": "c2lnMA=="}),
                json!({"text": "Let me check."}),
                json!({"functionCall": {"id": "call_0", "name": "w", "args": {"city": "Paris"}}, "thoughtSignature": "c2lnMQ=="}),
                json!({"functionCall": {"id": "call_1", "name": "w", "args": {"city": "Rome"}}}),
                json!({"text": "", "thoughtSignature": "c2lnMg=="}),
            ]
        );
        // On Vertex AI, Gemini API's signatures are another provider's: left out, and
        // the first call gets the documented skip value.
        let parts = encode_parts(&turn, "vertex", &HashMap::new()).unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[1]["thoughtSignature"], Gemini::SKIP_THOUGHT_SIGNATURE);
        assert!(parts[2].get("thoughtSignature").is_none());
    }

    #[test]
    fn thinking_follows_the_model_family() {
        let config = |settings: ModelSettings, model: &str| thinking_config(&settings, model, true);
        let effort = |e| ModelSettings::new().reasoning_effort(e);
        assert_eq!(config(ModelSettings::new(), "gemini-3-pro"), Some(json!({"includeThoughts": true})));
        assert_eq!(
            config(effort(ReasoningEffort::Low), "gemini-3-pro"),
            Some(json!({"thinkingLevel": "LOW", "includeThoughts": true}))
        );
        assert_eq!(
            config(effort(ReasoningEffort::High), "models/gemini-3-flash"),
            Some(json!({"thinkingLevel": "HIGH", "includeThoughts": true}))
        );
        assert_eq!(
            config(effort(ReasoningEffort::None), "gemini-3-pro"),
            Some(json!({"thinkingLevel": "MINIMAL", "includeThoughts": true}))
        );
        assert_eq!(
            config(effort(ReasoningEffort::Medium), "gemini-2.5-flash"),
            Some(json!({"thinkingBudget": 4096, "includeThoughts": true}))
        );
        assert_eq!(config(effort(ReasoningEffort::None), "gemini-2.5-flash"), Some(json!({"thinkingBudget": 0})));
        assert_eq!(
            config(ModelSettings::new().reasoning_budget(2000), "gemini-3-pro"),
            Some(json!({"thinkingBudget": 2000, "includeThoughts": true}))
        );
        assert_eq!(thinking_config(&ModelSettings::new(), "gemini-3-pro", false), None);
    }

    #[test]
    fn encodes_a_full_request() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false});
        let request = ChatRequest::new(
            "gemini-3-pro",
            vec![
                Message::user("Weather in Paris?"),
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::ToolUse(ToolUse::from_raw_arguments("c1", "get_weather", "{oops"))],
                },
                Message::tool_results([
                    ToolResult { tool_use_id: "c1".into(), content: "{\"temp\": 21}".into(), is_error: false },
                ]),
                Message::tool_results([ToolResult { tool_use_id: "c1".into(), content: "bad".into(), is_error: true }]),
            ],
        )
        .system("Be brief.")
        .tools(vec![Arc::new(ToolDefinition::new("get_weather", "Weather.", schema)), Arc::new(ToolDefinition::new("now", "Time.", json!({"type": "object"})))])
        .temperature(0.2)
        .max_tokens(100)
        .stop_sequences(["END"])
        .response_schema(ResponseSchema::new("answer", json!({"type": "object", "additionalProperties": false})))
        .provider_options("gemini", json!({"safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}], "generationConfig": {"topP": 0.5}}))
        .provider_options("openai", json!({"service_tier": "flex"}));
        let body = encode_request(&request, WIRE).unwrap();
        assert_eq!(
            body,
            json!({
                "contents": [
                    {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
                    {"role": "model", "parts": [{"functionCall": {"id": "c1", "name": "get_weather", "args": {}},
                                                  "thoughtSignature": "skip_thought_signature_validator"}]},
                    {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "get_weather", "response": {"result": {"temp": 21}}}}]},
                    {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "get_weather", "response": {"error": "bad"}}}]},
                ],
                "systemInstruction": {"parts": [{"text": "Be brief."}]},
                "tools": [{"functionDeclarations": [
                    {"name": "get_weather", "description": "Weather.",
                     "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}},
                    {"name": "now", "description": "Time."},
                ]}],
                "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
                "generationConfig": {
                    "maxOutputTokens": 100, "temperature": 0.2, "stopSequences": ["END"],
                    "responseMimeType": "application/json",
                    "responseJsonSchema": {"type": "object", "additionalProperties": false},
                    "thinkingConfig": {"includeThoughts": true},
                    "topP": 0.5,
                },
            })
        );
        let orphan = ChatRequest::new(
            "m",
            vec![Message::tool_results([ToolResult { tool_use_id: "x".into(), content: "r".into(), is_error: false }])],
        );
        let err = encode_request(&orphan, WIRE).unwrap_err();
        assert!(
            matches!(err, LlmError::InvalidRequest { provider: "gemini", status: 400, ref message, .. } if message.contains("answers no function call"))
        );
        let bad_tool = ChatRequest::new("m", vec![Message::user("hi")]).tools(vec![Arc::new(ToolDefinition::new(
            "t",
            "",
            json!({"type": "object", "properties": {"any": {}}}),
        ))]);
        let err = encode_request(&bad_tool, WIRE).unwrap_err();
        assert!(
            matches!(err, LlmError::InvalidRequest { ref message, .. } if message.contains("tool `t`") && message.contains("/properties/any"))
        );
    }

    #[test]
    fn images_are_inline_data_or_file_data() {
        let png = Image::base64("image/png", "iVBORw0KGgo=").unwrap();
        assert_eq!(image_part(&png), json!({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}));
        let url = Image::url("https://example.com/a/cat.JPG?x=1").unwrap();
        assert_eq!(
            image_part(&url),
            json!({"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/a/cat.JPG?x=1"}})
        );
        let url = Image::url("https://example.com/cat").unwrap();
        assert_eq!(image_part(&url), json!({"fileData": {"fileUri": "https://example.com/cat"}}));
    }
}
