//! Testing a provider: a local HTTP [`Server`] to imitate its API with.
//!
//! On with the `testing` feature; for this crate's tests and for provider crates
//! written outside it.

mod server;

pub use server::{Reply, Request, Server};
