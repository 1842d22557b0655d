//! The OpenAI Responses API (`POST /v1/responses`) for the suite: requests are
//! checked by the strict imitation of [`responses_api`](super::responses_api) (the key,
//! every parameter, each input item's required fields, each `function_call_output`
//! answering a call, and the reasoning items it issued coming back unchanged before
//! their calls, `store: false`), then read into what the suite compares; turns are
//! written as a response object or its typed events, errors as
//! `{"error": {"message", "type", "param", "code"}}`.

use crate::testing::{API_KEY, Answer, Failure, Imitation, Part, Reply, Request, Seen, SeenMessage, Turn};
use crate::{Role, StopReason};
use serde_json::{Value, json};

use super::responses_api::{ResponsesApi, events};
use super::{field, string};

/// The Responses API for the suite, at the path and with the key header of `api`.
pub struct Responses {
    api: ResponsesApi,
}

impl Responses {
    /// OpenAI's API, with the suite's key.
    pub fn openai() -> Self {
        Self { api: ResponsesApi::openai(API_KEY) }
    }

    /// The API as `api` is set up (Azure's paths and key header).
    pub fn at(api: ResponsesApi) -> Self {
        Self { api }
    }
}

/// The text of an input item's content: a string, or its text parts; images too.
fn read_content(content: &Value, at: &str) -> Result<Vec<Part>, String> {
    match content {
        Value::String(text) => Ok(vec![Part::Text(text.clone())]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let at = format!("{at}[{i}]");
                match string(item, "type", &at)? {
                    "input_text" | "output_text" => Ok(Part::Text(string(item, "text", &at)?.into())),
                    "input_image" => {
                        let url = string(item, "image_url", &at)?;
                        Ok(match url.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,")) {
                            Some((media_type, data)) => {
                                Part::Image { media_type: media_type.into(), data: data.into() }
                            }
                            None => Part::ImageUrl(url.into()),
                        })
                    }
                    other => Err(format!("{at}.type: `{other}` is not imitated")),
                }
            })
            .collect(),
        _ => Err(format!("{at}: a string or a list of content parts")),
    }
}

/// Adds a part to the last message if it is `role`'s, else to a new one.
fn push(messages: &mut Vec<SeenMessage>, role: Role, part: Part) {
    match messages.last_mut() {
        Some(last) if last.role == role => last.parts.push(part),
        _ => messages.push(SeenMessage::new(role, vec![part])),
    }
}

impl Imitation for Responses {
    fn read(&self, request: &Request) -> Result<Seen, String> {
        self.api.check_request(request).map_err(|refusal| refusal.message())?;
        let body = &request.body;
        let mut seen = Seen::default();
        seen.model = string(body, "model", "body")?.to_owned();
        seen.stream = body.get("stream") == Some(&Value::Bool(true));
        seen.system = body.get("instructions").and_then(Value::as_str).map(str::to_owned);
        seen.max_tokens = body.get("max_output_tokens").and_then(Value::as_u64);
        seen.thinking = body.get("reasoning").is_some_and(|r| r["effort"] != "none");
        if body.get("store") != Some(&Value::Bool(false)) {
            return Err("store: the provider is stateless and must send `store: false`".into());
        }
        if seen.thinking && body["include"] != json!(["reasoning.encrypted_content"]) {
            return Err("include: reasoning without `store` needs `reasoning.encrypted_content`".into());
        }
        seen.response_schema = body.pointer("/text/format/schema").cloned();
        for tool in body.get("tools").and_then(Value::as_array).into_iter().flatten() {
            seen.tools.push(string(tool, "name", "tools[]")?.into());
        }
        for (i, item) in field(body, "input", "body")?.as_array().into_iter().flatten().enumerate() {
            let at = format!("input[{i}]");
            match item.get("type").and_then(Value::as_str).unwrap_or("message") {
                "message" => {
                    let role = match string(item, "role", &at)? {
                        "assistant" => Role::Assistant,
                        "user" => Role::User,
                        other => return Err(format!("{at}.role: `{other}` (the system prompt is `instructions`)")),
                    };
                    for part in read_content(field(item, "content", &at)?, &format!("{at}.content"))? {
                        push(&mut seen.messages, role, part);
                    }
                }
                "function_call" => {
                    let arguments = string(item, "arguments", &at)?;
                    let input =
                        serde_json::from_str(arguments).map_err(|e| format!("{at}.arguments: not JSON ({e})"))?;
                    let id = Some(string(item, "call_id", &at)?.to_owned());
                    let call = Part::ToolCall { id, name: string(item, "name", &at)?.into(), input };
                    push(&mut seen.messages, Role::Assistant, call);
                }
                "function_call_output" => {
                    let content = match field(item, "output", &at)? {
                        Value::String(text) => text.clone(),
                        other => read_content(other, &format!("{at}.output"))?
                            .into_iter()
                            .filter_map(|p| if let Part::Text(t) = p { Some(t) } else { None })
                            .collect(),
                    };
                    let id = Some(string(item, "call_id", &at)?.to_owned());
                    push(&mut seen.messages, Role::User, Part::ToolResult { id, content, is_error: None });
                }
                "reasoning" => {
                    let token = string(item, "encrypted_content", &at)?.to_owned();
                    push(&mut seen.messages, Role::Assistant, Part::Reasoning { token });
                }
                other => return Err(format!("{at}.type: `{other}` is not imitated")),
            }
        }
        Ok(seen)
    }

