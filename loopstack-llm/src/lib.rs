//! The LLM layer of loopstack (docs filled in later).

pub mod error;
pub mod message;
pub mod model;

pub use error::LlmError;
pub use message::{ContentBlock, InvalidInput, Message, Role, StopReason, ToolResult, ToolUse, Usage};
pub use model::{ChatModel, ChatRequest, ChatResponse, StreamEvent, replay};

#[cfg(feature = "http")]
mod http;
#[cfg(feature = "anthropic")]
pub mod anthropic;
#[cfg(feature = "openai")]
pub mod openai;
