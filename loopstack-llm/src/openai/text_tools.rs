//! Tool calls a model wrote as JSON in its text, for small local models that do not
//! use the API's `tool_calls` (see [`OpenAi::text_tool_calls`](super::OpenAi::text_tool_calls)).

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::reply::tool_use;
use crate::message::{ContentBlock, StopReason, ToolUse};
use crate::model::ChatResponse;

/// With tools offered and no tool calls in `response`, turns a tool call written as
/// JSON text into tool calls. Returns the content indices of the new calls.
pub(super) fn apply_text_tool_calls(response: &mut ChatResponse, offered: &[&str]) -> Vec<usize> {
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
    content.extend(calls.into_iter().map(ContentBlock::ToolUse));
    response.message.content = content;
    response.stop_reason = StopReason::ToolUse;
    (first..response.message.content.len()).collect()
}

/// Tool calls written as JSON in `text`, alone or in a fence, with the text left around
/// them; `None` when there are none (or they name a tool that is not offered).
fn parse_text_tool_calls(text: &str, offered: &[&str]) -> Option<(Vec<ToolUse>, String)> {
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

/// `{"name", "arguments" | "parameters"}` or an array of them, every name offered.
fn json_tool_calls(json: &str, offered: &[&str]) -> Option<Vec<ToolUse>> {
    let json = json.trim();
    let items = match json.as_bytes().first()? {
        b'[' => serde_json::from_str::<Vec<TextCall>>(json).ok().filter(|items| !items.is_empty())?,
        b'{' => vec![serde_json::from_str::<TextCall>(json).ok()?],
        _ => return None,
    };
    items
        .into_iter()
        .enumerate()
        .map(|(n, item)| {
            if !offered.contains(&item.name.as_str()) {
                return None;
            }
            let arguments = item.arguments.or(item.parameters);
            if arguments.as_deref().is_some_and(|a| !a.get().starts_with(['{', '"', 'n'])) {
                return None;
            }
            Some(tool_use(format!("call_{n}"), item.name, arguments.as_deref()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::message::{Message, Role, Usage};

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
    fn text_tool_calls_only_replace_plain_replies() {
        let reply = |content| ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
            model: "m".into(),
            id: None,
        };
        let json_text = r#"{"name": "get_time", "arguments": {}}"#;
        let mut response = reply(vec![ContentBlock::text(json_text)]);
        assert_eq!(apply_text_tool_calls(&mut response, &[]), Vec::<usize>::new(), "no tools offered");
        assert_eq!(response.stop_reason, StopReason::EndTurn);
        assert_eq!(apply_text_tool_calls(&mut response, &["get_time"]), vec![0]);
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.message.content,
            vec![ContentBlock::ToolUse(ToolUse::new("call_0", "get_time", json!({})))]
        );
        let mut with_calls =
            reply(vec![ContentBlock::text(json_text), ContentBlock::ToolUse(ToolUse::new("c", "get_time", json!({})))]);
        assert!(apply_text_tool_calls(&mut with_calls, &["get_time"]).is_empty());
        assert_eq!(with_calls.message.content.len(), 2);
    }
}
