//! The OpenAI Chat Completions provider, also for OpenAI-compatible local servers
//! (llama.cpp's `llama-server`, Ollama, vLLM).
//!
//! ```no_run
//! use loopstack_llm::{ChatModel, ChatRequest, Message, OpenAi};
//!
//! # async fn run() -> Result<(), loopstack_llm::LlmError> {
//! // A local Ollama: no key, and small models may write tool calls as JSON text.
//! let local = OpenAi::new().base_url("http://localhost:11434/v1").text_tool_calls(true);
//! let request = ChatRequest::new("qwen2.5:3b", vec![Message::user("Hello!")]);
//! let response = local.chat(&request).await?;
//! println!("{}", response.message.text());
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::stream::BoxStream;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tracing::Instrument as _;

use crate::error::LlmError;
use crate::http::{self, ApiKey, Call, RetryPolicy, SseDecoder, Transport, malformed};
use crate::message::{ContentBlock, Message, Role, StopReason, ToolResult, ToolUse, Usage};
use crate::model::{ChatModel, ChatRequest, ChatResponse, StreamEvent};

const PROVIDER: &str = "openai";

/// OpenAI Chat Completions (`POST {base}/v1/chat/completions`), and the servers that
/// speak it: llama.cpp's `llama-server`, Ollama, vLLM.
///
/// The model of each call is [`ChatRequest::model`]. One HTTP client is built with the
/// model and reused by every call (clones share it).
///
/// | setting | default | setter |
/// |---|---|---|
/// | API key | `OPENAI_API_KEY` in [`OpenAi::from_env`]; none: no `Authorization` header | [`OpenAi::api_key`] |
/// | base URL | `OPENAI_BASE_URL`, else `https://api.openai.com` | [`OpenAi::base_url`] |
/// | request timeout | 10 minutes | [`OpenAi::timeout`] |
/// | retries | [`RetryPolicy::default`]: 3, backoff 0.5 s doubling up to 8 s | [`OpenAi::retry_policy`] |
/// | tool calls written as JSON text | off | [`OpenAi::text_tool_calls`] |
///
/// The base URL may end in `/v1` (`http://localhost:11434/v1`, as Ollama documents it)
/// or not (`http://localhost:8080`); `/v1/chat/completions` is appended without doubling
/// `/v1`. The timeout is a deadline for each whole attempt, whatever the server sends:
/// a non-streamed call until its body is read, a stream from the request until its last
/// chunk (a server that keeps sending forever still times out; raise the timeout for
/// very long streamed replies). An error response's body is read up to 64 KiB; a line
/// of an event stream may be [`SSE_MAX_LINE_BYTES`](crate::SSE_MAX_LINE_BYTES) long and
/// an event [`SSE_MAX_EVENT_BYTES`](crate::SSE_MAX_EVENT_BYTES) large (beyond, the
/// stream ends in [`LlmError::MalformedResponse`]).
///
/// How messages map: the system prompt is the first `system` message; each
/// [`ToolResult`] is a `tool` message (the API has no error flag: an error result's
/// content is prefixed with `Error: `); tool arguments that were not valid JSON are sent
/// back as the model wrote them (shortened, when refused for their depth). In replies, arguments that are not valid JSON are kept
/// in [`ToolUse::invalid_input`], as are arguments (a string, an object, or written as
/// text) nested deeper than [`MAX_JSON_DEPTH`](crate::MAX_JSON_DEPTH), which are not
/// parsed; a missing tool-call id becomes `call_<n>`, and a reply
/// with tool calls whose `finish_reason` is `stop` (some local servers) stops with
/// [`StopReason::ToolUse`]. `input_tokens` is the API's `prompt_tokens`, which includes
/// the cached tokens also counted in `cache_read_input_tokens`.
///
/// The API key never appears in `Debug` output, logs or errors.
#[derive(Clone)]
#[must_use = "a model does nothing until it is called"]
pub struct OpenAi {
    api_key: Option<ApiKey>,
    base_url: String,
    text_tool_calls: bool,
    completion_tokens_field: Option<bool>,
    transport: Transport,
}

impl fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAi")
            .field("api_key", &self.api_key)
            .field("base_url", &self.base_url)
            .field("text_tool_calls", &self.text_tool_calls)
            .field("timeout", &self.transport.timeout)
            .field("retry_policy", &self.transport.retry)
            .finish()
    }
}

impl Default for OpenAi {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenAi {
    /// The API's address when none is set.
    pub const DEFAULT_BASE_URL: &'static str = "https://api.openai.com";
    /// The request timeout when none is set: 10 minutes, as in OpenAI's SDKs.
    pub const DEFAULT_TIMEOUT: Duration = http::DEFAULT_TIMEOUT;

