//! Encoding a [`ChatRequest`] as the JSON body of a Chat Completions request.

use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use crate::http;
use crate::image::{Image, MediaType};
use crate::message::{ContentBlock, Message, Role, ToolResult, ToolUse};
use crate::model::ChatRequest;

/// How a provider's requests are written, from its settings.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wire {
    /// `max_tokens` or `max_completion_tokens`.
    pub token_limit_field: &'static str,
    /// Whether a response schema is sent as a strict `json_schema` response format.
    pub structured_output: bool,
    /// Whether tool calls and their results are written as text (see
    /// [`OpenAi::text_tool_calls`](super::OpenAi::text_tool_calls)).
    pub text_tool_calls: bool,
}

impl Default for Wire {
    fn default() -> Self {
        Self { token_limit_field: "max_tokens", structured_output: true, text_tool_calls: false }
    }
}

/// The JSON body of a Chat Completions request; with `structured_output`, a
/// [`ChatRequest::response_schema`] is sent as a strict `json_schema` response format.
pub(super) fn encode_request(request: &ChatRequest, stream: bool, wire: Wire) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = &request.settings.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    let mut previous = None;
    for message in &request.messages {
        if wire.text_tool_calls {
            encode_as_text(message, previous, &mut messages);
        } else {
            encode_message(message, &mut messages);
        }
        previous = Some(message);
    }
    let mut body = Map::new();
    body.insert("model".into(), request.model.clone().into());
    body.insert("messages".into(), messages.into());
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema,
                }})
            })
            .collect();
        body.insert("tools".into(), tools);
    }
    if let Some(max_tokens) = request.settings.max_tokens {
        body.insert(wire.token_limit_field.into(), max_tokens.into());
    }
    if let Some(temperature) = request.settings.temperature {
        body.insert("temperature".into(), http::f32_value(temperature));
    }
    if !request.settings.stop_sequences.is_empty() {
        body.insert("stop".into(), request.settings.stop_sequences.clone().into());
    }
    if let Some(key) = &request.settings.prompt_cache_key {
        body.insert("prompt_cache_key".into(), key.clone().into());
    }
    if let Some(effort) = request.settings.reasoning_effort {
        body.insert("reasoning_effort".into(), effort.as_str().into());
    }
    if let Some(format) = request.response_schema.as_ref().filter(|_| wire.structured_output) {
        body.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {
                "name": format.name, "schema": *format.schema, "strict": strict_ok(&format.schema),
            }}),
        );
    }
    if stream {
        body.insert("stream".into(), true.into());
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(body)
}

/// Appends the API messages of one message: a user message's tool results become `tool`
/// messages (first, so they follow the assistant's calls), its text a `user` message.
fn encode_message(message: &Message, out: &mut Vec<Value>) {
    let has_text = message.content.iter().any(|b| matches!(b, ContentBlock::Text { .. }));
    match message.role {
        Role::User if message.images().next().is_some() => encode_with_images(message, out),
        Role::User => {
            let mut results = 0;
            for result in message.tool_results_iter() {
                results += 1;
                out.push(
                    json!({"role": "tool", "tool_call_id": result.tool_use_id, "content": tool_result_text(result)}),
                );
            }
            if has_text || results == 0 {
                out.push(json!({"role": "user", "content": message.text()}));
            }
        }
        Role::Assistant => {
            let calls: Vec<Value> = message.tool_uses().map(encode_tool_call).collect();
            let text = message.text();
            let mut encoded = json!({"role": "assistant", "content": text});
            if !calls.is_empty() {
                if text.is_empty() {
                    encoded["content"] = Value::Null;
                }
                encoded["tool_calls"] = calls.into();
            }
            out.push(encoded);
        }
    }
}

/// Appends a user message that shows images: its tool results as `tool` messages
/// (text only, all the API takes there), then one `user` message with the images of
/// each result, each after a line naming its call, and the message's own text and
/// images as content parts.
fn encode_with_images(message: &Message, out: &mut Vec<Value>) {
    let mut parts = Vec::new();
    for result in message.tool_results_iter() {
        out.push(json!({"role": "tool", "tool_call_id": result.tool_use_id, "content": tool_result_text(result)}));
        let mut images = message.images().filter(|(_, call)| *call == Some(result.tool_use_id.as_str())).peekable();
        if images.peek().is_some() {
            let intro = format!("The result of call {} came with this image:", result.tool_use_id);
            parts.push(json!({"type": "text", "text": intro}));
            parts.extend(images.map(|(image, _)| image_part(image)));
        }
    }
    for block in &message.content {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => parts.push(json!({"type": "text", "text": text})),
            ContentBlock::Image { source, tool_use_id: None } => parts.push(image_part(source)),
            _ => {}
        }
    }
    if !parts.is_empty() {
        out.push(json!({"role": "user", "content": parts}));
    }
}

