//! The HTTP toolkit providers are written with: a [`Client`] that sends a provider's
//! requests with retries, bounded waits and typed [`LlmError`]s, and decodes its
//! server-sent events through the provider's [`SseDecoder`].
//!
//! The Anthropic and OpenAI providers of this crate are built from these parts, and a
//! provider crate written outside this repository is built from the same ones: it
//! depends on `loopstack-model` (with the `http` feature) alone, and on
//! [`async-trait`](https://docs.rs/async-trait) to implement [`ChatModel`](crate::ChatModel).
//!
//! # The parts
//!
//! - [`Client`]: one provider's settings (base URL, API key, request timeout,
//!   [`RetryPolicy`]) and its endpoint's path; it owns one HTTP connection pool, built
//!   once and shared by its clones. [`Auth`] says how the API key is sent; a
//!   [`Signer`] signs each attempt, for an API that wants signed requests.
//! - [`Call`]: one request, ready to be sent and sent again on retries: its URL,
//!   headers and JSON body. [`Client::call`] builds one for the client's endpoint
//!   (with the key, `content-type` and `accept` headers), [`Client::call_at`] for
//!   another path of the same API; the provider adds its own headers to
//!   [`Call::headers`].
//! - Sending: [`Client::chat`] sends a call and hands the body of its successful
//!   response to the provider's decoding function; [`Client::stream`] sends one and
//!   feeds each event of its event stream to the provider's [`SseDecoder`], which
//!   turns them into [`StreamEvent`]s and, at the end, the [`ChatResponse`]. Both
//!   record the request as a `llm_request` [`tracing`](https://docs.rs/tracing) span
//!   (provider, model, tokens, latency, retries).
//! - Errors: a failed response becomes its [`LlmError`] by its HTTP status (see
//!   [`status_error`]); an error object an API sends in place of an answer, in a 200
//!   body or as an event, becomes the one its type stands for with [`body_error`];
//!   a reply of the wrong shape is [`malformed`].
//! - Bounds: an error body is read up to [`MAX_ERROR_BODY_BYTES`], a successful one up
//!   to [`MAX_RESPONSE_BYTES`]; an event stream's lines and events are bounded by
//!   [`SSE_MAX_LINE_BYTES`](crate::sse::SSE_MAX_LINE_BYTES) and
//!   [`SSE_MAX_EVENT_BYTES`](crate::sse::SSE_MAX_EVENT_BYTES); and each attempt by the
//!   client's timeout ([`DEFAULT_TIMEOUT`] unless set).
//!
//! # What the client does
//!
//! - **Retries**, per the [`RetryPolicy`]: after a connection error and after HTTP 408,
//!   409, 429 and 5xx (honouring `retry-after`), and after a retryable error the
//!   decoding function returned for a 200 body (an `overloaded_error` sent as the
//!   body, say); never after another 4xx, a timeout or a malformed body. A stream is
//!   retried only before its response started.
//! - **Typed errors**: 401 and 403 are [`LlmError::Authentication`], 429
//!   [`LlmError::RateLimited`] (with the server's `retry-after`), 529
//!   [`LlmError::Overloaded`], 408, 409 and 5xx [`LlmError::Server`], any other 4xx
//!   [`LlmError::InvalidRequest`]; the message is the API's (`{"error": {"message"}}`
//!   and the other common shapes) or the start of the body. A stream request answered
//!   with a JSON `{"error": ..}` instead of events is that error.
//! - **Bounded waits**: the timeout is a deadline for each whole attempt: sending,
//!   waiting, and reading the whole body or stream, whatever the server sends.
//!   Connecting may take 10 s. Redirects are not followed (they would carry the key
//!   to another host).
//! - **Secrets**: the API key is a sensitive header value; it never appears in `Debug`
//!   output, logs or errors.
//!
//! # Writing a provider
//!
//! A provider is a type holding a [`Client`], with builder methods that set its
//! settings, implementing [`ChatModel`](crate::ChatModel): `chat` encodes the [`ChatRequest`](crate::ChatRequest) as JSON,
//! builds a [`Call`] and sends it with [`Client::chat`] and a function decoding the
//! reply; `stream` does the same with [`Client::stream`] and an [`SseDecoder`]. Here is
//! a whole provider for a made-up API, `POST /v1/reply` with `{"model", "prompt",
//! "stream"}`, which answers `{"text", "tokens": {"in", "out"}}` or streams `data:
//! {"delta"}` events and a last `data: {"done": true, "tokens": ..}`:
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use futures::stream::BoxStream;
//! use loopstack_model::http::{Auth, Client, HeaderValue, SseDecoder, body_error, malformed};
//! use loopstack_model::{
//!     ChatModel, ChatRequest, ChatResponse, LlmError, Message, RetryPolicy, StopReason, StreamEvent, Usage,
//! };
//! use serde_json::{Value, json};
//!
//! const PROVIDER: &str = "echo";
//!
//! /// The Echo API.
//! #[derive(Debug, Clone)]
//! pub struct Echo {
//!     http: Client,
//! }
//!
//! impl Echo {
//!     pub fn new(api_key: &str) -> Self {
//!         // `authorization: Bearer <key>` on every call of `POST {base}/v1/reply`.
//!         let mut http = Client::new(PROVIDER, "https://api.echo.example", "/v1/reply", Auth::bearer());
//!         http.set_api_key(api_key);
//!         Self { http }
//!     }
//!
//!     pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
//!         self.http.set_base_url(base_url);
//!         self
//!     }
//!
//!     pub fn timeout(mut self, timeout: Duration) -> Self {
//!         self.http.set_timeout(timeout);
//!         self
//!     }
//!
//!     pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
//!         self.http.set_retry_policy(policy);
//!         self
//!     }
//!
//!     fn body(request: &ChatRequest, stream: bool) -> Value {
//!         let prompt = request.messages.last().map(|m| m.text()).unwrap_or_default();
//!         json!({"model": request.model, "prompt": prompt, "stream": stream})
//!     }
//! }
//!
//! fn usage(tokens: &Value) -> Usage {
//!     let count = |name: &str| tokens.get(name).and_then(Value::as_u64).unwrap_or(0);
//!     Usage { input_tokens: count("in"), output_tokens: count("out"), ..Usage::default() }
//! }
//!
//! /// The body of a successful reply.
//! fn decode(body: &[u8], model: &str) -> Result<ChatResponse, LlmError> {
//!     let value: Value = serde_json::from_slice(body).map_err(|e| malformed(PROVIDER, model, e.to_string()))?;
//!     if let Some(error) = value.get("error") {
//!         // An error sent with a 200: typed (and retried) as the status it stands for.
//!         return Err(body_error(PROVIDER, model, error));
//!     }
//!     let text = value.get("text").and_then(Value::as_str).ok_or_else(|| malformed(PROVIDER, model, "no `text`"))?;
//!     Ok(ChatResponse::new(Message::assistant(text), StopReason::EndTurn, usage(&value["tokens"]), model))
//! }
//!
//! /// The events of a streamed reply.
//! struct Decoder {
//!     model: String,
//!     text: String,
//!     usage: Option<Usage>,
//! }
//!
//! impl SseDecoder for Decoder {
//!     fn event(&mut self, _name: &str, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
//!         let value: Value =
//!             serde_json::from_str(data).map_err(|e| malformed(PROVIDER, &self.model, e.to_string()))?;
//!         if let Some(delta) = value.get("delta").and_then(Value::as_str) {
//!             self.text.push_str(delta);
//!             out.push(StreamEvent::TextDelta { index: 0, text: delta.to_owned() });
//!         } else if value.get("done").is_some() {
//!             self.usage = Some(usage(&value["tokens"]));
//!         }
//!         Ok(())
//!     }
//!
//!     fn is_complete(&self) -> bool {
//!         self.usage.is_some()
//!     }
//!
//!     fn finish(&mut self, _out: &mut Vec<StreamEvent>) -> Result<ChatResponse, LlmError> {
//!         let usage = self.usage.ok_or_else(|| malformed(PROVIDER, &self.model, "the stream ended before `done`"))?;
//!         let message = Message::assistant(std::mem::take(&mut self.text));
//!         Ok(ChatResponse::new(message, StopReason::EndTurn, usage, &self.model))
//!     }
//! }
//!
//! #[async_trait::async_trait]
//! impl ChatModel for Echo {
//!     fn provider(&self) -> &'static str {
//!         PROVIDER
//!     }
//!
//!     async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
//!         let call = self.http.call(&request.model, &Self::body(request, false), false);
//!         self.http.chat(request, call, |body| decode(body, &request.model)).await
//!     }
//!
//!     fn stream<'a>(&'a self, request: &'a ChatRequest) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
//!         let call = self.http.call(&request.model, &Self::body(request, true), true).map(|mut call| {
//!             // A header of the provider's own.
//!             call.headers.insert("echo-version", HeaderValue::from_static("2025-01-01"));
//!             call
//!         });
//!         let decoder = Decoder { model: request.model.clone(), text: String::new(), usage: None };
//!         self.http.stream(request, call, decoder)
//!     }
//! }
//! ```
//!
//! Test it against an imitation of the API with `loopstack_model::testing::Server`
//! (the `testing` feature): this crate's
//! `tests/external_provider.rs` is such a provider and its tests, written with the
//! public API alone.

