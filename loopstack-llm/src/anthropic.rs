//! The Anthropic Messages API provider.
//!
//! ```no_run
//! use loopstack_llm::{Anthropic, ChatModel, ChatRequest, Message};
//!
//! # async fn run() -> Result<(), loopstack_llm::LlmError> {
//! let claude = Anthropic::from_env()?; // ANTHROPIC_API_KEY, optional ANTHROPIC_BASE_URL
//! let request = ChatRequest::new("claude-sonnet-4-5", vec![Message::user("Hello!")]).system("Be brief.");
//! let response = claude.chat(&request).await?;
//! println!("{}", response.message.text());
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::stream::BoxStream;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tracing::Instrument as _;

use crate::error::LlmError;
use crate::http::{self, ApiKey, Call, RetryPolicy, SseDecoder, Transport, malformed};
use crate::message::{
    ContentBlock, MAX_JSON_DEPTH, Message, Role, StopReason, ToolUse, Usage, nests_deeper_than, too_deep,
    value_deeper_than,
};
use crate::model::{ChatModel, ChatRequest, ChatResponse, StreamEvent};

const PROVIDER: &str = "anthropic";

/// The Anthropic Messages API (`POST {base}/v1/messages`).
///
/// The model of each call is [`ChatRequest::model`]. One HTTP client is built with the
/// model and reused by every call (clones share it).
///
/// | setting | default | setter |
/// |---|---|---|
/// | API key | `ANTHROPIC_API_KEY` in [`Anthropic::from_env`] | [`Anthropic::api_key`] |
/// | base URL | `ANTHROPIC_BASE_URL`, else `https://api.anthropic.com` | [`Anthropic::base_url`] |
/// | request timeout | 10 minutes | [`Anthropic::timeout`] |
/// | retries | [`RetryPolicy::default`]: 3, backoff 0.5 s doubling up to 8 s | [`Anthropic::retry_policy`] |
/// | `max_tokens` when the request has none | 4096 | [`Anthropic::default_max_tokens`] |
///
/// The timeout is a deadline for each whole attempt, whatever the server sends: a
/// non-streamed call until its body is read, a stream from the request until its last
/// event (a server that keeps sending pings or bytes forever still times out; raise
/// the timeout for very long streamed replies). An error response's body is read up to
/// 64 KiB; a line of an event stream may be [`SSE_MAX_LINE_BYTES`](crate::SSE_MAX_LINE_BYTES)
/// long and an event [`SSE_MAX_EVENT_BYTES`](crate::SSE_MAX_EVENT_BYTES) large (beyond,
/// the stream ends in [`LlmError::MalformedResponse`]). Tool inputs nested deeper than
/// [`MAX_JSON_DEPTH`] are not parsed: they are kept as
/// [`ToolUse::invalid_input`](crate::ToolUse::invalid_input) and answered with an error
/// result.
///
/// Content blocks the crate has no type for (`thinking`, `redacted_thinking`, server
/// tools) come back as [`ContentBlock::Provider`] with provider `"anthropic"` and are
/// sent back to Anthropic unchanged; provider blocks of other providers are dropped.
///
/// The API key never appears in `Debug` output, logs or errors.
#[derive(Clone)]
#[must_use = "a model does nothing until it is called"]
pub struct Anthropic {
    api_key: ApiKey,
    base_url: String,
    default_max_tokens: u32,
    transport: Transport,
}

impl fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Anthropic")
            .field("api_key", &self.api_key)
            .field("base_url", &self.base_url)
            .field("default_max_tokens", &self.default_max_tokens)
            .field("timeout", &self.transport.timeout)
            .field("retry_policy", &self.transport.retry)
            .finish()
    }
}

impl Anthropic {
    /// The API's address when none is set.
    pub const DEFAULT_BASE_URL: &'static str = "https://api.anthropic.com";
    /// The `max_tokens` sent when the request has none (the API requires one).
    pub const DEFAULT_MAX_TOKENS: u32 = 4096;
    /// The request timeout when none is set: 10 minutes, as in Anthropic's SDKs.
    pub const DEFAULT_TIMEOUT: Duration = http::DEFAULT_TIMEOUT;
    /// The `anthropic-version` header sent.
    pub const API_VERSION: &'static str = "2023-06-01";

