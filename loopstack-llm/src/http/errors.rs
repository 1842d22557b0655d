//! The typed errors of unsuccessful HTTP responses.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use super::{Call, Failure};
use crate::error::LlmError;

/// The longest error body kept in an error message when the body is not the API's JSON.
pub(super) const MAX_ERROR_BODY: usize = 500;

/// How much of an error response's body is read: 64 KiB. The API's JSON error is far
/// smaller; the rest of a larger body (a proxy's page, or a broken server's endless
/// one) is not read, so an error costs little memory and time whatever its size.
const MAX_ERROR_BODY_READ: usize = 64 << 10;

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
    let body = read_bounded(response, MAX_ERROR_BODY_READ).await;
    status_failure(call.provider, call.model, status, hints, &body)
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
    let error = classify(provider, model, status, kind.as_deref(), message, hints.retry_after);
    let retryable = is_retried_status(status) && !hints.refused;
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

/// The API's error type and message from an error body: `{"error": {"type", "message"}}`
/// (Anthropic, OpenAI), `{"error": "..."}` (Ollama), `{"message": "..."}` (vLLM) or
/// `{"detail": "..."}`; otherwise the body text, shortened, or the status reason.
pub(super) fn api_error_message(status: u16, body: &[u8]) -> (Option<String>, String) {
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        let error = value.get("error");
        let kind = error.and_then(|e| e.get("type")).and_then(Value::as_str).map(str::to_owned);
        let message = error
            .and_then(|e| e.get("message"))
            .or(error.filter(|e| e.is_string()))
            .or_else(|| value.get("message"))
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
