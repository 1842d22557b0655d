//! A2A 0.3's JSON-RPC methods (`message/send`, `message/stream`, `tasks/get`,
//! `tasks/cancel`, `tasks/resubscribe`), answered for clients that speak it: their
//! requests read as 1.0's, the answers written back in 0.3's shapes (objects tagged
//! with `kind`, lowercase roles and states, file parts, a status update's `final`).
//!
//! Written by hand from 0.3's specification: the official Rust types are 1.0's, and
//! the translation is a handful of renames over JSON.

use loopstack_core::serde_json::{Map, Value, json};

/// The 1.0 method of a 0.3 method.
pub(super) fn method(method: &str) -> Option<&'static str> {
    Some(match method {
        "message/send" => ::a2a::methods::SEND_MESSAGE,
        "message/stream" => ::a2a::methods::SEND_STREAMING_MESSAGE,
        "tasks/get" => ::a2a::methods::GET_TASK,
        "tasks/cancel" => ::a2a::methods::CANCEL_TASK,
        "tasks/resubscribe" => ::a2a::methods::SUBSCRIBE_TO_TASK,
        "tasks/pushNotificationConfig/set" => ::a2a::methods::CREATE_PUSH_CONFIG,
        "tasks/pushNotificationConfig/get" => ::a2a::methods::GET_PUSH_CONFIG,
        "tasks/pushNotificationConfig/list" => ::a2a::methods::LIST_PUSH_CONFIGS,
        "tasks/pushNotificationConfig/delete" => ::a2a::methods::DELETE_PUSH_CONFIG,
        "agent/getAuthenticatedExtendedCard" => ::a2a::methods::GET_EXTENDED_AGENT_CARD,
        _ => return None,
    })
}

/// A 0.3 request's params, as 1.0 reads them: its message's role and parts, and
/// `configuration.blocking: false` as `returnImmediately`.
pub(super) fn params(mut params: Value) -> Value {
    if let Some(message) = params.get_mut("message") {
        message_in(message);
    }
    if let Some(configuration) = params.get_mut("configuration").and_then(Value::as_object_mut)
        && let Some(blocking) = configuration.remove("blocking")
    {
        configuration.insert("returnImmediately".to_owned(), Value::Bool(blocking == Value::Bool(false)));
    }
    params
}

fn message_in(message: &mut Value) {
    let Some(message) = message.as_object_mut() else { return };
    message.remove("kind");
    if let Some(role) = message.get_mut("role") {
        *role = match role.as_str() {
            Some("user") => json!("ROLE_USER"),
            Some("agent") => json!("ROLE_AGENT"),
            _ => role.take(),
        };
    }
    if let Some(parts) = message.get_mut("parts").and_then(Value::as_array_mut) {
        for part in parts {
            part_in(part);
        }
    }
}

fn part_in(part: &mut Value) {
    let Some(object) = part.as_object_mut() else { return };
    let kind = object.remove("kind");
    if kind.as_ref().and_then(Value::as_str) == Some("file")
        && let Some(Value::Object(mut file)) = object.remove("file")
    {
        if let Some(uri) = file.remove("uri") {
            object.insert("url".to_owned(), uri);
        }
        if let Some(bytes) = file.remove("bytes") {
            object.insert("raw".to_owned(), bytes);
        }
        if let Some(name) = file.remove("name") {
            object.insert("filename".to_owned(), name);
        }
        if let Some(media) = file.remove("mimeType") {
            object.insert("mediaType".to_owned(), media);
        }
    }
}

/// A unary answer in 0.3's shape: `SendMessage`'s `{"task": ...}` as the task
/// itself; a task as 0.3 writes it.
pub(super) fn result(value: Value) -> Value {
    match value {
        Value::Object(mut object) if object.len() == 1 && object.contains_key("task") => {
            task(object.remove("task").unwrap_or(Value::Null))
        }
        Value::Object(mut object) if object.len() == 1 && object.contains_key("message") => {
            message(object.remove("message").unwrap_or(Value::Null))
        }
        task_value => task(task_value),
    }
}

