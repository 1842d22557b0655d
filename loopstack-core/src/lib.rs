//! The core of [loopstack](https://docs.rs/loopstack): the [`Tool`] and [`Workflow`]
//! traits, the [`ToolRegistry`], documents and the [`Store`], and the [`Runtime`] that
//! drives a run from `start` to `end`.
//!
//! Users depend on the `loopstack` crate, which re-exports everything here and adds the
//! `#[tool]` and `#[workflow]` macros. This crate is for code that implements the
//! traits by hand, such as stores and providers.
//!
//! ```
//! use loopstack_core::*;
//! use futures::future::BoxFuture;
//!
//! /// Counts to three, one transition per number.
//! struct Counter;
//!
//! static DEFINITION: Definition = Definition::new(
//!     "counter",
//!     &[START, "counting", END],
//!     &[
//!         TransitionDef::new("begin", &[START], "counting"),
//!         TransitionDef::new("tick", &["counting"], "counting").guard("below_three"),
//!         TransitionDef::new("finish", &["counting"], END),
//!     ],
//! );
//!
//! impl Workflow for Counter {
//!     type State = u32;
//!     type Input = u32;
//!     fn definition(&self) -> &'static Definition { &DEFINITION }
//!     fn init(&self, input: u32) -> u32 { input }
//!     fn guard(&self, transition: usize, state: &u32) -> bool {
//!         transition != 1 || *state < 3
//!     }
//!     fn transition<'a>(&'a self, t: usize, state: &'a mut u32, _cx: &'a mut RunContext, _: Option<serde_json::Value>)
//!         -> BoxFuture<'a, Result<(), TransitionError>> {
//!         Box::pin(async move { if t == 1 { *state += 1 } Ok(()) })
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let report = Runtime::new().start(&Counter, 0).await?;
//! assert_eq!(report.outcome, RunOutcome::Completed);
//! assert_eq!(report.state, 3);
//! assert_eq!(report.steps, 5); // begin, tick x3, finish
//! # Ok::<(), RunError>(()) }).unwrap();
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod children;
mod context;
mod document;
mod error;
pub mod events;
#[doc(hidden)]
pub use loopstack_model::fnv;
pub mod fork;
pub use loopstack_model::image;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
mod registry;
mod runtime;
pub mod schedule;
pub mod schema;
pub mod secrets;
pub mod store;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod tool;
mod trace;
mod workflow;

/// The schemars loopstack builds tool schemas with; derive `JsonSchema` from this version.
pub use ::schemars;
/// The serde loopstack uses.
pub use ::serde;
/// The serde_json loopstack uses.
pub use ::serde_json;
pub use children::{ChildEnded, ChildError, ChildOptions, DEFAULT_CHILD_TIMEOUT};
pub use context::{Emitter, RunContext, SHARED_KEPT};
pub use document::{Document, DocumentType, Metadata, SaveOptions};
pub use error::{BoxError, Result, RunError, StoreError};
pub use events::{EventKind, LogEvents, RunEvent, RunEvents};
pub use fork::{ForkEdits, ForkError, ForkRecord, ForkSettings, MessageEdit};
pub use futures::future::BoxFuture;
// Shown as a re-export: inlined here, its docs' links to the rest of
// loopstack-model (`ChatRequest`) had no page to point to.
#[doc(no_inline)]
pub use loopstack_model::ToolDefinition;
pub use registry::{RegistryError, ToolRegistry, ToolSpec};
pub use runtime::{
    DEFAULT_CHILD_CONCURRENCY, DEFAULT_DRAIN_TIMEOUT, DEFAULT_MAX_STEPS, Drive, RunOutcome, RunReport, Runtime,
    SCHEDULE_CHECK, Worker, cancellable, panic_message,
};
pub use schedule::{Missed, Overlap, Schedule, ScheduleError, ScheduleRecord};
pub use store::{
    Checkpoint, CheckpointRecord, Claim, Fence, ForkStep, Inbox, Labels, Lease, MemoryStore, Migrated, NewRun, Park,
    RunCount, RunId, RunPage, RunQuery, RunRecord, RunStatus, RunSummary, SignalReceipt, SignalRecord, SignalStatus,
    StepRecord, Store, Takeover, Timestamp, WorkflowVersions,
};
pub use tokio_util::sync::CancellationToken;
pub use tool::{
    Effect, InputAnswer, InputRequest, InputResponse, IntoToolOutput, Json, Tool, ToolContent, ToolContext, ToolError,
    ToolErrorKind, ToolOptions, ToolOutput, is_valid_tool_name, parse_tool_arguments, tool_input_schema,
};
pub use workflow::{
    Definition, END, FromPlaceName, IntoMigration, IntoSignal, PayloadCheck, Route, START, TransitionDef,
    TransitionError, UnknownPlace, Workflow, WorkflowExt, input_schema,
};

