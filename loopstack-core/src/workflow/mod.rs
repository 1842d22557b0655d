//! Workflows: state machines whose transitions are async methods.

use std::fmt::Write as _;
use std::sync::OnceLock;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::RunContext;
use crate::error::BoxError;

mod definition;

pub use definition::*;

/// The initial place of every workflow.
pub const START: &str = loopstack_graph::START;
/// The terminal place of every workflow.
pub const END: &str = loopstack_graph::END;

/// A state machine driven by a [`Runtime`](crate::Runtime).
///
/// `#[workflow]` writes this impl from an `impl` block whose methods carry
/// `#[transition(..)]` and `#[guard(..)]`; writing it by hand is equivalent. The
/// generated transition table is [`Workflow::definition`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a loopstack workflow",
    note = "annotate its `impl` block with `#[workflow]`, or implement `Workflow` by hand"
)]
pub trait Workflow: Send + Sync + 'static {
    /// The run's state: serialized after every transition, so a run can be resumed.
    type State: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What a run is started with; [`Workflow::init`] turns it into the first state.
    type Input: Send + 'static;

    /// The transition table.
    fn definition(&self) -> &'static Definition;

    /// The state a run starts with.
    fn init(&self, input: Self::Input) -> Self::State;

    /// Saves the documents a run starts with, once, when it is created: what it
    /// saves in `cx` is stored with the run's first checkpoint (step 0, at `start`),
    /// in the transaction that creates the run, and `state` (as [`Workflow::init`]
    /// made it) is checkpointed as this leaves it. No step is spent on it, so a
    /// workflow whose first transition only saved its input as documents needs none.
    /// The agent saves its prompt here, as its conversation's first message.
    ///
    /// It runs before the run exists: `cx` holds no documents yet, and what it
    /// saves has step 0. An error here creates no run. `#[workflow(on_create = path)]`
    /// fills it in; by default nothing is saved.
    fn on_create(&self, state: &mut Self::State, cx: &mut RunContext) -> Result<(), BoxError> {
        let _ = (state, cx);
        Ok(())
    }

    /// Evaluates the guard of transition `transition` (an index into
    /// [`Definition::transitions`]); a transition without a guard returns `true`.
    fn guard(&self, transition: usize, state: &Self::State) -> bool;

    /// The delay of timer transition `transition` (an index into
    /// [`Definition::transitions`]) for a run waiting with `state`: how long the run
    /// stands at the place before it fires. `None` for a transition that is not a
    /// timer.
    ///
    /// The runtime asks only when a run waits at a place with timers whose guards
    /// hold, each time a drive reaches that wait, and counts from when the run
    /// reached the place. The earliest wake time is stored with the parked run, and
    /// a worker wakes the run then. A delay that changes while the run is parked (a
    /// new configuration) is read at that wake: a longer one parks the run again
    /// until it is due, a shorter one fires at the stored wake time, not before.
    ///
    /// The default gives the delay fixed in the table ([`TransitionDef::after`]). A
    /// timer whose delay comes from the workflow's configuration or the run's state
    /// ([`TransitionDef::after_fn`]) needs this method: `#[workflow]` writes it for
    /// `after = Self::method`, and a hand-written workflow without it fails its run
    /// with [`RunError::Mismatch`](crate::RunError::Mismatch) when the run would wait
    /// for it.
    ///
    /// ```
    /// # use loopstack_core::*;
    /// # use std::time::Duration;
    /// /// Escalates after the time its environment sets, unless acknowledged.
    /// struct Incidents {
    ///     escalation: Duration,
    /// }
    ///
    /// static TABLE: Definition = Definition::new(
    ///     "incidents",
    ///     &[START, "open", END],
    ///     &[
    ///         TransitionDef::new("open", &[START], "open"),
    ///         TransitionDef::new("acknowledge", &["open"], END).wait(|| serde_json::json!({"type": "null"})),
    ///         TransitionDef::new("escalate", &["open"], END).after_fn("escalation"),
    ///     ],
    /// );
    ///
    /// impl Workflow for Incidents {
    ///     // ..
    /// #   type State = ();
    /// #   type Input = ();
    /// #   fn definition(&self) -> &'static Definition { &TABLE }
    /// #   fn init(&self, (): ()) {}
    /// #   fn guard(&self, _: usize, (): &()) -> bool { true }
    /// #   fn transition<'a>(
    /// #       &'a self, _: usize, _: &'a mut (), _: &'a mut RunContext, _: Option<serde_json::Value>,
    /// #   ) -> futures::future::BoxFuture<'a, Result<(), TransitionError>> {
    /// #       Box::pin(async { Ok(()) })
    /// #   }
    ///     fn timer(&self, transition: usize, (): &()) -> Option<Duration> {
    ///         match transition {
    ///             2 => Some(self.escalation),
    ///             _ => None,
    ///         }
    ///     }
    /// }
    ///
    /// let staging = Incidents { escalation: Duration::from_secs(300) };
    /// assert_eq!(staging.timers("open", &()).unwrap(), [(2, Duration::from_secs(300))]);
    /// ```
    fn timer(&self, transition: usize, state: &Self::State) -> Option<std::time::Duration> {
        let _ = state;
        self.definition().transitions().get(transition).and_then(|t| t.after)
    }

    /// Runs transition `transition`. `payload` is the signal's payload for a wait
    /// transition and `None` otherwise.
    fn transition<'a>(
        &'a self,
        transition: usize,
        state: &'a mut Self::State,
        cx: &'a mut RunContext,
        payload: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>>;

    /// The JSON Schema of [`Workflow::Input`], for forms that start runs (Studio's,
    /// say). `#[workflow]` fills it in when the input type implements
    /// `schemars::JsonSchema`; `None` otherwise, and by default.
    fn input_schema(&self) -> Option<Value> {
        None
    }

    /// Converts a run stored under an older version of this workflow (one listed in
    /// [`Definition::migrates_from`]) to this one: its state (as the JSON the older
    /// build stored) and its place become a state and a place of this table.
    /// `#[workflow]` writes it from the impl's `#[migrate(from = N)]` methods; the
    /// runtime calls it when it claims such a run, and commits the result as a step
    /// of its own before the run goes on. It may be called more than once for one
    /// run (a resume checks the run before it claims it, and a migration whose
    /// commit is refused runs again at the next claim): keep it a pure function of
    /// its arguments. The default migrates nothing.
    fn migrate(&self, from: u32, place: &str, state: &str) -> Result<(Self::State, &'static str), BoxError> {
        let _ = (place, state);
        Err(format!("version {from} has no migration").into())
    }

    /// Checks the system prompt and model a fork asks for
    /// ([`ForkEdits`](crate::ForkEdits)) before anything is stored: the agent refuses
    /// a provider it has no model for. `#[workflow(fork_check = path)]` fills it in;
    /// accepted by default.
    fn check_fork(&self, settings: &crate::ForkSettings) -> Result<(), crate::ForkError> {
        let _ = settings;
        Ok(())
    }
}