/// A stream's event (a 1.0 `StreamResponse`) as 0.3's result.
pub(super) fn event(value: Value) -> Value {
    let Value::Object(mut object) = value else { return value };
    if let Some(task_value) = object.remove("task") {
        return task(task_value);
    }
    if let Some(message_value) = object.remove("message") {
        return message(message_value);
    }
    if let Some(Value::Object(mut update)) = object.remove("statusUpdate") {
        let state = update.get("status").and_then(|s| s.get("state")).and_then(Value::as_str).unwrap_or_default();
        let last = matches!(
            state,
            "TASK_STATE_COMPLETED"
                | "TASK_STATE_FAILED"
                | "TASK_STATE_CANCELED"
                | "TASK_STATE_REJECTED"
                | "TASK_STATE_INPUT_REQUIRED"
                | "TASK_STATE_AUTH_REQUIRED"
        );
        if let Some(status_value) = update.remove("status") {
            update.insert("status".to_owned(), status(status_value));
        }
        update.insert("kind".to_owned(), json!("status-update"));
        update.insert("final".to_owned(), Value::Bool(last));
        return Value::Object(update);
    }
    if let Some(Value::Object(mut update)) = object.remove("artifactUpdate") {
        if let Some(artifact_value) = update.remove("artifact") {
            update.insert("artifact".to_owned(), artifact(artifact_value));
        }
        update.insert("kind".to_owned(), json!("artifact-update"));
        return Value::Object(update);
    }
    Value::Object(object)
}

fn task(value: Value) -> Value {
    let Value::Object(mut task) = value else { return value };
    task.insert("kind".to_owned(), json!("task"));
    if let Some(status_value) = task.remove("status") {
        task.insert("status".to_owned(), status(status_value));
    }
    map_list(&mut task, "history", message);
    map_list(&mut task, "artifacts", artifact);
    Value::Object(task)
}

fn status(value: Value) -> Value {
    let Value::Object(mut status) = value else { return value };
    if let Some(Value::String(state)) = status.get("state") {
        let state = state.strip_prefix("TASK_STATE_").unwrap_or(state).to_ascii_lowercase().replace('_', "-");
        status.insert("state".to_owned(), Value::String(state));
    }
    if let Some(message_value) = status.remove("message") {
        status.insert("message".to_owned(), message(message_value));
    }
    Value::Object(status)
}

fn message(value: Value) -> Value {
    let Value::Object(mut message) = value else { return value };
    message.insert("kind".to_owned(), json!("message"));
    let role = match message.get("role").and_then(Value::as_str) {
        Some("ROLE_USER") => "user",
        _ => "agent",
    };
    message.insert("role".to_owned(), json!(role));
    map_list(&mut message, "parts", part);
    Value::Object(message)
}

fn artifact(value: Value) -> Value {
    let Value::Object(mut artifact) = value else { return value };
    map_list(&mut artifact, "parts", part);
    Value::Object(artifact)
}

fn part(value: Value) -> Value {
    let Value::Object(mut part) = value else { return value };
    let mut out = Map::new();
    if let Some(text) = part.remove("text") {
        out.insert("kind".to_owned(), json!("text"));
        out.insert("text".to_owned(), text);
    } else if let Some(data) = part.remove("data") {
        out.insert("kind".to_owned(), json!("data"));
        // 0.3's data is an object.
        let data = if data.is_object() { data } else { json!({ "value": data }) };
        out.insert("data".to_owned(), data);
    } else {
        let mut file = Map::new();
        if let Some(url) = part.remove("url") {
            file.insert("uri".to_owned(), url);
        }
        if let Some(raw) = part.remove("raw") {
            file.insert("bytes".to_owned(), raw);
        }
        if let Some(name) = part.remove("filename") {
            file.insert("name".to_owned(), name);
        }
        if let Some(media) = part.remove("mediaType") {
            file.insert("mimeType".to_owned(), media);
        }
        out.insert("kind".to_owned(), json!("file"));
        out.insert("file".to_owned(), Value::Object(file));
    }
    if let Some(metadata) = part.remove("metadata") {
        out.insert("metadata".to_owned(), metadata);
    }
    Value::Object(out)
}