    /// A model at [`OpenAi::DEFAULT_BASE_URL`] with no API key; set one with
    /// [`OpenAi::api_key`], or point [`OpenAi::base_url`] at a local server.
    pub fn new() -> Self {
        Self {
            api_key: None,
            base_url: Self::DEFAULT_BASE_URL.to_owned(),
            text_tool_calls: false,
            completion_tokens_field: None,
            transport: Transport::new(),
        }
    }

    /// A model configured from the environment: `OPENAI_API_KEY` (optional: local
    /// servers need none) and `OPENAI_BASE_URL` (optional).
    ///
    /// # Errors
    /// [`LlmError::Config`] when the base URL is invalid.
    pub fn from_env() -> Result<Self, LlmError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        let mut model = Self::new();
        model.api_key = http::non_empty(lookup, "OPENAI_API_KEY").map(ApiKey::new);
        if let Some(base) = http::non_empty(lookup, "OPENAI_BASE_URL") {
            http::endpoint(PROVIDER, &base, "/v1/chat/completions")?;
            model.base_url = base;
        }
        Ok(model)
    }

    /// Sets the API key, sent as `Authorization: Bearer <key>`.
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(ApiKey::new(api_key));
        self
    }

    /// Sets the base URL, with or without a trailing `/v1`. An invalid URL fails the
    /// calls with [`LlmError::Config`].
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// Sets the request timeout (see the type's docs for what it covers).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.transport.timeout = timeout;
        self
    }

    /// Sets how failed requests are retried.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.transport.retry = policy;
        self
    }

    /// Whether to accept tool calls a model wrote as JSON in its text (off by default),
    /// for small local models that do not use the API's `tool_calls`.
    ///
    /// When on, the request offered tools and the reply has no `tool_calls`, a reply
    /// whose text is `{"name": <an offered tool>, "arguments": {..}}` (or `"parameters"`,
    /// or an array of such objects), alone or in a `` ``` `` / `` ```json `` fence, becomes
    /// tool calls with ids `call_0`, `call_1`, ... and [`StopReason::ToolUse`]; the JSON is
    /// removed from the text, text around a fence is kept. A name that is not an offered
    /// tool leaves the text as it is. In a stream, the text deltas were already yielded;
    /// the tool calls follow as events before [`StreamEvent::Done`].
    pub fn text_tool_calls(mut self, enabled: bool) -> Self {
        self.text_tool_calls = enabled;
        self
    }

    /// Whether the output token limit is sent as `max_completion_tokens` (which
    /// OpenAI's reasoning models require) instead of `max_tokens` (which local servers
    /// understand). Unset, it is `max_completion_tokens` for `api.openai.com` and
    /// `max_tokens` for any other base URL.
    pub fn max_completion_tokens(mut self, enabled: bool) -> Self {
        self.completion_tokens_field = Some(enabled);
        self
    }

    fn token_limit_field(&self) -> &'static str {
        let official = self.base_url.contains("://api.openai.com");
        if self.completion_tokens_field.unwrap_or(official) { "max_completion_tokens" } else { "max_tokens" }
    }

    /// Test hook: `sleep` is awaited instead of each retry delay, and receives it.
    #[doc(hidden)]
    pub fn __sleep_with<F, Fut>(mut self, sleep: F) -> Self
    where
        F: Fn(Duration) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.transport.sleep = Some(http::sleep_hook(sleep));
        self
    }

    fn call<'a>(&self, request: &'a ChatRequest, stream: bool) -> Result<Call<'a>, LlmError> {
        let url = http::endpoint(PROVIDER, &self.base_url, "/v1/chat/completions")?;
        let mut headers = HeaderMap::new();
        if let Some(key) = &self.api_key {
            headers.insert(AUTHORIZATION, key.header(PROVIDER, "Bearer ")?);
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let accept = if stream { "text/event-stream" } else { "application/json" };
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        let body = encode_request(request, stream, self.token_limit_field());
        let body = serde_json::to_vec(&body).map_err(|e| malformed(PROVIDER, &request.model, e.to_string()))?;
        Ok(Call { provider: PROVIDER, model: &request.model, url, headers, body: body.into() })
    }

    /// The tools whose JSON-text calls are accepted, if that is on.
    fn text_tools<'a>(&self, request: &'a ChatRequest) -> Vec<&'a str> {
        if self.text_tool_calls { request.tools.iter().map(|t| t.name.as_str()).collect() } else { Vec::new() }
    }
}

