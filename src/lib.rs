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
//! - Storage: [`store`]: the [`Store`] trait, with [`MemoryStore`] for tests,
//!   `SqliteStore` (feature `sqlite`, default) and `PostgresStore` (feature
//!   `postgres`), and the conformance suite a store of your own can run (feature
//!   `testing`); a transition's documents and state are committed together, and runs
//!   resume after a crash.
//! - Models and the agent loop: [`llm`] (messages, the Anthropic and OpenAI providers,
//!   [`llm::ScriptedModel`], `LlmGenerateText`, `LlmDelegateToolCalls`, [`llm::Agent`]).
//!
//! Features: the default ones are lean, what a small app needs: `macros` for the two
//! macros, `sqlite` for the durable store and `openai` for one HTTP provider (reqwest
//! with rustls). The rest is opt-in: `anthropic` (and `gemini`, `bedrock`) for the
//! other providers; `postgres` for the store many workers share; `cli` for [`cli`], a
//! command line for your binary (clap); `serve` for [`serve`], an HTTP API for the
//! runs with Studio (axum), `mcp` for [`mcp`], the tools of MCP servers (rmcp), and
//! `mcp-server` for [`mcp_server`], the registered workflows and agents as an MCP
//! server's tools (both servers in the `loopstack-server` crate); `metrics` and
//! `otel` for Prometheus metrics and OpenTelemetry traces.
//!
//! # A workflow
//!
//! `#[workflow]` on an `impl` block makes a [`Workflow`] whose places are Rust
//! identifiers: each `#[transition]` method is an edge (one without `from` leaves
//! `Start`), its guard a plain method named in `#[guard(..)]`. From a place,
//! transitions are tried by `priority` (highest first), then in declaration order,
//! and the first whose guard holds fires. The macro checks the table at compile time:
//! unknown guards, places unreachable from `Start` or that cannot reach `End`,
//! transitions shadowed by an unguarded one.
//!
//! ```
//! use loopstack::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Default, Serialize, Deserialize)]
//! struct Order {
//!     items: Vec<String>,
//!     shipped: bool,
//! }
//!
//! struct Shipping;
//!
//! #[workflow]
//! impl Shipping {
//!     #[transition(to = Packed)]
//!     async fn pack(&self, state: &mut Order, _cx: &mut RunContext) -> Result<()> {
//!         state.items.push("umbrella".into());
//!         Ok(())
//!     }
//!
//!     #[transition(from = Packed, to = End, priority = 10)]
//!     #[guard(has_items)]
//!     async fn ship(&self, state: &mut Order, _cx: &mut RunContext) -> Result<()> {
//!         state.shipped = true;
//!         Ok(())
//!     }
//!
//!     // Fires when `ship`'s guard does not hold.
//!     #[transition(from = Packed, to = End)]
//!     async fn give_up(&self, _state: &mut Order, _cx: &mut RunContext) -> Result<()> {
//!         Ok(())
//!     }
//!
//!     fn has_items(&self, state: &Order) -> bool {
//!         !state.items.is_empty()
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! // Every step is committed to the runtime's store: in memory here, a
//! // `SqliteStore` or `PostgresStore` keeps runs across restarts.
//! let report = Runtime::new().start(&Shipping, Order::default()).await?;
//! assert_eq!(report.outcome, RunOutcome::Completed);
//! assert!(report.state.shipped);
//! assert_eq!(report.steps, 2); // pack, ship
//!
//! // The table draws itself as a Mermaid diagram.
//! assert!(Shipping.mermaid().contains("packed --> [*]: ship [has_items] (priority 10)"));
//! # Ok(()) }
//! ```
//!
//! # Waiting for a signal
//!
//! A `wait` transition fires when a signal arrives, with the signal's payload as a
//! typed argument; until then the run parks (durably: with a SQLite or PostgreSQL
//! store it waits across restarts) and [`Runtime::signal`] wakes it. A transition
//! with `after = ".."` from the same place fires by itself when no signal came in
//! time.
//!
//! ```
//! use loopstack::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Default, Serialize, Deserialize)]
//! struct Ticket {
//!     answer: Option<String>,
//! }
//!
//! #[derive(Serialize, Deserialize, schemars::JsonSchema)]
//! struct Reply {
//!     text: String,
//! }
//!
//! struct Support;
//!
//! #[workflow]
//! impl Support {
//!     #[transition(to = Asked)]
//!     async fn ask(&self, _state: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
//!         Ok(())
//!     }
//!
//!     #[transition(from = Asked, to = End, wait)]
//!     async fn reply(&self, state: &mut Ticket, _cx: &mut RunContext, reply: Reply) -> Result<()> {
//!         state.answer = Some(reply.text);
//!         Ok(())
//!     }
//!
//!     #[transition(from = Asked, to = End, after = "24h")]
//!     async fn expire(&self, _state: &mut Ticket, _cx: &mut RunContext) -> Result<()> {
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let runtime = Runtime::new();
//! let report = runtime.start(&Support, Ticket::default()).await?;
//! assert_eq!(report.outcome, RunOutcome::Waiting { place: "asked", signals: vec!["reply"] });
//!
//! // `#[workflow]` generates `SupportSignal`, one variant per wait transition, so the
//! // signal's name and payload are checked at compile time.
//! let reply = SupportSignal::Reply(Reply { text: "Restart the router.".into() });
//! let done = runtime.signal(&Support, report.run_id, reply).await?;
//! assert_eq!(done.outcome, RunOutcome::Completed);
//! assert_eq!(done.state.answer.as_deref(), Some("Restart the router."));
//!
//! // Tools and HTTP handlers send a name and JSON instead; a payload that does not
//! // fit is an error, and the run goes on waiting.
//! let report = runtime.start(&Support, Ticket::default()).await?;
//! let bad = ("reply", serde_json::json!({"text": 3}));
//! assert!(runtime.signal(&Support, report.run_id, bad).await.is_err());
//! let good = ("reply", serde_json::json!({"text": "Try again tomorrow."}));
//! assert_eq!(runtime.signal(&Support, report.run_id, good).await?.outcome, RunOutcome::Completed);
//! # Ok(()) }
//! ```
//!
//! # Unit-testing guards and routing
//!
//! Guards are plain methods, and [`WorkflowExt::next_transition`] and
//! [`WorkflowExt::route`] say which transition fires from a place for a state without
//! running anything, so a workflow's decisions are tested in plain `#[test]`
//! functions, with no runtime and no model:
//!
//! ```
//! use loopstack::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Default, Serialize, Deserialize)]
//! struct Case {
//!     urgent: bool,
//!     answered: bool,
//!     owner: Option<String>,
//! }
//!
//! struct Desk;
//!
//! #[workflow]
//! impl Desk {
//!     #[transition(to = Open)]
//!     async fn open(&self, _state: &mut Case, _cx: &mut RunContext) -> Result<()> {
//!         Ok(())
//!     }
//!
//!     #[transition(from = Open, to = Escalated, priority = 10)]
//!     #[guard(is_urgent)]
//!     async fn escalate(&self, _state: &mut Case, _cx: &mut RunContext) -> Result<()> {
//!         Ok(())
//!     }
//!
//!     #[transition(from = Open, to = End)]
//!     #[guard(is_answered)]
//!     async fn close(&self, _state: &mut Case, _cx: &mut RunContext) -> Result<()> {
//!         Ok(())
//!     }
//!
//!     // Neither urgent nor answered: wait for the customer's next message.
//!     #[transition(from = Open, to = Open, wait)]
//!     async fn customer_wrote(&self, state: &mut Case, _cx: &mut RunContext, text: String) -> Result<()> {
//!         state.answered = !text.is_empty();
//!         Ok(())
//!     }
//!
//!     #[transition(from = Escalated, to = End)]
//!     #[guard(has_owner)]
//!     async fn hand_over(&self, _state: &mut Case, _cx: &mut RunContext) -> Result<()> {
//!         Ok(())
//!     }
//!
//!     fn is_urgent(&self, state: &Case) -> bool {
//!         state.urgent
//!     }
//!
//!     fn is_answered(&self, state: &Case) -> bool {
//!         state.answered
//!     }
//!
//!     fn has_owner(&self, state: &Case) -> bool {
//!         state.owner.is_some()
//!     }
//! }
//!
//! // In your crate: a #[test] fn in a #[cfg(test)] module.
//! fn routing() {
//!     // `#[workflow]` also generates `DeskPlace`, an enum of the places.
//!     use DeskPlace as P;
//!     let urgent = Case { urgent: true, ..Case::default() };
//!     assert!(Desk.is_urgent(&urgent));
//!     assert_eq!(Desk.next_transition(P::Open, &urgent).unwrap(), Some("escalate"));
//!     let answered = Case { answered: true, ..Case::default() };
//!     assert_eq!(Desk.next_transition(P::Open, &answered).unwrap(), Some("close"));
//!     assert_eq!(Desk.route(P::Open, &Case::default()).unwrap(), Route::Wait { signals: vec!["customer_wrote"] });
//!     // No owner yet: a dead end that names the guard, where the run would fail.
//!     assert_eq!(Desk.route(P::Escalated, &urgent).unwrap(), Route::DeadEnd { false_guards: vec!["has_owner"] });
//! }
//! # fn main() { routing() }
//! ```
//!
//! # Models and the agent loop: [`llm`]
//!
//! [`llm`] is the `loopstack-llm` crate: what its docs call `loopstack_llm::X`,
//! facade users write `loopstack::llm::X`. Its [`ScriptedModel`](llm::ScriptedModel)
//! answers from a queue of replies or computes each reply from the request, and
//! records every request, so agents are tested offline:
//!
//! ```
//! use loopstack::llm::{Agent, ChatRequest, Message, ScriptedModel};
//! use loopstack::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! // A model computed from the request, like a stub server: it answers the last message.
//! let model = ScriptedModel::from_fn(|req: &ChatRequest| {
//!     let last = req.messages.last().map(|m| m.text()).unwrap_or_default();
//!     Ok(ScriptedModel::new().text_response(format!("You said: {last}")))
//! });
//! let agent = Agent::new(model.clone(), "echo-1", ToolRegistry::new());
//! let reply = agent.ask(&Runtime::new(), "hello").await?;
//! assert_eq!(reply.text, "You said: hello");
//! assert_eq!(model.requests()[0].model, "echo-1");
//! # Ok(()) }
//! ```
//!
//! A [`Message`](llm::Message) prints as one readable line, so printing a
//! conversation is one loop; here, the one the model was sent on its second turn:
//!
//! ```
//! use loopstack::llm::{Agent, ScriptedModel};
//! use loopstack::prelude::*;
//!
//! /// Retrieve weather information.
//! #[tool]
//! async fn get_weather(/** City or location name */ location: String) -> Result<String, ToolError> {
//!     Ok(format!("Sunny in {location}"))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let model = ScriptedModel::new()
//!     .tool_call("get_weather", serde_json::json!({"location": "Oslo"}))
//!     .text("It is sunny in Oslo.");
//! let agent = Agent::new(model.clone(), "scripted", ToolRegistry::new().with(GetWeather)?);
//! agent.ask(&Runtime::new(), "How is the weather in Oslo?").await?;
//!
//! let conversation = &model.requests()[1].messages;
//! for message in conversation {
//!     println!("{message}");
//! }
//! let lines: Vec<String> = conversation.iter().map(ToString::to_string).collect();
//! assert_eq!(lines, [
//!     "user: How is the weather in Oslo?",
//!     r#"assistant: tool call get_weather({"location":"Oslo"})"#,
//!     "tool result call_0: Sunny in Oslo",
//! ]);
//! # Ok(()) }
//! ```
//!
//! A guard that reads a model turn is tested with a
//! [`GenerateResult`](llm::GenerateResult) built in place:
//!
//! ```
//! use loopstack::llm::{ContentBlock, GenerateResult, Message, Role, StopReason, ToolUse, Usage};
//!
//! let call = ToolUse::new("call_1", "get_weather", serde_json::json!({"location": "Oslo"}));
//! let message = Message { role: Role::Assistant, content: vec![ContentBlock::ToolUse(call)] };
//! let turn = GenerateResult::new(message, StopReason::ToolUse).usage(Usage::new(12, 3)).provider("scripted");
//! assert!(turn.wants_tools());
//! let answer = GenerateResult::new(Message::assistant("Sunny."), StopReason::EndTurn);
//! assert!(!answer.wants_tools());
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub use loopstack_core::*;

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use loopstack_macros::{tool, workflow};

