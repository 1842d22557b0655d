//! A server's requests for a person's input during a call (elicitation), as a wait
//! the run survives: the call returns
//! [`ToolOutput::needs_input`](loopstack_core::ToolOutput::needs_input), the agent's
//! run waits for the answer like an approval (durably, across restarts), and the
//! call is made again with it.
//!
//! Both forms of the protocol:
//!
//! - 2026-07-28's multi round-trip requests: the server answers the call with an
//!   `InputRequiredResult` (its requests and an opaque `requestState`); the call is
//!   made again with the `inputResponses` and the state. Stateless: nothing of the
//!   first call needs to be alive for the second.
//! - 2025-11-25's `elicitation/create`, sent by the server while the call runs: the
//!   client cannot hold a live request across a wait a process may not survive, so it
//!   answers `cancel`, and the call (whatever the server made of the cancel) asks
//!   the person instead. Made again with the answer, the call finds the server asking
//!   the same question again, and this client answers it from the person's answer,
//!   matched by the question's text and schema. What the server did before it asked
//!   happens twice: a server's tool that elicits must be safe to run again up to its
//!   question (as it must be anyway: a person may cancel). The questions a server
//!   asks are taken by the call of the connection that ends first after them: with
//!   several calls at once on one connection, one may carry another's question
//!   (2026-07-28's round trips have no such ambiguity).
//!
//! Roots asked for are answered at once (none are offered); a request to sample the
//! client's model fails the call, which says so.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use loopstack_core::{InputAnswer, InputRequest, InputResponse, ToolOutput};
use rmcp::model::{ElicitResult, ElicitationAction, InputRequiredResult, InputResponses};
use serde_json::{Value, json};

/// The most questions one call may wait on at once.
const MAX_ASKS: usize = 16;

/// The questions the server asked during calls, and the answers waiting for the
/// questions of calls made again: shared by a connection and its handler.
#[derive(Default)]
pub(super) struct Elicitations {
    seq: AtomicU64,
    asked: Mutex<Vec<(u64, Value)>>,
    answers: Mutex<HashMap<String, Value>>,
}

