//! Tools: functions a language model can call.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::RunId;

mod output;

pub use output::*;

/// A tool a language model can call: a name, a description, a JSON Schema of its
/// arguments, and a handler that takes the arguments as JSON.
///
/// The trait is object safe, so a [`ToolRegistry`](crate::ToolRegistry) holds
/// `Arc<dyn Tool>`. `#[tool]` writes the impl for you; writing it by hand is equivalent.
///
/// ```
/// use loopstack_core::{Tool, ToolContext, ToolError, ToolOutput, tool_input_schema};
/// use serde_json::Value;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args {
///     /// Text to echo back.
///     text: String,
/// }
///
/// struct Echo;
///
/// #[async_trait::async_trait]
/// impl Tool for Echo {
///     fn name(&self) -> &str { "echo" }
///     fn description(&self) -> &str { "Echoes its input." }
///     fn input_schema(&self) -> Value { tool_input_schema::<Args>() }
///     async fn call(&self, args: Value, _cx: &ToolContext) -> Result<ToolOutput, ToolError> {
///         let args: Args = loopstack_core::parse_tool_arguments(self.name(), args)?;
///         Ok(ToolOutput::text(args.text))
///     }
/// }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let out = Echo.call(serde_json::json!({"text": "hi"}), &ToolContext::new("call_1", "echo")).await;
/// assert_eq!(out.unwrap().to_text(), "hi");
/// let err = Echo.call(serde_json::json!({"text": 7}), &ToolContext::new("call_2", "echo")).await.unwrap_err();
/// assert_eq!(err.to_string(), "invalid arguments for tool `echo` at `text`: invalid type: integer `7`, expected a string");
/// # });
/// ```
#[async_trait::async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a loopstack tool",
    note = "annotate an async fn or an `impl` block with `#[tool]`, or implement `Tool` by hand"
)]
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls the tool by; matches `^[a-zA-Z0-9_-]{1,64}$`.
    fn name(&self) -> &str;

    /// What the tool does, when to use it and what its arguments mean, for the model.
    fn description(&self) -> &str;

    /// The JSON Schema of the arguments: an inlined `type: object` schema.
    ///
    /// A [`ToolRegistry`](crate::ToolRegistry) calls this once, when the tool is
    /// registered, and keeps the result; it is not called per model request.
    fn input_schema(&self) -> Value;

    /// How the tool is run: its timeout and whether it may run concurrently.
    fn options(&self) -> ToolOptions {
        ToolOptions::default()
    }

    /// Runs the tool with the arguments the model wrote.
    ///
    /// Arguments that do not deserialize are an [`ToolErrorKind::InvalidArguments`]
    /// error, never a panic: the model sees the reason and can correct itself.
    ///
    /// # Blocking work
    ///
    /// The call runs on the async runtime's threads: work that blocks its thread
    /// (synchronous I/O, a blocking client, heavy computation) belongs in
    /// [`tokio::task::spawn_blocking`], so it holds no thread other tasks need:
    ///
    /// ```no_run
    /// # use loopstack_core::ToolError;
    /// # async fn demo(path: std::path::PathBuf) -> Result<String, ToolError> {
    /// let text = tokio::task::spawn_blocking(move || std::fs::read_to_string(path))
    ///     .await
    ///     .map_err(ToolError::new)?
    ///     .map_err(ToolError::new)?;
    /// # Ok(text) }
    /// ```
    ///
    /// A call that blocks anyway still gets its timeout result on time on a
    /// multi-thread runtime: the LLM layer runs each call in a task of its own and
    /// waits for it elsewhere. But the blocked thread stays blocked until the call
    /// returns (a task can only be stopped at an await), and on a current-thread
    /// runtime nothing else runs meanwhile, not even the timeout.
    async fn call(&self, args: Value, cx: &ToolContext) -> Result<ToolOutput, ToolError>;
}

/// How a tool is run. Build it with [`ToolOptions::new`] and its setters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolOptions {
    /// How long one call may take; `None` is the caller's default (30 s in the LLM
    /// layer). `Some(Duration::ZERO)` means 24 hours.
    pub timeout: Option<Duration>,
    /// Whether a call may run at the same time as other calls of one batch.
    /// A tool that is not concurrent runs alone.
    pub concurrent: bool,
    /// Whether a person must approve each call before it runs: the agent then
    /// waits for an approval signal, and a denied call becomes an error result
    /// the model reads.
    pub approve: bool,
    /// Whether the call needs the run it is made from: the runtime and the parent
    /// run's state in its [`ToolContext`] (a workflow tool starts a child run).
    /// Off for plain tools, so their calls do not carry them.
    pub needs_run: bool,
    /// What a crash during a call may do to the call's side effect: run it again
    /// (the default), run it again under the same idempotency key, or never run it
    /// twice. See [`Effect`].
    pub effect: Effect,
}