/// Runs in one SQLite file: the durable default (feature `sqlite`); also
/// [`store::SqliteStore`].
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use loopstack_store::SqliteStore;

/// Runs in PostgreSQL, shared by many workers (feature `postgres`); also
/// [`store::PostgresStore`].
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use loopstack_store::PostgresStore;

/// Where runs are kept: the [`Store`] trait and the records it keeps, the stores
/// ([`MemoryStore`]; `SqliteStore`, feature `sqlite`, default; `PostgresStore`,
/// feature `postgres`) and, with feature `testing`, the conformance suite a store
/// of your own runs in its tests (`store::testing`).
///
/// ```
/// use loopstack::store::{RunQuery, SqliteStore, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), loopstack::StoreError> {
/// let store = SqliteStore::memory().await?;
/// assert!(store.list_runs(&RunQuery::new()).await?.runs.is_empty());
/// let _runtime = loopstack::Runtime::with_store(store);
/// # Ok(()) }
/// ```
pub mod store {
    #[doc(inline)]
    pub use loopstack_core::store::*;

    /// Runs in one SQLite file: the durable default (feature `sqlite`).
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    #[doc(inline)]
    pub use loopstack_store::SqliteStore;

    /// Runs in PostgreSQL, shared by many workers (feature `postgres`).
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    #[doc(inline)]
    pub use loopstack_store::PostgresStore;

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "sqlite", feature = "postgres"))))]
    pub use loopstack_store::DEFAULT_LEASE;

    /// The store conformance suite (feature `testing`): `loopstack_core::testing`.
    #[cfg(feature = "testing")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub use loopstack_core::testing;
}

