//! The Google Gemini provider: the Gemini API (with an API key) and Vertex AI (with an
//! OAuth access token), `generateContent` and `streamGenerateContent`.
//!
//! ```no_run
//! use loopstack_model::{ChatModel, ChatRequest, Gemini, Message, ReasoningEffort};
//!
//! # async fn run() -> Result<(), loopstack_model::LlmError> {
//! // GEMINI_API_KEY (or GOOGLE_API_KEY), optional GEMINI_BASE_URL.
//! let gemini = Gemini::from_env()?;
//! let request = ChatRequest::new("gemini-3-flash-preview", vec![Message::user("Hello!")])
//!     .system("Be brief.")
//!     .reasoning_effort(ReasoningEffort::Low);
//! let response = gemini.chat(&request).await?;
//! println!("{}", response.message.text());
//!
//! // Vertex AI: GOOGLE_CLOUD_ACCESS_TOKEN (`gcloud auth print-access-token`),
//! // GOOGLE_CLOUD_PROJECT, optional GOOGLE_CLOUD_LOCATION (default `global`).
//! let vertex = Gemini::vertex_from_env()?;
//! let response = vertex.chat(&request).await?;
//! # let _ = response;
//! # Ok(()) }
//! ```
//!
//! # How a conversation maps to Gemini's
//!
//! - The system prompt is the `systemInstruction`; user messages are `user` contents and
//!   the assistant's `model` contents, each block a part: text as `text`, images as
//!   `inlineData` (base64) or `fileData` (a URL), tool calls as `functionCall` (with the
//!   call's id) and tool results as `functionResponse` with the name of the call they
//!   answer (looked up in the conversation) and `response: {"result": ..}`, or
//!   `{"error": ..}` for an error result; a result that is JSON text is sent as JSON.
//!   A tool's images follow the function responses as `inlineData` parts.
//! - Tools are `functionDeclarations` whose `parameters` are Gemini's OpenAPI subset:
//!   each tool's JSON Schema is converted (see [`Gemini`]), and one that cannot be
//!   fails the request with [`LlmError::InvalidRequest`] before anything is sent.
//! - A [`ChatRequest::response_schema`] is sent as `responseMimeType:
//!   application/json` with the schema as `responseJsonSchema`, which takes JSON
//!   Schema as it is ([`ChatModel::structured_output`] is `true`).
//! - [`ModelSettings::reasoning_effort`](crate::ModelSettings::reasoning_effort) is
//!   `thinkingConfig.thinkingLevel` (`MINIMAL` .. `HIGH`; `none` is `MINIMAL`, as
//!   Gemini 3 cannot stop thinking) on Gemini 3 and later, and a `thinkingBudget` on
//!   Gemini 2.x models, which take no level (`none` is a budget of 0); a
//!   [`reasoning_budget`](crate::ModelSettings::reasoning_budget) is
//!   `thinkingBudget`. Thought summaries are asked for (`includeThoughts: true`,
//!   unless [`Gemini::include_thoughts`] turns it off or thinking is turned off) and
//!   come back as [`Reasoning`](crate::Reasoning) blocks with their text, streamed as
//!   [`StreamEvent::ReasoningDelta`]s.
//! - Provider options set for `gemini` (or `vertex`) are merged into the top level of
//!   the body (`safetySettings`, `toolConfig`, `cachedContent`, `labels`); the keys of
//!   a `generationConfig` among them are merged into the one written (`topP`, `seed`,
//!   `candidateCount` ..).
//!
//! # Thought signatures
//!
//! Gemini 3 returns a `thoughtSignature` on parts of its answer (on the first
//! function call of each step, sometimes on text), which must come back unchanged on
//! the same part, or the next turn of a tool loop is refused with a 400. Each is a
//! [`Reasoning`](crate::Reasoning) block of provider `gemini` (`vertex` for Vertex AI)
//! with `data: {"thought_signature": ".."}` and no text, placed immediately before the
//! block of the part it came on; a thought summary (a `thought: true` part) is a
//! `Reasoning` with its text and, when it had one, its signature in the same `data`.
//! When the conversation is sent back, each signature goes on the part of the block
//! after it. So a conversation saved with the run's documents and resumed elsewhere
//! sends Gemini exactly what it expects.
//!
//! In a stream, a signature that arrives after the text it belongs to has begun (as
//! Gemini streams it: on the text's last piece, or in an empty part after it) is put
//! before that text in the [`StreamEvent::Done`] response too, which therefore equals
//! what [`ChatModel::chat`] returns; the deltas of that text and of the blocks after it
//! were already sent with an index one lower than the block's in that response.
//!
//! The reasoning of other providers is left out. A model turn whose first function
//! call has no signature (written by another provider before a fallback, or by hand) is
//! sent with the signature Google documents for such history,
//! [`SKIP_THOUGHT_SIGNATURE`](Gemini::SKIP_THOUGHT_SIGNATURE), which skips the check.
//!
//! # Finish reasons
//!
//! `STOP` is [`StopReason::EndTurn`](crate::StopReason::EndTurn), or
//! [`ToolUse`](crate::StopReason::ToolUse) when the answer calls tools; `MAX_TOKENS`
//! is [`MaxTokens`](crate::StopReason::MaxTokens); the others (`SAFETY`,
//! `RECITATION`, `BLOCKLIST`, `PROHIBITED_CONTENT` ..) are
//! [`StopReason::Other`](crate::StopReason::Other) with the reason in lower case
//! (`safety`, `recitation`), with whatever content came before the filter stopped it. A
//! prompt blocked before any answer (`promptFeedback.blockReason`) is an empty answer
//! that stopped for `prompt_blocked_<reason>` (`prompt_blocked_safety`).
//!
//! `MALFORMED_FUNCTION_CALL` (the model wrote a call Gemini could not parse, and
//! returned no part for it) is a reply with one tool call whose
//! [`invalid_input`](crate::ToolUse::invalid_input) holds what Gemini said of it (its
//! `finishMessage`, which quotes the call), stopping for
//! [`ToolUse`](crate::StopReason::ToolUse); the call's name is read from that message
//! when it names one (`default_api.<name>(`). The agent loop answers such a call with
//! an error result the model reads, and the model writes the call again: a mistake the
//! model can correct is not a failed run. A typed error instead would end the run (it
//! is not retryable, and the same request sent again fails the same way more often
//! than not).
//!
//! # Errors
//!
//! Error bodies are Google's `{"error": {"code", "message", "status"}}`: 400
//! (`INVALID_ARGUMENT`, `FAILED_PRECONDITION`) and 404 are
//! [`LlmError::InvalidRequest`], except a 400 saying the API key is not valid, which is
//! [`LlmError::Authentication`] as 401 and 403 are; 429 (`RESOURCE_EXHAUSTED`) is
//! [`LlmError::RateLimited`], retried after the `retryDelay` of the body's
//! `google.rpc.RetryInfo` when it gives one (within the retry policy's
//! `max_retry_after`); 500, 503 (`UNAVAILABLE`) and 504 are [`LlmError::Server`],
//! retried. An `error` object in a 200 body or as an event of a stream is the error of
//! its `code`. A stream that ends before a finish reason is a
//! [`LlmError::MalformedResponse`].

