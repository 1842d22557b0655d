//! Shared HTTP plumbing of the providers: retries, SSE, error decoding.
//!
//! Each provider owns one [`Client`] (its settings and request path, see [`client`]),
//! which owns one [`Transport`]: one `reqwest::Client` built once, the request timeout,
//! the [`RetryPolicy`] and (for tests) a sleep hook. A provider turns a
//! [`ChatRequest`](crate::ChatRequest) into a [`Call`] (URL, headers, JSON body) that the
//! transport sends with [`Transport::post_json`] or [`Transport::post_sse`]; the
//! [`errors`] module maps failed responses to typed [`LlmError`]s.

mod client;
mod errors;

pub(crate) use client::{Auth, Client, http_settings};
pub(crate) use errors::body_error;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderValue};
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
/// easily takes more than a minute.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

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

/// `{base}{path}` where `path` starts with `/v1/`; a base ending in `/v1` (with or
/// without a trailing slash) is accepted without doubling it.
pub(crate) fn endpoint(provider: &'static str, base: &str, path: &str) -> Result<Url, LlmError> {
    let config = |message: String| LlmError::Config { provider, message };
    let trimmed = base.trim().trim_end_matches('/');
    let trimmed = trimmed.strip_suffix("/v1").unwrap_or(trimmed);
    let url = Url::parse(&format!("{trimmed}{path}")).map_err(|e| config(format!("invalid base URL `{base}`: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(config(format!("invalid base URL `{base}`: the scheme must be http or https")));
    }
    Ok(url)
}

/// The JSON value of an `f32` as people write it (`0.2`, not `0.20000000298023224`).
pub(crate) fn f32_value(x: f32) -> Value {
    x.to_string().parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
}

/// A malformed-response error.
pub(crate) fn malformed(provider: &'static str, model: &str, message: impl Into<String>) -> LlmError {
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

/// Wraps a closure as a [`SleepHook`].
pub(crate) fn sleep_hook<F, Fut>(f: F) -> SleepHook
where
    F: Fn(Duration) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |d| Box::pin(f(d)))
}

/// One provider request, ready to be sent (and sent again on retries).
pub(crate) struct Call<'a> {
    pub(crate) provider: &'static str,
    pub(crate) model: &'a str,
    pub(crate) url: Url,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// Signs each attempt of a call as it is sent (see [`Transport::signer`]).
pub(crate) trait Signer: Send + Sync {
    /// The headers that sign this attempt of `call`, added to its own: computed over
    /// its exact method (`POST`), URL, headers and body bytes, at the time of the
    /// attempt (AWS Signature Version 4 signs a timestamp, fresh on each retry).
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
        let client = reqwest::Client::builder()
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
                let body =
                    response.bytes().await.map_err(|e| Failure { retryable: false, ..transport_failure(call, e) })?;
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

/// A provider's decoder of streamed events into [`StreamEvent`]s and a [`ChatResponse`].
pub(crate) trait SseDecoder: Send {
    /// Handles one event (`name` is the SSE `event:` field, `message` when absent),
    /// pushing what to yield onto `out`.
    fn event(&mut self, name: &str, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), LlmError>;

    /// Whether the provider said the response is complete (`message_stop`, `[DONE]`).
    fn is_complete(&self) -> bool;

    /// The final response, once the provider said it is complete or the body ended;
    /// may push last events onto `out` (they are yielded before [`StreamEvent::Done`]).
    fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<ChatResponse, LlmError>;
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
