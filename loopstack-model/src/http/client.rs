//! What the HTTP providers share: their settings (API key, base URL, timeout, retry
//! policy, the test sleep hook), the builder methods that set them
//! (`http_settings!`, inside this crate), and the request path of a model call (the
//! span, the headers, sending with retries, decoding).
//!
//! A provider holds one [`Client`] in a field named `http`, encodes a
//! [`ChatRequest`] into its JSON body, and hands the body with its decoder to
//! [`Client::chat`] or [`Client::stream`].

use std::fmt;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::stream::BoxStream;
use reqwest::header::HeaderName;
use serde_json::Value;
use tracing::Instrument as _;

use super::{ApiKey, Call, SseDecoder, Transport, endpoint, non_empty, record_outcome, request_span};
use crate::error::LlmError;
use crate::model::{ChatRequest, ChatResponse, StreamEvent};

/// How the API key is sent: `<header>: <prefix><key>`, such as `authorization: Bearer
/// <key>` (OpenAI, [`Auth::bearer`]) or `x-api-key: <key>` (Anthropic,
/// `Auth::new("x-api-key", "")`).
///
/// ```
/// use loopstack_model::http::Auth;
///
/// let auth = Auth::new("x-goog-api-key", "");
/// assert_eq!((auth.header, auth.prefix), ("x-goog-api-key", ""));
/// assert_eq!(Auth::bearer().prefix, "Bearer ");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Auth {
    /// The header's name, in lower case (another case is sent in lower case; a name
    /// that is no valid header name fails the calls with [`LlmError::Config`]).
    pub header: &'static str,
    /// What precedes the key in its value, such as `Bearer `.
    pub prefix: &'static str,
}

impl Auth {
    /// The key sent as `<header>: <prefix><key>`.
    pub const fn new(header: &'static str, prefix: &'static str) -> Self {
        Self { header, prefix }
    }

    /// The key sent as `authorization: Bearer <key>`.
    pub const fn bearer() -> Self {
        Self::new("authorization", "Bearer ")
    }
}

/// The settings of one HTTP provider (base URL, API key, timeout, retry policy) and
/// the path of its endpoint; it sends the provider's [`Call`]s. See the
/// [module's docs](super) for how a provider is built with it.
///
/// One HTTP connection pool is built with the client and shared by its clones. Its
/// `Debug` output shows the settings with the key redacted.
///
/// ```
/// use std::time::Duration;
///
/// use loopstack_model::RetryPolicy;
/// use loopstack_model::http::{Auth, Client};
/// use serde_json::json;
///
/// let mut client = Client::new("echo", "https://api.echo.example", "/v1/reply", Auth::bearer());
/// client.set_api_key("sk-secret");
/// client.set_timeout(Duration::from_secs(30));
/// client.set_retry_policy(RetryPolicy::new().max_retries(5));
/// assert!(!format!("{client:?}").contains("sk-secret"));
///
/// let call = client.call("echo-1", &json!({"prompt": "Hi"}), false).unwrap();
/// assert_eq!(call.url.as_str(), "https://api.echo.example/v1/reply");
/// assert!(call.headers["authorization"].is_sensitive());
/// ```
#[derive(Clone)]
pub struct Client {
    provider: &'static str,
    /// The endpoint's path, such as `/v1/messages`.
    path: &'static str,
    auth: Auth,
    pub(crate) api_key: Option<ApiKey>,
    pub(crate) base_url: String,
    pub(crate) transport: Transport,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Client");
        d.field("provider", &self.provider).field("path", &self.path);
        self.debug_fields(&mut d);
        d.finish_non_exhaustive()
    }
}

impl Client {
    /// A client for `provider` (the name its errors and spans carry) at `base_url`,
    /// calling `path` (such as `/v1/messages`; see [`endpoint`](super::endpoint) for how
    /// they are joined), sending its API key as `auth` says; with no API key (no
    /// header is sent until one is set), the [`DEFAULT_TIMEOUT`](super::DEFAULT_TIMEOUT)
    /// and the default [`RetryPolicy`](crate::RetryPolicy).
    ///
    /// The base URL is checked when a call is built: an invalid one fails the calls
    /// with [`LlmError::Config`].
    pub fn new(provider: &'static str, base_url: &str, path: &'static str, auth: Auth) -> Self {
        Self { provider, path, auth, api_key: None, base_url: base_url.to_owned(), transport: Transport::new() }
    }