/// An `image_url` content part: a data URL for base64 data, else the URL.
fn image_part(image: &Image) -> Value {
    let url = match image {
        Image::Url { url } => url.clone(),
        other => other.data_url().unwrap_or_default(),
    };
    json!({"type": "image_url", "image_url": {"url": url}})
}

/// Appends one message for a model that writes its tool calls as text: the calls stay
/// the text the model wrote (one `{"name": .., "arguments": ..}` per line), and their
/// results are a user message that repeats each call beside what it returned.
///
/// Sent as `tool_calls` and `tool` messages, a chat template renders a small model's
/// calls in a format it did not write (Qwen2.5's: `<tool_call>` tags, results in
/// `<tool_response>`), and Qwen2.5-Coder-1.5B then asks for the same call again instead
/// of answering (seen against the real model at temperature 0).
fn encode_as_text(message: &Message, previous: Option<&Message>, out: &mut Vec<Value>) {
    let mut text = String::new();
    match message.role {
        Role::Assistant => {
            text.push_str(&message.text());
            for call in message.tool_uses() {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&written_call(call));
            }
            out.push(json!({"role": "assistant", "content": text}));
        }
        Role::User => {
            let calls = previous.filter(|p| p.role == Role::Assistant);
            for result in message.tool_results_iter() {
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                match calls.and_then(|m| m.tool_uses().find(|c| c.id == result.tool_use_id)) {
                    Some(call) => text.push_str(&written_call(call)),
                    None => {
                        let _ = write!(text, "The call {}", result.tool_use_id);
                    }
                }
                let outcome = if result.is_error { " failed: " } else { " returned: " };
                text.push_str(outcome);
                text.push_str(&result.content);
                // A small text model reads of a tool's image, and is not sent it.
                for (image, _) in message.images().filter(|(_, c)| *c == Some(result.tool_use_id.as_str())) {
                    let _ = write!(text, " [{} image, not shown]", image.media_type().map_or("an", MediaType::as_str));
                }
            }
            let own = message.text();
            if !own.is_empty() {
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(&own);
            }
            // The user's own images are sent as parts, for a vision model behind the server.
            let images: Vec<Value> =
                message.images().filter(|(_, c)| c.is_none()).map(|(i, _)| image_part(i)).collect();
            if !images.is_empty() {
                let parts = std::iter::once(json!({"type": "text", "text": text})).chain(images);
                out.push(json!({"role": "user", "content": parts.collect::<Vec<_>>()}));
                return;
            }
            out.push(json!({"role": "user", "content": text}));
        }
    }
}

