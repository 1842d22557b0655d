//! Documents: what a run saves, in order.

use std::borrow::Cow;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

mod metadata;
pub use metadata::Metadata;
mod raw;
pub(crate) use raw::to_raw_value;

/// A document saved by a run: typed content plus its type name, an optional key,
/// tags and metadata.
///
/// The content is kept as serialized JSON: saving serializes once, and a store writes
/// the text as it is.
///
/// Saving a document whose key already exists in the run replaces it in place (the
/// run's list keeps its position) and raises its `version`; the store keeps the old
/// versions as history.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Document {
    /// Position of the document's first version in the run, from 0.
    pub seq: u64,
    /// The document type, such as `llm_message`.
    pub doc_type: Cow<'static, str>,
    /// The key; saving the same key again replaces the document.
    pub key: Option<String>,
    /// 1 for the first save of a key, then 2, 3, ...
    pub version: u32,
    /// Tags, such as `conversation`.
    pub tags: Vec<Cow<'static, str>>,
    /// Free-form metadata, such as the provider and the token usage, kept as its
    /// JSON text ([`Metadata::get`] reads an entry).
    pub metadata: Metadata,
    /// The content, as JSON.
    pub content: Box<RawValue>,
    /// The step (transition count) that saved this version.
    pub step: u64,
}

impl Document {
    /// Reads the content as a typed document.
    pub fn read<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.content.get())
    }

    /// The content as a JSON value.
    ///
    /// An error only for content the runtime would not have saved (it refuses
    /// content nested deeper than serde_json reads back), such as a document written
    /// to the store by other means; never a panic.
    pub fn value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(self.content.get())
    }

    /// Whether the document is of type `T`.
    pub fn is<T: DocumentType>(&self) -> bool {
        self.doc_type == T::TYPE
    }

    /// Whether the document carries a tag.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }
}

impl PartialEq for Document {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
            && self.doc_type == other.doc_type
            && self.key == other.key
            && self.version == other.version
            && self.tags == other.tags
            && self.metadata == other.metadata
            && self.content.get() == other.content.get()
            && self.step == other.step
    }
}

/// A type that can be saved as a document.
///
/// ```
/// use loopstack_core::DocumentType;
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Invoice { total_cents: u64 }
///
/// impl DocumentType for Invoice {
///     const TYPE: &'static str = "invoice";
/// }
/// ```
pub trait DocumentType: Serialize + DeserializeOwned {
    /// The stable type name stored with the document.
    const TYPE: &'static str;

    /// Tags every document of this type carries.
    fn default_tags() -> &'static [&'static str] {
        &[]
    }
}

/// How a document is saved: its key, tags and metadata.
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use = "options do nothing until passed to `RunContext::save_with`"]
pub struct SaveOptions {
    pub(crate) key: Option<String>,
    pub(crate) tags: Vec<Cow<'static, str>>,
    /// Entries added one at a time ([`SaveOptions::meta`]).
    pub(crate) entries: Map<String, Value>,
    /// Metadata given whole ([`SaveOptions::metadata`]), or why it cannot be stored.
    pub(crate) whole: Option<Result<Metadata, String>>,
}

impl SaveOptions {
    /// No key, no tags beyond the type's, no metadata.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the key; a later save with the same key replaces the document.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Adds a tag.
    pub fn tag(mut self, tag: impl Into<Cow<'static, str>>) -> Self {
        self.tags.push(tag.into());
        self
    }

    /// Adds a metadata entry; a later entry of the same name replaces it.
    pub fn meta(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.entries.insert(name.into(), value.into());
        self
    }