mod client;
mod errors;
mod tls;

#[cfg(any(feature = "anthropic", feature = "openai", feature = "gemini"))]
pub(crate) use client::http_settings;
pub use client::{Auth, Client};
#[cfg(any(feature = "openai", feature = "gemini"))]
pub(crate) use errors::event_error;
pub use errors::{body_error, status_error};
pub use tls::client_builder;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
/// A URL, as [`Call::url`] holds it (re-exported from `reqwest`, so that a provider
/// needs no dependency of its own on it).
pub use reqwest::Url;
/// Header types, as [`Call::headers`] holds them (re-exported from `reqwest`).
pub use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tracing::Instrument as _;
use tracing::field::Empty;

use crate::error::LlmError;
use crate::message::Usage;
use crate::model::{ChatResponse, StreamEvent};
use crate::sse::{FeedError, SseParser};
use errors::{RetryHints, decode_failure, response_failure};

/// The default request timeout: 10 minutes, as in Anthropic's and OpenAI's own SDKs. A
/// non-streamed reply of a few thousand tokens, or any reply of a local model on a CPU,
/// easily takes more than a minute. Set another with [`Client::set_timeout`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The largest body of a successful non-streamed response that is read: 64 MiB, far
/// more than any reply of a model (a few MB with generated images in it). A larger body
/// fails the call with [`LlmError::MalformedResponse`], without being read to its end
/// nor retried, so no server can make a call take memory without bound.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// How much of an error response's body is read: 64 KiB. The API's JSON error is far
/// smaller; the rest of a larger body (a proxy's page, or a broken server's endless
/// one) is not read, so an error costs little memory and time whatever its size.
pub const MAX_ERROR_BODY_BYTES: usize = 64 << 10;

