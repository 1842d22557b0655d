//! Prometheus metrics (feature `metrics`, on with `serve`): runs by status and
//! workflow, the runnable queue, claims, steps, model calls with their tokens and
//! cost, tool calls, and schedule lag.
//!
//! A runtime records them once it is given a [`Metrics`]
//! ([`Runtime::with_metrics`](crate::Runtime::with_metrics)); one given none pays
//! nothing for them. [`Metrics::render`] writes them in Prometheus' text format,
//! with the run counts and schedule lag read from the store at that moment. The
//! command line gives its runtime one for `serve`, which answers `GET /metrics`
//! ([`serve`](crate::serve)), and for `worker --metrics-addr HOST:PORT`, which
//! serves `/metrics`, `/healthz` and `/readyz` on a port of its own
//! ([`serve::metrics_router`](crate::serve::metrics_router)).
//!
//! ```
//! use loopstack::llm::{Agent, ScriptedModel};
//! use loopstack::metrics::Metrics;
//! use loopstack::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let metrics = Metrics::new();
//! let runtime = Runtime::new().with_metrics(metrics.clone());
//! let agent = Agent::new(ScriptedModel::new().text("Hello!"), "scripted", ToolRegistry::new());
//! agent.ask(&runtime, "Hi").await?;
//! // What `GET /metrics` answers (`loopstack::serve::router(runtime, ..)` serves it).
//! let text = metrics.render(&runtime).await?;
//! assert!(text.contains(r#"loopstack_drives_total{workflow="agent",outcome="completed"} 1"#));
//! assert!(text.contains(r#"loopstack_model_tokens_total{provider="scripted",model="scripted",kind="input"} 10"#));
//! # Ok(())
//! # }
//! ```
//!
//! The metrics, their labels and what they count are listed in
//! [`loopstack_core::metrics`].

pub use loopstack_core::metrics::*;
