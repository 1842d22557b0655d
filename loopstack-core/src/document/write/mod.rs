//! The JSON writer of documents, states and metadata: the text serde_json's
//! compact serializer writes, into a `String`, and when asked, refusing on the way
//! what would not read back (a float that is not finite, nesting deeper than
//! [`READ_DEPTH`], an object that holds a key twice).
//!
//! serde_json escapes a string one byte at a time and hands each run of plain bytes
//! to its writer as a fragment. Most strings here (keys, ids, messages) need no
//! escape at all: this writer looks for one eight bytes at a time and copies a
//! plain string whole. It writes into a `String` from `&str`s and ASCII only, so the
//! text needs no check that it is UTF-8 afterwards.

mod escape;
mod key;

use std::cell::Cell;
use std::collections::HashSet;
use std::fmt::Display;

use serde::ser::{self, Serialize};
use serde_json::Error;

use self::escape::{write_display, write_literal, write_str};
use self::key::{MapKey, RawText};
use super::raw::RAW_VALUE_TOKEN;
use super::{READ_DEPTH, Unreadable};

/// What a write refuses of what would not read back, saying why in the cell.
#[derive(Clone, Copy)]
pub(crate) enum Check<'a> {
    /// Nothing: all that serde_json writes (a float that is not finite as `null`,
    /// any depth).
    Nothing,
    /// Nesting deeper than [`READ_DEPTH`] only: what a map of JSON values, as
    /// metadata is read, needs.
    Depth(&'a Cell<Option<Unreadable>>),
    /// All that [`Unreadable`] names: what documents and states, read back as
    /// their types, need.
    All(&'a Cell<Option<Unreadable>>),
}

/// Writes one value's JSON text at the end of `out`.
pub(super) struct Writer<'a> {
    out: &'a mut String,
    /// Arrays and objects open around what is written next.
    depth: usize,
    check: Check<'a>,
}

impl<'a> Writer<'a> {
    pub(super) fn new(out: &'a mut String, check: Check<'a>) -> Self {
        Self { out, depth: 0, check }
    }

    /// Whether the write refuses all that would not read back.
    fn checks(&self) -> bool {
        matches!(self.check, Check::All(_))
    }

    /// Whether the write refuses nesting deeper than [`READ_DEPTH`].
    fn checks_depth(&self) -> bool {
        !matches!(self.check, Check::Nothing)
    }

    fn refuse(&self, why: Unreadable) -> Error {
        let err = ser::Error::custom(&why);
        if let Check::Depth(refused) | Check::All(refused) = self.check {
            refused.set(Some(why));
        }
        err
    }

    /// Opens an array or an object: one level deeper.
    #[inline]
    fn open(&mut self, bracket: char) -> Result<(), Error> {
        self.depth += 1;
        if self.depth > READ_DEPTH && self.checks_depth() {
            return Err(self.refuse(Unreadable::TooDeep));
        }
        self.out.push(bracket);
        Ok(())
    }

    #[inline]
    fn close(&mut self, bracket: char) {
        self.depth -= 1;
        self.out.push(bracket);
    }

    fn integer<I: itoa::Integer>(&mut self, v: I) {
        self.out.push_str(itoa::Buffer::new().format(v));
    }

    /// An unsigned integer: one below a hundred (most counts a state holds) as its
    /// digits, without formatting it and copying the text.
    #[inline]
    fn unsigned<I: itoa::Integer + Into<u64> + Copy>(&mut self, v: I) {
        let digit = |d: u64| char::from(b'0' + d as u8);
        match v.into() {
            one @ 0..10 => self.out.push(digit(one)),
            two @ 10..100 => {
                self.out.push(digit(two / 10));
                self.out.push(digit(two % 10));
            }
            _ => self.integer(v),
        }
    }

    fn float<F: zmij::Float>(&mut self, v: F, finite: bool, wide: f64) -> Result<(), Error> {
        if finite {
            self.out.push_str(zmij::Buffer::new().format_finite(v));
        } else if self.checks() {
            return Err(self.refuse(Unreadable::NonFinite(wide)));
        } else {
            self.out.push_str("null");
        }
        Ok(())
    }

