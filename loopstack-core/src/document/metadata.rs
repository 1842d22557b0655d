//! A document's metadata, kept as the JSON text a store writes.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A document's metadata: a JSON object (`{}` when it has none), such as the
/// provider, the model and the token usage of a model's message.
///
/// Every model turn saves some and few readers look at it, so it is kept as its JSON
/// text, as the document's content is: saving it is one serialization, a store
/// writes the text as it is, and reading an entry parses the text for that entry.
///
/// ```
/// use loopstack_core::Metadata;
/// use serde_json::json;
///
/// let meta = Metadata::from(json!({"model": "m-1", "usage": {"input_tokens": 50}}).as_object().unwrap().clone());
/// assert_eq!(meta.get("model"), Some(json!("m-1")));
/// assert_eq!(meta.get_raw("usage").map(|u| u.get()), Some(r#"{"input_tokens":50}"#));
/// assert!(!meta.contains_key("agent"));
/// assert_eq!(Metadata::new().as_str(), "{}");
/// ```
#[derive(Clone, Default)]
pub struct Metadata(Option<Box<RawValue>>);

impl Metadata {
    /// No entries.
    pub fn new() -> Self {
        Self(None)
    }

    /// The metadata whose text is `raw`, which must be a JSON object. `{}` is kept
    /// as no text.
    ///
    /// # Errors
    /// When `raw` is not an object.
    pub fn from_raw(raw: Box<RawValue>) -> Result<Self, serde_json::Error> {
        let text = raw.get().trim();
        if !text.starts_with('{') {
            return Err(de::Error::custom(format_args!("metadata must be a JSON object, not `{}`", short(text))));
        }
        Ok(if is_empty_object(text) { Self(None) } else { Self(Some(raw)) })
    }

    /// The metadata whose text is `text`, a JSON object: what a store reads back.
    ///
    /// # Errors
    /// When `text` is not JSON, or not an object.
    pub fn from_json(text: String) -> Result<Self, serde_json::Error> {
        Self::from_raw(RawValue::from_string(text)?)
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The JSON text of the object: `{}` when it has no entries.
    pub fn as_str(&self) -> &str {
        self.0.as_deref().map_or("{}", RawValue::get)
    }

    /// The text of entry `key`'s value, if it has one: the text is read only as far
    /// as it takes to find it.
    pub fn get_raw(&self, key: &str) -> Option<&RawValue> {
        serde_json::from_str(self.value_text(key)?).ok()
    }

    /// The JSON text of entry `key`'s value as it is stored, like
    /// [`Metadata::get_raw`] without reading the value through.
    pub fn get_json(&self, key: &str) -> Option<&str> {
        self.value_text(key)
    }

    /// Entry `key`'s value, read.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.read(key)?.ok()
    }

    /// Entry `key`'s value, read as a `T` (which may borrow from the text): `None`
    /// without the entry, an error when it does not read as a `T`.
    ///
    /// ```
    /// use loopstack_core::Metadata;
    ///
    /// let meta = Metadata::from_json(r#"{"usage": {"input_tokens": 5}, "model": "m-1"}"#.into()).unwrap();
    /// #[derive(serde::Deserialize)]
    /// struct Usage { input_tokens: u64 }
    /// assert_eq!(meta.read::<Usage>("usage").unwrap().unwrap().input_tokens, 5);
    /// assert_eq!(meta.read::<&str>("model").unwrap().unwrap(), "m-1");
    /// assert!(meta.read::<u64>("agent").is_none());
    /// ```
    pub fn read<'a, T: Deserialize<'a>>(&'a self, key: &str) -> Option<Result<T, serde_json::Error>> {
        self.value_text(key).map(serde_json::from_str)
    }

    /// Whether it has an entry `key`.
    pub fn contains_key(&self, key: &str) -> bool {
        self.value_text(key).is_some()
    }

