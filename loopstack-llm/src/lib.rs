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
//! The crate root holds what most code names. Constants stay in their modules:
//! [`agent`] (its signal and tool names, default limits), [`delegate`] and
//! [`workflow_tool`] (default timeouts), [`generate`] (document types and tags),
//! [`context`], [`image`], [`message`] (input bounds) and `sse` (stream bounds); so
//! do helpers few programs need, such as [`delegate::save_results`].
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

pub mod agent;
mod call_result;
pub mod context;
pub mod delegate;
pub mod dispatch;
pub mod error;
pub mod eval;
pub mod generate;
pub mod image;
pub use loopstack_model::{message, model};
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod otel;
mod recording;
pub mod workflow_tool;

pub use agent::{
    Agent, AgentPlace, AgentQuestion, AgentReply, AgentSignal, AgentState, AgentStatus, AgentTool, AgentToolError,
    Answer, AskError, Limit, Limits, PendingCall, PendingTool, Price, Prices, RaiseLimit, Repeats, ToolDecision,
    ToolDecisions, TypedAgent, UserMessage, decide_by_name, pending_calls,
};
pub use delegate::{CallInput, CallOptions, DelegateResult, LlmDelegateToolCalls, ToolCallResult, ToolDenial};
pub use dispatch::{ChildInput, DispatchEntry, DispatchResults, ErrorPolicy, InputMapping, Secrets};
pub use error::AgentError;
pub use generate::{
    GenerateOptions, GenerateResult, LlmGenerateText, LlmMessageDocument, ModelRef, Models, TurnExtras, conversation,
    conversation_named, save_message, turn_usage,
};
pub use loopstack_model::ScriptedModel;
pub use recording::{RecordedTurn, Recording, ReplayError, ReplayModel, ReplayTools, RunExport};
pub use workflow_tool::WorkflowTool;

pub use context::{ContextPolicy, ContextWindow};
pub use error::LlmError;
pub use image::{Image, ImageDocument, ImageError, MediaType};
pub use loopstack_model::message::{
    ContentBlock, InvalidInput, Message, Reasoning, Role, StopReason, ToolResult, ToolUse, Usage,
};
pub use loopstack_model::model::{
    ChatModel, ChatRequest, ChatResponse, ModelSettings, ReasoningEffort, ResponseSchema, StreamEvent,
};
pub use loopstack_model::{CacheBreakpoint, PromptCache, ToolDefinition, options};

#[cfg(feature = "anthropic")]
#[cfg_attr(docsrs, doc(cfg(feature = "anthropic")))]
pub use loopstack_model::{Anthropic, anthropic};
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub use loopstack_model::{AzureOpenAi, OpenAi, OpenAiResponses, openai};
#[cfg(feature = "bedrock")]
#[cfg_attr(docsrs, doc(cfg(feature = "bedrock")))]
pub use loopstack_model::{Bedrock, bedrock};
#[cfg(feature = "gemini")]
#[cfg_attr(docsrs, doc(cfg(feature = "gemini")))]
pub use loopstack_model::{Gemini, gemini};
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(any(feature = "anthropic", feature = "openai"))))]
pub use loopstack_model::{RetryPolicy, sse};
#[cfg(feature = "a2a")]
#[cfg_attr(docsrs, doc(cfg(feature = "a2a")))]
pub mod a2a;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
