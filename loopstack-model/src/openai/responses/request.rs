//! Encoding a [`ChatRequest`] as the JSON body of a Responses API request.

use serde_json::{Map, Value, json};

use super::super::request::strict_ok;
use crate::http;
use crate::image::Image;
use crate::message::{ContentBlock, Message, Reasoning, Role, ToolResult, ToolUse};
use crate::model::{ChatRequest, ReasoningEffort};

/// How a provider's requests are written, from its settings.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wire {
    /// The provider's name: only its own reasoning and provider blocks are sent back.
    pub(super) provider: &'static str,
    /// The `store` flag sent.
    pub(super) store: bool,
    /// Whether `include: ["reasoning.encrypted_content"]` is sent.
    pub(super) encrypted_reasoning: bool,
    /// Whether a response schema is sent as `text.format`.
    pub(super) structured_output: bool,
}

/// The JSON body of a Responses API request.
pub(super) fn encode_request(request: &ChatRequest, stream: bool, wire: Wire) -> Value {
    let settings = &request.settings;
    let mut body = Map::new();
    body.insert("model".into(), request.model.clone().into());
    if let Some(system) = &settings.system {
        body.insert("instructions".into(), system.clone().into());
    }
    let mut input = Vec::new();
    for message in &request.messages {
        encode_message(message, wire, &mut input);
    }
    body.insert("input".into(), input.into());
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                // The API makes a function strict unless told otherwise, and refuses a
                // schema strict mode cannot take: strict only when it can.
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.input_schema, "strict": strict_ok(&t.input_schema)})
            })
            .collect();
        body.insert("tools".into(), tools);
    }
    if let Some(max_tokens) = settings.max_tokens {
        body.insert("max_output_tokens".into(), max_tokens.into());
    }
    if let Some(temperature) = settings.temperature {
        body.insert("temperature".into(), http::f32_value(temperature));
    }
    if let Some(key) = &settings.prompt_cache_key {
        body.insert("prompt_cache_key".into(), key.clone().into());
    }
    match settings.reasoning_effort {
        Some(ReasoningEffort::None) => {
            body.insert("reasoning".into(), json!({"effort": "none"}));
        }
        Some(effort) => {
            body.insert("reasoning".into(), json!({"effort": effort.as_str(), "summary": "auto"}));
        }
        None => {}
    }
    if let Some(format) = request.response_schema.as_ref().filter(|_| wire.structured_output) {
        body.insert(
            "text".into(),
            json!({"format": {
                "type": "json_schema", "name": format.name, "schema": *format.schema,
                "strict": strict_ok(&format.schema),
            }}),
        );
    }
    body.insert("store".into(), wire.store.into());
    if wire.encrypted_reasoning {
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if stream {
        body.insert("stream".into(), true.into());
    }
    Value::Object(body)
}

/// Appends the input items of one message.
fn encode_message(message: &Message, wire: Wire, out: &mut Vec<Value>) {
    match message.role {
        Role::User => encode_user(message, out),
        Role::Assistant => {
            for block in &message.content {
                let item = match block {
                    ContentBlock::Text { text } if text.is_empty() => continue,
                    // Earlier text of the model's as an input message with string
                    // content (`EasyInputMessage`): an `output_text` part is an output
                    // message's, whose published schema requires its `annotations` and
                    // `logprobs`, and the message its `id` and `status`.
                    ContentBlock::Text { text } => json!({"type": "message", "role": "assistant", "content": text}),
                    ContentBlock::ToolUse(call) => function_call(call),
                    ContentBlock::Reasoning(reasoning) if reasoning.provider == wire.provider => {
                        match reasoning_item(reasoning, wire.store) {
                            Some(item) => item,
                            None => continue,
                        }
                    }
                    ContentBlock::Provider { provider, raw } if provider == wire.provider => raw.clone(),
                    // Another provider's reasoning and blocks: no provider reads another's.
                    // An assistant has no images or tool results.
                    ContentBlock::Reasoning(_)
                    | ContentBlock::Provider { .. }
                    | ContentBlock::Image { .. }
                    | ContentBlock::ToolResult(_) => continue,
                };
                out.push(item);
            }
        }
    }
}

