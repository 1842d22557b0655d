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
pub(crate) fn fingerprint_text(fingerprint: u64) -> String {
    // `format!("{fingerprint:016x}")` without the formatting machinery: every model
    // turn writes one.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    (0..16).rev().map(|i| char::from(HEX[(fingerprint >> (i * 4)) as usize & 0xf])).collect()
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
        .find_map(|d| d.metadata.get_json(REQUEST_META))
        .is_some_and(|last| recorded_fingerprint(last) == Some(fingerprint))
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
    fn fingerprint_text_is_sixteen_lowercase_hex_digits() {
        for fp in [0, 1, 0xabc, 0x0123_4567_89ab_cdef, u64::MAX, 0xf000_0000_0000_000f] {
            assert_eq!(super::fingerprint_text(fp), format!("{fp:016x}"));
        }
    }
}