    /// A model calling the API with this key, at [`Anthropic::DEFAULT_BASE_URL`].
    pub fn new(api_key: impl Into<String>) -> Self {
        Self {
            api_key: ApiKey::new(api_key),
            base_url: Self::DEFAULT_BASE_URL.to_owned(),
            default_max_tokens: Self::DEFAULT_MAX_TOKENS,
            transport: Transport::new(),
        }
    }

    /// A model configured from the environment: `ANTHROPIC_API_KEY` (required) and
    /// `ANTHROPIC_BASE_URL` (optional).
    ///
    /// # Errors
    /// [`LlmError::Config`] when the key is missing or empty, or the base URL is invalid.
    pub fn from_env() -> Result<Self, LlmError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        let key = http::non_empty(lookup, "ANTHROPIC_API_KEY")
            .ok_or_else(|| LlmError::Config { provider: PROVIDER, message: "ANTHROPIC_API_KEY is not set".into() })?;
        let mut model = Self::new(key);
        if let Some(base) = http::non_empty(lookup, "ANTHROPIC_BASE_URL") {
            http::endpoint(PROVIDER, &base, "/v1/messages")?;
            model.base_url = base;
        }
        Ok(model)
    }

    /// Sets the API key.
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = ApiKey::new(api_key);
        self
    }

    /// Sets the base URL, such as `https://api.anthropic.com` or a proxy's; a trailing
    /// `/v1` is accepted. An invalid URL fails the calls with [`LlmError::Config`].
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

    /// Sets the `max_tokens` sent when a request has none.
    pub fn default_max_tokens(mut self, max_tokens: u32) -> Self {
        self.default_max_tokens = max_tokens;
        self
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
        let url = http::endpoint(PROVIDER, &self.base_url, "/v1/messages")?;
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", self.api_key.header(PROVIDER, "")?);
        headers.insert("anthropic-version", HeaderValue::from_static(Self::API_VERSION));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let accept = if stream { "text/event-stream" } else { "application/json" };
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        let body = encode_request(request, self.default_max_tokens, stream);
        let body = serde_json::to_vec(&body).map_err(|e| malformed(PROVIDER, &request.model, e.to_string()))?;
        Ok(Call { provider: PROVIDER, model: &request.model, url, headers, body: body.into() })
    }
}

#[async_trait::async_trait]
impl ChatModel for Anthropic {
    fn provider(&self) -> &'static str {
        PROVIDER
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let span = http::request_span(PROVIDER, &request.model, false);
        let started = Instant::now();
        let result = async {
            let call = self.call(request, false)?;
            let body = self.transport.post_json(&call).await?;
            decode_response(&body, &request.model)
        }
        .instrument(span.clone())
        .await;
        http::record_outcome(&span, started, result.as_ref().map(|r| &r.usage));
        result
    }

    fn stream<'a>(&'a self, request: &'a ChatRequest) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
        let span = http::request_span(PROVIDER, &request.model, true);
        match self.call(request, true) {
            Ok(call) => self.transport.post_sse(call, Decoder::new(&request.model), span),
            Err(e) => futures::stream::once(async { Err(e) }).boxed(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Encoding

/// The JSON body of a Messages API request.
fn encode_request(request: &ChatRequest, default_max_tokens: u32, stream: bool) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), request.model.clone().into());
    body.insert("max_tokens".into(), request.max_tokens.unwrap_or(default_max_tokens).into());
    if let Some(system) = &request.system {
        body.insert("system".into(), system.clone().into());
    }
    body.insert("messages".into(), request.messages.iter().map(encode_message).collect());
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        body.insert("tools".into(), tools);
    }
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), http::f32_value(temperature));
    }
    if !request.stop_sequences.is_empty() {
        body.insert("stop_sequences".into(), request.stop_sequences.clone().into());
    }
    if stream {
        body.insert("stream".into(), true.into());
    }
    Value::Object(body)
}

