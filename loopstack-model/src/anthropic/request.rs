//! Encoding a [`ChatRequest`] as the JSON body of a Messages API request.

use serde_json::{Map, Value, json};

use super::PROVIDER;
use crate::cache;
use crate::http;
use crate::image::Image;
use crate::message::{ContentBlock, Message, Role};
use crate::model::ChatRequest;

/// The JSON body of a Messages API request, with `cache_control` breakpoints where
/// [`ModelSettings::prompt_cache`](crate::ModelSettings) puts them, extended
/// thinking as [`ModelSettings::thinking_budget`](crate::ModelSettings::thinking_budget)
/// asks, and the request's provider options over it all.
pub(super) fn encode_request(
    request: &ChatRequest,
    default_max_tokens: u32,
    stream: bool,
) -> Result<Value, crate::LlmError> {
    let settings = &request.settings;
    let (cache_tools, cache_system, cache_messages) = cache::breakpoints(
        &settings.prompt_cache,
        !request.tools.is_empty(),
        settings.system.is_some(),
        request.messages.iter().map(|m| m.role == Role::User),
    );
    let mut body = Map::new();
    body.insert("model".into(), request.model.clone().into());
    let budget = settings.thinking_budget();
    // The budget must stay under `max_tokens`: unless a limit is set, the default
    // leaves room for an answer after the thinking.
    let max_tokens = match (settings.max_tokens, budget) {
        (Some(max), _) => max,
        (None, Some(budget)) => default_max_tokens.max(budget.saturating_add(default_max_tokens)),
        (None, None) => default_max_tokens,
    };
    body.insert("max_tokens".into(), max_tokens.into());
    match (budget, settings.reasoning_effort) {
        (Some(budget), _) => {
            body.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": budget}));
        }
        (None, Some(crate::ReasoningEffort::None)) => {
            body.insert("thinking".into(), json!({"type": "disabled"}));
        }
        (None, _) => {}
    }
    if let Some(system) = &settings.system {
        let system = if cache_system {
            json!([{"type": "text", "text": system, "cache_control": ephemeral()}])
        } else {
            system.clone().into()
        };
        body.insert("system".into(), system);
    }
    let mut marks = cache_messages.iter().peekable();
    let messages = request
        .messages
        .iter()
        .enumerate()
        .map(|(i, message)| {
            let mut encoded = encode_message(message);
            if marks.next_if_eq(&&i).is_some() {
                mark_last_block(&mut encoded["content"]);
            }
            encoded
        })
        .collect();
    body.insert("messages".into(), messages);
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        if cache_tools && let Some(last) = tools.last_mut() {
            last["cache_control"] = ephemeral();
        }
        body.insert("tools".into(), tools.into());
    }
    if let Some(temperature) = settings.temperature {
        body.insert("temperature".into(), http::f32_value(temperature));
    }
    if !settings.stop_sequences.is_empty() {
        body.insert("stop_sequences".into(), settings.stop_sequences.clone().into());
    }
    if stream {
        body.insert("stream".into(), true.into());
    }
    settings.apply_provider_options(PROVIDER, &mut body)?;
    Ok(Value::Object(body))
}

/// A cache breakpoint's `cache_control` (the default five-minute lifetime).
fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// Puts a breakpoint on the last block of a message's content that can carry one:
/// text, tool use or tool result (not thinking, which the API does not cache apart).
fn mark_last_block(content: &mut Value) {
    let Some(blocks) = content.as_array_mut() else { return };
    if let Some(block) = blocks
        .iter_mut()
        .rev()
        .find(|b| matches!(b["type"].as_str(), Some("text" | "tool_use" | "tool_result" | "image")))
    {
        block["cache_control"] = ephemeral();
    }
}

fn encode_message(message: &Message) -> Value {
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let mut content: Vec<Value> = Vec::with_capacity(message.content.len());
    for block in &message.content {
        match block {
            ContentBlock::Image { source, tool_use_id } => add_image(&mut content, source, tool_use_id.as_deref()),
            block => content.extend(encode_block(block)),
        }
    }
    json!({"role": role, "content": content})
}

/// Adds an image block: a tool's inside the content of its call's `tool_result`
/// (which becomes a list of blocks, its text first), a user's as a block of its own.
fn add_image(content: &mut Vec<Value>, image: &Image, call: Option<&str>) {
    let encoded = match image {
        Image::Base64 { media_type, data } => {
            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": &**data}})
        }
        Image::Url { url } => json!({"type": "image", "source": {"type": "url", "url": url}}),
        // Not resolved: the request was built from stored messages by hand.
        _ => json!({"type": "text", "text": "[an image that was not loaded]"}),
    };
    let result = call.and_then(|call| {
        content.iter_mut().rev().find(|b| b["type"] == "tool_result" && b["tool_use_id"].as_str() == Some(call))
    });
    let Some(result) = result else {
        content.push(encoded);
        return;
    };
    match &mut result["content"] {
        Value::Array(blocks) => blocks.push(encoded),
        text => {
            let blocks = match text.take() {
                Value::String(s) if s.is_empty() => vec![encoded],
                other => vec![json!({"type": "text", "text": other}), encoded],
            };
            *text = Value::Array(blocks);
        }
    }
}