/// How long establishing a TCP (and TLS) connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

const USER_AGENT: &str = concat!("loopstack-llm/", env!("CARGO_PKG_VERSION"));

/// How a provider retries a failed request.
///
/// A request is retried after a connection error and after HTTP 408, 409, 429, 5xx
/// (including Anthropic's 529 "overloaded"), unless the response says
/// `x-should-retry: false`; never after another 4xx, and never after a timeout (the
/// request may still be running on the server). A stream is only retried
/// before its response started; once events flowed, an error ends the stream.
///
/// The delay before retry `n` (0-based) is `initial_backoff * 2^n`, at most
/// `max_backoff`, minus a random jitter of up to 25 %. When the server says how long to
/// wait (`retry-after-ms` in milliseconds or `retry-after` in seconds), that wait is
/// used as is; if it is longer than `max_retry_after`, the request is not retried and
/// the error (for HTTP 429, [`LlmError::RateLimited`] with its `retry_after`) is
/// returned at once, so the caller decides. A `retry-after` given as an HTTP date is
/// ignored (the computed backoff is used).
///
/// ```
/// # use std::time::Duration;
/// # use loopstack_model::RetryPolicy;
/// let policy = RetryPolicy::new().max_retries(5).initial_backoff(Duration::from_secs(1));
/// assert_eq!(policy.backoff(2), Duration::from_secs(4));
/// assert_eq!(RetryPolicy::default().max_retries, 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// How many times a request is retried after its first attempt. Default 3.
    pub max_retries: u32,
    /// The delay before the first retry. Default 500 ms.
    pub initial_backoff: Duration,
    /// The longest computed delay. Default 8 s.
    pub max_backoff: Duration,
    /// The longest server-requested delay (`retry-after`) that is waited for. Default 60 s.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl RetryPolicy {
    /// The defaults: 3 retries, backoff from 500 ms doubling up to 8 s, `retry-after`
    /// honoured up to 60 s.
    pub const fn new() -> Self {
        Self {
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }

    /// No retries: every failure is returned at once.
    pub const fn disabled() -> Self {
        Self::new().max_retries(0)
    }

    /// Sets how many times a request is retried.
    #[must_use]
    pub const fn max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// Sets the delay before the first retry.
    #[must_use]
    pub const fn initial_backoff(mut self, initial_backoff: Duration) -> Self {
        self.initial_backoff = initial_backoff;
        self
    }

    /// Sets the longest computed delay.
    #[must_use]
    pub const fn max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff;
        self
    }

    /// Sets the longest server-requested delay that is waited for.
    #[must_use]
    pub const fn max_retry_after(mut self, max_retry_after: Duration) -> Self {
        self.max_retry_after = max_retry_after;
        self
    }

    /// The delay before retry `retry` (0-based) without jitter:
    /// `initial_backoff * 2^retry`, at most `max_backoff`.
    pub fn backoff(&self, retry: u32) -> Duration {
        1u32.checked_shl(retry)
            .and_then(|factor| self.initial_backoff.checked_mul(factor))
            .map_or(self.max_backoff, |d| d.min(self.max_backoff))
    }

    /// [`RetryPolicy::backoff`] minus `unit * 25 %`, for a `unit` in `[0, 1)`.
    fn jittered(&self, retry: u32, unit: f64) -> Duration {
        self.backoff(retry).mul_f64(1.0 - 0.25 * unit.clamp(0.0, 1.0))
    }
}

/// An API key. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ApiKey(String);

