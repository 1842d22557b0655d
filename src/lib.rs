//! loopstack: a state-machine agent framework. Agents are annotated Rust types:
//! [`#[tool]`](tool) makes a tool a model can call, [`#[workflow]`](workflow) makes a
//! checked state machine whose transitions are async methods, and the [`Runtime`]
//! drives a run from `start` to `end`, committing every step to a [`Store`].
//!
//! ```
//! use loopstack::llm::{Agent, ScriptedModel};
//! use loopstack::prelude::*;
//!
//! /// Retrieve weather information.
//! #[tool]
//! async fn get_weather(/** City or location name */ location: String) -> Result<String, ToolError> {
//!     Ok(format!("Mostly sunny in {location}, 14C."))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let model = ScriptedModel::new() // offline; Anthropic and OpenAI live in `llm`
//!     .tool_call("get_weather", serde_json::json!({"location": "Berlin"}))
//!     .text("It is mostly sunny in Berlin.");
//! let agent = Agent::new(model, "scripted", ToolRegistry::new().with(GetWeather)?);
//! let reply = agent.ask(&Runtime::new(), "How is the weather in Berlin?").await?;
//! assert_eq!(reply.text, "It is mostly sunny in Berlin.");
//! # Ok(()) }
//! ```
//!
//! - Tools: [`Tool`], [`ToolRegistry`], [`ToolContext`], [`ToolOutput`], [`ToolError`].
//! - Workflows: [`Workflow`], [`Definition`], [`WorkflowExt`] (routing without running,
//!   Mermaid diagrams), [`RunContext`] (documents), [`Runtime`], [`RunError`].
//! - Storage: [`Store`], with [`MemoryStore`] for tests, `SqliteStore` (feature
//!   `sqlite`, default) and `PostgresStore` (feature `postgres`); a transition's
//!   documents and state are committed together, and runs resume after a crash.
//! - Models and the agent loop: [`llm`] (messages, the Anthropic and OpenAI providers,
//!   [`llm::ScriptedModel`], `LlmGenerateText`, `LlmDelegateToolCalls`, [`llm::Agent`]).
//!
//! Features: `macros` (default) for the two macros; `anthropic` and `openai` (default)
//! for the HTTP providers, which pull in reqwest with rustls; `sqlite` (default) and
//! `postgres` for the durable stores.

pub use loopstack_core::*;

#[cfg(feature = "macros")]
pub use loopstack_macros::{tool, workflow};

/// Runs in one SQLite file: the durable default (feature `sqlite`).
#[cfg(feature = "sqlite")]
pub use loopstack_store::SqliteStore;

/// Runs in PostgreSQL, shared by many workers (feature `postgres`).
#[cfg(feature = "postgres")]
pub use loopstack_store::PostgresStore;

/// The LLM layer: messages, providers, the scripted model, tool delegation and the
/// agent loop.
pub use loopstack_llm as llm;

/// The names most code needs: `use loopstack::prelude::*;`.
///
/// It brings [`Result`], whose error defaults to [`BoxError`], into
/// scope in place of the standard one; `Result<T, E>` keeps working as usual.
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

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
