//! The cases an eval runs: inputs with what is expected of them.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::EvalError;

/// One case: an input for the target, and what a scorer may compare the outcome to.
///
/// As a line of a JSONL dataset: `{"id": "oslo", "input": "Weather in Oslo?",
/// "expected": "rain"}`; `id` defaults to the line number, `expected` and `meta` to
/// nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Case {
    /// The case's name in reports: unique in its dataset.
    #[serde(default)]
    pub id: String,
    /// The input: an agent's prompt, or a workflow's input as JSON text
    /// ([`Eval::workflow`](super::Eval::workflow)). In a JSONL dataset it is a string,
    /// taken as is, or any other JSON value, kept as its JSON text.
    #[serde(deserialize_with = "input_text")]
    pub input: String,
    /// What is expected, for the scorers that compare with it ([`Exact`](super::Exact),
    /// [`Contains`](super::Contains) and your own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Value>,
    /// Anything else a scorer of your own reads.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub meta: Value,
}

impl Case {
    /// A case named `id` with `input`.
    pub fn new(id: impl Into<String>, input: impl Into<String>) -> Self {
        Self { id: id.into(), input: input.into(), expected: None, meta: Value::Null }
    }

    /// Sets what is expected.
    #[must_use]
    pub fn expected(mut self, expected: impl Into<Value>) -> Self {
        self.expected = Some(expected.into());
        self
    }

    /// Sets the case's other data.
    #[must_use]
    pub fn meta(mut self, meta: Value) -> Self {
        self.meta = meta;
        self
    }

    /// What is expected, as text (a JSON string's contents, or other JSON as text).
    pub fn expected_text(&self) -> Option<String> {
        self.expected.as_ref().map(|e| match e {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
}

/// The cases of an eval, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dataset {
    name: String,
    cases: Vec<Case>,
}

impl Dataset {
    /// An empty dataset named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), cases: Vec::new() }
    }

    /// Adds a case.
    ///
    /// # Panics
    /// When a case of the dataset already has its id: ids name cases in reports and
    /// comparisons.
    #[must_use]
    pub fn case(mut self, case: Case) -> Self {
        self.push(case).expect("case ids are unique");
        self
    }

    /// Adds a case, or says why not (its id is taken).
    pub fn push(&mut self, mut case: Case) -> Result<(), EvalError> {
        if case.id.is_empty() {
            case.id = (self.cases.len() + 1).to_string();
        }
        if self.cases.iter().any(|c| c.id == case.id) {
            return Err(EvalError::Dataset(format!("two cases are named `{}`", case.id)));
        }
        self.cases.push(case);
        Ok(())
    }

    /// A dataset from JSON Lines text: one [`Case`] per line (blank lines and lines
    /// starting with `//` are skipped).
    pub fn from_jsonl(name: impl Into<String>, text: &str) -> Result<Self, EvalError> {
        let mut dataset = Self::new(name);
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with("//") {
                continue;
            }
            let mut case: Case =
                serde_json::from_str(line).map_err(|e| EvalError::Dataset(format!("line {}: {e}", n + 1)))?;
            if case.id.is_empty() {
                case.id = (n + 1).to_string();
            }
            dataset.push(case)?;
        }
        Ok(dataset)
    }

    /// A dataset from a JSON Lines file, named after the file (a blocking read).
    pub fn load_jsonl(path: impl AsRef<Path>) -> Result<Self, EvalError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| EvalError::Dataset(format!("{}: {e}", path.display())))?;
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        Self::from_jsonl(name, &text)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its cases.
    pub fn cases(&self) -> &[Case] {
        &self.cases
    }
}

/// A case's `input`: a string as is, any other JSON value as its JSON text.
fn input_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::String(text) => Ok(text),
        other => Ok(other.to_string()),
    }
}
