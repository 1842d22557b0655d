//! The typed errors of failed responses: an unsuccessful HTTP status, or an error the
//! API sent in place of an answer, in the body of a successful response or as an event
//! of a stream. Both map to the same [`LlmError`] kinds: an error object stands for the
//! HTTP status its type (or numeric `code`) names, so an `overloaded_error` in a 200
//! body is [`LlmError::Overloaded`] and retried like an HTTP 529.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use super::{Call, Failure};
use crate::error::LlmError;

/// The longest error body kept in an error message when the body is not the API's JSON.
const MAX_ERROR_BODY: usize = 500;

/// How much of an error response's body is read.
const MAX_ERROR_BODY_READ: usize = super::MAX_ERROR_BODY_BYTES;

/// What a response's headers say about retrying it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RetryHints {
    /// The wait the server asked for (`retry-after-ms`, `retry-after`).
    pub(super) retry_after: Option<Duration>,
    /// The server said `x-should-retry: false`.
    pub(super) refused: bool,
}

impl RetryHints {
    pub(super) fn of(headers: &HeaderMap) -> Self {
        let refused = headers.get("x-should-retry").is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"false"));
        Self { retry_after: retry_after(headers), refused }
    }
}

/// The failure of an unsuccessful response, its body read up to a bound.
pub(super) async fn response_failure(call: &Call<'_>, response: reqwest::Response) -> Failure {
    let status = response.status().as_u16();
    let hints = RetryHints::of(response.headers());
    let aws_type = aws_error_type(response.headers());
    let body = read_bounded(response, MAX_ERROR_BODY_READ).await;
    let mut failure = status_failure(call.provider, call.model, status, hints, &body);
    if let Some(kind) = aws_type {
        prefix_message(&mut failure.error, &kind);
    }
    failure
}

/// The error type an AWS service names in `x-amzn-errortype` (`ThrottlingException`;
/// what follows a `:` in it is dropped).
fn aws_error_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("x-amzn-errortype")?.to_str().ok()?;
    let kind = value.split(':').next()?.trim();
    (!kind.is_empty()).then(|| kind.to_owned())
}

/// Puts `kind: ` before an API error's message.
fn prefix_message(error: &mut LlmError, kind: &str) {
    match error {
        LlmError::Authentication { message, .. }
        | LlmError::InvalidRequest { message, .. }
        | LlmError::RateLimited { message, .. }
        | LlmError::Overloaded { message, .. }
        | LlmError::Server { message, .. } => *message = format!("{kind}: {message}"),
        _ => {}
    }
}

/// Whether a response is JSON (`application/json`, with or without parameters).
pub(super) fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

/// The failure of a stream request answered with a successful JSON response instead of
/// an event stream: the error in its body (`{"error": ..}`, see [`body_error`]),
/// retried as that error's status would be, or else a malformed response.
pub(super) async fn json_instead_of_stream(call: &Call<'_>, response: reqwest::Response) -> Failure {
    let hints = RetryHints::of(response.headers());
    let body = read_bounded(response, MAX_ERROR_BODY_READ).await;
    let value = serde_json::from_slice::<Value>(&body).ok();
    let error = match value.as_ref().and_then(|v| v.get("error")).filter(|e| !e.is_null()) {
        Some(error) => body_error(call.provider, call.model, error),
        None => LlmError::MalformedResponse {
            provider: call.provider,
            model: call.model.to_owned(),
            message: "an event stream was asked for, but the response is JSON without an error".into(),
        },
    };
    decode_failure(error, hints)
}

/// The first `limit` bytes of a body (fewer if it ends or fails first); the rest is
/// not read, and dropping the response closes its connection.
async fn read_bounded(mut response: reqwest::Response, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk[..chunk.len().min(limit - body.len())]),
            Ok(None) | Err(_) => break,
        }
    }
    body
}

/// The typed error of an unsuccessful HTTP status, and whether to retry it.
pub(super) fn status_failure(
    provider: &'static str,
    model: &str,
    status: u16,
    hints: RetryHints,
    body: &[u8],
) -> Failure {
    let (kind, message) = api_error_message(status, body);
    let hints = RetryHints { retry_after: hints.retry_after.or_else(|| retry_info(body)), ..hints };
    let error = classify(provider, model, status, kind.as_deref(), message, hints.retry_after);
    let retryable = is_retried_status(status) && !hints.refused;
    Failure { error, retryable, retry_after: hints.retry_after }
}

