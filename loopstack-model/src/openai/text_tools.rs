//! Tool calls a model wrote as JSON in its text, for small local models that do not
//! use the API's `tool_calls` (see [`OpenAi::text_tool_calls`](super::OpenAi::text_tool_calls)).

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::reply::tool_use;
use crate::call_ids::CallIds;
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
    let Some((calls, rest)) = parse_text_tool_calls(&response.message.text()) else {
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

/// A tool call written as text, checked: its arguments are an object, a string or
/// `null` (kept raw until they are checked for their depth). Its tool may not be
/// offered: the dispatch then answers the call with an error that names the tools
/// that are, which a small model can read and correct, where a reply left as text
/// would end the run.
#[derive(Debug)]
struct WrittenCall {
    name: String,
    arguments: Option<Box<RawValue>>,
}

/// Tool calls written as JSON in `text`, with the text left around them; `None` when
/// there are none.
///
/// Taken, as small models write them: a reply that is nothing but calls (one object,
/// an array, or several objects one after the other), bare, in a fence, or between
/// tags such as `<tool_call>` or `<tools>`, also with stray or doubled braces around
/// them (`{{"name": .., "arguments": {..}}}`, copied from a chat template that shows
/// the format with doubled braces); and, inside prose, a fenced block (no info string,
/// or `json`) or a `<tool_call>` block that holds nothing but calls. A call is an
/// object with `name` and `arguments` (or `parameters`) and at most `type` and `id`
/// besides: JSON that merely mentions a name is left alone.
fn parse_text_tool_calls(text: &str) -> Option<(Vec<WrittenCall>, String)> {
    if let Some(calls) = calls_only(text) {
        return Some((calls, String::new()));
    }
    let mut search = 0;
    while let Some((open, body, close)) = next_block(text, search) {
        if let Some(calls) = calls_only(&text[body.clone()]) {
            let (before, after) = (text[..open].trim(), text[close..].trim());
            let rest = match (before.is_empty(), after.is_empty()) {
                (true, _) => after.to_owned(),
                (false, true) => before.to_owned(),
                (false, false) => format!("{before}\n\n{after}"),
            };
            return Some((calls, rest));
        }
        search = close;
    }
    None
}

/// The next fenced block (without an info string, or `json`) or `<tool_call>` block
/// from `from`: where it opens, its body, where it closes (past the closing marker).
fn next_block(text: &str, from: usize) -> Option<(usize, std::ops::Range<usize>, usize)> {
    let fence = text[from..].find("```").map(|i| from + i);
    let tag = text[from..].find("<tool_call>").map(|i| from + i);
    let fence_first = match (fence, tag) {
        (Some(f), Some(t)) => f < t,
        (Some(_), None) => true,
        (None, Some(_)) => false,
        (None, None) => return None,
    };
    match (fence, tag) {
        (Some(f), _) if fence_first => {
            let info_end = text[f + 3..].find('\n').map(|i| f + 3 + i)?;
            let info = text[f + 3..info_end].trim();
            let body_start = info_end + 1;
            let close = text[body_start..].find("```").map(|i| body_start + i)?;
            let body = if info.is_empty() || info.eq_ignore_ascii_case("json") { body_start..close } else { 0..0 };
            Some((f, body, close + 3))
        }
        (_, Some(t)) => {
            let body_start = t + "<tool_call>".len();
            let close = text[body_start..].find("</tool_call>").map(|i| body_start + i)?;
            Some((t, body_start..close, close + "</tool_call>".len()))
        }
        _ => None,
    }
}

/// The calls `text` consists of, when it holds nothing else: call objects or arrays
/// of them, with whitespace, commas, stray braces, fence lines and tags between them;
/// `None` when anything else is there, or no call is.
fn calls_only(text: &str) -> Option<Vec<WrittenCall>> {
    let trimmed = text.trim();
    if !trimmed.contains("\"name\"") {
        return None;
    }
    // As written, or with every brace doubled (`{{"a": {{}}}}`): then the arguments'
    // own braces are doubled too, which only halving them as a whole undoes.
    if let Some(calls) = scan_calls(trimmed) {
        return Some(calls);
    }
    scan_calls(&undouble_braces(trimmed)?)
}

fn scan_calls(text: &str) -> Option<Vec<WrittenCall>> {
    let mut calls = Vec::new();
    let mut at = 0;
    let bytes = text.as_bytes();
    while at < bytes.len() {
        match bytes[at] {
            b' ' | b'\t' | b'\r' | b'\n' | b',' | b']' | b'}' => at += 1,
            b'[' | b'{' => match next_calls(&text[at..]) {
                Some((found, len)) => {
                    calls.extend(found);
                    at += len;
                }
                // A stray opening brace or bracket before a call: `{{"name": ..}}}`.
                None if text[at + 1..].trim_start().starts_with(['{', '[']) => at += 1,
                None => return None,
            },
            b'<' => at += tag_len(&text[at..])?,
            // A fence line around the calls: without an info string, or `json`.
            b'`' if text[at..].starts_with("```") => {
                let line = text[at..].find('\n').unwrap_or(text.len() - at);
                let info = text[at + 3..at + line].trim();
                if !(info.is_empty() || info.eq_ignore_ascii_case("json")) {
                    return None;
                }
                at += line;
            }
            _ => return None,
        }
    }
    (!calls.is_empty()).then_some(calls)
}

/// The calls of the JSON value `text` starts with (one call object, or a non-empty
/// array of them) and the length of that value.
fn next_calls(text: &str) -> Option<(Vec<WrittenCall>, usize)> {
    // Not an untagged enum: raw arguments cannot be read from serde's buffered content.
    let (items, len) = if text.starts_with('[') {
        let mut values = serde_json::Deserializer::from_str(text).into_iter::<Vec<TextCall>>();
        let items = values.next()?.ok().filter(|items| !items.is_empty())?;
        (items, values.byte_offset())
    } else {
        let mut values = serde_json::Deserializer::from_str(text).into_iter::<TextCall>();
        let item = values.next()?.ok()?;
        (vec![item], values.byte_offset())
    };
    let calls = items.into_iter().map(TextCall::checked).collect::<Option<Vec<_>>>()?;
    Some((calls, len))
}

/// The length of the tag (`<tool_call>`, `</tools>`) `text` starts with.
fn tag_len(text: &str) -> Option<usize> {
    let end = text.find('>')?;
    let name = text[1..end].strip_prefix('/').unwrap_or(&text[1..end]);
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')).then_some(end + 1)
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

impl TextCall {
    fn checked(self) -> Option<WrittenCall> {
        let arguments = self.arguments.or(self.parameters);
        if arguments.as_deref().is_some_and(|a| !a.get().starts_with(['{', '"', 'n'])) {
            return None;
        }
        Some(WrittenCall { name: self.name, arguments })
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
    /// (`_offered` says what the reply was offered; calls are parsed whatever it is.)
    fn parse_text_tool_calls(text: &str, _offered: &[&str]) -> Option<(Vec<ToolUse>, String)> {
        let (calls, rest) = super::parse_text_tool_calls(text)?;
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

        // A tool that is not offered is still a call: the dispatch answers it with the
        // names of the tools that are.
        let (calls, _) = parse_text_tool_calls(r#"{"name": "add", "arguments": {"a": 2}}"#, &offered).unwrap();
        assert_eq!(calls, vec![ToolUse::new("call_0", "add", json!({"a": 2}))]);

        for text in [
            r#"{"name": "get_time", "arguments": {}, "note": "extra key"}"#,
            r#"{"name": "get_time", "arguments": 3}"#,
            r#"{"name": "get_time", "arguments": {}} and then some prose"#,
            r#"Call {"name": "get_time", "arguments": {}} to see."#,
            r#"{"city": "Paris"}"#,
            "<b>{\"name\": \"get_time\"}</b> in bold",
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

    /// Replies Qwen2.5-Coder-1.5B-Instruct wrote at temperature 0 behind llama.cpp's
    /// server (seen while testing against it), each with two calls or one.
    #[test]
    fn forms_a_small_model_writes() {
        let offered = ["get_weather"];
        let paris_rome = vec![
            ToolUse::new("call_0", "get_weather", json!({"location": "Paris"})),
            ToolUse::new("call_1", "get_weather", json!({"location": "Rome"})),
        ];
        for text in [
            "<tools>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tools>\n<tools>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Rome\"}}\n</tools>\n```",
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Rome\"}}\n</tool_call>",
            "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Rome\"}}",
        ] {
            let (calls, rest) = parse_text_tool_calls(text, &offered).unwrap();
            assert_eq!((calls, rest.as_str()), (paris_rome.clone(), ""), "{text}");
        }
        let pretty =
            "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    \"location\": \"Paris\"\n  }\n}\n```";
        assert_eq!(parse_text_tool_calls(pretty, &offered).unwrap().0, paris_rome[..1]);
        let tagged = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>";
        assert_eq!(parse_text_tool_calls(tagged, &offered).unwrap(), (paris_rome[..1].to_vec(), "Let me look.".into()));
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
        // Only the outer braces doubled, as Qwen2.5-Coder writes it after a chat template
        // that shows the format so, and the closing ones sometimes doubled twice.
        for text in [
            r#"{{"name": "get_weather", "arguments": {"location": "Berlin"}}}"#,
            r#"{{"name": "get_weather", "arguments": {"location": "Berlin"}}}}"#,
            "```json\n{{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Berlin\"}}}\n```",
        ] {
            let (calls, rest) = parse_text_tool_calls(text, &offered).unwrap();
            assert_eq!(calls, vec![ToolUse::new("call_0", "get_weather", json!({"location": "Berlin"}))], "{text}");
            assert_eq!(rest, "", "{text}");
        }
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
        let conversation = [
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
        ]
        .map(std::sync::Arc::new);
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
