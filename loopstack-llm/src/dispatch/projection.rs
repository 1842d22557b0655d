//! Input projection: the input of the child run a tool call starts, built from the
//! call and the parent run's state.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::message::{MAX_JSON_DEPTH, ToolUse, value_deeper_than};

/// The envelope key holding the normalised call, `{"id", "name", "arguments"}`.
pub const TOOL_CALL: &str = "tool_call";
/// The envelope key holding the tool's name as the model called it.
pub const TOOL_NAME: &str = "tool_name";
/// The envelope key holding the parsed arguments.
pub const TOOL_ARGUMENTS: &str = "tool_arguments";
/// The envelope key holding the provider's call id.
pub const TOOL_CALL_ID: &str = "tool_call_id";
/// The envelope key holding the zero-based index of the call in its batch.
pub const TOOL_CALL_INDEX: &str = "tool_call_index";
/// The key a mapping result that is neither an object nor null is put under
/// (see [`with_envelope`]).
pub const TOOL_INPUT: &str = "tool_input";

/// The keys every child input carries, whatever the mapping says.
pub const ENVELOPE_KEYS: [&str; 5] = [TOOL_CALL, TOOL_NAME, TOOL_ARGUMENTS, TOOL_CALL_ID, TOOL_CALL_INDEX];

/// The top-level keys a mapping object may not use: the [`ENVELOPE_KEYS`] and
/// [`TOOL_INPUT`].
pub const RESERVED_KEYS: [&str; 6] = [TOOL_CALL, TOOL_NAME, TOOL_ARGUMENTS, TOOL_CALL_ID, TOOL_CALL_INDEX, TOOL_INPUT];

/// One tool call as a projection sees it: borrowed, cheap to copy.
///
/// Its JSON form, the *normalised call* that the `call` reference selects and the
/// child receives as `tool_call`, is `{"id": .., "name": .., "arguments": ..}`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct CallView<'a> {
    /// The provider's id of the call.
    pub id: &'a str,
    /// The tool's name as the model called it.
    pub name: &'a str,
    /// The parsed arguments (`null` when the model wrote arguments that are not JSON).
    pub arguments: &'a Value,
    /// The zero-based index of the call among the calls of its model turn.
    pub index: usize,
}

impl<'a> CallView<'a> {
    /// A view of a call with index 0; set the index with [`with_index`](Self::with_index).
    pub fn new(id: &'a str, name: &'a str, arguments: &'a Value) -> Self {
        Self { id, name, arguments, index: 0 }
    }

    /// A view of `call`, the call at `index` of its turn.
    pub fn of(call: &'a ToolUse, index: usize) -> Self {
        Self { id: &call.id, name: &call.name, arguments: &call.input, index }
    }

    /// Sets the zero-based index of the call in its batch.
    #[must_use]
    pub fn with_index(mut self, index: usize) -> Self {
        self.index = index;
        self
    }

    /// The normalised call: `{"id": .., "name": .., "arguments": ..}`.
    pub fn to_json(&self) -> Value {
        let mut call = Map::new();
        call.insert("id".to_owned(), Value::String(self.id.to_owned()));
        call.insert("name".to_owned(), Value::String(self.name.to_owned()));
        call.insert("arguments".to_owned(), self.arguments.clone());
        Value::Object(call)
    }
}

impl<'a> From<&'a ToolUse> for CallView<'a> {
    /// A view of the call with index 0.
    fn from(call: &'a ToolUse) -> Self {
        Self::of(call, 0)
    }
}

/// What a mapping is resolved against: one call and the parent run's state.
///
/// Borrows both; the parent state is the parent run's state as JSON.
#[derive(Debug, Clone, Copy)]
pub struct ProjectionContext<'a> {
    call: CallView<'a>,
    state: &'a Value,
}

impl<'a> ProjectionContext<'a> {
    /// The context of `call`, made from a run whose state is `state`.
    pub fn new(call: CallView<'a>, state: &'a Value) -> Self {
        Self { call, state }
    }