/// A user message: its tool results as `function_call_output` items (first, so they
/// follow the calls), then one `user` message with the images of each result, each
/// after a line naming its call, and the message's own text and images.
fn encode_user(message: &Message, out: &mut Vec<Value>) {
    let mut parts = Vec::new();
    let mut results = 0;
    for result in message.tool_results_iter() {
        results += 1;
        out.push(json!({"type": "function_call_output", "call_id": result.tool_use_id, "output": result_text(result)}));
        let mut images = message.images().filter(|(_, call)| *call == Some(result.tool_use_id.as_str())).peekable();
        if images.peek().is_some() {
            let intro = format!("The result of call {} came with this image:", result.tool_use_id);
            parts.push(json!({"type": "input_text", "text": intro}));
            parts.extend(images.filter_map(|(image, _)| image_part(image)));
        }
    }
    for block in &message.content {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => parts.push(json!({"type": "input_text", "text": text})),
            ContentBlock::Image { source, tool_use_id: None } => parts.extend(image_part(source)),
            _ => {}
        }
    }
    if parts.is_empty() && results == 0 {
        // A message with nothing to show is still a turn of the user's.
        parts.push(json!({"type": "input_text", "text": ""}));
    }
    if !parts.is_empty() {
        out.push(json!({"type": "message", "role": "user", "content": parts}));
    }
}

/// An `input_image` part: a data URL for base64 data, else the URL. An image still
/// stored as a run's document (not resolved to its data) is left out.
fn image_part(image: &Image) -> Option<Value> {
    let url = match image {
        Image::Url { url } => url.clone(),
        other => other.data_url()?,
    };
    Some(json!({"type": "input_image", "image_url": url, "detail": "auto"}))
}

/// A `function_call` item: the call's id is its `call_id`; arguments that did not
/// parse are sent back as the model wrote them.
fn function_call(call: &ToolUse) -> Value {
    let arguments = match &call.invalid_input {
        Some(invalid) => invalid.raw.clone(),
        None => call.input.to_string(),
    };
    json!({"type": "function_call", "call_id": call.id, "name": call.name, "arguments": arguments})
}

/// The `reasoning` item of a reasoning block, as it came: its `id`, `summary` and
/// `encrypted_content`. Without `store`, an item without its encrypted content
/// cannot be read back by the API (it looks the id up, and finds nothing): it is left
/// out, as is a block without an id.
fn reasoning_item(reasoning: &Reasoning, store: bool) -> Option<Value> {
    let id = reasoning.data.get("id").and_then(Value::as_str)?;
    let encrypted = reasoning.data.get("encrypted_content").filter(|e| e.is_string());
    if encrypted.is_none() && !store {
        return None;
    }
    let summary = match reasoning.data.get("summary") {
        Some(Value::Array(parts)) => Value::Array(parts.clone()),
        _ if reasoning.text.is_empty() => json!([]),
        _ => json!([{"type": "summary_text", "text": reasoning.text}]),
    };
    let mut item = json!({"type": "reasoning", "id": id, "summary": summary});
    if let Some(encrypted) = encrypted {
        item["encrypted_content"] = encrypted.clone();
    }
    Some(item)
}

