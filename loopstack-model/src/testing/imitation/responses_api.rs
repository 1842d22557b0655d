//! A strict imitation of the OpenAI Responses API (`POST /v1/responses`), written
//! from its published reference, for the tests of `Responses` (at OpenAI and Azure).
//!
//! It checks what the API checks: the key header, the known parameters and their
//! types, each input item's required fields, that each `function_call_output` answers
//! a `function_call` of the input, and, statelessly (`store: false`), that every
//! `reasoning` item it issued comes back unchanged before the `function_call` it
//! preceded. It answers in the API's shapes: a response object, or its typed events.
//!
//! As a model it calls `get_weather` when tools are offered and the last item is the
//! user's, answers from a `function_call_output`, answers JSON when a `text.format` is
//! asked for, counts images, and stops `incomplete` below 50 output tokens.
#![allow(dead_code, unreachable_pub)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::testing::{Reply, Request};
use serde_json::{Value, json};

/// A 400 in the API's error shape.
pub fn invalid(message: impl Into<String>, param: Option<&str>, code: Option<&str>) -> Reply {
    refuse(message, param, code).reply()
}

pub use super::Refusal;

/// A 400 refusal in the API's error shape.
fn refuse(message: impl Into<String>, param: Option<&str>, code: Option<&str>) -> Refusal {
    let body =
        json!({"error": {"message": message.into(), "type": "invalid_request_error", "param": param, "code": code}});
    Refusal { status: 400, body }
}

/// What a reasoning item the imitation issued was, and the call it preceded.
#[derive(Clone)]
struct Issued {
    item: Value,
    call_id: Option<String>,
}

#[derive(Default)]
struct State {
    /// Reasoning items issued, by id.
    reasoning: HashMap<String, Issued>,
    next: u32,
    /// Replies given instead of an answer, in order, once the request was checked.
    faults: VecDeque<Reply>,
}

/// The imitation's settings and state.
#[derive(Clone)]
pub struct ResponsesApi {
    /// The path (with its query) requests must use.
    pub path: String,
    /// The header the key comes in and its whole value.
    pub auth: (&'static str, String),
    /// A header that must not be sent (the other way of sending a key).
    pub no_header: Option<&'static str>,
    /// The pieces event streams are sent in.
    pub pieces: Vec<usize>,
    state: Arc<Mutex<State>>,
}

impl ResponsesApi {
    /// OpenAI's API with this key.
    pub fn openai(key: &str) -> Self {
        Self {
            path: "/v1/responses".into(),
            auth: ("authorization", format!("Bearer {key}")),
            no_header: Some("api-key"),
            pieces: vec![7, 31, 3],
            state: Arc::default(),
        }
    }

    /// Gives `reply` instead of the next answer (after the request is checked).
    pub fn fault(&self, reply: Reply) {
        self.state.lock().unwrap().faults.push_back(reply);
    }

    /// The handler for `Server::handle`.
    pub fn handler(self) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
        move |request| self.answer(request)
    }

    /// Records a reasoning item as issued by the API (before the call `call_id`, if
    /// any), so that it is accepted back unchanged.
    pub fn issue(&self, item: Value, call_id: Option<String>) {
        let id = item["id"].as_str().unwrap_or_default().to_owned();
        self.state.lock().unwrap().reasoning.insert(id, Issued { item, call_id });
    }