    /// The call.
    pub fn call(&self) -> CallView<'a> {
        self.call
    }

    /// The parent run's state.
    pub fn state(&self) -> &'a Value {
        self.state
    }

    /// What one string of a mapping stands for, by the rules of [`InputMapping`]:
    /// a reference's value (JSON null when its path leads nowhere), else the parent
    /// state's top-level key of that name, else the string itself.
    ///
    /// ```
    /// use loopstack_llm::dispatch::{CallView, ProjectionContext};
    /// use serde_json::json;
    ///
    /// let args = json!({"city": "Oslo"});
    /// let state = json!({"user": {"profile": {"name": "Ada"}}, "region": "north"});
    /// let cx = ProjectionContext::new(CallView::new("call_1", "get_weather", &args), &state);
    /// assert_eq!(cx.resolve_str("arguments.city"), json!("Oslo"));
    /// assert_eq!(cx.resolve_str("ctx.user.profile.name"), json!("Ada"));
    /// assert_eq!(cx.resolve_str("ctx.user.id"), json!(null));
    /// assert_eq!(cx.resolve_str("ctx.user."), json!(null));
    /// assert_eq!(cx.resolve_str("region"), json!("north")); // a top-level state key
    /// assert_eq!(cx.resolve_str("celsius"), json!("celsius")); // a literal
    /// ```
    pub fn resolve_str(&self, text: &str) -> Value {
        if let Some(value) = self.reference(text) {
            return value;
        }
        // `get` with a key finds nothing in a state that is not an object.
        self.state.get(text).cloned().unwrap_or_else(|| Value::String(text.to_owned()))
    }

    /// The value of `text` when it is a reference (`arguments`, `call`, `tool_name`,
    /// `tool_call_id`, or one of those or `ctx` followed by a dot and a path), `None`
    /// when it is not.
    fn reference(&self, text: &str) -> Option<Value> {
        let (root, path) = match text.split_once('.') {
            Some((root, path)) => (root, Some(path)),
            None => (text, None),
        };
        let value = match (root, path) {
            ("arguments", None) => self.call.arguments.clone(),
            ("arguments", Some(path)) => select(self.call.arguments, path),
            ("call", None) => self.call.to_json(),
            ("call", Some(path)) => self.select_in_call(path),
            ("tool_name", None) => Value::String(self.call.name.to_owned()),
            ("tool_call_id", None) => Value::String(self.call.id.to_owned()),
            // A path below a string leads nowhere.
            ("tool_name" | "tool_call_id", Some(_)) => Value::Null,
            ("ctx", Some(path)) => select(self.state, path),
            _ => return None,
        };
        Some(value)
    }

    /// A path inside the normalised call, walked without building it.
    fn select_in_call(&self, path: &str) -> Value {
        let (field, rest) = match path.split_once('.') {
            Some((field, rest)) => (field, Some(rest)),
            None => (path, None),
        };
        match (field, rest) {
            ("id", None) => Value::String(self.call.id.to_owned()),
            ("name", None) => Value::String(self.call.name.to_owned()),
            ("arguments", None) => self.call.arguments.clone(),
            ("arguments", Some(rest)) => select(self.call.arguments, rest),
            _ => Value::Null,
        }
    }
}

/// The value at a dotted path below `root`, copied; JSON null when any segment is
/// empty, names no field, is no valid index, or steps into a scalar.
fn select(root: &Value, path: &str) -> Value {
    let mut current = root;
    for segment in path.split('.') {
        let next = match current {
            _ if segment.is_empty() => None,
            Value::Object(map) => map.get(segment),
            Value::Array(items) => array_index(segment).and_then(|i| items.get(i)),
            _ => None,
        };
        match next {
            Some(next) => current = next,
            None => return Value::Null,
        }
    }
    current.clone()
}

/// A zero-based array index written in plain decimal: digits only, no sign and no
/// leading zero (`0`, `7`, `12`; not `+1`, `01`, `-1`, ` 1`).
fn array_index(segment: &str) -> Option<usize> {
    let canonical = segment.bytes().all(|b| b.is_ascii_digit()) && (segment == "0" || !segment.starts_with('0'));
    if canonical { segment.parse().ok() } else { None }
}

/// Why a mapping was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MappingError {
    /// The mapping nests deeper than the limit.
    #[error("the input mapping nests deeper than {limit} levels")]
    TooDeep {
        /// The limit, [`MAX_JSON_DEPTH`].
        limit: usize,
    },
    /// A top-level key of the mapping is one the envelope sets.
    #[error(
        "the input mapping sets `{key}`, which every child input carries already; \
         the names {RESERVED_KEYS:?} are reserved, map the value under another name"
    )]
    ReservedKey {
        /// The key.
        key: String,
    },
}

