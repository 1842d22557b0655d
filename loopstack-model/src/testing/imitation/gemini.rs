//! The Gemini API (`POST /v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent?alt=sse`) for the suite: requests are checked by the
//! strict imitation of [`gemini_api`](super::gemini_api) (the `x-goog-api-key` header,
//! the fields of `GenerateContentRequest`, `Content` and `Part`, the OpenAPI schema
//! subset of tools, the thought signatures it issued coming back, one function
//! response per call), then read into what the suite compares; turns are written as
//! a `GenerateContentResponse` or its SSE chunks, errors as
//! `{"error": {"code", "message", "status"}}`.
//!
//! A thought signature is bytes, base64 in JSON: the imitation writes the suite's
//! token base64-encoded on the thought part and decodes what comes back.

use std::sync::Mutex;

use crate::testing::{API_KEY, Answer, Failure, Imitation, Part, Reply, Request, Seen, SeenMessage, Turn};
use crate::{Role, StopReason};
use base64::Engine as _;
use serde_json::{Value, json};

use super::gemini_api::{Api, SKIP, error, sse};

/// The Gemini API (or Vertex AI, [`GeminiApi::vertex`]) for the suite; it remembers the signatures it issued, as the API
/// verifies its own.
#[derive(Default)]
pub struct GeminiApi {
    issued: Mutex<Vec<String>>,
    /// `Some((project, location))`: Vertex AI's paths and bearer token instead.
    vertex: Option<(String, String)>,
}

impl GeminiApi {
    /// Vertex AI's `generateContent` for this project and location
    /// (`/v1/projects/{project}/locations/{location}/publishers/google/models/...`),
    /// with [`API_KEY`] as the OAuth access token (`Authorization: Bearer`).
    pub fn vertex(project: &str, location: &str) -> Self {
        Self { issued: Mutex::default(), vertex: Some((project.into(), location.into())) }
    }
}

fn encode(token: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(token)
}

fn decode(signature: &str, at: &str) -> Result<String, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(signature)
        .map_err(|e| format!("{at}.thoughtSignature: not base64 ({e})"))?;
    String::from_utf8(bytes).map_err(|_| format!("{at}.thoughtSignature: not a signature the imitation issued"))
}

fn read_parts(parts: &[Value], at: &str) -> Result<Vec<Part>, String> {
    let mut out = Vec::new();
    for (j, part) in parts.iter().enumerate() {
        let at = format!("{at}.parts[{j}]");
        // A signature belongs to its part: the reasoning comes before what it signs.
        if let Some(signature) = part.get("thoughtSignature").and_then(Value::as_str)
            && signature != SKIP
        {
            out.push(Part::Reasoning { token: decode(signature, &at)? });
        }
        if part.get("thought") == Some(&Value::Bool(true)) {
            continue;
        }
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            if !text.is_empty() || part.get("thoughtSignature").is_none() {
                out.push(Part::Text(text.into()));
            }
        } else if let Some(inline) = part.get("inlineData") {
            let media_type = inline["mimeType"].as_str().unwrap_or_default().into();
            out.push(Part::Image { media_type, data: inline["data"].as_str().unwrap_or_default().into() });
        } else if let Some(file) = part.get("fileData") {
            out.push(Part::ImageUrl(file["fileUri"].as_str().unwrap_or_default().into()));
        } else if let Some(call) = part.get("functionCall") {
            let id = call.get("id").and_then(Value::as_str).map(str::to_owned);
            let name = call["name"].as_str().unwrap_or_default().into();
            out.push(Part::ToolCall { id, name, input: call.get("args").cloned().unwrap_or_else(|| json!({})) });
        } else if let Some(response) = part.get("functionResponse") {
            let id = response.get("id").and_then(Value::as_str).map(str::to_owned);
            let body = &response["response"];
            let (value, is_error) = match (body.get("result"), body.get("error")) {
                (Some(result), None) => (result, false),
                (None, Some(error)) => (error, true),
                _ => return Err(format!("{at}.functionResponse.response: the imitation expects `result` or `error`")),
            };
            let content = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
            out.push(Part::ToolResult { id, content, is_error: Some(is_error) });
        } else {
            return Err(format!("{at}: a part the imitation does not read: {part}"));
        }
    }
    Ok(out)
}

