//! Tool calls a model wrote as JSON in its text, for small local models that do not
//! use the API's `tool_calls` (see [`OpenAi::text_tool_calls`](super::OpenAi::text_tool_calls)).

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::reply::{CallIds, tool_use};
use crate::message::{ContentBlock, StopReason};
use crate::model::ChatResponse;

/// With tools offered and no tool calls in `response`, turns a tool call written as
/// JSON text into tool calls, their ids from `ids`. Returns the content indices of the
/// new calls.
pub(super) fn apply_text_tool_calls(
    response: &mut ChatResponse,
    offered: &[&str],
    ids: &mut CallIds<'_>,
) -> Vec<usize> {
    if offered.is_empty() || response.message.tool_uses().next().is_some() {
        return Vec::new();
    }
    let Some((calls, rest)) = parse_text_tool_calls(&response.message.text(), offered) else {
        return Vec::new();
    };
    let mut content = Vec::new();
    if !rest.is_empty() {
        content.push(ContentBlock::Text { text: rest });
    }
    let first = content.len();
    content.extend(
        calls
            .into_iter()
            .enumerate()
            .map(|(n, call)| ContentBlock::ToolUse(tool_use(ids.id(n), call.name, call.arguments.as_deref()))),
    );
    response.message.content = content;
    response.stop_reason = StopReason::ToolUse;
    (first..response.message.content.len()).collect()
}

/// A tool call written as text, checked: its tool is offered and its arguments are an
/// object, a string or `null` (kept raw until they are checked for their depth).
#[derive(Debug)]
struct WrittenCall {
    name: String,
    arguments: Option<Box<RawValue>>,
}

/// Tool calls written as JSON in `text`, alone or in a fence, with the text left around
/// them; `None` when there are none (or they name a tool that is not offered).
fn parse_text_tool_calls(text: &str, offered: &[&str]) -> Option<(Vec<WrittenCall>, String)> {
    let trimmed = text.trim();
    if trimmed.starts_with(['{', '['])
        && let Some(calls) = json_tool_calls(trimmed, offered)
    {
        return Some((calls, String::new()));
    }
    let mut search = 0;
    while let Some(open) = text[search..].find("```").map(|i| search + i) {
        let info_end = text[open + 3..].find('\n').map(|i| open + 3 + i)?;
        let info = text[open + 3..info_end].trim();
        let body_start = info_end + 1;
        let close = text[body_start..].find("```").map(|i| body_start + i)?;
        if (info.is_empty() || info.eq_ignore_ascii_case("json"))
            && let Some(calls) = json_tool_calls(&text[body_start..close], offered)
        {
            let (before, after) = (text[..open].trim(), text[close + 3..].trim());
            let rest = match (before.is_empty(), after.is_empty()) {
                (true, _) => after.to_owned(),
                (false, true) => before.to_owned(),
                (false, false) => format!("{before}\n\n{after}"),
            };
            return Some((calls, rest));
        }
        search = close + 3;
    }
    None
}

/// A tool call written as text; the arguments stay raw text until they are checked
/// for their depth.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextCall {
    name: String,
    arguments: Option<Box<RawValue>>,
    parameters: Option<Box<RawValue>>,
    #[serde(rename = "type")]
    _kind: Option<IgnoredAny>,
    #[serde(rename = "id")]
    _id: Option<IgnoredAny>,
}

/// `{"name", "arguments" | "parameters"}` or an array of them, every name offered;
/// also with every brace doubled (`{{"name": .., "arguments": {{..}}}}`), as some
/// models copy it from their chat template.
fn json_tool_calls(json: &str, offered: &[&str]) -> Option<Vec<WrittenCall>> {
    let json = json.trim();
    let items = text_calls(json).or_else(|| text_calls(&undouble_braces(json)?))?;
    items
        .into_iter()
        .map(|item| {
            if !offered.contains(&item.name.as_str()) {
                return None;
            }
            let arguments = item.arguments.or(item.parameters);
            if arguments.as_deref().is_some_and(|a| !a.get().starts_with(['{', '"', 'n'])) {
                return None;
            }
            Some(WrittenCall { name: item.name, arguments })
        })
        .collect()
}