// Split by concern: `request` encodes a `ChatRequest`, `schema` converts tool schemas
// to Gemini's OpenAPI subset, `reply` decodes parts (for both paths) and a response
// body, and `stream` a streamed response.

mod reply;
mod request;
mod schema;
mod stream;

use std::fmt;
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use reqwest::Url;

use crate::error::LlmError;
use crate::http::{self, ApiKey, Auth, Call, Client, http_settings};
use crate::model::{ChatModel, ChatRequest, ChatResponse, StreamEvent};

const GEMINI: &str = "gemini";
const VERTEX: &str = "vertex";

/// The `data` key of a [`Reasoning`](crate::Reasoning) block that holds a thought signature.
pub const THOUGHT_SIGNATURE: &str = "thought_signature";

/// The most schemas a tool's parameters may have once their `$ref`s are inlined:
/// 10,000. A schema whose definitions refer to each other many times over would
/// otherwise grow without bound when inlined.
pub const MAX_SCHEMA_NODES: usize = 10_000;

/// Google Gemini: the Gemini API (`POST
/// {base}/v1beta/models/{model}:generateContent`, the key as `x-goog-api-key`) or
/// Vertex AI (`POST {base}/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:generateContent`,
/// an OAuth access token as `Authorization: Bearer`); streams with
/// `:streamGenerateContent?alt=sse`. See the [module's docs](self) for how a
/// conversation maps to Gemini's.
///
/// The model of each call is [`ChatRequest::model`] (`gemini-2.5-flash`, or with its
/// prefix `models/gemini-2.5-flash`; on Vertex AI also a full
/// `publishers/{publisher}/models/{model}` or `endpoints/{id}`). One HTTP client is built
/// with the model and reused by every call (clones share it).
///
/// | setting | default | setter |
/// |---|---|---|
/// | API key (Gemini API) | `GEMINI_API_KEY`, else `GOOGLE_API_KEY`, in [`Gemini::from_env`] | [`Gemini::api_key`] |
/// | access token (Vertex AI) | `GOOGLE_CLOUD_ACCESS_TOKEN` in [`Gemini::vertex_from_env`] | [`Gemini::access_token`] |
/// | base URL | `GEMINI_BASE_URL`, else `https://generativelanguage.googleapis.com`; Vertex AI: `GOOGLE_VERTEX_BASE_URL`, else `https://{location}-aiplatform.googleapis.com` (`https://aiplatform.googleapis.com` for `global`) | [`Gemini::base_url`] |
/// | request timeout | 10 minutes | [`Gemini::timeout`] |
/// | retries | [`RetryPolicy::default`](crate::RetryPolicy::default): 3, backoff 0.5 s doubling up to 8 s | [`Gemini::retry_policy`] |
/// | thought summaries (`includeThoughts`) | on | [`Gemini::include_thoughts`] |
///
/// A base URL may end in its API version (`/v1beta`, `/v1`, `/v1alpha`; Vertex AI
/// `/v1`, `/v1beta1`), which is then used instead of the default one.
///
/// A Vertex AI access token lasts about an hour (`gcloud auth print-access-token`
/// prints one for your account, `gcloud auth application-default print-access-token`
/// for the application default credentials); a long-running process builds its model
/// again, or sets a new token with [`Gemini::access_token`], before it expires. An
/// expired token is an [`LlmError::Authentication`].
///
/// Tool schemas are converted to Gemini's OpenAPI subset: local `$ref`s
/// (`#/$defs/..`, `#/definitions/..`) are inlined, `oneOf` becomes `anyOf`, `allOf` is
/// merged, a `null` type or `anyOf` member becomes `nullable`, `const` a one-value
/// `enum`, types are written in upper case (`STRING`, `OBJECT`); keywords Gemini does
/// not take (`additionalProperties`, `$schema`, `$defs`, `exclusiveMinimum`,
/// `uniqueItems`, formats other than Gemini's ..) are left out, which only loosens the
/// schema (the tool still checks its arguments); enum values that are not strings are
/// said in the description. A tool without parameters is declared without
/// `parameters`. What cannot be expressed fails the request with
/// [`LlmError::InvalidRequest`] (status 400, as the API would answer) naming the tool
/// and the place in its schema: a recursive `$ref`, a `$ref` that is not local or
/// points at nothing, a value of any type (`{}`, `true`), an object without properties
/// (a map) below the top level, a schema that inlines to more than
/// [`MAX_SCHEMA_NODES`] nodes.
///
/// The timeout is a deadline for each whole attempt; an error body is read up to its
/// bound, and a stream's lines and events are bounded as for every provider (see
/// [`sse`](crate::sse)). Function call arguments nested deeper than
/// [`MAX_JSON_DEPTH`](crate::message::MAX_JSON_DEPTH) are not parsed: they are kept as
/// [`ToolUse::invalid_input`](crate::ToolUse::invalid_input) and answered with an error
/// result. A call without an id (Gemini gives none to most) gets `call_<n>`, numbered
/// after the calls already in the conversation and never repeating an id of it.
///
/// Parts the crate has no block for (`executableCode`, `codeExecutionResult`, an image
/// the model made) come back as [`ContentBlock::Provider`](crate::ContentBlock::Provider)
/// blocks of this provider and are sent back to it unchanged.
///
/// The API key and the access token never appear in `Debug` output, logs or errors.
#[derive(Clone)]
#[must_use = "a model does nothing until it is called"]
pub struct Gemini {
    http: Client,
    vertex: Option<Vertex>,
    include_thoughts: bool,
}