    fn reply(&self, turn: &Turn, seen: &Seen) -> Reply {
        match turn {
            Turn::Answer(answer) => {
                let response = self.response(answer);
                if seen.stream {
                    Reply::sse(events(&response)).pieces(&[19, 3, 64])
                } else {
                    Reply::json(200, response)
                }
            }
            Turn::Hang(answer) => Reply::sse(up_to_first_text(&events(&self.response(answer)))).then_hang(),
            Turn::Fail(failure) => self.fail(failure, seen),
        }
    }
}

impl Responses {
    /// The response object of an answer; its reasoning is recorded as issued, so it
    /// must come back unchanged (before the answer's first call).
    fn response(&self, answer: &Answer) -> Value {
        let mut output = Vec::new();
        if let Some(thought) = &answer.reasoning {
            let item = json!({"type": "reasoning", "id": "rs_conformance",
                              "summary": [{"type": "summary_text", "text": thought.text}],
                              "encrypted_content": thought.token});
            self.api.issue(item.clone(), answer.calls.first().map(|c| c.id.clone()));
            output.push(item);
        }
        if !answer.text.is_empty() {
            output.push(json!({"type": "message", "id": "msg_conformance", "status": "completed", "role": "assistant",
                               "content": [{"type": "output_text", "text": answer.text, "annotations": []}]}));
        }
        for (n, call) in answer.calls.iter().enumerate() {
            output.push(json!({"type": "function_call", "id": format!("fc_conformance_{n}"), "call_id": call.id,
                               "name": call.name, "arguments": call.input.to_string(), "status": "completed"}));
        }
        let cut = answer.stop == StopReason::MaxTokens;
        let u = &answer.usage;
        // `input_tokens` counts the cached ones.
        let input = u.input_tokens + u.cache_read_input_tokens;
        json!({
            "id": answer.id, "object": "response", "created_at": 1_767_225_600,
            "status": if cut { "incomplete" } else { "completed" }, "error": null,
            "incomplete_details": if cut { json!({"reason": "max_output_tokens"}) } else { Value::Null },
            "instructions": null, "model": answer.model, "output": output, "parallel_tool_calls": true,
            "store": false, "temperature": 1.0,
            "usage": {
                "input_tokens": input, "input_tokens_details": {"cached_tokens": u.cache_read_input_tokens},
                "output_tokens": u.output_tokens,
                "output_tokens_details": {"reasoning_tokens": u.reasoning_output_tokens},
                "total_tokens": input + u.output_tokens,
            },
        })
    }

    fn fail(&self, failure: &Failure, seen: &Seen) -> Reply {
        let message = failure.message();
        let error = |status: u16, kind: &str, code: Value| {
            Reply::json(status, json!({"error": {"message": message, "type": kind, "param": null, "code": code}}))
                .header("x-request-id", "req_conformance")
        };
        match failure {
            Failure::Authentication => error(401, "invalid_request_error", json!("invalid_api_key")),
            Failure::InvalidRequest => error(400, "invalid_request_error", Value::Null),
            Failure::RateLimited { retry_after } => error(429, "requests", json!("rate_limit_exceeded"))
                .header("retry-after", &retry_after.as_secs().to_string()),
            Failure::Overloaded => error(503, "server_error", Value::Null),
            Failure::Server => error(500, "server_error", Value::Null),
            // A response without its `output`; a stream whose first event is not JSON.
            Failure::Malformed if seen.stream => {
                Reply::sse("event: response.created\ndata: {\"type\": \"response.created\", \"resp\n\n")
            }
            Failure::Malformed => Reply::json(200, json!({"id": "resp_1", "object": "response"})),
            Failure::Truncated(answer) if seen.stream => {
                Reply::sse(up_to_first_text(&events(&self.response(answer)))).truncated()
            }
            Failure::Truncated(answer) => Reply::json(200, self.response(answer)).truncated(),
        }
    }
}

/// The events of a stream up to and including its first text delta.
pub fn up_to_first_text(sse: &str) -> String {
    let start = sse.find("event: response.output_text.delta\n").expect("the answer streams text");
    let end = start + sse[start..].find("\n\n").expect("each event ends with a blank line") + 2;
    sse[..end].to_owned()
}