impl Elicitations {
    /// A mark: the questions asked after it are [`asked_since`](Self::asked_since) it.
    pub(super) fn mark(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    /// The server's question (`elicitation/create`'s params, as JSON): its answer
    /// when a person gave one for a call made again, else `cancel`, the question
    /// kept for the call to ask.
    pub(super) fn ask(&self, params: Value) -> ElicitResult {
        let key = key(&params);
        if let Some(answer) = self.answers.lock().unwrap_or_else(|e| e.into_inner()).remove(&key) {
            return serde_json::from_value(answer).unwrap_or_else(|_| ElicitResult::new(ElicitationAction::Cancel));
        }
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        if asked.len() >= MAX_ASKS * 4 {
            asked.remove(0);
        }
        asked.push((seq, params));
        ElicitResult::new(ElicitationAction::Cancel)
    }

    /// The questions asked since `mark`, taken.
    pub(super) fn asked_since(&self, mark: u64) -> Vec<Value> {
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        let (taken, kept): (Vec<_>, Vec<_>) = asked.drain(..).partition(|(seq, _)| *seq > mark);
        *asked = kept;
        taken.into_iter().map(|(_, params)| params).take(MAX_ASKS).collect()
    }

    /// Keeps `answer`'s responses for the questions the call made again will meet.
    pub(super) fn answer(&self, answer: &InputAnswer) {
        let Some(asks) = answer.request.state.get("live").and_then(Value::as_array) else { return };
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        for ask in asks {
            let (Some(id), Some(key)) = (ask.get("id").and_then(Value::as_str), ask.get("key").and_then(Value::as_str))
            else {
                continue;
            };
            answers.insert(key.to_owned(), response(answer, id, asks.len() > 1));
        }
    }
}

/// The key a question is matched by: its text and schema (or URL).
fn key(params: &Value) -> String {
    let mut params = params.clone();
    if let Some(object) = params.as_object_mut() {
        object.remove("_meta");
        object.remove("elicitationId");
    }
    params.to_string()
}

/// The response to question `id` in `answer`: the whole content for the one question
/// of a request, the content's property `id` when the request joined several.
fn response(answer: &InputAnswer, id: &str, joined: bool) -> Value {
    match &answer.response {
        InputResponse::Accept(content) => {
            let content = if joined { content.get(id).cloned().unwrap_or_else(|| json!({})) } else { content.clone() };
            json!({ "action": "accept", "content": content })
        }
        InputResponse::Decline => json!({ "action": "decline" }),
        _ => json!({ "action": "cancel" }),
    }
}

/// One question: its id, its text, and the schema of its answer.
struct Ask {
    id: String,
    message: String,
    schema: Value,
}

impl Ask {
    /// The question `elicitation/create`'s `params` asks.
    fn of(id: String, params: &Value) -> Self {
        let message = params.get("message").and_then(Value::as_str).unwrap_or_default().to_owned();
        if params.get("mode").and_then(Value::as_str) == Some("url") {
            let url = params.get("url").and_then(Value::as_str).unwrap_or_default();
            return Self {
                id,
                message: format!("{message} (open {url}, then answer)"),
                schema: json!({ "type": "object", "properties": {} }),
            };
        }
        let schema = params.get("requestedSchema").cloned().unwrap_or_else(|| json!({ "type": "object" }));
        Self { id, message, schema }
    }
}

/// The input request of `asks` (one question, or several joined under their ids),
/// keeping `state` for the call made again.
fn request(asks: &[Ask], mut state: serde_json::Map<String, Value>) -> ToolOutput {
    let (message, schema) = match asks {
        [one] => (one.message.clone(), one.schema.clone()),
        _ => {
            let properties: serde_json::Map<String, Value> =
                asks.iter().map(|a| (a.id.clone(), a.schema.clone())).collect();
            let required: Vec<&str> = asks.iter().map(|a| a.id.as_str()).collect();
            let message = asks.iter().map(|a| format!("{}: {}", a.id, a.message)).collect::<Vec<_>>().join("\n");
            (message, json!({ "type": "object", "properties": properties, "required": required }))
        }
    };
    state.insert("joined".into(), Value::Bool(asks.len() > 1));
    ToolOutput::needs_input(InputRequest::new(message, schema).state(Value::Object(state)))
}

/// What a call that met the server's live questions asks the person.
pub(super) fn live_request(server: &str, asked: Vec<Value>) -> ToolOutput {
    let asks: Vec<Ask> = asked.iter().enumerate().map(|(i, params)| Ask::of(format!("q{}", i + 1), params)).collect();
    let keys: Vec<Value> = asks.iter().zip(&asked).map(|(a, p)| json!({ "id": a.id, "key": key(p) })).collect();
    let mut state = serde_json::Map::new();
    state.insert("server".into(), json!(server));
    state.insert("live".into(), Value::Array(keys));
    request(&asks, state)
}

/// What a call the server answered with an `InputRequiredResult` asks the person;
/// an error result for requests this client cannot fulfil.
pub(super) fn round_trip_request(server: &str, tool: &str, result: InputRequiredResult) -> ToolOutput {
    let mut asks = Vec::new();
    let mut given = serde_json::Map::new();
    for (id, request) in result.input_requests.unwrap_or_default() {
        let request = serde_json::to_value(&request).unwrap_or(Value::Null);
        match request.get("method").and_then(Value::as_str) {
            Some("elicitation/create") => asks.push(Ask::of(id, &request["params"])),
            // No roots are offered.
            Some("roots/list") => {
                given.insert(id, json!({ "roots": [] }));
            }
            other => {
                return ToolOutput::error(format!(
                    "the MCP server `{server}` asked for `{}` to go on with `{tool}`, which this client does not \
                     offer",
                    other.unwrap_or("an unknown request")
                ));
            }
        }
    }
    if asks.len() > MAX_ASKS {
        return ToolOutput::error(format!(
            "the MCP server `{server}` asked {} questions at once to go on with `{tool}`; at most {MAX_ASKS} are taken",
            asks.len()
        ));
    }
    let mut state = serde_json::Map::new();
    state.insert("server".into(), json!(server));
    state.insert("request_state".into(), result.request_state.map_or(Value::Null, Value::String));
    state.insert("asks".into(), Value::Array(asks.iter().map(|a| Value::String(a.id.clone())).collect()));
    state.insert("given".into(), Value::Object(given));
    if asks.is_empty() {
        // Nothing for a person: the call is made again at once with what was given.
        state.insert("joined".into(), Value::Bool(false));
        return ToolOutput::needs_input(InputRequest::new("", json!({})).state(Value::Object(state)));
    }
    request(&asks, state)
}

/// What a call made again after a round trip sends: the responses and the state.
pub(super) fn round_trip_answer(answer: &InputAnswer) -> Option<(InputResponses, Option<String>)> {
    let state = &answer.request.state;
    let asks = state.get("asks")?.as_array()?;
    let joined = state.get("joined").and_then(Value::as_bool).unwrap_or(false);
    let mut responses: InputResponses =
        state.get("given").and_then(Value::as_object).map(|g| g.clone().into_iter().collect()).unwrap_or_default();
    for id in asks.iter().filter_map(Value::as_str) {
        responses.insert(id.to_owned(), response(answer, id, joined));
    }
    let request_state = state.get("request_state").and_then(Value::as_str).map(str::to_owned);
    Some((responses, request_state))
}

/// Whether a round trip asked nothing of a person: the call is made again at once.
pub(super) fn asks_nobody(output: &ToolOutput) -> bool {
    output.input.as_ref().is_some_and(|r| r.state.get("asks").and_then(Value::as_array).is_some_and(Vec::is_empty))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_asked_again_is_answered_from_the_persons_answer() {
        let elicitations = Elicitations::default();
        let params = json!({ "mode": "form", "message": "How many?", "requestedSchema": { "type": "object" } });
        let mark = elicitations.mark();
        assert_eq!(elicitations.ask(params.clone()).action, ElicitationAction::Cancel);
        let asked = elicitations.asked_since(mark);
        let output = live_request("s", asked);
        let request = output.input.as_deref().unwrap().clone();
        assert_eq!(request.message, "How many?");
        elicitations.answer(&InputAnswer::new(request, InputResponse::Accept(json!({ "n": 4 }))));
        // The same question, its id and meta aside.
        let mut again = params;
        again["_meta"] = json!({ "x": 1 });
        let answered = elicitations.ask(again);
        assert_eq!((answered.action, answered.content), (ElicitationAction::Accept, Some(json!({ "n": 4 }))));
        assert!(elicitations.asked_since(0).is_empty());
    }

    #[test]
    fn several_questions_are_one_request_and_their_answers_split() {
        let result: InputRequiredResult = serde_json::from_value(json!({
            "resultType": "input_required",
            "inputRequests": {
                "amount": { "method": "elicitation/create", "params": { "mode": "form", "message": "How much?", "requestedSchema": { "type": "object", "properties": { "eur": { "type": "integer" } } } } },
                "roots": { "method": "roots/list" },
                "why": { "method": "elicitation/create", "params": { "mode": "form", "message": "Why?", "requestedSchema": { "type": "object", "properties": { "text": { "type": "string" } } } } },
            },
            "requestState": "opaque",
        }))
        .unwrap();
        let output = round_trip_request("s", "refund", result);
        let request = output.input.as_deref().unwrap().clone();
        assert_eq!(request.message, "amount: How much?\nwhy: Why?");
        assert_eq!(request.schema["required"], json!(["amount", "why"]));
        let answer = InputAnswer::new(request, InputResponse::Accept(json!({ "amount": { "eur": 80 }, "why": {} })));
        let (responses, state) = round_trip_answer(&answer).unwrap();
        assert_eq!(state.as_deref(), Some("opaque"));
        assert_eq!(responses["amount"], json!({ "action": "accept", "content": { "eur": 80 } }));
        assert_eq!(responses["roots"], json!({ "roots": [] }));
        let declined = InputAnswer::new(answer.request, InputResponse::Decline);
        assert_eq!(round_trip_answer(&declined).unwrap().0["why"], json!({ "action": "decline" }));
    }

    #[test]
    fn sampling_is_refused_in_words() {
        let result: InputRequiredResult = serde_json::from_value(json!({
            "resultType": "input_required",
            "inputRequests": { "s": { "method": "sampling/createMessage", "params": { "messages": [], "maxTokens": 10 } } },
        }))
        .unwrap();
        let output = round_trip_request("s", "t", result);
        assert!(output.is_error && output.to_text().contains("sampling/createMessage"), "{output:?}");
    }
}
