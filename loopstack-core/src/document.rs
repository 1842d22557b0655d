//! Documents: what a run saves, in order.

use std::borrow::Cow;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

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
    /// Free-form metadata, such as the provider and the token usage.
    pub metadata: Map<String, Value>,
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
    pub(crate) metadata: Map<String, Value>,
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

    /// Adds a metadata entry.
    pub fn meta(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(name.into(), value.into());
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
    serde_json::value::to_raw_value(&checked::Checked { value, depth: 0, raw: false, refused: &refused }).map_err(|e| {
        match refused.take() {
            Some(why) => CheckedError::Unreadable(why, e),
            None => CheckedError::Serialize(e),
        }
    })
}

/// Whether the JSON text nests arrays and objects deeper than `limit`, starting at
/// `depth` levels: one pass over the bytes, counting brackets outside strings and
/// stopping as soon as it knows.
pub(crate) fn nests_deeper_than(text: &[u8], depth: usize, limit: usize) -> bool {
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
            let mut keys = checked::Keys::default();
            while let Some(key) = map.next_key::<String>()? {
                if !keys.insert(std::borrow::Cow::Owned(key.clone())) {
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

/// A serializer that forwards to serde_json's and refuses non-finite floats and
/// nesting deeper than [`READ_DEPTH`] on the way.
mod checked {
    use std::borrow::Cow;
    use std::cell::Cell;
    use std::collections::HashSet;
    use std::fmt::Display;

    use serde::ser::{self, Serialize, Serializer};

    use super::{READ_DEPTH, Unreadable};

    /// serde_json's name of the struct a `RawValue` serializes as.
    const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

    /// A value to serialize at `depth` levels of nesting.
    pub(super) struct Checked<'a, T: ?Sized> {
        pub(super) value: &'a T,
        pub(super) depth: usize,
        /// The value is a `RawValue`'s text: its nesting is counted in the text.
        pub(super) raw: bool,
        pub(super) refused: &'a Cell<Option<Unreadable>>,
    }

    impl<T: Serialize + ?Sized> Serialize for Checked<'_, T> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            self.value.serialize(Ser { inner: serializer, depth: self.depth, raw: self.raw, refused: self.refused })
        }
    }

    struct Ser<'a, S> {
        inner: S,
        depth: usize,
        raw: bool,
        refused: &'a Cell<Option<Unreadable>>,
    }

    /// The keys an object wrote so far, to refuse one written twice: a list while
    /// short, a set beyond.
    #[derive(Default)]
    pub(crate) struct Keys {
        list: Vec<Cow<'static, str>>,
        set: HashSet<Cow<'static, str>>,
    }

    impl Keys {
        const LIST: usize = 16;

        /// Records `key`; `false` if it was written already.
        pub(crate) fn insert(&mut self, key: Cow<'static, str>) -> bool {
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

    /// A map key's text as serde_json writes it, when it is one serde_json accepts.
    fn key_text<K: Serialize + ?Sized>(key: &K) -> Option<Cow<'static, str>> {
        match serde_json::to_value(key).ok()? {
            serde_json::Value::String(s) => Some(Cow::Owned(s)),
            serde_json::Value::Number(n) => Some(Cow::Owned(n.to_string())),
            serde_json::Value::Bool(b) => Some(Cow::Borrowed(if b { "true" } else { "false" })),
            _ => None,
        }
    }

    /// A compound (array, object, variant) whose members are checked at `depth`.
    pub(super) struct Compound<'a, C> {
        inner: C,
        depth: usize,
        raw: bool,
        refused: &'a Cell<Option<Unreadable>>,
        /// For objects: the keys written so far.
        keys: Option<Keys>,
    }

    impl<'a, C> Compound<'a, C> {
        fn member<'v, T: ?Sized>(&self, value: &'v T) -> Checked<'v, T>
        where
            'a: 'v,
        {
            Checked { value, depth: self.depth, raw: self.raw, refused: self.refused }
        }

        /// Records an object's key, refusing one it wrote already.
        fn key<E: ser::Error>(&mut self, key: Option<Cow<'static, str>>) -> Result<(), E> {
            if let (Some(keys), Some(key)) = (&mut self.keys, key)
                && !keys.insert(key.clone())
            {
                let why = Unreadable::DuplicateKey(key.into_owned());
                let err = E::custom(&why);
                self.refused.set(Some(why));
                return Err(err);
            }
            Ok(())
        }
    }

    impl<'a, S: Serializer> Ser<'a, S> {
        fn refuse<E: ser::Error>(&self, why: Unreadable) -> E {
            let err = E::custom(&why);
            self.refused.set(Some(why));
            err
        }

        /// The depth `levels` more levels in, unless that is too deep.
        fn enter(&self, levels: usize) -> Result<usize, S::Error> {
            let depth = self.depth + levels;
            if depth > READ_DEPTH { Err(self.refuse(Unreadable::TooDeep)) } else { Ok(depth) }
        }

        fn nested<'v, T: ?Sized>(&self, value: &'v T, depth: usize) -> Checked<'v, T>
        where
            'a: 'v,
        {
            Checked { value, depth, raw: false, refused: self.refused }
        }
    }

    macro_rules! forward {
        ($($method:ident($ty:ty)),* $(,)?) => {
            $(fn $method(self, v: $ty) -> Result<S::Ok, S::Error> {
                self.inner.$method(v)
            })*
        };
    }

    impl<'a, S: Serializer> Serializer for Ser<'a, S> {
        type Ok = S::Ok;
        type Error = S::Error;
        type SerializeSeq = Compound<'a, S::SerializeSeq>;
        type SerializeTuple = Compound<'a, S::SerializeTuple>;
        type SerializeTupleStruct = Compound<'a, S::SerializeTupleStruct>;
        type SerializeTupleVariant = Compound<'a, S::SerializeTupleVariant>;
        type SerializeMap = Compound<'a, S::SerializeMap>;
        type SerializeStruct = Compound<'a, S::SerializeStruct>;
        type SerializeStructVariant = Compound<'a, S::SerializeStructVariant>;

        forward! {
            serialize_bool(bool), serialize_i8(i8), serialize_i16(i16), serialize_i32(i32), serialize_i64(i64),
            serialize_i128(i128), serialize_u8(u8), serialize_u16(u16), serialize_u32(u32), serialize_u64(u64),
            serialize_u128(u128), serialize_char(char), serialize_bytes(&[u8]),
            serialize_unit_struct(&'static str),
        }

        fn serialize_f32(self, v: f32) -> Result<S::Ok, S::Error> {
            if !v.is_finite() {
                return Err(self.refuse(Unreadable::NonFinite(f64::from(v))));
            }
            self.inner.serialize_f32(v)
        }

        fn serialize_f64(self, v: f64) -> Result<S::Ok, S::Error> {
            if !v.is_finite() {
                return Err(self.refuse(Unreadable::NonFinite(v)));
            }
            self.inner.serialize_f64(v)
        }

        fn serialize_str(self, v: &str) -> Result<S::Ok, S::Error> {
            // A `RawValue`'s text is written as it is: count its nesting here.
            if self.raw && super::nests_deeper_than(v.as_bytes(), self.depth, READ_DEPTH) {
                return Err(self.refuse(Unreadable::TooDeep));
            }
            if self.raw
                && let Some(key) = super::duplicate_key(v)
            {
                return Err(self.refuse(Unreadable::DuplicateKey(key)));
            }
            self.inner.serialize_str(v)
        }

        fn serialize_none(self) -> Result<S::Ok, S::Error> {
            self.inner.serialize_none()
        }

        fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
            let checked = self.nested(value, self.depth);
            self.inner.serialize_some(&checked)
        }

        fn serialize_unit(self) -> Result<S::Ok, S::Error> {
            self.inner.serialize_unit()
        }

        fn serialize_unit_variant(
            self,
            name: &'static str,
            index: u32,
            variant: &'static str,
        ) -> Result<S::Ok, S::Error> {
            self.inner.serialize_unit_variant(name, index, variant)
        }

        fn serialize_newtype_struct<T: Serialize + ?Sized>(
            self,
            name: &'static str,
            value: &T,
        ) -> Result<S::Ok, S::Error> {
            let checked = self.nested(value, self.depth);
            self.inner.serialize_newtype_struct(name, &checked)
        }

        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            name: &'static str,
            index: u32,
            variant: &'static str,
            value: &T,
        ) -> Result<S::Ok, S::Error> {
            // `{"variant": value}`: one level.
            let depth = self.enter(1)?;
            let checked = self.nested(value, depth);
            self.inner.serialize_newtype_variant(name, index, variant, &checked)
        }

        fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
            let depth = self.enter(1)?;
            let inner = self.inner.serialize_seq(len)?;
            Ok(Compound { inner, depth, raw: false, refused: self.refused, keys: None })
        }

        fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
            let depth = self.enter(1)?;
            let inner = self.inner.serialize_tuple(len)?;
            Ok(Compound { inner, depth, raw: false, refused: self.refused, keys: None })
        }

        fn serialize_tuple_struct(
            self,
            name: &'static str,
            len: usize,
        ) -> Result<Self::SerializeTupleStruct, S::Error> {
            let depth = self.enter(1)?;
            let inner = self.inner.serialize_tuple_struct(name, len)?;
            Ok(Compound { inner, depth, raw: false, refused: self.refused, keys: None })
        }

        fn serialize_tuple_variant(
            self,
            name: &'static str,
            index: u32,
            variant: &'static str,
            len: usize,
        ) -> Result<Self::SerializeTupleVariant, S::Error> {
            // `{"variant": [..]}`: two levels.
            let depth = self.enter(2)?;
            let inner = self.inner.serialize_tuple_variant(name, index, variant, len)?;
            Ok(Compound { inner, depth, raw: false, refused: self.refused, keys: None })
        }

        fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
            let depth = self.enter(1)?;
            let inner = self.inner.serialize_map(len)?;
            Ok(Compound { inner, depth, raw: false, refused: self.refused, keys: Some(Keys::default()) })
        }

        fn serialize_struct(self, name: &'static str, len: usize) -> Result<Self::SerializeStruct, S::Error> {
            if name == RAW_VALUE_TOKEN {
                // Not an object: serde_json writes the raw text in its place.
                let (depth, refused) = (self.depth, self.refused);
                let inner = self.inner.serialize_struct(name, len)?;
                return Ok(Compound { inner, depth, raw: true, refused, keys: None });
            }
            let depth = self.enter(1)?;
            let inner = self.inner.serialize_struct(name, len)?;
            // A struct's fields are distinct as serde's derive writes them, and a
            // struct with a flattened field is written as a map (checked there): the
            // check would cost every checkpoint for nothing.
            Ok(Compound { inner, depth, raw: false, refused: self.refused, keys: None })
        }

        fn serialize_struct_variant(
            self,
            name: &'static str,
            index: u32,
            variant: &'static str,
            len: usize,
        ) -> Result<Self::SerializeStructVariant, S::Error> {
            // `{"variant": {..}}`: two levels.
            let depth = self.enter(2)?;
            let inner = self.inner.serialize_struct_variant(name, index, variant, len)?;
            Ok(Compound { inner, depth, raw: false, refused: self.refused, keys: None })
        }

        fn collect_str<T: Display + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
            self.inner.collect_str(value)
        }

        fn is_human_readable(&self) -> bool {
            self.inner.is_human_readable()
        }
    }

    /// The sequence-like compounds: each element is checked one level deeper.
    macro_rules! checked_elements {
        ($($trait:ident::$method:ident),* $(,)?) => {$(
            impl<C: ser::$trait> ser::$trait for Compound<'_, C> {
                type Ok = C::Ok;
                type Error = C::Error;
                fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), C::Error> {
                    let checked = self.member(value);
                    self.inner.$method(&checked)
                }
                fn end(self) -> Result<C::Ok, C::Error> {
                    self.inner.end()
                }
            }
        )*};
    }

    checked_elements!(
        SerializeSeq::serialize_element,
        SerializeTuple::serialize_element,
        SerializeTupleStruct::serialize_field,
        SerializeTupleVariant::serialize_field,
    );

    impl<C: ser::SerializeMap> ser::SerializeMap for Compound<'_, C> {
        type Ok = C::Ok;
        type Error = C::Error;
        // Keys go to serde_json as they are: it accepts only strings, numbers (a
        // non-finite float is an error there) and the like, never a nested value.
        fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), C::Error> {
            self.key(key_text(key))?;
            self.inner.serialize_key(key)
        }
        fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), C::Error> {
            let checked = self.member(value);
            self.inner.serialize_value(&checked)
        }
        fn serialize_entry<K: Serialize + ?Sized, V: Serialize + ?Sized>(
            &mut self,
            key: &K,
            value: &V,
        ) -> Result<(), C::Error> {
            self.key(key_text(key))?;
            let checked = self.member(value);
            self.inner.serialize_entry(key, &checked)
        }
        fn end(self) -> Result<C::Ok, C::Error> {
            self.inner.end()
        }
    }

    /// The struct-like compounds: each field is checked one level deeper.
    macro_rules! checked_fields {
        ($($trait:ident),* $(,)?) => {$(
            impl<C: ser::$trait> ser::$trait for Compound<'_, C> {
                type Ok = C::Ok;
                type Error = C::Error;
                fn serialize_field<T: Serialize + ?Sized>(
                    &mut self,
                    key: &'static str,
                    value: &T,
                ) -> Result<(), C::Error> {
                    self.key(Some(Cow::Borrowed(key)))?;
                    let checked = self.member(value);
                    self.inner.serialize_field(key, &checked)
                }
                fn skip_field(&mut self, key: &'static str) -> Result<(), C::Error> {
                    self.inner.skip_field(key)
                }
                fn end(self) -> Result<C::Ok, C::Error> {
                    self.inner.end()
                }
            }
        )*};
    }

    checked_fields!(SerializeStruct, SerializeStructVariant);
}

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
    }
}