/// One call object or a non-empty array of them.
fn text_calls(json: &str) -> Option<Vec<TextCall>> {
    match json.as_bytes().first()? {
        b'[' => serde_json::from_str::<Vec<TextCall>>(json).ok().filter(|items| !items.is_empty()),
        b'{' => Some(vec![serde_json::from_str::<TextCall>(json).ok()?]),
        _ => None,
    }
}

/// `text` with each doubled brace outside strings halved (`{{` to `{`, `}}}}` to `}}`);
/// `None` when it has no `{{` or a brace outside strings is not doubled (a run of an
/// odd length), so JSON that only happens to contain `}}` is never changed.
fn undouble_braces(text: &str) -> Option<String> {
    if !text.contains("{{") {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '{' | '}' => {
                let mut run = 1;
                while chars.next_if_eq(&c).is_some() {
                    run += 1;
                }
                if run % 2 != 0 {
                    return None;
                }
                out.extend(std::iter::repeat_n(c, run / 2));
            }
            '"' => {
                in_string = true;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::message::{Message, Role, ToolResult, ToolUse, Usage};

    /// The calls in `text` with the ids of a reply that starts a conversation.
    fn parse_text_tool_calls(text: &str, offered: &[&str]) -> Option<(Vec<ToolUse>, String)> {
        let (calls, rest) = super::parse_text_tool_calls(text, offered)?;
        let mut ids = CallIds::new(&[]);
        let calls = calls.into_iter().enumerate().map(|(n, c)| tool_use(ids.id(n), c.name, c.arguments.as_deref()));
        Some((calls.collect(), rest))
    }

    fn reply(content: Vec<ContentBlock>) -> ChatResponse {
        ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
            model: "m".into(),
            id: None,
        }
    }

    #[test]
    fn text_tool_calls_are_parsed_when_offered() {
        let offered = ["get_weather", "get_time"];
        let (calls, rest) =
            parse_text_tool_calls(r#" {"name": "get_weather", "arguments": {"city": "Paris"}} "#, &offered).unwrap();
        assert_eq!(calls, vec![ToolUse::new("call_0", "get_weather", json!({"city": "Paris"}))]);
        assert_eq!(rest, "");
        let fenced = "```json\n{\"name\": \"get_time\", \"parameters\": {}}\n```";
        let (calls, rest) = parse_text_tool_calls(fenced, &offered).unwrap();
        assert_eq!((calls, rest.as_str()), (vec![ToolUse::new("call_0", "get_time", json!({}))], ""));
        let prose = "I'll check.\n```\n[{\"name\": \"get_time\"}, {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Rome\\\"}\"}]\n```\nOne moment.";
        let (calls, rest) = parse_text_tool_calls(prose, &offered).unwrap();
        assert_eq!(
            calls,
            vec![
                ToolUse::new("call_0", "get_time", json!({})),
                ToolUse::new("call_1", "get_weather", json!({"city": "Rome"}))
            ]
        );
        assert_eq!(rest, "I'll check.\n\nOne moment.");
        let second_fence = "```rust\nfn main() {}\n```\n```json\n{\"name\": \"get_time\", \"arguments\": {}}\n```";
        assert_eq!(parse_text_tool_calls(second_fence, &offered).unwrap().1, "```rust\nfn main() {}\n```");

        for text in [
            r#"{"name": "delete_everything", "arguments": {}}"#,
            r#"{"name": "get_time", "arguments": {}, "note": "extra key"}"#,
            r#"{"name": "get_time", "arguments": 3}"#,
            r#"[]"#,
            "The answer is 42.",
            "```json\n{\"name\": \"get_time\"\n```",
            "```python\n{\"name\": \"get_time\"}\n```",
            "``` unterminated",
        ] {
            assert_eq!(parse_text_tool_calls(text, &offered), None, "{text}");
        }
    }

    #[test]
    fn doubled_braces_are_accepted() {
        let offered = ["get_weather"];
        let doubled = r#"{{"name": "get_weather", "arguments": {{"city": "Paris", "note": "a {{b}} c"}}}}"#;
        let (calls, rest) = parse_text_tool_calls(doubled, &offered).unwrap();
        assert_eq!(calls, vec![ToolUse::new("call_0", "get_weather", json!({"city": "Paris", "note": "a {{b}} c"}))]);
        assert_eq!(rest, "");
        let fenced = "```json\n{{\"name\": \"get_weather\", \"arguments\": {{}}}}\n```";
        assert_eq!(
            parse_text_tool_calls(fenced, &offered).unwrap().0,
            vec![ToolUse::new("call_0", "get_weather", json!({}))]
        );
        let array = r#"[{{"name": "get_weather", "arguments": {{"city": "Oslo"}}}}]"#;
        assert_eq!(parse_text_tool_calls(array, &offered).unwrap().0.len(), 1);
        // Half doubled is neither form.
        assert_eq!(parse_text_tool_calls(r#"{{"name": "get_weather", "arguments": {}}}"#, &offered), None);
    }

    #[test]
    fn undoubling_halves_brace_runs_outside_strings_only() {
        assert_eq!(undouble_braces(r#"{{"a": {{}}}}"#).as_deref(), Some(r#"{"a": {}}"#));
        assert_eq!(undouble_braces(r#"{{"a": "}}\"{{"}}"#).as_deref(), Some(r#"{"a": "}}\"{{"}"#));
        assert_eq!(undouble_braces(r#"{"a": {"b": 1}}"#), None, "no doubled opening brace");
        assert_eq!(undouble_braces(r#"{{"a": {"b": 1}}}"#), None, "an odd run");
    }

    #[test]
    fn text_call_ids_follow_the_calls_of_the_conversation() {
        let conversation = vec![
            Message::user("Weather in Paris?"),
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse(ToolUse::new("call_0", "get_weather", json!({"city": "Paris"})))],
            },
            Message::tool_results([ToolResult {
                tool_use_id: "call_0".into(),
                content: "sunny".into(),
                is_error: false,
            }]),
            Message {
                role: Role::Assistant,
                // A server's own id that the numbering would reach.
                content: vec![ContentBlock::ToolUse(ToolUse::new("call_2", "get_weather", json!({"city": "Rome"})))],
            },
        ];
        let text = r#"[{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_weather", "arguments": {"city": "Bern"}}]"#;
        let ids_of = || {
            let mut response = reply(vec![ContentBlock::text(text)]);
            apply_text_tool_calls(&mut response, &["get_weather"], &mut CallIds::new(&conversation));
            response.message.tool_uses().map(|t| t.id.clone()).collect::<Vec<_>>()
        };
        assert_eq!(ids_of(), ["call_3", "call_4"], "after the two calls so far, skipping call_2");
        assert_eq!(ids_of(), ids_of(), "the same for the same request");
    }

    #[test]
    fn text_tool_calls_only_replace_plain_replies() {
        let json_text = r#"{"name": "get_time", "arguments": {}}"#;
        let mut response = reply(vec![ContentBlock::text(json_text)]);
        let mut ids = CallIds::new(&[]);
        assert_eq!(apply_text_tool_calls(&mut response, &[], &mut ids), Vec::<usize>::new(), "no tools offered");
        assert_eq!(response.stop_reason, StopReason::EndTurn);
        assert_eq!(apply_text_tool_calls(&mut response, &["get_time"], &mut ids), vec![0]);
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.message.content,
            vec![ContentBlock::ToolUse(ToolUse::new("call_0", "get_time", json!({})))]
        );
        let mut with_calls =
            reply(vec![ContentBlock::text(json_text), ContentBlock::ToolUse(ToolUse::new("c", "get_time", json!({})))]);
        assert!(apply_text_tool_calls(&mut with_calls, &["get_time"], &mut CallIds::new(&[])).is_empty());
        assert_eq!(with_calls.message.content.len(), 2);
    }
}
