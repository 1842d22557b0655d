//! A test server that behaves like a small local model behind an OpenAI-compatible
//! server, as measured with Qwen2.5-Coder-1.5B-Instruct and llama.cpp's `llama-server`:
//! it speaks Chat Completions (`POST /v1/chat/completions`, non-streamed and streamed)
//! but never returns native `tool_calls`.
//!
//! ```ignore
//! let server = local_model::start().await; // on 127.0.0.1, a free port
//! let model = OpenAi::new().base_url(server.url()).text_tool_calls(true);
//! // ... drive the model or an Agent; server.requests() are the bodies it received.
//! ```
//!
//! What it answers is a function of the request alone (the same request, the same
//! reply), following what the real model did at temperature 0 (observed 2026-12-02
//! behind llama.cpp's server with its own chat template):
//! - No tools offered: `You said: <last user message>`.
//! - A question (the conversation ends with a user message that holds no tool results):
//!   a call written as text, `finish_reason` `stop`. Its arguments fill each required
//!   property: a string with the place the question names (the words after its last
//!   ` in `, or its last word: `"What is the weather in Oslo?"` gives `"Oslo"`), a
//!   number with 1, a boolean with `true`. Two places (`in Paris and Rome`) are two
//!   calls when the system prompt says `each`, else one call for `"Paris, Rome"`.
//! - Tool results sent as `tool` messages (the API's own form, which the chat template
//!   renders as `<tool_response>`): the same call again, whatever the system prompt
//!   says: the real model does not answer from them.
//! - Tool results written as text in a user message (`{"name": ..} returned: ..`, as
//!   `OpenAi::text_tool_calls` sends them): an answer that quotes them, `The tool says:
//!   <result>`, with a system prompt or without one.
//! - A server started with [`LocalModel::repeating`] answers every tool result with the
//!   same call again, however it is sent: a model stuck in a loop, for the guards that
//!   stop one.
//!
//! The form of a call is the [`CallStyle`]: by default as the real model writes it, the
//! outer braces doubled (`{{"name": .., "arguments": {..}}}`, copied from its chat
//! template, which shows the format so), and several calls each between `<tools>` tags.
//! Usage counts about four characters a token and, as llama.cpp's server does, reports
//! the prompt's prefix it has seen before as cached.
//!
//! A stream sends the text in pieces of 8 characters, then a chunk with the
//! `finish_reason`, a usage chunk when `stream_options.include_usage` is set, and
//! `[DONE]`. Other paths get a 404 with an OpenAI-style error.
//!
//! The file depends on std, tokio (`net`, `io-util`) and serde_json only, so that any
//! test crate can use it: from the workspace's `tests/` or `examples/`,
//! `#[path = "../loopstack-llm/tests/common/local_model.rs"] mod local_model;` (within
//! loopstack-llm's tests it is `common::local_model`). The server runs on the calling
//! test's runtime and stops with it.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// The model name the server reports when the request names none.
pub const MODEL: &str = "qwen2.5-coder-1.5b-instruct";

/// How the server writes a tool call as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CallStyle {
    /// As Qwen2.5-Coder-1.5B writes it: `{{"name": .., "arguments": {..}}}` (only the
    /// outer braces doubled); several calls each in `<tools>\n..\n</tools>`.
    #[default]
    Observed,
    /// Always `` ```json\n{"name": .., "arguments": {..}}\n``` ``.
    Fenced,
    /// Always `{{"name": .., "arguments": {{..}}}}`, every brace doubled.
    DoubledBraces,
    /// Always the bare JSON object.
    Bare,
    /// Each call in `<tool_call>\n..\n</tool_call>` (the Hermes and Qwen format).
    Tagged,
}

/// The running server.
#[derive(Clone)]
pub struct LocalModel {
    /// Its address on 127.0.0.1.
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Value>>>,
}

/// How the server behaves.
#[derive(Debug, Clone, Copy)]
struct Behaviour {
    style: CallStyle,
    /// Every tool result gets the same call again.
    repeats: bool,
}

/// Starts the server with [`CallStyle::Observed`] on 127.0.0.1 and a free port; its
/// base URL is [`LocalModel::url`].
pub async fn start() -> LocalModel {
    LocalModel::start_with(CallStyle::Observed).await
}

