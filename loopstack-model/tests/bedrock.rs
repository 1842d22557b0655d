//! The Bedrock provider against a strict imitation of the Bedrock Runtime API's
//! `Converse` and `ConverseStream`, written from the published API reference: the
//! imitation recomputes every request's SigV4 signature on its own (from the request's
//! raw bytes and the test credentials), refuses requests the API refuses (as
//! `ValidationException`s), answers in the reference's shapes (JSON, or AWS
//! event-stream frames it encodes itself with their CRC32s), and fails with each error
//! class the reference lists.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt as _;
use loopstack_model::bedrock::{Bedrock, Credentials};
use loopstack_model::testing::{Reply, Request, Server};
use loopstack_model::{
    ChatModel, ChatRequest, ChatResponse, ContentBlock, Image, LlmError, Message, Reasoning, ReasoningEffort, Role,
    StopReason, StreamEvent, ToolDefinition, ToolResult, ToolUse, Usage,
};
use serde_json::{Value, json};

const REGION: &str = "us-west-2";
const ACCESS_KEY: &str = "AKIDEXAMPLE";
const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const SESSION_TOKEN: &str = "FwoGZXIvYXdzEXAMPLETOKEN";
const API_KEY: &str = "ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl";
const CLAUDE: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";

// ---------------------------------------------------------------------------------
// SigV4, recomputed independently from the published algorithm.

mod sigv4 {
    use hmac::{Hmac, KeyInit as _, Mac as _};
    use sha2::{Digest as _, Sha256};

    pub(super) fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub(super) fn sha256_hex(bytes: &[u8]) -> String {
        hex(&Sha256::digest(bytes))
    }

