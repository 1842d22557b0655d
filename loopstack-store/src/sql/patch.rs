//! A checkpoint's state as a patch of the state before it (see [`state_patch`]), and
//! how the stores keep the base of the next patch ([`LastStates`]).

use std::borrow::Cow;

use loopstack_core::serde_json::value::RawValue;
use loopstack_core::{RunId, StoreError};

use super::corrupt;

/// The members of a JSON object with their values' texts exactly as written, in
/// order; `None` for any other JSON. Keys are borrowed from the text unless they
/// hold escapes: a commit reads two states' members, and a key allocated each time
/// was most of what a patch cost.
fn members(json: &str) -> Option<Vec<(Cow<'_, str>, &RawValue)>> {
    use loopstack_core::serde;
    struct Key<'a>(Cow<'a, str>);
    impl<'de> serde::Deserialize<'de> for Key<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Key<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a member's name")
                }
                fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                    Ok(Key(Cow::Borrowed(v)))
                }
                fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                    Ok(Key(Cow::Owned(v.to_owned())))
                }
                fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Key<'de>, E> {
                    Ok(Key(Cow::Owned(v)))
                }
            }
            d.deserialize_str(V)
        }
    }
    struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);
    impl<'de> serde::Deserialize<'de> for Members<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Members<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                    let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
                    while let Some((Key(key), value)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                        out.push((key, value));
                    }
                    Ok(Members(out))
                }
            }
            d.deserialize_map(V)
        }
    }
    if !json.starts_with('{') {
        return None;
    }
    serde_json::from_str::<Members<'_>>(json).ok().map(|m| m.0)
}

/// [`members`] of a JSON object as serde_json writes it (no whitespace between its
/// members), found by scanning for the ends of strings and brackets rather than by
/// parsing: what a commit's patch reads of two states it just serialized. `None` for
/// anything else, or a key with escapes (which [`members`] unescapes): then
/// [`members`] reads it. The values' texts are not checked: the text is JSON.
fn written_members(json: &str) -> Option<Vec<(Cow<'_, str>, &str)>> {
    let b = json.as_bytes();
    if b.first() != Some(&b'{') {
        return None;
    }
    let mut out = Vec::with_capacity(8);
    if b.get(1) == Some(&b'}') {
        return (b.len() == 2).then_some(out);
    }
    let mut i = 1;
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let end = string_end(b, i)?;
        let key = json.get(i + 1..end)?;
        if key.contains('\\') {
            return None;
        }
        if b.get(end + 1) != Some(&b':') {
            return None;
        }
        let start = end + 2;
        let after = value_end(b, start)?;
        out.push((Cow::Borrowed(key), json.get(start..after)?));
        match b.get(after) {
            Some(b',') => i = after + 1,
            Some(b'}') if after + 1 == b.len() => return Some(out),
            _ => return None,
        }
    }
}

/// The index of the quote that closes the string whose opening quote is at `start`.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[i] == b'"' {
            return Some(i);
        }
        // A backslash and the byte it escapes.
        i += 2;
    }
}

