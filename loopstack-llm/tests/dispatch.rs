//! The public API of `loopstack_llm::dispatch`: input projection, result selection and
//! collection, storage bounds and redaction, as table tests.

use std::borrow::Cow;

use loopstack_core::ToolOutput;
use loopstack_llm::dispatch::{
    CallView, ChildInput, DispatchEntry, DispatchResults, ENVELOPE_KEYS, ErrorPolicy, InputMapping, MappingError,
    ProjectionContext, REDACTED, RESERVED_KEYS, ResultSource, Secrets, bounded, select_result, stored_form,
    truncate_bytes, with_envelope,
};
use loopstack_llm::{Message, Role, ToolUse};
use serde_json::{Value, json};

/// The reference's parent context: a user with a profile and a private note, no id.
fn parent() -> Value {
    json!({
        "user": {"profile": {"name": "Ada"}, "private_note": "internal"},
        "users": [{"id": "u1", "roles": ["admin"]}, {"id": "u2"}],
        "region": "north",
        "alias": "arguments.city",
        "count": 0,
    })
}

fn args() -> Value {
    json!({"city": "Berlin", "days": [1, 2, 3], "opts": {"unit": "c", "empty": {}}})
}

#[test]
fn references_resolve_by_every_rule() {
    let (args, state) = (args(), parent());
    let cx = ProjectionContext::new(CallView::new("call_1", "get_weather", &args).with_index(1), &state);
    let table: &[(&str, Value)] = &[
        // The reference's own examples.
        ("ctx.user.id", json!(null)),
        ("ctx.user.profile.name", json!("Ada")),
        ("ctx.user.", json!(null)),
        // Roots.
        ("arguments", args.clone()),
        ("arguments.city", json!("Berlin")),
        ("arguments.opts.unit", json!("c")),
        ("arguments.opts.empty", json!({})),
        ("call", json!({"id": "call_1", "name": "get_weather", "arguments": args.clone()})),
        ("call.id", json!("call_1")),
        ("call.name", json!("get_weather")),
        ("call.arguments.days.2", json!(3)),
        ("tool_name", json!("get_weather")),
        ("tool_call_id", json!("call_1")),
        ("ctx.region", json!("north")),
        ("ctx.user", json!({"profile": {"name": "Ada"}, "private_note": "internal"})),
        // Zero-based array segments.
        ("ctx.users.0.id", json!("u1")),
        ("ctx.users.1.id", json!("u2")),
        ("ctx.users.0.roles.0", json!("admin")),
        ("arguments.days.0", json!(1)),
        // Index out of range, not a plain index, brackets.
        ("ctx.users.2.id", json!(null)),
        ("arguments.days.3", json!(null)),
        ("ctx.users.00", json!(null)),
        ("ctx.users.-0", json!(null)),
        ("ctx.users[0].id", json!(null)),
        // Missing fields, steps through scalars, empty segments, trailing dots.
        ("arguments.town", json!(null)),
        ("arguments.city.name", json!(null)),
        ("arguments.days.0.x", json!(null)),
        ("arguments.", json!(null)),
        ("arguments.opts..unit", json!(null)),
        ("call.", json!(null)),
        ("call.id.", json!(null)),
        ("call.arguments.", json!(null)),
        ("call.unknown", json!(null)),
        ("tool_name.len", json!(null)),
        ("tool_call_id.0", json!(null)),
        ("ctx.", json!(null)),
        ("ctx..region", json!(null)),
        ("ctx.region.0", json!(null)),
        ("ctx.count.x", json!(null)),
        ("ctx.missing.deeper", json!(null)),
        // Other strings: a top-level parent key, else the literal.
        ("region", json!("north")),
        ("count", json!(0)),
        ("user", json!({"profile": {"name": "Ada"}, "private_note": "internal"})),
        ("ctx", json!("ctx")),
        ("celsius", json!("celsius")),
        ("${ctx.region}", json!("${ctx.region}")),
        ("CTX.region", json!("CTX.region")),
        ("", json!("")),
        // A selected value is copied as is, never resolved again.
        ("alias", json!("arguments.city")),
        ("ctx.alias", json!("arguments.city")),
    ];
    for (text, expected) in table {
        assert_eq!(&cx.resolve_str(text), expected, "{text:?}");
    }
}

