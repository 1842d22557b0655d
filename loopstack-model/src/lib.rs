//! The model layer of [loopstack](https://docs.rs/loopstack): what is said to a model
//! and what it answers, and the providers that carry it.
//!
//! - Provider-neutral [`Message`]s of [`ContentBlock`]s, with [`StopReason`] and
//!   [`Usage`]; [`Image`]s; the [`ToolDefinition`]s a model is offered.
//! - The object-safe [`ChatModel`] trait: a [`ChatRequest`] in, a [`ChatResponse`] or a
//!   stream of [`StreamEvent`]s out, every failure a typed [`LlmError`].
//! - Providers: [`Anthropic`] (the Messages API) and [`OpenAi`] (Chat Completions,
//!   also Ollama, llama.cpp's server and vLLM through the base URL), both streaming
//!   and retrying; and the [`ScriptedModel`] for tests and offline runs.
//!
//! This crate knows nothing of runs, workflows or stores: a provider written outside
//! this repository depends on it alone. The runtime (`loopstack-core`) and the agent
//! layer (`loopstack-llm`) sit above it; through the `loopstack` crate it is
//! `loopstack::llm`, where these items are re-exported.
//!
//! ```
//! use loopstack_model::{ChatModel, ChatRequest, Message, ScriptedModel};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let model = ScriptedModel::new().text("Sunny.");
//! let reply = model.chat(&ChatRequest::new("any", vec![Message::user("Weather in Paris?")])).await?;
//! assert_eq!(reply.message.text(), "Sunny.");
//! # Ok::<(), loopstack_model::LlmError>(()) }).unwrap();
//! ```
//!
//! # Writing a provider
//!
//! A provider is a type implementing [`ChatModel`]. One that speaks HTTP is built
//! with the toolkit this crate's own providers use, public under the `http` feature:
//! the `http` module's `Client` sends a provider's requests with retries, bounded
//! waits and typed errors, and decodes its server-sent events through the provider's
//! `SseDecoder`; the module's docs walk through a whole provider. The `testing`
//! feature adds `testing::Server`, a local HTTP server to imitate the provider's API
//! in its tests. A provider crate depends on this crate alone, not on the runtime.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod cache;
#[cfg(any(feature = "openai", feature = "gemini"))]
mod call_ids;
pub mod error;
#[doc(hidden)]
pub mod fnv;
pub mod image;
pub mod message;
pub mod model;
pub mod options;
mod scripted;
mod tool;
#[doc(hidden)]
pub mod usage;

pub use cache::{CacheBreakpoint, PromptCache};
pub use error::{BoxError, LlmError};
pub use image::{Image, ImageError, MediaType};
pub use message::{ContentBlock, InvalidInput, Message, Reasoning, Role, StopReason, ToolResult, ToolUse, Usage};
pub use model::{ChatModel, ChatRequest, ChatResponse, ModelSettings, ReasoningEffort, ResponseSchema, StreamEvent};
pub use scripted::ScriptedModel;
pub use tool::ToolDefinition;

#[cfg(feature = "anthropic")]
#[cfg_attr(docsrs, doc(cfg(feature = "anthropic")))]
pub mod anthropic;
#[cfg(feature = "bedrock")]
#[cfg_attr(docsrs, doc(cfg(feature = "bedrock")))]
pub mod bedrock;
#[cfg(feature = "gemini")]
#[cfg_attr(docsrs, doc(cfg(feature = "gemini")))]
pub mod gemini;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub mod openai;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod sse;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

#[cfg(feature = "anthropic")]
#[cfg_attr(docsrs, doc(cfg(feature = "anthropic")))]
pub use anthropic::Anthropic;
#[cfg(feature = "bedrock")]
#[cfg_attr(docsrs, doc(cfg(feature = "bedrock")))]
pub use bedrock::Bedrock;
#[cfg(feature = "gemini")]
#[cfg_attr(docsrs, doc(cfg(feature = "gemini")))]
pub use gemini::Gemini;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use http::RetryPolicy;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub use openai::OpenAi;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub use openai::{Azure as AzureOpenAi, Responses as OpenAiResponses};