/// What generated code reaches for. Not public API: it may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use ::schemars;
    pub use ::serde;
    pub use ::serde_json;
    pub use async_trait::async_trait;
    pub use futures::future::BoxFuture;
    pub use std::boxed::Box;
    pub use std::option::Option::{self, None, Some};
    pub use std::result::Result::{self, Err, Ok};
    pub use std::string::String;
    pub use tracing;

    pub use crate::document::{CONVERSATION_TAG, MESSAGE_DOCUMENT};
    pub use crate::*;

    use std::cell::Cell;

    /// Holds a handler's value for the autoref dispatch below.
    pub struct OutputSlot<T>(Cell<Option<T>>);

    impl<T> OutputSlot<T> {
        pub fn new(value: T) -> Self {
            Self(Cell::new(Some(value)))
        }
        fn take(&self) -> T {
            self.0.take().expect("a tool output is converted once")
        }
    }

    /// Picked first: types with their own [`IntoToolOutput`] (text, `Json`, `Value`).
    pub trait ViaIntoToolOutput {
        fn __loopstack_output(&self) -> ToolOutput;
    }
    impl<T: IntoToolOutput> ViaIntoToolOutput for &OutputSlot<T> {
        fn __loopstack_output(&self) -> ToolOutput {
            self.take().into_tool_output()
        }
    }

    /// Picked otherwise: any `Serialize` type, sent as JSON.
    pub trait ViaSerialize {
        fn __loopstack_output(&self) -> ToolOutput;
    }
    impl<T: serde::Serialize> ViaSerialize for OutputSlot<T> {
        fn __loopstack_output(&self) -> ToolOutput {
            Json(self.take()).into_tool_output()
        }
    }

    /// Converts a handler's error into a [`ToolError`].
    pub fn tool_error<E: Into<ToolError>>(err: E) -> ToolError {
        err.into()
    }

    /// Converts a transition method's error.
    pub fn transition_error<E: Into<BoxError>>(err: E) -> TransitionError {
        TransitionError::Failed(err.into())
    }

    /// Deserializes a wait transition's payload.
    pub fn signal_payload<T: serde::de::DeserializeOwned>(
        payload: Option<serde_json::Value>,
    ) -> Result<T, TransitionError> {
        let payload = payload.unwrap_or(serde_json::Value::Null);
        serde_path_to_error::deserialize(payload).map_err(|e| TransitionError::InvalidPayload(e.to_string()))
    }

    /// Reads the stored state of a run of an older version as that version's state type.
    pub fn migration_state<T: serde::de::DeserializeOwned>(json: &str) -> Result<T, BoxError> {
        let mut de = serde_json::Deserializer::from_str(json);
        serde_path_to_error::deserialize(&mut de)
            .map_err(|e| format!("the stored state does not read as `{}`: {e}", std::any::type_name::<T>()).into())
    }

    /// Reads the stored place of a run of an older version as that version's place type.
    pub fn migration_place<P: FromPlaceName>(name: &str) -> Result<P, BoxError> {
        P::from_place_name(name).ok_or_else(|| {
            format!("the stored place `{name}` is not a place of `{}`", std::any::type_name::<P>()).into()
        })
    }

    /// What a migration method returned, as its new state and place.
    pub fn migrated<S, P, T: IntoMigration<S, P>>(returned: T) -> Result<(S, P), BoxError> {
        returned.into_migration()
    }

    /// Whether a payload reads as `T`, and why not.
    pub fn payload_check<T: serde::de::DeserializeOwned>(payload: &serde_json::Value) -> Result<(), String> {
        serde_path_to_error::deserialize::<_, T>(payload).map(drop).map_err(|e| e.to_string())
    }

    /// The JSON Schema of a wait transition's payload: the type's own, with its
    /// objects closed as a tool's arguments are. Unlike a tool's arguments, a
    /// payload need not be an object: a `serde_json::Value` takes any JSON (`{}`),
    /// a `String` a string.
    pub fn payload_schema<T: schemars::JsonSchema>() -> serde_json::Value {
        let mut schema = crate::workflow::input_schema::<T>();
        crate::tool::close_objects(&mut schema);
        schema
    }

    /// Stands for a workflow's input type, to find its JSON Schema when it has one:
    /// `(&&SchemaProbe::<T>::new()).__loopstack_schema()` picks [`ViaJsonSchema`]
    /// for a `JsonSchema` type and [`ViaNoSchema`] for any other.
    pub struct SchemaProbe<T>(core::marker::PhantomData<fn() -> T>);

    impl<T> SchemaProbe<T> {
        #[allow(clippy::new_without_default)]
        pub fn new() -> Self {
            Self(core::marker::PhantomData)
        }
    }

    /// Picked first: types with a JSON Schema.
    pub trait ViaJsonSchema {
        fn __loopstack_schema(&self) -> Option<serde_json::Value>;
    }
    impl<T: schemars::JsonSchema> ViaJsonSchema for &SchemaProbe<T> {
        fn __loopstack_schema(&self) -> Option<serde_json::Value> {
            Some(crate::workflow::input_schema::<T>())
        }
    }

    /// Picked otherwise: no schema.
    pub trait ViaNoSchema {
        fn __loopstack_schema(&self) -> Option<serde_json::Value>;
    }
    impl<T> ViaNoSchema for SchemaProbe<T> {
        fn __loopstack_schema(&self) -> Option<serde_json::Value> {
            None
        }
    }
}
