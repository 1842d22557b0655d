//! A strict imitation of Google's Gemini API and of Vertex AI's `generateContent`,
//! written from their published REST reference: it reads a request as the API would
//! (path, key header, the fields of `GenerateContentRequest`, `Content`, `Part`,
//! `Tool`, the OpenAPI `Schema` subset, `GenerationConfig`, Gemini 3's thought
//! signature check and the function response count) and writes answers in the API's
//! shapes (`GenerateContentResponse`, its SSE stream, `{"error": {code, message,
//! status}}` errors).

#![allow(dead_code)]

use crate::testing::{Reply, Request};
use base64::Engine as _;
use serde_json::{Map, Value, json};

/// The signature Google documents for history the model did not write.
pub const SKIP: &str = "skip_thought_signature_validator";

/// Which API, and its credentials.
#[derive(Debug, Clone)]
pub struct Api {
    /// `Some((project, location))` for Vertex AI.
    pub vertex: Option<(String, String)>,
    /// The API key (Gemini API) or access token (Vertex AI) accepted.
    pub key: String,
    /// The thought signatures this API issued: only these (and the documented skip
    /// values) are accepted back.
    pub issued: Vec<String>,
}

/// What a request asked for, once read.
#[derive(Debug, Clone)]
pub struct Read {
    /// The model, from the path.
    pub model: String,
    /// Whether it was `streamGenerateContent?alt=sse`.
    pub stream: bool,
    /// The body.
    pub body: Value,
}

/// An error in Google's shape.
pub fn error(code: u16, status: &str, message: &str) -> Reply {
    refusal(code, status, message).reply()
}

pub use super::Refusal;

fn refusal(code: u16, status: &str, message: &str) -> Refusal {
    Refusal { status: code, body: json!({"error": {"code": code, "message": message, "status": status}}) }
}

/// A 400 `INVALID_ARGUMENT`.
pub fn invalid(message: impl Into<String>) -> Reply {
    error(400, "INVALID_ARGUMENT", &message.into())
}

impl Api {
    /// The Gemini API with this key.
    pub fn gemini(key: &str) -> Self {
        Self { vertex: None, key: key.into(), issued: Vec::new() }
    }

    /// Vertex AI for this project and location, with this token.
    pub fn vertex(project: &str, location: &str, token: &str) -> Self {
        Self { vertex: Some((project.into(), location.into())), key: token.into(), issued: Vec::new() }
    }

    /// Accepts these signatures back.
    pub fn issued<S: Into<String>>(mut self, signatures: impl IntoIterator<Item = S>) -> Self {
        self.issued.extend(signatures.into_iter().map(Into::into));
        self
    }

    /// Reads a request, or the error reply the API would send.
    pub fn read(&self, request: &Request) -> Result<Read, Reply> {
        self.check(request).map_err(Refusal::reply)
    }

