//! Name conversions and the tool-name rule.

/// `PromptExecuted` -> `prompt_executed`, `HTTPServer` -> `http_server`,
/// `Step2Done` -> `step2_done`. A raw identifier's `r#` is dropped.
pub(crate) fn snake_case(ident: &str) -> String {
    let ident = ident.strip_prefix("r#").unwrap_or(ident);
    let chars: Vec<char> = ident.chars().collect();
    let mut out = String::with_capacity(ident.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if prev != '_' && (prev.is_lowercase() || prev.is_ascii_digit() || (prev.is_uppercase() && next_lower)) {
                out.push('_');
            }
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// `get_weather` -> `GetWeather`, `lookup_v2` -> `LookupV2`. A raw identifier's `r#`
/// is dropped; the letters after the first of each word are kept as written.
pub(crate) fn pascal_case(ident: &str) -> String {
    let ident = ident.strip_prefix("r#").unwrap_or(ident);
    let mut out = String::with_capacity(ident.len());
    for word in ident.split('_').filter(|w| !w.is_empty()) {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out
}

/// Whether an identifier is UpperCamelCase: an uppercase first letter and no `_`.
pub(crate) fn is_upper_camel(ident: &str) -> bool {
    ident.chars().next().is_some_and(char::is_uppercase) && !ident.contains('_')
}

/// `^[a-zA-Z0-9_-]{1,64}$`, the rule providers hold tool names to.
pub(crate) fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake() {
        for (from, to) in [
            ("Start", "start"),
            ("End", "end"),
            ("PromptExecuted", "prompt_executed"),
            ("AwaitingTools", "awaiting_tools"),
            ("HTTPServer", "http_server"),
            ("OrderStatus", "order_status"),
            ("Step2Done", "step2_done"),
            ("ToolCallWorkflow", "tool_call_workflow"),
            ("ABC", "abc"),
            ("A", "a"),
            ("r#Type", "type"),
            ("already_snake", "already_snake"),
        ] {
            assert_eq!(snake_case(from), to, "{from}");
        }
    }

    #[test]
    fn pascal() {
        for (from, to) in [
            ("get_weather", "GetWeather"),
            ("echo", "Echo"),
            ("lookup_v2", "LookupV2"),
            ("_private_tool", "PrivateTool"),
            ("r#type", "Type"),
            ("a__b", "AB"),
        ] {
            assert_eq!(pascal_case(from), to, "{from}");
        }
    }

    #[test]
    fn camel_and_tool_names() {
        assert!(is_upper_camel("PromptExecuted"));
        assert!(!is_upper_camel("prompt_executed"));
        assert!(!is_upper_camel("Prompt_Executed"));
        assert!(is_valid_tool_name("get_weather-2"));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name("get weather"));
        assert!(!is_valid_tool_name("wetter_für_heute"));
        assert!(!is_valid_tool_name(&"a".repeat(65)));
        assert!(is_valid_tool_name(&"a".repeat(64)));
    }
}