/// How often a tool call's side effect may happen when the process running it dies
/// mid-call, which decides what a resumed run does with the call.
///
/// A run is checkpointed per transition, and a tool call happens inside one: a
/// crash after the call started and before its result was committed leaves a run
/// whose call may or may not have had its effect.
///
/// - [`AtLeastOnce`](Self::AtLeastOnce), the default: the resumed run calls the
///   tool again. Right for reads and for effects that are harmless twice.
/// - [`Idempotent`](Self::Idempotent): the resumed run calls the tool again, with
///   the same [`ToolContext::idempotency_key`] as every earlier attempt of the call;
///   the tool hands it to the service it calls (a payment API's idempotency key) so
///   the service makes the effect once. It runs like `AtLeastOnce`: the option
///   states the tool's contract, for readers and for operators.
/// - [`AtMostOnce`](Self::AtMostOnce): the call's intent (its id, tool and arguments)
///   is committed in the run's checkpoint before the tool runs, in the same fenced
///   commit that records the model's turn (or a person's decision on the call), so
///   it costs no extra write. A resumed run that finds the intent without a result
///   does not call the tool again: the run waits at `awaiting_outcome` for a person
///   (or code) to say what happened, with the call's result, or "run it again".
///
/// ```
/// use loopstack_core::{Effect, ToolOptions};
///
/// assert_eq!(ToolOptions::new().effect, Effect::AtLeastOnce);
/// let refund = ToolOptions::new().effect(Effect::AtMostOnce);
/// assert!(refund.effect.is_at_most_once());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Effect {
    /// A call interrupted by a crash runs again when its run resumes.
    #[default]
    AtLeastOnce,
    /// A call interrupted by a crash runs again, with the same idempotency key
    /// ([`ToolContext::idempotency_key`]) on every attempt.
    Idempotent,
    /// A call interrupted by a crash is not run again: its run waits for a person
    /// (or code) to give its result or to have it run again.
    AtMostOnce,
}

impl Effect {
    /// Whether a call interrupted by a crash must not run again.
    pub const fn is_at_most_once(self) -> bool {
        matches!(self, Self::AtMostOnce)
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AtLeastOnce => "at least once",
            Self::Idempotent => "idempotent",
            Self::AtMostOnce => "at most once",
        })
    }
}

impl Default for ToolOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl ToolOptions {
    /// The defaults: the caller's timeout, concurrent, no approval, at least once.
    pub const fn new() -> Self {
        Self { timeout: None, concurrent: true, approve: false, needs_run: false, effect: Effect::AtLeastOnce }
    }

    /// Sets what a crash during a call may do to its side effect ([`Effect`]); a
    /// `#[tool]` sets it with `#[tool(effect = at_most_once)]` (or `idempotent`,
    /// `at_least_once`).
    #[must_use]
    pub const fn effect(mut self, effect: Effect) -> Self {
        self.effect = effect;
        self
    }

    /// Sets whether each call gets the runtime and the parent run's state in its
    /// context ([`ToolContext::runtime`], [`ToolContext::parent_state`]); a
    /// `#[tool]` sets it with `#[tool(needs_run)]`.
    #[must_use]
    pub const fn needs_run(mut self, needs_run: bool) -> Self {
        self.needs_run = needs_run;
        self
    }

    /// Sets whether each call needs a person's approval before it runs.
    #[must_use]
    pub const fn approve(mut self, approve: bool) -> Self {
        self.approve = approve;
        self
    }

    /// Sets the timeout; `Duration::ZERO` means 24 hours.
    #[must_use]
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets whether the tool may run concurrently with other calls.
    #[must_use]
    pub const fn concurrent(mut self, concurrent: bool) -> Self {
        self.concurrent = concurrent;
        self
    }

    /// The effective timeout given the caller's default; zero means 24 hours.
    pub fn effective_timeout(&self, default: Duration) -> Duration {
        let t = self.timeout.unwrap_or(default);
        if t.is_zero() { Duration::from_secs(24 * 60 * 60) } else { t }
    }
}