/// Where a Vertex AI model is.
#[derive(Debug, Clone)]
struct Vertex {
    project: String,
    location: String,
}

impl fmt::Debug for Gemini {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Gemini");
        d.field("provider", &self.provider_name());
        self.http.debug_fields(&mut d);
        if let Some(vertex) = &self.vertex {
            d.field("project", &vertex.project).field("location", &vertex.location);
        }
        d.field("include_thoughts", &self.include_thoughts).finish()
    }
}

impl Gemini {
    /// The Gemini API's address when none is set.
    pub const DEFAULT_BASE_URL: &'static str = "https://generativelanguage.googleapis.com";
    /// The Vertex AI location of [`Gemini::vertex_from_env`] when
    /// `GOOGLE_CLOUD_LOCATION` is not set.
    pub const DEFAULT_VERTEX_LOCATION: &'static str = "global";
    /// The request timeout when none is set: 10 minutes.
    pub const DEFAULT_TIMEOUT: Duration = http::DEFAULT_TIMEOUT;
    /// The thought signature sent on a model turn's first function call when it has
    /// none (history from another provider, or written by hand), which Google
    /// documents as skipping the signature check for such history.
    pub const SKIP_THOUGHT_SIGNATURE: &'static str = "skip_thought_signature_validator";

    /// A model calling the Gemini API with this key, at [`Gemini::DEFAULT_BASE_URL`].
    pub fn new(api_key: impl Into<String>) -> Self {
        let mut http =
            Client::new(GEMINI, Self::DEFAULT_BASE_URL, "/v1beta", Auth { header: "x-goog-api-key", prefix: "" });
        http.api_key = Some(ApiKey::new(api_key));
        Self { http, vertex: None, include_thoughts: true }
    }