/// The index just after the value that starts at `start`.
fn value_end(b: &[u8], start: usize) -> Option<usize> {
    match *b.get(start)? {
        b'"' => Some(string_end(b, start)? + 1),
        b'{' | b'[' => {
            let (mut depth, mut i) = (0_usize, start);
            loop {
                match *b.get(i)? {
                    b'"' => i = string_end(b, i)?,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        // A number, `true`, `false` or `null`: up to the member's end.
        _ => {
            let len = b.get(start..)?.iter().position(|&c| matches!(c, b',' | b'}' | b']'))?;
            let text = &b[start..start + len];
            (len > 0 && !text.iter().any(u8::is_ascii_whitespace)).then_some(start + len)
        }
    }
}

/// [`written_members`], or else [`members`].
fn state_members(json: &str) -> Option<Vec<(Cow<'_, str>, &str)>> {
    written_members(json).or_else(|| Some(members(json)?.into_iter().map(|(k, v)| (k, v.get())).collect()))
}

/// Writes a member's index in decimal.
fn push_index(out: &mut String, mut n: usize) {
    let mut digits = [0_u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[at..].iter().map(|&d| char::from(d)));
}

/// Writes `key` as serde_json writes a string.
fn push_key(out: &mut String, key: &str) {
    if key.bytes().all(|c| c >= 0x20 && c != b'"' && c != b'\\') {
        out.push('"');
        out.push_str(key);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(key).expect("a string serializes"));
    }
}

/// A checkpoint's state as a patch of the state before it, when both are JSON
/// objects and the patch is smaller: a JSON array that lists the members of `next` in
/// order, each as the base's member at an index (`3`), a range of them (`[0, 4]`),
/// or a member with a new value (`["key", value]`). Base members not listed are
/// dropped. Values are kept as their exact texts and keys are written as serde_json
/// writes them, so applying the patch gives back `next` byte for byte when serde_json
/// wrote it (every state the runtime checkpoints; a key escaped otherwise, such as
/// `\u00e9` for `é`, comes back as serde_json escapes it).
pub(crate) fn state_patch(base: &str, next: &str) -> Option<String> {
    let (base, members_next) = (state_members(base)?, state_members(next)?);
    // Each member of `next`: the index of an equal base member, or its own text.
    let mut entries: Vec<Result<usize, (&str, &str)>> = Vec::with_capacity(members_next.len());
    for (key, value) in &members_next {
        match base.iter().position(|(k, v)| k == key && v == value) {
            Some(i) => entries.push(Ok(i)),
            None => entries.push(Err((key, value))),
        }
    }
    // A patch longer than the state is not kept: room for that much is room enough.
    let mut out = String::with_capacity(next.len());
    out.push('[');
    let mut i = 0;
    while i < entries.len() {
        if out.len() > 1 {
            out.push(',');
        }
        match entries[i] {
            Ok(first) => {
                let mut last = first;
                while let Some(Ok(n)) = entries.get(i + 1)
                    && *n == last + 1
                {
                    last += 1;
                    i += 1;
                }
                if last == first {
                    push_index(&mut out, first);
                } else {
                    out.push('[');
                    push_index(&mut out, first);
                    out.push(',');
                    push_index(&mut out, last);
                    out.push(']');
                }
            }
            Err((key, value)) => {
                out.push('[');
                push_key(&mut out, key);
                out.push(',');
                out.push_str(value);
                out.push(']');
            }
        }
        i += 1;
    }
    out.push(']');
    (out.len() < next.len()).then_some(out)
}

/// The state a [`state_patch`] was made for.
pub(crate) fn apply_patch(base: &str, patch: &str) -> Result<String, StoreError> {
    let base = members(base).ok_or_else(|| corrupt("a state patch applies to an object"))?;
    let entries: Vec<&RawValue> = serde_json::from_str(patch).map_err(corrupt)?;
    let mut out = String::from("{");
    let push = |out: &mut String, key: &str, value: &str| {
        if out.len() > 1 {
            out.push(',');
        }
        push_key(out, key);
        out.push(':');
        out.push_str(value);
    };
    let member = |i: usize| base.get(i).ok_or_else(|| corrupt("a state patch names a missing member"));
    for entry in entries {
        let text = entry.get();
        if !text.starts_with('[') {
            let i: usize = serde_json::from_str(text).map_err(corrupt)?;
            let (k, v) = member(i)?;
            push(&mut out, k, v.get());
        } else if let Ok((first, last)) = serde_json::from_str::<(usize, usize)>(text) {
            for i in first..=last {
                let (k, v) = member(i)?;
                push(&mut out, k, v.get());
            }
        } else {
            let (key, value): (String, &RawValue) = serde_json::from_str(text).map_err(corrupt)?;
            push(&mut out, &key, value.get());
        }
    }
    out.push('}');
    Ok(out)
}

/// How a step's state is stored: in full, as a patch of the state before it, or
/// not at all when it did not change.
#[derive(Clone, Copy)]
pub(crate) struct StepState<'a> {
    /// The state in full.
    pub(crate) state: &'a str,
    /// The step left the state as it was, or `patch` gives it: no full state.
    pub(crate) unchanged: bool,
    /// The state as a patch of the one before it.
    pub(crate) patch: Option<&'a str>,
}

/// How a commit stores its state (see [`plan_state`]).
pub(crate) struct Planned {
    /// No full state: unchanged, or `patch`.
    pub(crate) unchanged: bool,
    pub(crate) patch: Option<String>,
    /// Patches since the last full state, this one included.
    pub(crate) chain: u32,
}

impl Planned {
    /// The state `next` as this plan stores it.
    pub(crate) fn state<'a>(&'a self, next: &'a str) -> StepState<'a> {
        StepState { state: next, unchanged: self.unchanged, patch: self.patch.as_deref() }
    }
}

/// The state `next` as a patch of the one this drive committed last (`last`), when
/// that is known and the patch is smaller; else in full (or neither, when it did not
/// change).
pub(crate) fn plan_state(last: Option<&LastState>, next: &str) -> Planned {
    let (unchanged, patch, chain) = match last {
        Some(l) if &*l.state == next => (true, None, l.chain),
        Some(l) if l.chain < MAX_PATCH_CHAIN => match state_patch(&l.state, next) {
            Some(patch) => (true, Some(patch), l.chain + 1),
            None => (false, None, 0),
        },
        _ => (false, None, 0),
    };
    Planned { unchanged, patch, chain }
}

/// After how many patches in a row a checkpoint stores its state in full again, so
/// reading one replays a bounded chain.
pub(crate) const MAX_PATCH_CHAIN: u32 = 16;

/// The last state each run committed through this store value, by run: the base of
/// the next checkpoint's patch. Only a hint: without an entry (another process, a
/// restart) the next checkpoint stores its state in full.
#[derive(Debug, Default)]
pub(crate) struct LastStates(std::sync::Mutex<std::collections::HashMap<RunId, LastState>>);

#[derive(Debug, Clone)]
pub(crate) struct LastState {
    pub(crate) epoch: u64,
    pub(crate) step: u64,
    pub(crate) state: std::sync::Arc<str>,
    /// Patches since the last full state.
    pub(crate) chain: u32,
}

impl LastStates {
    /// Keeps at most this many runs (running ones; finished runs are dropped).
    const CAP: usize = 16_384;

    pub(crate) fn get(&self, run_id: RunId, epoch: u64, step: u64) -> Option<LastState> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&run_id).filter(|l| l.epoch == epoch && l.step == step).cloned()
    }

    pub(crate) fn set(&self, run_id: RunId, last: Option<LastState>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match last {
            Some(last) => {
                if map.len() >= Self::CAP {
                    map.clear();
                }
                map.insert(run_id, last);
            }
            None => {
                map.remove(&run_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::{apply_patch, members, state_members, state_patch, written_members};

    #[test]
    fn a_patch_gives_back_the_next_state_byte_for_byte() {
        let base =
            r#"{"prompt":"What is up?","turns":0,"usage":{"input_tokens":0},"big":123456789012345678901234567890}"#;
        let next = r#"{"turns":1,"usage":{"input_tokens":50},"big":123456789012345678901234567890,"new":[1.5e300,"\u00e9\""]}"#;
        let patch = state_patch(base, next).expect("smaller than the state");
        assert_eq!(patch, r#"[["turns",1],["usage",{"input_tokens":50}],3,["new",[1.5e300,"\u00e9\""]]]"#);
        assert_eq!(apply_patch(base, &patch).unwrap(), next);
    }

    #[test]
    fn keys_with_escapes_are_matched_and_written_back_as_serde_json_writes_them() {
        // Escapes as serde_json writes them (the states a store gets are its text).
        let base = r#"{"a\"b":1,"tab\there":"xxxxxxxxxxxxxxxxxxxxxxxx","n":0}"#;
        let next = r#"{"a\"b":1,"tab\there":"xxxxxxxxxxxxxxxxxxxxxxxx","n":1}"#;
        let patch = state_patch(base, next).expect("smaller than the state");
        assert_eq!(patch, r#"[[0,1],["n",1]]"#, "the escaped keys match their base members");
        assert_eq!(apply_patch(base, &patch).unwrap(), next);
        let renamed = r#"{"tab\there":"xxxxxxxxxxxxxxxxxxxxxxxx","new\nline":2}"#;
        let patch = state_patch(base, renamed).unwrap();
        assert_eq!(patch, r#"[1,["new\nline",2]]"#);
        assert_eq!(apply_patch(base, &patch).unwrap(), renamed);
    }

    #[test]
    fn no_patch_for_other_json_or_when_it_would_not_be_smaller() {
        assert_eq!(state_patch("[1,2]", "[1,3]"), None);
        assert_eq!(state_patch(r#"{"a":1}"#, "7"), None);
        assert_eq!(state_patch(r#"{"a":1}"#, r#"{"b":2}"#), None, "a patch as long as the state is not kept");
        assert!(apply_patch("[1]", "[]").is_err());
        assert!(apply_patch(r#"{"a":1}"#, "[1]").is_err(), "a member the base lacks");
        assert!(apply_patch(r#"{"a":1}"#, r#"["a"]"#).is_err());
    }

    /// The scan of serde_json's text finds the members its parser finds, and
    /// declines (for the parser to read) what it does not handle; on any text it
    /// neither panics nor reads past the end.
    #[test]
    fn the_scan_of_written_states_finds_what_the_parser_finds() {
        let written = [
            "{}",
            r#"{"a":1}"#,
            r#"{"turns":1,"usage":{"input_tokens":50,"output_tokens":10},"last_stop":"tool_use","repeats":5283899749}"#,
            r#"{"s":"a \"quoted\" } ] , { [ text\\","n":-1.5e-7,"t":true,"f":false,"z":null}"#,
            r#"{"nested":{"a":[1,{"b":"}]"},[[]],{}],"c":"\\"},"e":[],"o":{},"u":"\u00e9\n"}"#,
            r#"{"é":"ü","k":[{"x":"]"}]}"#,
        ];
        for text in written {
            let parsed: Vec<_> = members(text).unwrap().into_iter().map(|(k, v)| (k, v.get())).collect();
            assert_eq!(written_members(text), Some(parsed), "{text}");
        }
        // Declined: keys with escapes (the parser unescapes them), whitespace, other JSON.
        for text in [r#"{"a\"b":1}"#, r#"{ "a":1}"#, r#"{"a": 1}"#, r#"{"a":1 }"#, "[1]", "7", r#""{}""#] {
            assert_eq!(written_members(text), None, "{text}");
        }
        assert_eq!(state_members(r#"{"a\"b":1}"#), Some(vec![(Cow::Owned("a\"b".to_owned()), "1")]));
        // Cut short anywhere, or broken: no panic, and never a member past the end.
        let long = written[4];
        for end in 0..long.len() {
            if let Some(cut) = long.get(..end) {
                assert_eq!(written_members(cut), None, "{cut}");
            }
        }
        for text in
            [r#"{"a":}"#, r#"{"a""#, r#"{"a":"\"#, r#"{"a":[}"#, r#"{"a":1,}"#, r#"{"a":1}x"#, "{", r#"{"a":]}"#]
        {
            assert_eq!(written_members(text), None, "{text}");
        }
    }

    #[test]
    fn unchanged_members_are_listed_as_ranges_of_the_base() {
        let base = r#"{"a":1,"b":2,"c":3,"d":4,"pad":"xxxxxxxxxxxxxxxxxxxxxxxx"}"#;
        let next = r#"{"b":2,"c":3,"d":4,"pad":"xxxxxxxxxxxxxxxxxxxxxxxx","e":5}"#;
        let patch = state_patch(base, next).unwrap();
        assert_eq!(patch, r#"[[1,4],["e",5]]"#);
        assert_eq!(apply_patch(base, &patch).unwrap(), next);
        // Indexes of more than one digit.
        let many = |first: u32| {
            let rest: Vec<String> = (1..=12).map(|i| format!(r#""m{i}":"xxxxxxxx{i}""#)).collect();
            format!(r#"{{"m0":{first},{}}}"#, rest.join(","))
        };
        let patch = state_patch(&many(0), &many(1)).unwrap();
        assert_eq!(patch, r#"[["m0",1],[1,12]]"#);
        assert_eq!(apply_patch(&many(0), &patch).unwrap(), many(1));
        let reordered = r#"{"pad":"xxxxxxxxxxxxxxxxxxxxxxxx","a":1,"b":2,"c":3,"d":4}"#;
        let patch = state_patch(base, reordered).unwrap();
        assert_eq!(patch, "[4,[0,3]]");
        assert_eq!(apply_patch(base, &patch).unwrap(), reordered);
    }
}
