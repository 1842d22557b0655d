//! Scorers: how an eval judges one case's outcome.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Case, EvalError, Outcome};
use crate::message::Message;
use crate::model::{ChatModel, ChatRequest, ResponseSchema};

/// How one scorer judged one outcome: a value from 0 to 1, whether it passes, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Score {
    /// From 0 (worst) to 1 (best).
    pub value: f64,
    /// Whether the case passes this scorer.
    pub passed: bool,
    /// Why, when it says more than the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Score {
    /// A pass (1).
    pub fn pass() -> Self {
        Self { value: 1.0, passed: true, reason: None }
    }

    /// A failure (0), with its reason.
    pub fn fail(reason: impl Into<String>) -> Self {
        Self { value: 0.0, passed: false, reason: Some(reason.into()) }
    }

    /// A pass when `passed`, else a failure with `reason`.
    pub fn check(passed: bool, reason: impl FnOnce() -> String) -> Self {
        if passed { Self::pass() } else { Self::fail(reason()) }
    }

    /// A value from 0 to 1 (clamped), passing at `threshold` or above.
    pub fn value(value: f64, threshold: f64) -> Self {
        let value = if value.is_nan() { 0.0 } else { value.clamp(0.0, 1.0) };
        Self { value, passed: value >= threshold, reason: None }
    }

    /// Sets the reason.
    #[must_use]
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// Judges a case's outcome. The built-in scorers are [`Exact`], [`Contains`],
/// [`Matches`], [`FitsSchema`], [`CalledTool`], [`Judge`] and [`custom`].
#[async_trait::async_trait]
pub trait Scorer: Send + Sync + 'static {
    /// Its name, a column of the report.
    fn name(&self) -> &str;

    /// The score of `outcome` for `case`. An error (a judge model that failed) is
    /// recorded as a failing score with the error as its reason; so is a panic, with
    /// its message, and the eval goes on.
    async fn score(&self, case: &Case, outcome: &Outcome) -> Result<Score, EvalError>;
}

/// Passes when the answer's text is the case's `expected` (trimmed).
#[derive(Debug, Clone, Copy, Default)]
pub struct Exact;

#[async_trait::async_trait]
impl Scorer for Exact {
    fn name(&self) -> &str {
        "exact"
    }

    async fn score(&self, case: &Case, outcome: &Outcome) -> Result<Score, EvalError> {
        let Some(expected) = case.expected_text() else { return Err(no_expected(self.name(), case)) };
        Ok(Score::check(outcome.text.trim() == expected.trim(), || {
            format!("expected {expected:?}, got {:?}", outcome.text)
        }))
    }
}

/// Passes when the answer's text contains a string (ignoring case): the case's
/// `expected` ([`Contains::expected`]), or one given ([`Contains::text`]).
#[derive(Debug, Clone, Default)]
pub struct Contains {
    text: Option<String>,
}

impl Contains {
    /// The case's `expected`.
    pub fn expected() -> Self {
        Self { text: None }
    }

    /// `text`, for every case.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: Some(text.into()) }
    }
}

#[async_trait::async_trait]
impl Scorer for Contains {
    fn name(&self) -> &str {
        "contains"
    }

    async fn score(&self, case: &Case, outcome: &Outcome) -> Result<Score, EvalError> {
        let Some(needle) = self.text.clone().or_else(|| case.expected_text()) else {
            return Err(no_expected(self.name(), case));
        };
        let found = outcome.text.to_lowercase().contains(&needle.to_lowercase());
        Ok(Score::check(found, || format!("{needle:?} is not in {:?}", outcome.text)))
    }
}

/// Passes when the answer's text matches a regular expression.
#[derive(Debug, Clone)]
pub struct Matches {
    regex: regex::Regex,
}

impl Matches {
    /// A scorer for `pattern` (the `regex` crate's syntax).
    pub fn new(pattern: &str) -> Result<Self, EvalError> {
        let regex = regex::Regex::new(pattern).map_err(|e| EvalError::Scorer(format!("regex `{pattern}`: {e}")))?;
        Ok(Self { regex })
    }
}

