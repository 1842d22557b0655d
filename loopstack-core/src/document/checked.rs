//! A serializer that forwards to serde_json's and refuses non-finite floats and
//! nesting deeper than [`READ_DEPTH`] on the way.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashSet;
use std::fmt::Display;

use serde::ser::{self, Serialize, Serializer};

use super::raw::RAW_VALUE_TOKEN;
use super::{READ_DEPTH, Unreadable};

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

    fn serialize_unit_variant(self, name: &'static str, index: u32, variant: &'static str) -> Result<S::Ok, S::Error> {
        self.inner.serialize_unit_variant(name, index, variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, name: &'static str, value: &T) -> Result<S::Ok, S::Error> {
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

    fn serialize_tuple_struct(self, name: &'static str, len: usize) -> Result<Self::SerializeTupleStruct, S::Error> {
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
                // Fields keep no keys (see `serialize_struct`): no call per field.
                if self.keys.is_some() {
                    self.key(Some(Cow::Borrowed(key)))?;
                }
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