#[async_trait::async_trait]
impl ChatModel for OpenAi {
    fn provider(&self) -> &'static str {
        PROVIDER
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let span = http::request_span(PROVIDER, &request.model, false);
        let started = Instant::now();
        let result = async {
            let call = self.call(request, false)?;
            let body = self.transport.post_json(&call).await?;
            let mut response = decode_response(&body, &request.model)?;
            apply_text_tool_calls(&mut response, &self.text_tools(request));
            Ok(response)
        }
        .instrument(span.clone())
        .await;
        http::record_outcome(&span, started, result.as_ref().map(|r| &r.usage));
        result
    }

    fn stream<'a>(&'a self, request: &'a ChatRequest) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
        let span = http::request_span(PROVIDER, &request.model, true);
        match self.call(request, true) {
            Ok(call) => {
                let decoder = Decoder::new(&request.model, self.text_tools(request));
                self.transport.post_sse(call, decoder, span)
            }
            Err(e) => futures::stream::once(async { Err(e) }).boxed(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Encoding

/// The JSON body of a Chat Completions request.
fn encode_request(request: &ChatRequest, stream: bool, token_limit_field: &str) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = &request.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        encode_message(message, &mut messages);
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
    if let Some(max_tokens) = request.max_tokens {
        body.insert(token_limit_field.into(), max_tokens.into());
    }
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), http::f32_value(temperature));
    }
    if !request.stop_sequences.is_empty() {
        body.insert("stop".into(), request.stop_sequences.clone().into());
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

// ---------------------------------------------------------------------------------------
// Decoding

/// A response body. Tool call arguments are kept as raw text until each call is
/// decoded, so that they are checked for their depth before they are parsed.
#[derive(Deserialize)]
struct WireResponse {
    id: Option<String>,
    model: Option<String>,
    choices: Option<Vec<WireChoice>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: WireMessage,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    content: Option<Value>,
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    arguments: Option<Box<RawValue>>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<WireUsageDetails>,
}

#[derive(Deserialize, Default)]
struct WireUsageDetails {
    cached_tokens: Option<u64>,
}

impl WireUsage {
    fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0),
            output_tokens: self.completion_tokens.unwrap_or(0),
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: self.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0),
        }
    }
}

/// A message's `content`: a string, or (some servers) an array of text parts.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        _ => String::new(),
    }
}

/// The id of the `n`th tool call when the server gave none.
fn tool_call_id(id: Option<&str>, n: usize) -> String {
    id.filter(|id| !id.is_empty()).map_or_else(|| format!("call_{n}"), str::to_owned)
}

/// A tool call from its arguments as sent: a JSON string (usually), or an object (some
/// local servers); absent or `null` is `{}`. Either way the arguments are read by
/// [`ToolUse::from_raw_arguments`], which refuses them when they nest too deep.
fn tool_use(id: String, name: String, arguments: Option<&RawValue>) -> ToolUse {
    match arguments.map(RawValue::get) {
        None | Some("null") => ToolUse::new(id, name, json!({})),
        Some(raw) => match raw.starts_with('"').then(|| serde_json::from_str::<String>(raw)) {
            Some(Ok(text)) => ToolUse::from_raw_arguments(id, name, &text),
            _ => ToolUse::from_raw_arguments(id, name, raw),
        },
    }
}

/// The stop reason of a `finish_reason`.
fn stop_reason(finish_reason: &str, has_tool_calls: bool) -> StopReason {
    match finish_reason {
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "stop" if has_tool_calls => StopReason::ToolUse,
        "stop" => StopReason::EndTurn,
        "length" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_owned()),
    }
}

/// The API's message of an error object (the `error` field) a server sent with a
/// success status.
fn error_message(error: &Value) -> String {
    error.get("message").and_then(Value::as_str).or_else(|| error.as_str()).unwrap_or("no message").to_owned()
}

/// Decodes a non-streamed response body.
fn decode_response(body: &[u8], model: &str) -> Result<ChatResponse, LlmError> {
    let wire: WireResponse =
        serde_json::from_slice(body).map_err(|e| malformed(PROVIDER, model, format!("invalid JSON: {e}")))?;
    if let Some(error) = &wire.error {
        return Err(malformed(PROVIDER, model, format!("error in response: {}", error_message(error))));
    }
    let choices = wire.choices.ok_or_else(|| malformed(PROVIDER, model, "missing field `choices`"))?;
    let choice = choices.into_iter().next().ok_or_else(|| malformed(PROVIDER, model, "no choices"))?;
    let mut content = Vec::new();
    let text = content_text(choice.message.content.as_ref());
    if !text.is_empty() {
        content.push(ContentBlock::Text { text });
    }
    for (n, call) in choice.message.tool_calls.into_iter().flatten().enumerate() {
        let id = tool_call_id(call.id.as_deref(), n);
        content.push(ContentBlock::ToolUse(tool_use(id, call.function.name, call.function.arguments.as_deref())));
    }
    let has_tool_calls = content.iter().any(|b| matches!(b, ContentBlock::ToolUse(_)));
    let finish_reason = choice.finish_reason.ok_or_else(|| malformed(PROVIDER, model, "missing finish_reason"))?;
    Ok(ChatResponse {
        message: Message { role: Role::Assistant, content },
        stop_reason: stop_reason(&finish_reason, has_tool_calls),
        usage: wire.usage.unwrap_or_default().usage(),
        model: wire.model.unwrap_or_else(|| model.to_owned()),
        id: wire.id,
    })
}

