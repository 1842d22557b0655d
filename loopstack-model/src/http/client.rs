//! What both HTTP providers share: their settings (API key, base URL, timeout, retry
//! policy, the test sleep hook), the builder methods that set them
//! ([`http_settings!`]), and the request path of a model call (the span, the headers,
//! sending with retries, decoding).
//!
//! A provider holds one [`Client`] in a field named `http`, encodes a
//! [`ChatRequest`] into its JSON body, and hands the body with its decoder to
//! [`Client::chat`] or [`Client::stream`].

use std::fmt;
use std::time::Instant;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tracing::Instrument as _;

use super::{ApiKey, Call, SseDecoder, Transport, endpoint, malformed, non_empty, record_outcome, request_span};
use crate::error::LlmError;
use crate::model::{ChatRequest, ChatResponse, StreamEvent};

/// How the API key is sent: `<header>: <prefix><key>`, such as `authorization: Bearer
/// <key>` (OpenAI) or `x-api-key: <key>` (Anthropic).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Auth {
    /// The header's name, in lower case.
    pub(crate) header: &'static str,
    /// What precedes the key in its value.
    pub(crate) prefix: &'static str,
}

/// The settings of one HTTP provider and the path of its calls.
#[derive(Clone)]
pub(crate) struct Client {
    provider: &'static str,
    /// The endpoint's path, such as `/v1/messages`.
    path: &'static str,
    auth: Auth,
    pub(crate) api_key: Option<ApiKey>,
    pub(crate) base_url: String,
    pub(crate) transport: Transport,
}

impl Client {
    /// A client for `provider` at `base_url`, calling `path`, with no API key.
    pub(crate) fn new(provider: &'static str, base_url: &str, path: &'static str, auth: Auth) -> Self {
        Self { provider, path, auth, api_key: None, base_url: base_url.to_owned(), transport: Transport::new() }
    }

    /// Sets the API key from the environment variable `key` and the base URL from `base`
    /// (each when set and not empty).
    ///
    /// # Errors
    /// [`LlmError::Config`] when the base URL is invalid.
    pub(crate) fn configure_from(
        &mut self,
        lookup: &dyn Fn(&str) -> Option<String>,
        key: &str,
        base: &str,
    ) -> Result<(), LlmError> {
        if let Some(api_key) = non_empty(lookup, key) {
            self.api_key = Some(ApiKey::new(api_key));
        }
        if let Some(base_url) = non_empty(lookup, base) {
            endpoint(self.provider, &base_url, self.path)?;
            self.base_url = base_url;
        }
        Ok(())
    }

    /// Adds the settings to a provider's `Debug` output (the key redacted).
    pub(crate) fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("api_key", &self.api_key)
            .field("base_url", &self.base_url)
            .field("timeout", &self.transport.timeout)
            .field("retry_policy", &self.transport.retry);
    }

    /// A call of the endpoint with this JSON body: the URL, the key, and the content
    /// type and accepted type of a JSON or (`stream`) an event-stream response. The
    /// provider may add headers to the result.
    pub(crate) fn call<'a>(&self, model: &'a str, body: &Value, stream: bool) -> Result<Call<'a>, LlmError> {
        let url = endpoint(self.provider, &self.base_url, self.path)?;
        let mut headers = HeaderMap::new();
        if let Some(key) = &self.api_key {
            headers.insert(HeaderName::from_static(self.auth.header), key.header(self.provider, self.auth.prefix)?);
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let accept = if stream { "text/event-stream" } else { "application/json" };
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        let body = serde_json::to_vec(body).map_err(|e| malformed(self.provider, model, e.to_string()))?;
        Ok(Call { provider: self.provider, model, url, headers, body: body.into() })
    }

    /// Sends `call` (built for `request`) and decodes the body of its successful
    /// response with `decode`, retrying per the policy (see
    /// [`Transport::post_json`](super::Transport::post_json)); in a span recording the
    /// outcome.
    pub(crate) async fn chat(
        &self,
        request: &ChatRequest,
        call: Result<Call<'_>, LlmError>,
        decode: impl Fn(&[u8]) -> Result<ChatResponse, LlmError> + Send + Sync,
    ) -> Result<ChatResponse, LlmError> {
        let span = request_span(self.provider, &request.model, false);
        let started = Instant::now();
        let result = async { self.transport.post_json(&call?, decode).await }.instrument(span.clone()).await;
        record_outcome(&span, started, result.as_ref().map(|r| &r.usage));
        result
    }

    /// Sends `call` (built for `request`) and streams its events through `decoder`.
    pub(crate) fn stream<'a, D: SseDecoder + 'a>(
        &'a self,
        request: &'a ChatRequest,
        call: Result<Call<'a>, LlmError>,
        decoder: D,
    ) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
        let span = request_span(self.provider, &request.model, true);
        match call {
            Ok(call) => self.transport.post_sse(call, decoder, span),
            Err(e) => futures::stream::once(async { Err(e) }).boxed(),
        }
    }
}

/// The builder methods both HTTP providers have, over their `http: Client` field:
/// `base_url`, `timeout`, `retry_policy` and the hidden test hook `__sleep_with`.
/// Expanded inside the provider's `impl` block.
macro_rules! http_settings {
    () => {
        /// Sets the base URL, such as a proxy's or a local server's, with or without a
        /// trailing `/v1` (the endpoint's path is appended without doubling it). An
        /// invalid URL fails the calls with [`LlmError::Config`](crate::LlmError::Config).
        pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
            self.http.base_url = base_url.into();
            self
        }

        /// Sets the request timeout (see the type's docs for what it covers).
        pub fn timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.http.transport.timeout = timeout;
            self
        }

        /// Sets how failed requests are retried.
        pub fn retry_policy(mut self, policy: $crate::RetryPolicy) -> Self {
            self.http.transport.retry = policy;
            self
        }

        /// Test hook: `sleep` is awaited instead of each retry delay, and receives it.
        #[doc(hidden)]
        pub fn __sleep_with<F, Fut>(mut self, sleep: F) -> Self
        where
            F: Fn(::std::time::Duration) -> Fut + Send + Sync + 'static,
            Fut: ::std::future::Future<Output = ()> + Send + 'static,
        {
            self.http.transport.sleep = Some($crate::http::sleep_hook(sleep));
            self
        }
    };
}

pub(crate) use http_settings;