    /// A model calling the Gemini API, configured from the environment:
    /// `GEMINI_API_KEY` (or, when it is not set, `GOOGLE_API_KEY`; one is required) and
    /// `GEMINI_BASE_URL` (optional).
    ///
    /// # Errors
    /// [`LlmError::Config`] when neither key is set, or the base URL is invalid.
    pub fn from_env() -> Result<Self, LlmError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        let variable = ["GEMINI_API_KEY", "GOOGLE_API_KEY"]
            .into_iter()
            .find(|name| http::non_empty(lookup, name).is_some())
            .ok_or_else(|| LlmError::Config {
                provider: GEMINI,
                message: "neither GEMINI_API_KEY nor GOOGLE_API_KEY is set".into(),
            })?;
        let mut model = Self::new(String::new());
        model.http.configure_from(lookup, variable, "GEMINI_BASE_URL")?;
        Ok(model)
    }

    /// A model calling Vertex AI in this Google Cloud project and location (such as
    /// `us-central1`, or `global`), with this OAuth access token (`gcloud auth
    /// print-access-token` prints one); its [`ChatModel::provider`] is `vertex`.
    pub fn vertex(project: impl Into<String>, location: impl Into<String>, access_token: impl Into<String>) -> Self {
        let location = location.into();
        let base = match location.trim() {
            "global" => "https://aiplatform.googleapis.com".to_owned(),
            other => format!("https://{other}-aiplatform.googleapis.com"),
        };
        let mut http = Client::new(VERTEX, &base, "/v1", Auth { header: "authorization", prefix: "Bearer " });
        http.api_key = Some(ApiKey::new(access_token));
        let vertex = Vertex { project: project.into().trim().to_owned(), location: location.trim().to_owned() };
        Self { http, vertex: Some(vertex), include_thoughts: true }
    }

    /// A model calling Vertex AI, configured from the environment:
    /// `GOOGLE_CLOUD_ACCESS_TOKEN` (required; `export
    /// GOOGLE_CLOUD_ACCESS_TOKEN=$(gcloud auth print-access-token)`),
    /// `GOOGLE_CLOUD_PROJECT` (required), `GOOGLE_CLOUD_LOCATION` (optional,
    /// [`Gemini::DEFAULT_VERTEX_LOCATION`] when not set) and `GOOGLE_VERTEX_BASE_URL`
    /// (optional).
    ///
    /// # Errors
    /// [`LlmError::Config`] when the token or the project is not set, or the base URL is
    /// invalid.
    pub fn vertex_from_env() -> Result<Self, LlmError> {
        Self::vertex_from_lookup(&|name| std::env::var(name).ok())
    }

    fn vertex_from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, LlmError> {
        let need = |name: &str, how: &str| {
            http::non_empty(lookup, name)
                .ok_or_else(|| LlmError::Config { provider: VERTEX, message: format!("{name} is not set{how}") })
        };
        let token = need("GOOGLE_CLOUD_ACCESS_TOKEN", " (`gcloud auth print-access-token` prints one)")?;
        let project = need("GOOGLE_CLOUD_PROJECT", "")?;
        let location = http::non_empty(lookup, "GOOGLE_CLOUD_LOCATION")
            .unwrap_or_else(|| Self::DEFAULT_VERTEX_LOCATION.to_owned());
        let mut model = Self::vertex(project, location, token);
        model.http.configure_from(lookup, "GOOGLE_CLOUD_ACCESS_TOKEN", "GOOGLE_VERTEX_BASE_URL")?;
        Ok(model)
    }

    /// Sets the Gemini API key, sent as `x-goog-api-key` (on a Vertex AI model, the
    /// access token: see [`Gemini::access_token`]).
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.http.api_key = Some(ApiKey::new(api_key));
        self
    }

    /// Sets the Vertex AI access token, sent as `Authorization: Bearer <token>` (on a
    /// Gemini API model, the API key: see [`Gemini::api_key`]).
    pub fn access_token(self, token: impl Into<String>) -> Self {
        self.api_key(token)
    }

    http_settings!();

    /// Whether thought summaries are asked for (`thinkingConfig.includeThoughts`; on by
    /// default). They come back as [`Reasoning`](crate::Reasoning) blocks with text;
    /// thought signatures come back either way.
    pub fn include_thoughts(mut self, enabled: bool) -> Self {
        self.include_thoughts = enabled;
        self
    }

    fn provider_name(&self) -> &'static str {
        if self.vertex.is_some() { VERTEX } else { GEMINI }
    }

    /// The URL of a call of `model`.
    fn url(&self, model: &str, stream: bool) -> Result<Url, LlmError> {
        let provider = self.provider_name();
        let config = |message: String| LlmError::Config { provider, message };
        let base = self.http.base_url.trim().trim_end_matches('/');
        let (versions, default_version): (&[&str], &str) = match self.vertex {
            None => (&["/v1beta", "/v1", "/v1alpha"], "/v1beta"),
            Some(_) => (&["/v1", "/v1beta1"], "/v1"),
        };
        let version = if versions.iter().any(|v| base.ends_with(v)) { "" } else { default_version };
        let resource = resource_name(model, self.vertex.is_some()).map_err(config)?;
        let location = match &self.vertex {
            None => String::new(),
            Some(Vertex { project, location }) => {
                for (what, value) in [("project", project), ("location", location)] {
                    if !is_segment(value) {
                        return Err(config(format!("invalid Vertex AI {what} `{value}`")));
                    }
                }
                format!("/projects/{project}/locations/{location}")
            }
        };
        let method = if stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
        let url = Url::parse(&format!("{base}{version}{location}/{resource}:{method}"))
            .map_err(|e| config(format!("invalid base URL `{}`: {e}", self.http.base_url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(config(format!("invalid base URL `{}`: the scheme must be http or https", self.http.base_url)));
        }
        Ok(url)
    }

    fn call<'a>(&self, request: &'a ChatRequest, stream: bool) -> Result<Call<'a>, LlmError> {
        let provider = self.provider_name();
        let wire = request::Wire { provider, include_thoughts: self.include_thoughts };
        let body = request::encode_request(request, wire)?;
        let url = self.url(&request.model, stream)?;
        // The client's call brings the key, the content type and what is accepted;
        // the URL is the model's.
        let mut call = self.http.call(&request.model, &body, stream)?;
        call.url = url;
        Ok(call)
    }
}