// ---------------------------------------------------------------------------------------
// Tool calls written as text

/// With tools offered and no tool calls in `response`, turns a tool call written as
/// JSON text into tool calls. Returns the content indices of the new calls.
fn apply_text_tool_calls(response: &mut ChatResponse, offered: &[&str]) -> Vec<usize> {
    if offered.is_empty() || response.message.tool_uses().next().is_some() {
        return Vec::new();
    }
    let Some((calls, rest)) = parse_text_tool_calls(&response.message.text(), offered) else {
        return Vec::new();
    };
    let mut content = Vec::new();
    if !rest.is_empty() {
        content.push(ContentBlock::Text { text: rest });
    }
    let first = content.len();
    content.extend(calls.into_iter().map(ContentBlock::ToolUse));
    response.message.content = content;
    response.stop_reason = StopReason::ToolUse;
    (first..response.message.content.len()).collect()
}

/// Tool calls written as JSON in `text`, alone or in a fence, with the text left around
/// them; `None` when there are none (or they name a tool that is not offered).
fn parse_text_tool_calls(text: &str, offered: &[&str]) -> Option<(Vec<ToolUse>, String)> {
    let trimmed = text.trim();
    if trimmed.starts_with(['{', '['])
        && let Some(calls) = json_tool_calls(trimmed, offered)
    {
        return Some((calls, String::new()));
    }
    let mut search = 0;
    while let Some(open) = text[search..].find("```").map(|i| search + i) {
        let info_end = text[open + 3..].find('\n').map(|i| open + 3 + i)?;
        let info = text[open + 3..info_end].trim();
        let body_start = info_end + 1;
        let close = text[body_start..].find("```").map(|i| body_start + i)?;
        if (info.is_empty() || info.eq_ignore_ascii_case("json"))
            && let Some(calls) = json_tool_calls(&text[body_start..close], offered)
        {
            let (before, after) = (text[..open].trim(), text[close + 3..].trim());
            let rest = match (before.is_empty(), after.is_empty()) {
                (true, _) => after.to_owned(),
                (false, true) => before.to_owned(),
                (false, false) => format!("{before}\n\n{after}"),
            };
            return Some((calls, rest));
        }
        search = close + 3;
    }
    None
}

/// A tool call written as text; the arguments stay raw text until they are checked
/// for their depth.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextCall {
    name: String,
    arguments: Option<Box<RawValue>>,
    parameters: Option<Box<RawValue>>,
    #[serde(rename = "type")]
    _kind: Option<IgnoredAny>,
    #[serde(rename = "id")]
    _id: Option<IgnoredAny>,
}

