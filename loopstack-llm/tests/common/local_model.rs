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
//! reply), where the turn is the number of assistant messages in the request:
//! - Tools offered and no `tool` message yet: a call of the first offered tool,
//!   written as text, `finish_reason` `stop`. Its arguments fill each required
//!   property: a string with the last word of the last user message (`"What is the
//!   weather in Oslo?"` gives `"Oslo"`), a number with 1, a boolean with `true`. The
//!   form is the [`CallStyle`]: by default a ```` ```json ```` fence on even turns and
//!   doubled braces (`{{"name": .., "arguments": {{..}}}}`) on odd ones.
//! - After a tool result, with a system message: a plain answer that quotes the last
//!   tool result, `The tool says: <result>`.
//! - After a tool result, with NO system message: the same call again, forever (the
//!   repeat failure mode of such a model without a system prompt).
//! - No tools offered: `You said: <last user message>`.
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
    /// A ```` ```json ```` fence on even turns, doubled braces on odd ones.
    #[default]
    Alternating,
    /// Always `` ```json\n{"name": .., "arguments": {..}}\n``` ``.
    Fenced,
    /// Always `{{"name": .., "arguments": {{..}}}}`, as copied from a chat template.
    DoubledBraces,
    /// Always the bare JSON object.
    Bare,
}

/// The running server.
#[derive(Clone)]
pub struct LocalModel {
    /// Its address on 127.0.0.1.
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Value>>>,
}

/// Starts the server with [`CallStyle::Alternating`] on 127.0.0.1 and a free port; its
/// base URL is [`LocalModel::url`].
pub async fn start() -> LocalModel {
    LocalModel::start_with(CallStyle::Alternating).await
}

impl LocalModel {
    /// Starts the server writing tool calls in `style`.
    pub async fn start_with(style: CallStyle) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the local model server");
        let addr = listener.local_addr().expect("its address");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, style, recorded.clone()));
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

/// The text the model answers to a request body.
pub fn reply_text(request: &Value, style: CallStyle) -> String {
    let messages = request["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let with_role = |role: &'static str| move |m: &&Value| m["role"] == role;
    let last_user = messages.iter().rev().find(with_role("user")).map_or(String::new(), content);
    let has_system = messages.iter().any(|m| m["role"] == "system");
    let last_tool = messages.iter().rev().find(with_role("tool"));
    let turn = messages.iter().filter(with_role("assistant")).count();
    let tool = request["tools"].as_array().and_then(|tools| tools.first()).map(|t| &t["function"]);
    match (tool, last_tool) {
        (None, _) => format!("You said: {last_user}"),
        (Some(_), Some(result)) if has_system => format!("The tool says: {}", content(result)),
        (Some(tool), _) => tool_call_text(tool, &last_user, style, turn),
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

/// A call of `tool` (a `function` object of the request) written as text.
fn tool_call_text(tool: &Value, question: &str, style: CallStyle, turn: usize) -> String {
    let word: String = question
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-')
        .collect();
    let parameters = &tool["parameters"];
    // Written as the model writes it: `{"name": "get_weather", "arguments": {"location": "Oslo"}}`.
    let arguments: Vec<String> = parameters["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|name| {
            let value = match parameters["properties"][name]["type"].as_str() {
                Some("integer" | "number") => json!(1),
                Some("boolean") => json!(true),
                _ => json!(word),
            };
            format!("{}: {value}", json!(name))
        })
        .collect();
    let call = format!("{{\"name\": {}, \"arguments\": {{{}}}}}", tool["name"], arguments.join(", "));
    let style = match style {
        CallStyle::Alternating if turn.is_multiple_of(2) => CallStyle::Fenced,
        CallStyle::Alternating => CallStyle::DoubledBraces,
        other => other,
    };
    match style {
        CallStyle::Fenced => format!("```json\n{call}\n```"),
        CallStyle::DoubledBraces => double_braces(&call),
        _ => call,
    }
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
async fn serve(mut socket: TcpStream, style: CallStyle, requests: Arc<Mutex<Vec<Value>>>) {
    socket.set_nodelay(true).ok();
    let mut buf = Vec::new();
    loop {
        let Some((path, body)) = read_request(&mut socket, &mut buf).await else { return };
        let (status, content_type, body) = if path.trim_end_matches('/').ends_with("/v1/chat/completions") {
            requests.lock().unwrap().push(body.clone());
            answer(&body, style)
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
fn answer(request: &Value, style: CallStyle) -> (u16, &'static str, String) {
    let text = reply_text(request, style);
    let model = request["model"].as_str().filter(|m| !m.is_empty()).unwrap_or(MODEL);
    let prompt_chars: usize = request["messages"].as_array().into_iter().flatten().map(|m| content(m).len()).sum();
    let usage = json!({
        "prompt_tokens": prompt_chars / 4 + 1,
        "completion_tokens": text.len() / 4 + 1,
        "total_tokens": prompt_chars / 4 + text.len() / 4 + 2,
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