/// The LLM layer: messages, providers, the scripted model, tool delegation and the
/// agent loop; the `loopstack-llm` crate (what its docs call `loopstack_llm::X` is
/// `loopstack::llm::X` here).
pub mod llm {
    #[doc(inline)]
    pub use loopstack_llm::*;
}

/// Evals: an agent on a dataset of cases, each a run in the store, scored and
/// reported; `loopstack_llm::eval`.
pub mod eval {
    #[doc(inline)]
    pub use loopstack_llm::eval::*;
}

/// The MCP client (feature `mcp`): the tools of Model Context Protocol servers, over
/// stdio or streamable HTTP, as tools of a [`ToolRegistry`]; `loopstack_llm::mcp`.
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp {
    #[doc(inline)]
    pub use loopstack_llm::mcp::*;
}

#[cfg(feature = "cli")]
#[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
pub mod cli;

#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;

#[cfg(feature = "serve")]
#[cfg_attr(docsrs, doc(cfg(feature = "serve")))]
#[doc(inline)]
pub use loopstack_server::serve;

#[cfg(feature = "mcp-server")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp-server")))]
#[doc(inline)]
pub use loopstack_server::mcp_server;

#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod otel;

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

/// The README's examples, compiled and run as doc tests (`.ci/readme/run` also builds
/// them in a fresh crate with the README's dependency block).
#[cfg(all(doctest, feature = "macros"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// The book (docs/, an mdBook): each chapter's examples compiled and run as doc
// tests, one struct per chapter, behind the features its examples use. CI runs
// them with every feature (`cargo test --doc -p loopstack --all-features`).

