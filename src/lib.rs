//! loopstack: a state-machine agent framework.
//!
//! (crate docs: see README; filled in by the docs pass)

pub use loopstack_core::*;

#[cfg(feature = "macros")]
pub use loopstack_macros::{tool, workflow};

/// LLM layer: messages, providers, the scripted model, tool delegation and the agent loop.
pub use loopstack_llm as llm;

/// The names most code needs: `use loopstack::prelude::*;`.
pub mod prelude {
    pub use loopstack_core::{
        BoxError, Document, DocumentType, Json, Result, Route, RunContext, RunError, RunId, RunOutcome, RunReport,
        Runtime, SaveOptions, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, Workflow, WorkflowExt,
    };
    #[cfg(feature = "macros")]
    pub use loopstack_macros::{tool, workflow};
}

#[doc(hidden)]
pub use loopstack_core::__private;
