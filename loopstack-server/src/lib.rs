//! The serving side of [loopstack](https://docs.rs/loopstack): the HTTP API for the
//! runs with Studio, its web page ([`serve`], feature `serve`), and the registered
//! workflows and agents as the tools of an MCP server ([`mcp_server`], feature
//! `mcp-server`).
//!
//! Apps reach it through the facade, `loopstack::serve` and
//! `loopstack::mcp_server` with the facade's features of the same names (and its
//! command line's `serve` and `mcp`); it is a crate of its own so that an app that
//! serves nothing builds none of it (axum, hyper's server, rmcp's server side).
//! Without features it holds only the run views the facade's command line shares
//! with the servers.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "serve")]
#[cfg_attr(docsrs, doc(cfg(feature = "serve")))]
pub mod serve;

#[cfg(feature = "mcp-server")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp-server")))]
pub mod mcp_server;

#[cfg(feature = "serve")]
mod studio;

/// How runs are shown: one JSON shape for the command line's `--json`, the HTTP API
/// and the MCP server, and what a run waits for in words. Shared with the facade's
/// command line; not a stable API.
#[doc(hidden)]
pub mod views;
