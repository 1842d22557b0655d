//! The `#[tool]` and `#[workflow]` attribute macros of
//! [loopstack](https://docs.rs/loopstack). Use them through the `loopstack` crate,
//! which re-exports both; the code they generate names `::loopstack::__private`.
//!
//! Each macro runs in three stages: `parse` reads the attribute arguments, `model`
//! does every check (keeping spans for errors), and `expand` writes the code without
//! failing. On an error the user's item is still emitted (helper attributes removed),
//! with a stub of the generated API, so one mistake shows as one error.
//!
//! Set `LOOPSTACK_MACROS_DEBUG=1` to print every expansion to stderr.

use proc_macro::TokenStream;

mod ctxt;
mod docs;
mod duration;
mod expand;
mod model;
mod names;
mod parse;

use model::tool::ToolModel;
use model::workflow::WorkflowModel;

/// Turns an `async fn`, or an `impl` block with an `async fn handle`, into a
/// [`Tool`](https://docs.rs/loopstack/latest/loopstack/trait.Tool.html).
///
/// ```text
/// /// Retrieve weather information.             <- the description the model reads
/// #[tool]                                       // or #[tool(name = "..", description = "..",
/// async fn get_weather(                         //          timeout = 10, concurrent = false, approve,
///                                               //          needs_run, effect = at_most_once,
///                                               //          crate = path)]
///     /// City or location name                 <- the argument's description
///     location: String,
///     unit: Option<String>,                     // Option: not required
///     cx: &ToolContext,                         // optional, any position, not an argument
/// ) -> Result<String, ToolError> { .. }
/// ```
///
/// The fn stays as written (callable directly) and a unit struct `GetWeather`
/// (PascalCase of the fn, same visibility) implements `Tool`. The impl form keeps the
/// type and its methods and implements `Tool` for the type, with
/// `async fn handle(&self, args: Args, cx: &ToolContext)` as the handler (`Args`
/// derives `Deserialize` and `JsonSchema`; both parameters are optional).
///
/// Options, all optional:
///
/// - `name = ".."`: the tool's name; default: the fn's name, or the type's name in
///   snake_case. Must match `^[a-zA-Z0-9_-]{1,64}$`.
/// - `description = ".."`: default: the doc comment (required if there is none).
/// - `timeout = 10`: seconds per call, `0` meaning 24 hours; default: the caller's.
/// - `concurrent = false`: whether a call may run beside others of its batch;
///   default `true`.
/// - `approve` (or `approve = true`): a person decides on each call before it runs:
///   the agent's run waits at `awaiting_approval` (answered with `Agent::decide`,
///   the command line's `approve` / `deny`, or Studio's buttons), and a denied call
///   is an error result the model reads; default off.
/// - `needs_run` (or `needs_run = true`): the call is given the runtime that drives
///   its run, read with `cx.runtime()?` from the `&ToolContext` parameter (which the
///   tool must then take), for a tool that starts or reads runs. Without it
///   `cx.runtime()` is an error saying to add this option; default off.
/// - `effect = at_least_once | idempotent | at_most_once`: what a crash during a
///   call may do to its side effect (`Effect`). `at_least_once` (the default): a
///   resumed run calls the tool again. `idempotent`: it calls it again under the
///   same `cx.idempotency_key()`. `at_most_once`: the call's intent is committed
///   before it runs, and a resumed run that finds no result does not call it
///   again: the agent's run waits at `awaiting_outcome` for a person to give the
///   call's result or have it run again.
/// - `crate = path`: where loopstack is; default `::loopstack`.
///
/// Parameter doc comments and `#[serde(..)]`/`#[schemars(..)]` attributes move to the
/// arguments' schema. A `Result<T, E>` return (`E: Into<ToolError>`) sends `T`;
/// `String`/`&str` are sent as text, other `Serialize` types as JSON.
#[proc_macro_attribute]
pub fn tool(args: TokenStream, item: TokenStream) -> TokenStream {
    let out = match ToolModel::from_syn(args.into(), item.into()) {
        Ok(model) => expand::tool(&model),
        Err(failure) => expand::tool_fallback(&failure),
    };
    debug("tool", &out);
    out.into()
}