fn result_text(result: &ToolResult) -> String {
    if result.is_error { format!("Error: {}", result.content) } else { result.content.clone() }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::ResponseSchema;
    use crate::{ToolDefinition, ToolResult};

    const WIRE: Wire =
        Wire { provider: "openai-responses", store: false, encrypted_reasoning: true, structured_output: true };

    fn reasoning(provider: &str, id: &str, encrypted: Option<&str>) -> ContentBlock {
        let mut data = json!({"id": id, "summary": [{"type": "summary_text", "text": "Think."}]});
        if let Some(e) = encrypted {
            data["encrypted_content"] = json!(e);
        }
        ContentBlock::Reasoning(Reasoning::new(provider, "Think.", data))
    }

    #[test]
    fn encodes_a_tool_loop_with_reasoning() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false});
        let loose = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        let request = ChatRequest::new(
            "gpt-x",
            vec![
                Message::user("Weather in Oslo?"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        reasoning("openai-responses", "rs_1", Some("enc1")),
                        reasoning("anthropic", "x", Some("y")),
                        reasoning("openai-responses", "rs_2", None),
                        ContentBlock::Provider { provider: "anthropic".into(), raw: json!({"type": "thinking"}) },
                        ContentBlock::text("Checking."),
                        ContentBlock::ToolUse(ToolUse::new("call_1", "w", json!({"city": "Oslo"}))),
                        ContentBlock::ToolUse(ToolUse::from_raw_arguments("call_2", "w", "{bad")),
                    ],
                },
                Message::tool_results([
                    ToolResult { tool_use_id: "call_1".into(), content: "sunny".into(), is_error: false },
                    ToolResult { tool_use_id: "call_2".into(), content: "bad arguments".into(), is_error: true },
                ]),
            ],
        )
        .system("Be brief.")
        .tools(vec![
            Arc::new(ToolDefinition::new("w", "Weather.", schema.clone())),
            Arc::new(ToolDefinition::new("v", "Loose.", loose.clone())),
        ])
        .max_tokens(100)
        .temperature(0.2)
        .stop_sequences(["END"])
        .prompt_cache_key("k")
        .reasoning_effort(ReasoningEffort::Low);
        assert_eq!(
            encode_request(&request, false, WIRE),
            json!({
                "model": "gpt-x",
                "instructions": "Be brief.",
                "input": [
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Oslo?"}]},
                    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Think."}], "encrypted_content": "enc1"},
                    {"type": "message", "role": "assistant", "content": "Checking."},
                    {"type": "function_call", "call_id": "call_1", "name": "w", "arguments": "{\"city\":\"Oslo\"}"},
                    {"type": "function_call", "call_id": "call_2", "name": "w", "arguments": "{bad"},
                    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                    {"type": "function_call_output", "call_id": "call_2", "output": "Error: bad arguments"},
                ],
                "tools": [
                    {"type": "function", "name": "w", "description": "Weather.", "parameters": schema, "strict": true},
                    {"type": "function", "name": "v", "description": "Loose.", "parameters": loose, "strict": false},
                ],
                "max_output_tokens": 100,
                "temperature": 0.2,
                "prompt_cache_key": "k",
                "reasoning": {"effort": "low", "summary": "auto"},
                "store": false,
                "include": ["reasoning.encrypted_content"],
            })
        );
        // With `store`, an item without encrypted content is found by its id.
        let stored = encode_request(&request, true, Wire { store: true, encrypted_reasoning: false, ..WIRE });
        let ids: Vec<&str> = stored["input"].as_array().unwrap().iter().filter_map(|i| i.get("id")?.as_str()).collect();
        assert_eq!(ids, ["rs_1", "rs_2"]);
        assert_eq!(
            (stored["store"].clone(), stored.get("include"), stored["stream"].clone()),
            (json!(true), None, json!(true))
        );
    }

    #[test]
    fn images_schemas_and_efforts() {
        let png = Image::base64("image/png", "iVBORw0KGgo=").unwrap();
        let mut results =
            Message::tool_results([ToolResult { tool_use_id: "c1".into(), content: "shot".into(), is_error: false }]);
        results.content.push(ContentBlock::Image { source: png.clone(), tool_use_id: Some("c1".into()) });
        let request = ChatRequest::new(
            "gpt-x",
            vec![
                Message::user_with_images("What is this?", [Image::url("https://example.com/a.jpg").unwrap()]),
                results,
            ],
        )
        .response_schema(ResponseSchema::new("answer", json!({"type": "object"})))
        .reasoning_effort(ReasoningEffort::None);
        let body = encode_request(&request, false, WIRE);
        assert_eq!(
            body["input"],
            json!([
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {"type": "input_image", "image_url": "https://example.com/a.jpg", "detail": "auto"},
                ]},
                {"type": "function_call_output", "call_id": "c1", "output": "shot"},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "The result of call c1 came with this image:"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
                ]},
            ])
        );
        assert_eq!(
            body["text"],
            json!({"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": true}})
        );
        assert_eq!(body["reasoning"], json!({"effort": "none"}));
        let off = encode_request(&request, false, Wire { structured_output: false, ..WIRE });
        assert_eq!(off.get("text"), None);
    }
}