    /// Sets the metadata to `meta`, which serializes as a JSON object (a struct or a
    /// map): one serialization, where entries added one at a time each build a JSON
    /// value. Entries added with [`SaveOptions::meta`] are added to it.
    ///
    /// Metadata that is not an object, or nests deeper than 127 levels (serde_json
    /// would not read it back), is refused when the document is saved, and nothing
    /// is saved. As in a JSON value, a float that is not finite is written as `null`,
    /// and of an entry written twice the last is read.
    ///
    /// ```
    /// use loopstack_core::SaveOptions;
    ///
    /// #[derive(serde::Serialize)]
    /// struct Reviewed<'a> { reviewer: &'a str, score: u8 }
    ///
    /// let options = SaveOptions::new().metadata(&Reviewed { reviewer: "ada", score: 4 });
    /// # let _ = options;
    /// ```
    pub fn metadata<T: Serialize + ?Sized>(mut self, meta: &T) -> Self {
        // Not the checked serializer of contents and states: metadata is read as a
        // map of JSON values, so only its depth can keep it from reading back.
        let refused = std::cell::Cell::new(None);
        let whole = match raw::write(meta, write::Check::Depth(&refused)) {
            Ok(raw) => Metadata::from_raw(raw).map_err(|e| e.to_string()),
            Err(e) => match refused.take() {
                Some(why) => Err(format!("its metadata would not read back: {why}")),
                None => Err(format!("its metadata does not serialize: {e}")),
            },
        };
        self.whole = Some(whole);
        self
    }
}

/// The deepest nesting of arrays and objects serde_json reads back: 127 levels
/// (`[]` is one level). Its reader stops at 128, so a value written any deeper could
/// be stored but never loaded again.
pub(crate) const READ_DEPTH: usize = 127;

/// Why a value cannot be stored so that it reads back as it was.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Unreadable {
    /// A float that is NaN or infinite: serde_json writes it as `null`.
    NonFinite(f64),
    /// Arrays and objects nested deeper than [`READ_DEPTH`].
    TooDeep,
    /// An object that holds this key twice (a field and a flattened map holding the
    /// same key, say): serde_json writes both, and a struct refuses it when read.
    DuplicateKey(String),
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NonFinite(v) => write!(
                f,
                "it holds the float {v}, which JSON cannot represent (it would be written as null and not read back)"
            ),
            Self::TooDeep => write!(
                f,
                "it nests arrays and objects more than {READ_DEPTH} levels deep, deeper than serde_json reads back"
            ),
            Self::DuplicateKey(key) => write!(
                f,
                "it writes the key `{key}` twice in one object (a field and a flattened map holding the same key, \
                 say), which does not read back"
            ),
        }
    }
}

/// Why [`to_checked_raw_value`] failed.
#[derive(Debug)]
pub(crate) enum CheckedError {
    /// The value serializes, but would not read back.
    Unreadable(Unreadable, serde_json::Error),
    /// The value does not serialize (its `Serialize` impl failed, a map key is not a string).
    Serialize(serde_json::Error),
}

impl From<CheckedError> for serde_json::Error {
    fn from(e: CheckedError) -> Self {
        match e {
            CheckedError::Unreadable(_, e) | CheckedError::Serialize(e) => e,
        }
    }
}

/// `serde_json::value::to_raw_value`, refusing what would not read back: a float
/// that is not finite, nesting deeper than [`READ_DEPTH`], an object that holds a
/// key twice. One pass, the same text as `to_raw_value` writes for everything it
/// accepts.
pub(crate) fn to_checked_raw_value<T: Serialize + ?Sized>(value: &T) -> Result<Box<RawValue>, CheckedError> {
    let refused = std::cell::Cell::new(None);
    raw::write(value, write::Check::All(&refused)).map_err(|e| match refused.take() {
        Some(why) => CheckedError::Unreadable(why, e),
        None => CheckedError::Serialize(e),
    })
}