/// A place of an older version read back from its stored name, for the place
/// parameter of a `#[migrate(from = N)]` method: the older workflow type's place
/// enum (`<Type>Place`, which `#[workflow]` makes implement it), or `String` for any
/// name.
#[diagnostic::on_unimplemented(
    message = "a migration's place parameter cannot be `{Self}`",
    note = "take the older workflow's place enum (`<OldType>Place`) or a `String`"
)]
pub trait FromPlaceName: Sized {
    /// The place named `name`, or `None` when there is no such place.
    fn from_place_name(name: &str) -> Option<Self>;
}

impl FromPlaceName for String {
    fn from_place_name(name: &str) -> Option<Self> {
        Some(name.to_owned())
    }
}

/// What a `#[migrate(from = N)]` method returns: the new state and a place of the
/// new table, as `(State, <Type>Place)`, or `Result<(State, <Type>Place), E>` for a
/// migration that can fail (the run then fails with an error naming both versions,
/// and keeps its stored state).
#[diagnostic::on_unimplemented(
    message = "a migration returns `({S}, {P})` or `Result<({S}, {P}), E>`, not `{Self}`",
    note = "the place is one of the new table's, as its place enum; `E: Into<BoxError>`"
)]
pub trait IntoMigration<S, P> {
    /// The state and place, or why the migration failed.
    fn into_migration(self) -> Result<(S, P), BoxError>;
}