/// The resource name of `model` under the API version (and, on Vertex AI, the
/// project's location): `models/{model}` or `publishers/google/models/{model}`, or the
/// full name given. Each segment is checked, so no model name changes the URL's path
/// or query.
fn resource_name(model: &str, vertex: bool) -> Result<String, String> {
    let model = model.trim();
    let bad = || format!("invalid model name `{model}`");
    let segments: Vec<&str> = model.split('/').collect();
    if !segments.iter().all(|s| is_segment(s)) {
        return Err(bad());
    }
    match (vertex, segments.as_slice()) {
        (false, [name]) => Ok(format!("models/{name}")),
        (false, ["models" | "tunedModels", _]) => Ok(model.to_owned()),
        (true, [name]) => Ok(format!("publishers/google/models/{name}")),
        (true, ["models", name]) => Ok(format!("publishers/google/models/{name}")),
        (true, ["publishers", _, "models", _] | ["endpoints", _]) => Ok(model.to_owned()),
        _ => Err(bad()),
    }
}

/// Whether `s` may be one segment of a URL path as it is: letters, digits, `-`, `_`,
/// `.` and `@` (a model version), not `.` or `..` alone.
fn is_segment(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'))
}

/// A 400 saying the API key is not valid is an authentication error, as a 401 is.
fn refine(error: LlmError) -> LlmError {
    match error {
        LlmError::InvalidRequest { provider, model, status: 400, message }
            if message.contains("API key not valid") || message.contains("API_KEY_INVALID") =>
        {
            LlmError::Authentication { provider, model, status: 400, message }
        }
        other => other,
    }
}

