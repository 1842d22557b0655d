//! What a model turn records of its request, so a stored run can be replayed: what
//! the request sent besides the conversation (the model, the settings with the system
//! prompt, each tool's name and fingerprint, the response schema's name) with a
//! fingerprint of it all, as the `request` metadata of the first assistant message
//! sent under it: `{"fp": "…", "model": "…", "settings": {…}, "tools": ["name:fp"]}`.
//! The messages after it that were sent under the same record nothing. The
//! conversation is the run's message documents already.

use serde_json::{Value, json};

use crate::model::ChatRequest;

mod diff;
mod replay;

pub use replay::{RecordedTurn, Recording, ReplayError, ReplayModel, ReplayTools, RunExport};

/// The metadata name of what a turn's request sent besides the conversation, on the
/// first turn that sent it.
pub(crate) const REQUEST_META: &str = "request";

/// A 64-bit FNV-1a fingerprint of what `request` sends besides its messages: the
/// model name, the settings, each tool's name, description and input schema, and
/// the response schema. Hashed as they are, without serializing them.
pub(crate) fn fingerprint(request: &ChatRequest) -> u64 {
    let mut hash = loopstack_core::fnv::Fnv1a::<u64>::default();
    let mut feed = |bytes: &[u8]| hash.bytes(bytes);
    let text = |feed: &mut dyn FnMut(&[u8]), s: &str| {
        feed(&(s.len() as u64).to_le_bytes());
        feed(s.as_bytes());
    };
    text(&mut feed, &request.model);
    let s = &request.settings;
    match &s.system {
        Some(system) => text(&mut feed, system),
        None => feed(b"-"),
    }
    feed(&s.max_tokens.map_or(u64::MAX, u64::from).to_le_bytes());
    feed(&s.temperature.map_or(u32::MAX, f32::to_bits).to_le_bytes());
    for stop in &s.stop_sequences {
        text(&mut feed, stop);
    }
    feed(b"|");
    if !s.prompt_cache.is_auto() {
        feed(format!("{:?}", s.prompt_cache).as_bytes());
    }
    if let Some(key) = &s.prompt_cache_key {
        text(&mut feed, key);
    }
    for tool in &request.tools {
        // Each tool's own fingerprint, computed once when it was registered.
        feed(b"T");
        feed(&tool.fingerprint().to_le_bytes());
    }
    if let Some(schema) = &request.response_schema {
        feed(b"R");
        text(&mut feed, &schema.name);
        loopstack_core::fnv::feed_json(&schema.schema, &mut feed);
    }
    hash.finish()
}

/// The fingerprint as stored: 16 hex digits.
pub(crate) fn fingerprint_text(fingerprint: u64) -> FingerprintText {
    // `format!("{fingerprint:016x}")` without the formatting machinery or a `String`:
    // every model turn writes one.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    FingerprintText(std::array::from_fn(|i| HEX[(fingerprint >> ((15 - i) * 4)) as usize & 0xf]))
}

/// A fingerprint's sixteen lowercase hex digits, on the stack.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct FingerprintText([u8; 16]);