impl<S, P> IntoMigration<S, P> for (S, P) {
    fn into_migration(self) -> Result<(S, P), BoxError> {
        Ok(self)
    }
}

impl<S, P, E: Into<BoxError>> IntoMigration<S, P> for Result<(S, P), E> {
    fn into_migration(self) -> Result<(S, P), BoxError> {
        self.map_err(Into::into)
    }
}

/// The JSON Schema of a workflow's input type, inlined (no `$defs`), without the
/// title and `$schema` keys.
pub fn input_schema<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(map) = &mut value {
        map.remove("title");
        map.remove("$schema");
    }
    value
}

/// A signal for a run of workflow `W`: the name of a wait transition and its
/// payload. `#[workflow]` writes an enum `<Type>Signal` with one variant per wait
/// transition that implements it, so `runtime.signal(&wf, id, DeskSignal::Review(r))`
/// is checked at compile time; `(name, payload)` pairs implement it for every
/// workflow, for tools and HTTP callers.
pub trait IntoSignal<W: ?Sized> {
    /// The wait transition's name and the payload as JSON.
    fn into_signal(self) -> Result<(std::borrow::Cow<'static, str>, Value), serde_json::Error>;
}

impl<W: ?Sized, N: Into<String>> IntoSignal<W> for (N, Value) {
    fn into_signal(self) -> Result<(std::borrow::Cow<'static, str>, Value), serde_json::Error> {
        Ok((std::borrow::Cow::Owned(self.0.into()), self.1))
    }
}

/// Why a transition method did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// The method returned an error.
    #[error(transparent)]
    Failed(BoxError),
    /// A wait transition's payload did not deserialize; nothing ran.
    #[error("invalid payload: {0}")]
    InvalidPayload(String),
}

impl TransitionError {
    /// Wraps an error a transition method returned.
    pub fn failed(err: impl Into<BoxError>) -> Self {
        Self::Failed(err.into())
    }
}

/// Helpers on every workflow, for tests and tooling.
pub trait WorkflowExt: Workflow {
    /// Decides, without running anything, what happens at `place` for `state`.
    ///
    /// ```
    /// # use loopstack_core::*;
    /// # fn demo<W: Workflow>(wf: &W, state: &W::State) -> Result<(), UnknownPlace> {
    /// match wf.route("prompt_executed", state)? {
    ///     Route::Fire { transition, .. } => println!("{} fires", transition.name),
    ///     other => println!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    fn route(&self, place: impl AsRef<str>, state: &Self::State) -> Result<Route, UnknownPlace> {
        self.definition().route(place.as_ref(), |i| self.guard(i, state))
    }

    /// The name of the transition that fires from `place` for `state`, if one does.
    fn next_transition(
        &self,
        place: impl AsRef<str>,
        state: &Self::State,
    ) -> Result<Option<&'static str>, UnknownPlace> {
        Ok(self.route(place, state)?.transition_name())
    }

    /// The timer transitions enabled at `place` for `state`, with their delays
    /// ([`Workflow::timer`]), in the order they are tried: what a run waiting there
    /// counts down.
    fn timers(
        &self,
        place: impl AsRef<str>,
        state: &Self::State,
    ) -> Result<Vec<(usize, std::time::Duration)>, UnknownPlace> {
        self.definition().timers_with(place.as_ref(), |i| self.guard(i, state), |i| self.timer(i, state))
    }

    /// A Mermaid `stateDiagram-v2` of the workflow.
    fn mermaid(&self) -> String {
        self.definition().mermaid()
    }
}