/// docs/src/introduction.md.
#[cfg(doctest)]
#[doc = include_str!("../docs/src/introduction.md")]
struct BookIntroductionDoctests;

/// docs/src/tutorial.md: the weather agent, step by step.
#[cfg(all(doctest, feature = "macros", feature = "sqlite", feature = "openai"))]
#[doc = include_str!("../docs/src/tutorial.md")]
struct BookTutorialDoctests;

/// docs/src/tools.md.
#[cfg(all(doctest, feature = "macros"))]
#[doc = include_str!("../docs/src/tools.md")]
struct BookToolsDoctests;

/// docs/src/workflows.md.
#[cfg(all(doctest, feature = "macros"))]
#[doc = include_str!("../docs/src/workflows.md")]
struct BookWorkflowsDoctests;

/// docs/src/testing.md.
#[cfg(all(doctest, feature = "macros"))]
#[doc = include_str!("../docs/src/testing.md")]
struct BookTestingDoctests;

/// docs/src/runs.md: stores, workers, versions, schedules, live events.
#[cfg(all(doctest, feature = "macros", feature = "sqlite"))]
#[doc = include_str!("../docs/src/runs.md")]
struct BookRunsDoctests;

/// docs/src/agent.md.
#[cfg(all(doctest, feature = "macros"))]
#[doc = include_str!("../docs/src/agent.md")]
struct BookAgentDoctests;

