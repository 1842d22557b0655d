//! A strict imitation of the Bedrock Runtime API's `Converse` and `ConverseStream`,
//! written from the published API reference, for the tests of `Bedrock` (its own and
//! the conformance suite's): it recomputes a request's SigV4 signature on its own (from
//! the request's raw bytes and the test credentials) or checks its API key, refuses
//! requests the API refuses (as `ValidationException`s), and writes answers in the
//! reference's shapes (JSON, or AWS event-stream frames it encodes itself with their
//! CRC32s) and errors as the API sends them.

#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use crate::testing::{Reply, Request};
use serde_json::{Value, json};

/// The region of the test credentials.
pub const REGION: &str = "us-west-2";
/// The test access key id (AWS's documented example).
pub const ACCESS_KEY: &str = "AKIDEXAMPLE";
/// The test secret access key (AWS's documented example).
pub const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
/// The test session token.
pub const SESSION_TOKEN: &str = "FwoGZXIvYXdzEXAMPLETOKEN";
/// The test Bedrock API key.
pub const API_KEY: &str = "ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl";

// ---------------------------------------------------------------------------------
// SigV4, recomputed independently from the published algorithm.

/// SigV4, recomputed independently from the published algorithm.
pub mod sigv4 {
    use hmac::{Hmac, KeyInit as _, Mac as _};
    use sha2::{Digest as _, Sha256};

    /// Lowercase hex of these bytes.
    pub fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The SHA-256 of these bytes, in lowercase hex.
    pub fn sha256_hex(bytes: &[u8]) -> String {
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
    pub fn canonical_uri(path: &str) -> String {
        path.split('/').map(uri_encode).collect::<Vec<_>>().join("/")
    }

    /// The signature of a request: `headers` are the signed ones, lower-case, sorted.
    pub fn signature(
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

/// Seconds since the epoch of an `x-amz-date` (`20250102T030405Z`).
pub fn amz_date_seconds(date: &str) -> Option<i64> {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// SigV4 with the test credentials, with or without the session token.
    SigV4 {
        /// Whether the session token must be sent (`x-amz-security-token`).
        token: bool,
    },
    /// A Bedrock API key: this one.
    Bearer(&'static str),
}

/// Checks a request's authorization as Bedrock does.
pub fn check_auth(auth: Auth, req: &Request) -> Result<(), String> {
    let authorization = req.header("authorization").ok_or("no Authorization header")?;
    let Auth::SigV4 { token } = auth else {
        return match authorization.strip_prefix("Bearer ") {
            Some(key) if matches!(auth, Auth::Bearer(want) if want == key) => Ok(()),
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

/// The CRC32 (IEEE) of these bytes, as event-stream frames carry it.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// An AWS event-stream frame of these headers (string-valued) and payload, with
/// its prelude and message CRCs.
pub fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
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
pub fn event(kind: &str, mut payload: Value) -> Vec<u8> {
    payload["p"] = json!("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ");
    frame(
        &[(":event-type", kind), (":content-type", "application/json"), (":message-type", "event")],
        payload.to_string().as_bytes(),
    )
}

/// An exception frame of this kind and message, as ConverseStream sends an error
/// mid-stream.
pub fn exception_frame(kind: &str, message: &str) -> Vec<u8> {
    frame(
        &[(":exception-type", kind), (":content-type", "application/json"), (":message-type", "exception")],
        json!({ "message": message }).to_string().as_bytes(),
    )
}

/// `text` in two pieces (at a character boundary), or one when too short.
pub fn halves(text: &str) -> Vec<&str> {
    let mid = (0..=text.len() / 2).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    if mid == 0 { vec![text] } else { vec![&text[..mid], &text[mid..]] }
}

/// The ConverseStream events of an answer: its blocks as starts, deltas and stops.
pub fn stream_events(content: &[Value], stop: &str, usage: &Value) -> Vec<Vec<u8>> {
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

/// An error reply of this status, `x-amzn-errortype` and message, as Bedrock
/// answers one.
pub fn error_reply(status: u16, kind: &str, message: &str) -> Reply {
    Reply::json(status, json!({ "message": message }))
        .header("x-amzn-errortype", &format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"))
        .header("x-amzn-requestid", "req-err")
}

/// Decodes a URI label (`%3A` and the like).
pub fn decode_label(label: &str) -> Result<String, String> {
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

/// Refuses an object with a key not among `allowed` (or a value that is not an
/// object), as Bedrock's validation does.
pub fn only_keys(value: &Value, allowed: &[&str], what: &str) -> Result<(), String> {
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

/// Checks a `cachePoint` block: `{"type": "default"}`.
pub fn cache_point(value: &Value) -> Result<(), String> {
    (value == &json!({"type": "default"})).then_some(()).ok_or_else(|| format!("a bad cachePoint {value}"))
}

/// Checks a request as the Converse reference describes it; `Ok(stream)`. Each
/// `reasoningContent` and `toolUse` block sent back must be one of `issued`.
pub fn check_request(req: &Request, issued: &[Value]) -> Result<bool, String> {
    check_converse(req, issued, true)
}

/// [`check_request`], the `toolUse` blocks checked against `issued` only when
/// `tool_uses_issued` (a conversation may carry calls written elsewhere, as Bedrock
/// allows; reasoning is always checked, as the model verifies its signature).
pub fn check_converse(req: &Request, issued: &[Value], tool_uses_issued: bool) -> Result<bool, String> {
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
                    if tool_uses_issued && !issued.contains(block) {
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

/// Checks an image block: its format and its base64 bytes.
pub fn check_image(image: &Value) -> Result<(), String> {
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
