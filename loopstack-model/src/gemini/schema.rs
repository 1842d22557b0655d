//! Converting a tool's JSON Schema to the OpenAPI subset Gemini's function
//! declarations take (see [`Gemini`](super::Gemini) for what is converted and what is
//! refused).

use serde_json::{Map, Value, json};

use super::MAX_SCHEMA_NODES;

/// The deepest nesting of schemas followed (after `$ref`s are inlined).
const MAX_DEPTH: usize = 64;

/// The `parameters` of a function declaration from a tool's input schema; `None` for
/// a tool without parameters (an object schema with no properties). The error says
/// what cannot be converted, and where.
pub(super) fn parameters(schema: &Value) -> Result<Option<Value>, String> {
    let mut converter = Converter { root: schema, refs: Vec::new(), nodes: 0 };
    let converted = converter.convert(schema, "", 0, true)?;
    let no_properties = converted.get("properties").and_then(Value::as_object).is_none_or(Map::is_empty);
    if converted.get("type").and_then(Value::as_str) == Some("OBJECT") && no_properties {
        return Ok(None);
    }
    Ok(Some(converted))
}

struct Converter<'a> {
    root: &'a Value,
    /// The `$ref`s being inlined, outermost first: a `$ref` among them is recursive.
    refs: Vec<String>,
    /// Schema nodes written so far.
    nodes: usize,
}

/// Keywords kept as they are.
const KEPT: &[&str] = &[
    "description",
    "title",
    "nullable",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "minProperties",
    "maxProperties",
    "default",
    "example",
    "propertyOrdering",
];