/// The failure of a successful response whose body `decode` refused with `error`: an
/// error the API sent in the body (see [`body_error`]) is retried as its status would
/// be, a malformed body is not.
pub(super) fn decode_failure(mut error: LlmError, hints: RetryHints) -> Failure {
    if let LlmError::RateLimited { retry_after, .. } = &mut error {
        *retry_after = retry_after.or(hints.retry_after);
    }
    let retryable = error.is_retryable() && !hints.refused;
    Failure { error, retryable, retry_after: hints.retry_after }
}

/// Whether a response with this status is sent again.
fn is_retried_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500..=599)
}

/// The error kind of an API error with this status (and `type`, when the API gave one).
/// Every status [`is_retried_status`] accepts maps to a kind that
/// [`LlmError::is_retryable`] accepts, and no other does.
fn classify(
    provider: &'static str,
    model: &str,
    status: u16,
    kind: Option<&str>,
    message: String,
    retry_after: Option<Duration>,
) -> LlmError {
    let model = model.to_owned();
    match status {
        401 | 403 => LlmError::Authentication { provider, model, status, message },
        429 => LlmError::RateLimited { provider, model, retry_after, message },
        529 => LlmError::Overloaded { provider, model, message },
        500..=599 if kind == Some("overloaded_error") => LlmError::Overloaded { provider, model, message },
        408 | 409 | 500..=599 => LlmError::Server { provider, model, status, message },
        _ => LlmError::InvalidRequest { provider, model, status, message },
    }
}

/// The typed error of an error object an API sent in place of an answer: in the body
/// of a successful response (`{"type": "error", "error": {..}}` from Anthropic,
/// `{"error": {..}}` from OpenAI-compatible servers; `error` is the inner object) or as
/// an event of a stream. Its kind is that of the HTTP status the error stands for (as
/// [`status_error`] makes it): its numeric `code` when that is an error status
/// (llama.cpp and vLLM send one), else the status its `type` (or string `code`) has at
/// Anthropic, OpenAI or llama.cpp. So `overloaded_error` is [`LlmError::Overloaded`],
/// a rate limit (`rate_limit_error`, `rate_limit_exceeded`) [`LlmError::RateLimited`],
/// `api_error`, `server_error` and errors of unknown types [`LlmError::Server`] with
/// status 500 (all retryable), `authentication_error` [`LlmError::Authentication`],
/// `invalid_request_error` [`LlmError::InvalidRequest`], and so on. The message is
/// the object's `message`, or the object itself when it is a string (Ollama).
///
/// ```
/// use loopstack_model::LlmError;
/// use loopstack_model::http::body_error;
/// use serde_json::json;
///
/// let error = body_error("echo", "echo-1", &json!({"type": "overloaded_error", "message": "Overloaded"}));
/// assert!(matches!(error, LlmError::Overloaded { .. }));
/// assert!(error.is_retryable());
/// let error = body_error("echo", "echo-1", &json!({"code": 400, "message": "too long"}));
/// assert!(matches!(error, LlmError::InvalidRequest { status: 400, .. }));
/// ```
pub fn body_error(provider: &'static str, model: &str, error: &Value) -> LlmError {
    let kind = error.get("type").and_then(Value::as_str);
    let message = error.get("message").and_then(Value::as_str).or_else(|| error.as_str()).unwrap_or("no message");
    classify(provider, model, error_status(error), kind, message.to_owned(), None)
}

/// The error of an SSE `error` event's data: its `error` object (or the whole data,
/// or the data as text when it is not JSON) read by [`body_error`].
#[cfg(any(feature = "openai", feature = "gemini"))]
pub(crate) fn event_error(provider: &'static str, model: &str, data: &str) -> LlmError {
    let value = serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.to_owned()));
    body_error(provider, model, value.get("error").unwrap_or(&value))
}

