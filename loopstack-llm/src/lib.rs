//! The LLM layer of [loopstack](https://docs.rs/loopstack): talking to models and
//! running the tools they ask for.
//!
//! - Provider-neutral [`Message`]s with [`ContentBlock`]s, [`StopReason`] and [`Usage`].
//! - The object-safe [`ChatModel`] trait, with [`Anthropic`] (Messages API) and
//!   [`OpenAi`] (Chat Completions, also Ollama, llama.cpp's server and vLLM through
//!   the base URL), both streaming, retrying and with typed [`LlmError`]s; and the
//!   [`ScriptedModel`] for tests and offline runs.
//! - Workflow steps: [`LlmGenerateText`] (one model turn from the run's conversation,
//!   saved as an [`LlmMessageDocument`]) and [`LlmDelegateToolCalls`] (every tool call
//!   of a message, each failure a result the model sees).
//! - The ready-made [`Agent`] loop, itself a `#[workflow]`.
//!
//! Through the `loopstack` crate this crate is `loopstack::llm`: where these docs
//! write `loopstack_llm::X` (and `loopstack_core::X`), facade users write
//! `loopstack::llm::X` (and `loopstack::X`, most of it in `loopstack::prelude`).
//!
//! ```
//! use loopstack_core::{Runtime, ToolRegistry};
//! use loopstack_llm::{Agent, ChatModel, ChatRequest, Message, ScriptedModel};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! // A model computed from the request, like a stub server: it answers the last message.
//! let model = ScriptedModel::from_fn(|req: &ChatRequest| {
//!     let last = req.messages.last().map(|m| m.text()).unwrap_or_default();
//!     Ok(ScriptedModel::new().text_response(format!("You said: {last}")))
//! });
//! let agent = Agent::new(model.clone(), "echo-1", ToolRegistry::new());
//! let reply = agent.ask(&Runtime::new(), "hello").await?;
//! assert_eq!(reply.text, "You said: hello");
//! assert_eq!(model.requests()[0].model, "echo-1");
//! # Ok::<(), loopstack_llm::AskError>(()) }).unwrap();
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod agent;
mod cache;
mod call_result;
mod context;
mod delegate;
pub mod dispatch;
pub mod error;
pub mod eval;
mod generate;
pub mod image;
pub mod message;
pub mod model;
mod recording;
mod scripted;
mod usage;
mod workflow_tool;

pub use agent::{
    Agent, AgentPlace, AgentQuestion, AgentReply, AgentSignal, AgentState, AgentStatus, AgentTool, AgentToolError,
    Answer, AskError, DECIDE_TOOLS, DEFAULT_AGENT_TOOL_TIMEOUT, DEFAULT_ANSWER_RETRIES, DEFAULT_MAX_REPEATS,
    DEFAULT_MAX_TURNS, Limit, Limits, PendingCall, PendingTool, Price, Prices, RESOLVE_TOOLS, RESPOND_TOOL, RaiseLimit,
    Repeats, TRANSFER_PREFIX, ToolDecision, ToolDecisions, ToolsCompleted, TypedAgent, UserMessage, agent_answer,
    decide_by_name, pending_calls, takes_decisions,
};
pub use delegate::{
    CallOptions, DEFAULT_CONCURRENCY, DEFAULT_TOOL_TIMEOUT, DelegateResult, LlmDelegateToolCalls, ToolCallResult,
    ToolDenial, save_results,
};
pub use dispatch::{ChildInput, DispatchEntry, DispatchResults, ErrorPolicy, InputMapping, Secrets};
pub use error::AgentError;
pub use generate::{
    CONVERSATION_TAG, GenerateOptions, GenerateResult, LlmGenerateText, LlmMessageDocument, MESSAGE_DOCUMENT, ModelRef,
    Models, NAMED_CONVERSATION_PREFIX, TurnExtras, conversation, conversation_named, save_message, turn_usage,
};
pub use recording::{RecordedTurn, Recording, ReplayError, ReplayModel, ReplayTools, RunExport};
pub use scripted::ScriptedModel;
pub use workflow_tool::{DEFAULT_WORKFLOW_TOOL_TIMEOUT, TOOL_RESULT_SIGNAL, WorkflowTool, child_result};

pub use cache::{CacheBreakpoint, PromptCache};
pub use context::{ContextPolicy, ContextWindow, SUMMARY_PROMPT, check_pairing};
pub use error::LlmError;
pub use image::{DEFAULT_MAX_IMAGE_BYTES, IMAGE_DOCUMENT, Image, ImageDocument, ImageError, MediaType};
pub use message::{
    ContentBlock, InvalidInput, MAX_JSON_DEPTH, MAX_REFUSED_TEXT, Message, Role, StopReason, ToolResult, ToolUse, Usage,
};
pub use model::{ChatModel, ChatRequest, ChatResponse, ModelSettings, ResponseSchema, StreamEvent, replay};

#[cfg(feature = "anthropic")]
pub mod anthropic;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "openai")]
pub mod openai;
#[cfg(feature = "http")]
mod sse;

#[cfg(feature = "anthropic")]
pub use anthropic::Anthropic;
#[cfg(feature = "http")]
pub use http::RetryPolicy;
#[cfg(feature = "openai")]
pub use openai::OpenAi;
#[cfg(feature = "http")]
pub use sse::{SSE_MAX_EVENT_BYTES, SSE_MAX_LINE_BYTES};

#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