/// An input mapping: a JSON value whose strings are references to the call and the
/// parent run's state, resolved once per call into the child's input.
///
/// # Rules
///
/// A string of the mapping is resolved like this:
///
/// | string | value |
/// |---|---|
/// | `arguments` | the whole parsed arguments |
/// | `arguments.a.b` | the value at that path inside the arguments |
/// | `call` | the whole normalised call, `{"id", "name", "arguments"}` |
/// | `call.id`, `call.name`, `call.arguments.a` | the value at that path inside the normalised call |
/// | `tool_name` | the tool's name as the model called it |
/// | `tool_call_id` | the provider's call id |
/// | `ctx.a.b` | the value at that path inside the parent run's state |
/// | any other string | the parent state's top-level key of that name when the state has it, else the string itself |
///
/// - Paths are split at every dot and must resolve completely: a missing field, an
///   array index out of range, a step into a scalar (a string, number, boolean or
///   null), an empty segment (`ctx.a..b`) and a trailing dot (`ctx.user.`) all give
///   JSON null, never the object the path got to. `tool_name.x` and
///   `tool_call_id.x` step into a string and are null too.
/// - Array elements are zero-based decimal segments: `ctx.users.0.id`. Only plain
///   digits count (`01`, `+1` and `-1` select nothing in an array); in an object a
///   numeric segment is an ordinary key (`ctx.by_code.404`). There are no brackets,
///   no `${...}` interpolation, and no way to select a key that contains a dot.
/// - Roots are case-sensitive and nothing is trimmed: `Arguments.city` or
///   ` arguments` are "other strings". A bare `ctx` is not a reference either
///   (the whole parent state is never selected): it is the state's `ctx` key when
///   there is one, else the literal `"ctx"`. Nor is `tool_call_index`: the index
///   is in the envelope every child receives.
/// - Objects and arrays of the mapping are resolved recursively (object keys are
///   kept as written); numbers, booleans and null stay as they are.
/// - A selected value is copied as it is: a string found in the state or the
///   arguments is never resolved again as a reference.
/// - Missing values never fail: the child receives null and may reject it.
///
/// Selecting whole objects (`arguments`, `call`, `ctx.user`) copies every field,
/// private ones included: a mapping is not a filter of secrets nor an authorization
/// boundary, and the child always receives the complete arguments in its envelope
/// anyway (see [`with_envelope`]).
///
/// # Limits
///
/// [`new`](Self::new) refuses a mapping that nests deeper than [`MAX_JSON_DEPTH`]
/// levels, and a mapping object whose top-level keys include one of the
/// [`RESERVED_KEYS`] (the envelope would overwrite it).
///
/// ```
/// use loopstack_llm::dispatch::{CallView, InputMapping, ProjectionContext};
/// use serde_json::json;
///
/// let mapping = InputMapping::new(json!({
///     "city": "arguments.city",
///     "call_id": "tool_call_id",
///     "user_id": "ctx.user.id",
///     "nested": {"first": ["ctx.users.0.id", 3, true, null]},
/// }))?;
/// let args = json!({"city": "Berlin"});
/// let state = json!({"user": {"name": "Ada"}, "users": [{"id": "u1"}]});
/// let cx = ProjectionContext::new(CallView::new("call_7", "get_weather", &args), &state);
/// assert_eq!(
///     mapping.resolve(&cx),
///     json!({"city": "Berlin", "call_id": "call_7", "user_id": null, "nested": {"first": ["u1", 3, true, null]}})
/// );
/// # Ok::<(), loopstack_llm::dispatch::MappingError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub struct InputMapping {
    mapping: Value,
}

impl Default for InputMapping {
    /// The empty mapping, `{}`: the child receives the envelope only.
    fn default() -> Self {
        Self { mapping: Value::Object(Map::new()) }
    }
}

impl InputMapping {
    /// Checks a mapping (see [Limits](Self#limits)).
    pub fn new(mapping: Value) -> Result<Self, MappingError> {
        if value_deeper_than(&mapping, MAX_JSON_DEPTH) {
            return Err(MappingError::TooDeep { limit: MAX_JSON_DEPTH });
        }
        if let Some(map) = mapping.as_object()
            && let Some(key) = map.keys().find(|k| RESERVED_KEYS.contains(&k.as_str()))
        {
            return Err(MappingError::ReservedKey { key: key.clone() });
        }
        Ok(Self { mapping })
    }

