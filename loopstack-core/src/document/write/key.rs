//! The serializers of a map's keys and of a raw value's text, each taking only
//! what serde_json takes there.

use std::fmt::Display;

use serde::ser::{self, Impossible, Serialize};
use serde_json::Error;

use super::Writer;
use super::escape::{write_display, write_str};
use crate::document::{READ_DEPTH, Unreadable, duplicate_key, nests_deeper_than};

fn key_must_be_a_string() -> Error {
    ser::Error::custom("key must be a string")
}

/// Writes a map key as serde_json does: a string, or a number, a bool or a unit
/// variant as a string; anything else is an error.
pub(super) struct MapKey<'w, 'a>(pub(super) &'w mut Writer<'a>);

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
pub(super) struct RawText<'w, 'a>(pub(super) &'w mut Writer<'a>);

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
        if w.checks_depth() && nests_deeper_than(text.as_bytes(), w.depth, READ_DEPTH) {
            return Err(w.refuse(Unreadable::TooDeep));
        }
        if w.checks()
            && let Some(key) = duplicate_key(text)
        {
            return Err(w.refuse(Unreadable::DuplicateKey(key)));
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