/// What a tool call has access to besides its arguments.
#[derive(Debug, Clone)]
pub struct ToolContext {
    call_id: String,
    tool_name: String,
    index: usize,
    run_id: Option<RunId>,
    step: Option<u64>,
    /// Made when first asked for, unless the caller gave one.
    cancellation: std::sync::OnceLock<CancellationToken>,
    runtime: Option<crate::Runtime>,
    parent_state: Option<Arc<Value>>,
    secrets: Option<crate::secrets::Secrets>,
    input: Option<Arc<InputAnswer>>,
}

impl ToolContext {
    /// A context for one call; use it to call a tool directly in tests.
    pub fn new(call_id: impl Into<String>, tool_name: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            tool_name: tool_name.into(),
            index: 0,
            run_id: None,
            step: None,
            cancellation: std::sync::OnceLock::new(),
            runtime: None,
            parent_state: None,
            secrets: None,
            input: None,
        }
    }

    /// Gives the call a person's answer to the input it asked for
    /// ([`ToolOutput::needs_input`]).
    #[must_use]
    pub fn with_input(mut self, answer: InputAnswer) -> Self {
        self.input = Some(Arc::new(answer));
        self
    }

    /// The answer to the input this call asked for on its last attempt
    /// ([`ToolOutput::needs_input`]), with the request and its state: `None` on a
    /// call's first attempt.
    pub fn input(&self) -> Option<&InputAnswer> {
        self.input.as_deref()
    }

    /// Sets the zero-based index of the call in its batch.
    #[must_use]
    pub fn with_index(mut self, index: usize) -> Self {
        self.index = index;
        self
    }

    /// Sets the run the call belongs to.
    #[must_use]
    pub fn with_run_id(mut self, run_id: RunId) -> Self {
        self.run_id = Some(run_id);
        self
    }

    /// Sets the step of the run the call is made in (the step its transition will
    /// commit as).
    #[must_use]
    pub fn with_step(mut self, step: u64) -> Self {
        self.step = Some(step);
        self
    }

    /// Gives the call the runtime that drives its run, for tools that start runs
    /// (see [`ToolOptions::needs_run`]).
    #[must_use]
    pub fn with_runtime(mut self, runtime: crate::Runtime) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// Gives the call the state of the run it is made from, as JSON.
    #[must_use]
    pub fn with_parent_state(mut self, state: Arc<Value>) -> Self {
        self.parent_state = Some(state);
        self
    }

    /// Gives the call the secrets its result is redacted of.
    #[must_use]
    pub fn with_secrets(mut self, secrets: crate::secrets::Secrets) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// The secrets the call's result is redacted of, when its runtime has some.
    pub fn secrets(&self) -> Option<&crate::secrets::Secrets> {
        self.secrets.as_ref()
    }

    /// The runtime that drives the call's run, for a tool that asked for it:
    /// `#[tool(needs_run)]`, or [`ToolOptions::needs_run`] in a hand-written
    /// [`Tool::options`]. The LLM layer gives it only to those tools' calls.
    ///
    /// # Errors
    /// A [`ToolErrorKind::NoRun`] error, which says how to ask for the runtime,
    /// when the call was not given it: the tool does not ask for it, or the call is
    /// made outside a run (a direct call whose context has no
    /// [`ToolContext::with_runtime`]). A handler passes it on with `?`, and the
    /// model reads it as the call's error.
    ///
    /// ```
    /// use loopstack_core::{Runtime, ToolContext, ToolErrorKind};
    ///
    /// let cx = ToolContext::new("call_1", "book_room");
    /// let error = cx.runtime().unwrap_err();
    /// assert_eq!(error.kind(), ToolErrorKind::NoRun);
    /// assert!(error.message().contains("#[tool(needs_run)]"));
    /// assert!(cx.with_runtime(Runtime::new()).runtime().is_ok());
    /// ```
    pub fn runtime(&self) -> Result<&crate::Runtime, ToolError> {
        self.runtime.as_ref().ok_or_else(|| {
            ToolError::with_kind(
                ToolErrorKind::NoRun,
                format!(
                    "tool `{}` asked for the runtime, which its call was not given: add `#[tool(needs_run)]` to \
                     the tool (or `ToolOptions::new().needs_run(true)` in its `options`), and call it from a run \
                     (a direct call gives it with `ToolContext::with_runtime`)",
                    self.tool_name
                ),
            )
        })
    }

    /// The state of the run the call is made from, when the tool asked for it and
    /// the caller gave it.
    pub fn parent_state(&self) -> Option<&Value> {
        self.parent_state.as_deref()
    }

    /// Sets the token that cancels the call.
    #[must_use]
    pub fn with_cancellation(mut self, token: CancellationToken) -> Self {
        self.cancellation = std::sync::OnceLock::from(token);
        self
    }

    /// The provider's id of this call.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The tool's name as the model called it.
    pub fn tool_name(&self) -> &str {
        &self.tool_name
    }

    /// The zero-based index of this call among the calls of one model turn.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The run the call belongs to, when it is made from a run.
    pub fn run_id(&self) -> Option<RunId> {
        self.run_id
    }

    /// The step of the run the call is made in.
    pub fn step(&self) -> Option<u64> {
        self.step
    }

    /// A key that names this call for good: `{run_id}/{step}/{call_id}`, where
    /// `step` is the step of the transition that first ran the call.
    ///
    /// Every attempt of the same call has the same key: a transition interrupted by
    /// a crash runs again when its run resumes (runs are checkpointed per transition:
    /// at least once), and so do the tool calls it made; a failed run that is
    /// retried runs its last transition again; an [`Effect::AtMostOnce`] call a
    /// person asked to run again runs under its first attempt's key. A tool whose
    /// side effect must happen once (a payment, an email) declares
    /// [`Effect::Idempotent`] and passes the key to the service it calls as an
    /// idempotency key, or records it next to the effect and checks it first.
    /// Outside a run (a tool called directly) there is no key.
    pub fn idempotency_key(&self) -> Option<String> {
        let (run_id, step) = (self.run_id?, self.step?);
        Some(format!("{run_id}/{step}/{}", self.call_id))
    }

    /// Cancelled when the run is cancelled; long-running tools may watch it.
    pub fn cancellation(&self) -> &CancellationToken {
        self.cancellation.get_or_init(CancellationToken::new)
    }
}