fn map_list(object: &mut Map<String, Value>, key: &str, f: fn(Value) -> Value) {
    if let Some(Value::Array(list)) = object.get_mut(key) {
        for item in list.iter_mut() {
            *item = f(item.take());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_0_3_message_reads_as_1_0() {
        let params = params(json!({
            "message": {
                "kind": "message", "messageId": "m", "role": "user",
                "parts": [
                    { "kind": "text", "text": "hi" },
                    { "kind": "data", "data": { "approved": true } },
                    { "kind": "file", "file": { "uri": "https://x/a.pdf", "mimeType": "application/pdf", "name": "a.pdf" } },
                ],
            },
            "configuration": { "blocking": false, "historyLength": 2 },
        }));
        assert_eq!(
            params,
            json!({
                "message": {
                    "messageId": "m", "role": "ROLE_USER",
                    "parts": [
                        { "text": "hi" },
                        { "data": { "approved": true } },
                        { "url": "https://x/a.pdf", "mediaType": "application/pdf", "filename": "a.pdf" },
                    ],
                },
                "configuration": { "returnImmediately": true, "historyLength": 2 },
            })
        );
    }

    #[test]
    fn a_1_0_task_and_its_events_are_written_as_0_3() {
        let task = json!({
            "id": "t", "contextId": "c",
            "status": { "state": "TASK_STATE_INPUT_REQUIRED", "message": {
                "messageId": "s", "role": "ROLE_AGENT", "parts": [{ "text": "ok?" }, { "data": [1] }],
            } },
            "artifacts": [{ "artifactId": "result", "parts": [{ "text": "done" }] }],
            "history": [{ "messageId": "m", "role": "ROLE_USER", "parts": [{ "text": "hi" }] }],
        });
        assert_eq!(
            result(json!({ "task": task.clone() })),
            json!({
                "kind": "task", "id": "t", "contextId": "c",
                "status": { "state": "input-required", "message": {
                    "kind": "message", "messageId": "s", "role": "agent",
                    "parts": [{ "kind": "text", "text": "ok?" }, { "kind": "data", "data": { "value": [1] } }],
                } },
                "artifacts": [{ "artifactId": "result", "parts": [{ "kind": "text", "text": "done" }] }],
                "history": [{ "kind": "message", "messageId": "m", "role": "user", "parts": [{ "kind": "text", "text": "hi" }] }],
            })
        );
        let update = event(
            json!({ "statusUpdate": { "taskId": "t", "contextId": "c", "status": { "state": "TASK_STATE_WORKING" } } }),
        );
        assert_eq!(
            update,
            json!({ "kind": "status-update", "taskId": "t", "contextId": "c", "status": { "state": "working" }, "final": false })
        );
        let done = event(
            json!({ "statusUpdate": { "taskId": "t", "contextId": "c", "status": { "state": "TASK_STATE_COMPLETED" } } }),
        );
        assert_eq!(done["final"], true);
        let artifact = event(
            json!({ "artifactUpdate": { "taskId": "t", "contextId": "c", "artifact": { "artifactId": "a", "parts": [{ "text": "x" }] }, "lastChunk": true } }),
        );
        assert_eq!(
            artifact,
            json!({ "kind": "artifact-update", "taskId": "t", "contextId": "c", "artifact": { "artifactId": "a", "parts": [{ "kind": "text", "text": "x" }] }, "lastChunk": true })
        );
    }
}