fn encode_message(message: &Message) -> Value {
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let content: Vec<Value> = message.content.iter().filter_map(encode_block).collect();
    json!({"role": role, "content": content})
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
        ContentBlock::Provider { provider, raw } if provider == PROVIDER => raw.clone(),
        ContentBlock::Provider { .. } => return None,
    })
}

// ---------------------------------------------------------------------------------------
// Decoding

/// A response body. Content blocks are kept as raw text until each is decoded, so
/// that tool arguments are checked for their depth before they are parsed.
#[derive(Deserialize)]
struct WireMessage {
    #[serde(rename = "type")]
    kind: Option<String>,
    error: Option<Value>,
    id: Option<String>,
    model: Option<String>,
    content: Option<Vec<Box<RawValue>>>,
    stop_reason: Option<String>,
    #[serde(default)]
    usage: WireUsage,
}

/// The fields of a content block the decoder reads; `input` stays raw text.
#[derive(Deserialize)]
struct WireBlock {
    #[serde(rename = "type")]
    kind: Option<String>,
    id: Option<String>,
    name: Option<String>,
    text: Option<String>,
    input: Option<Box<RawValue>>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Overwrites the counts present in `self`.
    fn apply(&self, usage: &mut Usage) {
        let set = |to: &mut u64, from: Option<u64>| {
            if let Some(n) = from {
                *to = n;
            }
        };
        set(&mut usage.input_tokens, self.input_tokens);
        set(&mut usage.output_tokens, self.output_tokens);
        set(&mut usage.cache_creation_input_tokens, self.cache_creation_input_tokens);
        set(&mut usage.cache_read_input_tokens, self.cache_read_input_tokens);
    }
}

/// Decodes a non-streamed response body.
fn decode_response(body: &[u8], model: &str) -> Result<ChatResponse, LlmError> {
    let wire: WireMessage =
        serde_json::from_slice(body).map_err(|e| malformed(PROVIDER, model, format!("invalid JSON: {e}")))?;
    if wire.kind.as_deref() == Some("error") {
        return Err(error_event(wire.error.as_ref(), model));
    }
    let missing = |field: &str| malformed(PROVIDER, model, format!("missing field `{field}`"));
    let id = wire.id.ok_or_else(|| missing("id"))?;
    let response_model = wire.model.ok_or_else(|| missing("model"))?;
    let content = wire
        .content
        .ok_or_else(|| missing("content"))?
        .iter()
        .map(|block| decode_raw_block(block.get()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| malformed(PROVIDER, model, m))?;
    let stop_reason = wire.stop_reason.ok_or_else(|| malformed(PROVIDER, model, "missing stop_reason"))?;
    let mut usage = Usage::default();
    wire.usage.apply(&mut usage);
    Ok(ChatResponse {
        message: Message { role: Role::Assistant, content },
        stop_reason: StopReason::parse(&stop_reason),
        usage,
        model: response_model,
        id: Some(id),
    })
}

/// Decodes a content block of a response body from its text. A tool call's input is
/// read with [`ToolUse::from_raw_arguments`], so input nested too deep is an error
/// result, not a failed response; a provider block nested too deep is refused.
fn decode_raw_block(raw: &str) -> Result<ContentBlock, String> {
    let block: WireBlock = serde_json::from_str(raw).map_err(|e| format!("invalid content block: {e}"))?;
    let field = |value: Option<String>, name: &str| value.ok_or_else(|| format!("a content block has no `{name}`"));
    match block.kind.as_deref() {
        Some("text") => Ok(ContentBlock::text(field(block.text, "text")?)),
        Some("tool_use") => {
            let (id, name) = (field(block.id, "id")?, field(block.name, "name")?);
            Ok(ContentBlock::ToolUse(match block.input {
                Some(input) => ToolUse::from_raw_arguments(id, name, input.get()),
                None => ToolUse::new(id, name, json!({})),
            }))
        }
        Some(_) => Ok(ContentBlock::Provider { provider: PROVIDER.into(), raw: parse_provider_json(raw)? }),
        None => Err("a content block has no `type`".into()),
    }
}

/// Parses JSON of a provider block (a server tool's input, say), refusing it when it
/// nests deeper than [`MAX_JSON_DEPTH`].
fn parse_provider_json(raw: &str) -> Result<Value, String> {
    if nests_deeper_than(raw.as_bytes(), MAX_JSON_DEPTH) {
        return Err(format!("a content block is refused: {}", too_deep()));
    }
    serde_json::from_str(raw).map_err(|e| format!("invalid content block: {e}"))
}

fn decode_block(block: Value) -> Result<ContentBlock, String> {
    let str_field = |name: &str| {
        block
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("a content block has no `{name}`"))
    };
    match block.get("type").and_then(Value::as_str) {
        Some("text") => Ok(ContentBlock::text(str_field("text")?)),
        Some("tool_use") => {
            let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
            Ok(ContentBlock::ToolUse(ToolUse::checked(str_field("id")?, str_field("name")?, input)))
        }
        Some(_) if value_deeper_than(&block, MAX_JSON_DEPTH) => {
            Err(format!("a content block is refused: {}", too_deep()))
        }
        Some(_) => Ok(ContentBlock::Provider { provider: PROVIDER.into(), raw: block }),
        None => Err("a content block has no `type`".into()),
    }
}