/// Whether the JSON text nests arrays and objects deeper than `limit`, starting at
/// `depth` levels: one pass over the bytes, counting brackets outside strings and
/// stopping as soon as it knows.
pub(crate) fn nests_deeper_than(text: &[u8], depth: usize, limit: usize) -> bool {
    // Text with fewer bytes, or fewer brackets, than the room left cannot nest that
    // deep: its length costs nothing, the count memchr makes in wide steps, where
    // the walk below goes byte by byte.
    if depth + text.len() <= limit || depth + memchr::memchr2_iter(b'[', b'{', text).count() <= limit {
        return false;
    }
    let mut depth = depth;
    let mut bytes = text.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'"' => {
                // Skip the string, escapes included.
                while let Some(&c) = bytes.next() {
                    match c {
                        b'\\' => {
                            bytes.next();
                        }
                        b'"' => break,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    false
}

/// The keys an object of a JSON text holds, to find one it holds twice: a list
/// while short, a set beyond.
#[derive(Default)]
struct Keys {
    list: Vec<String>,
    set: std::collections::HashSet<String>,
}

impl Keys {
    const LIST: usize = 16;

    /// Records `key`; `false` if it was there already.
    fn insert(&mut self, key: String) -> bool {
        if self.set.is_empty() {
            if self.list.contains(&key) {
                return false;
            }
            if self.list.len() < Self::LIST {
                self.list.push(key);
                return true;
            }
            self.set.extend(self.list.drain(..));
        }
        self.set.insert(key)
    }
}

/// The first key that some object of the JSON text holds twice, if any (text that
/// does not parse has none: its other checks refuse it).
pub(crate) fn duplicate_key(text: &str) -> Option<String> {
    use serde::de::{self, Deserializer as _, MapAccess, SeqAccess, Visitor};

    struct Walk<'a>(&'a std::cell::RefCell<Option<String>>);
    impl<'de> de::DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut keys = Keys::default();
            while let Some(key) = map.next_key::<String>()? {
                if !keys.insert(key.clone()) {
                    *self.0.borrow_mut() = Some(key);
                    return Err(de::Error::custom("a key twice"));
                }
                map.next_value_seed(Walk(self.0))?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Walk(self.0))?.is_some() {}
            Ok(())
        }
    }
    // Only objects can hold a key twice.
    if !text.contains('{') {
        return None;
    }
    let found = std::cell::RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    // Its own error, or the text's: either way what it found, if anything, is kept.
    let _ = de.deserialize_any(Walk(&found));
    found.into_inner()
}

/// Whether a JSON value nests deeper than `limit`, counting from `depth`; never
/// descends more than `limit` levels.
pub(crate) fn value_deeper_than(value: &Value, depth: usize, limit: usize) -> bool {
    match value {
        Value::Array(items) => depth + 1 > limit || items.iter().any(|v| value_deeper_than(v, depth + 1, limit)),
        Value::Object(map) => depth + 1 > limit || map.values().any(|v| value_deeper_than(v, depth + 1, limit)),
        _ => false,
    }
}

/// The type name of a conversation's message documents (`loopstack_llm`'s
/// `MESSAGE_DOCUMENT`).
pub const MESSAGE_DOCUMENT: &str = "llm_message";
/// The tag of the documents that make up a run's conversation (`loopstack_llm`'s
/// `CONVERSATION_TAG`).
pub const CONVERSATION_TAG: &str = "conversation";

/// A model's message saved as a run document: here, beside [`DocumentType`], since
/// the message belongs to the model layer below the runtime.
impl DocumentType for loopstack_model::Message {
    const TYPE: &'static str = MESSAGE_DOCUMENT;
    fn default_tags() -> &'static [&'static str] {
        &[CONVERSATION_TAG]
    }
}