    /// `{"variant":` before a variant's content.
    fn variant(&mut self, variant: &str) -> Result<(), Error> {
        self.open('{')?;
        write_str(self.out, variant);
        self.out.push(':');
        Ok(())
    }

    /// A tuple or struct variant's content, opened by `bracket` in its object.
    fn variant_content<'w>(
        &'w mut self,
        variant: &str,
        bracket: char,
        close: Close,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.variant(variant)?;
        self.open(bracket)?;
        Ok(Compound::new(self, close))
    }
}

impl<'w, 'a> ser::Serializer for &'w mut Writer<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'w, 'a>;
    type SerializeTuple = Compound<'w, 'a>;
    type SerializeTupleStruct = Compound<'w, 'a>;
    type SerializeTupleVariant = Compound<'w, 'a>;
    type SerializeMap = Map<'w, 'a>;
    type SerializeStruct = Compound<'w, 'a>;
    type SerializeStructVariant = Compound<'w, 'a>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.out.push_str(if v { "true" } else { "false" });
        Ok(())
    }

    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }

    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }

    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }

    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }

    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }

    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.unsigned(v);
        Ok(())
    }

    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.unsigned(v);
        Ok(())
    }

    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.unsigned(v);
        Ok(())
    }

    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.unsigned(v);
        Ok(())
    }

    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }

    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.float(v, v.is_finite(), f64::from(v))
    }

    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.float(v, v.is_finite(), v)
    }

    fn serialize_char(self, v: char) -> Result<(), Error> {
        write_str(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        write_str(self.out, v);
        Ok(())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        // An array of numbers, as serde_json writes bytes.
        let mut seq = ser::Serializer::serialize_seq(self, Some(v.len()))?;
        for b in v {
            ser::SerializeSeq::serialize_element(&mut seq, b)?;
        }
        ser::SerializeSeq::end(seq)
    }

    fn serialize_none(self) -> Result<(), Error> {
        self.out.push_str("null");
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Error> {
        self.out.push_str("null");
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        self.out.push_str("null");
        Ok(())
    }

    /// Inlined into serde's derived code, which names the variant by a literal.
    #[inline(always)]
    fn serialize_unit_variant(self, _name: &'static str, _index: u32, variant: &'static str) -> Result<(), Error> {
        write_literal(self.out, variant, "");
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _name: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.variant(variant)?;
        value.serialize(&mut *self)?;
        self.close('}');
        Ok(())
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'w, 'a>, Error> {
        self.open('[')?;
        Ok(Compound::new(self, Close::Array))
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'w, 'a>, Error> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<Compound<'w, 'a>, Error> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.variant_content(variant, '[', Close::ArrayThenObject)
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Map<'w, 'a>, Error> {
        self.open('{')?;
        let keys = self.checks().then(Seen::default);
        Ok(Map { compound: Compound::new(self, Close::Object), keys })
    }

    /// Inlined into serde's derived code, where the comparison of the literal name
    /// with serde_json's raw-value token folds away.
    #[inline(always)]
    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<Compound<'w, 'a>, Error> {
        if name == RAW_VALUE_TOKEN {
            // A `RawValue`: its one field is its text, written as it is.
            return Ok(Compound { raw: true, ..Compound::new(self, Close::Nothing) });
        }
        // A struct's fields are distinct as serde's derive writes them, and a struct
        // with a flattened field is written as a map (its keys are checked there).
        self.open('{')?;
        Ok(Compound::new(self, Close::Object))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.variant_content(variant, '{', Close::ObjectTwice)
    }

    fn collect_str<T: Display + ?Sized>(self, value: &T) -> Result<(), Error> {
        write_display(self.out, value);
        Ok(())
    }
}

/// How many keys of an object are compared one by one before they go to a set.
const FEW: usize = 8;

/// The keys an object wrote so far, to refuse one written twice: where their text
/// is in the output while few, a set of their texts beyond. A key's text is its
/// escaped form, which is as distinct as the key.
#[derive(Default)]
struct Seen {
    few: [(usize, usize); FEW],
    len: usize,
    many: Option<HashSet<Box<str>>>,
}

impl Seen {
    /// Records the key written at `start..end` of `out`; `false` if it was written already.
    fn insert(&mut self, out: &str, start: usize, end: usize) -> bool {
        let key = &out[start..end];
        if let Some(many) = &mut self.many {
            return many.insert(key.into());
        }
        if self.few[..self.len].iter().any(|&(s, e)| &out[s..e] == key) {
            return false;
        }
        if self.len < FEW {
            self.few[self.len] = (start, end);
            self.len += 1;
            return true;
        }
        let mut many: HashSet<Box<str>> = self.few.iter().map(|&(s, e)| out[s..e].into()).collect();
        many.insert(key.into());
        self.many = Some(many);
        true
    }
}

/// What closes a compound: one bracket for each level it opened.
#[derive(Clone, Copy)]
enum Close {
    /// A raw value's text, which opened nothing.
    Nothing,
    Array,
    Object,
    /// A tuple variant's array, in its object.
    ArrayThenObject,
    /// A struct variant's object, in its object.
    ObjectTwice,
}

/// An array or a struct being written (a variant's: in its object), or a raw value.
/// Small, as serde moves it by value for every struct: the keys a map checks are
/// kept by [`Map`].
pub(super) struct Compound<'w, 'a> {
    w: &'w mut Writer<'a>,
    first: bool,
    /// A `RawValue`'s struct, whose field is its text.
    raw: bool,
    close: Close,
}

impl<'w, 'a> Compound<'w, 'a> {
    #[inline]
    fn new(w: &'w mut Writer<'a>, close: Close) -> Self {
        Self { w, first: true, raw: false, close }
    }

    #[inline(always)]
    fn comma(&mut self) {
        if !std::mem::replace(&mut self.first, false) {
            self.w.out.push(',');
        }
    }

    #[inline]
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.comma();
        value.serialize(&mut *self.w)
    }

    /// Inlined into serde's derived code, which names the field by a literal: the
    /// key's check and copy fold to a few stores there (see [`write_literal`]).
    #[inline(always)]
    fn field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        if self.raw {
            return self.raw_field(key, value);
        }
        self.comma();
        write_literal(self.w.out, key, ":");
        value.serialize(&mut *self.w)
    }

    #[cold]
    fn raw_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        if key == RAW_VALUE_TOKEN {
            value.serialize(RawText(&mut *self.w))
        } else {
            Err(ser::Error::custom("expected value"))
        }
    }

    #[inline]
    fn finish(self) -> Result<(), Error> {
        match self.close {
            Close::Nothing => {}
            Close::Array => self.w.close(']'),
            Close::Object => self.w.close('}'),
            Close::ArrayThenObject => {
                self.w.close(']');
                self.w.close('}');
            }
            Close::ObjectTwice => {
                self.w.close('}');
                self.w.close('}');
            }
        }
        Ok(())
    }
}