    fn hmac(key: &[u8], data: &str) -> Vec<u8> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
        mac.update(data.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    /// URI-encodes every byte but the unreserved ones (`/` too).
    fn uri_encode(text: &str) -> String {
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    /// The canonical URI of a path as sent: each segment encoded once more (every
    /// service but S3 signs the path double-encoded).
    pub(super) fn canonical_uri(path: &str) -> String {
        path.split('/').map(uri_encode).collect::<Vec<_>>().join("/")
    }

    /// The signature of a request: `headers` are the signed ones, lower-case, sorted.
    pub(super) fn signature(
        secret: &str,
        amz_date: &str,
        scope: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> String {
        let canonical_headers: String = headers
            .iter()
            .map(|(name, value)| format!("{name}:{}\n", value.split_whitespace().collect::<Vec<_>>().join(" ")))
            .collect();
        let signed: Vec<&str> = headers.iter().map(|(name, _)| *name).collect();
        let canonical_request = format!(
            "{method}\n{}\n\n{canonical_headers}\n{}\n{}",
            canonical_uri(path),
            signed.join(";"),
            sha256_hex(body)
        );
        let string_to_sign =
            format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", sha256_hex(canonical_request.as_bytes()));
        let mut parts = scope.split('/');
        let mut key = format!("AWS4{secret}").into_bytes();
        for part in [parts.next(), parts.next(), parts.next(), parts.next()].into_iter().flatten() {
            key = hmac(&key, part);
        }
        hex(&hmac(&key, &string_to_sign))
    }
}

/// The verifier itself, against the AWS SigV4 test suite's `get-vanilla` case.
#[test]
fn the_signature_check_reproduces_the_aws_test_suite() {
    let signature = sigv4::signature(
        SECRET_KEY,
        "20150830T123600Z",
        "20150830/us-east-1/service/aws4_request",
        "GET",
        "/",
        &[("host", "example.amazonaws.com"), ("x-amz-date", "20150830T123600Z")],
        b"",
    );
    assert_eq!(signature, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
    assert_eq!(sigv4::canonical_uri("/model/a.b-v1%3A0/converse"), "/model/a.b-v1%253A0/converse");
}

/// Seconds since the epoch of an `x-amz-date` (`20250102T030405Z`).
fn amz_date_seconds(date: &str) -> Option<i64> {
    let b = date.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| date.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hh, mm, ss) = (num(9..11)?, num(11..13)?, num(13..15)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// How a request must be authorized.
#[derive(Debug, Clone, Copy)]
enum Auth {
    /// SigV4 with the test credentials, with or without the session token.
    SigV4 { token: bool },
    /// A Bedrock API key.
    Bearer,
}

/// Checks a request's authorization as Bedrock does.
fn check_auth(auth: Auth, req: &Request) -> Result<(), String> {
    let authorization = req.header("authorization").ok_or("no Authorization header")?;
    let Auth::SigV4 { token } = auth else {
        return match authorization.strip_prefix("Bearer ") {
            Some(key) if key == API_KEY => Ok(()),
            _ => Err(format!("wrong bearer token: {authorization}")),
        };
    };
    let rest = authorization.strip_prefix("AWS4-HMAC-SHA256 ").ok_or("not AWS4-HMAC-SHA256")?;
    let mut fields = std::collections::HashMap::new();
    for part in rest.split(", ") {
        let (k, v) = part.split_once('=').ok_or("a malformed Authorization field")?;
        fields.insert(k, v);
    }
    let (credential, signed, signature) =
        match (fields.get("Credential"), fields.get("SignedHeaders"), fields.get("Signature")) {
            (Some(c), Some(s), Some(sig)) => (*c, *s, *sig),
            _ => return Err(format!("Authorization lacks a field: {authorization}")),
        };
    let amz_date = req.header("x-amz-date").ok_or("no x-amz-date")?;
    let seconds = amz_date_seconds(amz_date).ok_or("x-amz-date is not YYYYMMDDTHHMMSSZ")?;
    let now = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()).unwrap();
    if (now - seconds).abs() > 300 {
        return Err("Signature expired: x-amz-date is more than 5 minutes off".into());
    }
    let (key_id, scope) = credential.split_once('/').ok_or("a malformed credential")?;
    if key_id != ACCESS_KEY {
        return Err(format!("The security token included in the request is invalid: key {key_id}"));
    }
    let want_scope = format!("{}/{REGION}/bedrock/aws4_request", &amz_date[..8]);
    if scope != want_scope {
        return Err(format!("Credential should be scoped to {want_scope}, not {scope}"));
    }
    let signed: Vec<&str> = signed.split(';').collect();
    let mut sorted = signed.clone();
    sorted.sort_unstable();
    if sorted != signed {
        return Err("SignedHeaders are not sorted".into());
    }
    let mut required = vec!["content-type", "host", "x-amz-date"];
    match (token, req.header("x-amz-security-token")) {
        (true, Some(SESSION_TOKEN)) => required.push("x-amz-security-token"),
        (true, other) => return Err(format!("x-amz-security-token is {other:?}")),
        (false, Some(_)) => return Err("an x-amz-security-token without a session".into()),
        (false, None) => {}
    }
    if let Some(missing) = required.iter().find(|h| !signed.contains(h)) {
        return Err(format!("{missing} is not signed"));
    }
    let mut headers = Vec::new();
    for name in &signed {
        headers.push((*name, req.header(name).ok_or_else(|| format!("signed header {name} is missing"))?));
    }
    let want = sigv4::signature(SECRET_KEY, amz_date, scope, &req.method, &req.path, &headers, &req.raw_body);
    if signature != want {
        return Err(format!(
            "The request signature we calculated does not match the signature you provided ({signature})"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// AWS event-stream frames, encoded with a CRC32 written here.

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut head = Vec::new();
    for (name, value) in headers {
        head.push(u8::try_from(name.len()).unwrap());
        head.extend_from_slice(name.as_bytes());
        head.push(7); // a string
        head.extend_from_slice(&u16::try_from(value.len()).unwrap().to_be_bytes());
        head.extend_from_slice(value.as_bytes());
    }
    let total = u32::try_from(16 + head.len() + payload.len()).unwrap();
    let mut out = total.to_be_bytes().to_vec();
    out.extend_from_slice(&u32::try_from(head.len()).unwrap().to_be_bytes());
    out.extend_from_slice(&crc32(&out).to_be_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc32(&out).to_be_bytes());
    out
}

/// An event, with the `p` padding field Bedrock adds to each.
fn event(kind: &str, mut payload: Value) -> Vec<u8> {
    payload["p"] = json!("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ");
    frame(
        &[(":event-type", kind), (":content-type", "application/json"), (":message-type", "event")],
        payload.to_string().as_bytes(),
    )
}

fn exception_frame(kind: &str, message: &str) -> Vec<u8> {
    frame(
        &[(":exception-type", kind), (":content-type", "application/json"), (":message-type", "exception")],
        json!({ "message": message }).to_string().as_bytes(),
    )
}

/// `text` in two pieces (at a character boundary), or one when too short.
fn halves(text: &str) -> Vec<&str> {
    let mid = (0..=text.len() / 2).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    if mid == 0 { vec![text] } else { vec![&text[..mid], &text[mid..]] }
}

/// The ConverseStream events of an answer: its blocks as starts, deltas and stops.
fn stream_events(content: &[Value], stop: &str, usage: &Value) -> Vec<Vec<u8>> {
    let mut events = vec![event("messageStart", json!({"role": "assistant"}))];
    for (i, block) in content.iter().enumerate() {
        let delta = |delta: Value| event("contentBlockDelta", json!({"contentBlockIndex": i, "delta": delta}));
        if let Some(text) = block["text"].as_str() {
            events.extend(halves(text).into_iter().map(|t| delta(json!({ "text": t }))));
        } else if let Some(tool) = block.get("toolUse") {
            let start = json!({"toolUse": {"toolUseId": tool["toolUseId"], "name": tool["name"]}});
            events.push(event("contentBlockStart", json!({"contentBlockIndex": i, "start": start})));
            let input = tool["input"].to_string();
            events.extend(halves(&input).into_iter().map(|p| delta(json!({"toolUse": {"input": p}}))));
        } else if let Some(text) = block.pointer("/reasoningContent/reasoningText") {
            let pieces = halves(text["text"].as_str().unwrap()).into_iter();
            events.extend(pieces.map(|t| delta(json!({"reasoningContent": {"text": t}}))));
            events.push(delta(json!({"reasoningContent": {"signature": text["signature"]}})));
        } else if let Some(redacted) = block.pointer("/reasoningContent/redactedContent") {
            events.push(delta(json!({"reasoningContent": {"redactedContent": redacted}})));
        } else {
            panic!("no stream shape for {block}");
        }
        events.push(event("contentBlockStop", json!({ "contentBlockIndex": i })));
    }
    events.push(event("messageStop", json!({ "stopReason": stop })));
    events.push(event("metadata", json!({"usage": usage, "metrics": {"latencyMs": 42}})));
    events
}

// ---------------------------------------------------------------------------------
// The imitation.

/// What the imitation answers a request with.
#[derive(Debug, Clone)]
enum Answer {
    /// An assistant message of these Converse content blocks.
    Message { content: Vec<Value>, stop: &'static str, usage: Value },
    /// An error: its HTTP status and exception type.
    Fail(u16, &'static str),
}

fn answer(content: Vec<Value>, stop: &'static str) -> Answer {
    let usage = json!({"inputTokens": 21, "outputTokens": 7, "totalTokens": 128, "cacheReadInputTokens": 100});
    Answer::Message { content, stop, usage }
}

struct State {
    auth: Auth,
    answers: VecDeque<Answer>,
    /// The reasoning and tool blocks the imitation wrote, which may come back.
    issued: Vec<Value>,
    problems: Vec<String>,
}

#[derive(Clone)]
struct Imitation(Arc<Mutex<State>>);

impl Imitation {
    fn new(auth: Auth, answers: Vec<Answer>) -> Self {
        Self(Arc::new(Mutex::new(State { auth, answers: answers.into(), issued: Vec::new(), problems: Vec::new() })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn problems(&self) -> Vec<String> {
        self.state().problems.clone()
    }

    async fn serve(&self) -> Server {
        let imitation = self.clone();
        Server::handle(move |req| imitation.answer(req)).await
    }

    fn answer(&self, req: &Request) -> Reply {
        let mut state = self.state();
        let checked = check_auth(state.auth, req)
            .map_err(|m| (403, "InvalidSignatureException", m))
            .and_then(|()| check_request(req, &state.issued).map_err(|m| (400, "ValidationException", m)))
            .and_then(|stream| match state.answers.pop_front() {
                Some(answer) => Ok((stream, answer)),
                None => Err((400, "ValidationException", "the test scripted no more answers".to_owned())),
            });
        let (stream, answer) = match checked {
            Ok(ok) => ok,
            Err((status, kind, message)) => {
                state.problems.push(message.clone());
                return error_reply(status, kind, &message);
            }
        };
        match answer {
            Answer::Fail(status, kind) => error_reply(status, kind, &format!("{kind} by the test")),
            Answer::Message { content, stop, usage } => {
                state.issued.extend(content.iter().filter(|b| b.get("reasoningContent").is_some()).cloned());
                state.issued.extend(content.iter().filter(|b| b.get("toolUse").is_some()).cloned());
                if stream {
                    let body: Vec<u8> = stream_events(&content, stop, &usage).concat();
                    Reply::raw(200, "application/vnd.amazon.eventstream", body)
                        .header("x-amzn-requestid", "req-1")
                        .pieces(&[5, 31, 200, 1])
                } else {
                    Reply::json(
                        200,
                        json!({
                            "output": {"message": {"role": "assistant", "content": content}},
                            "stopReason": stop,
                            "usage": usage,
                            "metrics": {"latencyMs": 42},
                        }),
                    )
                    .header("x-amzn-requestid", "req-1")
                }
            }
        }
    }
}

fn error_reply(status: u16, kind: &str, message: &str) -> Reply {
    Reply::json(status, json!({ "message": message }))
        .header("x-amzn-errortype", &format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"))
        .header("x-amzn-requestid", "req-err")
}

/// Decodes a URI label (`%3A` and the like).
fn decode_label(label: &str) -> Result<String, String> {
    let bytes = label.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = label.get(i + 1..i + 3).ok_or("a bad escape in the path")?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| "a bad escape in the path")?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the model id is not UTF-8".into())
}

fn only_keys(value: &Value, allowed: &[&str], what: &str) -> Result<(), String> {
    let object = value.as_object().ok_or_else(|| format!("{what} must be an object"))?;
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(format!("extraneous key [{key}] is not permitted in {what}")),
        None => Ok(()),
    }
}

/// The one member of a union.
fn member<'a>(block: &'a Value, what: &str) -> Result<(&'a str, &'a Value), String> {
    let object = block.as_object().ok_or_else(|| format!("{what} must be an object"))?;
    match object.iter().next() {
        Some((k, v)) if object.len() == 1 => Ok((k, v)),
        _ => Err(format!("{what} must have exactly one member: {block}")),
    }
}

fn cache_point(value: &Value) -> Result<(), String> {
    (value == &json!({"type": "default"})).then_some(()).ok_or_else(|| format!("a bad cachePoint {value}"))
}

/// Checks a request as the Converse reference describes it; `Ok(stream)`.
fn check_request(req: &Request, issued: &[Value]) -> Result<bool, String> {
    if req.method != "POST" {
        return Err(format!("method {}", req.method));
    }
    let rest = req.path.strip_prefix("/model/").ok_or_else(|| format!("unknown path {}", req.path))?;
    let (label, operation) = rest.rsplit_once('/').ok_or("no operation in the path")?;
    let stream = match operation {
        "converse" => false,
        "converse-stream" => true,
        other => return Err(format!("unknown operation {other}")),
    };
    let model = decode_label(label)?;
    if label.contains(':') || label.contains('/') || model.is_empty() {
        return Err(format!("the model id `{label}` is not encoded as a URI label"));
    }
    if req.header("content-type") != Some("application/json") {
        return Err(format!("content-type {:?}", req.header("content-type")));
    }
    let body = &req.body;
    only_keys(
        body,
        &[
            "messages",
            "system",
            "inferenceConfig",
            "toolConfig",
            "guardrailConfig",
            "additionalModelRequestFields",
            "additionalModelResponseFieldPaths",
            "promptVariables",
            "requestMetadata",
            "performanceConfig",
        ],
        "the request",
    )?;
    let mut cache_points = 0;
    if let Some(system) = body.get("system") {
        for block in system.as_array().ok_or("system must be a list")? {
            match member(block, "a system block")? {
                ("text", Value::String(t)) if !t.trim().is_empty() => {}
                ("cachePoint", point) => {
                    cache_point(point)?;
                    cache_points += 1;
                }
                other => return Err(format!("a bad system block {other:?}")),
            }
        }
    }
    let thinking = body.pointer("/additionalModelRequestFields/thinking");
    let thinks = thinking.is_some_and(|t| t["type"] == "enabled");
    if let Some(inference) = body.get("inferenceConfig") {
        only_keys(inference, &["maxTokens", "temperature", "topP", "stopSequences"], "inferenceConfig")?;
        if inference.get("maxTokens").is_some_and(|m| m.as_u64().is_none_or(|m| m == 0)) {
            return Err("maxTokens must be at least 1".into());
        }
        if inference.get("temperature").is_some_and(|t| t.as_f64().is_none_or(|t| !(0.0..=1.0).contains(&t))) {
            return Err("temperature must be within [0, 1]".into());
        }
    }
    if let Some(thinking) = thinking {
        let budget = thinking["budget_tokens"].as_u64();
        match (thinking["type"].as_str(), budget) {
            (Some("enabled"), Some(budget)) if budget >= 1024 => {
                let max = body.pointer("/inferenceConfig/maxTokens").and_then(Value::as_u64).unwrap_or(4096);
                if max <= budget {
                    return Err("max_tokens must be greater than thinking.budget_tokens".into());
                }
            }
            (Some("disabled"), None) => {}
            _ => return Err(format!("a bad thinking {thinking}")),
        }
    }
    let tools = match body.get("toolConfig") {
        None => Vec::new(),
        Some(config) => {
            only_keys(config, &["tools", "toolChoice"], "toolConfig")?;
            let mut names = Vec::new();
            for tool in config["tools"].as_array().filter(|t| !t.is_empty()).ok_or("toolConfig.tools is empty")? {
                match member(tool, "a tool")? {
                    ("toolSpec", spec) => {
                        only_keys(spec, &["name", "description", "inputSchema"], "toolSpec")?;
                        let name = spec["name"].as_str().filter(|n| !n.is_empty()).ok_or("a toolSpec has no name")?;
                        if spec.get("description").is_some_and(|d| d.as_str().is_none_or(str::is_empty)) {
                            return Err("a toolSpec's description is empty".into());
                        }
                        if !spec.pointer("/inputSchema/json").is_some_and(Value::is_object) {
                            return Err("a toolSpec has no inputSchema.json".into());
                        }
                        names.push(name.to_owned());
                    }
                    ("cachePoint", point) => {
                        cache_point(point)?;
                        cache_points += 1;
                    }
                    other => return Err(format!("a bad tool {other:?}")),
                }
            }
            names
        }
    };
    if let Some(guardrail) = body.get("guardrailConfig") {
        only_keys(guardrail, &["guardrailIdentifier", "guardrailVersion", "trace"], "guardrailConfig")?;
        if !guardrail["guardrailIdentifier"].is_string() || !guardrail["guardrailVersion"].is_string() {
            return Err("guardrailConfig needs guardrailIdentifier and guardrailVersion".into());
        }
    }
    let messages = body["messages"].as_array().filter(|m| !m.is_empty()).ok_or("messages must not be empty")?;
    let mut previous_calls: Vec<String> = Vec::new();
    let mut uses_tools = false;
    for (i, message) in messages.iter().enumerate() {
        only_keys(message, &["role", "content"], "a message")?;
        let role = message["role"].as_str().ok_or("a message has no role")?;
        let want = if i % 2 == 0 { "user" } else { "assistant" };
        if role != want {
            return Err("A conversation must start with a user message and alternate between user and assistant".into());
        }
        let content = message["content"].as_array().filter(|c| !c.is_empty()).ok_or("a message has no content")?;
        let mut calls = Vec::new();
        for (j, block) in content.iter().enumerate() {
            let (kind, value) = member(block, "a content block")?;
            match (role, kind) {
                (_, "text") if value.as_str().is_some_and(|t| !t.trim().is_empty()) => {}
                (_, "cachePoint") if j > 0 => {
                    cache_point(value)?;
                    cache_points += 1;
                }
                ("user", "image") => check_image(value)?,
                ("user", "toolResult") => {
                    uses_tools = true;
                    only_keys(value, &["toolUseId", "content", "status"], "toolResult")?;
                    let id = value["toolUseId"].as_str().ok_or("a toolResult has no toolUseId")?;
                    if !previous_calls.iter().any(|c| c == id) {
                        return Err(format!("toolResult {id} answers no toolUse of the previous turn"));
                    }
                    if !matches!(value.get("status").and_then(Value::as_str), None | Some("success" | "error")) {
                        return Err("a bad toolResult status".into());
                    }
                    let parts = value["content"].as_array().filter(|c| !c.is_empty()).ok_or("an empty toolResult")?;
                    for part in parts {
                        match member(part, "a toolResult content block")? {
                            ("text", Value::String(t)) if !t.trim().is_empty() => {}
                            ("json", _) => {}
                            ("image", image) => check_image(image)?,
                            other => return Err(format!("a bad toolResult content block {other:?}")),
                        }
                    }
                }
                ("assistant", "toolUse") => {
                    uses_tools = true;
                    if !issued.contains(block) {
                        return Err(format!("a toolUse the model never wrote: {block}"));
                    }
                    if !value["input"].is_object() {
                        return Err("toolUse.input must be an object".into());
                    }
                    calls.push(value["toolUseId"].as_str().unwrap_or_default().to_owned());
                }
                ("assistant", "reasoningContent") => {
                    if !issued.contains(block) {
                        return Err(format!("The reasoning block was modified or not written by the model: {block}"));
                    }
                }
                other => return Err(format!("a bad content block {other:?} in message {i}")),
            }
        }
        // Claude with thinking on: an assistant turn with tool calls starts with its thinking.
        if thinks && role == "assistant" && !calls.is_empty() && content[0].get("reasoningContent").is_none() {
            return Err("Expected `thinking` or `redacted_thinking`, but found `toolUse`".into());
        }
        previous_calls = calls;
    }
    if uses_tools && tools.is_empty() {
        return Err("The toolConfig field must be defined when using toolUse and toolResult content blocks".into());
    }
    if cache_points > 4 {
        return Err(format!("{cache_points} cache points, more than 4"));
    }
    Ok(stream)
}

fn check_image(image: &Value) -> Result<(), String> {
    use base64::Engine as _;
    only_keys(image, &["format", "source"], "an image")?;
    if !matches!(image["format"].as_str(), Some("png" | "jpeg" | "gif" | "webp")) {
        return Err(format!("a bad image format {}", image["format"]));
    }
    let bytes = image.pointer("/source/bytes").and_then(Value::as_str).ok_or("an image has no source.bytes")?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(bytes).map_err(|e| format!("image bytes: {e}"))?;
    if image["format"] == "png" && !bytes.starts_with(b"\x89PNG") {
        return Err("the image bytes are not a PNG".into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// The tests.

fn credentials(token: bool) -> Credentials {
    let credentials = Credentials::new(ACCESS_KEY, SECRET_KEY);
    if token { credentials.session_token(SESSION_TOKEN) } else { credentials }
}

fn model(server: &Server, token: bool) -> Bedrock {
    Bedrock::new(REGION, credentials(token))
        .endpoint_url(server.url())
        .retry_policy(loopstack_model::RetryPolicy::new().max_retries(1))
        .__sleep_with(|_| async {})
}

fn weather() -> Arc<ToolDefinition> {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    Arc::new(ToolDefinition::new("get_weather", "Gets the weather.", schema))
}

/// The response of `stream`, checking that its events spell out the response.
async fn streamed(model: &Bedrock, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
    let events: Vec<Result<StreamEvent, LlmError>> = model.stream(request).collect().await;
    let mut texts = std::collections::BTreeMap::<usize, String>::new();
    let mut reasoning = std::collections::BTreeMap::<usize, String>::new();
    let mut done = None;
    for event in events {
        match event? {
            StreamEvent::TextDelta { index, text } => texts.entry(index).or_default().push_str(&text),
            StreamEvent::ReasoningDelta { index, text } => reasoning.entry(index).or_default().push_str(&text),
            StreamEvent::Done(response) => done = Some(response),
            _ => {}
        }
    }
    let response = done.expect("a stream ends with Done");
    for (index, block) in response.message.content.iter().enumerate() {
        match block {
            ContentBlock::Text { text } => assert_eq!(texts.get(&index), Some(text)),
            ContentBlock::Reasoning(r) if !r.text.is_empty() => assert_eq!(reasoning.get(&index), Some(&r.text)),
            _ => {}
        }
    }
    Ok(response)
}

#[tokio::test]
async fn converse_is_signed_and_answered() {
    let imitation =
        Imitation::new(Auth::SigV4 { token: true }, vec![answer(vec![json!({"text": "Sunny in Oslo."})], "end_turn")]);
    let server = imitation.serve().await;
    let request = ChatRequest::new(CLAUDE, vec![Message::user("Weather in Oslo?")])
        .system("Be brief.")
        .max_tokens(300)
        .temperature(0.5)
        .stop_sequences(["###"]);
    let response = model(&server, true).chat(&request).await.unwrap();
    assert_eq!(imitation.problems(), Vec::<String>::new());
    assert_eq!(
        response.message,
        Message { role: Role::Assistant, content: vec![ContentBlock::text("Sunny in Oslo.")] }
    );
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(
        response.usage,
        Usage { input_tokens: 21, output_tokens: 7, cache_read_input_tokens: 100, ..Usage::default() }
    );
    assert_eq!((response.model.as_str(), response.id.as_deref()), (CLAUDE, None));

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse");
    assert_eq!(
        sent.body,
        json!({
            "messages": [{"role": "user", "content": [{"text": "Weather in Oslo?"}, {"cachePoint": {"type": "default"}}]}],
            "system": [{"text": "Be brief."}, {"cachePoint": {"type": "default"}}],
            "inferenceConfig": {"maxTokens": 300, "temperature": 0.5, "stopSequences": ["###"]},
        })
    );
}

#[tokio::test]
async fn signatures_without_a_session_token_and_api_keys() {
    let reply = || answer(vec![json!({"text": "Hi."})], "end_turn");
    let imitation = Imitation::new(Auth::SigV4 { token: false }, vec![reply(), reply()]);
    let server = imitation.serve().await;
    let request = ChatRequest::new("amazon.nova-lite-v1:0", vec![Message::user("Hi")]);
    model(&server, false).chat(&request).await.unwrap();
    streamed(&model(&server, false), &request).await.unwrap();
    assert_eq!(imitation.problems(), Vec::<String>::new());
    assert!(server.requests().iter().all(|r| r.header("x-amz-security-token").is_none()));
    // Signed with the wrong secret: refused as AWS refuses it.
    let wrong = Bedrock::new(REGION, Credentials::new(ACCESS_KEY, "not-the-secret")).endpoint_url(server.url());
    let err = wrong.chat(&request).await.unwrap_err();
    assert!(
        matches!(err, LlmError::Authentication { status: 403, ref message, .. }
            if message.starts_with("InvalidSignatureException: The request signature we calculated")),
        "{err}"
    );

    let imitation = Imitation::new(Auth::Bearer, vec![reply()]);
    let server = imitation.serve().await;
    let keyed = Bedrock::with_api_key(REGION, API_KEY).endpoint_url(server.url());
    keyed.chat(&request).await.unwrap();
    assert_eq!(imitation.problems(), Vec::<String>::new());
    assert!(server.requests()[0].header("x-amz-date").is_none());
    assert!(!format!("{keyed:?}").contains(API_KEY));
}

#[tokio::test]
async fn each_error_class_is_typed_and_retried_as_its_status() {
    type Check = fn(&LlmError) -> bool;
    let cases: [(u16, &str, usize, Check); 9] = [
        (400, "ValidationException", 1, |e| matches!(e, LlmError::InvalidRequest { status: 400, .. })),
        (403, "AccessDeniedException", 1, |e| matches!(e, LlmError::Authentication { status: 403, .. })),
        (404, "ResourceNotFoundException", 1, |e| matches!(e, LlmError::InvalidRequest { status: 404, .. })),
        (424, "ModelErrorException", 1, |e| matches!(e, LlmError::InvalidRequest { status: 424, .. })),
        (429, "ThrottlingException", 2, |e| matches!(e, LlmError::RateLimited { .. })),
        (429, "ModelNotReadyException", 2, |e| matches!(e, LlmError::RateLimited { .. })),
        (408, "ModelTimeoutException", 2, |e| matches!(e, LlmError::Server { status: 408, .. })),
        (500, "InternalServerException", 2, |e| matches!(e, LlmError::Server { status: 500, .. })),
        (503, "ServiceUnavailableException", 2, |e| matches!(e, LlmError::Server { status: 503, .. })),
    ];
    for stream in [false, true] {
        for (status, kind, attempts, check) in cases {
            let imitation = Imitation::new(Auth::SigV4 { token: true }, vec![Answer::Fail(status, kind); 2]);
            let server = imitation.serve().await;
            let request = ChatRequest::new(CLAUDE, vec![Message::user("Hi")]);
            let model = model(&server, true);
            let err = if stream { streamed(&model, &request).await } else { model.chat(&request).await }.unwrap_err();
            assert!(check(&err), "{kind}: {err:?}");
            assert!(err.to_string().contains(&format!("{kind}: {kind} by the test")), "{err}");
            // Every attempt, retries included, was signed anew and accepted.
            assert_eq!(server.requests().len(), attempts, "{kind}");
            assert_eq!(imitation.problems(), Vec::<String>::new());
        }
    }
}

#[tokio::test]
async fn a_two_turn_tool_loop_with_reasoning() {
    for stream in [false, true] {
        let thinking = json!({"reasoningContent": {"reasoningText": {
            "text": "The user wants Oslo's weather: call the tool.", "signature": "EqoBCkgIARABGAIiQHsig=="}}});
        let imitation = Imitation::new(
            Auth::SigV4 { token: true },
            vec![
                answer(
                    vec![
                        thinking.clone(),
                        json!({"reasoningContent": {"redactedContent": "cmVkYWN0ZWQgdGhvdWdodHM="}}),
                        json!({"text": "Let me look."}),
                        json!({"toolUse": {"toolUseId": "tooluse_Oslo1", "name": "get_weather", "input": {"city": "Oslo"}}}),
                    ],
                    "tool_use",
                ),
                answer(vec![json!({"text": "It is sunny in Oslo."})], "end_turn"),
            ],
        );
        let server = imitation.serve().await;
        let model = model(&server, true);
        let ask = |messages: Vec<Message>| {
            ChatRequest::new(CLAUDE, messages).tools(vec![weather()]).reasoning_effort(ReasoningEffort::Low)
        };
        let first = ask(vec![Message::user("Weather in Oslo?")]);
        let reply = if stream { streamed(&model, &first).await } else { model.chat(&first).await }.unwrap();
        assert_eq!(imitation.problems(), Vec::<String>::new());
        assert_eq!(reply.stop_reason, StopReason::ToolUse);
        assert_eq!(
            reply.message.content,
            vec![
                ContentBlock::Reasoning(Reasoning::new(
                    "bedrock",
                    "The user wants Oslo's weather: call the tool.",
                    json!({"signature": "EqoBCkgIARABGAIiQHsig=="})
                )),
                ContentBlock::Reasoning(Reasoning::new("bedrock", "", json!({"redacted": "cmVkYWN0ZWQgdGhvdWdodHM="}))),
                ContentBlock::text("Let me look."),
                ContentBlock::ToolUse(ToolUse::new("tooluse_Oslo1", "get_weather", json!({"city": "Oslo"}))),
            ]
        );
        let sent = &server.requests()[0].body;
        assert_eq!(
            sent["additionalModelRequestFields"],
            json!({"thinking": {"type": "enabled", "budget_tokens": 1024}})
        );
        assert_eq!(sent["inferenceConfig"], json!({"maxTokens": 1024 + 4096}));

        // The reasoning is saved with the message (as a run's documents keep it) and
        // read back; a fallback's reasoning from another provider is in the history too.
        let saved: Message = serde_json::from_value(serde_json::to_value(&reply.message).unwrap()).unwrap();
        let earlier = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Reasoning(Reasoning::new("anthropic", "Someone else's.", json!({"signature": "a"}))),
                ContentBlock::text("Hello."),
            ],
        };
        let result =
            ToolResult { tool_use_id: "tooluse_Oslo1".into(), content: "Sunny, 21 °C".into(), is_error: false };
        let second = ask(vec![
            Message::user("Hi"),
            earlier,
            Message::user("Weather in Oslo?"),
            saved,
            Message::tool_results([result]),
        ]);
        let reply = if stream { streamed(&model, &second).await } else { model.chat(&second).await }.unwrap();
        assert_eq!(imitation.problems(), Vec::<String>::new());
        assert_eq!(reply.message.text(), "It is sunny in Oslo.");
        let sent = &server.requests()[1].body;
        assert_eq!(
            sent["messages"][1]["content"],
            json!([{"text": "Hello."}]),
            "other providers' reasoning is left out"
        );
        assert_eq!(sent["messages"][3]["content"][0], thinking, "the reasoning comes back unchanged");
        assert_eq!(
            sent["messages"][4]["content"],
            json!([
                {"toolResult": {"toolUseId": "tooluse_Oslo1", "content": [{"text": "Sunny, 21 °C"}], "status": "success"}},
                {"cachePoint": {"type": "default"}},
            ])
        );
    }
}

#[tokio::test]
async fn a_changed_or_missing_reasoning_is_refused_by_the_imitation() {
    let thinking = json!({"reasoningContent": {"reasoningText": {"text": "Think.", "signature": "sig"}}});
    let tool = json!({"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Oslo"}}});
    let imitation = Imitation::new(Auth::SigV4 { token: true }, vec![answer(vec![thinking, tool], "tool_use")]);
    let server = imitation.serve().await;
    let model = model(&server, true);
    let ask = |messages: Vec<Message>| {
        ChatRequest::new(CLAUDE, messages).tools(vec![weather()]).reasoning_effort(ReasoningEffort::Low)
    };
    let reply = model.chat(&ask(vec![Message::user("Weather?")])).await.unwrap();
    let result =
        || Message::tool_results([ToolResult { tool_use_id: "t1".into(), content: "Sunny".into(), is_error: false }]);
    let mut changed = reply.message.clone();
    let ContentBlock::Reasoning(reasoning) = &mut changed.content[0] else { panic!("reasoning first") };
    reasoning.text.push('!');
    let err = model.chat(&ask(vec![Message::user("Weather?"), changed, result()])).await.unwrap_err();
    assert!(
        matches!(err, LlmError::InvalidRequest { status: 400, ref message, .. } if message.contains("modified")),
        "{err}"
    );
    let mut dropped = reply.message.clone();
    dropped.content.remove(0);
    let err = model.chat(&ask(vec![Message::user("Weather?"), dropped, result()])).await.unwrap_err();
    assert!(
        matches!(err, LlmError::InvalidRequest { ref message, .. } if message.contains("Expected `thinking`")),
        "{err}"
    );
}

#[tokio::test]
async fn streaming_equals_non_streaming() {
    let answers = [
        answer(vec![json!({"text": "Plain text, ünïcödé, and more."})], "end_turn"),
        answer(
            vec![
                json!({"reasoningContent": {"reasoningText": {"text": "Two tools.", "signature": "c2ln"}}}),
                json!({"toolUse": {"toolUseId": "a", "name": "get_weather", "input": {"city": "Oslo"}}}),
                json!({"toolUse": {"toolUseId": "b", "name": "get_weather", "input": {"city": "Bergen", "days": [1, 2]}}}),
            ],
            "tool_use",
        ),
        answer(vec![json!({"text": "Cut"})], "max_tokens"),
        answer(vec![], "content_filtered"),
    ];
    for answer in answers {
        let imitation = Imitation::new(Auth::SigV4 { token: true }, vec![answer.clone(), answer]);
        let server = imitation.serve().await;
        let model = model(&server, true);
        let request = ChatRequest::new(CLAUDE, vec![Message::user("Go")]).tools(vec![weather()]);
        let whole = model.chat(&request).await.unwrap();
        let pieces = streamed(&model, &request).await.unwrap();
        assert_eq!(imitation.problems(), Vec::<String>::new());
        assert_eq!(whole, pieces);
        let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
        assert!(paths[1].ends_with("/converse-stream"), "{paths:?}");
        assert_eq!(server.requests()[1].header("accept"), Some("application/vnd.amazon.eventstream"));
    }
}

#[tokio::test]
async fn images_guardrails_and_provider_options() {
    const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d];
    let imitation = Imitation::new(
        Auth::SigV4 { token: true },
        vec![answer(vec![json!({"text": "Blocked."})], "guardrail_intervened")],
    );
    let server = imitation.serve().await;
    let guardrail = json!({"guardrailIdentifier": "gr-abc123", "guardrailVersion": "1", "trace": "enabled"});
    let request = ChatRequest::new(
        "mistral.pixtral-large-2502-v1:0",
        vec![Message::user_with_images("What is this?", [Image::from_bytes(PNG).unwrap()])],
    )
    .provider_options("bedrock", json!({ "guardrailConfig": guardrail }));
    let response = model(&server, true).chat(&request).await.unwrap();
    assert_eq!(imitation.problems(), Vec::<String>::new());
    assert_eq!(response.stop_reason, StopReason::Other("guardrail_intervened".into()));
    let sent = &server.requests()[0].body;
    assert_eq!(sent["guardrailConfig"], guardrail);
    assert_eq!(sent["messages"][0]["content"][1]["image"]["format"], "png");
}

/// A scripted stream reply of these frames.
fn stream_reply(frames: Vec<Vec<u8>>) -> Reply {
    Reply::raw(200, "application/vnd.amazon.eventstream", frames.concat()).pieces(&[3, 50])
}

async fn stream_outcome(reply: Reply) -> (Vec<StreamEvent>, LlmError) {
    let server = Server::start(vec![reply]).await;
    let model = model(&server, true).timeout(Duration::from_secs(5));
    let request = ChatRequest::new(CLAUDE, vec![Message::user("Hi")]);
    let mut events = Vec::new();
    let mut items = model.stream(&request);
    while let Some(item) = items.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => {
                assert!(items.next().await.is_none(), "an error ends the stream");
                return (events, error);
            }
        }
    }
    panic!("the stream ended without an error: {events:?}");
}

#[tokio::test]
async fn broken_streams_are_typed_errors() {
    let usage = json!({"inputTokens": 1, "outputTokens": 1, "totalTokens": 2});
    let good = stream_events(&[json!({"text": "Hello there"})], "end_turn", &usage);
    let is_malformed = |error: &LlmError, what: &str| matches!(error, LlmError::MalformedResponse { provider: "bedrock", message, .. } if message.contains(what));

    // A payload byte changed: the message CRC fails, after the events before it.
    let mut corrupt = good.clone();
    let last = corrupt[2].len() - 8;
    corrupt[2][last] ^= 0x01;
    let (events, error) = stream_outcome(stream_reply(corrupt)).await;
    assert!(is_malformed(&error, "checksum does not match"), "{error}");
    assert_eq!(events, vec![StreamEvent::TextDelta { index: 0, text: "Hello".into() }]);

    // A prelude's CRC broken.
    let mut corrupt = good.clone();
    corrupt[1][9] ^= 0xff;
    let (_, error) = stream_outcome(stream_reply(corrupt)).await;
    assert!(is_malformed(&error, "prelude checksum"), "{error}");

    // The body ends inside a message.
    let mut cut = good[..3].concat();
    cut.extend_from_slice(&good[3][..10]);
    let (_, error) = stream_outcome(Reply::raw(200, "application/vnd.amazon.eventstream", cut)).await;
    assert!(is_malformed(&error, "ended inside a message"), "{error}");

    // The body ends between messages, before messageStop.
    let (events, error) = stream_outcome(stream_reply(good[..3].to_vec())).await;
    assert!(is_malformed(&error, "before messageStop"), "{error}");
    assert_eq!(events.len(), 2);

    // A prelude announcing 1 GiB: refused at once.
    let mut huge = (1u32 << 30).to_be_bytes().to_vec();
    huge.extend_from_slice(&0u32.to_be_bytes());
    let crc = crc32(&huge);
    huge.extend_from_slice(&crc.to_be_bytes());
    let (_, error) = stream_outcome(stream_reply(vec![good[0].clone(), huge])).await;
    assert!(is_malformed(&error, "larger than the 16 MiB allowed"), "{error}");

    // An exception in the stream: its typed error, after the text so far.
    let throttled = vec![good[0].clone(), good[1].clone(), exception_frame("throttlingException", "Too many tokens")];
    let (events, error) = stream_outcome(stream_reply(throttled)).await;
    assert!(
        matches!(error, LlmError::RateLimited { ref message, .. } if message == "throttlingException: Too many tokens")
    );
    assert_eq!(events.len(), 1);
    let failed = vec![good[0].clone(), exception_frame("modelStreamErrorException", "The model stream failed")];
    let (_, error) = stream_outcome(stream_reply(failed)).await;
    assert!(error.is_retryable(), "{error}");

    // The connection closes early; the server goes silent.
    let (_, error) = stream_outcome(stream_reply(good[..3].to_vec()).truncated()).await;
    assert!(matches!(error, LlmError::Connection { .. }), "{error}");
    let server = Server::start(vec![stream_reply(good[..2].to_vec()).then_hang()]).await;
    let model = model(&server, true).timeout(Duration::from_millis(300));
    let request = ChatRequest::new(CLAUDE, vec![Message::user("Hi")]);
    let items: Vec<_> = model.stream(&request).collect().await;
    assert!(matches!(items.last(), Some(Err(LlmError::Timeout { .. }))), "{items:?}");
}
