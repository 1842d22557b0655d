//! Strict imitations of the providers' APIs, for testing agents (and anything else
//! built on a [`ChatModel`](crate::ChatModel)) offline against the real wire.
//!
//! Each imitation is written from its API's published reference. As an
//! [`Imitation`](super::Imitation) it reads every request as the API would, refusing
//! what the API refuses (with a message saying why, which fails the test), into a
//! provider-neutral [`Seen`](super::Seen), and writes each scripted
//! [`Turn`](super::Turn) in the API's own shapes: a JSON body, its event stream,
//! its errors with their statuses and headers. They are the imitations the provider
//! conformance suite ([`ProviderSuite`](super::ProviderSuite)) runs each provider of
//! this crate against; a test drives one with a [`Server`](super::Server) whose
//! handler reads each request with [`Imitation::read`](super::Imitation::read) and
//! answers it with [`Imitation::reply`](super::Imitation::reply) and the next turn.
//! Each is behind its provider's feature.
//!
//! - [`anthropic::MessagesApi`]: the Anthropic Messages API (`POST /v1/messages`).
//!   It checks the `x-api-key` and `anthropic-version` headers, refuses unknown
//!   parameters and block fields, checks each content block against its role (text
//!   non-empty, images' media types, `tool_use` inputs as objects, `tool_result`s),
//!   the thinking budget against `max_tokens`, that a tool loop's assistant turn
//!   begins with its thinking when thinking is on, that roles alternate from a user
//!   message, and that each `tool_result` answers a `tool_use` of the message before
//!   (and every call is answered); `cache_control` is accepted where the API takes it.
//!   It answers with a message object or its event stream.
//! - [`openai::ChatCompletions`]: OpenAI Chat Completions (`POST
//!   /v1/chat/completions`). It checks the bearer key, refuses unknown parameters,
//!   checks `stream_options` only with a stream, one token limit, the reasoning
//!   effort, `response_format`'s JSON Schema, the message roles and content parts
//!   (text, images as URLs or base64 data URLs), and that each `tool` message
//!   answers a call of the assistant message before it. It answers with a
//!   `chat.completion` or its chunks ending in `[DONE]`.
//! - [`openai_responses::Responses`], over [`responses_api::ResponsesApi`]: the
//!   OpenAI Responses API (`POST /v1/responses`). It checks the key header, every
//!   parameter and its type, each input item's required fields, that each
//!   `function_call_output` answers a `function_call` of the input, and, stateless
//!   (`store: false`), that every reasoning item it issued comes back unchanged
//!   before the call it preceded. It answers with a response object or its typed
//!   events.
//! - [`azure::AzureChat`] and [`azure::AzureResponses`]: Azure OpenAI's v1 paths
//!   (`/openai/v1/chat/completions`, `/openai/v1/responses`) with the key in the
//!   `api-key` header and no `authorization`; the requests are then checked as
//!   OpenAI's, and the key, rate-limit and server errors are written in Azure's own
//!   shape.
//! - [`gemini::GeminiApi`], over [`gemini_api::Api`] (feature `gemini`): the Gemini
//!   API's `generateContent` and `streamGenerateContent?alt=sse` (and Vertex AI's
//!   paths). It checks the `x-goog-api-key` header (or Vertex's bearer token), the
//!   fields of `GenerateContentRequest`, `Content` and `Part`, the OpenAPI schema
//!   subset of tools and response schemas, that the thought signatures it issued come
//!   back (as base64 bytes), and one function response per call. It answers with a
//!   `GenerateContentResponse` or its SSE chunks.
//! - [`bedrock::Converse`], over [`bedrock_api`] (feature `bedrock`): Bedrock
//!   Runtime's `Converse` and `ConverseStream` (`/model/{modelId}/converse`,
//!   `/converse-stream`). It checks the Bedrock API key (or, through
//!   [`bedrock_api::check_auth`], recomputes the SigV4 signature on its own), the
//!   request's fields, that messages alternate from a user message, each block's
//!   shape (`cachePoint`s included), that each `toolResult` answers a `toolUse` of
//!   the turn before, and that the reasoning blocks it wrote come back unchanged. It
//!   answers with a Converse response or AWS event-stream frames with their CRC32s,
//!   errors with Bedrock's statuses and `x-amzn-errortype`.
//!
//! An imitation checks what a request carries, not what a real model would answer:
//! the test scripts each answer. What an imitation does not read into
//! [`Seen`](super::Seen) (Anthropic's `cache_control`, Bedrock's `cachePoint`) a
//! test reads from the request's body.
//!
//! The imitations of the APIs that check their own tokens coming back (the
//! Responses API's reasoning items, Gemini's thought signatures, Bedrock's reasoning
//! blocks) remember what they issued: use one per conversation, behind its own
//! server.

// The imitations fill a `Seen` field by field as they read a request, the way an
// imitation outside this crate must (`Seen` is non-exhaustive).
#![allow(clippy::field_reassign_with_default)]

use serde_json::Value;

#[cfg(feature = "anthropic")]
#[cfg_attr(docsrs, doc(cfg(feature = "anthropic")))]
pub mod anthropic;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub mod azure;
#[cfg(feature = "bedrock")]
#[cfg_attr(docsrs, doc(cfg(feature = "bedrock")))]
pub mod bedrock;
#[cfg(feature = "bedrock")]
#[cfg_attr(docsrs, doc(cfg(feature = "bedrock")))]
pub mod bedrock_api;
#[cfg(feature = "gemini")]
#[cfg_attr(docsrs, doc(cfg(feature = "gemini")))]
pub mod gemini;
#[cfg(feature = "gemini")]
#[cfg_attr(docsrs, doc(cfg(feature = "gemini")))]
pub mod gemini_api;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub mod openai;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub mod openai_responses;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub mod responses_api;

/// A request an imitation refuses, as the API would: the status and the error body in
/// the API's shape (`{"error": {"code", "message", "status"}}` for Google's,
/// `{"error": {"message", "type", "param", "code"}}` for OpenAI's).
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The HTTP status.
    pub status: u16,
    /// The error body.
    pub body: Value,
}

impl Refusal {
    /// The reply the API sends.
    pub fn reply(self) -> crate::testing::Reply {
        crate::testing::Reply::json(self.status, self.body)
    }

    /// What the API says is wrong, with the status.
    pub fn message(&self) -> String {
        format!("{} {}", self.status, self.body["error"]["message"].as_str().unwrap_or_default())
    }
}

/// `text` in about `n` pieces, cut at character boundaries (a piece may be a
/// multi-byte character's only), as APIs stream text.
pub fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n.max(1)).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// A field of a JSON object, or why the request is refused.
pub fn field<'a>(object: &'a Value, name: &str, at: &str) -> Result<&'a Value, String> {
    object.get(name).filter(|v| !v.is_null()).ok_or_else(|| format!("{at}: `{name}` is required"))
}

/// A string field of a JSON object, or why the request is refused.
pub fn string<'a>(object: &'a Value, name: &str, at: &str) -> Result<&'a str, String> {
    field(object, name, at)?.as_str().ok_or_else(|| format!("{at}: `{name}` must be a string"))
}

/// Refuses an object with a field not among `known`, as the APIs refuse unknown
/// parameters ("Extra inputs are not permitted", "Unrecognized request argument").
pub fn only_fields(object: &Value, known: &[&str], at: &str) -> Result<(), String> {
    let map = object.as_object().ok_or_else(|| format!("{at}: must be an object"))?;
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(extra) => Err(format!("{at}: `{extra}`: extra inputs are not permitted")),
        None => Ok(()),
    }
}