#[test]
fn the_mapping_of_the_brief() {
    let mapping = InputMapping::new(json!({
        "city": "arguments.city",
        "call_id": "tool_call_id",
        "whole": "call",
        "user_id": "ctx.user.id",
        "nested": {"a": ["ctx.users.0.id", 3, true, null]},
    }))
    .unwrap();
    let (args, state) = (json!({"city": "Paris"}), parent());
    let call = ToolUse::new("toolu_01", "get_weather", args.clone());
    let cx = ProjectionContext::new(CallView::of(&call, 0), &state);
    assert_eq!(
        mapping.resolve(&cx),
        json!({
            "city": "Paris",
            "call_id": "toolu_01",
            "whole": {"id": "toolu_01", "name": "get_weather", "arguments": {"city": "Paris"}},
            "user_id": null,
            "nested": {"a": ["u1", 3, true, null]},
        })
    );
    // Nothing else of the parent is inherited.
    let input = mapping.child_input(&cx);
    let mut keys: Vec<&str> = input.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut expected = vec!["call_id", "city", "nested", "user_id", "whole"];
    expected.extend(ENVELOPE_KEYS);
    expected.sort_unstable();
    assert_eq!(keys, expected);
}

#[test]
fn mapping_shapes_and_the_envelope() {
    let (args, state) = (args(), parent());
    let view = CallView::new("c7", "get_weather", &args).with_index(7);
    let cx = ProjectionContext::new(view, &state);
    let envelope = |extra: Value| {
        let mut input = json!({
            "tool_call": {"id": "c7", "name": "get_weather", "arguments": args.clone()},
            "tool_name": "get_weather",
            "tool_arguments": args.clone(),
            "tool_call_id": "c7",
            "tool_call_index": 7,
        });
        if let Value::Object(extra) = extra {
            input.as_object_mut().unwrap().extend(extra);
        }
        input
    };
    let table: Vec<(Value, Value)> = vec![
        // An object: its entries next to the envelope.
        (json!({"c": "arguments.city"}), envelope(json!({"c": "Berlin"}))),
        (json!({}), envelope(json!({}))),
        // A string selecting an object spreads it.
        (json!("arguments"), envelope(args.as_object().cloned().map(Value::Object).unwrap())),
        (json!("ctx.users.0"), envelope(json!({"id": "u1", "roles": ["admin"]}))),
        // Null, or a reference to nothing: the envelope alone.
        (json!(null), envelope(json!({}))),
        (json!("ctx.user.id"), envelope(json!({}))),
        // Anything else under `tool_input`.
        (json!("arguments.city"), envelope(json!({"tool_input": "Berlin"}))),
        (json!("literal"), envelope(json!({"tool_input": "literal"}))),
        (json!(["region", 1]), envelope(json!({"tool_input": ["north", 1]}))),
        (json!(false), envelope(json!({"tool_input": false}))),
        (json!(4.5), envelope(json!({"tool_input": 4.5}))),
        // A selected object with envelope keys: the envelope wins.
        (json!("call"), envelope(json!({"id": "c7", "name": "get_weather", "arguments": args.clone()}))),
    ];
    for (mapping, expected) in table {
        let input = ChildInput::mapping(mapping.clone()).unwrap();
        assert_eq!(input.child_input(&cx).unwrap(), expected, "{mapping}");
    }
    let spoof = json!({"tool_call_id": "other", "tool_call_index": 0, "tool_arguments": {}, "x": 1});
    assert_eq!(with_envelope(spoof, &view), envelope(json!({"x": 1})));
}

