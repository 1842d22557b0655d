//! Azure OpenAI for the suite: the Chat Completions and Responses models `Azure`
//! builds, at Azure's v1 paths (`/openai/v1/chat/completions`,
//! `/openai/v1/responses`) with the key in its `api-key` header (and no
//! `authorization`). Requests are then checked and answered by the same strict
//! imitations as OpenAI's ([`openai`](super::openai), [`responses_api`](super::responses_api)); the key,
//! rate-limit and server errors are written in Azure's own shape,
//! `{"error": {"code": "<status>", "message"}}`.

use crate::testing::{API_KEY, Failure, Imitation, Reply, Request, Seen, Turn};
use serde_json::json;

use super::openai::ChatCompletions;
use super::openai_responses::Responses;

/// Checks Azure's path and `api-key` header.
fn check_azure(request: &Request, path: &str) -> Result<(), String> {
    if request.method != "POST" || request.path != path {
        return Err(format!("404 Resource not found ({} {})", request.method, request.path));
    }
    if request.header("api-key") != Some(API_KEY) {
        return Err("401 Access denied due to invalid subscription key or wrong API endpoint (api-key)".into());
    }
    if request.header("authorization").is_some() {
        return Err("400 only one of `api-key` and `authorization` may be sent".into());
    }
    Ok(())
}

/// Azure's answer to the failures it writes in its own shape; others as OpenAI's.
fn azure_failure(turn: &Turn) -> Option<Reply> {
    let Turn::Fail(failure) = turn else { return None };
    let error = |status: u16| {
        Reply::json(status, json!({"error": {"code": status.to_string(), "message": failure.message()}}))
            .header("apim-request-id", "conformance-apim-1")
    };
    match failure {
        Failure::Authentication => Some(error(401)),
        Failure::RateLimited { retry_after } => {
            Some(error(429).header("retry-after", &retry_after.as_secs().to_string()))
        }
        Failure::Server => Some(error(500)),
        _ => None,
    }
}

/// Chat Completions at Azure's v1 path.
pub struct AzureChat;

impl Imitation for AzureChat {
    fn read(&self, request: &Request) -> Result<Seen, String> {
        check_azure(request, "/openai/v1/chat/completions")?;
        // The rest as OpenAI's API checks it, at its path and with its header.
        let mut openai = request.clone();
        openai.path = "/v1/chat/completions".into();
        openai.headers.retain(|(name, _)| !name.eq_ignore_ascii_case("api-key"));
        openai.headers.push(("authorization".into(), format!("Bearer {API_KEY}")));
        ChatCompletions.read(&openai)
    }

    fn reply(&self, turn: &Turn, seen: &Seen) -> Reply {
        azure_failure(turn).unwrap_or_else(|| ChatCompletions.reply(turn, seen))
    }
}

/// Responses at Azure's v1 path.
pub struct AzureResponses(pub Responses);

impl Imitation for AzureResponses {
    fn read(&self, request: &Request) -> Result<Seen, String> {
        self.0.read(request)
    }

    fn reply(&self, turn: &Turn, seen: &Seen) -> Reply {
        azure_failure(turn).unwrap_or_else(|| self.0.reply(turn, seen))
    }
}
