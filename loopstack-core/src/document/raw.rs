//! JSON text written in one allocation of its own size.
//!
//! serde_json's `to_raw_value` writes into a buffer of 128 bytes, grows it by
//! reallocation while it writes, and shrinks it to the text's size at the end: a
//! state or a message of a few hundred bytes costs an allocation and two or three
//! reallocations, at every step of every run. [`to_raw_value`] writes (with the
//! [`Writer`]) into a buffer the thread keeps, and allocates the text once, at its
//! size.

use std::cell::RefCell;

use serde::Deserialize as _;
use serde::Serialize;
use serde::de::value::{Error as ValueError, MapDeserializer};
use serde_json::value::RawValue;

use super::write::{Check, Writer};

/// The name a `RawValue` serializes as (a struct of one field of that name), and
/// reads from (a map of one entry of that key): serde_json's private token.
pub(super) const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// A text longer than this keeps the buffer it was written in (its copy would cost
/// as much as the reallocation it saves), and the thread's buffer starts again
/// empty: a thread keeps at most this much between writes.
const KEEP: usize = 16 * 1024;

thread_local! {
    static BUFFER: RefCell<String> = const { RefCell::new(String::new()) };
}

/// `serde_json::value::to_raw_value`: the same text, allocated once at its size.
pub(crate) fn to_raw_value<T: Serialize + ?Sized>(value: &T) -> Result<Box<RawValue>, serde_json::Error> {
    write(value, Check::Nothing)
}

/// `value`'s JSON text as a `RawValue`; a checked write refuses what `check` says
/// of what would not read back, and says why in its cell.
pub(super) fn write<T: Serialize + ?Sized>(value: &T, check: Check<'_>) -> Result<Box<RawValue>, serde_json::Error> {
    let text = BUFFER.with(|buffer| -> Result<String, serde_json::Error> {
        match buffer.try_borrow_mut() {
            Ok(mut buffer) => {
                buffer.clear();
                value.serialize(&mut Writer::new(&mut buffer, check))?;
                Ok(if buffer.len() > KEEP { std::mem::take(&mut *buffer) } else { buffer.as_str().to_owned() })
            }
            // A `Serialize` impl that writes JSON itself, from inside its own
            // serialization, finds the buffer taken: it writes into a string of its own.
            Err(_) => {
                let mut own = String::new();
                value.serialize(&mut Writer::new(&mut own, check))?;
                Ok(own)
            }
        }
    })?;
    match trusted(text) {
        Some(raw) => Ok(raw),
        // A serde_json that reads a `RawValue` another way: it parses the text.
        None => {
            let mut own = String::new();
            value.serialize(&mut Writer::new(&mut own, check))?;
            RawValue::from_string(own)
        }
    }
}

/// `text`, which the writer wrote, as a `RawValue` without reading it again: read
/// from a map of serde_json's one raw-value entry, as serde_json's own value
/// deserializer hands it over. `None` if serde_json does not read it so.
fn trusted(text: String) -> Option<Box<RawValue>> {
    let entry = std::iter::once((RAW_VALUE_TOKEN, text));
    Box::<RawValue>::deserialize(MapDeserializer::<_, ValueError>::new(entry)).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn writes_what_serde_json_writes() {
        let values = [
            json!(null),
            json!("a \"quoted\" \u{7} text"),
            json!({"b": [1, 2.5, {"c": null}], "a": "x"}),
            json!(vec!["long enough to pass the kept size"; 1000]),
        ];
        let kept = || BUFFER.with(|b| b.borrow().capacity());
        for value in &values {
            let ours = to_raw_value(value).unwrap();
            assert_eq!(ours.get(), serde_json::value::to_raw_value(value).unwrap().get());
            assert!(kept() <= KEEP, "the thread keeps {} bytes", kept());
        }
        // The long text took the buffer it was written in; the next write starts a
        // new one.
        assert_eq!(kept(), 0);
        let again = to_raw_value(&values[1]).unwrap();
        assert_eq!(again.get(), r#""a \"quoted\" \u0007 text""#);
        assert!(kept() > 0);
    }

    #[test]
    fn serde_json_takes_the_text_as_it_is() {
        // Were this `None`, every write would serialize twice.
        let raw = trusted(r#"{"a":1}"#.to_owned()).expect("serde_json reads a raw value from its token's map");
        assert_eq!(raw.get(), r#"{"a":1}"#);
    }

    #[test]
    fn an_error_is_serde_jsons() {
        let mut map = std::collections::BTreeMap::new();
        map.insert(vec![1u8], 1);
        let ours = to_raw_value(&map).unwrap_err().to_string();
        assert_eq!(ours, serde_json::value::to_raw_value(&map).unwrap_err().to_string());
        // The buffer is whole after an error.
        assert_eq!(to_raw_value(&json!([1])).unwrap().get(), "[1]");
    }

    #[test]
    fn a_value_that_writes_json_inside_its_own_serialization() {
        struct Nested;
        impl Serialize for Nested {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let inner = to_raw_value(&json!({"inner": true})).map_err(serde::ser::Error::custom)?;
                inner.serialize(s)
            }
        }
        assert_eq!(to_raw_value(&[Nested, Nested]).unwrap().get(), r#"[{"inner":true},{"inner":true}]"#);
    }
}