    /// Reads a request, or the API's refusal of it.
    pub fn check(&self, request: &Request) -> Result<Read, Refusal> {
        if request.method != "POST" {
            return Err(refusal(405, "METHOD_NOT_ALLOWED", "only POST"));
        }
        let (model, stream) = self
            .path(&request.path)
            .ok_or_else(|| refusal(404, "NOT_FOUND", &format!("no such path: {}", request.path)))?;
        match &self.vertex {
            None => {
                if request.header("authorization").is_some() {
                    return Err(refusal(401, "UNAUTHENTICATED", "the Gemini API takes its key as x-goog-api-key"));
                }
                if request.header("x-goog-api-key") != Some(self.key.as_str()) {
                    // As the Gemini API answers a wrong key.
                    return Err(Refusal {
                        status: 400,
                        body: json!({"error": {"code": 400,
                        "message": "API key not valid. Please pass a valid API key.", "status": "INVALID_ARGUMENT",
                        "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                                     "domain": "googleapis.com"}]}}),
                    });
                }
            }
            Some(_) => {
                if request.header("x-goog-api-key").is_some() {
                    return Err(refusal(401, "UNAUTHENTICATED", "Vertex AI takes an OAuth access token"));
                }
                if request.header("authorization") != Some(format!("Bearer {}", self.key).as_str()) {
                    return Err(refusal(
                        401,
                        "UNAUTHENTICATED",
                        "Request had invalid authentication credentials. Expected OAuth 2 access token.",
                    ));
                }
            }
        }
        if !request.header("content-type").is_some_and(|t| t.starts_with("application/json")) {
            return Err(refusal(400, "INVALID_ARGUMENT", "the body must be application/json"));
        }
        let body = request.body.clone();
        self.check_body(&body).map_err(|m| refusal(400, "INVALID_ARGUMENT", &format!("Invalid request: {m}")))?;
        Ok(Read { model, stream, body })
    }

    /// The model and whether it streams, from a path of this API.
    fn path(&self, path: &str) -> Option<(String, bool)> {
        let (path, stream) = match path.strip_suffix(":streamGenerateContent?alt=sse") {
            Some(p) => (p, true),
            None => (path.strip_suffix(":generateContent")?, false),
        };
        let model = match &self.vertex {
            None => path.strip_prefix("/v1beta/models/")?,
            Some((project, location)) => {
                path.strip_prefix(&format!("/v1/projects/{project}/locations/{location}/publishers/google/models/"))?
            }
        };
        (!model.is_empty() && !model.contains('/')).then(|| (model.to_owned(), stream))
    }

    fn check_body(&self, body: &Value) -> Result<(), String> {
        let mut known = vec![
            "contents",
            "systemInstruction",
            "tools",
            "toolConfig",
            "safetySettings",
            "generationConfig",
            "cachedContent",
        ];
        if self.vertex.is_some() {
            known.push("labels");
        }
        only(body, &known, "request")?;
        let contents =
            body.get("contents").and_then(Value::as_array).filter(|c| !c.is_empty()).ok_or("`contents` is required")?;
        for (i, content) in contents.iter().enumerate() {
            let at = format!("contents[{i}]");
            only(content, &["role", "parts"], &at)?;
            match content.get("role").and_then(Value::as_str) {
                Some("user" | "model") | None => {}
                Some(other) => return Err(format!("{at}.role: `{other}` is neither user nor model")),
            }
            let parts = content
                .get("parts")
                .and_then(Value::as_array)
                .filter(|p| !p.is_empty())
                .ok_or(format!("{at}: a Content must have at least one Part"))?;
            for (j, part) in parts.iter().enumerate() {
                self.check_part(part, &format!("{at}.parts[{j}]"))?;
            }
        }
        self.check_signatures_and_responses(contents)?;
        if let Some(system) = body.get("systemInstruction") {
            only(system, &["role", "parts"], "systemInstruction")?;
            let parts = system.get("parts").and_then(Value::as_array).ok_or("systemInstruction.parts is required")?;
            for part in parts {
                part.get("text").and_then(Value::as_str).ok_or("systemInstruction: text parts only")?;
            }
        }
        if let Some(tools) = body.get("tools") {
            for (i, tool) in tools.as_array().ok_or("`tools` must be a list")?.iter().enumerate() {
                let at = format!("tools[{i}]");
                only(tool, &["functionDeclarations", "googleSearch", "codeExecution", "urlContext"], &at)?;
                for (j, declaration) in
                    tool.get("functionDeclarations").and_then(Value::as_array).into_iter().flatten().enumerate()
                {
                    let at = format!("{at}.function_declarations[{j}]");
                    only(
                        declaration,
                        &[
                            "name",
                            "description",
                            "behavior",
                            "parameters",
                            "parametersJsonSchema",
                            "response",
                            "responseJsonSchema",
                        ],
                        &at,
                    )?;
                    let name =
                        declaration.get("name").and_then(Value::as_str).ok_or(format!("{at}.name is required"))?;
                    let valid = name.len() <= 64
                        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'));
                    if !valid {
                        return Err(format!("{at}.name: invalid function name `{name}`"));
                    }
                    if let Some(parameters) = declaration.get("parameters") {
                        check_schema(parameters, &format!("{at}.parameters"))?;
                    }
                }
            }
        }
        if let Some(settings) = body.get("safetySettings") {
            for setting in settings.as_array().ok_or("`safetySettings` must be a list")? {
                only(setting, &["category", "threshold", "method"], "safetySettings")?;
                let category =
                    setting.get("category").and_then(Value::as_str).ok_or("safetySettings: category is required")?;
                if !category.starts_with("HARM_CATEGORY_") {
                    return Err(format!("safetySettings: unknown category `{category}`"));
                }
            }
        }
        if let Some(config) = body.get("generationConfig") {
            only(
                config,
                &[
                    "stopSequences",
                    "responseMimeType",
                    "responseSchema",
                    "responseJsonSchema",
                    "candidateCount",
                    "maxOutputTokens",
                    "temperature",
                    "topP",
                    "topK",
                    "seed",
                    "presencePenalty",
                    "frequencyPenalty",
                    "responseLogprobs",
                    "logprobs",
                    "thinkingConfig",
                    "mediaResolution",
                    "responseModalities",
                ],
                "generationConfig",
            )?;
            if config.get("maxOutputTokens").is_some_and(|m| !m.is_u64()) {
                return Err("generationConfig.maxOutputTokens must be an integer".into());
            }
            if (config.get("responseJsonSchema").is_some() || config.get("responseSchema").is_some())
                && config.get("responseMimeType").and_then(Value::as_str) != Some("application/json")
            {
                return Err("a response schema needs responseMimeType application/json".into());
            }
            if let Some(thinking) = config.get("thinkingConfig") {
                only(
                    thinking,
                    &["includeThoughts", "thinkingBudget", "thinkingLevel"],
                    "generationConfig.thinkingConfig",
                )?;
                if thinking.get("thinkingBudget").is_some() && thinking.get("thinkingLevel").is_some() {
                    return Err("thinkingBudget and thinkingLevel cannot both be set".into());
                }
                if let Some(level) = thinking.get("thinkingLevel")
                    && !matches!(level.as_str(), Some("MINIMAL" | "LOW" | "MEDIUM" | "HIGH"))
                {
                    return Err(format!("thinkingConfig.thinkingLevel: invalid value {level}"));
                }
            }
        }
        Ok(())
    }

    fn check_part(&self, part: &Value, at: &str) -> Result<(), String> {
        const DATA: &[&str] = &[
            "text",
            "inlineData",
            "fileData",
            "functionCall",
            "functionResponse",
            "executableCode",
            "codeExecutionResult",
        ];
        only(part, &[DATA, &["thought", "thoughtSignature", "mediaResolution", "videoMetadata"]].concat(), at)?;
        let data: Vec<&&str> = DATA.iter().filter(|k| part.get(**k).is_some()).collect();
        if data.len() != 1 {
            return Err(format!("{at}: a Part holds exactly one of {DATA:?}, not {data:?}"));
        }
        if let Some(signature) = part.get("thoughtSignature") {
            let text = signature.as_str().ok_or(format!("{at}.thoughtSignature must be a base64 string"))?;
            let base64 = base64::engine::general_purpose::STANDARD.decode(text).is_ok()
                || base64::engine::general_purpose::URL_SAFE.decode(text).is_ok();
            if !base64 {
                return Err(format!("{at}.thoughtSignature: invalid base64 `{text}`"));
            }
        }
        if part.get("thought").is_some_and(|t| !t.is_boolean()) {
            return Err(format!("{at}.thought must be a boolean"));
        }
        if let Some(text) = part.get("text") {
            text.as_str().ok_or(format!("{at}.text must be a string"))?;
        }
        if let Some(inline) = part.get("inlineData") {
            only(inline, &["mimeType", "data"], &format!("{at}.inlineData"))?;
            inline.get("mimeType").and_then(Value::as_str).ok_or(format!("{at}.inlineData.mimeType is required"))?;
            let data = inline.get("data").and_then(Value::as_str).ok_or(format!("{at}.inlineData.data is required"))?;
            base64::engine::general_purpose::STANDARD.decode(data).map_err(|e| format!("{at}.inlineData.data: {e}"))?;
        }
        if let Some(file) = part.get("fileData") {
            only(file, &["mimeType", "fileUri", "displayName"], &format!("{at}.fileData"))?;
            file.get("fileUri").and_then(Value::as_str).ok_or(format!("{at}.fileData.fileUri is required"))?;
            if self.vertex.is_some() && file.get("mimeType").is_none() {
                return Err(format!("{at}.fileData.mimeType is required"));
            }
        }
        if let Some(call) = part.get("functionCall") {
            only(call, &["id", "name", "args"], &format!("{at}.functionCall"))?;
            call.get("name").and_then(Value::as_str).ok_or(format!("{at}.functionCall.name is required"))?;
            if call.get("args").is_some_and(|a| !a.is_object()) {
                return Err(format!("{at}.functionCall.args must be an object"));
            }
        }
        if let Some(response) = part.get("functionResponse") {
            only(
                response,
                &["id", "name", "response", "parts", "willContinue", "scheduling"],
                &format!("{at}.functionResponse"),
            )?;
            response.get("name").and_then(Value::as_str).ok_or(format!("{at}.functionResponse.name is required"))?;
            response
                .get("response")
                .filter(|r| r.is_object())
                .ok_or(format!("{at}.functionResponse.response must be an object"))?;
        }
        Ok(())
    }

    /// Gemini 3's checks: the first function call of each model turn carries a
    /// signature this API issued (or a documented skip value), and the turn after a
    /// model turn with calls answers each of them.
    fn check_signatures_and_responses(&self, contents: &[Value]) -> Result<(), String> {
        for (i, content) in contents.iter().enumerate() {
            if content["role"] != "model" {
                continue;
            }
            let parts = content["parts"].as_array().expect("checked");
            for part in parts {
                if let Some(signature) = part.get("thoughtSignature").and_then(Value::as_str) {
                    let known = self.issued.iter().any(|s| s == signature)
                        || signature == SKIP
                        || signature == "context_engineering_is_the_way_to_go";
                    if !known {
                        return Err(format!("contents[{i}]: Corrupted thought signature."));
                    }
                }
            }
            let calls: Vec<&Value> = parts.iter().filter(|p| p.get("functionCall").is_some()).collect();
            let Some(first) = calls.first() else { continue };
            if first.get("thoughtSignature").is_none() {
                return Err(format!(
                    "Function call is missing a thought_signature in functionCall parts. This is required for tools to \
                     work correctly, and missing thought_signature may lead to degraded model performance. \
                     (contents[{i}])"
                ));
            }
            let answers: Vec<&str> = contents
                .get(i + 1)
                .and_then(|next| next["parts"].as_array())
                .into_iter()
                .flatten()
                .filter_map(|p| p.get("functionResponse").and_then(|r| r["name"].as_str()))
                .collect();
            if i + 1 < contents.len() {
                let mut asked: Vec<&str> = calls.iter().filter_map(|c| c["functionCall"]["name"].as_str()).collect();
                let mut answered = answers.clone();
                asked.sort_unstable();
                answered.sort_unstable();
                if asked != answered {
                    return Err(format!(
                        "Please ensure that the number of function response parts is equal to the number of function \
                         call parts of the function call turn. (contents[{}]: {answers:?} for {asked:?})",
                        i + 1
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Checks a function's parameters against the OpenAPI `Schema` subset: known fields
/// only, a type of the `Type` enum, a non-empty `properties` for `OBJECT`.
pub fn check_schema(schema: &Value, at: &str) -> Result<(), String> {
    only(
        schema,
        &[
            "type",
            "format",
            "title",
            "description",
            "nullable",
            "enum",
            "maxItems",
            "minItems",
            "properties",
            "required",
            "minProperties",
            "maxProperties",
            "minLength",
            "maxLength",
            "pattern",
            "example",
            "anyOf",
            "propertyOrdering",
            "default",
            "items",
            "minimum",
            "maximum",
        ],
        at,
    )
    .map_err(|m| format!("Invalid JSON payload received. {m}"))?;
    match schema.get("type").map(|t| t.as_str()) {
        None if schema.get("anyOf").is_some() => {}
        None => return Err(format!("{at}.type is required")),
        Some(Some("STRING" | "NUMBER" | "INTEGER" | "BOOLEAN" | "ARRAY" | "NULL")) => {}
        Some(Some("OBJECT")) => {
            let properties = schema.get("properties").and_then(Value::as_object).filter(|p| !p.is_empty());
            if properties.is_none() {
                return Err(format!("{at}.properties: should be non-empty for OBJECT type"));
            }
        }
        Some(other) => return Err(format!("{at}.type: invalid value {other:?}")),
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str) {
        let ok = matches!(
            (schema["type"].as_str().unwrap_or_default(), format),
            ("STRING", "enum" | "date-time") | ("NUMBER", "float" | "double") | ("INTEGER", "int32" | "int64")
        );
        if !ok {
            return Err(format!("{at}.format: `{format}` is not supported for this type"));
        }
    }
    if let Some(values) = schema.get("enum")
        && (schema["type"] != "STRING" || !values.as_array().is_some_and(|v| v.iter().all(Value::is_string)))
    {
        return Err(format!("{at}.enum: only for STRING type, with string values"));
    }
    for (name, property) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
        check_schema(property, &format!("{at}.properties[{name}]"))?;
    }
    if let Some(items) = schema.get("items") {
        check_schema(items, &format!("{at}.items"))?;
    }
    for (i, option) in schema.get("anyOf").and_then(Value::as_array).into_iter().flatten().enumerate() {
        check_schema(option, &format!("{at}.anyOf[{i}]"))?;
    }
    Ok(())
}

/// Refuses fields the reference does not name, as the API does ("Unknown name").
fn only(object: &Value, known: &[&str], at: &str) -> Result<(), String> {
    let map = object.as_object().ok_or(format!("{at}: must be an object"))?;
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(extra) => Err(format!("Unknown name \"{extra}\" at '{at}': Cannot find field.")),
        None => Ok(()),
    }
}

/// A `GenerateContentResponse` with one candidate of these parts.
pub fn response(parts: Value, finish: &str, usage: Value) -> Value {
    json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
        "usageMetadata": usage,
        "modelVersion": "gemini-3-flash-preview-001",
        "responseId": "resp-gemini-1",
    })
}

/// A whole answer, as a body or as the API's event stream.
pub fn answer(response: &Value, stream: bool) -> Reply {
    if stream { Reply::sse(sse(response)) } else { Reply::json(200, response.clone()) }
}

/// The event stream of a response, as `streamGenerateContent?alt=sse` sends it: each
/// text (and thought) part in pieces, the part's signature on its last piece; each
/// function call whole; the finish reason and usage with the last part.
pub fn sse(response: &Value) -> String {
    let candidate = &response["candidates"][0];
    let parts = candidate["content"]["parts"].as_array().cloned().unwrap_or_default();
    let mut chunks: Vec<Value> = Vec::new();
    for part in parts {
        match part.get("text").and_then(Value::as_str) {
            Some(text) if text.chars().count() > 1 => {
                let chars: Vec<char> = text.chars().collect();
                let size = chars.len().div_ceil(3);
                let pieces: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
                let last = pieces.len() - 1;
                for (i, piece) in pieces.into_iter().enumerate() {
                    let mut chunk: Map<String, Value> = Map::new();
                    chunk.insert("text".into(), piece.into());
                    if part.get("thought").is_some() {
                        chunk.insert("thought".into(), part["thought"].clone());
                    }
                    if i == last
                        && let Some(signature) = part.get("thoughtSignature")
                    {
                        chunk.insert("thoughtSignature".into(), signature.clone());
                    }
                    chunks.push(Value::Object(chunk));
                }
            }
            _ => chunks.push(part),
        }
    }
    let mut out = String::new();
    let count = chunks.len().max(1);
    for i in 0..count {
        let parts = chunks.get(i).map_or_else(|| json!([]), |p| json!([p]));
        let mut candidate_chunk = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        let mut chunk = json!({"modelVersion": response["modelVersion"], "responseId": response["responseId"]});
        if i == count - 1 {
            for key in ["finishReason", "finishMessage"] {
                if let Some(value) = candidate.get(key) {
                    candidate_chunk[key] = value.clone();
                }
            }
            chunk["usageMetadata"] = response["usageMetadata"].clone();
            if response.get("promptFeedback").is_some() {
                chunk["promptFeedback"] = response["promptFeedback"].clone();
            }
        }
        chunk["candidates"] = json!([candidate_chunk]);
        out.push_str(&format!("data: {chunk}\r\n\r\n"));
    }
    out
}