/// Turns an `impl` block into a
/// [`Workflow`](https://docs.rs/loopstack/latest/loopstack/trait.Workflow.html): a
/// state machine whose transitions are the block's `#[transition]` methods.
///
/// ```text
/// #[workflow]                       // or #[workflow(name = "..", version = 2, input = T, state = S, crate = path)]
/// impl ToolCallWorkflow {
///     #[transition(to = Ready)]                                   // from = Start
///     async fn setup(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { .. }
///     #[transition(from = Ready, to = Asked, priority = 10)]     // higher priority is tried first
///     #[guard(has_question)]                                      // a `fn(&self, &S) -> bool` method
///     async fn ask(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { .. }
///     #[transition(from = [Ready, Asked], to = End)]             // several source places
///     async fn finish(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { .. }
///     #[transition(from = Asked, to = Answered, wait)]           // fires on a signal with a typed payload
///     async fn answer(&self, state: &mut S, cx: &mut RunContext, payload: Answer) -> Result<()> { .. }
///     #[transition(from = Asked, to = End, wait)]                 // a signal without a payload
///     async fn cancel(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { .. }
///     #[transition(from = Asked, to = Expired, after = "48h")]   // fires after 48 hours at `Asked`
///     async fn expire(&self, state: &mut S, cx: &mut RunContext) -> Result<()> { .. }
///     fn has_question(&self, state: &S) -> bool { .. }
///     #[migrate(from = 1)]                                       // runs of version 1 resume under this one
///     fn from_v1(old: v1::State, place: v1::ToolCallWorkflowPlace) -> (S, ToolCallWorkflowPlace) { .. }
/// }
/// ```
///
/// Options, all optional:
///
/// - `name = ".."`: the stored workflow name; default: the type's name in snake_case.
/// - `version = N`: the workflow's version, an integer of at least 1; default 1. Each
///   run records the version it started under; a build drives runs of its own version
///   and of those it has a `#[migrate]` method for, and its workers claim no others.
///   Raise it when a deploy changes the table or the state so that waiting runs
///   cannot simply go on.
/// - `input = T`: what a run starts with; default: the state type. The state is
///   built with `From<T>`.
/// - `state = S`: the state type; default: `S` of the transitions' `state: &mut S`.
/// - `definition = path`: a method `fn(&self, table: &'static Definition) -> &'static
///   Definition` that picks the table a value runs under: `table` (the one the macro
///   builds) or one made from it with `Definition::renamed`, so values of one type
///   can run as workflows of their own names (the agent's `Agent::named` does this).
/// - `fork_check = path`: a method `fn(&self, settings: &ForkSettings) -> Result<(),
///   ForkError>` that checks the system prompt and model a fork asks for before
///   anything is stored (`Workflow::check_fork`; the agent refuses a provider it has
///   no model for); default: accepted.
/// - `on_create = path`: a method `fn(&self, state: &mut S, cx: &mut RunContext) ->
///   Result<(), E>` (`E: Into<BoxError>`) that saves the documents a run starts with
///   when it is created, stored with its step-0 checkpoint, so no transition is
///   spent on it (`Workflow::on_create`; the agent saves its prompt so); default:
///   none.
/// - `crate = path`: where loopstack is; default `::loopstack`.
///
/// `#[migrate(from = N)]` marks a plain (not `async`, not generic) method that converts
/// a run of older version `N` (below `version`, one method per version) when this
/// build first claims it: `fn(&self?, old: OldState, place: OldPlace?) -> R`. `OldState`
/// is the older version's state type (`DeserializeOwned`), read from the stored
/// JSON; the optional `OldPlace` is the older build's place enum (`<OldType>Place`,
/// kept in the build beside the old state type) or a `String`; `R` is
/// `(State, <Type>Place)` or `Result<(State, <Type>Place), E>` with `E: Into<BoxError>`,
/// so the target is a place of this table. The runtime commits the result as a step
/// of its own (`migrate v1 -> v2` in the run's history) with the run's new version,
/// fenced like every step; a migration that errs or panics fails the run with
/// `RunError::Migration` naming both versions, and the run keeps its stored state.
/// It may run more than once for a run, so keep it a pure function of its arguments.
/// (A `from_v1` takes no `&self`: clippy's `wrong_self_convention` expects that of a
/// `from_*` method; one that needs the workflow's fields takes `&self` under another
/// name, such as `upgrade_v1`.)
/// It fills in `Workflow::migrate` and `Definition::with_migrations`.
///
/// `#[transition]` takes `to = Place` (required), `from = Place` or `from = [A, B]`
/// (default `Start`), `priority = n` (an `i32`, default 0; ties keep declaration
/// order), and `wait` or `after = ".."`. Places are UpperCamelCase identifiers, stored
/// as snake_case; `Start` and `End` are the given first and last places.
///
/// - `wait`: the transition fires on a signal named after the method. Its payload is
///   the method's last parameter (`DeserializeOwned + JsonSchema`); without one, the
///   signal's payload is `null`.
/// - `after = "48h"`: a timer. The transition fires once the run has stood at its place
///   that long, if its guard holds, without a signal; it takes no payload. The duration
///   is `<integer><unit>` pairs, largest unit first: `"500ms"`, `"90s"`, `"1h30m"`,
///   `"2d"` (units `ms`, `s`, `m`, `h`, `d`); it is checked at compile time and must be
///   more than zero. A transition has `wait` or `after`, not both.
///
/// Besides the `Workflow` impl, it generates:
///
/// - `pub enum <Type>Place` listing every place (with `as_str`, `ALL`, `AsRef<str>`,
///   `Display` and `FromPlaceName`, which reads a place back from its stored name).
/// - `pub enum <Type>Signal` with a variant per wait transition in declaration order,
///   named in UpperCamelCase after its method (`human_review` -> `HumanReview`), a
///   tuple variant carrying the payload (`HumanReview(Review)`) or a unit variant when
///   it takes none. It implements `IntoSignal<Type>` when every payload type also
///   implements `Serialize` (a unit variant sends `null`), so
///   `runtime.signal(&wf, run_id, RefundDeskSignal::HumanReview(review))` is checked
///   at compile time; a workflow whose payloads only deserialize still compiles and is
///   signalled with `(name, payload)` pairs. It derives nothing (payloads need not be
///   `Debug` or `Clone`). A workflow without wait transitions gets an enum without
///   variants. The enum is never generic: for a generic workflow type it implements
///   `IntoSignal` for every instance (payload types cannot name the impl's generic
///   parameters: the transition table is a `static`). `Self` in a payload type means
///   the workflow type.
///
/// Mistakes in the table (a place unreachable from `Start`, one that cannot reach `End`,
/// a transition that can never fire behind an unguarded one, including wait and timer
/// transitions) are compile errors.
#[proc_macro_attribute]
pub fn workflow(args: TokenStream, item: TokenStream) -> TokenStream {
    let out = match WorkflowModel::from_syn(args.into(), item.into()) {
        Ok(model) => expand::workflow(&model),
        Err(failure) => expand::workflow_fallback(&failure),
    };
    debug("workflow", &out);
    out.into()
}

fn debug(which: &str, out: &proc_macro2::TokenStream) {
    if std::env::var_os("LOOPSTACK_MACROS_DEBUG").is_some_and(|v| !v.is_empty() && v != "0") {
        eprintln!("// #[{which}] expanded to:\n{out}\n");
    }
}