/// Deserializes a tool's arguments, turning a mismatch into an
/// [`ToolErrorKind::InvalidArguments`] error whose text says what was wrong and where.
pub fn parse_tool_arguments<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    let args = if args.is_null() { Value::Object(Default::default()) } else { args };
    // Read first without tracking the path (which copies every key on the way): only
    // arguments that do not fit are read again, for the path the error names.
    if let Ok(parsed) = T::deserialize(&args) {
        return Ok(parsed);
    }
    serde_path_to_error::deserialize(args).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // A list where one value belongs ("Paris and Rome" as `["Paris", "Rome"]`): say
        // what to do instead, which a small model follows where the type error alone
        // made it give up.
        let hint = if inner.to_string().starts_with("invalid type: sequence") {
            format!("; it takes one value: for several, call `{tool}` once for each")
        } else {
            String::new()
        };
        if path == "." || path.is_empty() {
            ToolError::invalid_arguments(format!("invalid arguments for tool `{tool}`: {inner}{hint}"))
        } else {
            ToolError::invalid_arguments(format!("invalid arguments for tool `{tool}` at `{path}`: {inner}{hint}"))
        }
    })
}

/// The JSON Schema of a tool's arguments, in the shape providers accept: an inlined
/// `type: object` schema (no `$ref` or `$defs`, except for a type that contains
/// itself), without `$schema` and `title`, with `additionalProperties: false` on every
/// object that lists properties and does not say otherwise.
///
/// `required` lists the fields that are not `Option` (schemars' rule).
pub fn tool_input_schema<T: schemars::JsonSchema>() -> Value {
    let mut value = crate::workflow::input_schema::<T>();
    if let Value::Object(map) = &mut value {
        map.entry("type").or_insert_with(|| Value::String("object".into()));
        // An enum of argument shapes is a `oneOf`/`anyOf` of objects: adding an empty
        // `properties` (closed below) would forbid every argument.
        if !["oneOf", "anyOf", "allOf"].iter().any(|k| map.contains_key(*k)) {
            map.entry("properties").or_insert_with(|| Value::Object(Default::default()));
        }
    }
    close_objects(&mut value);
    value
}

/// Adds `additionalProperties: false` (unless it says otherwise) and `required` to
/// every object of `value` that lists properties.
pub(crate) fn close_objects(value: &mut Value) {
    let Value::Object(map) = value else { return };
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        props.values_mut().for_each(close_objects);
        // An explicit `additionalProperties` (a flattened map, say) is kept.
        map.entry("additionalProperties").or_insert(Value::Bool(false));
        map.entry("required").or_insert_with(|| Value::Array(Vec::new()));
    }
    for key in ["items", "additionalProperties", "not", "if", "then", "else"] {
        if let Some(v) = map.get_mut(key) {
            close_objects(v);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(items)) = map.get_mut(key) {
            items.iter_mut().for_each(close_objects);
        }
    }
}

/// Checks a tool name against `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}