    /// The mapping as written.
    pub fn as_value(&self) -> &Value {
        &self.mapping
    }

    /// The mapping resolved against one call and the parent state.
    pub fn resolve(&self, cx: &ProjectionContext<'_>) -> Value {
        resolve_value(&self.mapping, cx)
    }

    /// The child's whole input: the resolved mapping in its [envelope](with_envelope).
    pub fn child_input(&self, cx: &ProjectionContext<'_>) -> Value {
        with_envelope(self.resolve(cx), &cx.call())
    }
}

impl TryFrom<Value> for InputMapping {
    type Error = MappingError;

    fn try_from(mapping: Value) -> Result<Self, Self::Error> {
        Self::new(mapping)
    }
}

impl From<InputMapping> for Value {
    fn from(mapping: InputMapping) -> Self {
        mapping.mapping
    }
}

/// Resolves a checked mapping; its depth is bounded by [`InputMapping::new`].
fn resolve_value(mapping: &Value, cx: &ProjectionContext<'_>) -> Value {
    match mapping {
        Value::String(text) => cx.resolve_str(text),
        Value::Array(items) => Value::Array(items.iter().map(|item| resolve_value(item, cx)).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(key, value)| (key.clone(), resolve_value(value, cx))).collect())
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => mapping.clone(),
    }
}

/// The child's whole input: the resolved mapping `mapped` with what every child
/// receives, whatever the mapping says:
///
/// - `tool_call`: the normalised call, `{"id", "name", "arguments"}`;
/// - `tool_name`: the tool's name as the model called it;
/// - `tool_arguments`: the parsed arguments;
/// - `tool_call_id`: the provider's call id;
/// - `tool_call_index`: the zero-based index of the call in its batch.
///
/// An object's entries are kept next to these; null adds nothing (the input is the
/// envelope alone); any other value (a string, number, boolean or array, as a
/// mapping like `"ctx.city"` can give) is kept under [`TOOL_INPUT`]. When the
/// mapped object has a key of the envelope (a mapping object cannot, see
/// [`InputMapping::new`], but a selected object or a [`ChildInput::Function`]'s
/// result can), the envelope's value wins: a child can always trust these five
/// keys to describe the call it runs for.
///
/// ```
/// use loopstack_llm::dispatch::{CallView, with_envelope};
/// use serde_json::json;
///
/// let args = json!({"city": "Oslo"});
/// let call = CallView::new("call_1", "get_weather", &args).with_index(2);
/// let input = with_envelope(json!({"city": "Oslo", "tool_name": "spoofed"}), &call);
/// assert_eq!(input["city"], "Oslo");
/// assert_eq!(input["tool_name"], "get_weather"); // the envelope wins
/// assert_eq!(input["tool_call_index"], 2);
/// assert_eq!(input["tool_call"], json!({"id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo"}}));
/// assert_eq!(with_envelope(json!("Oslo"), &call)["tool_input"], "Oslo");
/// ```
pub fn with_envelope(mapped: Value, call: &CallView<'_>) -> Value {
    let mut input = match mapped {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => {
            let mut map = Map::new();
            map.insert(TOOL_INPUT.to_owned(), other);
            map
        }
    };
    input.insert(TOOL_CALL.to_owned(), call.to_json());
    input.insert(TOOL_NAME.to_owned(), Value::String(call.name.to_owned()));
    input.insert(TOOL_ARGUMENTS.to_owned(), call.arguments.clone());
    input.insert(TOOL_CALL_ID.to_owned(), Value::String(call.id.to_owned()));
    input.insert(TOOL_CALL_INDEX.to_owned(), Value::from(call.index));
    Value::Object(input)
}

