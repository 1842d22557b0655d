//! Testing a provider: a local HTTP [`Server`] to imitate its API with, and the
//! provider conformance suite, [`ProviderSuite`].
//!
//! On with the `testing` feature; for this crate's tests and for provider crates
//! written outside it.
//!
//! # The provider conformance suite
//!
//! One set of cases every provider runs against a local imitation of its API: text,
//! streaming, tool calls (one, and parallel ones), images (a user's, a tool's), typed
//! answers (structured output), the reasoning round trip, usage with cache and
//! reasoning counts, each class of error with its [`LlmError`](crate::LlmError)
//! variant and [`is_retryable`](crate::LlmError::is_retryable), retry hints
//! (`retry-after` honoured) and cancellation (a dropped call or stream closes its
//! connection). See [`Case`] for what each checks.
//!
//! The suite is provider-neutral: it scripts each request's answer as a [`Turn`]
//! (an [`Answer`] of text, calls, reasoning and usage, or a [`Failure`]), and the
//! provider's test supplies an [`Imitation`] that
//!
//! - reads each request strictly, as the API would (path, key header, required
//!   fields, the shapes of messages and tools), into a neutral [`Seen`] the suite
//!   checks against what it asked the model to send, or refuses it with a message
//!   that fails the case; and
//! - writes each turn in the API's shapes: a JSON body, or an event stream when
//!   the request asked for one.
//!
//! The imitation holds no state: the suite starts a fresh [`Server`] for each case,
//! hands each request with the next scripted turn to the imitation, and checks that
//! every turn was asked for exactly once. What a provider lacks is declared with
//! [`ProviderSuite::lacks`], and the cases that need it are reported as skipped, with
//! the reason, never silently passed.
//!
//! # Adding a provider to the suite
//!
//! 1. Write the imitation: a type implementing [`Imitation`], from the API's
//!    published reference. `read` checks the method, path and [`API_KEY`] header,
//!    the required fields, and fills a [`Seen`] (model, stream, system prompt, token
//!    limit, tools, response schema, whether reasoning was asked for, and each
//!    message's [`Part`]s: text, images, calls, results, reasoning with the token it
//!    carries). `reply` writes [`Turn::Answer`] as the API answers, plain or
//!    streamed (a stream best sent in odd [`Reply::pieces`], so that events
//!    split across reads are exercised); [`Turn::Hang`] as the stream's start up to its first text then
//!    [`Reply::then_hang`]; and each [`Failure`] as the API sends it: its status,
//!    error body with [`Failure::message`], `retry-after` header; a body missing
//!    required fields for [`Failure::Malformed`]; the answer (or the stream up to
//!    its first text) with [`Reply::truncated`] for [`Failure::Truncated`].
//! 2. Build the model from the [`Setup`]: its base URL, key, retries
//!    ([`Setup::retry_policy`]) and, if the provider has a sleep hook,
//!    [`Setup::sleep`] (otherwise declare it lacks [`Capability::RecordedSleeps`]).
//! 3. Declare what it lacks ([`Capability`]; the suite assumes every one unless
//!    told), with why, and run it in a test:
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use loopstack_model::testing::{Capability, Imitation, ProviderSuite, Reply, Request, Seen, Turn};
//! use loopstack_model::ChatModel;
//!
//! struct MyApi;
//!
//! impl Imitation for MyApi {
//!     fn read(&self, request: &Request) -> Result<Seen, String> {
//!         if request.path != "/v1/chat/completions" {
//!             return Err(format!("no such endpoint: {}", request.path));
//!         }
//!         let mut seen = Seen::default();
//!         seen.model = request.body["model"].as_str().ok_or("`model` is required")?.to_owned();
//!         // ... the rest of the request, strictly
//!         Ok(seen)
//!     }
//!
//!     fn reply(&self, turn: &Turn, seen: &Seen) -> Reply {
//!         // ... each turn in the API's shapes (streamed when `seen.stream`)
//!         # let _ = (turn, seen);
//!         Reply::raw(501, "text/plain", "not imitated yet")
//!     }
//! }
//!
//! // In the provider crate's tests, with `loopstack-model = { version = "0.1",
//! // features = ["testing"] }` among its dev-dependencies:
//! // #[tokio::test]
//! # #[cfg(feature = "openai")]
//! async fn my_provider_conforms() {
//!     let suite = ProviderSuite::new(MyApi, |setup| {
//!         // Your provider, pointed at the imitation.
//!         let model = loopstack_model::OpenAi::new()
//!             .api_key(&setup.api_key)
//!             .base_url(&setup.base_url)
//!             .retry_policy(setup.retry_policy())
//!             .__sleep_with(setup.sleep());
//!         Arc::new(model) as Arc<dyn ChatModel>
//!     })
//!     .lacks(Capability::Reasoning, "the API returns no reasoning");
//!     suite.run().await.assert_passed();
//! }
//! ```
//!
//! [`Report::assert_passed`] prints one line per case (skips with their reasons)
//! and fails the test listing every failed case with what it expected. To run some
//! cases alone, [`ProviderSuite::only`].
//!
//! Each provider of this crate has its imitation in [`imitation`] (usable to test
//! an agent offline against the real wire) and its test in
//! `loopstack-model/tests/conformance/<provider>.rs`; run them with
//! `cargo test -p loopstack-model --all-features --test conformance`.

mod cases;
pub mod imitation;
mod server;
mod suite;

pub use server::{Reply, Request, Server};
pub use suite::{
    API_KEY, Answer, Capability, Case, Failure, Imitation, MODEL, ModelFactory, Outcome, Part, ProviderSuite, Report,
    Seen, SeenMessage, Setup, Thought, Turn,
};
