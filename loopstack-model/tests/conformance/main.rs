//! The provider conformance suite (`loopstack_model::testing::ProviderSuite`) run
//! against each provider of this crate, each answered by a strict imitation of its
//! API written from the API's published reference: one module per provider, with
//! its imitation and its test.
//!
//! `cargo test -p loopstack-model --all-features --test conformance`
//!
//! A provider added to the crate adds `tests/conformance/<provider>.rs` (its
//! imitation and a test running the suite) and a `mod` line here, behind its
//! feature.
#![cfg(feature = "testing")]

#[cfg(feature = "anthropic")]
mod anthropic;
#[cfg(feature = "openai")]
mod azure;
#[cfg(feature = "bedrock")]
mod bedrock;
#[cfg(feature = "bedrock")]
#[path = "../support/bedrock_api.rs"]
mod bedrock_api;
#[cfg(feature = "gemini")]
mod gemini;
#[cfg(feature = "gemini")]
#[path = "../support/gemini_api.rs"]
mod gemini_api;
#[cfg(feature = "openai")]
mod openai;
#[cfg(feature = "openai")]
mod openai_responses;
#[cfg(feature = "openai")]
#[path = "../support/responses_api.rs"]
mod responses_api;

use serde_json::Value;

/// `text` in about `n` pieces, cut at character boundaries (a piece may be a
/// multi-byte character's only), as APIs stream text.
pub fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n.max(1)).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// A field of a JSON object, or why the request is refused.
pub fn field<'a>(object: &'a Value, name: &str, at: &str) -> Result<&'a Value, String> {
    object.get(name).filter(|v| !v.is_null()).ok_or_else(|| format!("{at}: `{name}` is required"))
}

/// A string field of a JSON object, or why the request is refused.
pub fn string<'a>(object: &'a Value, name: &str, at: &str) -> Result<&'a str, String> {
    field(object, name, at)?.as_str().ok_or_else(|| format!("{at}: `{name}` must be a string"))
}

/// Refuses an object with a field not among `known`, as the APIs refuse unknown
/// parameters ("Extra inputs are not permitted", "Unrecognized request argument").
pub fn only_fields(object: &Value, known: &[&str], at: &str) -> Result<(), String> {
    let map = object.as_object().ok_or_else(|| format!("{at}: must be an object"))?;
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(extra) => Err(format!("{at}: `{extra}`: extra inputs are not permitted")),
        None => Ok(()),
    }
}
