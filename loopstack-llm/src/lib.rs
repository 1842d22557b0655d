//! The LLM layer of loopstack (docs filled in later).

mod agent;
mod delegate;
pub mod error;
mod generate;
pub mod message;
pub mod model;
mod scripted;

pub use agent::{Agent, AgentReply, AgentState, AgentStatus, DEFAULT_MAX_TURNS};
pub use delegate::{DEFAULT_CONCURRENCY, DEFAULT_TOOL_TIMEOUT, DelegateResult, LlmDelegateToolCalls, ToolCallResult};
pub use error::AgentError;
pub use generate::{
    CONVERSATION_TAG, GenerateOptions, GenerateResult, LlmGenerateText, LlmMessageDocument, MESSAGE_DOCUMENT, Models,
    conversation,
};
pub use scripted::ScriptedModel;

pub use error::LlmError;
pub use message::{ContentBlock, InvalidInput, Message, Role, StopReason, ToolResult, ToolUse, Usage};
pub use model::{ChatModel, ChatRequest, ChatResponse, StreamEvent, replay};

#[cfg(feature = "anthropic")]
pub mod anthropic;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "openai")]
pub mod openai;

#[cfg(feature = "anthropic")]
pub use anthropic::Anthropic;
#[cfg(feature = "http")]
pub use http::RetryPolicy;
#[cfg(feature = "openai")]
pub use openai::OpenAi;
