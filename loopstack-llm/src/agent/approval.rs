//! Tool calls that wait for a person, and the person's decisions.

use loopstack_core::schemars::{self, JsonSchema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool call that waits for a person's decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PendingCall {
    /// The call's id, to name in a [`ToolDecision`].
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The arguments the model gave.
    pub arguments: Value,
}

/// A person's decision on one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ToolDecision {
    /// The call's id ([`PendingCall::call_id`]).
    pub call_id: String,
    /// Whether the call may run.
    pub approved: bool,
    /// Why; a denied call's reason is what the model reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ToolDecision {
    /// Approves call `call_id`.
    pub fn approve(call_id: impl Into<String>) -> Self {
        Self { call_id: call_id.into(), approved: true, reason: None }
    }

    /// Denies call `call_id`, telling the model why.
    pub fn deny(call_id: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { call_id: call_id.into(), approved: false, reason: Some(reason.into()) }
    }
}

/// The payload of the agent's `decide_tools` signal: decisions on some or all of
/// the calls that wait. The run goes on once every call has one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ToolDecisions {
    /// The decisions, one per call.
    pub decisions: Vec<ToolDecision>,
}

impl ToolDecisions {
    /// These decisions.
    pub fn new(decisions: impl IntoIterator<Item = ToolDecision>) -> Self {
        Self { decisions: decisions.into_iter().collect() }
    }

    /// Approves every call in `calls`.
    pub fn approve_all<'a>(calls: impl IntoIterator<Item = &'a PendingCall>) -> Self {
        Self::new(calls.into_iter().map(|c| ToolDecision::approve(&c.call_id)))
    }

    /// Denies every call in `calls` for one reason.
    pub fn deny_all<'a>(calls: impl IntoIterator<Item = &'a PendingCall>, reason: &str) -> Self {
        Self::new(calls.into_iter().map(|c| ToolDecision::deny(&c.call_id, reason)))
    }
}