#[async_trait::async_trait]
impl Scorer for Matches {
    fn name(&self) -> &str {
        "matches"
    }

    async fn score(&self, _case: &Case, outcome: &Outcome) -> Result<Score, EvalError> {
        let matched = self.regex.is_match(&outcome.text);
        Ok(Score::check(matched, || format!("{:?} does not match /{}/", outcome.text, self.regex.as_str())))
    }
}

/// Passes when the answer is JSON valid against a JSON Schema: a typed agent's
/// answer, or else the answer's text read as JSON.
#[derive(Debug)]
pub struct FitsSchema(loopstack_core::schema::CompiledSchema);

impl FitsSchema {
    /// A scorer for `schema` (drafts 4 to 2020-12; nothing is fetched).
    pub fn new(schema: Value) -> Result<Self, EvalError> {
        loopstack_core::schema::CompiledSchema::compile(schema)
            .map(Self)
            .map_err(|e| EvalError::Scorer(format!("the schema: {e}")))
    }

    /// A scorer for the JSON Schema of `T`.
    pub fn of<T: schemars::JsonSchema>() -> Result<Self, EvalError> {
        Self::new(serde_json::to_value(schemars::schema_for!(T)).expect("a schema is JSON"))
    }
}

#[async_trait::async_trait]
impl Scorer for FitsSchema {
    fn name(&self) -> &str {
        "fits_schema"
    }

    async fn score(&self, _case: &Case, outcome: &Outcome) -> Result<Score, EvalError> {
        let value = match &outcome.answer {
            Some(answer) => answer.clone(),
            None => match serde_json::from_str::<Value>(outcome.text.trim()) {
                Ok(value) => value,
                Err(e) => return Ok(Score::fail(format!("the answer is not JSON: {e}"))),
            },
        };
        Ok(match self.0.check(&value, "the answer") {
            Ok(()) => Score::pass(),
            Err(reasons) => Score::fail(format!("it does not fit the schema: {reasons}")),
        })
    }
}

/// Passes when the run called a tool, with arguments that include the ones given
/// (every field given, at any depth; more fields may be there).
#[derive(Debug, Clone)]
pub struct CalledTool {
    tool: String,
    arguments: Option<Value>,
}

impl CalledTool {
    /// Any call to `tool`.
    pub fn new(tool: impl Into<String>) -> Self {
        Self { tool: tool.into(), arguments: None }
    }

    /// A call to it whose arguments include `arguments`.
    #[must_use]
    pub fn with(mut self, arguments: Value) -> Self {
        self.arguments = Some(arguments);
        self
    }
}

fn includes(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(have), Value::Object(want)) => {
            want.iter().all(|(k, w)| have.get(k).is_some_and(|h| includes(h, w)))
        }
        (have, want) => have == want,
    }
}

#[async_trait::async_trait]
impl Scorer for CalledTool {
    fn name(&self) -> &str {
        "called_tool"
    }

    async fn score(&self, _case: &Case, outcome: &Outcome) -> Result<Score, EvalError> {
        let calls: Vec<_> = outcome.tool_calls.iter().filter(|c| c.name == self.tool).collect();
        let found = calls.iter().any(|c| self.arguments.as_ref().is_none_or(|want| includes(&c.input, want)));
        Ok(Score::check(found, || match (&self.arguments, calls.is_empty()) {
            (_, true) => format!("`{}` was not called", self.tool),
            (Some(want), false) => format!("`{}` was not called with {want}", self.tool),
            (None, false) => unreachable!("a call was found"),
        }))
    }
}

/// A scorer of your own from a function of the case and its outcome.
///
/// ```
/// use loopstack_llm::eval::{Score, custom};
/// let short = custom("short", |_case, outcome| Score::check(outcome.text.len() < 80, || "too long".into()));
/// # let _ = short;
/// ```
pub fn custom(name: impl Into<String>, f: impl Fn(&Case, &Outcome) -> Score + Send + Sync + 'static) -> Custom {
    Custom { name: name.into(), f: Arc::new(f) }
}

