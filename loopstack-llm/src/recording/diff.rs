//! The readable difference between a recorded request and the one a replay sends.

use std::fmt::Write;
use std::sync::Arc;

use serde_json::Value;
use similar::{ChangeTag, TextDiff};

use crate::message::Message;

/// Lines of `old` and `new` with `-` and `+` marks where they differ (and a few
/// around them), indented by `indent`.
pub(super) fn lines(out: &mut String, indent: &str, old: &str, new: &str) {
    let diff = TextDiff::from_lines(old, new);
    for group in diff.grouped_ops(2) {
        for op in group {
            for change in diff.iter_changes(&op) {
                let mark = match change.tag() {
                    ChangeTag::Delete => '-',
                    ChangeTag::Insert => '+',
                    ChangeTag::Equal => ' ',
                };
                let _ = writeln!(out, "{indent}{mark} {}", change.value().trim_end_matches('\n'));
            }
        }
    }
}

/// How the recorded config (model, settings, tools) differs from the live one.
pub(super) fn config(out: &mut String, recorded: &Value, live: &Value) {
    if recorded["model"] != live["model"] {
        let _ = writeln!(out, "  the model: recorded {}, now {}", recorded["model"], live["model"]);
    }
    let (old, new) = (&recorded["settings"], &live["settings"]);
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    if old["system"] != new["system"] {
        let _ = writeln!(out, "  the system prompt:");
        lines(out, "    ", &text(&old["system"]), &text(&new["system"]));
    }
    let keys = |v: &Value| v.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    let mut names = keys(old);
    for key in keys(new) {
        if !names.contains(&key) {
            names.push(key);
        }
    }
    for name in names.iter().filter(|n| *n != "system") {
        if old[name] != new[name] {
            let _ = writeln!(out, "  the setting `{name}`: recorded {}, now {}", old[name], new[name]);
        }
    }
    let tools = |v: &Value| -> Vec<(String, String)> {
        let split = |t: &Value| {
            let t = text(t);
            match t.rsplit_once(':') {
                Some((name, fp)) => (name.to_owned(), fp.to_owned()),
                None => (t, String::new()),
            }
        };
        v["tools"].as_array().map(|t| t.iter().map(split).collect()).unwrap_or_default()
    };
    let (old_tools, new_tools) = (tools(recorded), tools(live));
    for (name, fingerprint) in &old_tools {
        match new_tools.iter().find(|(n, _)| n == name) {
            None => {
                let _ = writeln!(out, "  the tool `{name}` is no longer offered");
            }
            Some((_, now)) if now != fingerprint => {
                let _ = writeln!(out, "  the tool `{name}` has another description or input schema");
            }
            Some(_) => {}
        }
    }
    for (name, _) in new_tools.iter().filter(|(n, _)| !old_tools.iter().any(|(o, _)| o == n)) {
        let _ = writeln!(out, "  the tool `{name}` is offered, and was not");
    }
    let old_names: Vec<&String> = old_tools.iter().map(|(n, _)| n).collect();
    let new_names: Vec<&String> = new_tools.iter().map(|(n, _)| n).collect();
    if old_names.len() == new_names.len() && old_names != new_names && old_names.iter().all(|n| new_names.contains(n)) {
        let _ = writeln!(out, "  the tools are offered in another order");
    }
    if recorded["schema"] != live["schema"] {
        let _ = writeln!(out, "  the response schema: recorded {}, now {}", recorded["schema"], live["schema"]);
    }
}

/// How the live conversation differs from the recorded one: the first message that
/// differs, as JSON lines, or the messages one has and the other lacks.
pub(super) fn messages(out: &mut String, recorded: &[Message], live: &[Arc<Message>]) {
    let pretty = |m: &Message| serde_json::to_string_pretty(m).unwrap_or_default();
    match recorded.iter().zip(live).position(|(a, b)| a != &**b) {
        Some(i) => {
            let _ = writeln!(out, "  message {} ({:?}):", i + 1, live[i].role);
            lines(out, "    ", &pretty(&recorded[i]), &pretty(&live[i]));
        }
        None if recorded.len() > live.len() => {
            let _ = writeln!(
                out,
                "  {} recorded messages are not sent, from message {}:",
                recorded.len() - live.len(),
                live.len() + 1
            );
            lines(out, "    ", &pretty(&recorded[live.len()]), "");
        }
        None => {
            let _ = writeln!(
                out,
                "  {} messages are sent that were not, from message {}:",
                live.len() - recorded.len(),
                recorded.len() + 1
            );
            lines(out, "    ", "", &pretty(&live[recorded.len()]));
        }
    }
}
