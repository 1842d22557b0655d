//! The writer against serde_json: the same text, the same refusals.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::*;

fn ours<T: Serialize + ?Sized>(value: &T) -> Result<String, Error> {
    let mut out = String::new();
    value.serialize(&mut Writer::new(&mut out, Check::Nothing))?;
    Ok(out)
}

fn checked<T: Serialize + ?Sized>(value: &T) -> Result<String, (Option<Unreadable>, Error)> {
    let (mut out, refused) = (String::new(), Cell::new(None));
    value.serialize(&mut Writer::new(&mut out, Check::All(&refused))).map_err(|e| (refused.take(), e))?;
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
            // Every length from the byte's own to fifteen past it: each of the
            // word-at-a-time and short-string checks, with the byte at every place.
            for len in (at + 1..=at + 16).chain([48]) {
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

#[test]
fn writes_unsigned_integers_as_serde_json_does_on_both_sides_of_the_short_forms() {
    for v in (0u64..=1_000).chain([u64::from(u32::MAX), u64::MAX]) {
        same(&v);
        if let Ok(v) = u8::try_from(v) {
            same(&v);
        }
        if let Ok(v) = u16::try_from(v) {
            same(&v);
        }
        if let Ok(v) = u32::try_from(v) {
            same(&v);
        }
    }
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