/// `{"name", "arguments" | "parameters"}` or an array of them, every name offered.
fn json_tool_calls(json: &str, offered: &[&str]) -> Option<Vec<ToolUse>> {
    let json = json.trim();
    let items = match json.as_bytes().first()? {
        b'[' => serde_json::from_str::<Vec<TextCall>>(json).ok().filter(|items| !items.is_empty())?,
        b'{' => vec![serde_json::from_str::<TextCall>(json).ok()?],
        _ => return None,
    };
    items
        .into_iter()
        .enumerate()
        .map(|(n, item)| {
            if !offered.contains(&item.name.as_str()) {
                return None;
            }
            let arguments = item.arguments.or(item.parameters);
            if arguments.as_deref().is_some_and(|a| !a.get().starts_with(['{', '"', 'n'])) {
                return None;
            }
            Some(tool_use(format!("call_{n}"), item.name, arguments.as_deref()))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Streaming

#[derive(Deserialize)]
struct WireChunk {
    id: Option<String>,
    model: Option<String>,
    #[serde(default)]
    choices: Vec<WireChunkChoice>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChunkChoice {
    #[serde(default)]
    index: u64,
    delta: Option<WireDelta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireDelta {
    content: Option<Value>,
    tool_calls: Option<Vec<WireToolCallDelta>>,
}

#[derive(Deserialize)]
struct WireToolCallDelta {
    index: Option<u64>,
    id: Option<String>,
    function: Option<WireFunctionDelta>,
}

#[derive(Deserialize)]
struct WireFunctionDelta {
    name: Option<String>,
    arguments: Option<Box<RawValue>>,
}

/// A tool call being streamed.
struct ToolAcc {
    block: usize,
    id: String,
    name: String,
    arguments: String,
    /// Arguments some servers send whole, as an object (its JSON text).
    object: Option<String>,
}

/// Assembles the chunks of a streamed Chat Completions response. Content blocks are
/// numbered in the order they first appear (text first, as in the non-streamed reply,
/// unless a server sends tool calls before text).
struct Decoder {
    model: String,
    text_tools: Vec<String>,
    id: Option<String>,
    response_model: Option<String>,
    text: Option<(usize, String)>,
    tools: Vec<ToolAcc>,
    tool_index: HashMap<u64, usize>,
    blocks: usize,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    done: bool,
}

impl Decoder {
    fn new(model: &str, text_tools: Vec<&str>) -> Self {
        Self {
            model: model.to_owned(),
            text_tools: text_tools.into_iter().map(str::to_owned).collect(),
            id: None,
            response_model: None,
            text: None,
            tools: Vec::new(),
            tool_index: HashMap::new(),
            blocks: 0,
            finish_reason: None,
            usage: None,
            done: false,
        }
    }

    fn malformed(&self, message: impl Into<String>) -> LlmError {
        malformed(PROVIDER, &self.model, message)
    }

    fn text_delta(&mut self, piece: String, out: &mut Vec<StreamEvent>) {
        if piece.is_empty() {
            return;
        }
        let (index, text) = self.text.get_or_insert_with(|| {
            self.blocks += 1;
            (self.blocks - 1, String::new())
        });
        text.push_str(&piece);
        out.push(StreamEvent::TextDelta { index: *index, text: piece });
    }

    fn tool_delta(&mut self, position: usize, delta: WireToolCallDelta, out: &mut Vec<StreamEvent>) {
        let (name, arguments) = delta.function.map(|f| (f.name, f.arguments)).unwrap_or_default();
        // Servers that leave out `index` are matched by call id: a new id is a new call,
        // and a piece without id or index continues the call before it.
        let existing = match (delta.index, delta.id.as_deref()) {
            (Some(key), _) => self.tool_index.get(&key).copied(),
            (None, Some(id)) => self.tools.iter().position(|t| t.id == id),
            (None, None) => self.tools.len().checked_sub(1),
        };
        let key = delta.index.unwrap_or(u64::MAX - position as u64 - self.tools.len() as u64);
        let slot = match existing {
            Some(slot) => slot,
            None => {
                let block = self.blocks;
                self.blocks += 1;
                let id = tool_call_id(delta.id.as_deref(), self.tools.len());
                let name = name.clone().unwrap_or_default();
                out.push(StreamEvent::ToolUseStart { index: block, id: id.clone(), name: name.clone() });
                self.tools.push(ToolAcc { block, id, name, arguments: String::new(), object: None });
                self.tool_index.insert(key, self.tools.len() - 1);
                self.tools.len() - 1
            }
        };
        let tool = &mut self.tools[slot];
        if tool.name.is_empty() {
            tool.name = name.unwrap_or_default();
        }
        let Some(raw) = arguments.as_deref().map(RawValue::get) else { return };
        if raw.starts_with('"') {
            match serde_json::from_str::<String>(raw) {
                Ok(piece) if !piece.is_empty() => {
                    tool.arguments.push_str(&piece);
                    out.push(StreamEvent::ToolInputDelta { index: tool.block, partial_json: piece });
                }
                _ => {}
            }
        } else if raw.starts_with('{') {
            out.push(StreamEvent::ToolInputDelta { index: tool.block, partial_json: raw.to_owned() });
            tool.object = Some(raw.to_owned());
        }
    }
}

impl SseDecoder for Decoder {
    fn event(&mut self, _name: &str, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: WireChunk = serde_json::from_str(data).map_err(|e| self.malformed(format!("invalid chunk: {e}")))?;
        if let Some(error) = &chunk.error {
            return Err(self.malformed(format!("error event: {}", error_message(error))));
        }
        if self.id.is_none() {
            self.id = chunk.id;
        }
        if self.response_model.is_none() {
            self.response_model = chunk.model;
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.usage());
        }
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(delta) = choice.delta {
                self.text_delta(content_text(delta.content.as_ref()), out);
                for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                    self.tool_delta(position, call, out);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
        Ok(())
    }

    fn is_complete(&self) -> bool {
        self.done
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<ChatResponse, LlmError> {
        let finish_reason = self.finish_reason.take().ok_or_else(|| {
            let what = if self.done { "no finish_reason" } else { "the stream ended before a finish_reason" };
            self.malformed(what)
        })?;
        let mut blocks: Vec<(usize, ContentBlock)> = Vec::new();
        if let Some((index, text)) = self.text.take() {
            blocks.push((index, ContentBlock::Text { text }));
        }
        for tool in std::mem::take(&mut self.tools) {
            let arguments = tool.object.as_deref().unwrap_or(&tool.arguments);
            let call = ToolUse::from_raw_arguments(tool.id, tool.name, arguments);
            blocks.push((tool.block, ContentBlock::ToolUse(call)));
        }
        blocks.sort_by_key(|(index, _)| *index);
        let content: Vec<ContentBlock> = blocks.into_iter().map(|(_, block)| block).collect();
        let has_tool_calls = content.iter().any(|b| matches!(b, ContentBlock::ToolUse(_)));
        let mut response = ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason: stop_reason(&finish_reason, has_tool_calls),
            usage: self.usage.unwrap_or_default(),
            model: self.response_model.take().unwrap_or_else(|| self.model.clone()),
            id: self.id.take(),
        };
        let offered: Vec<&str> = self.text_tools.iter().map(String::as_str).collect();
        for index in apply_text_tool_calls(&mut response, &offered) {
            if let ContentBlock::ToolUse(tool) = &response.message.content[index] {
                out.push(StreamEvent::ToolUseStart { index, id: tool.id.clone(), name: tool.name.clone() });
                let partial_json =
                    tool.invalid_input.as_ref().map_or_else(|| tool.input.to_string(), |i| i.raw.clone());
                out.push(StreamEvent::ToolInputDelta { index, partial_json });
            }
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use loopstack_core::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, ToolSpec};

    use super::*;

    struct Named(&'static str);

    #[async_trait::async_trait]
    impl Tool for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            "A tool."
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object", "properties": {"city": {"type": "string"}}})
        }
        async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::text("ok"))
        }
    }

    fn spec(name: &'static str) -> Arc<ToolSpec> {
        ToolRegistry::new().with(Named(name)).unwrap().spec(name).unwrap().clone()
    }

    #[test]
    fn encodes_a_full_request() {
        let mut request = ChatRequest::new(
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
        .temperature(0.7);
        request.stop_sequences = vec!["END".into()];
        assert_eq!(
            encode_request(&request, false, "max_tokens"),
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
            encode_request(&ChatRequest::new("m", vec![Message::user("hi")]), true, "max_tokens"),
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "stream": true, "stream_options": {"include_usage": true}})
        );
    }

    #[test]
    fn decodes_text_tools_finish_reasons_and_usage() {
        let body = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-x-2025",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Checking.",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{\"city\":\"Paris\"}"}},
                    {"type": "function", "function": {"name": "w", "arguments": ""}},
                    {"id": "c3", "type": "function", "function": {"name": "w", "arguments": {"city": "Rome"}}},
                    {"id": "c4", "type": "function", "function": {"name": "w", "arguments": "{\"city\": Rome"}},
                ],
            }}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27,
                      "prompt_tokens_details": {"cached_tokens": 8}},
        });
        let response = decode_response(body.to_string().as_bytes(), "gpt-x").unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.usage,
            Usage { input_tokens: 20, output_tokens: 7, cache_creation_input_tokens: 0, cache_read_input_tokens: 8 }
        );
        assert_eq!((response.id.as_deref(), response.model.as_str()), (Some("chatcmpl-1"), "gpt-x-2025"));
        let content = &response.message.content;
        assert_eq!(content[0], ContentBlock::text("Checking."));
        assert_eq!(content[1], ContentBlock::ToolUse(ToolUse::new("c1", "w", json!({"city": "Paris"}))));
        assert_eq!(content[2], ContentBlock::ToolUse(ToolUse::new("call_1", "w", json!({}))));
        assert_eq!(content[3], ContentBlock::ToolUse(ToolUse::new("c3", "w", json!({"city": "Rome"}))));
        let ContentBlock::ToolUse(bad) = &content[4] else { panic!("{content:?}") };
        assert_eq!(
            (bad.input.clone(), bad.invalid_input.as_ref().unwrap().raw.as_str()),
            (Value::Null, "{\"city\": Rome")
        );

        for (finish, tools, want) in [
            ("stop", false, StopReason::EndTurn),
            ("stop", true, StopReason::ToolUse),
            ("function_call", true, StopReason::ToolUse),
            ("length", false, StopReason::MaxTokens),
            ("content_filter", false, StopReason::Other("content_filter".into())),
        ] {
            assert_eq!(stop_reason(finish, tools), want);
        }
        let minimal = json!({"choices": [{"message": {"content": null}, "finish_reason": "stop"}]});
        let response = decode_response(minimal.to_string().as_bytes(), "local").unwrap();
        assert_eq!((response.model.as_str(), response.id.clone(), response.usage), ("local", None, Usage::default()));
        assert!(response.message.content.is_empty());
    }

    #[test]
    fn malformed_bodies() {
        let err = |body: &str| decode_response(body.as_bytes(), "gpt-x").unwrap_err();
        for body in [
            "{oops",
            r#"{"choices": []}"#,
            r#"{"id": "x"}"#,
            r#"{"choices": [{"message": {"content": "hi"}}]}"#,
            r#"{"error": {"message": "model crashed"}}"#,
        ] {
            assert!(
                matches!(err(body), LlmError::MalformedResponse { provider: "openai", ref model, .. } if model == "gpt-x"),
                "{body}"
            );
        }
        assert!(err(r#"{"error": "model crashed"}"#).to_string().contains("model crashed"));
    }

    #[test]
    fn text_tool_calls_are_parsed_when_offered() {
        let offered = ["get_weather", "get_time"];
        let (calls, rest) =
            parse_text_tool_calls(r#" {"name": "get_weather", "arguments": {"city": "Paris"}} "#, &offered).unwrap();
        assert_eq!(calls, vec![ToolUse::new("call_0", "get_weather", json!({"city": "Paris"}))]);
        assert_eq!(rest, "");
        let fenced = "```json\n{\"name\": \"get_time\", \"parameters\": {}}\n```";
        let (calls, rest) = parse_text_tool_calls(fenced, &offered).unwrap();
        assert_eq!((calls, rest.as_str()), (vec![ToolUse::new("call_0", "get_time", json!({}))], ""));
        let prose = "I'll check.\n```\n[{\"name\": \"get_time\"}, {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Rome\\\"}\"}]\n```\nOne moment.";
        let (calls, rest) = parse_text_tool_calls(prose, &offered).unwrap();
        assert_eq!(
            calls,
            vec![
                ToolUse::new("call_0", "get_time", json!({})),
                ToolUse::new("call_1", "get_weather", json!({"city": "Rome"}))
            ]
        );
        assert_eq!(rest, "I'll check.\n\nOne moment.");
        let second_fence = "```rust\nfn main() {}\n```\n```json\n{\"name\": \"get_time\", \"arguments\": {}}\n```";
        assert_eq!(parse_text_tool_calls(second_fence, &offered).unwrap().1, "```rust\nfn main() {}\n```");

        for text in [
            r#"{"name": "delete_everything", "arguments": {}}"#,
            r#"{"name": "get_time", "arguments": {}, "note": "extra key"}"#,
            r#"{"name": "get_time", "arguments": 3}"#,
            r#"[]"#,
            "The answer is 42.",
            "```json\n{\"name\": \"get_time\"\n```",
            "```python\n{\"name\": \"get_time\"}\n```",
            "``` unterminated",
        ] {
            assert_eq!(parse_text_tool_calls(text, &offered), None, "{text}");
        }
    }

    #[test]
    fn text_tool_calls_only_replace_plain_replies() {
        let reply = |content| ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
            model: "m".into(),
            id: None,
        };
        let json_text = r#"{"name": "get_time", "arguments": {}}"#;
        let mut response = reply(vec![ContentBlock::text(json_text)]);
        assert_eq!(apply_text_tool_calls(&mut response, &[]), Vec::<usize>::new(), "no tools offered");
        assert_eq!(response.stop_reason, StopReason::EndTurn);
        assert_eq!(apply_text_tool_calls(&mut response, &["get_time"]), vec![0]);
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.message.content,
            vec![ContentBlock::ToolUse(ToolUse::new("call_0", "get_time", json!({})))]
        );
        let mut with_calls =
            reply(vec![ContentBlock::text(json_text), ContentBlock::ToolUse(ToolUse::new("c", "get_time", json!({})))]);
        assert!(apply_text_tool_calls(&mut with_calls, &["get_time"]).is_empty());
        assert_eq!(with_calls.message.content.len(), 2);
    }

    fn run_stream(chunks: &[&str], text_tools: Vec<&str>) -> (Vec<StreamEvent>, Result<ChatResponse, LlmError>) {
        let mut decoder = Decoder::new("gpt-x", text_tools);
        let mut out = Vec::new();
        for chunk in chunks {
            if let Err(e) = decoder.event("message", chunk, &mut out) {
                return (out, Err(e));
            }
        }
        let result = decoder.finish(&mut out);
        (out, result)
    }

    #[test]
    fn streams_text_and_parallel_tool_calls() {
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "chatcmpl-1", "model": "gpt-x-2025", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                .to_string()
        };
        let chunks = [
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": "Let me "}), Value::Null),
            chunk(json!({"content": "check."}), Value::Null),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "w", "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}), Value::Null),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "c2", "type": "function", "function": {"name": "w", "arguments": "{\"city\":\"Rome\"}"}}]}),
                Value::Null,
            ),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}), Value::Null),
            chunk(json!({}), json!("tool_calls")),
            json!({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}})
                .to_string(),
            "[DONE]".to_owned(),
        ];
        let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
        let (events, response) = run_stream(&chunks, vec![]);
        assert_eq!(
            events,
            vec![
                StreamEvent::TextDelta { index: 0, text: "Let me ".into() },
                StreamEvent::TextDelta { index: 0, text: "check.".into() },
                StreamEvent::ToolUseStart { index: 1, id: "c1".into(), name: "w".into() },
                StreamEvent::ToolInputDelta { index: 1, partial_json: "{\"city\":".into() },
                StreamEvent::ToolUseStart { index: 2, id: "c2".into(), name: "w".into() },
                StreamEvent::ToolInputDelta { index: 2, partial_json: "{\"city\":\"Rome\"}".into() },
                StreamEvent::ToolInputDelta { index: 1, partial_json: "\"Paris\"}".into() },
            ]
        );
        let response = response.unwrap();
        assert_eq!(
            response.message.content,
            vec![
                ContentBlock::text("Let me check."),
                ContentBlock::ToolUse(ToolUse::new("c1", "w", json!({"city": "Paris"}))),
                ContentBlock::ToolUse(ToolUse::new("c2", "w", json!({"city": "Rome"}))),
            ]
        );
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(response.usage, Usage::new(9, 4));
        assert_eq!((response.id.as_deref(), response.model.as_str()), (Some("chatcmpl-1"), "gpt-x-2025"));
    }

    #[test]
    fn stream_text_tool_calls_become_events() {
        let text = r#"{"name": "get_time", "arguments": {}}"#;
        let content =
            json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}).to_string();
        let (events, response) = run_stream(&[&content, "[DONE]"], vec!["get_time"]);
        let response = response.unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.message.content,
            vec![ContentBlock::ToolUse(ToolUse::new("call_0", "get_time", json!({})))]
        );
        assert_eq!(
            events[1..],
            [
                StreamEvent::ToolUseStart { index: 0, id: "call_0".into(), name: "get_time".into() },
                StreamEvent::ToolInputDelta { index: 0, partial_json: "{}".into() },
            ]
        );
    }

    #[test]
    fn stream_tool_calls_without_index_are_told_apart_by_id() {
        let call = |id: Option<&str>, name: Option<&str>, args: &str| {
            let mut tc = json!({"function": {"arguments": args}});
            if let Some(id) = id {
                tc["id"] = json!(id);
                tc["type"] = json!("function");
            }
            if let Some(name) = name {
                tc["function"]["name"] = json!(name);
            }
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [tc]}}]}).to_string()
        };
        let chunks = [
            call(Some("a"), Some("get_weather"), r#"{"location":"#),
            call(None, None, r#""Oslo"}"#),
            call(Some("b"), Some("get_weather"), r#"{"location":"Rome"}"#),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
        ];
        let chunks: Vec<&str> = chunks.iter().map(String::as_str).chain(["[DONE]"]).collect();
        let (_, response) = run_stream(&chunks, vec![]);
        let response = response.unwrap();
        let calls: Vec<(&str, &Value)> = response.message.tool_uses().map(|t| (t.id.as_str(), &t.input)).collect();
        assert_eq!(calls, [("a", &json!({"location": "Oslo"})), ("b", &json!({"location": "Rome"}))]);
    }

    #[test]
    fn the_token_limit_field_follows_the_server() {
        assert_eq!(OpenAi::new().token_limit_field(), "max_completion_tokens");
        let local = OpenAi::new().base_url("http://localhost:11434/v1");
        assert_eq!(local.token_limit_field(), "max_tokens");
        assert_eq!(local.max_completion_tokens(true).token_limit_field(), "max_completion_tokens");
        assert_eq!(OpenAi::new().max_completion_tokens(false).token_limit_field(), "max_tokens");
    }

    #[test]
    fn stream_errors() {
        let (_, r) = run_stream(&[r#"{"choices": [{"index": 0, "delta": {"content": "hi"}}]}"#], vec![]);
        assert!(matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("finish_reason")));
        let (_, r) = run_stream(&[r#"{"error": {"message": "out of memory"}}"#], vec![]);
        assert!(matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("out of memory")));
        let (_, r) = run_stream(&["{nope"], vec![]);
        assert!(matches!(r, Err(LlmError::MalformedResponse { .. })));
        // A stream that ends after its finish_reason without [DONE] is accepted.
        let (_, r) = run_stream(
            &[r#"{"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}"#],
            vec![],
        );
        assert_eq!(r.unwrap().message.text(), "hi");
    }

    #[test]
    fn env_configuration() {
        let lookup = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
        };
        let model = OpenAi::from_lookup(&lookup(&[])).unwrap();
        assert_eq!((model.api_key.clone(), model.base_url.as_str()), (None, OpenAi::DEFAULT_BASE_URL));
        let model =
            OpenAi::from_lookup(&lookup(&[("OPENAI_API_KEY", ""), ("OPENAI_BASE_URL", "http://localhost:11434/v1")]))
                .unwrap();
        assert_eq!((model.api_key.clone(), model.base_url.as_str()), (None, "http://localhost:11434/v1"));
        let model = OpenAi::from_lookup(&lookup(&[("OPENAI_API_KEY", "sk-secret")])).unwrap();
        assert_eq!(model.api_key, Some(ApiKey::new("sk-secret")));
        assert!(!format!("{model:?}").contains("secret"));
        assert!(matches!(
            OpenAi::from_lookup(&lookup(&[("OPENAI_BASE_URL", "localhost:11434")])),
            Err(LlmError::Config { .. })
        ));
    }
}