impl std::ops::Deref for FingerprintText {
    type Target = str;
    fn deref(&self) -> &str {
        // Hex digits only: always UTF-8.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::fmt::Display for FingerprintText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

/// The fingerprint of a recorded request, read alone: hex digits, never escaped.
#[derive(serde::Deserialize)]
struct Fingerprint<'a> {
    fp: &'a str,
}

/// Whether the last fingerprint the conversation `name` recorded is `fingerprint`:
/// then the turn need not record it again.
pub(crate) fn same_as_last(cx: &loopstack_core::RunContext, name: Option<&str>, fingerprint: &str) -> bool {
    cx.documents()
        .iter()
        .rev()
        .filter(|d| crate::generate::in_conversation(d, name))
        .find_map(|d| recorded(&d.metadata))
        .is_some_and(|last| last == Some(fingerprint))
}

/// The fingerprint a message's metadata records: `None` without a record,
/// `Some(None)` for a record without a readable one.
fn recorded(metadata: &loopstack_core::Metadata) -> Option<Option<&str>> {
    if metadata.is_empty() {
        return None;
    }
    if let Some(fp) = recorded_as_written(metadata.as_str()) {
        return Some(Some(fp));
    }
    metadata.get_json(REQUEST_META).map(recorded_fingerprint)
}

/// The fingerprint of metadata `text` as a turn writes it, found without reading
/// the rest: the text's only `"request":{"fp":"` (a JSON string cannot hold one),
/// after no other object or array was opened (so the entry is at the top level),
/// with no other `"request"` after it (so it is the entry's only value). `None`
/// when any of that does not hold; the caller then reads the entry the long way.
fn recorded_as_written(text: &str) -> Option<&str> {
    const MARK: &[u8] = br#""request":{"fp":""#;
    static MARK_FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(MARK));
    static KEY_FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(br#""request""#));
    let bytes = text.as_bytes();
    let at = MARK_FINDER.find(bytes)?;
    let before = &bytes[..at];
    if memchr::memchr2_iter(b'{', b'[', before).count() != 1 || memchr::memchr(b'[', before).is_some() {
        return None;
    }
    let rest = &text[at + MARK.len()..];
    let (fp, after) = rest.split_once('"')?;
    if fp.contains('\\') || KEY_FINDER.find(after.as_bytes()).is_some() {
        return None;
    }
    Some(fp)
}

/// The fingerprint of recorded request `record`: its first entry, as [`config`]
/// writes it (a JSON object keeps its keys in order), read without the rest; any
/// other record is read whole.
fn recorded_fingerprint(record: &str) -> Option<&str> {
    if let Some(fp) = record.strip_prefix(r#"{"fp":""#).and_then(|rest| rest.split_once('"')).map(|(fp, _)| fp)
        && !fp.contains('\\')
    {
        return Some(fp);
    }
    serde_json::from_str::<Fingerprint<'_>>(record).ok().map(|f| f.fp)
}

/// What `request` sent besides its messages, for a replay's diff, with its
/// fingerprint `fp`: the model, the settings (left out when they are the defaults),
/// each tool as `name:fingerprint`, and the response schema's name.
pub(crate) fn config(request: &ChatRequest, fp: &str) -> Value {
    let tools: Vec<String> =
        request.tools.iter().map(|t| format!("{}:{}", t.name, fingerprint_text(t.fingerprint()))).collect();
    let mut config = json!({"fp": fp, "model": request.model, "tools": tools});
    if request.settings != crate::ModelSettings::default() {
        config["settings"] = json!(request.settings);
    }
    if let Some(schema) = &request.response_schema {
        config["schema"] = json!(schema.name);
    }
    config
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_recorded_fingerprint_reads_from_the_record_as_written_and_as_any_json() {
        use super::recorded_fingerprint as fp;
        let config = super::config(&crate::ChatRequest::new("m", Vec::<crate::Message>::new()), "0123456789abcdef");
        assert_eq!(fp(&config.to_string()), Some("0123456789abcdef"), "the record as the runtime writes it");
        assert_eq!(fp(r#"{ "model": "m", "fp": "00ff" }"#), Some("00ff"), "spaced, another order");
        assert_eq!(fp(r#"{"fp":"a\u0062"}"#), None, "escaped: read whole, and not hex digits");
        assert_eq!(fp(r#"{"model":"m"}"#), None);
        assert_eq!(fp("[1]"), None);
    }

    #[test]
    fn a_recorded_fingerprint_is_found_in_metadata_as_a_turn_writes_it_and_read_whole_otherwise() {
        use super::{recorded, recorded_as_written as fast};
        let meta = |text: &str| {
            loopstack_core::Metadata::from_raw(serde_json::value::RawValue::from_string(text.into()).unwrap()).unwrap()
        };
        let written = r#"{"model":"m","provider":"p","request":{"fp":"00ff","model":"m","tools":[]},"stop_reason":"end_turn","usage":{"input_tokens":1}}"#;
        assert_eq!(fast(written), Some("00ff"));
        assert_eq!(recorded(&meta(written)), Some(Some("00ff")));
        // Not as a turn writes it: each read the long way, with the same answer.
        let cases = [
            // An array opened before the record: a failed fallback's.
            (r#"{"fallbacks":[{"model":"x"}],"model":"m","request":{"fp":"0a"}}"#, Some(Some("0a"))),
            // A nested `request` before the top-level one.
            (r#"{"agent":{"request":{"fp":"bad"}},"request":{"fp":"0b"}}"#, Some(Some("0b"))),
            // Written twice: the last is the entry's value.
            (r#"{"request":{"fp":"01"},"request":{"fp":"02"}}"#, Some(Some("02"))),
            // A brace inside a string before it.
            (r#"{"model":"{","request":{"fp":"0c"}}"#, Some(Some("0c"))),
            // The fingerprint not first in its record.
            (r#"{"request":{"model":"m","fp":"0d"}}"#, Some(Some("0d"))),
            // A record without a fingerprint.
            (r#"{"request":{"model":"m"}}"#, Some(None)),
            // Only nested: no record.
            (r#"{"agent":{"request":{"fp":"0e"}}}"#, None),
            (r#"{"model":"m"}"#, None),
        ];
        for (text, expected) in cases {
            assert_eq!(fast(text), None, "{text}");
            assert_eq!(recorded(&meta(text)), expected, "{text}");
        }
        assert_eq!(recorded(&loopstack_core::Metadata::default()), None);
    }

    #[test]
    fn fingerprint_text_is_sixteen_lowercase_hex_digits() {
        for fp in [0, 1, 0xabc, 0x0123_4567_89ab_cdef, u64::MAX, 0xf000_0000_0000_000f] {
            assert_eq!(&*super::fingerprint_text(fp), format!("{fp:016x}"));
        }
    }
}