    /// Checks a request as the API does (route, key, content type, body), or the
    /// refusal it answers with.
    pub fn check_request(&self, request: &Request) -> Result<(), Refusal> {
        if request.method != "POST" || request.path != self.path {
            let message = format!("Invalid URL ({} {})", request.method, request.path);
            let body =
                json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}});
            return Err(Refusal { status: 404, body });
        }
        if request.header(self.auth.0) != Some(self.auth.1.as_str())
            || self.no_header.is_some_and(|h| request.header(h).is_some())
        {
            let body = json!({"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                                        "param": null, "code": "invalid_api_key"}});
            return Err(Refusal { status: 401, body });
        }
        if !request.header("content-type").is_some_and(|c| c.starts_with("application/json")) {
            return Err(refuse("Expected a JSON body (content-type application/json).", None, None));
        }
        self.check(&request.body)
    }

    fn answer(&self, request: &Request) -> Reply {
        if let Err(refusal) = self.check_request(request) {
            return refusal.reply();
        }
        let mut state = self.state.lock().unwrap();
        if let Some(fault) = state.faults.pop_front() {
            return fault;
        }
        let response = self.respond(&request.body, &mut state);
        drop(state);
        if request.body["stream"] == true {
            Reply::sse(events(&response)).pieces(&self.pieces)
        } else {
            Reply::json(200, response)
        }
    }

    /// Checks a request body as the API does.
    fn check(&self, body: &Value) -> Result<(), Refusal> {
        const KNOWN: &[&str] = &[
            "model",
            "input",
            "instructions",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "max_output_tokens",
            "max_tool_calls",
            "temperature",
            "top_p",
            "top_logprobs",
            "prompt_cache_key",
            "reasoning",
            "text",
            "store",
            "include",
            "stream",
            "stream_options",
            "metadata",
            "truncation",
            "user",
            "safety_identifier",
            "service_tier",
            "previous_response_id",
            "conversation",
            "background",
            "prompt",
        ];
        let body = body.as_object().ok_or_else(|| refuse("The body must be a JSON object.", None, None))?;
        if let Some(key) = body.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(refuse(format!("Unknown parameter: '{key}'."), Some(key), Some("unknown_parameter")));
        }
        let missing = |name: &str| {
            refuse(format!("Missing required parameter: '{name}'."), Some(name), Some("missing_required_parameter"))
        };
        let wrong = |name: &str, what: &str| {
            refuse(format!("Invalid type for '{name}': expected {what}."), Some(name), Some("invalid_type"))
        };
        if !body.get("model").ok_or_else(|| missing("model"))?.is_string() {
            return Err(wrong("model", "a string"));
        }
        let input =
            body.get("input").ok_or_else(|| missing("input"))?.as_array().ok_or_else(|| wrong("input", "an array"))?;
        for (key, kind) in [("instructions", "string"), ("prompt_cache_key", "string")] {
            if body.get(key).is_some_and(|v| !v.is_string()) {
                return Err(wrong(key, kind));
            }
        }
        for key in ["store", "stream"] {
            if body.get(key).is_some_and(|v| !v.is_boolean()) {
                return Err(wrong(key, "a boolean"));
            }
        }
        if let Some(max) = body.get("max_output_tokens") {
            match max.as_u64() {
                Some(n) if n >= 16 => {}
                Some(_) => {
                    return Err(refuse(
                        "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16.",
                        Some("max_output_tokens"),
                        Some("integer_below_min_value"),
                    ));
                }
                None => return Err(wrong("max_output_tokens", "an integer")),
            }
        }
        if body.get("temperature").is_some_and(|t| !t.as_f64().is_some_and(|t| (0.0..=2.0).contains(&t))) {
            return Err(wrong("temperature", "a number from 0 to 2"));
        }
        if let Some(include) = body.get("include") {
            let known = ["reasoning.encrypted_content", "message.output_text.logprobs", "file_search_call.results"];
            let ok =
                include.as_array().is_some_and(|a| a.iter().all(|i| i.as_str().is_some_and(|i| known.contains(&i))));
            if !ok {
                return Err(refuse("Invalid value for 'include'.", Some("include"), Some("invalid_value")));
            }
        }
        if let Some(reasoning) = body.get("reasoning") {
            let effort = reasoning.get("effort").and_then(Value::as_str);
            let summary = reasoning.get("summary");
            if !effort.is_some_and(|e| ["none", "minimal", "low", "medium", "high"].contains(&e))
                || summary.is_some_and(|s| !s.as_str().is_some_and(|s| ["auto", "concise", "detailed"].contains(&s)))
            {
                return Err(refuse("Invalid value for 'reasoning'.", Some("reasoning"), Some("invalid_value")));
            }
        }
        if let Some(text) = body.get("text") {
            let format = &text["format"];
            let ok = format["type"] == "json_schema"
                && format["name"].as_str().is_some_and(|n| !n.is_empty() && n.len() <= 64)
                && format["schema"].is_object()
                && format.get("strict").is_none_or(Value::is_boolean);
            if !ok {
                return Err(refuse("Invalid 'text.format'.", Some("text.format"), Some("invalid_value")));
            }
        }
        if let Some(tools) = body.get("tools") {
            let tools = tools.as_array().ok_or_else(|| wrong("tools", "an array"))?;
            for (i, tool) in tools.iter().enumerate() {
                let name_ok = tool["name"].as_str().is_some_and(|n| {
                    (1..=64).contains(&n.len()) && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                });
                if tool["type"] != "function"
                    || !name_ok
                    || !tool["parameters"].is_object()
                    || tool.get("strict").is_some_and(|s| !s.is_boolean())
                    || tool.get("description").is_some_and(|d| !d.is_string())
                {
                    return Err(refuse(format!("Invalid tool at 'tools[{i}]'."), Some(&format!("tools[{i}]")), None));
                }
            }
        }
        self.check_input(input, body.get("store") == Some(&Value::Bool(true)))
    }

    fn check_input(&self, input: &[Value], store: bool) -> Result<(), Refusal> {
        let state = self.state.lock().unwrap();
        let mut calls: Vec<&str> = Vec::new();
        // The reasoning items seen so far, by id.
        let mut reasoning_seen: Vec<&str> = Vec::new();
        for (i, item) in input.iter().enumerate() {
            let param = format!("input[{i}]");
            let field = |name: &str| {
                item.get(name).and_then(Value::as_str).ok_or_else(|| {
                    refuse(
                        format!("Missing required parameter: '{param}.{name}'."),
                        Some(&param),
                        Some("missing_required_parameter"),
                    )
                })
            };
            match item.get("type").and_then(Value::as_str).unwrap_or("message") {
                "message" => {
                    let role = field("role")?;
                    let parts: &[&str] = match role {
                        "user" | "system" | "developer" => &["input_text", "input_image", "input_file"],
                        "assistant" => &["output_text", "refusal"],
                        _ => {
                            return Err(refuse(
                                format!("Invalid value: '{role}'."),
                                Some(&format!("{param}.role")),
                                Some("invalid_value"),
                            ));
                        }
                    };
                    let content = &item["content"];
                    let parts_ok = content.is_string()
                        || content.as_array().is_some_and(|c| {
                            c.iter().all(|p| {
                                let kind = p["type"].as_str().unwrap_or_default();
                                parts.contains(&kind)
                                    && match kind {
                                        "input_text" | "output_text" => p["text"].is_string(),
                                        "input_image" => {
                                            p["image_url"].as_str().is_some_and(|u| {
                                                u.starts_with("data:image/")
                                                    || u.starts_with("https://")
                                                    || u.starts_with("http://")
                                            }) && p.get("detail").is_none_or(|d| {
                                                d.as_str().is_some_and(|d| ["low", "high", "auto"].contains(&d))
                                            })
                                        }
                                        _ => true,
                                    }
                            })
                        });
                    if !parts_ok {
                        return Err(refuse(
                            format!("Invalid content at '{param}.content'."),
                            Some(&param),
                            Some("invalid_value"),
                        ));
                    }
                }
                "function_call" => {
                    let call_id = field("call_id")?;
                    field("name")?;
                    field("arguments")?;
                    // Stateless: the reasoning that preceded this call must come first.
                    let before = state.reasoning.values().find(|r| r.call_id.as_deref() == Some(call_id));
                    if let Some(before) = before
                        && !store
                    {
                        let id = before.item["id"].as_str().unwrap_or_default();
                        if !reasoning_seen.contains(&id) {
                            return Err(refuse(
                                format!(
                                    "Item '{call_id}' of type 'function_call' was provided without its required 'reasoning' item: '{id}'."
                                ),
                                Some(&param),
                                None,
                            ));
                        }
                    }
                    calls.push(call_id);
                }
                "function_call_output" => {
                    let call_id = field("call_id")?;
                    if !item["output"].is_string() && !item["output"].is_array() {
                        return Err(refuse(
                            format!("Missing required parameter: '{param}.output'."),
                            Some(&param),
                            None,
                        ));
                    }
                    if !calls.contains(&call_id) {
                        return Err(refuse(
                            format!("No tool call found for function call output with call_id {call_id}."),
                            Some(&param),
                            None,
                        ));
                    }
                }
                "reasoning" => {
                    let id = field("id")?;
                    if !item["summary"].is_array() {
                        return Err(refuse(
                            format!("Missing required parameter: '{param}.summary'."),
                            Some(&param),
                            None,
                        ));
                    }
                    if item.get("content").is_some_and(|c| c.as_array().is_none_or(|c| !c.is_empty())) {
                        return Err(refuse(
                            format!(
                                "Invalid '{param}.content': array too long. Expected an array with maximum length 0."
                            ),
                            Some(&param),
                            None,
                        ));
                    }
                    let Some(issued) = state.reasoning.get(id) else {
                        return Err(Refusal {
                            status: 404,
                            body: json!({"error": {"message": format!("Item with id '{id}' not found."), "type": "invalid_request_error", "param": "input", "code": null}}),
                        });
                    };
                    if !store && item.get("encrypted_content").is_none() {
                        return Err(Refusal {
                            status: 404,
                            body: json!({"error": {"message": format!("Item with id '{id}' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input."), "type": "invalid_request_error", "param": "input", "code": null}}),
                        });
                    }
                    if item.get("encrypted_content").is_some_and(|e| *e != issued.item["encrypted_content"])
                        || item["summary"] != issued.item["summary"]
                    {
                        return Err(refuse(
                            format!("The encrypted content for item {id} could not be verified."),
                            Some(&param),
                            Some("invalid_encrypted_content"),
                        ));
                    }
                    reasoning_seen.push(id);
                }
                other => {
                    return Err(refuse(
                        format!("Invalid value: '{other}'."),
                        Some(&format!("{param}.type")),
                        Some("invalid_value"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The response to a checked request.
    fn respond(&self, body: &Value, state: &mut State) -> Value {
        state.next += 1;
        let n = state.next;
        let input = body["input"].as_array().cloned().unwrap_or_default();
        let last = input.last().cloned().unwrap_or(Value::Null);
        let mut output = Vec::new();
        let reasons = body.get("reasoning").is_some_and(|r| r["effort"] != "none");
        let mut reasoning_id = None;
        if reasons {
            let id = format!("rs_{n}");
            let mut item = json!({"type": "reasoning", "id": id, "summary": []});
            if body["reasoning"]["summary"].is_string() {
                item["summary"] = json!([
                    {"type": "summary_text", "text": format!("**Turn {n}**\n\nRead the question.")},
                    {"type": "summary_text", "text": "Decide what to do."},
                ]);
            }
            if body["include"].as_array().is_some_and(|i| i.contains(&json!("reasoning.encrypted_content"))) {
                item["encrypted_content"] = json!(format!("gAAAAB-secret-{n}"));
            }
            reasoning_id = Some(id.clone());
            state.reasoning.insert(id, Issued { item: item.clone(), call_id: None });
            output.push(item);
        }
        let tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
        let message = |text: String| {
            json!({"type": "message", "id": format!("msg_{n}"), "status": "completed", "role": "assistant",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]})
        };
        let last_user = last["type"] == "message" && last["role"] == "user";
        if last["type"] == "function_call_output" {
            output.push(message(format!("The weather: {}.", last["output"].as_str().unwrap_or_default())));
        } else if tools && last_user {
            let call_id = format!("call_{n}");
            if let Some(id) = &reasoning_id {
                state.reasoning.get_mut(id).unwrap().call_id = Some(call_id.clone());
            }
            output.push(json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": call_id,
                               "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}", "status": "completed"}));
        } else if body.get("text").is_some() {
            output.push(message("{\"city\":\"Oslo\",\"celsius\":21}".into()));
        } else {
            let images =
                last["content"].as_array().map_or(0, |c| c.iter().filter(|p| p["type"] == "input_image").count());
            let text =
                if images > 0 { format!("I see {images} images.") } else { "Hello there, how can I help?".into() };
            output.push(message(text));
        }
        let short = body["max_output_tokens"].as_u64().is_some_and(|m| m < 50);
        let input_tokens = 20 * input.len() as u64 + 100;
        let cached = if body.get("prompt_cache_key").is_some() { 64 } else { 0 };
        let reasoning_tokens = if reasons { 12 } else { 0 };
        json!({
            "id": format!("resp_{n}"), "object": "response", "created_at": 1_750_000_000 + n,
            "status": if short { "incomplete" } else { "completed" },
            "error": null,
            "incomplete_details": if short { json!({"reason": "max_output_tokens"}) } else { Value::Null },
            "instructions": body.get("instructions").cloned().unwrap_or(Value::Null),
            "model": format!("{}-2025-08-07", body["model"].as_str().unwrap_or_default()),
            "output": output,
            "parallel_tool_calls": true,
            "store": body.get("store").cloned().unwrap_or(json!(true)),
            "temperature": 1.0,
            "usage": {
                "input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": 30 + reasoning_tokens, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                "total_tokens": input_tokens + 30 + reasoning_tokens,
            },
        })
    }
}

/// An event stream in the API's shapes: `event: <type>` and `data: <json>` per event.
pub fn sse(events: &[Value]) -> String {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut e = e.clone();
            e["sequence_number"] = json!(i);
            format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or_default())
        })
        .collect()
}

