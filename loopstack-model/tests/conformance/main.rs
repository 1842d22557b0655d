//! The provider conformance suite (`loopstack_model::testing::ProviderSuite`) run
//! against each provider of this crate, each answered by its strict imitation of the
//! API (`loopstack_model::testing::imitation`, written from the API's published
//! reference): one module per provider, with its test.
//!
//! `cargo test -p loopstack-model --all-features --test conformance`
//!
//! A provider added to the crate adds its imitation to
//! `src/testing/imitation/<provider>.rs`, `tests/conformance/<provider>.rs` (a test
//! running the suite) and a `mod` line here, behind its feature.
#![cfg(feature = "testing")]

#[cfg(feature = "anthropic")]
mod anthropic;
#[cfg(feature = "openai")]
mod azure;
#[cfg(feature = "bedrock")]
mod bedrock;
#[cfg(feature = "gemini")]
mod gemini;
#[cfg(feature = "openai")]
mod openai;
#[cfg(feature = "openai")]
mod openai_responses;