#[async_trait::async_trait]
impl ChatModel for Gemini {
    /// `gemini`, or `vertex` for a model built with [`Gemini::vertex`].
    fn provider(&self) -> &'static str {
        self.provider_name()
    }

    /// `true`: a [`ChatRequest::response_schema`] is sent as `responseJsonSchema`.
    fn structured_output(&self) -> bool {
        true
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let provider = self.provider_name();
        self.http
            .chat(request, self.call(request, false), |body| {
                reply::decode_response(body, provider, &request.model, &request.messages)
            })
            .await
            .map_err(refine)
    }

    fn stream<'a>(&'a self, request: &'a ChatRequest) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
        let decoder = stream::Decoder::new(self.provider_name(), &request.model, &request.messages);
        self.http.stream(request, self.call(request, true), decoder).map(|item| item.map_err(refine)).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn env_configuration() {
        let err = Gemini::from_lookup(&lookup(&[("GEMINI_API_KEY", " ")])).unwrap_err();
        assert!(
            matches!(err, LlmError::Config { provider: "gemini", ref message } if message.contains("GEMINI_API_KEY") && message.contains("GOOGLE_API_KEY"))
        );
        let model = Gemini::from_lookup(&lookup(&[("GOOGLE_API_KEY", "g-key")])).unwrap();
        assert_eq!(model.http.api_key, Some(ApiKey::new("g-key")));
        let model = Gemini::from_lookup(&lookup(&[
            ("GEMINI_API_KEY", "gem-secret"),
            ("GOOGLE_API_KEY", "g-key"),
            ("GEMINI_BASE_URL", "http://proxy:8080"),
        ]))
        .unwrap();
        assert_eq!(model.http.api_key, Some(ApiKey::new("gem-secret")));
        assert_eq!(
            model.url("gemini-2.5-flash", false).unwrap().as_str(),
            "http://proxy:8080/v1beta/models/gemini-2.5-flash:generateContent"
        );
        assert!(!format!("{model:?}").contains("secret"));
        let err = Gemini::from_lookup(&lookup(&[("GEMINI_API_KEY", "k"), ("GEMINI_BASE_URL", "::bad")])).unwrap_err();
        assert!(matches!(err, LlmError::Config { .. }));

        let err = Gemini::vertex_from_lookup(&lookup(&[("GOOGLE_CLOUD_PROJECT", "p")])).unwrap_err();
        assert!(
            matches!(err, LlmError::Config { provider: "vertex", ref message } if message.contains("gcloud auth print-access-token"))
        );
        let err = Gemini::vertex_from_lookup(&lookup(&[("GOOGLE_CLOUD_ACCESS_TOKEN", "t")])).unwrap_err();
        assert!(matches!(err, LlmError::Config { ref message, .. } if message.contains("GOOGLE_CLOUD_PROJECT")));
        let model = Gemini::vertex_from_lookup(&lookup(&[
            ("GOOGLE_CLOUD_ACCESS_TOKEN", "ya29.secret"),
            ("GOOGLE_CLOUD_PROJECT", "proj-1"),
        ]))
        .unwrap();
        assert_eq!(model.provider(), "vertex");
        assert_eq!(
            model.url("gemini-2.5-pro", true).unwrap().as_str(),
            "https://aiplatform.googleapis.com/v1/projects/proj-1/locations/global/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        );
        assert!(!format!("{model:?}").contains("secret"));
        let model = Gemini::vertex("proj-1", "us-central1", "t");
        assert_eq!(
            model.url("models/gemini-2.5-pro", false).unwrap().as_str(),
            "https://us-central1-aiplatform.googleapis.com/v1/projects/proj-1/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent"
        );
    }

    #[test]
    fn model_names_cannot_change_the_path() {
        let gemini = Gemini::new("k").base_url("http://h/v1alpha/");
        assert_eq!(gemini.url("models/m", false).unwrap().as_str(), "http://h/v1alpha/models/m:generateContent");
        assert_eq!(
            gemini.url("tunedModels/t-1", false).unwrap().as_str(),
            "http://h/v1alpha/tunedModels/t-1:generateContent"
        );
        for bad in ["", "../x", "a/b", "m?x=1", "m#f", "m:other", "models/../x", "a b", "publishers/google/models/m"] {
            assert!(matches!(gemini.url(bad, false), Err(LlmError::Config { provider: "gemini", .. })), "{bad}");
        }
        let vertex = Gemini::vertex("p", "europe-west4", "t").base_url("http://h");
        assert_eq!(
            vertex.url("publishers/anthropic/models/claude-x@20250101", false).unwrap().as_str(),
            "http://h/v1/projects/p/locations/europe-west4/publishers/anthropic/models/claude-x@20250101:generateContent"
        );
        assert!(vertex.url("endpoints/123", false).is_ok());
        assert!(Gemini::vertex("p/q", "x", "t").url("m", false).is_err());
        assert!(Gemini::new("k").base_url("ftp://h").url("m", false).is_err());
    }

    #[test]
    fn a_bad_key_is_an_authentication_error() {
        let bad = LlmError::InvalidRequest {
            provider: "gemini",
            model: "m".into(),
            status: 400,
            message: "API key not valid. Please pass a valid API key.".into(),
        };
        assert!(matches!(refine(bad), LlmError::Authentication { status: 400, .. }));
        let other =
            LlmError::InvalidRequest { provider: "gemini", model: "m".into(), status: 400, message: "bad".into() };
        assert!(matches!(refine(other), LlmError::InvalidRequest { .. }));
    }
}
