//! What a model is told about a tool.

use serde_json::Value;

/// What a model is told about a tool: its name, description and the JSON Schema of
/// its arguments. A [`ChatRequest`](crate::ChatRequest) offers tools as shared
/// definitions, so a turn offers a registry's tools without copying them; the runtime's
/// `ToolSpec` holds one beside how the tool is run.
///
/// ```
/// use loopstack_model::ToolDefinition;
/// use serde_json::json;
///
/// let tool = ToolDefinition::new("get_weather", "The weather in a city.", json!({
///     "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
/// }));
/// assert_eq!(tool.name, "get_weather");
/// // The fingerprint is computed once and kept.
/// assert_eq!(tool.fingerprint(), tool.fingerprint());
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolDefinition {
    /// The tool's name.
    pub name: String,
    /// The tool's description.
    pub description: String,
    /// The JSON Schema of the arguments.
    pub input_schema: Value,
    /// The fingerprint, once computed.
    fingerprint: FingerprintCell,
}

impl ToolDefinition {
    /// A definition from its parts.
    pub fn new(name: impl Into<String>, description: impl Into<String>, input_schema: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema,
            fingerprint: FingerprintCell::default(),
        }
    }

    /// A 64-bit FNV-1a fingerprint of what a model is told about the tool (its
    /// name, description and input schema), computed on first use and kept: a model
    /// turn records the fingerprint of what it offered, so a replay tells a changed
    /// tool from the recorded one. A definition changed after its first fingerprint
    /// keeps the first; definitions in a registry do not change.
    pub fn fingerprint(&self) -> u64 {
        *self.fingerprint.0.get_or_init(|| {
            let mut hash = crate::fnv::Fnv1a::<u64>::default();
            let mut feed = |bytes: &[u8]| hash.bytes(bytes);
            for text in [&self.name, &self.description] {
                feed(&(text.len() as u64).to_le_bytes());
                feed(text.as_bytes());
            }
            crate::fnv::feed_json(&self.input_schema, &mut feed);
            hash.finish()
        })
    }
}

/// A computed fingerprint: not part of a definition's equality or its debug output.
#[derive(Clone, Default)]
struct FingerprintCell(std::sync::OnceLock<u64>);

impl PartialEq for FingerprintCell {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for FingerprintCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("..")
    }
}
