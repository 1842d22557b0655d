//! Ids for the tool calls a provider sends without one (Gemini's, some
//! OpenAI-compatible servers', calls written as text), which the conversation needs to
//! pair each result with its call.

use std::collections::HashSet;
use std::sync::Arc;

use crate::message::{ContentBlock, Message};

/// The ids of the tool calls of one reply that come without one: those a server sent
/// without an id, and those written as text (OpenAI-compatible servers' `text_tool_calls`).
///
/// The call at position `n` of the reply gets `call_<c + n>`, where `c` counts the tool
/// calls already in the conversation, or the next number that no call or result of
/// the conversation and no other call of the reply uses. So an id never repeats one of
/// an earlier turn, and the same request gets the same ids. The conversation is only
/// read when an id is needed.
pub(crate) struct CallIds<'a> {
    conversation: &'a [Arc<Message>],
    /// The number of tool calls in the conversation and the ids it uses, once read.
    earlier: Option<(usize, HashSet<&'a str>)>,
    /// The ids of this reply: the server's and those handed out.
    reply: HashSet<String>,
}

impl<'a> CallIds<'a> {
    /// The ids of a reply to a request with these messages.
    pub(crate) fn new(conversation: &'a [Arc<Message>]) -> Self {
        Self { conversation, earlier: None, reply: HashSet::new() }
    }

    /// Notes an id the server gave a call of this reply.
    pub(crate) fn reserve(&mut self, id: &str) {
        self.reply.insert(id.to_owned());
    }

    /// The id of the call at `position` in the reply, which has none.
    pub(crate) fn id(&mut self, position: usize) -> String {
        let conversation = self.conversation;
        let (calls, used) = self.earlier.get_or_insert_with(|| {
            let mut used = HashSet::new();
            let mut calls = 0;
            for block in conversation.iter().flat_map(|m| &m.content) {
                match block {
                    ContentBlock::ToolUse(call) => {
                        calls += 1;
                        used.insert(call.id.as_str());
                    }
                    ContentBlock::ToolResult(result) => {
                        used.insert(result.tool_use_id.as_str());
                    }
                    _ => {}
                }
            }
            (calls, used)
        });
        let mut n = *calls + position;
        loop {
            let id = format!("call_{n}");
            if !used.contains(id.as_str()) && !self.reply.contains(&id) {
                self.reply.insert(id.clone());
                return id;
            }
            n += 1;
        }
    }

    /// The server's id of the call at `position` (noted as taken), or one from
    /// [`CallIds::id`] when it gave none (or an empty one).
    pub(crate) fn or_new(&mut self, id: Option<String>, position: usize) -> String {
        match id.filter(|id| !id.is_empty()) {
            Some(id) => {
                self.reserve(&id);
                id
            }
            None => self.id(position),
        }
    }
}