    /// The provider's name.
    pub fn provider(&self) -> &'static str {
        self.provider
    }

    /// Sets the API key, sent as the [`Auth`] says. It never appears in `Debug`
    /// output, logs or errors.
    pub fn set_api_key(&mut self, api_key: impl Into<String>) {
        self.api_key = Some(ApiKey::new(api_key));
    }

    /// Whether an API key is set.
    pub fn has_api_key(&self) -> bool {
        self.api_key.is_some()
    }

    /// The base URL.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Sets the base URL, such as a proxy's or a local server's.
    pub fn set_base_url(&mut self, base_url: impl Into<String>) {
        self.base_url = base_url.into();
    }

    /// The request timeout: a deadline for each whole attempt (sending, waiting, and
    /// reading the whole body or event stream).
    pub fn timeout(&self) -> Duration {
        self.transport.timeout
    }

    /// Sets the request timeout.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.transport.timeout = timeout;
    }

    /// How failed requests are retried.
    pub fn retry_policy(&self) -> crate::RetryPolicy {
        self.transport.retry
    }

    /// Sets how failed requests are retried.
    pub fn set_retry_policy(&mut self, policy: crate::RetryPolicy) {
        self.transport.retry = policy;
    }

    /// Sets the [`Signer`](super::Signer) that signs each attempt of each call just
    /// before it is sent (its headers added to the call's), or `None` to send calls as
    /// built.
    pub fn set_signer(&mut self, signer: Option<std::sync::Arc<dyn super::Signer>>) {
        self.transport.signer = signer;
    }

    /// Sets the API key from the environment variable `key` and the base URL from `base`
    /// (each when set and not empty, surrounding spaces trimmed), reading variables
    /// through `lookup`: `&|name| std::env::var(name).ok()` for the process's
    /// environment, or a map in tests.
    ///
    /// # Errors
    /// [`LlmError::Config`] when the base URL is invalid.
    ///
    /// ```
    /// use loopstack_model::http::{Auth, Client};
    ///
    /// let mut client = Client::new("echo", "https://api.echo.example", "/v1/reply", Auth::bearer());
    /// let env = |name: &str| (name == "ECHO_BASE_URL").then(|| "http://localhost:8080".to_owned());
    /// client.configure_from(&env, "ECHO_API_KEY", "ECHO_BASE_URL").unwrap();
    /// assert_eq!(client.base_url(), "http://localhost:8080");
    /// assert!(!client.has_api_key());
    /// ```
    pub fn configure_from(
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

    /// Adds the settings (API key redacted, base URL, timeout, retry policy) to a
    /// provider's `Debug` output.
    pub fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("api_key", &self.api_key)
            .field("base_url", &self.base_url)
            .field("timeout", &self.transport.timeout)
            .field("retry_policy", &self.transport.retry);
    }

    /// A call of the endpoint for `model` with this JSON body: the URL, the key, and
    /// the content type and accepted type of a JSON or (`stream`) an event-stream
    /// response (see [`Call::json`]). The provider may add headers to the result.
    ///
    /// # Errors
    /// [`LlmError::Config`] when the base URL is invalid, or the key or the [`Auth`]
    /// header's name cannot be sent in a header.
    pub fn call<'a>(&self, model: &'a str, body: &Value, stream: bool) -> Result<Call<'a>, LlmError> {
        self.call_at(self.path, model, body, stream)
    }

    /// Like [`Client::call`], for another `path` of the same API (such as a path with
    /// the model in it, `/v1/models/{model}:generate`).
    ///
    /// # Errors
    /// As [`Client::call`].
    pub fn call_at<'a>(&self, path: &str, model: &'a str, body: &Value, stream: bool) -> Result<Call<'a>, LlmError> {
        let url = endpoint(self.provider, &self.base_url, path)?;
        let mut call = Call::json(self.provider, model, url, body, stream)?;
        if let Some(key) = &self.api_key {
            let name = HeaderName::from_bytes(self.auth.header.as_bytes()).map_err(|_| LlmError::Config {
                provider: self.provider,
                message: format!("`{}` is not a valid header name for the API key", self.auth.header),
            })?;
            call.headers.insert(name, key.header(self.provider, self.auth.prefix)?);
        }
        Ok(call)
    }

    /// Sends `call` (built for `request`; an `Err` is returned as is, so that building
    /// the call may fail without a `?` of its own) and decodes the body of its
    /// successful response with `decode`, retrying per the policy; in a `llm_request`
    /// span recording the outcome.
    ///
    /// A failed response is its typed error (see [`status_error`](super::status_error)).
    /// A body `decode` refuses with a [retryable](LlmError::is_retryable) error (an
    /// error the API sent in a 200 body, see [`body_error`](super::body_error)) is
    /// retried as the HTTP status it stands for; a malformed one is not. A body larger
    /// than [`MAX_RESPONSE_BYTES`](super::MAX_RESPONSE_BYTES) is a
    /// [`LlmError::MalformedResponse`]. The timeout covers each whole attempt.
    ///
    /// # Errors
    /// The [`LlmError`] of the last attempt, or `decode`'s.
    pub async fn chat(
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

    /// Sends `call` (built for `request`; an `Err` is the stream's only item) and
    /// streams its server-sent events through `decoder`, ending with
    /// [`StreamEvent::Done`] and the response [`SseDecoder::finish`] returned; in a
    /// `llm_request` span recording the outcome.
    ///
    /// Retries happen only before the response starts; a successful JSON response
    /// instead of an event stream is the error in its body (`{"error": ..}`). Once
    /// events flowed, an error (a broken connection, the timeout, a bound of
    /// [`sse`](crate::sse) broken, the decoder's error) is the stream's last item. The
    /// timeout is a deadline for the whole attempt, the stream included.
    pub fn stream<'a, D: SseDecoder + 'a>(
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

/// The builder methods the HTTP providers (all but Bedrock, whose base URL is its
/// region's) have, over their `http: Client` field: `base_url`, `timeout`,
/// `retry_policy` and the hidden test hook `__sleep_with`. Expanded inside the
/// provider's `impl` block.
#[cfg(any(feature = "anthropic", feature = "openai", feature = "gemini"))]
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

#[cfg(any(feature = "anthropic", feature = "openai", feature = "gemini"))]
pub(crate) use http_settings;