/// The typed error of an unsuccessful HTTP `status` whose response had this `body`, as
/// [`Client::chat`](super::Client::chat) and [`Client::stream`](super::Client::stream)
/// return it: 401 and 403 are [`LlmError::Authentication`], 429
/// [`LlmError::RateLimited`], 529 (and a 5xx whose error type is `overloaded_error`)
/// [`LlmError::Overloaded`], 408, 409 and other 5xx [`LlmError::Server`], any other
/// status [`LlmError::InvalidRequest`]. The message is the API's, from `{"error":
/// {"type", "message"}}`, `{"error": "..."}`, `{"message": "..."}` or `{"detail":
/// "..."}`, else the body's first 500 characters, else the status's reason; a
/// rate limit's wait is a Google `RetryInfo`'s `retryDelay` in the body. For a
/// provider that learns a status some other way (inside an event, say). The client
/// retries exactly the statuses whose errors are
/// [retryable](LlmError::is_retryable).
///
/// ```
/// use loopstack_model::LlmError;
/// use loopstack_model::http::status_error;
///
/// let error = status_error("echo", "echo-1", 401, br#"{"error": {"message": "bad key"}}"#);
/// assert!(matches!(error, LlmError::Authentication { status: 401, ref message, .. } if message == "bad key"));
/// assert!(status_error("echo", "echo-1", 503, b"").is_retryable());
/// ```
pub fn status_error(provider: &'static str, model: &str, status: u16, body: &[u8]) -> LlmError {
    status_failure(provider, model, status, RetryHints::default(), body).error
}

/// The HTTP status an error object stands for: its numeric `code` when that is an
/// error status (llama.cpp and vLLM send one), else the status its `type` or string
/// `code` names at Anthropic, OpenAI or llama.cpp; 500 when it names none.
fn error_status(error: &Value) -> u16 {
    let code = error.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok());
    if let Some(code) = code.filter(|c| (400..600).contains(c)) {
        return code;
    }
    [error.get("type"), error.get("code")]
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(type_status)
        .unwrap_or(500)
}

/// The HTTP status an API sends with errors of this type (or OpenAI `code`).
fn type_status(kind: &str) -> Option<u16> {
    Some(match kind {
        "invalid_request_error" | "context_length_exceeded" | "exceed_context_size_error" | "BadRequestError" => 400,
        "authentication_error" | "invalid_api_key" => 401,
        "permission_error" => 403,
        "not_found_error" | "model_not_found" | "NotFoundError" => 404,
        "request_too_large" => 413,
        "rate_limit_error" | "rate_limit_exceeded" | "requests" | "tokens" | "insufficient_quota" => 429,
        "api_error" | "server_error" => 500,
        "not_supported_error" => 501,
        "unavailable_error" => 503,
        "overloaded_error" => 529,
        _ => return None,
    })
}

/// The API's error type and message from an error body: `{"error": {"type", "message"}}`
/// (Anthropic, OpenAI), `{"error": "..."}` (Ollama), `{"message": "..."}` (vLLM, AWS;
/// AWS also `{"Message": "..."}`) or `{"detail": "..."}`; otherwise the body text, shortened, or the status reason.
pub(super) fn api_error_message(status: u16, body: &[u8]) -> (Option<String>, String) {
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        let error = value.get("error");
        let kind = error.and_then(|e| e.get("type")).and_then(Value::as_str).map(str::to_owned);
        let message = error
            .and_then(|e| e.get("message"))
            .or(error.filter(|e| e.is_string()))
            .or_else(|| value.get("message"))
            .or_else(|| value.get("Message"))
            .or_else(|| value.get("detail"))
            .and_then(Value::as_str);
        if let Some(message) = message {
            return (kind, message.to_owned());
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        let reason = reqwest::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason());
        return (None, reason.unwrap_or("no error message").to_owned());
    }
    (None, shorten(text, MAX_ERROR_BODY))
}

fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The wait a Google API asked for in its error body: the `retryDelay` (`"37s"`,
/// `"1.5s"`) of a `google.rpc.RetryInfo` among the error's `details`, which Google's
/// APIs (Gemini, Vertex AI) send instead of a `retry-after` header.
fn retry_info(body: &[u8]) -> Option<Duration> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let details = value.get("error")?.get("details")?.as_array()?;
    let info = details
        .iter()
        .find(|d| d.get("@type").and_then(Value::as_str).is_some_and(|t| t.ends_with("google.rpc.RetryInfo")))?;
    let seconds: f64 = info.get("retryDelay")?.as_str()?.trim().strip_suffix('s')?.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::try_from_secs_f64(seconds).ok()).flatten()
}