/// A call as a model writes it: `{"name": "get_weather", "arguments": {"location": "Oslo"}}`.
fn written_call(call: &ToolUse) -> String {
    let arguments = match &call.invalid_input {
        Some(invalid) => Value::String(invalid.raw.clone()),
        None => call.input.clone(),
    };
    // Name first, as models write it (a `Value` map would sort the keys).
    format!(r#"{{"name": {}, "arguments": {arguments}}}"#, Value::String(call.name.clone()))
}

fn encode_tool_call(tool: &ToolUse) -> Value {
    let arguments = match &tool.invalid_input {
        Some(invalid) => invalid.raw.clone(),
        None => tool.input.to_string(),
    };
    json!({"id": tool.id, "type": "function", "function": {"name": tool.name, "arguments": arguments}})
}

fn tool_result_text(result: &ToolResult) -> String {
    if result.is_error { format!("Error: {}", result.content) } else { result.content.clone() }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::ToolDefinition;

    use super::*;

    fn spec(name: &'static str) -> Arc<ToolDefinition> {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        Arc::new(ToolDefinition::new(name, "A tool.", schema))
    }

    #[test]
    fn encodes_a_full_request() {
        let request = ChatRequest::new(
            "gpt-x",
            vec![
                Message::user("Weather in Paris and Rome?"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::Provider { provider: "anthropic".into(), raw: json!({"type": "thinking"}) },
                        ContentBlock::ToolUse(ToolUse::new("c1", "get_weather", json!({"city": "Paris"}))),
                        ContentBlock::ToolUse(ToolUse::from_raw_arguments("c2", "get_weather", "{\"city\": Rome}")),
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::ToolResult(ToolResult {
                            tool_use_id: "c1".into(),
                            content: "sunny".into(),
                            is_error: false,
                        }),
                        ContentBlock::ToolResult(ToolResult {
                            tool_use_id: "c2".into(),
                            content: "invalid arguments".into(),
                            is_error: true,
                        }),
                        ContentBlock::text("Thanks."),
                    ],
                },
                Message::assistant("Paris is sunny."),
            ],
        )
        .system("Be brief.")
        .tools(vec![spec("get_weather")])
        .max_tokens(100)
        .temperature(0.7)
        .stop_sequences(["END"]);
        assert_eq!(
            encode_request(&request, false, Wire::default()),
            json!({
                "model": "gpt-x",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Weather in Paris and Rome?"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                        {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": Rome}"}},
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                    {"role": "tool", "tool_call_id": "c2", "content": "Error: invalid arguments"},
                    {"role": "user", "content": "Thanks."},
                    {"role": "assistant", "content": "Paris is sunny."},
                ],
                "tools": [{"type": "function", "function": {
                    "name": "get_weather", "description": "A tool.",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                }}],
                "max_tokens": 100,
                "temperature": 0.7,
                "stop": ["END"],
            })
        );
        assert_eq!(
            encode_request(&ChatRequest::new("m", vec![Message::user("hi")]), true, Wire::default()),
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "stream": true, "stream_options": {"include_usage": true}})
        );
    }

    #[test]
    fn text_tool_calls_and_their_results_are_sent_as_text() {
        let request = ChatRequest::new(
            "qwen",
            vec![
                Message::user("Weather in Paris and Rome?"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::ToolUse(ToolUse::new("call_0", "get_weather", json!({"location": "Paris"}))),
                        ContentBlock::ToolUse(ToolUse::from_raw_arguments(
                            "call_1",
                            "get_weather",
                            "{\"location\": Rome}",
                        )),
                    ],
                },
                Message::tool_results([
                    ToolResult { tool_use_id: "call_0".into(), content: "sunny".into(), is_error: false },
                    ToolResult { tool_use_id: "call_1".into(), content: "invalid arguments".into(), is_error: true },
                ]),
                Message::assistant("Paris is sunny."),
            ],
        )
        .system("Be brief.")
        .tools(vec![spec("get_weather")]);
        let body = encode_request(&request, false, Wire { text_tool_calls: true, ..Wire::default() });
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": concat!(
                    r#"{"name": "get_weather", "arguments": {"location":"Paris"}}"#, "\n",
                    r#"{"name": "get_weather", "arguments": "{\"location\": Rome}"}"#,
                )},
                {"role": "user", "content": concat!(
                    r#"{"name": "get_weather", "arguments": {"location":"Paris"}} returned: sunny"#, "\n\n",
                    r#"{"name": "get_weather", "arguments": "{\"location\": Rome}"} failed: invalid arguments"#,
                )},
                {"role": "assistant", "content": "Paris is sunny."},
            ])
        );
        // The tools are still offered: the chat template lists them for the model.
        assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
    }

    #[test]
    fn a_prompt_cache_key_is_sent_and_breakpoints_are_not() {
        use crate::{CacheBreakpoint, PromptCache};
        let request = ChatRequest::new("gpt-x", vec![Message::user("hi")])
            .system("Be brief.")
            .prompt_cache(PromptCache::At(vec![CacheBreakpoint::System]))
            .prompt_cache_key("tenant-7");
        let body = encode_request(&request, false, Wire::default());
        assert_eq!(body["prompt_cache_key"], "tenant-7");
        assert!(!body.to_string().contains("cache_control"), "{body}");
        assert_eq!(
            encode_request(&ChatRequest::new("m", Vec::<Message>::new()), false, Wire::default())
                .get("prompt_cache_key"),
            None
        );
    }

    #[test]
    fn a_response_schema_is_a_strict_json_schema_format() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false});
        let request = ChatRequest::new("m", vec![Message::user("hi")])
            .response_schema(crate::model::ResponseSchema::new("city_answer", schema.clone()));
        let body = encode_request(&request, true, Wire::default());
        assert_eq!(
            body["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "city_answer", "schema": schema, "strict": true}})
        );
        assert_eq!(body["stream"], true);
        assert_eq!(
            encode_request(&request, false, Wire { structured_output: false, ..Wire::default() })
                .get("response_format"),
            None
        );
    }
}

/// Whether a schema meets OpenAI's strict mode: every object lists all its
/// properties as required and allows no others (an `Option` field that schemars
/// leaves out of `required` does not). Others are sent with `strict: false`, as a
/// guide the answer's check still enforces.
pub(super) fn strict_ok(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = map.get("properties") {
                let required: Vec<&str> = map
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if map.get("additionalProperties") != Some(&Value::Bool(false))
                    || props.keys().any(|k| !required.contains(&k.as_str()))
                {
                    return false;
                }
            }
            map.values().all(strict_ok)
        }
        Value::Array(items) => items.iter().all(strict_ok),
        _ => true,
    }
}

#[cfg(test)]
mod strict_tests {
    use super::*;

    #[test]
    fn only_schemas_that_require_every_property_are_strict() {
        let all = json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": false});
        assert!(strict_ok(&all));
        let optional = json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a"], "additionalProperties": false});
        assert!(!strict_ok(&optional));
        let open = json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]});
        assert!(!strict_ok(&open));
        let nested = json!({"type": "object", "properties": {"inner": optional}, "required": ["inner"], "additionalProperties": false});
        assert!(!strict_ok(&nested));
    }
}
