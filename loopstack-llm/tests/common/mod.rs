//! A scripted HTTP/1.1 server on 127.0.0.1 for the provider tests.
//!
//! Each test starts its own [`Server`] with a script of [`Reply`]s, answered in order
//! whatever connection a request arrives on, and records every request.
//! [`local_model`] is a server that behaves like a small local model instead.
#![allow(dead_code, unreachable_pub, unused_imports)]

pub mod local_model;
pub mod weather;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use loopstack_core::{Tool, ToolContext, ToolDefinition, ToolError, ToolOutput, ToolRegistry};
use serde_json::Value;

pub use loopstack_model::testing::{Reply, Request, Server};

/// An Anthropic-style event stream: `event: <type>` and `data: <json>` per event.
pub fn anthropic_sse(events: &[Value]) -> String {
    events.iter().map(|e| format!("event: {}\ndata: {}\n\n", e["type"].as_str().unwrap_or("message"), e)).collect()
}

/// An OpenAI-style event stream: `data: <json>` per chunk, then `data: [DONE]`.
pub fn openai_sse(chunks: &[Value]) -> String {
    let mut out: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    out
}

/// A sleep hook that records each retry delay and returns at once.
pub fn recorded_sleeps()
-> (Arc<Mutex<Vec<Duration>>>, impl Fn(Duration) -> std::future::Ready<()> + Send + Sync + 'static) {
    let delays = Arc::new(Mutex::new(Vec::new()));
    let recorder = delays.clone();
    (delays, move |d| {
        recorder.lock().unwrap().push(d);
        std::future::ready(())
    })
}

struct SpecTool {
    name: &'static str,
    description: &'static str,
    schema: Value,
}

#[async_trait::async_trait]
impl Tool for SpecTool {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        self.description
    }
    fn input_schema(&self) -> Value {
        self.schema.clone()
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("unused"))
    }
}

/// The spec of a tool with this name, description and input schema.
pub fn tool_spec(name: &'static str, description: &'static str, schema: Value) -> Arc<ToolDefinition> {
    let tools = ToolRegistry::new().with(SpecTool { name, description, schema }).expect("a valid tool");
    tools.spec(name).expect("registered").definition.clone()
}