    /// The text of entry `key`'s value (of its last, were it written twice).
    fn value_text(&self, key: &str) -> Option<&str> {
        let text = self.0.as_deref()?.get();
        if memchr::memchr(b'\\', text.as_bytes()).is_none() {
            // No escapes: every key is written as it reads (a text without the key's
            // bytes has no such entry), and a string ends at its next quote.
            if !holds(text.as_bytes(), key.as_bytes()) {
                return None;
            }
            return scan(text, key);
        }
        let mut de = serde_json::Deserializer::from_str(text);
        de.deserialize_map(Find(key)).ok().flatten().map(RawValue::get)
    }

    /// All entries, read.
    pub fn to_map(&self) -> Map<String, Value> {
        self.0.as_deref().and_then(|raw| serde_json::from_str(raw.get()).ok()).unwrap_or_default()
    }

    pub(crate) fn into_raw(self) -> Option<Box<RawValue>> {
        self.0
    }
}

/// Whether `haystack` holds the bytes of `needle`. A short text is searched from
/// each place its first byte appears (a model message's metadata is about 200
/// bytes): building memchr's substring search costs more than that, and is left
/// for long texts.
fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    const SHORT: usize = 1024;
    let Some((&first, rest)) = needle.split_first() else { return true };
    if haystack.len() > SHORT {
        return memchr::memmem::find(haystack, needle).is_some();
    }
    memchr::memchr_iter(first, haystack).any(|i| haystack[i + 1..].starts_with(rest))
}

/// The value text of top-level key `key` of object `text`, which holds no escapes
/// (so a string is everything up to its next quote); its last, were it written twice.
/// One pass over the bytes, jumping over strings.
fn scan<'t>(text: &'t str, key: &str) -> Option<&'t str> {
    let b = text.as_bytes();
    let ws = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    // The index of the quote that closes the string opened at `i`.
    let close = |i: usize| memchr::memchr(b'"', b.get(i + 1..)?).map(|p| i + 1 + p);
    let mut i = ws(0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut found = None;
    loop {
        i = ws(i + 1);
        // A key, or the end of an empty object.
        if b.get(i) != Some(&b'"') {
            return found;
        }
        let end = close(i)?;
        let this = &b[i + 1..end];
        i = ws(end + 1);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = ws(i + 1);
        // The value: up to the comma or brace that ends it at the object's level.
        let mut depth = 0usize;
        i = start;
        loop {
            match *b.get(i)? {
                b'"' => i = close(i)?,
                b'[' | b'{' => depth += 1,
                b']' | b'}' if depth > 0 => depth -= 1,
                b',' | b'}' if depth == 0 => break,
                _ => {}
            }
            i += 1;
        }
        if this == key.as_bytes() {
            found = Some(text[start..i].trim_end());
        }
        if b[i] == b'}' {
            return found;
        }
    }
}

/// `{}` with any whitespace inside.
fn is_empty_object(text: &str) -> bool {
    text.strip_prefix('{').and_then(|t| t.strip_suffix('}')).is_some_and(|inner| inner.trim().is_empty())
}

/// The first characters of `text`, for an error.
fn short(text: &str) -> &str {
    let end = text.char_indices().nth(40).map_or(text.len(), |(i, _)| i);
    &text[..end]
}

impl From<Map<String, Value>> for Metadata {
    fn from(map: Map<String, Value>) -> Self {
        if map.is_empty() {
            return Self(None);
        }
        // A map of JSON values always serializes.
        Self(super::to_raw_value(&map).ok())
    }
}

impl PartialEq for Metadata {
    /// The same entries, whatever their order and spacing in the text.
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) if a.get() == b.get() => true,
            _ => self.to_map() == other.to_map(),
        }
    }
}

impl fmt::Debug for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Metadata {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Some(raw) => raw.serialize(serializer),
            None => Map::new().serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Self::from_raw(raw).map_err(de::Error::custom)
    }
}

/// Finds one key's value in an object's text that holds escapes, borrowing it.
struct Find<'k>(&'k str);