/// The typed form of a mapping: a function from the call and the parent state to
/// the mapped input; an `Err` is the reason the call fails (its error result).
pub type InputFn = dyn Fn(&CallView<'_>, &Value) -> Result<Value, String> + Send + Sync;

/// How a workflow tool builds its child's input: a JSON [`InputMapping`], or a Rust
/// function the compiler checks. Either way the result is put in the
/// [envelope](with_envelope) by [`child_input`](Self::child_input).
///
/// ```
/// use loopstack_llm::dispatch::{CallView, ChildInput, ProjectionContext};
/// use serde_json::json;
///
/// #[derive(serde::Deserialize)]
/// struct Parent {
///     region: String,
/// }
///
/// let input = ChildInput::typed(|call: &CallView<'_>, parent: &Parent| {
///     let city = call.arguments["city"].as_str().ok_or("`city` is required")?;
///     Ok(json!({"city": city, "region": parent.region}))
/// });
/// let args = json!({"city": "Oslo"});
/// let state = json!({"region": "north"});
/// let cx = ProjectionContext::new(CallView::new("call_1", "get_weather", &args), &state);
/// let child = input.child_input(&cx)?;
/// assert_eq!(child["region"], "north");
/// assert_eq!(child["tool_call_id"], "call_1");
///
/// let no_city = json!({});
/// let cx = ProjectionContext::new(CallView::new("call_2", "get_weather", &no_city), &state);
/// assert_eq!(input.child_input(&cx).unwrap_err(), "`city` is required");
/// # Ok::<(), String>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum ChildInput {
    /// A JSON mapping.
    Mapping(InputMapping),
    /// A function of the call and the parent state (as JSON).
    Function(Arc<InputFn>),
}

impl Default for ChildInput {
    /// The empty mapping: the child receives the envelope only.
    fn default() -> Self {
        Self::Mapping(InputMapping::default())
    }
}

impl fmt::Debug for ChildInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mapping(mapping) => f.debug_tuple("Mapping").field(mapping.as_value()).finish(),
            Self::Function(_) => f.write_str("Function(..)"),
        }
    }
}

impl From<InputMapping> for ChildInput {
    fn from(mapping: InputMapping) -> Self {
        Self::Mapping(mapping)
    }
}

impl ChildInput {
    /// A JSON mapping, checked by [`InputMapping::new`].
    pub fn mapping(mapping: Value) -> Result<Self, MappingError> {
        InputMapping::new(mapping).map(Self::Mapping)
    }

