//! Bedrock Runtime's `Converse` (`POST /model/{modelId}/converse`) and
//! `ConverseStream` (`/converse-stream`) for the suite, with a Bedrock API key (the
//! suite's key as `Authorization: Bearer`; SigV4 signing is tested by
//! `loopstack-model/tests/bedrock.rs`): requests are checked by the strict imitation of
//! [`bedrock_api`](super::bedrock_api) (the key, the fields of the request, its
//! messages' alternation and blocks, each `toolResult` answering a `toolUse` of the
//! turn before, the reasoning blocks it wrote coming back unchanged), then read into
//! what the suite compares; turns are written as a Converse response or AWS
//! event-stream frames, errors with Bedrock's statuses and `x-amzn-errortype`.

use std::sync::{Mutex, PoisonError};

use crate::testing::{API_KEY, Answer, Failure, Imitation, Part, Reply, Request, Seen, SeenMessage, Turn};
use crate::{Role, StopReason};
use serde_json::{Value, json};

use super::bedrock_api::{Auth, check_auth, check_converse, decode_label, error_reply, stream_events};

/// Converse for the suite; it remembers the reasoning blocks it wrote, which the
/// model verifies when they come back.
#[derive(Default)]
pub struct Converse {
    issued: Mutex<Vec<Value>>,
}

fn read_blocks(blocks: &[Value], at: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let image = |image: &Value| Part::Image {
        media_type: format!("image/{}", image["format"].as_str().unwrap_or_default()),
        data: image.pointer("/source/bytes").and_then(Value::as_str).unwrap_or_default().into(),
    };
    for (j, block) in blocks.iter().enumerate() {
        if let Some(text) = block.get("text").and_then(Value::as_str) {
            parts.push(Part::Text(text.into()));
        } else if let Some(picture) = block.get("image") {
            parts.push(image(picture));
        } else if let Some(call) = block.get("toolUse") {
            let id = call["toolUseId"].as_str().map(str::to_owned);
            let name = call["name"].as_str().unwrap_or_default().into();
            parts.push(Part::ToolCall { id, name, input: call["input"].clone() });
        } else if let Some(result) = block.get("toolResult") {
            let id = result["toolUseId"].as_str().map(str::to_owned);
            let mut images = Vec::new();
            let mut content = String::new();
            for item in result["content"].as_array().into_iter().flatten() {
                if let Some(text) = item.get("text").and_then(Value::as_str) {
                    content.push_str(text);
                } else if let Some(json) = item.get("json") {
                    content.push_str(&json.to_string());
                } else if let Some(picture) = item.get("image") {
                    images.push(image(picture));
                }
            }
            let is_error = Some(result.get("status").and_then(Value::as_str) == Some("error"));
            parts.push(Part::ToolResult { id, content, is_error });
            parts.extend(images);
        } else if let Some(reasoning) = block.get("reasoningContent") {
            let token = reasoning
                .pointer("/reasoningText/signature")
                .and_then(Value::as_str)
                .ok_or(format!("{at}.content[{j}]: reasoning without its signature"))?;
            parts.push(Part::Reasoning { token: token.into() });
        } else if block.get("cachePoint").is_none() {
            return Err(format!("{at}.content[{j}]: a block the imitation does not read: {block}"));
        }
    }
    Ok(parts)
}

impl Imitation for Converse {
    fn read(&self, request: &Request) -> Result<Seen, String> {
        check_auth(Auth::Bearer(API_KEY), request).map_err(|m| format!("403 {m}"))?;
        let issued = self.issued.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut seen = Seen::default();
        seen.stream = check_converse(request, &issued, false).map_err(|m| format!("400 ValidationException: {m}"))?;
        let label = request.path.trim_start_matches("/model/").rsplit_once('/').map_or("", |(label, _)| label);
        seen.model = decode_label(label)?;
        let body = &request.body;
        if let Some(system) = body.get("system").and_then(Value::as_array) {
            seen.system = Some(system.iter().filter_map(|b| b["text"].as_str()).collect());
        }
        seen.max_tokens = body.pointer("/inferenceConfig/maxTokens").and_then(Value::as_u64);
        seen.thinking = body.pointer("/additionalModelRequestFields/thinking/type") == Some(&json!("enabled"));
        for tool in body.pointer("/toolConfig/tools").and_then(Value::as_array).into_iter().flatten() {
            if let Some(name) = tool.pointer("/toolSpec/name").and_then(Value::as_str) {
                seen.tools.push(name.into());
            }
        }
        for (i, message) in body["messages"].as_array().into_iter().flatten().enumerate() {
            let role = if message["role"] == "assistant" { Role::Assistant } else { Role::User };
            let blocks = message["content"].as_array().map_or(&[][..], Vec::as_slice);
            seen.messages.push(SeenMessage::new(role, read_blocks(blocks, &format!("messages[{i}]"))?));
        }
        Ok(seen)
    }