/// The error of an `error` object: `{"type": "error", "error": {"type", "message"}}`.
fn error_event(error: Option<&Value>, model: &str) -> LlmError {
    let kind = error.and_then(|e| e.get("type")).and_then(Value::as_str).unwrap_or("unknown_error");
    let message = error.and_then(|e| e.get("message")).and_then(Value::as_str).unwrap_or("no message").to_owned();
    let model = model.to_owned();
    match kind {
        "overloaded_error" => LlmError::Overloaded { provider: PROVIDER, model, message },
        "rate_limit_error" => LlmError::RateLimited { provider: PROVIDER, model, retry_after: None, message },
        _ => {
            LlmError::MalformedResponse { provider: PROVIDER, model, message: format!("error event {kind}: {message}") }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Streaming

/// A content block being streamed.
enum Block {
    Text(String),
    /// A tool call; `json` collects its `input_json_delta`s, which replace its input.
    Tool {
        tool: ToolUse,
        json: String,
    },
    /// A block kept raw; `json` collects `input_json_delta`s (server tools) for `input`.
    Raw {
        value: Value,
        json: String,
    },
}

/// Assembles the events of a streamed Messages API response.
struct Decoder {
    model: String,
    id: Option<String>,
    response_model: Option<String>,
    blocks: Vec<Option<Block>>,
    stop_reason: Option<String>,
    usage: Usage,
    complete: bool,
}

impl Decoder {
    fn new(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            id: None,
            response_model: None,
            blocks: Vec::new(),
            stop_reason: None,
            usage: Usage::default(),
            complete: false,
        }
    }

    fn malformed(&self, message: impl Into<String>) -> LlmError {
        malformed(PROVIDER, &self.model, message)
    }

    fn index(&self, value: &Value) -> Result<usize, LlmError> {
        value
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .ok_or_else(|| self.malformed("an event has no `index`"))
    }

    fn block(&mut self, index: usize) -> Result<&mut Block, LlmError> {
        let missing = self.malformed(format!("a delta for content block {index}, which did not start"));
        self.blocks.get_mut(index).and_then(Option::as_mut).ok_or(missing)
    }

    fn start_block(&mut self, value: &Value, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let index = self.index(value)?;
        let raw =
            value.get("content_block").cloned().ok_or_else(|| self.malformed("content_block_start has no block"))?;
        let block = match decode_block(raw).map_err(|m| self.malformed(m))? {
            ContentBlock::Text { text } => {
                if !text.is_empty() {
                    out.push(StreamEvent::TextDelta { index, text: text.clone() });
                }
                Block::Text(text)
            }
            ContentBlock::ToolUse(tool) => {
                out.push(StreamEvent::ToolUseStart { index, id: tool.id.clone(), name: tool.name.clone() });
                Block::Tool { tool, json: String::new() }
            }
            ContentBlock::Provider { raw, .. } => Block::Raw { value: raw, json: String::new() },
            ContentBlock::ToolResult(_) => unreachable!("decode_block makes no tool results"),
        };
        // Blocks arrive in order; an index far beyond them is a broken stream, not a
        // reason to allocate.
        if index > self.blocks.len() {
            return Err(self.malformed(format!("content block {index} started before block {}", self.blocks.len())));
        }
        if self.blocks.len() == index {
            self.blocks.push(None);
        }
        self.blocks[index] = Some(block);
        Ok(())
    }

    fn delta(&mut self, value: &Value, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let index = self.index(value)?;
        let delta = value.get("delta").ok_or_else(|| self.malformed("content_block_delta has no delta"))?;
        let kind = delta.get("type").and_then(Value::as_str).unwrap_or_default();
        let text_of = |field: &str| delta.get(field).and_then(Value::as_str).unwrap_or_default();
        match (self.block(index)?, kind) {
            (Block::Text(text), "text_delta") => {
                let piece = text_of("text");
                text.push_str(piece);
                if !piece.is_empty() {
                    out.push(StreamEvent::TextDelta { index, text: piece.to_owned() });
                }
            }
            (Block::Tool { json, .. }, "input_json_delta") => {
                let piece = text_of("partial_json");
                json.push_str(piece);
                if !piece.is_empty() {
                    out.push(StreamEvent::ToolInputDelta { index, partial_json: piece.to_owned() });
                }
            }
            (Block::Raw { json, .. }, "input_json_delta") => json.push_str(text_of("partial_json")),
            (Block::Raw { value, .. }, "thinking_delta") => append_str(value, "thinking", text_of("thinking")),
            (Block::Raw { value, .. }, "signature_delta") => append_str(value, "signature", text_of("signature")),
            // citations_delta and deltas added later: not kept.
            _ => {}
        }
        Ok(())
    }

    fn message_start(&mut self, value: &Value) -> Result<(), LlmError> {
        let message = value.get("message").ok_or_else(|| self.malformed("message_start has no message"))?;
        self.id = message.get("id").and_then(Value::as_str).map(str::to_owned);
        self.response_model = message.get("model").and_then(Value::as_str).map(str::to_owned);
        if let Some(usage) = message.get("usage") {
            self.apply_usage(usage)?;
        }
        Ok(())
    }

    fn apply_usage(&mut self, usage: &Value) -> Result<(), LlmError> {
        let wire = WireUsage::deserialize(usage).map_err(|e| self.malformed(format!("invalid usage: {e}")))?;
        wire.apply(&mut self.usage);
        Ok(())
    }
}

fn append_str(value: &mut Value, field: &str, piece: &str) {
    if let Some(object) = value.as_object_mut() {
        let entry = object.entry(field).or_insert_with(|| Value::String(String::new()));
        match entry {
            Value::String(s) => s.push_str(piece),
            other => *other = Value::String(piece.to_owned()),
        }
    }
}

impl SseDecoder for Decoder {
    fn event(&mut self, _name: &str, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        let value: Value =
            serde_json::from_str(data).map_err(|e| self.malformed(format!("invalid JSON in an event: {e}")))?;
        match value.get("type").and_then(Value::as_str).unwrap_or_default() {
            "message_start" => self.message_start(&value)?,
            "content_block_start" => self.start_block(&value, out)?,
            "content_block_delta" => self.delta(&value, out)?,
            "message_delta" => {
                if let Some(reason) = value.get("delta").and_then(|d| d.get("stop_reason")).and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(usage) = value.get("usage") {
                    self.apply_usage(usage)?;
                }
            }
            "message_stop" => self.complete = true,
            "error" => return Err(error_event(value.get("error"), &self.model)),
            // ping, content_block_stop, and events added later.
            _ => {}
        }
        Ok(())
    }

    fn is_complete(&self) -> bool {
        self.complete
    }

    fn finish(&mut self, _out: &mut Vec<StreamEvent>) -> Result<ChatResponse, LlmError> {
        if !self.complete {
            return Err(self.malformed("the stream ended before message_stop"));
        }
        let (Some(id), Some(model)) = (self.id.take(), self.response_model.take()) else {
            return Err(self.malformed("the stream had no message_start"));
        };
        let stop_reason = self.stop_reason.take().ok_or_else(|| self.malformed("the stream had no stop_reason"))?;
        let mut content = Vec::with_capacity(self.blocks.len());
        for (index, block) in std::mem::take(&mut self.blocks).into_iter().enumerate() {
            let block = block.ok_or_else(|| self.malformed(format!("content block {index} never started")))?;
            content.push(match block {
                Block::Text(text) => ContentBlock::Text { text },
                Block::Tool { tool, json } if json.trim().is_empty() => ContentBlock::ToolUse(tool),
                Block::Tool { tool, json } => {
                    ContentBlock::ToolUse(ToolUse::from_raw_arguments(tool.id, tool.name, &json))
                }
                Block::Raw { value, json } if json.trim().is_empty() => {
                    ContentBlock::Provider { provider: PROVIDER.into(), raw: value }
                }
                Block::Raw { mut value, json } => {
                    if nests_deeper_than(json.as_bytes(), MAX_JSON_DEPTH) {
                        return Err(
                            self.malformed(format!("the input of content block {index} is refused: {}", too_deep()))
                        );
                    }
                    let input: Value = serde_json::from_str(&json)
                        .map_err(|e| self.malformed(format!("invalid input of content block {index}: {e}")))?;
                    value["input"] = input;
                    ContentBlock::Provider { provider: PROVIDER.into(), raw: value }
                }
            });
        }
        Ok(ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason: StopReason::parse(&stop_reason),
            usage: self.usage,
            model,
            id: Some(id),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use loopstack_core::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, ToolSpec};

    use super::*;
    use crate::message::ToolResult;

    struct Weather;

    #[async_trait::async_trait]
    impl Tool for Weather {
        fn name(&self) -> &str {
            "get_weather"
        }
        fn description(&self) -> &str {
            "Gets the weather."
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
        }
        async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::text("sunny"))
        }
    }

    fn weather_spec() -> Arc<ToolSpec> {
        let tools = ToolRegistry::new().with(Weather).unwrap();
        tools.spec("get_weather").unwrap().clone()
    }

    #[test]
    fn encodes_a_full_request() {
        let mut request = ChatRequest::new(
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
        .temperature(0.2);
        request.stop_sequences = vec!["END".into()];
        let body = encode_request(&request, 4096, false);
        assert_eq!(
            body,
            json!({
                "model": "claude-x",
                "max_tokens": 4096,
                "system": "Be brief.",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                        {"type": "text", "text": "Let me check."},
                        {"type": "tool_use", "id": "tu_1", "name": "get_weather", "input": {"city": "Paris"}},
                        {"type": "tool_use", "id": "tu_2", "name": "get_weather", "input": {}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "tu_1", "content": "sunny", "is_error": false},
                        {"type": "tool_result", "tool_use_id": "tu_2", "content": "bad arguments", "is_error": true},
                    ]},
                ],
                "tools": [{
                    "name": "get_weather",
                    "description": "Gets the weather.",
                    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                }],
                "temperature": 0.2,
                "stop_sequences": ["END"],
            })
        );
        let minimal = encode_request(&ChatRequest::new("m", vec![Message::user("hi")]).max_tokens(10), 4096, true);
        assert_eq!(
            minimal,
            json!({"model": "m", "max_tokens": 10, "stream": true,
                   "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
        );
    }

    #[test]
    fn decodes_blocks_stop_reasons_and_usage() {
        let body = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x-2025",
            "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "redacted_thinking", "data": "abc"},
                {"type": "text", "text": "Hi"},
                {"type": "tool_use", "id": "tu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
            "stop_reason": "refusal", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 3,
                      "cache_read_input_tokens": null},
        });
        let response = decode_response(body.to_string().as_bytes(), "claude-x").unwrap();
        assert_eq!(response.stop_reason, StopReason::Other("refusal".into()));
        assert_eq!(
            response.usage,
            Usage { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 3, cache_read_input_tokens: 0 }
        );
        assert_eq!(response.model, "claude-x-2025");
        assert_eq!(response.id.as_deref(), Some("msg_1"));
        assert_eq!(
            response.message.content,
            vec![
                ContentBlock::Provider {
                    provider: "anthropic".into(),
                    raw: json!({"type": "thinking", "thinking": "t", "signature": "s"})
                },
                ContentBlock::Provider {
                    provider: "anthropic".into(),
                    raw: json!({"type": "redacted_thinking", "data": "abc"})
                },
                ContentBlock::text("Hi"),
                ContentBlock::ToolUse(ToolUse::new("tu_1", "get_weather", json!({"city": "Paris"}))),
            ]
        );
        for (wire, want) in [
            ("end_turn", StopReason::EndTurn),
            ("tool_use", StopReason::ToolUse),
            ("max_tokens", StopReason::MaxTokens),
            ("stop_sequence", StopReason::StopSequence),
            ("pause_turn", StopReason::Other("pause_turn".into())),
        ] {
            let body = json!({"id": "m", "model": "x", "content": [], "stop_reason": wire, "usage": {}});
            assert_eq!(decode_response(body.to_string().as_bytes(), "x").unwrap().stop_reason, want);
        }
    }

    #[test]
    fn malformed_bodies() {
        let err = |body: &str| decode_response(body.as_bytes(), "claude-x").unwrap_err();
        assert!(
            matches!(err("{not json"), LlmError::MalformedResponse { provider: "anthropic", ref model, .. } if model == "claude-x")
        );
        assert!(
            matches!(err(r#"{"id": "m", "model": "x"}"#), LlmError::MalformedResponse { ref message, .. } if message.contains("content"))
        );
        assert!(matches!(
            err(r#"{"id": "m", "model": "x", "content": [], "stop_reason": null}"#),
            LlmError::MalformedResponse { ref message, .. } if message.contains("stop_reason")
        ));
        assert!(matches!(
            err(r#"{"id": "m", "model": "x", "content": [{"type": "text"}], "stop_reason": "end_turn"}"#),
            LlmError::MalformedResponse { .. }
        ));
        assert!(matches!(
            err(r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#),
            LlmError::Overloaded { .. }
        ));
    }

    fn run_stream(events: &[Value]) -> (Vec<StreamEvent>, Result<ChatResponse, LlmError>) {
        let mut decoder = Decoder::new("claude-x");
        let mut out = Vec::new();
        for event in events {
            if let Err(e) = decoder.event("", &event.to_string(), &mut out) {
                return (out, Err(e));
            }
        }
        let result = decoder.finish(&mut out);
        (out, result)
    }

    #[test]
    fn streams_thinking_text_and_tools() {
        let (events, response) = run_stream(&[
            json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude-x-2025", "content": [],
                   "stop_reason": null, "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 4}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "a"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "b"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "tu_1", "name": "w", "input": {}}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"ci"}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "ty\": \"Paris\"}"}}),
            json!({"type": "content_block_stop", "index": 2}),
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "tu_2", "name": "now", "input": {}}}),
            json!({"type": "content_block_stop", "index": 3}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 20}}),
            json!({"type": "message_stop"}),
        ]);
        assert_eq!(
            events,
            vec![
                StreamEvent::TextDelta { index: 1, text: "Hi".into() },
                StreamEvent::ToolUseStart { index: 2, id: "tu_1".into(), name: "w".into() },
                StreamEvent::ToolInputDelta { index: 2, partial_json: "{\"ci".into() },
                StreamEvent::ToolInputDelta { index: 2, partial_json: "ty\": \"Paris\"}".into() },
                StreamEvent::ToolUseStart { index: 3, id: "tu_2".into(), name: "now".into() },
            ]
        );
        let response = response.unwrap();
        assert_eq!(
            response.message.content,
            vec![
                ContentBlock::Provider {
                    provider: "anthropic".into(),
                    raw: json!({"type": "thinking", "thinking": "ab", "signature": "sig"})
                },
                ContentBlock::text("Hi"),
                ContentBlock::ToolUse(ToolUse::new("tu_1", "w", json!({"city": "Paris"}))),
                ContentBlock::ToolUse(ToolUse::new("tu_2", "now", json!({}))),
            ]
        );
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.usage,
            Usage { input_tokens: 10, output_tokens: 20, cache_creation_input_tokens: 0, cache_read_input_tokens: 4 }
        );
        assert_eq!((response.id.as_deref(), response.model.as_str()), (Some("msg_1"), "claude-x-2025"));
    }

    #[test]
    fn stream_truncated_tool_input_is_kept_as_invalid() {
        let (_, response) = run_stream(&[
            json!({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {"input_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "w", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Pa"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ]);
        let response = response.unwrap();
        let tool = response.message.tool_uses().next().unwrap();
        assert_eq!(tool.invalid_input.as_ref().unwrap().raw, "{\"city\": \"Pa");
        assert_eq!(response.stop_reason, StopReason::MaxTokens);
    }

    #[test]
    fn stream_errors() {
        let start = json!({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {}}});
        let (_, r) = run_stream(&[
            start.clone(),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ]);
        assert!(matches!(r, Err(LlmError::Overloaded { .. })));
        let (_, r) =
            run_stream(&[start.clone(), json!({"type": "error", "error": {"type": "api_error", "message": "boom"}})]);
        assert!(matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("boom")));
        // A block index far beyond the blocks so far is refused, not allocated.
        let (_, r) = run_stream(&[
            start.clone(),
            json!({"type": "content_block_start", "index": 1_000_000_000_000u64, "content_block": {"type": "text", "text": ""}}),
        ]);
        assert!(
            matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("started before"))
        );
        let (_, r) = run_stream(std::slice::from_ref(&start));
        assert!(matches!(r, Err(LlmError::MalformedResponse { ref message, .. }) if message.contains("message_stop")));
        let (_, r) = run_stream(&[
            start.clone(),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}),
        ]);
        assert!(matches!(r, Err(LlmError::MalformedResponse { .. })));
        let mut decoder = Decoder::new("x");
        assert!(matches!(decoder.event("", "{nope", &mut Vec::new()), Err(LlmError::MalformedResponse { .. })));
    }

    #[test]
    fn env_configuration() {
        let lookup = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
        };
        let err = Anthropic::from_lookup(&lookup(&[])).unwrap_err();
        assert!(
            matches!(err, LlmError::Config { provider: "anthropic", ref message } if message.contains("ANTHROPIC_API_KEY"))
        );
        assert!(Anthropic::from_lookup(&lookup(&[("ANTHROPIC_API_KEY", "")])).is_err());
        let model = Anthropic::from_lookup(&lookup(&[("ANTHROPIC_API_KEY", "sk-ant-secret")])).unwrap();
        assert_eq!(model.base_url, Anthropic::DEFAULT_BASE_URL);
        assert_eq!(model.api_key, ApiKey::new("sk-ant-secret"));
        let model =
            Anthropic::from_lookup(&lookup(&[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_BASE_URL", "http://proxy:8080")]))
                .unwrap();
        assert_eq!(model.base_url, "http://proxy:8080");
        let err = Anthropic::from_lookup(&lookup(&[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_BASE_URL", "::bad")]))
            .unwrap_err();
        assert!(matches!(err, LlmError::Config { .. }));
        assert!(!format!("{:?}", Anthropic::new("sk-ant-secret")).contains("secret"));
    }
}