impl<W: Workflow + ?Sized> WorkflowExt for W {}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        Value::Null
    }

    #[test]
    fn a_tables_hash_never_changes_across_releases() {
        // Stores keep it with each run: a new value for the same table would make
        // every waiting run look changed. Computed by hand from the documented feed.
        static DEF: Definition = Definition::new(
            "counter",
            &[START, "counting", END],
            &[
                TransitionDef::new("begin", &[START], "counting"),
                TransitionDef::new("tick", &["counting"], "counting").guard("below_three").priority(7),
                TransitionDef::new("finish", &["counting"], END),
            ],
        );
        assert_eq!(DEF.hash(), "9e3d699bd9d9ab19");
    }

    #[test]
    fn a_computed_timer_is_part_of_the_tables_hash() {
        // Its method is what the table says of its delay: another method is another table.
        static BY_CONFIG: Definition = Definition::new(
            "timed",
            &[START, "a", END],
            &[TransitionDef::new("go", &[START], "a"), TransitionDef::new("expire", &["a"], END).after_fn("config")],
        );
        static BY_STATE: Definition = Definition::new(
            "timed",
            &[START, "a", END],
            &[TransitionDef::new("go", &[START], "a"), TransitionDef::new("expire", &["a"], END).after_fn("state")],
        );
        static FIXED: Definition = Definition::new(
            "timed",
            &[START, "a", END],
            &[
                TransitionDef::new("go", &[START], "a"),
                TransitionDef::new("expire", &["a"], END).after(std::time::Duration::from_secs(1)),
            ],
        );
        assert_ne!(BY_CONFIG.hash(), BY_STATE.hash());
        assert_ne!(BY_CONFIG.hash(), FIXED.hash());
        // A computed timer makes its place a wait, as a fixed one does.
        assert_eq!(BY_CONFIG.check(), Ok(()));
        assert_eq!(BY_CONFIG.route("a", |_| true), Ok(Route::Wait { signals: vec![] }));
    }

    #[test]
    fn check_reports_wait_and_timer_transitions_an_unguarded_one_shadows() {
        // The same rule as `#[workflow]`'s: `respond` fires whenever the run is at `a`,
        // so the run never waits there for `approve`'s signal or `expire`'s delay.
        static DEF: Definition = Definition::new(
            "shadowed_waits",
            &[START, "a", END],
            &[
                TransitionDef::new("go", &[START], "a"),
                TransitionDef::new("respond", &["a"], END),
                TransitionDef::new("approve", &["a"], END).priority(5).wait(schema),
                TransitionDef::new("expire", &["a"], END).after(std::time::Duration::from_secs(1)),
            ],
        );
        assert_eq!(
            DEF.check(),
            Err(vec![
                "wait transition `approve` from `a` can never fire: `respond` has no guard and fires without \
                 waiting for a signal (neither can `expire`)"
                    .to_owned(),
            ])
        );
        // Unguarded waiting transitions shadow nothing.
        static OK: Definition = Definition::new(
            "waits",
            &[START, "a", END],
            &[
                TransitionDef::new("go", &[START], "a"),
                TransitionDef::new("approve", &["a"], END).priority(5).wait(schema),
                TransitionDef::new("expire", &["a"], END).after(std::time::Duration::from_secs(1)),
                TransitionDef::new("respond", &["a"], END).guard("ready"),
            ],
        );
        assert_eq!(OK.check(), Ok(()));
    }

    #[test]
    fn check_names_structural_mistakes() {
        static NO_END: Definition =
            Definition::new("no_end", &[START, "a"], &[TransitionDef::new("go", &[START], "b")]);
        assert_eq!(
            NO_END.check(),
            Err(vec!["the places do not list `end`".to_owned(), "transition `go` names unknown place `b`".to_owned()])
        );
        static NO_WAY_IN: Definition =
            Definition::new("no_way_in", &[START, "a", END], &[TransitionDef::new("go", &[START], "a")]);
        assert_eq!(NO_WAY_IN.check(), Err(vec!["no transition reaches `end`".to_owned()]));
    }

    #[test]
    fn route_tries_the_shared_order() {
        static DEF: Definition = Definition::new(
            "order",
            &[START, END],
            &[
                TransitionDef::new("first", &[START], END).guard("g"),
                TransitionDef::new("high", &[START], END).priority(3).guard("g"),
                TransitionDef::new("second", &[START], END).guard("g"),
            ],
        );
        let tried: Vec<&str> = DEF.leaving(START).unwrap().map(|(_, t)| t.name).collect();
        assert_eq!(tried, ["high", "first", "second"]);
        let mut guards = Vec::new();
        let route = DEF
            .route(START, |i| {
                guards.push(i);
                i == 2
            })
            .unwrap();
        assert_eq!(route.transition_name(), Some("second"));
        assert_eq!(guards, [1, 0, 2]);
    }
}