/// See [`custom`].
#[derive(Clone)]
pub struct Custom {
    name: String,
    #[allow(clippy::type_complexity)]
    f: Arc<dyn Fn(&Case, &Outcome) -> Score + Send + Sync>,
}

impl std::fmt::Debug for Custom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Custom").field("name", &self.name).finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl Scorer for Custom {
    fn name(&self) -> &str {
        &self.name
    }

    async fn score(&self, case: &Case, outcome: &Outcome) -> Result<Score, EvalError> {
        Ok((self.f)(case, outcome))
    }
}

/// What a judge model answers: [`Judge`]'s typed verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Verdict {
    /// Whether the answer meets the criteria.
    pub passed: bool,
    /// How well, from 0 to 1.
    pub score: f64,
    /// Why, in a sentence.
    pub reason: String,
}

/// The judge's instructions, before the criteria.
pub const JUDGE_PROMPT: &str = "You grade an AI assistant's answer against the criteria you are given. \
Read the question, the expected answer if there is one, and the answer. Reply with your verdict only: \
whether the answer passes, a score from 0 to 1, and the reason in one sentence.";

const VERDICT_TOOL: &str = "verdict";

/// A model as judge: it reads the question, the expected answer and the outcome's
/// answer with your criteria, and gives a [`Verdict`] (through structured output
/// where the model has it, else a `verdict` tool). Any provider.
#[derive(Clone)]
pub struct Judge {
    model: Arc<dyn ChatModel>,
    model_name: String,
    criteria: String,
}

impl std::fmt::Debug for Judge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Judge").field("model", &self.model_name).field("criteria", &self.criteria).finish()
    }
}

impl Judge {
    /// `model_name` of `model` judges by `criteria` (what a good answer does).
    pub fn new(model: impl ChatModel, model_name: impl Into<String>, criteria: impl Into<String>) -> Self {
        Self { model: Arc::new(model), model_name: model_name.into(), criteria: criteria.into() }
    }

    fn request(&self, case: &Case, outcome: &Outcome) -> ChatRequest {
        let expected = case.expected_text().map(|e| format!("\n\nExpected answer:\n{e}")).unwrap_or_default();
        let text = format!("Question:\n{}{expected}\n\nAnswer:\n{}", case.input, outcome.text);
        let system = format!("{JUDGE_PROMPT}\n\nCriteria: {}", self.criteria);
        let schema = serde_json::to_value(schemars::schema_for!(Verdict)).expect("a schema is JSON");
        let request =
            ChatRequest::new(self.model_name.clone(), vec![Message::user(text)]).system(system).temperature(0.0);
        if self.model.structured_output() {
            let mut request = request;
            request.response_schema = Some(ResponseSchema::new("verdict", schema));
            request
        } else {
            let tool = loopstack_model::ToolDefinition::new(VERDICT_TOOL, "Gives the verdict.", schema);
            request.tools(vec![Arc::new(tool)])
        }
    }
}

#[async_trait::async_trait]
impl Scorer for Judge {
    fn name(&self) -> &str {
        "judge"
    }

    async fn score(&self, case: &Case, outcome: &Outcome) -> Result<Score, EvalError> {
        let response =
            self.model.chat(&self.request(case, outcome)).await.map_err(|e| EvalError::Judge(e.to_string()))?;
        let value = match response.message.tool_uses().find(|c| c.name == VERDICT_TOOL) {
            Some(call) => call.input.clone(),
            None => serde_json::from_str(response.message.text().trim())
                .unwrap_or_else(|_| json!({"unreadable": response.message.text()})),
        };
        let verdict: Verdict = serde_json::from_value(value.clone())
            .map_err(|e| EvalError::Judge(format!("the verdict {value} does not read: {e}")))?;
        let score = if verdict.score.is_nan() { 0.0 } else { verdict.score.clamp(0.0, 1.0) };
        Ok(Score { value: score, passed: verdict.passed, reason: Some(verdict.reason) })
    }
}

fn no_expected(scorer: &str, case: &Case) -> EvalError {
    EvalError::Scorer(format!("scorer `{scorer}` needs an `expected` value, and case `{}` has none", case.id))
}