#[test]
fn mappings_are_checked_once() {
    for key in RESERVED_KEYS {
        assert_eq!(InputMapping::new(json!({ key: 1 })), Err(MappingError::ReservedKey { key: key.into() }));
    }
    let mut deep = json!({});
    for _ in 0..100 {
        deep = json!({ "a": deep });
    }
    assert!(matches!(InputMapping::new(deep), Err(MappingError::TooDeep { .. })));
    assert!(serde_json::from_value::<InputMapping>(json!({"tool_name": "x"})).is_err());
    let mapping: InputMapping = serde_json::from_str(r#"{"city": "arguments.city"}"#).unwrap();
    assert_eq!(mapping.as_value(), &json!({"city": "arguments.city"}));
}

#[test]
fn the_typed_form() {
    #[derive(serde::Deserialize)]
    struct Parent {
        users: Vec<User>,
    }
    #[derive(serde::Deserialize)]
    struct User {
        id: String,
    }
    #[derive(serde::Serialize)]
    struct Input {
        city: String,
        first_user: Option<String>,
    }

    let input = ChildInput::typed(|call: &CallView<'_>, parent: &Parent| {
        let city = call.arguments.get("city").and_then(Value::as_str).ok_or("a city is required")?;
        Ok(Input { city: city.to_owned(), first_user: parent.users.first().map(|u| u.id.clone()) })
    });
    let (args, state) = (args(), parent());
    let cx = ProjectionContext::new(CallView::new("c1", "get_weather", &args), &state);
    let child = input.child_input(&cx).unwrap();
    assert_eq!(
        (&child["city"], &child["first_user"], &child["tool_call_id"]),
        (&json!("Berlin"), &json!("u1"), &json!("c1"))
    );

    let no_city = json!({});
    let cx = ProjectionContext::new(CallView::new("c2", "get_weather", &no_city), &state);
    assert_eq!(input.child_input(&cx).unwrap_err(), "a city is required");
    let bad_state = json!({"users": "none"});
    let cx = ProjectionContext::new(CallView::new("c3", "get_weather", &args), &bad_state);
    assert!(input.project(&cx).unwrap_err().contains("parent state"));

    let untyped = ChildInput::function(|call, state| Ok(json!([call.index, state["region"]])));
    let cx = ProjectionContext::new(CallView::new("c4", "t", &args).with_index(2), &state);
    assert_eq!(untyped.child_input(&cx).unwrap()["tool_input"], json!([2, "north"]));
}

#[test]
fn child_results_are_selected() {
    let table: Vec<(Value, Value, ResultSource)> = vec![
        (json!({"tool_result_value": {"id": 7}, "tool_result_text": "t"}), json!({"id": 7}), ResultSource::Value),
        (json!({"tool_result_text": "done", "other": 1}), json!("done"), ResultSource::Text),
        (json!({"tool_result_value": null, "tool_result_text": "done"}), json!("done"), ResultSource::Text),
        (json!({"a": 1, "_b": 2, "c": {"_d": 3}}), json!({"a": 1, "c": {"_d": 3}}), ResultSource::Output),
        (json!({"tool_result_value": null, "a": 1}), json!({"a": 1}), ResultSource::Output),
        (json!(["x"]), json!(["x"]), ResultSource::Output),
        (json!("x"), json!("x"), ResultSource::Output),
    ];
    for (output, value, source) in table {
        assert_eq!(select_result(output.clone()), (value, source), "{output}");
    }
}

