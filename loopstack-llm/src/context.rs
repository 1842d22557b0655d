//! Context management: what an agent sends when its conversation outgrows the model's
//! context window. The stored conversation keeps every message; only what is sent
//! changes.

use std::borrow::Borrow;

use serde::{Deserialize, Serialize};

use crate::message::{ContentBlock, Message, Role};

/// How an agent keeps its requests within the model's context window (see
/// [`Agent::context`](crate::Agent::context)).
///
/// The input of the next turn is estimated (from the input tokens the provider
/// reported for the last turn, the tokens of its reply and of the messages added since,
/// at about four characters a token, whichever is larger than the estimate of the
/// messages themselves). When it passes `max_input_tokens`, the agent's `compact`
/// transition (a step of its table, before the turn) leaves out the oldest whole turns
/// until the estimate is under `target_tokens`: it never splits a tool call from its
/// result, and never leaves out the system prompt or the first user message. With
/// [`ContextPolicy::Summarize`], the turns left out are first summarized by a call to
/// the agent's model, and the summary is sent with the first user message.
///
/// ```
/// use loopstack_llm::ContextPolicy;
///
/// let policy = ContextPolicy::drop_oldest(100_000);
/// assert_eq!(policy, ContextPolicy::DropOldest { max_input_tokens: 100_000, target_tokens: 50_000 });
/// let policy = ContextPolicy::summarize(100_000).target_tokens(30_000);
/// assert_eq!(policy, ContextPolicy::Summarize { max_input_tokens: 100_000, target_tokens: 30_000 });
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContextPolicy {
    /// Every message is sent (the default).
    #[default]
    Full,
    /// Past `max_input_tokens`, the oldest whole turns are left out, down to
    /// `target_tokens`.
    DropOldest {
        /// The estimated input above which the agent compacts.
        max_input_tokens: u64,
        /// What it compacts down to.
        target_tokens: u64,
    },
    /// Past `max_input_tokens`, the oldest whole turns are summarized by the agent's
    /// model and left out, down to `target_tokens`.
    Summarize {
        /// The estimated input above which the agent compacts.
        max_input_tokens: u64,
        /// What it compacts down to.
        target_tokens: u64,
    },
}

impl ContextPolicy {
    /// Leaves out the oldest turns past `max_input_tokens`, down to half of it.
    pub fn drop_oldest(max_input_tokens: u64) -> Self {
        Self::DropOldest { max_input_tokens, target_tokens: max_input_tokens / 2 }
    }

    /// Summarizes and leaves out the oldest turns past `max_input_tokens`, down to
    /// half of it.
    pub fn summarize(max_input_tokens: u64) -> Self {
        Self::Summarize { max_input_tokens, target_tokens: max_input_tokens / 2 }
    }

    /// Sets what the agent compacts down to.
    #[must_use]
    pub fn target_tokens(mut self, tokens: u64) -> Self {
        match &mut self {
            Self::Full => {}
            Self::DropOldest { target_tokens, .. } | Self::Summarize { target_tokens, .. } => *target_tokens = tokens,
        }
        self
    }

    /// The threshold and target, unless every message is sent.
    pub(crate) fn limits(self) -> Option<(u64, u64)> {
        match self {
            Self::Full => None,
            Self::DropOldest { max_input_tokens, target_tokens }
            | Self::Summarize { max_input_tokens, target_tokens } => Some((max_input_tokens, target_tokens)),
        }
    }
}

/// What of the conversation an agent sends: the first user message (with the summary
/// of what is left out, if any), then the messages from `from` on. Kept in the
/// agent's state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ContextWindow {
    /// The index, in the conversation, of the first message sent after the first one;
    /// always an assistant message.
    pub from: usize,
    /// The summary of the messages left out, sent with the first user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// The text that introduces a summary in the first user message.
pub(crate) const SUMMARY_HEADING: &str = "Summary of the conversation so far (earlier turns are left out):";

/// The system prompt of the call that summarizes left-out turns.
pub const SUMMARY_PROMPT: &str = "Summarize the conversation below so that an assistant can continue it without \
    seeing it: keep the facts learned, tool results that matter, decisions taken and questions still open. \
    Answer with the summary only.";

/// About how many tokens a message takes: four characters a token, plus a little per
/// block.
pub(crate) fn estimate_tokens(message: &Message) -> u64 {
    let chars: usize = message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } => text.len(),
            ContentBlock::ToolUse(call) => call.name.len() + call.input.to_string().len(),
            ContentBlock::ToolResult(result) => result.content.len(),
            ContentBlock::Provider { raw, .. } => raw.to_string().len(),
            // Anthropic counts a large image as about 1,600 tokens.
            ContentBlock::Image { .. } => 4 * 1600,
            #[allow(unreachable_patterns)]
            _ => 0,
        })
        .sum::<usize>()
        + 16 * message.content.len();
    (chars as u64).div_ceil(4)
}