fn encode_block(block: &ContentBlock) -> Option<Value> {
    Some(match block {
        // The API refuses empty text blocks.
        ContentBlock::Text { text } if text.is_empty() => return None,
        ContentBlock::Text { text } => json!({"type": "text", "text": text}),
        ContentBlock::ToolUse(tool) => {
            // The API takes an object only. Arguments that did not parse are answered by
            // an error result that quotes them; the call itself is sent with no arguments.
            let input = if tool.input.is_object() { tool.input.clone() } else { json!({}) };
            json!({"type": "tool_use", "id": tool.id, "name": tool.name, "input": input})
        }
        ContentBlock::ToolResult(result) => json!({
            "type": "tool_result",
            "tool_use_id": result.tool_use_id,
            "content": result.content,
            "is_error": result.is_error,
        }),
        ContentBlock::Reasoning(reasoning) if reasoning.provider == PROVIDER => match &reasoning.data {
            Value::Object(data) if data.contains_key("redacted") => {
                json!({"type": "redacted_thinking", "data": data["redacted"]})
            }
            data => json!({"type": "thinking", "thinking": reasoning.text, "signature": data.get("signature")}),
        },
        ContentBlock::Provider { provider, raw } if provider == PROVIDER => raw.clone(),
        // Another provider's reasoning and blocks: no provider reads another's.
        ContentBlock::Reasoning(_) | ContentBlock::Provider { .. } | ContentBlock::Image { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::ToolDefinition;

    use super::*;
    use crate::message::{ToolResult, ToolUse};
    use crate::{CacheBreakpoint, PromptCache};

    fn weather_spec() -> Arc<ToolDefinition> {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        Arc::new(ToolDefinition::new("get_weather", "Gets the weather.", schema))
    }

    #[test]
    fn breakpoints_by_hand_and_a_thinking_block_left_unmarked() {
        let thinking = json!({"type": "thinking", "thinking": "hmm", "signature": "sig"});
        let request = ChatRequest::new(
            "claude-x",
            vec![
                Message::user("Hi"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::text("Hello."),
                        ContentBlock::Provider { provider: "anthropic".into(), raw: thinking.clone() },
                    ],
                },
                Message::user("Bye"),
            ],
        )
        .system("Be brief.")
        .tools(vec![weather_spec()])
        .prompt_cache(PromptCache::At(vec![CacheBreakpoint::Message(1), CacheBreakpoint::Tools]))
        .prompt_cache_key("team-a");
        let body = encode_request(&request, 4096, false).unwrap();
        assert_eq!(body["system"], "Be brief.", "no breakpoint asked for on the system prompt");
        assert_eq!(body["tools"][0]["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(
            body["messages"][1]["content"],
            json!([{"type": "text", "text": "Hello.", "cache_control": {"type": "ephemeral"}}, thinking])
        );
        assert_eq!(body["messages"][2]["content"], json!([{"type": "text", "text": "Bye"}]));
        assert!(!body.to_string().contains("prompt_cache"), "nothing of other providers' settings");
    }

    #[test]
    fn encodes_a_full_request() {
        let request = ChatRequest::new(
            "claude-x",
            vec![
                Message::user("Weather in Paris?"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::Provider {
                            provider: "anthropic".into(),
                            raw: json!({"type": "thinking", "thinking": "hmm", "signature": "sig"}),
                        },
                        ContentBlock::Provider { provider: "openai".into(), raw: json!({"x": 1}) },
                        ContentBlock::text(""),
                        ContentBlock::text("Let me check."),
                        ContentBlock::ToolUse(ToolUse::new("tu_1", "get_weather", json!({"city": "Paris"}))),
                        ContentBlock::ToolUse(ToolUse::from_raw_arguments("tu_2", "get_weather", "{oops")),
                    ],
                },
                Message::tool_results([
                    ToolResult { tool_use_id: "tu_1".into(), content: "sunny".into(), is_error: false },
                    ToolResult { tool_use_id: "tu_2".into(), content: "bad arguments".into(), is_error: true },
                ]),
            ],
        )
        .system("Be brief.")
        .tools(vec![weather_spec()])
        .temperature(0.2)
        .stop_sequences(["END"]);
        let body = encode_request(&request, 4096, false).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "claude-x",
                "max_tokens": 4096,
                // The default breakpoints: tools, system, the newest message and the
                // user message before it.
                "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
                "messages": [
                    {"role": "user", "content": [
                        {"type": "text", "text": "Weather in Paris?", "cache_control": {"type": "ephemeral"}},
                    ]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                        {"type": "text", "text": "Let me check."},
                        {"type": "tool_use", "id": "tu_1", "name": "get_weather", "input": {"city": "Paris"}},
                        {"type": "tool_use", "id": "tu_2", "name": "get_weather", "input": {}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "tu_1", "content": "sunny", "is_error": false},
                        {"type": "tool_result", "tool_use_id": "tu_2", "content": "bad arguments", "is_error": true,
                         "cache_control": {"type": "ephemeral"}},
                    ]},
                ],
                "tools": [{
                    "name": "get_weather",
                    "description": "Gets the weather.",
                    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                    "cache_control": {"type": "ephemeral"},
                }],
                "temperature": 0.2,
                "stop_sequences": ["END"],
            })
        );
        let minimal = ChatRequest::new("m", vec![Message::user("hi")]).max_tokens(10).prompt_cache(PromptCache::Off);
        let minimal = encode_request(&minimal, 4096, true).unwrap();
        assert_eq!(
            minimal,
            json!({"model": "m", "max_tokens": 10, "stream": true,
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
        );
    }
}