#[test]
fn a_dispatch_collects_every_call() {
    let calls = [
        ToolUse::new("c1", "get_weather", json!({"city": "Oslo"})),
        ToolUse::new("c2", "order_status", json!({"order_no": "2024-0001"})),
        ToolUse::new("c3", "issue_refund", json!({"order_no": "2024-0002"})),
        ToolUse::new("c4", "launch_rocket", json!({})),
        ToolUse::new("c5", "issue_refund", json!({"order_no": "2024-0003"})),
    ];
    let view = |i: usize| CallView::of(&calls[i], i);
    let results: DispatchResults = [
        DispatchEntry::from_child(&view(0), "weather", json!({"tool_result_text": "sunny", "_s": 1}), None),
        DispatchEntry::from_tool_output(&view(1), ToolOutput::json(json!({"status": "shipped"}))),
        DispatchEntry::from_child(&view(2), "refund", json!({"amount": 5}), Some("manager denied".into())),
        DispatchEntry::failed(&view(3), "unknown tool `launch_rocket`"),
        DispatchEntry::from_child(&view(4), "refund", json!({"tool_result_value": {"refunded": 9}}), None),
    ]
    .into_iter()
    .collect();

    assert_eq!(results.count(), 5);
    assert_eq!(results.error_count(), 2);
    assert!(!results.all_succeeded());
    let ids: Vec<&str> = results.entries().iter().map(|e| e.result.tool_use_id.as_str()).collect();
    assert_eq!(ids, ["c1", "c2", "c3", "c4", "c5"]);
    assert_eq!(results.first_failure().unwrap().result.tool_use_id, "c3");

    let rows: Vec<(bool, Option<&str>, &str, Option<&str>)> = results
        .entries()
        .iter()
        .map(|e| (e.result.is_error, e.workflow.as_deref(), e.result.content.as_str(), e.error.as_deref()))
        .collect();
    assert_eq!(
        rows,
        [
            (false, Some("weather"), "sunny", None),
            (false, None, r#"{"status":"shipped"}"#, None),
            (true, Some("refund"), "manager denied", Some("manager denied")),
            (true, None, "unknown tool `launch_rocket`", Some("unknown tool `launch_rocket`")),
            (false, Some("refund"), r#"{"refunded":9}"#, None),
        ]
    );
    // A typed tool's JSON result is kept as JSON.
    assert_eq!(results.get("c2").unwrap().result.value, Some(json!({"status": "shipped"})));
    assert_eq!(results.get("c3").unwrap().result.value, Some(json!({"amount": 5})));
    assert_eq!(results.get("c3").unwrap().arguments, json!({"order_no": "2024-0002"}));

    let by_id = results.by_id();
    assert_eq!(by_id.keys().copied().collect::<Vec<_>>(), ["c1", "c2", "c3", "c4", "c5"]);
    assert_eq!(by_id["c5"].result.value, Some(json!({"refunded": 9})));

    let message: Message = results.message().unwrap();
    assert_eq!(message.role, Role::User);
    let sent: Vec<(&str, &str, bool)> =
        message.tool_results_iter().map(|r| (r.tool_use_id.as_str(), r.content.as_str(), r.is_error)).collect();
    assert_eq!(
        sent,
        [
            ("c1", "sunny", false),
            ("c2", r#"{"status":"shipped"}"#, false),
            ("c3", "manager denied", true),
            ("c4", "unknown tool `launch_rocket`", true),
            ("c5", r#"{"refunded":9}"#, false),
        ]
    );

    let json = serde_json::to_value(&results).unwrap();
    assert_eq!((&json["count"], &json["errors"], &json["all_succeeded"]), (&json!(5), &json!(2), &json!(false)));
    assert_eq!(
        json["entries"][3],
        json!({
            "tool_use_id": "c4", "name": "launch_rocket", "content": "unknown tool `launch_rocket`",
            "is_error": true, "arguments": {}, "error": "unknown tool `launch_rocket`",
        })
    );
    let back: DispatchResults = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, results);

    // A later step's mapping can read the collection from the parent state.
    let state = json!({"results": json});
    let no_args = json!({});
    let cx = ProjectionContext::new(CallView::new("n1", "next", &no_args), &state);
    assert_eq!(cx.resolve_str("ctx.results.all_succeeded"), json!(false));
    assert_eq!(cx.resolve_str("ctx.results.entries.4.value.refunded"), json!(9));
}

#[test]
fn error_policies() {
    let args = json!({});
    let call = CallView::new("c", "t", &args);
    let (ok, failed) = (DispatchEntry::succeeded(&call, json!("fine")), DispatchEntry::failed(&call, "bad"));
    let table = [
        (ErrorPolicy::Continue, &ok, false),
        (ErrorPolicy::Continue, &failed, false),
        (ErrorPolicy::FailFast, &ok, false),
        (ErrorPolicy::FailFast, &failed, true),
    ];
    for (policy, entry, stops) in table {
        assert_eq!(policy.stops_at(entry), stops, "{policy:?} {}", entry.result.is_error);
    }
    let policy: ErrorPolicy = serde_json::from_value(json!("fail_fast")).unwrap();
    assert_eq!(policy, ErrorPolicy::FailFast);
}

#[test]
fn large_results_are_stored_bounded() {
    let table: Vec<(Value, usize, Value)> = vec![
        (json!("short"), 5, json!("short")),
        (json!("longer"), 5, json!("longe… [truncated: 5 of 6 bytes]")),
        (json!("ééé"), 3, json!("é… [truncated: 2 of 6 bytes]")),
        (json!({"k": "v"}), 9, json!({"k": "v"})),
        (json!({"k": "v"}), 8, json!(r#"{"k":"v"… [truncated: 8 of 9 bytes]"#)),
        (json!(null), 0, json!("… [truncated: 0 of 4 bytes]")),
    ];
    for (value, max, expected) in table {
        assert_eq!(*stored_form(&value, max), expected, "{value} {max}");
    }
    assert!(matches!(truncate_bytes("fits", 4), Cow::Borrowed(_)));

    let args = json!({});
    let call = CallView::new("c", "t", &args);
    let full: DispatchResults =
        [DispatchEntry::succeeded(&call, json!({"report": "x".repeat(1000)}))].into_iter().collect();
    let stored = full.stored(100);
    let entry = &stored.entries()[0];
    assert!(entry.result.content.ends_with("… [truncated: 100 of 1013 bytes]"), "{}", entry.result.content);
    assert!(entry.result.value.as_ref().unwrap().as_str().unwrap().ends_with("… [truncated: 100 of 1013 bytes]"));
    // The stored message is bounded too; the full one is still there.
    let stored_message = stored.message().unwrap();
    assert!(stored_message.tool_results_iter().next().unwrap().content.len() < 150);
    assert_eq!(full.entries()[0].result.content.len(), 1013);
}

#[test]
fn secrets_never_show() {
    let secrets = Secrets::new();
    for s in ["sk-ant-api03-abcdef", "ghp_token_XYZ", "pässwörd", "abc"] {
        secrets.register(s);
    }
    assert_eq!(secrets.len(), 3);
    let table = [
        ("call failed: 401 for key sk-ant-api03-abcdef", "call failed: 401 for key [redacted]"),
        ("Bearer ghp_token_XYZ;ghp_token_XYZ", "Bearer [redacted];[redacted]"),
        ("user pässwörd!", "user [redacted]!"),
        ("abc stays: too short to be a secret", "abc stays: too short to be a secret"),
        ("sk-ant-api03-abcdef-suffix", "[redacted]-suffix"),
    ];
    for (text, expected) in table {
        assert_eq!(secrets.redact(text), expected, "{text}");
    }

    // Redact an entry's result and its error before it is stored or shown.
    let args = json!({"key": "ghp_token_XYZ"});
    let call = CallView::new("c", "t", &args);
    let error = format!("upstream said: invalid token ghp_token_XYZ {}", "!".repeat(5000));
    let mut entry = DispatchEntry::failed(&call, secrets.redact_bounded(&error, 40));
    secrets.redact_value(&mut entry.arguments);
    assert_eq!(entry.error.as_deref(), Some("upstream said: invalid token [redacted] … [truncated: 40 of 5040 chars]"));
    assert_eq!(entry.arguments, json!({"key": REDACTED}));
    let text = serde_json::to_string(&entry).unwrap();
    assert!(!text.contains("ghp_token"), "{text}");

    assert_eq!(bounded("12345", 5), "12345");
    assert_eq!(bounded("123456", 5), "12345… [truncated: 5 of 6 chars]");
}

/// A small deterministic generator: every function above takes any input without
/// panicking.
#[test]
fn no_input_panics() {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let alphabet: Vec<char> = "ab.0123_ctxargumentsl-é🔑 \u{301}".chars().collect();
    let secrets = Secrets::from_iter(["a.b0", "é🔑é🔑", "ctx.u", "0000"]);
    let state = json!({"a": {"b": [{"c": "d"}, 1]}, "ctx": {"u": ["x"]}, "": {"": 1}, "0": [0]});
    let args = json!({"a": [1, {"b": "c"}], "é": {"🔑": null}});
    let cx = ProjectionContext::new(CallView::new("id", "name", &args), &state);
    for _ in 0..5000 {
        let len = (next() % 16) as usize;
        let text: String = (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
        let _ = cx.resolve_str(&text);
        for prefix in ["ctx.", "arguments.", "call.", "call.arguments."] {
            let _ = cx.resolve_str(&format!("{prefix}{text}"));
        }
        let redacted = secrets.redact(&text);
        assert!(!redacted.contains("a.b0") && !redacted.contains("0000"), "{text:?} -> {redacted:?}");
        let max = (next() % 20) as usize;
        let _ = bounded(&text, max);
        let _ = secrets.redact_bounded(&text, max);
        let _ = truncate_bytes(&text, max);
        let _ = stored_form(&json!({ text.clone(): [text.clone()] }), max);
        let mut value = json!({ text.clone(): text.clone() });
        secrets.redact_value(&mut value);
        let _ = select_result(json!({ text.clone(): 1, "_x": text.clone() }));
        if let Ok(mapping) = InputMapping::new(json!({ text.clone(): [text.clone(), {"k": text.clone()}] })) {
            let _ = mapping.child_input(&cx);
        }
    }
}