    /// A function of the call and the parent state as JSON.
    pub fn function<F>(f: F) -> Self
    where
        F: Fn(&CallView<'_>, &Value) -> Result<Value, String> + Send + Sync + 'static,
    {
        Self::Function(Arc::new(f))
    }

    /// A function of the call and the parent state as its own type `S`, returning
    /// any serializable input `T`. A state that does not deserialize into `S`, or an
    /// input that does not serialize, fails the call with the reason.
    pub fn typed<S, T, F>(f: F) -> Self
    where
        S: DeserializeOwned,
        T: Serialize,
        F: Fn(&CallView<'_>, &S) -> Result<T, String> + Send + Sync + 'static,
    {
        Self::function(move |call, state| {
            let state = S::deserialize(state)
                .map_err(|e| format!("the parent state does not fit the input function's type: {e}"))?;
            let input = f(call, &state)?;
            serde_json::to_value(input).map_err(|e| format!("the child input could not be serialized: {e}"))
        })
    }

    /// The mapped input without the envelope.
    pub fn project(&self, cx: &ProjectionContext<'_>) -> Result<Value, String> {
        match self {
            Self::Mapping(mapping) => Ok(mapping.resolve(cx)),
            Self::Function(f) => f(&cx.call(), cx.state()),
        }
    }

    /// The child's whole input: the mapped input in its [envelope](with_envelope).
    pub fn child_input(&self, cx: &ProjectionContext<'_>) -> Result<Value, String> {
        self.project(cx).map(|mapped| with_envelope(mapped, &cx.call()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn state() -> Value {
        json!({
            "user": {"profile": {"name": "Ada"}, "private_note": "internal"},
            "users": [{"id": "u1"}, {"id": "u2", "tags": ["a", "b"]}],
            "region": "north",
            "pointer": "ctx.region",
            "by_code": {"404": "missing", "01": "padded"},
            "flag": false,
        })
    }

    #[test]
    fn every_rule_of_a_string() {
        let args = json!({"city": "Berlin", "units": {"temp": "c"}, "list": [10, 20], "ref": "tool_name"});
        let state = state();
        let cx = ProjectionContext::new(CallView::new("call_9", "get_weather", &args).with_index(4), &state);
        let call = json!({"id": "call_9", "name": "get_weather", "arguments": args});
        let table: Vec<(&str, Value)> = vec![
            ("arguments", args.clone()),
            ("arguments.city", json!("Berlin")),
            ("arguments.units.temp", json!("c")),
            ("arguments.list.1", json!(20)),
            ("arguments.list.2", json!(null)),
            ("arguments.missing", json!(null)),
            ("arguments.city.x", json!(null)),
            ("arguments.", json!(null)),
            ("arguments..city", json!(null)),
            ("arguments.ref", json!("tool_name")),
            ("call", call.clone()),
            ("call.id", json!("call_9")),
            ("call.name", json!("get_weather")),
            ("call.arguments", args.clone()),
            ("call.arguments.units.temp", json!("c")),
            ("call.arguments.", json!(null)),
            ("call.index", json!(null)),
            ("call.id.x", json!(null)),
            ("call.", json!(null)),
            ("tool_name", json!("get_weather")),
            ("tool_call_id", json!("call_9")),
            ("tool_name.x", json!(null)),
            ("tool_call_id.", json!(null)),
            ("ctx.user.id", json!(null)),
            ("ctx.user.profile.name", json!("Ada")),
            ("ctx.user.", json!(null)),
            ("ctx.user", json!({"profile": {"name": "Ada"}, "private_note": "internal"})),
            ("ctx.users.0.id", json!("u1")),
            ("ctx.users.1.tags.1", json!("b")),
            ("ctx.users.2.id", json!(null)),
            ("ctx.users.01.id", json!(null)),
            ("ctx.users.+1.id", json!(null)),
            ("ctx.users.-1", json!(null)),
            ("ctx.users.99999999999999999999999", json!(null)),
            ("ctx.users.id", json!(null)),
            ("ctx.by_code.404", json!("missing")),
            ("ctx.by_code.01", json!("padded")),
            ("ctx.region.x", json!(null)),
            ("ctx.flag.x", json!(null)),
            ("ctx.pointer", json!("ctx.region")),
            ("ctx.", json!(null)),
            ("ctx..user", json!(null)),
            ("ctx.nothing", json!(null)),
            ("region", json!("north")),
            ("pointer", json!("ctx.region")),
            ("flag", json!(false)),
            ("ctx", json!("ctx")),
            ("celsius", json!("celsius")),
            ("", json!("")),
            ("Arguments.city", json!("Arguments.city")),
            (" arguments", json!(" arguments")),
            ("argumentsX", json!("argumentsX")),
            ("${ctx.region}", json!("${ctx.region}")),
            ("ctx.users[0].id", json!(null)),
        ];
        for (text, expected) in table {
            assert_eq!(cx.resolve_str(text), expected, "{text:?}");
        }
    }

    #[test]
    fn a_bare_ctx_is_the_state_key_of_that_name() {
        let args = json!({});
        let state = json!({"ctx": 5});
        let cx = ProjectionContext::new(CallView::new("c", "t", &args), &state);
        assert_eq!(cx.resolve_str("ctx"), json!(5));
    }

    #[test]
    fn a_state_that_is_not_an_object_gives_literals_and_nulls() {
        let args = json!({});
        for state in [json!(null), json!([1, 2]), json!("region"), json!(3)] {
            let cx = ProjectionContext::new(CallView::new("c", "t", &args), &state);
            assert_eq!(cx.resolve_str("region"), json!("region"));
            assert_eq!(cx.resolve_str("ctx.region"), json!(null));
        }
        let state = json!([{"id": 1}]);
        let cx = ProjectionContext::new(CallView::new("c", "t", &args), &state);
        assert_eq!(cx.resolve_str("ctx.0.id"), json!(1));
    }

    #[test]
    fn mappings_resolve_recursively() {
        let args = json!({"city": "Berlin"});
        let state = state();
        let cx = ProjectionContext::new(CallView::new("call_1", "get_weather", &args), &state);
        let mapping = InputMapping::new(json!({
            "city": "arguments.city",
            "call_id": "tool_call_id",
            "whole": "call",
            "user_id": "ctx.user.id",
            "nested": {"a": ["ctx.users.0.id", 3, true, null, 2.5, {"deep": ["region"]}]},
        }))
        .unwrap();
        assert_eq!(
            mapping.resolve(&cx),
            json!({
                "city": "Berlin",
                "call_id": "call_1",
                "whole": {"id": "call_1", "name": "get_weather", "arguments": {"city": "Berlin"}},
                "user_id": null,
                "nested": {"a": ["u1", 3, true, null, 2.5, {"deep": ["north"]}]},
            })
        );
        for scalar in [json!(null), json!(1), json!(true), json!(-0.5)] {
            assert_eq!(InputMapping::new(scalar.clone()).unwrap().resolve(&cx), scalar);
        }
    }

    #[test]
    fn limits_of_a_mapping() {
        let mut deep = json!("arguments");
        for _ in 0..=MAX_JSON_DEPTH {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(InputMapping::new(deep), Err(MappingError::TooDeep { limit: MAX_JSON_DEPTH }));
        for key in RESERVED_KEYS {
            let err = InputMapping::new(json!({ key: "arguments" })).unwrap_err();
            assert_eq!(err, MappingError::ReservedKey { key: key.to_owned() });
            assert!(err.to_string().contains(key), "{err}");
        }
        // Reserved names are fine below the top level.
        assert!(InputMapping::new(json!({"meta": {"tool_name": "tool_name"}})).is_ok());
        assert_eq!(InputMapping::default().as_value(), &json!({}));
    }

    #[test]
    fn serde_checks_the_mapping() {
        let mapping: InputMapping = serde_json::from_value(json!({"a": "arguments.a"})).unwrap();
        assert_eq!(serde_json::to_value(&mapping).unwrap(), json!({"a": "arguments.a"}));
        assert!(serde_json::from_value::<InputMapping>(json!({"tool_call": 1})).is_err());
    }

    #[test]
    fn the_envelope() {
        let args = json!({"city": "Oslo"});
        let call = CallView::new("call_1", "get_weather", &args).with_index(3);
        let envelope = json!({
            "tool_call": {"id": "call_1", "name": "get_weather", "arguments": {"city": "Oslo"}},
            "tool_name": "get_weather",
            "tool_arguments": {"city": "Oslo"},
            "tool_call_id": "call_1",
            "tool_call_index": 3,
        });
        assert_eq!(with_envelope(json!(null), &call), envelope);
        assert_eq!(with_envelope(json!({}), &call), envelope);
        let mut with_city = envelope.clone();
        with_city["city"] = json!("Oslo");
        assert_eq!(with_envelope(json!({"city": "Oslo"}), &call), with_city);
        for other in [json!("x"), json!(1), json!(false), json!([1])] {
            let mut expected = envelope.clone();
            expected["tool_input"] = other.clone();
            assert_eq!(with_envelope(other, &call), expected);
        }
        assert_eq!(with_envelope(json!({"tool_call_id": "spoofed", "tool_call_index": 0}), &call), envelope);
    }

    #[test]
    fn child_input_forms() {
        let args = json!({"city": "Oslo"});
        let state = json!({"region": "north"});
        let cx = ProjectionContext::new(CallView::new("call_1", "t", &args), &state);
        let spread = ChildInput::mapping(json!("arguments")).unwrap();
        assert_eq!(spread.project(&cx).unwrap(), json!({"city": "Oslo"}));
        assert_eq!(spread.child_input(&cx).unwrap()["city"], "Oslo");
        let f = ChildInput::function(|call, state| Ok(json!({"id": call.id, "r": state["region"]})));
        assert_eq!(f.project(&cx).unwrap(), json!({"id": "call_1", "r": "north"}));
        assert_eq!(format!("{f:?}"), "Function(..)");
        assert_eq!(format!("{:?}", ChildInput::default()), "Mapping(Object {})");

        #[derive(serde::Deserialize)]
        struct Parent {
            #[allow(dead_code)]
            count: u32,
        }
        let typed = ChildInput::typed(|_: &CallView<'_>, _: &Parent| Ok(1));
        let err = typed.project(&cx).unwrap_err();
        assert!(err.starts_with("the parent state does not fit"), "{err}");
    }

    #[test]
    fn call_views() {
        let call = ToolUse::new("id_1", "name_1", json!({"a": 1}));
        let view = CallView::of(&call, 5);
        assert_eq!((view.id, view.name, view.arguments, view.index), ("id_1", "name_1", &json!({"a": 1}), 5));
        assert_eq!(CallView::from(&call).index, 0);
        assert_eq!(view.to_json(), json!({"id": "id_1", "name": "name_1", "arguments": {"a": 1}}));
    }
}