/// Adds the window's summary, if any, to the first user message.
pub(crate) fn add_summary(first: &mut Message, window: &ContextWindow) {
    if let Some(summary) = &window.summary {
        first.content.push(ContentBlock::text(format!("\n\n{SUMMARY_HEADING}\n{summary}")));
    }
}

/// Where a window over `messages` that sends at most about `target` tokens starts: the
/// earliest assistant message after `from` whose suffix (with the first message) fits,
/// else the last assistant message (the newest turn is always sent); `None` when no
/// later start exists.
pub(crate) fn plan<M: Borrow<Message>>(messages: &[M], from: usize, target: u64) -> Option<usize> {
    let first = messages.first().map_or(0, |m| estimate_tokens(m.borrow()));
    let mut suffix = vec![0u64; messages.len() + 1];
    for i in (0..messages.len()).rev() {
        suffix[i] = suffix[i + 1] + estimate_tokens(messages[i].borrow());
    }
    let starts = (from.max(1) + 1..messages.len()).filter(|&i| messages[i].borrow().role == Role::Assistant);
    let mut last = None;
    for start in starts {
        if first + suffix[start] <= target {
            return Some(start);
        }
        last = Some(start);
    }
    last
}

/// The estimated tokens of what `window` sends of `messages`.
pub(crate) fn window_tokens<M: Borrow<Message>>(messages: &[M], window: &ContextWindow) -> u64 {
    let first = messages.first().map_or(0, |m| estimate_tokens(m.borrow()));
    let summary = window.summary.as_ref().map_or(0, |s| (s.len() as u64).div_ceil(4));
    let rest: u64 = messages.iter().skip(window.from.max(1)).map(|m| estimate_tokens(m.borrow())).sum();
    first + summary + rest
}

/// The turns to summarize, as text a model reads (a conversation of its own would have
/// to keep calls with results): the summary so far, then each message.
pub(crate) fn summary_input<M: Borrow<Message>>(previous: Option<&str>, messages: &[M]) -> String {
    let mut out = String::new();
    if let Some(previous) = previous {
        out.push_str("The summary so far:\n");
        out.push_str(previous);
        out.push_str("\n\nThen:\n");
    }
    for message in messages {
        let message = message.borrow();
        let who = match message.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
        };
        for block in &message.content {
            match block {
                ContentBlock::Text { text } if !text.is_empty() => out.push_str(&format!("{who}: {text}\n")),
                ContentBlock::ToolUse(call) => out.push_str(&format!("{who} called {}({})\n", call.name, call.input)),
                ContentBlock::ToolResult(r) if r.is_error => out.push_str(&format!("Tool error: {}\n", r.content)),
                ContentBlock::ToolResult(r) => out.push_str(&format!("Tool result: {}\n", r.content)),
                // The summarizing model reads that there was one, not the image.
                ContentBlock::Image { tool_use_id: Some(_), .. } => out.push_str("Tool result: (an image)\n"),
                ContentBlock::Image { tool_use_id: None, .. } => out.push_str(&format!("{who} showed an image\n")),
                _ => {}
            }
        }
    }
    out
}

/// Checks that a request's conversation keeps every tool call with its result: each
/// tool result answers a call of the message right before it, and each call of an
/// assistant message that has a message after it is answered in that message. For
/// tests of what is sent; `Err` says what is wrong.
#[doc(hidden)]
pub fn check_pairing<M: std::borrow::Borrow<Message>>(messages: &[M]) -> Result<(), String> {
    let at = |i: usize| messages.get(i).map(std::borrow::Borrow::<Message>::borrow);
    for (i, message) in messages.iter().map(std::borrow::Borrow::<Message>::borrow).enumerate() {
        let results: Vec<&str> = message.tool_results_iter().map(|r| r.tool_use_id.as_str()).collect();
        if !results.is_empty() {
            let Some(before) = i.checked_sub(1).and_then(at) else {
                return Err(format!("message {i} has tool results but nothing before it"));
            };
            for id in &results {
                if !before.tool_uses().any(|c| c.id == *id) {
                    return Err(format!("message {i} answers call {id}, which message {} does not make", i - 1));
                }
            }
        }
        if let Some(next) = at(i + 1) {
            for call in message.tool_uses() {
                if !next.tool_results_iter().any(|r| r.tool_use_id == call.id) {
                    return Err(format!("call {} of message {i} has no result in message {}", call.id, i + 1));
                }
            }
        }
    }
    Ok(())
}