impl ApiKey {
    pub(crate) fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key as a header value (after `prefix`, such as `Bearer `), marked sensitive so
    /// that `reqwest` never prints it. The error says what is wrong without the key.
    pub(crate) fn header(&self, provider: &'static str, prefix: &str) -> Result<HeaderValue, LlmError> {
        let mut value = HeaderValue::from_str(&format!("{prefix}{}", self.0)).map_err(|_| LlmError::Config {
            provider,
            message: "the API key contains characters that are not allowed in an HTTP header".into(),
        })?;
        value.set_sensitive(true);
        Ok(value)
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Reads a non-empty environment variable through `lookup`.
pub(crate) fn non_empty(lookup: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    lookup(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// The URL `{base}{path}`, where `path` starts with `/v1/`; a base ending in `/v1`
/// (with or without a trailing slash) is accepted without doubling it, so users may
/// give either form of a base URL. (The `/v1` at the end of the base is dropped
/// whatever the path: a provider whose path has no `/v1/` builds its URL itself.)
///
/// # Errors
/// [`LlmError::Config`] when the result is not a valid `http` or `https` URL.
///
/// ```
/// use loopstack_model::http::endpoint;
///
/// let url = endpoint("echo", "http://localhost:8080/v1/", "/v1/reply").unwrap();
/// assert_eq!(url.as_str(), "http://localhost:8080/v1/reply");
/// assert!(endpoint("echo", "localhost:8080", "/v1/reply").is_err());
/// ```
pub fn endpoint(provider: &'static str, base: &str, path: &str) -> Result<Url, LlmError> {
    let config = |message: String| LlmError::Config { provider, message };
    let trimmed = base.trim().trim_end_matches('/');
    let trimmed = trimmed.strip_suffix("/v1").unwrap_or(trimmed);
    let url = Url::parse(&format!("{trimmed}{path}")).map_err(|e| config(format!("invalid base URL `{base}`: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(config(format!("invalid base URL `{base}`: the scheme must be http or https")));
    }
    Ok(url)
}

/// The JSON value of an `f32` as people write it (`0.2`, not `0.20000000298023224`),
/// such as a request's temperature; `null` for NaN and the infinities.
///
/// ```
/// assert_eq!(loopstack_model::http::f32_value(0.2).to_string(), "0.2");
/// ```
pub fn f32_value(x: f32) -> Value {
    x.to_string().parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
}

/// The error of a response that does not have the shape the provider expects
/// ([`LlmError::MalformedResponse`]): a body that is not JSON, a missing field, an
/// event out of order. It is not retried.
///
/// ```
/// use loopstack_model::LlmError;
/// use loopstack_model::http::malformed;
///
/// let error = malformed("echo", "echo-1", "the reply has no `text`");
/// assert!(matches!(error, LlmError::MalformedResponse { provider: "echo", .. }));
/// assert!(!error.is_retryable());
/// ```
pub fn malformed(provider: &'static str, model: &str, message: impl Into<String>) -> LlmError {
    LlmError::MalformedResponse { provider, model: model.to_owned(), message: message.into() }
}

/// The span of one model request. `input_tokens`, `output_tokens`, `latency_ms` and
/// `retries` are recorded when it completes.
pub(crate) fn request_span(provider: &'static str, model: &str, stream: bool) -> tracing::Span {
    tracing::info_span!(
        "llm_request",
        provider,
        model,
        stream,
        input_tokens = Empty,
        output_tokens = Empty,
        latency_ms = Empty,
        retries = Empty,
    )
}

/// Records the outcome of a request on its span.
pub(crate) fn record_outcome(span: &tracing::Span, started: Instant, result: Result<&Usage, &LlmError>) {
    span.record("latency_ms", u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
    match result {
        Ok(usage) => {
            span.record("input_tokens", usage.input_tokens);
            span.record("output_tokens", usage.output_tokens);
        }
        Err(error) => span.in_scope(|| tracing::debug!(%error, "model request failed")),
    }
}

/// A test hook receiving each retry delay instead of sleeping.
pub(crate) type SleepHook = Arc<dyn Fn(Duration) -> BoxFuture<'static, ()> + Send + Sync>;

/// Wraps a closure as a [`SleepHook`] (for the providers' `__sleep_with`).
#[cfg(any(feature = "anthropic", feature = "openai", feature = "gemini", feature = "bedrock"))]
pub(crate) fn sleep_hook<F, Fut>(f: F) -> SleepHook
where
    F: Fn(Duration) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |d| Box::pin(f(d)))
}

/// One provider request, a `POST`, ready to be sent (and sent again, unchanged, on
/// retries): its URL, headers and body.
///
/// [`Client::call`] builds the call of a client's endpoint; [`Call::json`] and
/// [`Call::new`] build one for any URL. A provider adds headers of its own to
/// [`Call::headers`] before sending it.
///
/// ```
/// use loopstack_model::http::{Call, HeaderValue, Url};
/// use serde_json::json;
///
/// let url = Url::parse("http://localhost:8080/v1/reply").unwrap();
/// let mut call = Call::json("echo", "echo-1", url, &json!({"prompt": "Hi"}), false).unwrap();
/// call.headers.insert("echo-version", HeaderValue::from_static("2025-01-01"));
/// assert_eq!(call.headers["content-type"], "application/json");
/// assert_eq!(call.body(), br#"{"prompt":"Hi"}"#);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Call<'a> {
    /// The provider, named in the errors.
    pub provider: &'static str,
    /// The model, named in the errors.
    pub model: &'a str,
    /// Where the request goes.
    pub url: Url,
    /// The request's headers. Values holding secrets should be marked
    /// [sensitive](HeaderValue::set_sensitive), as the API key's is.
    pub headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl<'a> Call<'a> {
    /// A `POST` of `body` to `url`, without headers.
    pub fn new(provider: &'static str, model: &'a str, url: Url, body: impl Into<Vec<u8>>) -> Self {
        Self { provider, model, url, headers: HeaderMap::new(), body: Bytes::from(body.into()) }
    }

    /// A `POST` of `body` as JSON to `url`, with `content-type: application/json` and
    /// `accept: application/json`, or `accept: text/event-stream` for a `stream`.
    ///
    /// # Errors
    /// [`LlmError::MalformedResponse`] if `body` cannot be written as JSON (it always
    /// can; the error is there for `serde_json`'s signature).
    pub fn json(
        provider: &'static str,
        model: &'a str,
        url: Url,
        body: &Value,
        stream: bool,
    ) -> Result<Self, LlmError> {
        let bytes = serde_json::to_vec(body).map_err(|e| malformed(provider, model, e.to_string()))?;
        let mut call = Self::new(provider, model, url, bytes);
        call.headers.insert(reqwest::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let accept = if stream { "text/event-stream" } else { "application/json" };
        call.headers.insert(reqwest::header::ACCEPT, HeaderValue::from_static(accept));
        Ok(call)
    }

    /// The body sent (for a provider that signs its requests, say).
    pub fn body(&self) -> &[u8] {
        &self.body
    }
}

/// Signs each attempt of a call as it is sent, for an API whose requests carry a
/// signature instead of (or besides) an API key, such as AWS Signature Version 4
/// (this crate's Bedrock provider). Set one with [`Client::set_signer`].
///
/// ```
/// use std::sync::Arc;
///
/// use loopstack_model::LlmError;
/// use loopstack_model::http::{Auth, Call, Client, HeaderMap, HeaderValue, Signer};
///
/// /// Sends the body's length and a fresh timestamp (a real signer hashes them with a secret).
/// struct Stamp;
///
/// impl Signer for Stamp {
///     fn sign(&self, call: &Call<'_>) -> Result<HeaderMap, LlmError> {
///         let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
///         let mut headers = HeaderMap::new();
///         headers.insert("x-body-length", HeaderValue::from(call.body().len()));
///         headers.insert("x-date", HeaderValue::from(now.as_secs()));
///         Ok(headers)
///     }
/// }
///
/// let mut client = Client::new("stamped", "https://api.stamped.example", "/v1/reply", Auth::bearer());
/// client.set_signer(Some(Arc::new(Stamp)));
/// ```
pub trait Signer: Send + Sync {
    /// The headers that sign this attempt of `call`, added to its own: computed over
    /// its exact method (`POST`), URL, headers and body bytes, at the time of the
    /// attempt (AWS Signature Version 4 signs a timestamp, fresh on each retry).
    ///
    /// # Errors
    /// The error the call fails with, not retried (a [`LlmError::Config`] for
    /// credentials that cannot sign, say).
    fn sign(&self, call: &Call<'_>) -> Result<HeaderMap, LlmError>;
}

/// A failed attempt and whether another may succeed.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: LlmError,
    pub(crate) retryable: bool,
    pub(crate) retry_after: Option<Duration>,
}

impl Failure {
    fn fatal(error: LlmError) -> Self {
        Self { error, retryable: false, retry_after: None }
    }
}

/// The HTTP client, timeout and retry policy shared by every call of one model.
#[derive(Clone)]
pub(crate) struct Transport {
    client: Result<reqwest::Client, Arc<str>>,
    pub(crate) timeout: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) sleep: Option<SleepHook>,
    /// Signs each attempt just before it is sent (Bedrock's SigV4); `None`: sent as built.
    pub(crate) signer: Option<Arc<dyn Signer>>,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport").field("timeout", &self.timeout).field("retry", &self.retry).finish_non_exhaustive()
    }
}

impl Transport {
    /// Builds the one `reqwest::Client` of a model. Redirects are not followed: an API
    /// does not redirect, and following one would send the key to another host.
    pub(crate) fn new() -> Self {
        let client = client_builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(USER_AGENT)
            .build()
            .map_err(|e| Arc::from(format!("cannot build the HTTP client: {e}")));
        Self { client, timeout: DEFAULT_TIMEOUT, retry: RetryPolicy::new(), sleep: None, signer: None }
    }

    fn client(&self, provider: &'static str) -> Result<&reqwest::Client, LlmError> {
        self.client.as_ref().map_err(|message| LlmError::Config { provider, message: message.to_string() })
    }

    /// The request of one attempt of `call`, signed by the [`Signer`] if there is one.
    fn request(&self, client: &reqwest::Client, call: &Call<'_>) -> Result<reqwest::RequestBuilder, Failure> {
        let mut headers = call.headers.clone();
        if let Some(signer) = &self.signer {
            headers.extend(signer.sign(call).map_err(Failure::fatal)?);
        }
        Ok(client.post(call.url.clone()).headers(headers).body(call.body.clone()))
    }

    /// The deadline of an attempt starting now (a timeout too long to add is a year).
    fn deadline(&self) -> tokio::time::Instant {
        let now = tokio::time::Instant::now();
        now.checked_add(self.timeout).unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
    }

    fn timeout_failure(&self, call: &Call<'_>) -> Failure {
        Failure::fatal(LlmError::Timeout { provider: call.provider, model: call.model.to_owned(), after: self.timeout })
    }

    /// Sends `call` and decodes the body of its successful response with `decode`,
    /// retrying per the policy. A body `decode` refuses with a retryable error (an
    /// error the API sent in a 200 body, see [`body_error`]) is retried like the HTTP
    /// status it stands for; a malformed one is not. The timeout covers each whole
    /// attempt: sending, waiting and reading the body.
    pub(crate) async fn post_json<T>(
        &self,
        call: &Call<'_>,
        decode: impl Fn(&[u8]) -> Result<T, LlmError>,
    ) -> Result<T, LlmError> {
        let client = self.client(call.provider)?;
        self.retrying(call, || async {
            let attempt = async {
                let response = self.request(client, call)?.send().await.map_err(|e| transport_failure(call, e))?;
                if !response.status().is_success() {
                    return Err(response_failure(call, response).await);
                }
                let hints = RetryHints::of(response.headers());
                // The server accepted and answered the request (and billed it): a body
                // cut off now is not sent again, so one call is never paid for twice.
                let body = read_body(response, MAX_RESPONSE_BYTES)
                    .await
                    .map_err(|e| Failure { retryable: false, ..transport_failure(call, e) })?;
                let Some(body) = body else {
                    let message = format!(
                        "the response body is larger than the {} allowed",
                        crate::sse::fmt_bytes(MAX_RESPONSE_BYTES)
                    );
                    return Err(Failure::fatal(malformed(call.provider, call.model, message)));
                };
                decode(&body).map_err(|error| decode_failure(error, hints))
            };
            tokio::time::timeout(self.timeout, attempt).await.unwrap_or_else(|_| Err(self.timeout_failure(call)))
        })
        .await
    }

    /// Sends `call` and returns its successful response once its headers arrived, with
    /// the deadline of the attempt that got it (the timeout after that attempt
    /// started), retrying per the policy. A successful JSON response (not an event
    /// stream) is a failure: the error in its body, retried as its status would be.
    pub(crate) async fn open(&self, call: &Call<'_>) -> Result<(reqwest::Response, tokio::time::Instant), LlmError> {
        let client = self.client(call.provider)?;
        self.retrying(call, || async {
            let deadline = self.deadline();
            let attempt = async {
                let response = self.request(client, call)?.send().await.map_err(|e| transport_failure(call, e))?;
                if !response.status().is_success() {
                    return Err(response_failure(call, response).await);
                }
                // Some servers answer a stream request that failed with a JSON error.
                if errors::is_json(response.headers()) {
                    return Err(errors::json_instead_of_stream(call, response).await);
                }
                Ok(response)
            };
            match tokio::time::timeout_at(deadline, attempt).await {
                Ok(result) => result.map(|response| (response, deadline)),
                Err(_) => Err(self.timeout_failure(call)),
            }
        })
        .await
    }

    async fn retrying<T, F, Fut>(&self, call: &Call<'_>, mut attempt: F) -> Result<T, LlmError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let mut retries = 0;
        loop {
            let failure = match attempt().await {
                Ok(value) => {
                    tracing::Span::current().record("retries", retries);
                    return Ok(value);
                }
                Err(failure) => failure,
            };
            let Some(delay) = self.retry_delay(&failure, retries) else {
                tracing::Span::current().record("retries", retries);
                return Err(failure.error);
            };
            retries += 1;
            tracing::debug!(
                provider = call.provider,
                model = call.model,
                retry = retries,
                max_retries = self.retry.max_retries,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %failure.error,
                "retrying model request",
            );
            match &self.sleep {
                Some(hook) => hook(delay).await,
                None => tokio::time::sleep(delay).await,
            }
        }
    }

    /// How long to wait before retrying after `failure`, or `None` to give up.
    fn retry_delay(&self, failure: &Failure, retries_done: u32) -> Option<Duration> {
        if !failure.retryable || retries_done >= self.retry.max_retries {
            return None;
        }
        match failure.retry_after {
            Some(wait) if wait <= self.retry.max_retry_after => Some(wait),
            Some(_) => None,
            None => Some(self.retry.jittered(retries_done, fastrand::f64())),
        }
    }

    /// Sends `call` and streams its server-sent events through `decoder`. Retries happen
    /// only before the response starts. The timeout is a deadline for the whole
    /// attempt: the wait for the response headers and the whole stream after them,
    /// whatever the server sends (a server trickling bytes or events forever still ends
    /// in [`LlmError::Timeout`]). Lines and events are bounded by
    /// [`SSE_MAX_LINE_BYTES`](crate::sse::SSE_MAX_LINE_BYTES) and
    /// [`SSE_MAX_EVENT_BYTES`](crate::sse::SSE_MAX_EVENT_BYTES).
    pub(crate) fn post_sse<'a, D: SseDecoder + 'a>(
        &'a self,
        call: Call<'a>,
        decoder: D,
        span: tracing::Span,
    ) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
        let started = Instant::now();
        futures::stream::unfold(SseState::Start(call, decoder), move |state| {
            let step_span = span.clone();
            async move {
                let (items, next) = self.sse_step(state, &step_span, started).await;
                Some((items, next?))
            }
            .instrument(span.clone())
        })
        .flat_map(futures::stream::iter)
        .boxed()
    }

    /// One step of an SSE stream: what to yield and the next state (`None` to end).
    async fn sse_step<'a, D: SseDecoder>(
        &self,
        state: SseState<'a, D>,
        span: &tracing::Span,
        started: Instant,
    ) -> (Vec<Result<StreamEvent, LlmError>>, Option<SseState<'a, D>>) {
        // The events decoded before an error are yielded before it.
        let fail_after = |out: Vec<StreamEvent>, error: LlmError| {
            record_outcome(span, started, Err(&error));
            let items = out.into_iter().map(Ok).chain([Err(error)]).collect();
            (items, Some(SseState::End))
        };
        let fail = |error: LlmError| fail_after(Vec::new(), error);
        let mut reading = match state {
            SseState::End => return (Vec::new(), None),
            SseState::Start(call, decoder) => {
                return match self.open(&call).await {
                    Ok((response, deadline)) => {
                        let reading = Reading {
                            provider: call.provider,
                            model: call.model,
                            body: response.bytes_stream().boxed(),
                            parser: SseParser::new(),
                            decoder,
                            deadline,
                        };
                        (Vec::new(), Some(SseState::Reading(reading)))
                    }
                    Err(error) => fail(error),
                };
            }
            SseState::Reading(reading) => reading,
        };
        let timeout = |r: &Reading<'a, D>| LlmError::Timeout {
            provider: r.provider,
            model: r.model.to_owned(),
            after: self.timeout,
        };
        let mut out = Vec::new();
        loop {
            // Checked before each read too: a body that is always ready (a server
            // flooding bytes) would never let the timer below fire.
            if tokio::time::Instant::now() >= reading.deadline {
                return fail_after(out, timeout(&reading));
            }
            let Ok(next) = tokio::time::timeout_at(reading.deadline, reading.body.next()).await else {
                return fail_after(out, timeout(&reading));
            };
            let complete = match next {
                Some(Ok(chunk)) => {
                    let Reading { parser, decoder, .. } = &mut reading;
                    let fed = parser.feed(&chunk, &mut |name: &str, data: &str| {
                        decoder.event(name, data, &mut out)?;
                        Ok(decoder.is_complete())
                    });
                    match fed {
                        Ok(complete) => complete,
                        Err(FeedError::Handler(error)) => return fail_after(out, error),
                        Err(FeedError::Stream(error)) => {
                            return fail_after(out, malformed(reading.provider, reading.model, error.to_string()));
                        }
                    }
                }
                Some(Err(e)) => {
                    let (provider, model) = (reading.provider, reading.model.to_owned());
                    return fail_after(out, LlmError::Connection { provider, model, source: Box::new(e) });
                }
                // The body ended.
                None => true,
            };
            if !complete {
                if out.is_empty() {
                    continue;
                }
                let items = out.into_iter().map(Ok).collect();
                return (items, Some(SseState::Reading(reading)));
            }
            // The provider said the response is complete, or the body ended.
            return match reading.decoder.finish(&mut out) {
                Ok(response) => {
                    record_outcome(span, started, Ok(&response.usage));
                    out.push(StreamEvent::Done(response));
                    (out.into_iter().map(Ok).collect(), Some(SseState::End))
                }
                Err(error) => fail_after(out, error),
            };
        }
    }
}

type SseBody = BoxStream<'static, reqwest::Result<Bytes>>;

enum SseState<'a, D> {
    Start(Call<'a>, D),
    Reading(Reading<'a, D>),
    End,
}

/// A stream being read: its body, parser, decoder and deadline.
struct Reading<'a, D> {
    provider: &'static str,
    model: &'a str,
    body: SseBody,
    parser: SseParser,
    decoder: D,
    deadline: tokio::time::Instant,
}

/// A provider's decoder of the server-sent events of one streamed response into
/// [`StreamEvent`]s and, at the end, the [`ChatResponse`]; handed to
/// [`Client::stream`], one per request.
///
/// The client reads the stream and calls [`event`](SseDecoder::event) for each event
/// (comments, `id` and `retry` fields are skipped), in order. After each event it asks
/// [`is_complete`](SseDecoder::is_complete); once that is true, or the body ended, it
/// calls [`finish`](SseDecoder::finish) once and yields its response as
/// [`StreamEvent::Done`]. An error from `event` or `finish` ends the stream with that
/// error, after the events pushed before it. The stream is not retried once it
/// started, so an error event the API sends mid-stream (see [`body_error`]) ends it.
///
/// The events `event` pushes should add up to the response `finish` returns: the text
/// of [`StreamEvent::TextDelta`]s at an index is the text of that content block, as
/// [`ChatModel::stream`](crate::ChatModel::stream) promises. See the
/// [module's example](self#writing-a-provider).
pub trait SseDecoder: Send {
    /// Handles one event (`name` is the SSE `event:` field, `message` when absent;
    /// `data` its `data:` lines joined by `\n`), pushing what to yield onto `out`.
    ///
    /// # Errors
    /// The error that ends the stream: [`malformed`] for an event of the wrong shape,
    /// [`body_error`] for an error event.
    fn event(&mut self, name: &str, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), LlmError>;