impl Converter<'_> {
    fn convert(&mut self, schema: &Value, at: &str, depth: usize, top: bool) -> Result<Value, String> {
        let place = if at.is_empty() { "the schema" } else { at };
        if depth > MAX_DEPTH {
            return Err(format!("{place} nests more than {MAX_DEPTH} schemas deep"));
        }
        self.nodes += 1;
        if self.nodes > MAX_SCHEMA_NODES {
            return Err(format!("the schema has more than {MAX_SCHEMA_NODES} schemas once its `$ref`s are inlined"));
        }
        let schema = match schema {
            Value::Object(map) => map,
            Value::Bool(true) => return Err(any_value(place)),
            Value::Bool(false) => return Err(format!("{place} is `false`, which no value matches")),
            other => return Err(format!("{place} is `{other}`, not a schema")),
        };
        if let Some(reference) = schema.get("$ref") {
            return self.inline(schema, reference, at, depth);
        }
        let mut out = Map::new();
        for key in KEPT {
            if let Some(value) = schema.get(*key) {
                out.insert((*key).to_owned(), value.clone());
            }
        }
        if let Some(example) = schema.get("examples").and_then(Value::as_array).and_then(|e| e.first()) {
            out.entry("example").or_insert_with(|| example.clone());
        }
        match schema.get("type") {
            None => {}
            Some(Value::String(kind)) => {
                let kind = type_name(kind).ok_or_else(|| format!("{place} has an unknown type `{kind}`"))?;
                out.insert("type".into(), kind.into());
            }
            Some(Value::Array(kinds)) => {
                let mut named = Vec::new();
                for kind in kinds {
                    let name = kind
                        .as_str()
                        .and_then(type_name)
                        .ok_or_else(|| format!("{place} has an unknown type `{kind}`"))?;
                    if name == "NULL" {
                        out.insert("nullable".into(), true.into());
                    } else {
                        named.push(name);
                    }
                }
                match named.as_slice() {
                    [] => {
                        out.insert("type".into(), "NULL".into());
                    }
                    [one] => {
                        out.insert("type".into(), (*one).into());
                    }
                    many => {
                        let any: Vec<Value> = many.iter().map(|k| json!({"type": k})).collect();
                        out.insert("anyOf".into(), any.into());
                    }
                }
            }
            Some(other) => return Err(format!("{place} has a type `{other}` that is neither a name nor a list")),
        }
        self.enumeration(schema, &mut out);
        if let Some(format) = schema.get("format").and_then(Value::as_str) {
            let kind = out.get("type").and_then(Value::as_str).unwrap_or_default();
            let known = matches!(
                (kind, format),
                ("STRING", "enum" | "date-time") | ("NUMBER", "float" | "double") | ("INTEGER", "int32" | "int64")
            );
            if known {
                out.insert("format".into(), format.into());
            }
        }
        if let Some(Value::Object(properties)) = schema.get("properties") {
            let mut converted = Map::new();
            for (name, property) in properties {
                converted.insert(
                    name.clone(),
                    self.convert(property, &format!("{at}/properties/{name}"), depth + 1, false)?,
                );
            }
            out.insert("properties".into(), converted.into());
            if let Some(Value::Array(required)) = schema.get("required") {
                let required: Vec<Value> = required.iter().filter(|r| r.is_string()).cloned().collect();
                if !required.is_empty() {
                    out.insert("required".into(), required.into());
                }
            }
        }
        let items = match (schema.get("items"), schema.get("prefixItems")) {
            (Some(Value::Array(tuple)), _) | (None, Some(Value::Array(tuple))) => Some(json!({"anyOf": tuple})),
            (Some(items), _) => Some(items.clone()),
            (None, _) => None,
        };
        if let Some(items) = items {
            out.insert("items".into(), self.convert(&items, &format!("{at}/items"), depth + 1, false)?);
        }
        for keyword in ["anyOf", "oneOf"] {
            if let Some(Value::Array(options)) = schema.get(keyword) {
                self.any_of(options, &mut out, &format!("{at}/{keyword}"), depth)?;
            }
        }
        if let Some(Value::Array(all)) = schema.get("allOf") {
            for (i, part) in all.iter().enumerate() {
                let part = self.convert(part, &format!("{at}/allOf/{i}"), depth + 1, false)?;
                merge(&mut out, part);
            }
        }
        // A type the keywords imply.
        if !out.contains_key("type") && !out.contains_key("anyOf") {
            let implied = if out.contains_key("properties") {
                Some("OBJECT")
            } else if out.contains_key("items") {
                Some("ARRAY")
            } else if out.contains_key("enum") {
                Some("STRING")
            } else {
                None
            };
            match implied {
                Some(kind) => {
                    out.insert("type".into(), kind.into());
                }
                None => return Err(any_value(place)),
            }
        }
        let no_properties = out.get("properties").and_then(Value::as_object).is_none_or(Map::is_empty);
        if !top && out.get("type").and_then(Value::as_str) == Some("OBJECT") && no_properties {
            return Err(format!(
                "{place} is an object without properties (a map, or any object), which Gemini's schemas cannot express"
            ));
        }
        Ok(Value::Object(out))
    }

    /// `enum` and `const`: string values are kept (the type `STRING` implied), `null`
    /// makes the schema nullable, other values are said in the description (their
    /// type implied when they all have one).
    fn enumeration(&self, schema: &Map<String, Value>, out: &mut Map<String, Value>) {
        let values: Vec<&Value> = match (schema.get("enum"), schema.get("const")) {
            (Some(Value::Array(values)), _) => values.iter().collect(),
            (_, Some(value)) => vec![value],
            _ => return,
        };
        let strings: Vec<Value> = values.iter().filter(|v| v.is_string()).map(|v| (*v).clone()).collect();
        let others: Vec<String> =
            values.iter().filter(|v| !v.is_string() && !v.is_null()).map(|v| v.to_string()).collect();
        if values.iter().any(|v| v.is_null()) {
            out.insert("nullable".into(), true.into());
        }
        if !out.contains_key("type") && !values.is_empty() {
            let numbers = values.iter().filter(|v| !v.is_null());
            if numbers.clone().all(|v| v.is_i64() || v.is_u64()) && strings.is_empty() {
                out.insert("type".into(), "INTEGER".into());
            } else if numbers.clone().all(|v| v.is_number()) && strings.is_empty() {
                out.insert("type".into(), "NUMBER".into());
            } else if numbers.clone().all(|v| v.is_boolean()) && strings.is_empty() {
                out.insert("type".into(), "BOOLEAN".into());
            }
        }
        if others.is_empty() && !strings.is_empty() {
            out.insert("enum".into(), strings.into());
            out.entry("type").or_insert_with(|| "STRING".into());
        } else if !values.is_empty() {
            let all: Vec<String> = values.iter().filter(|v| !v.is_null()).map(|v| v.to_string()).collect();
            let said = format!("One of: {}.", all.join(", "));
            let description = match out.get("description").and_then(Value::as_str) {
                Some(d) if !d.is_empty() => format!("{d} {said}"),
                _ => said,
            };
            out.insert("description".into(), description.into());
        }
    }

    /// `anyOf` (and `oneOf`, which Gemini lacks): `null` members make the schema
    /// nullable; one member left is merged into the schema, more are its `anyOf`.
    fn any_of(
        &mut self,
        options: &[Value],
        out: &mut Map<String, Value>,
        at: &str,
        depth: usize,
    ) -> Result<(), String> {
        let mut converted = Vec::new();
        for (i, option) in options.iter().enumerate() {
            if option.get("type").and_then(Value::as_str) == Some("null") && option.get("$ref").is_none() {
                out.insert("nullable".into(), true.into());
                continue;
            }
            converted.push(self.convert(option, &format!("{at}/{i}"), depth + 1, false)?);
        }
        match converted.len() {
            0 => {}
            1 => merge(out, converted.pop().expect("one")),
            _ => {
                out.insert("anyOf".into(), converted.into());
            }
        }
        Ok(())
    }

    /// A `$ref` to a local definition, converted in its place; the kept keywords beside
    /// it (a description, say) are kept over the definition's.
    fn inline(
        &mut self,
        schema: &Map<String, Value>,
        reference: &Value,
        at: &str,
        depth: usize,
    ) -> Result<Value, String> {
        let place = if at.is_empty() { "the schema" } else { at };
        let reference = reference.as_str().ok_or_else(|| format!("{place} has a `$ref` that is not a string"))?;
        let pointer = reference.strip_prefix('#').ok_or_else(|| {
            format!("{place} refers to `{reference}`, outside the schema (only local `#/...` references are inlined)")
        })?;
        let target = self
            .root
            .pointer(&percent_decode(pointer))
            .ok_or_else(|| format!("{place} refers to `{reference}`, which the schema does not define"))?;
        if self.refs.iter().any(|r| r == reference) {
            return Err(format!("{place} refers to `{reference}` within itself: Gemini's schemas cannot be recursive"));
        }
        self.refs.push(reference.to_owned());
        let converted = self.convert(target, at, depth + 1, false);
        self.refs.pop();
        let mut converted = converted?;
        if let Value::Object(target) = &mut converted {
            for key in KEPT {
                if let Some(value) = schema.get(*key) {
                    target.insert((*key).to_owned(), value.clone());
                }
            }
        }
        Ok(converted)
    }
}