/// docs/src/approvals.md; its last example is a command line.
#[cfg(all(doctest, feature = "macros", feature = "cli"))]
#[doc = include_str!("../docs/src/approvals.md")]
struct BookApprovalsDoctests;

/// docs/src/agents-together.md.
#[cfg(all(doctest, feature = "macros"))]
#[doc = include_str!("../docs/src/agents-together.md")]
struct BookAgentsTogetherDoctests;

/// docs/src/mcp.md: the MCP client, and command lines that use or serve it.
#[cfg(all(
    doctest,
    feature = "macros",
    feature = "mcp",
    feature = "mcp-oauth",
    feature = "cli",
    feature = "anthropic",
    feature = "openai"
))]
#[doc = include_str!("../docs/src/mcp.md")]
struct BookMcpDoctests;

/// docs/src/frontends.md: serving agents to frontends over AG-UI.
#[cfg(all(doctest, feature = "macros", feature = "cli", feature = "serve"))]
#[doc = include_str!("../docs/src/frontends.md")]
struct BookFrontendsDoctests;

/// docs/src/a2a.md.
#[cfg(all(doctest, feature = "macros", feature = "a2a"))]
#[doc = include_str!("../docs/src/a2a.md")]
struct BookA2aDoctests;

/// docs/src/providers.md; its examples name every provider.
#[cfg(all(doctest, feature = "anthropic", feature = "openai", feature = "gemini", feature = "bedrock"))]
#[doc = include_str!("../docs/src/providers.md")]
struct BookProvidersDoctests;

/// docs/src/operating.md: the command line and the OpenTelemetry export.
#[cfg(all(doctest, feature = "macros", feature = "cli", feature = "otel"))]
#[doc = include_str!("../docs/src/operating.md")]
struct BookOperatingDoctests;

/// docs/src/deploy.md.
#[cfg(doctest)]
#[doc = include_str!("../docs/src/deploy.md")]
struct BookDeployDoctests;

/// docs/src/evals.md: evals, replay and forks.
#[cfg(all(doctest, feature = "macros"))]
#[doc = include_str!("../docs/src/evals.md")]
struct BookEvalsDoctests;

/// docs/src/features.md.
#[cfg(doctest)]
#[doc = include_str!("../docs/src/features.md")]
struct BookFeaturesDoctests;

/// docs/src/settings.md.
#[cfg(doctest)]
#[doc = include_str!("../docs/src/settings.md")]
struct BookSettingsDoctests;

/// docs/benchmarks.md, the book's chapter on what the framework costs
/// (docs/src/benchmarks.md includes it).
#[cfg(doctest)]
#[doc = include_str!("../docs/benchmarks.md")]
struct BookBenchmarksDoctests;