mod write;

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};
    use serde_json::json;
    use serde_json::value::RawValue;

    use super::{CheckedError, READ_DEPTH, Unreadable, nests_deeper_than, to_checked_raw_value};

    /// Every shape serde_json writes as nesting: arrays, objects, each enum variant kind.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Shape {
        Leaf,
        Newtype(Box<Self>),
        Tuple(Box<Self>, u8),
        Struct { inner: Box<Self> },
        Seq(Vec<Self>),
        Map(std::collections::BTreeMap<String, Self>),
        Pair((Box<Self>, Option<f64>)),
    }

    fn chain(kinds: &[u8]) -> Shape {
        kinds.iter().rev().fold(Shape::Leaf, |inner, k| match k % 6 {
            0 => Shape::Newtype(Box::new(inner)),
            1 => Shape::Tuple(Box::new(inner), 7),
            2 => Shape::Struct { inner: Box::new(inner) },
            3 => Shape::Seq(vec![inner]),
            4 => Shape::Map([("k".to_owned(), inner)].into()),
            _ => Shape::Pair((Box::new(inner), Some(-0.0))),
        })
    }

    #[test]
    fn accepts_exactly_what_serde_json_reads_back_and_writes_the_same_text() {
        let (mut accepted, mut refused) = (0, 0);
        for pattern in [[0u8, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [3, 3, 3, 3, 3, 3], [1, 2, 1, 2, 0, 0]] {
            for len in 40..100 {
                let kinds: Vec<u8> = pattern.iter().copied().cycle().take(len).collect();
                let value = chain(&kinds);
                let plain = serde_json::value::to_raw_value(&value).unwrap();
                let reads_back = serde_json::from_str::<Shape>(plain.get()).is_ok_and(|v| v == value);
                match to_checked_raw_value(&value) {
                    Ok(checked) => {
                        assert_eq!(checked.get(), plain.get(), "the same text");
                        assert!(reads_back, "accepted but not readable: {len} of {pattern:?}");
                        accepted += 1;
                    }
                    Err(CheckedError::Unreadable(Unreadable::TooDeep, _)) => {
                        assert!(!reads_back, "refused but readable: {len} of {pattern:?}");
                        refused += 1;
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
        }
        assert!(accepted > 20 && refused > 20, "both sides of the limit: {accepted} accepted, {refused} refused");
    }

    #[test]
    fn refuses_non_finite_floats_anywhere_and_keeps_finite_ones_exact() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let err = to_checked_raw_value(&json!({"a": [1]}).as_object().map(|_| vec![(1, bad)])).unwrap_err();
            assert!(matches!(err, CheckedError::Unreadable(Unreadable::NonFinite(_), _)), "{err:?}");
            assert!(matches!(to_checked_raw_value(&(bad as f32)), Err(CheckedError::Unreadable(..))));
        }
        let floats = [0.0, -0.0, 2.017351698988807e285, f64::MIN_POSITIVE, 5e-324, f64::MAX, -1.5];
        let text = to_checked_raw_value(&floats).unwrap();
        assert_eq!(text.get(), serde_json::to_string(&floats).unwrap());
        let back: Vec<f64> = serde_json::from_str(text.get()).unwrap();
        assert_eq!(back.iter().map(|f| f.to_bits()).collect::<Vec<_>>(), floats.map(f64::to_bits).to_vec());
    }

    #[test]
    fn counts_the_nesting_inside_raw_values() {
        let raw = |depth: usize| RawValue::from_string(format!("{}{}", "[".repeat(depth), "]".repeat(depth))).unwrap();
        // One level of object around the raw text.
        assert!(to_checked_raw_value(&json!({"x": 1})).is_ok());
        let ok = std::collections::BTreeMap::from([("raw", raw(READ_DEPTH - 1))]);
        assert_eq!(to_checked_raw_value(&ok).unwrap().get(), serde_json::to_string(&ok).unwrap());
        let deep = std::collections::BTreeMap::from([("raw", raw(READ_DEPTH))]);
        assert!(matches!(to_checked_raw_value(&deep), Err(CheckedError::Unreadable(Unreadable::TooDeep, _))));
        // Non-string map keys are still serde_json's error.
        let keys = std::collections::BTreeMap::from([((1, 2), 3)]);
        assert!(matches!(to_checked_raw_value(&keys), Err(CheckedError::Serialize(_))));
    }

    #[test]
    fn the_scan_skips_strings_and_escapes() {
        assert!(!nests_deeper_than(br#"["[[[[", "\"[[[", {"{{": "}}"}]"#, 0, 2));
        assert!(nests_deeper_than(br#"["\\", [[1]]]"#, 0, 2));
        assert!(!nests_deeper_than(br#"["\\", [[1]]]"#, 0, 3));
        assert!(nests_deeper_than(b"[]", 3, 3));
        // As many bytes as room left, or one more.
        assert!(!nests_deeper_than(b"[[[", 0, 3));
        assert!(nests_deeper_than(b"[[[[", 0, 3));
    }
}