/// Pieces of a text of about `size` characters.
fn chunks(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// The events of a response: created, each item added, its deltas and done, then
/// completed (or incomplete).
pub fn events(response: &Value) -> String {
    let mut out = Vec::new();
    let mut start = response.clone();
    start["status"] = json!("in_progress");
    start["output"] = json!([]);
    start["usage"] = Value::Null;
    out.push(json!({"type": "response.created", "response": start}));
    out.push(json!({"type": "response.in_progress", "response": start}));
    for (index, item) in response["output"].as_array().into_iter().flatten().enumerate() {
        let id = item["id"].clone();
        let mut added = item.clone();
        match item["type"].as_str() {
            Some("message") => {
                added["content"] = json!([]);
                added["status"] = json!("in_progress");
                out.push(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                for (c, part) in item["content"].as_array().into_iter().flatten().enumerate() {
                    let text = part["text"].as_str().unwrap_or_default();
                    out.push(json!({"type": "response.content_part.added", "item_id": id, "output_index": index, "content_index": c,
                                    "part": {"type": "output_text", "text": "", "annotations": []}}));
                    for piece in chunks(text, 5) {
                        out.push(json!({"type": "response.output_text.delta", "item_id": id, "output_index": index,
                                        "content_index": c, "delta": piece, "logprobs": []}));
                    }
                    out.push(json!({"type": "response.output_text.done", "item_id": id, "output_index": index, "content_index": c, "text": text}));
                    out.push(json!({"type": "response.content_part.done", "item_id": id, "output_index": index, "content_index": c, "part": part}));
                }
            }
            Some("function_call") => {
                added["arguments"] = json!("");
                added["status"] = json!("in_progress");
                out.push(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                let arguments = item["arguments"].as_str().unwrap_or_default();
                for piece in chunks(arguments, 4) {
                    out.push(json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": index, "delta": piece}));
                }
                out.push(json!({"type": "response.function_call_arguments.done", "item_id": id, "output_index": index, "arguments": arguments}));
            }
            Some("reasoning") => {
                added["summary"] = json!([]);
                if let Some(map) = added.as_object_mut() {
                    map.remove("encrypted_content");
                }
                out.push(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                for (s, part) in item["summary"].as_array().into_iter().flatten().enumerate() {
                    let text = part["text"].as_str().unwrap_or_default();
                    out.push(
                        json!({"type": "response.reasoning_summary_part.added", "item_id": id, "output_index": index,
                                    "summary_index": s, "part": {"type": "summary_text", "text": ""}}),
                    );
                    for piece in chunks(text, 6) {
                        out.push(json!({"type": "response.reasoning_summary_text.delta", "item_id": id, "output_index": index,
                                        "summary_index": s, "delta": piece}));
                    }
                    out.push(json!({"type": "response.reasoning_summary_text.done", "item_id": id, "output_index": index, "summary_index": s, "text": text}));
                    out.push(json!({"type": "response.reasoning_summary_part.done", "item_id": id, "output_index": index, "summary_index": s, "part": part}));
                }
            }
            _ => out.push(json!({"type": "response.output_item.added", "output_index": index, "item": added})),
        }
        out.push(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
    }
    let last = if response["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
    out.push(json!({"type": last, "response": response}));
    sse(&out)
}
