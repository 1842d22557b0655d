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

use std::cell::Cell;
use std::collections::HashSet;
use std::fmt::{self, Display};

use serde::ser::{self, Impossible, Serialize};
use serde_json::Error;

use super::raw::RAW_VALUE_TOKEN;
use super::{READ_DEPTH, Unreadable, duplicate_key, nests_deeper_than};

/// Writes one value's JSON text at the end of `out`.
pub(super) struct Writer<'a> {
    out: &'a mut String,
    /// Arrays and objects open around what is written next.
    depth: usize,
    /// Where a checked write says why it refused the value; `None` writes all that
    /// serde_json writes (a float that is not finite as `null`, any depth).
    refused: Option<&'a Cell<Option<Unreadable>>>,
}

impl<'a> Writer<'a> {
    pub(super) fn new(out: &'a mut String, refused: Option<&'a Cell<Option<Unreadable>>>) -> Self {
        Self { out, depth: 0, refused }
    }

    fn checks(&self) -> bool {
        self.refused.is_some()
    }

    fn refuse(&self, why: Unreadable) -> Error {
        let err = ser::Error::custom(&why);
        if let Some(refused) = self.refused {
            refused.set(Some(why));
        }
        err
    }

    /// Opens an array or an object: one level deeper.
    fn open(&mut self, bracket: char) -> Result<(), Error> {
        self.depth += 1;
        if self.depth > READ_DEPTH && self.checks() {
            return Err(self.refuse(Unreadable::TooDeep));
        }
        self.out.push(bracket);
        Ok(())
    }

    fn close(&mut self, bracket: char) {
        self.depth -= 1;
        self.out.push(bracket);
    }

    fn integer<I: itoa::Integer>(&mut self, v: I) {
        self.out.push_str(itoa::Buffer::new().format(v));
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
}

/// Whether serde_json escapes this byte in a string: control characters, the quote
/// and the backslash.
const ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Whether any of the eight bytes of `word` needs an escape, all at once: a byte
/// below 0x20, or equal to the quote or the backslash, sets its high bit in one of
/// the three masks (the standard "has less" and "has zero" tests, each exact as to
/// whether some byte does).
#[inline]
fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control | quote | backslash) & HIGH != 0
}

/// Whether no byte of `bytes` needs an escape: eight bytes at a time (the last
/// eight overlapping the ones before), or one at a time in a string shorter than
/// eight.
#[inline]
fn is_plain(bytes: &[u8]) -> bool {
    let word = |chunk: &[u8]| u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8]));
    if bytes.len() < 8 {
        return !bytes.iter().any(|&b| ESCAPE[usize::from(b)]);
    }
    let mut chunks = bytes.chunks_exact(8);
    if chunks.any(|chunk| word_needs_escape(word(chunk))) {
        return false;
    }
    !word_needs_escape(word(&bytes[bytes.len() - 8..]))
}

/// `s`'s characters as a JSON string holds them, without the quotes: serde_json's
/// escapes (`\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, and `\u00xx` for the other
/// control characters).
#[inline]
fn write_str_contents(out: &mut String, s: &str) {
    if is_plain(s.as_bytes()) {
        out.push_str(s);
    } else {
        write_escaped(out, s);
    }
}

/// [`write_str_contents`] of a string that needs an escape: out of line, so that
/// the plain case saves no registers for it.
#[cold]
#[inline(never)]
fn write_escaped(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !ESCAPE[usize::from(b)] {
            continue;
        }
        // The escaped bytes are ASCII: `start..i` is on character boundaries.
        out.push_str(&s[start..i]);
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            control => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(control >> 4)]));
                out.push(char::from(HEX[usize::from(control & 0xf)]));
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
}

/// `s` as a JSON string.
fn write_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    write_str_contents(out, s);
    out.push('"');
}

/// A `Display`'s text as a JSON string, escaped as it is formatted.
fn write_display<T: Display + ?Sized>(out: &mut String, value: &T) {
    struct Escaping<'a>(&'a mut String);
    impl fmt::Write for Escaping<'_> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            write_str_contents(self.0, s);
            Ok(())
        }
    }
    out.push('"');
    // Writing into a `String` does not fail; a `Display` impl that does is a bug of its own.
    let _ = fmt::write(&mut Escaping(out), format_args!("{value}"));
    out.push('"');
}