impl LocalModel {
    /// Starts the server writing tool calls in `style`.
    pub async fn start_with(style: CallStyle) -> Self {
        Self::serve(Behaviour { style, repeats: false }).await
    }

    /// Starts a server that answers every tool result with the same call again.
    pub async fn repeating() -> Self {
        Self::serve(Behaviour { style: CallStyle::Observed, repeats: true }).await
    }

    async fn serve(behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the local model server");
        let addr = listener.local_addr().expect("its address");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, behaviour, recorded.clone()));
            }
        });
        Self { addr, requests }
    }

    /// The base URL, `http://127.0.0.1:<port>` (give it to `OpenAi::base_url`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bodies of the chat requests received so far, oldest first.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

/// The text the model answers to a request body (a server that does not repeat).
pub fn reply_text(request: &Value, style: CallStyle) -> String {
    reply(request, Behaviour { style, repeats: false })
}

fn reply(request: &Value, Behaviour { style, repeats }: Behaviour) -> String {
    let messages = request["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let with_role = |role: &'static str| move |m: &&Value| m["role"] == role;
    let has_system = messages.iter().find(with_role("system")).map(content);
    let Some(tool) = request["tools"].as_array().and_then(|tools| tools.first()).map(|t| &t["function"]) else {
        let last_user = messages.iter().rev().find(with_role("user")).map_or(String::new(), content);
        return format!("You said: {last_user}");
    };
    let is_results = |m: &Value| content(m).contains("} returned: ") || content(m).contains("} failed: ");
    // The question: the last user message that is not tool results.
    let question = messages
        .iter()
        .rev()
        .filter(|m| m["role"] == "user")
        .map(content)
        .find(|text| !text.contains("} returned: ") && !text.contains("} failed: "))
        .unwrap_or_default();
    let each = has_system.as_deref().is_some_and(|s| s.contains("each"));
    let calls = || tool_calls_text(tool, &question, each, style);
    match messages.last() {
        Some(last) if last["role"] == "user" && is_results(last) && !repeats => {
            let results: Vec<&str> = content_str(last)
                .split("\n\n")
                .filter_map(|r| r.split_once("} returned: ").map(|(_, result)| result))
                .collect();
            format!("The tool says: {}", results.join(" "))
        }
        _ => calls(),
    }
}

/// The text of a message's `content` (a string, or an array of text parts).
fn content(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

fn content_str(message: &Value) -> &str {
    message["content"].as_str().unwrap_or_default()
}

/// The places a question names: the words after its last ` in ` (or its last word),
/// split at ` and `.
fn places(question: &str) -> Vec<String> {
    let clean = |s: &str| s.chars().filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ').collect::<String>();
    let tail = match question.rfind(" in ") {
        Some(at) => &question[at + 4..],
        None => question.split_whitespace().last().unwrap_or_default(),
    };
    let tail = tail.split(" today").next().unwrap_or(tail);
    tail.split(" and ").map(|p| clean(p).trim().to_owned()).filter(|p| !p.is_empty()).collect()
}

/// The calls of `tool` (a `function` object of the request) for `question`, written as
/// text: one per place when `each`, else one.
fn tool_calls_text(tool: &Value, question: &str, each: bool, style: CallStyle) -> String {
    let mut places = places(question);
    if places.is_empty() {
        places.push(String::new());
    }
    if !each && places.len() > 1 {
        places = vec![places.join(", ")];
    }
    let calls: Vec<String> = places.iter().map(|place| call_json(tool, place)).collect();
    match style {
        CallStyle::Observed if calls.len() > 1 => {
            calls.iter().map(|c| format!("<tools>\n{c}\n</tools>")).collect::<Vec<_>>().join("\n")
        }
        CallStyle::Observed => calls.iter().map(|c| format!("{{{c}}}")).collect::<Vec<_>>().join("\n"),
        CallStyle::Fenced => format!("```json\n{}\n```", calls.join("\n")),
        CallStyle::DoubledBraces => calls.iter().map(|c| double_braces(c)).collect::<Vec<_>>().join("\n"),
        CallStyle::Bare => calls.join("\n"),
        CallStyle::Tagged => {
            calls.iter().map(|c| format!("<tool_call>\n{c}\n</tool_call>")).collect::<Vec<_>>().join("\n")
        }
    }
}

/// `{"name": "get_weather", "arguments": {"location": "Oslo"}}`, as the model writes it.
fn call_json(tool: &Value, place: &str) -> String {
    let parameters = &tool["parameters"];
    let arguments: Vec<String> = parameters["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|name| {
            let value = match parameters["properties"][name]["type"].as_str() {
                Some("integer" | "number") => json!(1),
                Some("boolean") => json!(true),
                _ => json!(place),
            };
            format!("{}: {value}", json!(name))
        })
        .collect();
    format!("{{\"name\": {}, \"arguments\": {{{}}}}}", tool["name"], arguments.join(", "))
}

/// `{` as `{{` and `}` as `}}` outside strings.
fn double_braces(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + 8);
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        match c {
            _ if in_string => {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => in_string = false,
                    _ => {}
                }
                out.push(c);
            }
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '}' => {
                out.push(c);
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// The body of a non-streamed reply.
fn completion(model: &str, text: &str, usage: &Value) -> Value {
    json!({
        "id": "chatcmpl-local", "object": "chat.completion", "created": 1_700_000_000, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": usage,
    })
}

/// The body of a streamed reply: `data:` chunks and `[DONE]`.
fn stream(model: &str, text: &str, usage: &Value, include_usage: bool) -> String {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-local", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    let chars: Vec<char> = text.chars().collect();
    chunks
        .extend(chars.chunks(8).map(|piece| chunk(json!({"content": piece.iter().collect::<String>()}), Value::Null)));
    chunks.push(chunk(json!({}), json!("stop")));
    if include_usage {
        chunks.push(json!({"id": "chatcmpl-local", "object": "chat.completion.chunk", "model": model, "choices": [], "usage": usage}));
    }
    let mut out: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    out
}

/// Serves the requests of one connection (keep-alive) until it closes.
async fn serve(mut socket: TcpStream, behaviour: Behaviour, requests: Arc<Mutex<Vec<Value>>>) {
    socket.set_nodelay(true).ok();
    let mut buf = Vec::new();
    loop {
        let Some((path, body)) = read_request(&mut socket, &mut buf).await else { return };
        let (status, content_type, body) = if path.trim_end_matches('/').ends_with("/v1/chat/completions") {
            requests.lock().unwrap().push(body.clone());
            answer(&body, behaviour)
        } else {
            let error = json!({"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}});
            (404, "application/json", error.to_string())
        };
        let head = format!(
            "HTTP/1.1 {status} Local\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        if socket.write_all(head.as_bytes()).await.is_err() || socket.write_all(body.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// The status, content type and body answering a chat request.
fn answer(request: &Value, behaviour: Behaviour) -> (u16, &'static str, String) {
    let text = reply(request, behaviour);
    let model = request["model"].as_str().filter(|m| !m.is_empty()).unwrap_or(MODEL);
    let messages = request["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let prompt_chars: usize = messages.iter().map(|m| content(m).len()).sum();
    // The prefix the server saw in the conversation's earlier turn: all but the newest
    // message, once there was a turn.
    let seen = if messages.iter().any(|m| m["role"] == "assistant") {
        messages[..messages.len() - 1].iter().map(|m| content(m).len()).sum::<usize>() / 4
    } else {
        0
    };
    let usage = json!({
        "prompt_tokens": prompt_chars / 4 + 1,
        "completion_tokens": text.len() / 4 + 1,
        "total_tokens": prompt_chars / 4 + text.len() / 4 + 2,
        "prompt_tokens_details": {"cached_tokens": seen},
    });
    if request["stream"] == true {
        let include_usage = request["stream_options"]["include_usage"] == true;
        (200, "text/event-stream", stream(model, &text, &usage, include_usage))
    } else {
        (200, "application/json", completion(model, &text, &usage).to_string())
    }
}

/// Reads one request from the connection: its path and its body as JSON (`Null` when
/// it is not JSON); `None` when the connection closed.
async fn read_request(socket: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(String, Value)> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if socket.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let path = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
    let length = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        if socket.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
    let body: Vec<u8> = buf.drain(..head_end + length).skip(head_end).collect();
    Some((path, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}