impl<'de> Visitor<'de> for Find<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(is_key) = map.next_key_seed(KeyIs(self.0))? {
            if is_key {
                found = Some(map.next_value::<&'de RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Whether a map key is the one looked for.
struct KeyIs<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_short_or_long_text_holds_a_key_where_its_bytes_appear() {
        use super::holds;
        assert!(holds(br#"{"model":"m","request":{"fp":"1"}}"#, b"request"));
        assert!(!holds(br#"{"model":"m","reques":1,"rrequest"#.as_slice(), b"requests"));
        assert!(holds(b"abc", b""));
        assert!(!holds(b"", b"a"));
        let long = format!("{{\"pad\":\"{}\",\"images\":[1]}}", "r".repeat(2000));
        assert!(holds(long.as_bytes(), b"images"));
        assert!(!holds(long.as_bytes(), b"request"));
    }

    use serde_json::json;

    use super::*;

    fn meta(value: Value) -> Metadata {
        Metadata::from(value.as_object().cloned().expect("an object"))
    }

    #[test]
    fn entries_are_found_in_the_text_without_reading_the_rest() {
        let m = meta(json!({"a": [1, {"b": 2}], "k\"ey": "v", "usage": {"input_tokens": 5}}));
        assert_eq!(m.get("a"), Some(json!([1, {"b": 2}])));
        assert_eq!(m.get("k\"ey"), Some(json!("v")));
        assert_eq!(m.get_raw("usage").map(RawValue::get), Some(r#"{"input_tokens":5}"#));
        assert_eq!(m.get_json("usage"), Some(r#"{"input_tokens":5}"#));
        assert_eq!(m.get("b"), None, "a nested key is not an entry");
        assert!(!m.contains_key("missing"));
        assert_eq!(m.to_map().len(), 3);
    }

    #[test]
    fn entries_are_found_with_escapes_spacing_and_nesting_around_them() {
        let texts = [
            r#"{"a":"x,}]","k":[1,{"k":2}],"usage":{"n":"}"}}"#,
            r#" { "a" : "x,}]" , "k" : [ 1 , { "k" : 2 } ] , "usage" : { "n" : "}" } } "#,
            r#"{"a":"x,}]\n","k":[1,{"k":2}],"usage":{"n":"}\""}}"#,
        ];
        for text in texts {
            let m = Metadata::from_json(text.into()).unwrap();
            assert_eq!(m.get("k"), Some(json!([1, {"k": 2}])), "{text}");
            assert!(m.get("usage").is_some_and(|u| u["n"].as_str().is_some()), "{text}");
            assert!(m.get("a").is_some_and(|a| a.as_str().is_some_and(|a| a.starts_with("x,}]"))), "{text}");
            assert_eq!(m.get("n"), None, "{text}: a nested key is not an entry");
            assert_eq!(m.get("x"), None, "{text}: text inside a string is not a key");
        }
        let twice = Metadata::from_json(r#"{"a":1,"a":2}"#.into()).unwrap();
        assert_eq!(twice.get("a"), Some(json!(2)), "the last of a key written twice");
        assert_eq!(twice.read::<u64>("a").unwrap().unwrap(), 2);
    }

    #[test]
    fn empty_metadata_has_no_text_and_reads_as_an_empty_object() {
        assert!(meta(json!({})).is_empty());
        assert_eq!(Metadata::new().as_str(), "{}");
        assert_eq!(serde_json::to_string(&Metadata::new()).unwrap(), "{}");
        let read: Metadata = serde_json::from_str(" { } ").unwrap();
        assert!(read.is_empty());
        assert_eq!(Metadata::from_json("{ }".into()).unwrap(), Metadata::new());
    }

    #[test]
    fn only_an_object_is_metadata() {
        for text in ["[1]", "\"x\"", "1", "null"] {
            let err = Metadata::from_json(text.into()).unwrap_err();
            assert!(err.to_string().contains("must be a JSON object"), "{text}: {err}");
            assert!(serde_json::from_str::<Metadata>(text).is_err(), "{text}");
        }
        assert!(Metadata::from_json("{\"a\":".into()).is_err(), "not JSON");
    }

    #[test]
    fn equality_is_of_entries_not_of_text() {
        let a = Metadata::from_json(r#"{"a":1,"b":[2]}"#.into()).unwrap();
        let b = Metadata::from_json(r#"{ "b": [2], "a": 1 }"#.into()).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, meta(json!({"a": 1})));
        assert_eq!(serde_json::to_value(&a).unwrap(), json!({"a": 1, "b": [2]}));
    }
}