    /// Whether the provider said the response is complete (`message_stop`, `[DONE]`).
    fn is_complete(&self) -> bool;

    /// The final response, once the provider said it is complete or the body ended;
    /// may push last events onto `out` (they are yielded before [`StreamEvent::Done`]).
    ///
    /// # Errors
    /// The error that ends the stream, such as [`malformed`] when the body ended
    /// before the provider said the response is complete.
    fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<ChatResponse, LlmError>;
}

/// The body of a successful response if it is at most `limit` bytes long, else `None`
/// (what was read is dropped, the rest not read).
async fn read_body(mut response: reqwest::Response, limit: usize) -> Result<Option<Vec<u8>>, reqwest::Error> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

fn transport_failure(call: &Call<'_>, error: reqwest::Error) -> Failure {
    if error.is_builder() {
        return Failure::fatal(LlmError::Config { provider: call.provider, message: error.to_string() });
    }
    Failure {
        error: LlmError::Connection { provider: call.provider, model: call.model.to_owned(), source: Box::new(error) },
        retryable: true,
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_debug_is_redacted() {
        let key = ApiKey::new("sk-secret-123");
        assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
        assert!(!format!("{key:#?}").contains("secret"));
        let header = key.header("openai", "Bearer ").unwrap();
        assert!(header.is_sensitive());
        assert!(!format!("{header:?}").contains("secret"));
    }

    #[test]
    fn api_key_with_a_newline_is_a_config_error_without_the_key() {
        let err = ApiKey::new("sk-bad\nkey").header("anthropic", "").unwrap_err();
        assert!(matches!(err, LlmError::Config { provider: "anthropic", .. }));
        assert!(!err.to_string().contains("sk-bad"));
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        let policy = RetryPolicy::new();
        assert_eq!(policy.backoff(0), Duration::from_millis(500));
        assert_eq!(policy.backoff(1), Duration::from_secs(1));
        assert_eq!(policy.backoff(3), Duration::from_secs(4));
        assert_eq!(policy.backoff(4), Duration::from_secs(8));
        assert_eq!(policy.backoff(10), Duration::from_secs(8));
        assert_eq!(policy.backoff(40), Duration::from_secs(8));
        assert_eq!(policy.jittered(1, 0.0), Duration::from_secs(1));
        assert_eq!(policy.jittered(1, 0.5), Duration::from_millis(875));
        assert!(policy.jittered(1, 0.999_999) > Duration::from_millis(750));
    }

    #[test]
    fn retry_delay_follows_the_policy() {
        let mut transport = Transport::new();
        transport.retry = RetryPolicy::new().max_retries(2);
        let failure = |retryable, retry_after| Failure {
            error: LlmError::Overloaded { provider: "anthropic", model: "m".into(), message: String::new() },
            retryable,
            retry_after,
        };
        let d = transport.retry_delay(&failure(true, None), 0).unwrap();
        assert!(d > Duration::from_millis(374) && d <= Duration::from_millis(500), "{d:?}");
        assert_eq!(
            transport.retry_delay(&failure(true, Some(Duration::from_secs(7))), 1),
            Some(Duration::from_secs(7))
        );
        assert_eq!(transport.retry_delay(&failure(true, None), 2), None, "retries exhausted");
        assert_eq!(transport.retry_delay(&failure(false, None), 0), None, "not retryable");
        assert_eq!(transport.retry_delay(&failure(true, Some(Duration::from_secs(61))), 0), None, "waits too long");
    }

    #[test]
    fn endpoints_accept_a_v1_base() {
        let url = |base| endpoint("openai", base, "/v1/chat/completions").map(|u| u.to_string());
        let want = "http://localhost:11434/v1/chat/completions";
        assert_eq!(url("http://localhost:11434").unwrap(), want);
        assert_eq!(url("http://localhost:11434/").unwrap(), want);
        assert_eq!(url("http://localhost:11434/v1").unwrap(), want);
        assert_eq!(url("http://localhost:11434/v1/").unwrap(), want);
        assert_eq!(url("https://openrouter.ai/api/v1").unwrap(), "https://openrouter.ai/api/v1/chat/completions");
        assert!(matches!(url("not a url"), Err(LlmError::Config { provider: "openai", .. })));
        assert!(matches!(url("ftp://example.com"), Err(LlmError::Config { .. })));
    }

    #[test]
    fn f32_values_are_written_as_people_write_them() {
        assert_eq!(f32_value(0.2).to_string(), "0.2");
        assert_eq!(f32_value(1.0).to_string(), "1.0");
        assert_eq!(f32_value(f32::NAN), Value::Null);
    }

    #[test]
    fn non_empty_env_values() {
        let lookup = |name: &str| match name {
            "SET" => Some(" value ".to_owned()),
            "EMPTY" => Some("  ".to_owned()),
            _ => None,
        };
        assert_eq!(non_empty(&lookup, "SET").as_deref(), Some("value"));
        assert_eq!(non_empty(&lookup, "EMPTY"), None);
        assert_eq!(non_empty(&lookup, "UNSET"), None);
    }
}