impl Imitation for GeminiApi {
    fn read(&self, request: &Request) -> Result<Seen, String> {
        let issued = self.issued.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let api = match &self.vertex {
            Some((project, location)) => Api::vertex(project, location, API_KEY),
            None => Api::gemini(API_KEY),
        };
        let read = api.issued(issued).check(request).map_err(|refusal| refusal.message())?;
        let body = &read.body;
        let mut seen = Seen::default();
        seen.model = read.model;
        seen.stream = read.stream;
        if let Some(system) = body.get("systemInstruction") {
            let parts = system["parts"].as_array().into_iter().flatten();
            seen.system = Some(parts.filter_map(|p| p["text"].as_str()).collect());
        }
        let config = &body["generationConfig"];
        seen.max_tokens = config.get("maxOutputTokens").and_then(Value::as_u64);
        let thinking = &config["thinkingConfig"];
        seen.thinking = thinking.get("thinkingLevel").is_some()
            || thinking.get("thinkingBudget").and_then(Value::as_i64).is_some_and(|b| b != 0);
        seen.response_schema = config.get("responseJsonSchema").or_else(|| config.get("responseSchema")).cloned();
        for tool in body.get("tools").and_then(Value::as_array).into_iter().flatten() {
            for declaration in tool.get("functionDeclarations").and_then(Value::as_array).into_iter().flatten() {
                seen.tools.push(declaration["name"].as_str().unwrap_or_default().into());
            }
        }
        for (i, content) in body["contents"].as_array().into_iter().flatten().enumerate() {
            let role = if content["role"] == "model" { Role::Assistant } else { Role::User };
            let parts = read_parts(content["parts"].as_array().map_or(&[], Vec::as_slice), &format!("contents[{i}]"))?;
            seen.messages.push(SeenMessage::new(role, parts));
        }
        Ok(seen)
    }

    fn reply(&self, turn: &Turn, seen: &Seen) -> Reply {
        match turn {
            Turn::Answer(answer) if seen.stream => Reply::sse(sse(&self.response(answer))).pieces(&[17, 2, 90]),
            Turn::Answer(answer) => Reply::json(200, self.response(answer)),
            Turn::Hang(answer) => Reply::sse(first_chunk(&sse(&self.response(answer)))).then_hang(),
            Turn::Fail(failure) => self.fail(failure, seen),
        }
    }
}

impl GeminiApi {
    /// The `GenerateContentResponse` of an answer: its reasoning as a thought part
    /// carrying the signature (recorded as issued), its text, its function calls.
    fn response(&self, answer: &Answer) -> Value {
        let mut parts = Vec::new();
        if let Some(thought) = &answer.reasoning {
            let signature = encode(&thought.token);
            self.issued.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(signature.clone());
            parts.push(json!({"text": thought.text, "thought": true, "thoughtSignature": signature}));
        }
        if !answer.text.is_empty() {
            parts.push(json!({"text": answer.text}));
        }
        for call in &answer.calls {
            parts.push(json!({"functionCall": {"id": call.id, "name": call.name, "args": call.input}}));
        }
        let finish = if answer.stop == StopReason::MaxTokens { "MAX_TOKENS" } else { "STOP" };
        let u = &answer.usage;
        // Gemini counts cached tokens within the prompt and thoughts apart from the candidates.
        let prompt = u.input_tokens + u.cache_read_input_tokens;
        let candidates = u.output_tokens - u.reasoning_output_tokens;
        let mut usage = json!({"promptTokenCount": prompt, "candidatesTokenCount": candidates,
                               "totalTokenCount": prompt + u.output_tokens});
        if u.cache_read_input_tokens > 0 {
            usage["cachedContentTokenCount"] = u.cache_read_input_tokens.into();
        }
        if u.reasoning_output_tokens > 0 {
            usage["thoughtsTokenCount"] = u.reasoning_output_tokens.into();
        }
        json!({
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
            "usageMetadata": usage, "modelVersion": answer.model, "responseId": answer.id,
        })
    }

    fn fail(&self, failure: &Failure, seen: &Seen) -> Reply {
        let message = failure.message();
        match failure {
            // Google's status for credentials it refuses (the Gemini API answers a key it
            // does not know with a 400 `API_KEY_INVALID`, tested in tests/gemini.rs).
            Failure::Authentication => error(401, "UNAUTHENTICATED", message),
            Failure::InvalidRequest => error(400, "INVALID_ARGUMENT", message),
            Failure::RateLimited { retry_after } => Reply::json(
                429,
                json!({"error": {"code": 429, "message": message, "status": "RESOURCE_EXHAUSTED",
                       "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                    "retryDelay": format!("{}s", retry_after.as_secs())}]}}),
            ),
            Failure::Overloaded => error(503, "UNAVAILABLE", message),
            Failure::Server => error(500, "INTERNAL", message),
            // An answer whose candidate's parts are not a list; a chunk that is not JSON.
            Failure::Malformed if seen.stream => Reply::sse("data: {\"candidates\": [{\"cont\r\n\r\n"),
            Failure::Malformed => Reply::json(
                200,
                json!({"candidates": [{"content": {"role": "model", "parts": "text"}, "finishReason": "STOP"}]}),
            ),
            Failure::Truncated(answer) if seen.stream => {
                Reply::sse(first_chunk(&sse(&self.response(answer)))).truncated()
            }
            Failure::Truncated(answer) => Reply::json(200, self.response(answer)).truncated(),
        }
    }
}

/// The first chunk of a stream (a piece of text when the answer starts with text).
fn first_chunk(sse: &str) -> String {
    let end = sse.find("\r\n\r\n").expect("a stream has a chunk") + 4;
    sse[..end].to_owned()
}