    fn reply(&self, turn: &Turn, seen: &Seen) -> Reply {
        match turn {
            Turn::Answer(answer) if seen.stream => {
                let (content, stop, usage) = self.message(answer);
                stream(stream_events(&content, stop, &usage).concat()).pieces(&[5, 31, 200, 1])
            }
            Turn::Answer(answer) => {
                let (content, stop, usage) = self.message(answer);
                Reply::json(
                    200,
                    json!({"output": {"message": {"role": "assistant", "content": content}},
                           "stopReason": stop, "usage": usage, "metrics": {"latencyMs": 42}}),
                )
                .header("x-amzn-requestid", "req-conformance")
            }
            Turn::Hang(answer) => stream(self.up_to_first_text(answer)).then_hang(),
            Turn::Fail(failure) => self.fail(failure, seen),
        }
    }
}

/// A ConverseStream reply of these frames.
fn stream(frames: Vec<u8>) -> Reply {
    Reply::raw(200, "application/vnd.amazon.eventstream", frames).header("x-amzn-requestid", "req-conformance")
}

impl Converse {
    /// The content blocks, stop reason and usage of an answer; its reasoning is
    /// recorded as written.
    fn message(&self, answer: &Answer) -> (Vec<Value>, &'static str, Value) {
        let mut content = Vec::new();
        if let Some(thought) = &answer.reasoning {
            let block =
                json!({"reasoningContent": {"reasoningText": {"text": thought.text, "signature": thought.token}}});
            self.issued.lock().unwrap_or_else(PoisonError::into_inner).push(block.clone());
            content.push(block);
        }
        if !answer.text.is_empty() {
            content.push(json!({"text": answer.text}));
        }
        for call in &answer.calls {
            content.push(json!({"toolUse": {"toolUseId": call.id, "name": call.name, "input": call.input}}));
        }
        let stop = match answer.stop {
            StopReason::ToolUse => "tool_use",
            StopReason::MaxTokens => "max_tokens",
            _ => "end_turn",
        };
        let u = &answer.usage;
        // `inputTokens` leaves out the tokens read from and written to the cache.
        let mut usage = json!({"inputTokens": u.input_tokens, "outputTokens": u.output_tokens,
                               "totalTokens": u.input_tokens + u.output_tokens + u.cache_read_input_tokens
                                   + u.cache_creation_input_tokens});
        if u.cache_read_input_tokens > 0 {
            usage["cacheReadInputTokens"] = u.cache_read_input_tokens.into();
        }
        if u.cache_creation_input_tokens > 0 {
            usage["cacheWriteInputTokens"] = u.cache_creation_input_tokens.into();
        }
        (content, stop, usage)
    }

    /// The frames of a text answer's stream up to its first text delta: the
    /// `messageStart` and the first piece of text.
    fn up_to_first_text(&self, answer: &Answer) -> Vec<u8> {
        let (content, stop, usage) = self.message(answer);
        assert!(content[0].get("text").is_some(), "the suite hangs or cuts text answers");
        stream_events(&content, stop, &usage)[..2].concat()
    }

    fn fail(&self, failure: &Failure, seen: &Seen) -> Reply {
        let message = failure.message();
        match failure {
            // Bedrock refuses credentials with a 403, never a 401.
            Failure::Authentication => error_reply(403, "UnrecognizedClientException", message),
            Failure::InvalidRequest => error_reply(400, "ValidationException", message),
            // Bedrock says no wait with a throttling.
            Failure::RateLimited { .. } => error_reply(429, "ThrottlingException", message),
            Failure::Overloaded => error_reply(503, "ServiceUnavailableException", message),
            Failure::Server => error_reply(500, "InternalServerException", message),
            // A response without its output; a stream that is not event-stream frames.
            Failure::Malformed if seen.stream => stream(b"{\"message\": \"not a frame\"}............".to_vec()),
            Failure::Malformed => Reply::json(200, json!({"stopReason": "end_turn", "metrics": {"latencyMs": 1}})),
            Failure::Truncated(answer) if seen.stream => stream(self.up_to_first_text(answer)).truncated(),
            Failure::Truncated(answer) => {
                let (content, stop, usage) = self.message(answer);
                Reply::json(
                    200,
                    json!({"output": {"message": {"role": "assistant", "content": content}},
                           "stopReason": stop, "usage": usage, "metrics": {"latencyMs": 42}}),
                )
                .truncated()
            }
        }
    }
}