impl<'w, 'a> ser::Serializer for &'w mut Writer<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'w, 'a>;
    type SerializeTuple = Compound<'w, 'a>;
    type SerializeTupleStruct = Compound<'w, 'a>;
    type SerializeTupleVariant = Compound<'w, 'a>;
    type SerializeMap = Compound<'w, 'a>;
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
        self.integer(v);
        Ok(())
    }

    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }

    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }

    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.integer(v);
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

    fn serialize_unit_variant(self, _name: &'static str, _index: u32, variant: &'static str) -> Result<(), Error> {
        write_str(self.out, variant);
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
        Ok(Compound::new(self, "]"))
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
        self.variant(variant)?;
        self.open('[')?;
        Ok(Compound::new(self, "]}"))
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'w, 'a>, Error> {
        self.open('{')?;
        let keys = self.checks().then(Seen::default);
        Ok(Compound { keys, ..Compound::new(self, "}") })
    }

    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<Compound<'w, 'a>, Error> {
        if name == RAW_VALUE_TOKEN {
            // A `RawValue`: its one field is its text, written as it is.
            return Ok(Compound { raw: true, ..Compound::new(self, "") });
        }
        // A struct's fields are distinct as serde's derive writes them, and a struct
        // with a flattened field is written as a map (its keys are checked there).
        self.open('{')?;
        Ok(Compound::new(self, "}"))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        self.variant(variant)?;
        self.open('{')?;
        Ok(Compound::new(self, "}}"))
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

/// An array or object being written (a variant's: both), or a raw value.
pub(super) struct Compound<'w, 'a> {
    w: &'w mut Writer<'a>,
    first: bool,
    /// What closes it (`]`, `}`, `]}`, `}}`): one bracket for each level it opened.
    close: &'static str,
    /// A `RawValue`'s struct, whose field is its text.
    raw: bool,
    /// A map's keys so far, when the write checks them.
    keys: Option<Seen>,
}

impl<'w, 'a> Compound<'w, 'a> {
    fn new(w: &'w mut Writer<'a>, close: &'static str) -> Self {
        Self { w, first: true, close, raw: false, keys: None }
    }

    fn comma(&mut self) {
        if !std::mem::replace(&mut self.first, false) {
            self.w.out.push(',');
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.comma();
        value.serialize(&mut *self.w)
    }

    fn key<K: Serialize + ?Sized>(&mut self, key: &K) -> Result<(), Error> {
        self.comma();
        let start = self.w.out.len();
        key.serialize(MapKey(&mut *self.w))?;
        if let Some(keys) = &mut self.keys
            && !keys.insert(self.w.out.as_str(), start, self.w.out.len())
        {
            let text = &self.w.out[start..];
            let key = serde_json::from_str::<String>(text).unwrap_or_else(|_| text.to_owned());
            return Err(self.w.refuse(Unreadable::DuplicateKey(key)));
        }
        self.w.out.push(':');
        Ok(())
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        if self.raw {
            return if key == RAW_VALUE_TOKEN {
                value.serialize(RawText(&mut *self.w))
            } else {
                Err(ser::Error::custom("expected value"))
            };
        }
        self.comma();
        write_str(self.w.out, key);
        self.w.out.push(':');
        value.serialize(&mut *self.w)
    }

    fn finish(self) -> Result<(), Error> {
        for &bracket in self.close.as_bytes() {
            self.w.close(char::from(bracket));
        }
        Ok(())
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

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.key(key)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(&mut *self.w)
    }
    fn end(self) -> Result<(), Error> {
        self.finish()
    }
}

/// The struct-like compounds.
macro_rules! fields {
    ($($trait:ident),* $(,)?) => {$(
        impl ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = Error;
            fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
                self.field(key, value)
            }
            fn end(self) -> Result<(), Error> {
                self.finish()
            }
        }
    )*};
}

fields!(SerializeStruct, SerializeStructVariant);

/// serde_json's errors for what it does not take as a map key.
fn key_must_be_a_string() -> Error {
    ser::Error::custom("key must be a string")
}

/// Writes a map key as serde_json does: a string, or a number, a bool or a unit
/// variant as a string; anything else is an error.
struct MapKey<'w, 'a>(&'w mut Writer<'a>);

/// Serializer methods that refuse their value with `$err`.
macro_rules! refuse {
    ($err:expr; $($method:ident($($arg:ty),*)),* $(,)?) => {$(
        fn $method(self, $(_: $arg),*) -> Result<(), Error> {
            Err($err)
        }
    )*};
}

/// The compound methods of a serializer that takes no compound, refusing with `$err`.
macro_rules! no_compounds {
    ($err:expr) => {
        type SerializeSeq = Impossible<(), Error>;
        type SerializeTuple = Impossible<(), Error>;
        type SerializeTupleStruct = Impossible<(), Error>;
        type SerializeTupleVariant = Impossible<(), Error>;
        type SerializeMap = Impossible<(), Error>;
        type SerializeStruct = Impossible<(), Error>;
        type SerializeStructVariant = Impossible<(), Error>;

        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result<(), Error> {
            Err($err)
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Error> {
            Err($err)
        }
        fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Error> {
            Err($err)
        }
        fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeTupleStruct, Error> {
            Err($err)
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleVariant, Error> {
            Err($err)
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
            Err($err)
        }
        fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Error> {
            Err($err)
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStructVariant, Error> {
            Err($err)
        }
    };
}

impl MapKey<'_, '_> {
    /// A number or a bool, quoted.
    fn quoted(self, write: impl FnOnce(&mut Writer<'_>) -> Result<(), Error>) -> Result<(), Error> {
        self.0.out.push('"');
        write(self.0)?;
        self.0.out.push('"');
        Ok(())
    }

    fn float<F: zmij::Float>(self, v: F, finite: bool) -> Result<(), Error> {
        if !finite {
            return Err(ser::Error::custom("float key must be finite (got NaN or +/-inf)"));
        }
        self.quoted(|w| {
            w.out.push_str(zmij::Buffer::new().format_finite(v));
            Ok(())
        })
    }
}

impl ser::Serializer for MapKey<'_, '_> {
    type Ok = ();
    type Error = Error;
    no_compounds!(key_must_be_a_string());
    refuse!(key_must_be_a_string(); serialize_bytes(&[u8]), serialize_unit(), serialize_unit_struct(&'static str), serialize_none());

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        write_str(self.0.out, v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.quoted(|w| ser::Serializer::serialize_bool(w, v))
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.quoted(|w| ser::Serializer::serialize_i8(w, v))
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.quoted(|w| ser::Serializer::serialize_i16(w, v))
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.quoted(|w| ser::Serializer::serialize_i32(w, v))
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.quoted(|w| ser::Serializer::serialize_i64(w, v))
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        self.quoted(|w| ser::Serializer::serialize_i128(w, v))
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.quoted(|w| ser::Serializer::serialize_u8(w, v))
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.quoted(|w| ser::Serializer::serialize_u16(w, v))
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.quoted(|w| ser::Serializer::serialize_u32(w, v))
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.quoted(|w| ser::Serializer::serialize_u64(w, v))
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        self.quoted(|w| ser::Serializer::serialize_u128(w, v))
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.float(v, v.is_finite())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.float(v, v.is_finite())
    }
    fn collect_str<T: Display + ?Sized>(self, value: &T) -> Result<(), Error> {
        write_display(self.0.out, value);
        Ok(())
    }
}

/// Writes a `RawValue`'s text as it is (its one field); refuses anything else, as
/// serde_json does. A checked write counts the text's nesting and keys.
struct RawText<'w, 'a>(&'w mut Writer<'a>);

fn expected_raw_value() -> Error {
    ser::Error::custom("expected RawValue")
}

impl ser::Serializer for RawText<'_, '_> {
    type Ok = ();
    type Error = Error;
    no_compounds!(expected_raw_value());
    refuse!(expected_raw_value();
        serialize_bool(bool), serialize_i8(i8), serialize_i16(i16), serialize_i32(i32), serialize_i64(i64),
        serialize_i128(i128), serialize_u8(u8), serialize_u16(u16), serialize_u32(u32), serialize_u64(u64),
        serialize_u128(u128), serialize_f32(f32), serialize_f64(f64), serialize_char(char),
        serialize_bytes(&[u8]), serialize_unit(), serialize_unit_struct(&'static str), serialize_none(),
        serialize_unit_variant(&'static str, u32, &'static str),
    );

    fn serialize_str(self, text: &str) -> Result<(), Error> {
        let w = self.0;
        if w.checks() {
            if nests_deeper_than(text.as_bytes(), w.depth, READ_DEPTH) {
                return Err(w.refuse(Unreadable::TooDeep));
            }
            if let Some(key) = duplicate_key(text) {
                return Err(w.refuse(Unreadable::DuplicateKey(key)));
            }
        }
        w.out.push_str(text);
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<(), Error> {
        Err(expected_raw_value())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, _: &T) -> Result<(), Error> {
        Err(expected_raw_value())
    }
    fn collect_str<T: Display + ?Sized>(self, _: &T) -> Result<(), Error> {
        Err(expected_raw_value())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde::Serialize;
    use serde_json::value::RawValue;
    use serde_json::{Value, json};

    use super::*;

    fn ours<T: Serialize + ?Sized>(value: &T) -> Result<String, Error> {
        let mut out = String::new();
        value.serialize(&mut Writer::new(&mut out, None))?;
        Ok(out)
    }

    fn checked<T: Serialize + ?Sized>(value: &T) -> Result<String, (Option<Unreadable>, Error)> {
        let (mut out, refused) = (String::new(), Cell::new(None));
        value.serialize(&mut Writer::new(&mut out, Some(&refused))).map_err(|e| (refused.take(), e))?;
        Ok(out)
    }

    /// Both writes give serde_json's text.
    #[track_caller]
    fn same<T: Serialize + ?Sized>(value: &T) {
        let theirs = serde_json::to_string(value).unwrap();
        assert_eq!(ours(value).unwrap(), theirs);
        assert_eq!(checked(value).unwrap(), theirs);
    }

    #[test]
    fn escapes_every_ascii_byte_as_serde_json_does_wherever_it_falls() {
        for b in 0u8..0x80 {
            let c = char::from(b);
            for at in 0..40 {
                for len in [at + 1, at + 5, 48] {
                    let s: String = (0..len).map(|i| if i == at { c } else { 'a' }).collect();
                    same(&s);
                }
            }
        }
        same("");
        same("gr\u{fc}\u{df}e \u{1f980} \u{7f} \u{2028}");
        same(&"\"\\\n".repeat(40));
        same(&'\u{1f}');
    }

    #[derive(Serialize)]
    struct Unit;

    #[derive(Serialize)]
    struct Newtype(u8);

    #[derive(Serialize)]
    struct Pair(i8, &'static str);

    #[derive(Serialize)]
    enum Shape {
        Plain,
        Newtype(Vec<u8>),
        Tuple(u8, Option<&'static str>),
        Struct { a: Unit, b: Newtype, c: Pair },
    }

    #[derive(Serialize)]
    #[serde(rename_all = "snake_case")]
    enum KeyKind {
        FirstKey,
        Second,
    }

    #[derive(Serialize)]
    struct Flattened {
        a: u8,
        #[serde(flatten)]
        rest: BTreeMap<String, u8>,
    }

    /// A value serialized through `collect_str`.
    struct Shown(&'static str);
    impl Serialize for Shown {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_str(&format_args!("<{}>", self.0))
        }
    }

    /// Bytes, through `serialize_bytes`.
    struct Bytes(&'static [u8]);
    impl Serialize for Bytes {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }

    #[test]
    fn writes_every_shape_of_serdes_data_model_as_serde_json_does() {
        same(&(true, false, i8::MIN, i16::MIN, i32::MIN, i64::MIN, i128::MIN, u8::MAX, u16::MAX, u32::MAX));
        same(&(u64::MAX, u128::MAX, 0.1f32, f32::MAX, -0.0f32, 1e-45f32, 0.1f64, 5e-324, f64::MAX, 1e21));
        same(&('x', '"', Unit, Newtype(7), Pair(-1, "p"), (), None::<u8>, Some(Some(3))));
        same(&[Shape::Plain, Shape::Newtype(vec![1, 2]), Shape::Tuple(1, None), Shape::Tuple(2, Some("t"))]);
        same(&Shape::Struct { a: Unit, b: Newtype(0), c: Pair(0, "") });
        same(&Flattened { a: 1, rest: BTreeMap::from([("b".to_owned(), 2), ("c\n".to_owned(), 3)]) });
        same(&(Shown("a \"b\"\n"), Bytes(&[0, 255]), Bytes(&[]), Vec::<u8>::new(), BTreeMap::<u8, u8>::new()));
        same(&json!({"a": [], "b": {}, "c": [[], {}], "d": {"e": null}}));
        // Map keys that are not strings are written as strings.
        same(&BTreeMap::from([(1u8, 'a'), (200, 'b')]));
        same(&BTreeMap::from([(-1i128, 0), (i128::MAX, 1)]));
        same(&BTreeMap::from([(true, 0), (false, 1)]));
        same(&BTreeMap::from([('"', 0)]));
        same(&Entries(vec![(KeyKind::FirstKey, 1), (KeyKind::Second, 2)]));
        same(&Entries(vec![(Newtype(1), 0)]));
        same(&Entries(vec![(1.5f64, 0), (-0.0, 1), (1e300, 2)]));
        same(&Entries(vec![(0.1f32, 0)]));
        same(&BTreeMap::from([(Some("k"), 1)]));
    }

    /// A map of these entries, in this order, whatever their keys.
    struct Entries<K>(Vec<(K, u8)>);
    impl<K: Serialize> Serialize for Entries<K> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
        }
    }

    #[test]
    fn writes_raw_values_as_they_are() {
        let raw = RawValue::from_string(r#"{ "spaced" : [1, 2] }"#.to_owned()).unwrap();
        same(&raw);
        same(&json!({"a": 1}).as_object().map(|_| BTreeMap::from([("raw", &raw)])));
        same(&vec![&raw, &raw]);
    }

    /// Both writes fail as serde_json does, with its words.
    #[track_caller]
    fn same_error<T: Serialize + ?Sized>(value: &T) {
        let theirs = serde_json::to_string(value).unwrap_err().to_string();
        assert_eq!(ours(value).unwrap_err().to_string(), theirs);
        assert_eq!(checked(value).unwrap_err().1.to_string(), theirs);
    }

    #[test]
    fn refuses_what_serde_json_refuses_with_its_words() {
        same_error(&BTreeMap::from([(vec![1u8], 1)]));
        same_error(&BTreeMap::from([((), 1)]));
        same_error(&BTreeMap::from([(None::<u8>, 1)]));
        same_error(&Entries(vec![(f64::NAN, 1)]));
        same_error(&Entries(vec![(f32::INFINITY, 1)]));
        same_error(&Entries(vec![(Shape::Newtype(vec![]), 1)]));
        same_error(&Entries(vec![(Shape::Tuple(1, None), 1)]));
        same_error(&Entries(vec![(Pair(1, ""), 1)]));
        same_error(&Entries(vec![(Bytes(b"k"), 1)]));
        same_error(&FakeRaw);
    }

    /// A struct named as serde_json's raw value whose field is not its text.
    struct FakeRaw;
    impl Serialize for FakeRaw {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeStruct;
            let mut st = s.serialize_struct(super::RAW_VALUE_TOKEN, 1)?;
            st.serialize_field(super::RAW_VALUE_TOKEN, &1u8)?;
            st.end()
        }
    }

    #[test]
    fn a_plain_write_writes_non_finite_floats_as_null_and_a_checked_one_refuses_them() {
        let v = (f64::NAN, f32::INFINITY, f64::NEG_INFINITY);
        assert_eq!(ours(&v).unwrap(), serde_json::to_string(&v).unwrap());
        let (why, _) = checked(&v).unwrap_err();
        assert!(matches!(why, Some(Unreadable::NonFinite(f)) if f.is_nan()));
    }

    #[test]
    fn a_checked_write_refuses_a_key_written_twice_whatever_its_kind_and_names_it() {
        let refused = |text: &str| match checked(&Entries(vec![("x", 0), (text, 1), ("y", 2), (text, 3)])) {
            Err((Some(Unreadable::DuplicateKey(key)), _)) => key,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused("a\"b\n"), "a\"b\n");
        // Beyond the keys compared one by one.
        let many: Vec<(String, u8)> = (0..40).map(|i| (format!("k{}", i % 30), 0)).collect();
        assert!(matches!(checked(&Entries(many)), Err((Some(Unreadable::DuplicateKey(k)), _)) if k == "k0"));
        let distinct: Vec<(String, u8)> = (0..40).map(|i| (format!("k{i}"), 0)).collect();
        assert_eq!(checked(&Entries(distinct.clone())).unwrap(), serde_json::to_string(&Entries(distinct)).unwrap());
        // A number and a string that are written alike are the same key.
        assert!(matches!(checked(&Mixed), Err((Some(Unreadable::DuplicateKey(k)), _)) if k == "1"));
        // Unchecked, serde_json's text.
        let twice = Entries(vec![("a", 0), ("a", 1)]);
        assert_eq!(ours(&twice).unwrap(), serde_json::to_string(&twice).unwrap());
    }

    /// An object with the key `1` written as a number and as a string.
    struct Mixed;
    impl Serialize for Mixed {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeMap;
            let mut map = s.serialize_map(None)?;
            map.serialize_entry(&1u8, &0)?;
            map.serialize_entry("1", &0)?;
            map.end()
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[\\x00-\\x7f]{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map("[\\x00-\\x7f]{0,12}|\\PC{0,6}", inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_json_value_is_written_as_serde_json_writes_it(value in json_value()) {
            let theirs = serde_json::to_string(&value).unwrap();
            prop_assert_eq!(ours(&value).unwrap(), theirs.clone());
            prop_assert_eq!(checked(&value).unwrap(), theirs);
        }

        #[test]
        fn any_string_is_escaped_as_serde_json_escapes_it(s in any::<String>(), ascii in "[\\x00-\\x7f]{0,70}") {
            prop_assert_eq!(ours(&s).unwrap(), serde_json::to_string(&s).unwrap());
            prop_assert_eq!(ours(&ascii).unwrap(), serde_json::to_string(&ascii).unwrap());
        }
    }
}