/// Merges a converted schema into another: properties and required names are joined,
/// other keywords already set are kept.
fn merge(into: &mut Map<String, Value>, from: Value) {
    let Value::Object(from) = from else { return };
    for (key, value) in from {
        match (key.as_str(), into.get_mut(&key), value) {
            ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => mine.extend(theirs),
            ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                for name in theirs {
                    if !mine.contains(&name) {
                        mine.push(name);
                    }
                }
            }
            (_, Some(_), _) => {}
            (_, None, value) => {
                into.insert(key, value);
            }
        }
    }
}

/// Gemini's name of a JSON Schema type.
fn type_name(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "string" => "STRING",
        "number" => "NUMBER",
        "integer" => "INTEGER",
        "boolean" => "BOOLEAN",
        "array" => "ARRAY",
        "object" => "OBJECT",
        "null" => "NULL",
        _ => return None,
    })
}

fn any_value(place: &str) -> String {
    format!("{place} accepts a value of any type, which Gemini's schemas cannot express: give it a type")
}

/// A JSON pointer of a `$ref` with its `%xx` escapes decoded.
fn percent_decode(pointer: &str) -> String {
    let bytes = pointer.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(schema: Value) -> Result<Option<Value>, String> {
        parameters(&schema)
    }

    #[test]
    fn converts_a_schemars_style_schema() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Args",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "city": {"type": "string", "description": "The city.", "format": "hostname"},
                "unit": {"$ref": "#/$defs/Unit", "description": "Which unit."},
                "days": {"type": ["integer", "null"], "format": "uint32", "minimum": 0, "exclusiveMaximum": 15},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                "at": {"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}]},
                "mode": {"const": "fast"},
                "level": {"enum": [1, 2, 3]},
                "either": {"oneOf": [{"type": "string"}, {"type": "number", "format": "double"}]},
                "both": {"allOf": [
                    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "boolean"}}, "required": ["b"]},
                ]},
            },
            "required": ["city"],
            "$defs": {
                "Unit": {"type": "string", "enum": ["c", "f"]},
                "Point": {"type": "object", "properties": {"x": {"type": "number"}}, "additionalProperties": false},
            },
        });
        let converted = convert(schema).unwrap().unwrap();
        assert_eq!(
            converted,
            json!({
                "title": "Args",
                "type": "OBJECT",
                "properties": {
                    "city": {"type": "STRING", "description": "The city."},
                    "unit": {"type": "STRING", "enum": ["c", "f"], "description": "Which unit."},
                    "days": {"type": "INTEGER", "nullable": true, "minimum": 0},
                    "tags": {"type": "ARRAY", "items": {"type": "STRING"}},
                    "at": {"type": "OBJECT", "nullable": true, "properties": {"x": {"type": "NUMBER"}}},
                    "mode": {"type": "STRING", "enum": ["fast"]},
                    "level": {"type": "INTEGER", "description": "One of: 1, 2, 3."},
                    "either": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER", "format": "double"}]},
                    "both": {"type": "OBJECT", "properties": {"a": {"type": "STRING"}, "b": {"type": "BOOLEAN"}},
                             "required": ["a", "b"]},
                },
                "required": ["city"],
            })
        );
    }

    #[test]
    fn refuses_what_cannot_be_expressed() {
        let err = |schema: Value| convert(schema).unwrap_err();
        let recursive = json!({"type": "object", "properties": {"node": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}});
        assert!(err(recursive).contains("/properties/node/properties/next refers to `#/$defs/Node` within itself"));
        assert!(
            err(json!({"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}}))
                .contains("outside the schema")
        );
        assert!(
            err(json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}))
                .contains("does not define")
        );
        assert!(
            err(json!({"type": "object", "properties": {"a": {}}}))
                .contains("/properties/a accepts a value of any type")
        );
        assert!(err(json!({"type": "object", "properties": {"a": true}})).contains("any type"));
        let map = json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "string"}}}});
        assert!(err(map).contains("/properties/m is an object without properties"));
        assert!(err(json!({"type": "object", "properties": {"a": {"type": "date"}}})).contains("unknown type `date`"));
        // A schema that doubles at each level is refused before it is written out.
        let mut defs = Map::new();
        defs.insert("D0".into(), json!({"type": "string"}));
        for i in 1..30 {
            let prev = format!("#/$defs/D{}", i - 1);
            defs.insert(
                format!("D{i}"),
                json!({"type": "object", "properties": {"a": {"$ref": prev}, "b": {"$ref": prev}}}),
            );
        }
        let wide = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/D29"}}, "$defs": defs});
        assert!(err(wide).contains("more than 10000 schemas"));
        let mut deep = json!({"type": "string"});
        for _ in 0..100 {
            deep = json!({"type": "array", "items": deep});
        }
        assert!(err(json!({"type": "object", "properties": {"d": deep}})).contains("nests more than 64"));
    }

    #[test]
    fn tools_without_parameters_declare_none() {
        assert_eq!(convert(json!({"type": "object", "properties": {}})).unwrap(), None);
        assert_eq!(convert(json!({"type": "object"})).unwrap(), None);
        assert_eq!(convert(json!({"type": "object", "additionalProperties": false})).unwrap(), None);
        assert_eq!(percent_decode("/$defs/a%20b%2"), "/$defs/a b%2");
    }
}