/// A map being written, and its keys so far when the write checks them.
pub(super) struct Map<'w, 'a> {
    compound: Compound<'w, 'a>,
    keys: Option<Seen>,
}

impl ser::SerializeMap for Map<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.compound.comma();
        let w = &mut *self.compound.w;
        let start = w.out.len();
        key.serialize(MapKey(&mut *w))?;
        if let Some(keys) = &mut self.keys
            && !keys.insert(w.out.as_str(), start, w.out.len())
        {
            let text = &w.out[start..];
            let key = serde_json::from_str::<String>(text).unwrap_or_else(|_| text.to_owned());
            return Err(w.refuse(Unreadable::DuplicateKey(key)));
        }
        w.out.push(':');
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(&mut *self.compound.w)
    }
    fn end(self) -> Result<(), Error> {
        self.compound.finish()
    }
}

/// The sequence-like compounds.
macro_rules! elements {
    ($($trait:ident::$method:ident),* $(,)?) => {$(
        impl ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = Error;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                self.element(value)
            }
            fn end(self) -> Result<(), Error> {
                self.finish()
            }
        }
    )*};
}

elements!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

/// The struct-like compounds.
macro_rules! fields {
    ($($trait:ident),* $(,)?) => {$(
        impl ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = Error;
            #[inline(always)]
            fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
                self.field(key, value)
            }
            #[inline]
            fn end(self) -> Result<(), Error> {
                self.finish()
            }
        }
    )*};
}

fields!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests;