/// The wait a server asked for: `retry-after-ms` (milliseconds) or `retry-after` (seconds).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        let value = headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok()?;
        (value.is_finite() && value >= 0.0).then_some(value)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    number("retry-after").and_then(|s| Duration::try_from_secs_f64(s).ok())
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;
    use serde_json::json;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn hints(pairs: &[(&'static str, &str)]) -> RetryHints {
        RetryHints::of(&headers(pairs))
    }

    #[test]
    fn retry_after_headers() {
        assert_eq!(retry_after(&headers(&[("retry-after", "7")])), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(&headers(&[("retry-after", " 1.5 ")])), Some(Duration::from_millis(1500)));
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7"), ("retry-after-ms", "250")])),
            Some(Duration::from_millis(250))
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")])), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-1")])), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn google_retry_info_in_the_body() {
        let body = br#"{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota exceeded",
            "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure"},
                        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37.5s"}]}}"#;
        let f = status_failure("gemini", "m", 429, RetryHints::default(), body);
        assert_eq!(f.retry_after, Some(Duration::from_millis(37_500)));
        assert!(matches!(f.error, LlmError::RateLimited { retry_after: Some(d), ref message, .. }
            if d == Duration::from_millis(37_500) && message == "Quota exceeded"));
        // A header wins; a delay that is no number of seconds is ignored.
        let f = status_failure("gemini", "m", 429, hints(&[("retry-after", "2")]), body);
        assert_eq!(f.retry_after, Some(Duration::from_secs(2)));
        assert_eq!(
            retry_info(br#"{"error": {"details": [{"@type": "x/google.rpc.RetryInfo", "retryDelay": "-1s"}]}}"#),
            None
        );
        assert_eq!(
            retry_info(br#"{"error": {"details": [{"@type": "x/google.rpc.RetryInfo", "retryDelay": "soon"}]}}"#),
            None
        );
        assert_eq!(retry_info(b"not json"), None);
    }

    #[test]
    fn status_classes() {
        let none = RetryHints::default();
        let body = br#"{"type":"error","error":{"type":"invalid_request_error","message":"bad thing"}}"#;
        let f = status_failure("anthropic", "m", 400, none, body);
        assert!(!f.retryable);
        assert!(matches!(f.error, LlmError::InvalidRequest { status: 400, ref message, .. } if message == "bad thing"));
        for status in [401, 403] {
            let f = status_failure("openai", "m", status, none, b"");
            assert!(matches!(f.error, LlmError::Authentication { .. }) && !f.retryable);
        }
        let f = status_failure("openai", "m", 429, hints(&[("retry-after", "3")]), b"");
        assert!(f.retryable);
        assert!(matches!(f.error, LlmError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(3)));
        let f = status_failure("anthropic", "m", 529, none, b"");
        assert!(matches!(f.error, LlmError::Overloaded { .. }) && f.retryable);
        let overloaded = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let f = status_failure("anthropic", "m", 503, none, overloaded);
        assert!(matches!(f.error, LlmError::Overloaded { ref message, .. } if message == "Overloaded") && f.retryable);
        for status in [408, 409, 500, 502, 503] {
            let f = status_failure("openai", "m", status, none, b"");
            assert!(matches!(f.error, LlmError::Server { .. }) && f.retryable, "{status}");
        }
        let f = status_failure("openai", "m", 500, hints(&[("x-should-retry", "false")]), b"");
        assert!(!f.retryable);
        for status in [404, 413, 422] {
            let f = status_failure("openai", "m", status, none, b"");
            assert!(matches!(f.error, LlmError::InvalidRequest { .. }) && !f.retryable, "{status}");
        }
        // Every status is retried exactly when its error kind says it is retryable.
        for status in 400..600 {
            let f = status_failure("openai", "m", status, none, b"");
            assert_eq!(f.retryable, f.error.is_retryable(), "{status}");
        }
    }

    #[test]
    fn error_objects_map_to_the_kind_of_their_status() {
        let kind = |error: Value| body_error("anthropic", "m", &error);
        assert!(matches!(
            kind(json!({"type": "overloaded_error", "message": "Overloaded"})),
            LlmError::Overloaded { provider: "anthropic", ref message, .. } if message == "Overloaded"
        ));
        assert!(matches!(
            kind(json!({"type": "api_error", "message": "Internal"})),
            LlmError::Server { status: 500, ref message, .. } if message == "Internal"
        ));
        assert!(matches!(
            kind(json!({"type": "rate_limit_error", "message": "slow"})),
            LlmError::RateLimited { retry_after: None, .. }
        ));
        // OpenAI's rate limit types and codes.
        assert!(matches!(
            kind(json!({"type": "requests", "code": "rate_limit_exceeded"})),
            LlmError::RateLimited { .. }
        ));
        assert!(matches!(kind(json!({"type": null, "code": "rate_limit_exceeded"})), LlmError::RateLimited { .. }));
        assert!(matches!(kind(json!({"type": "server_error", "message": "m"})), LlmError::Server { status: 500, .. }));
        // A numeric code (llama.cpp, vLLM) is the status.
        assert!(matches!(
            kind(json!({"code": 503, "type": "unavailable_error", "message": "Loading model"})),
            LlmError::Server { status: 503, .. }
        ));
        assert!(matches!(
            kind(json!({"code": 400, "type": "exceed_context_size_error", "message": "too long"})),
            LlmError::InvalidRequest { status: 400, .. }
        ));
        assert!(matches!(kind(json!({"type": "authentication_error"})), LlmError::Authentication { status: 401, .. }));
        // Unknown types, a bare message (Ollama) and an empty object are server errors.
        assert!(matches!(kind(json!({"type": "new_error", "message": "m"})), LlmError::Server { status: 500, .. }));
        assert!(matches!(
            kind(json!("model crashed")),
            LlmError::Server { status: 500, ref message, .. } if message == "model crashed"
        ));
        assert!(matches!(
            kind(json!({})),
            LlmError::Server { status: 500, ref message, .. } if message == "no message"
        ));
        assert!(kind(json!({"code": 200})).is_retryable(), "a code that is no error status is ignored");
    }

    #[test]
    fn decode_failures_are_retried_when_their_kind_is() {
        let overloaded = LlmError::Overloaded { provider: "anthropic", model: "m".into(), message: String::new() };
        assert!(decode_failure(overloaded, RetryHints::default()).retryable);
        let malformed = LlmError::MalformedResponse { provider: "openai", model: "m".into(), message: String::new() };
        assert!(!decode_failure(malformed, hints(&[("retry-after", "1")])).retryable);
        let limited =
            LlmError::RateLimited { provider: "openai", model: "m".into(), retry_after: None, message: String::new() };
        let f = decode_failure(limited, hints(&[("retry-after", "2")]));
        assert!(f.retryable);
        assert_eq!(f.retry_after, Some(Duration::from_secs(2)));
        assert!(matches!(f.error, LlmError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(2)));
        let server = LlmError::Server { provider: "openai", model: "m".into(), status: 500, message: String::new() };
        assert!(!decode_failure(server, hints(&[("x-should-retry", "false")])).retryable);
    }

    #[test]
    fn error_messages_from_bodies() {
        assert_eq!(api_error_message(404, br#"{"error":"model 'x' not found"}"#).1, "model 'x' not found");
        assert_eq!(api_error_message(400, br#"{"object":"error","message":"too long"}"#).1, "too long");
        assert_eq!(api_error_message(422, br#"{"detail":"nope"}"#).1, "nope");
        let (kind, message) = api_error_message(400, br#"{"error":{"message":"m","type":"invalid_request_error"}}"#);
        assert_eq!((kind.as_deref(), message.as_str()), (Some("invalid_request_error"), "m"));
        assert_eq!(api_error_message(502, b"  <html>bad gateway</html>\n").1, "<html>bad gateway</html>");
        assert_eq!(api_error_message(503, b"").1, "Service Unavailable");
        let long = "é".repeat(2000);
        assert_eq!(api_error_message(500, long.as_bytes()).1.chars().count(), MAX_ERROR_BODY + 3);
    }
}
