//! A run's conversation: its message documents, read and saved.

use super::*;

pub use loopstack_core::__private::{CONVERSATION_TAG, MESSAGE_DOCUMENT};

/// A conversation message saved as a run document (type `llm_message`, tagged
/// `conversation`). The conversation sent to a model is the run's message documents
/// in order.
pub type LlmMessageDocument = Message;

/// The prefix of the tag that names a conversation: the messages of conversation
/// `critic` are tagged `conversation` and `conversation:critic`.
pub const NAMED_CONVERSATION_PREFIX: &str = "conversation:";

/// The run's default conversation: its message documents tagged `conversation`
/// and belonging to no named conversation, in order. Each message is shared with its
/// document (one saved in this drive is not copied, an older one is read once).
pub fn conversation(cx: &RunContext) -> Result<Vec<Arc<Message>>, serde_json::Error> {
    conversation_named(cx, None)
}

/// The messages of one conversation of the run, in order: the default one for
/// `None`, else the one named so (see [`GenerateOptions::conversation`]). A
/// workflow with two agents, or an agent and a critic, keeps one each.
pub fn conversation_named(cx: &RunContext, name: Option<&str>) -> Result<Vec<Arc<Message>>, serde_json::Error> {
    // Sized first: collecting results cannot reserve, and would grow (and move) the
    // messages as it reads them, every model turn.
    let docs = || cx.documents().iter().filter(|d| in_conversation(d, name));
    let mut messages = Vec::with_capacity(docs().count());
    for doc in docs() {
        // Messages saved in this drive are at hand; older ones are read.
        messages.push(sent(cx, doc)?);
    }
    Ok(messages)
}

/// Message document `doc` as a turn sends it: shared with the document, unless it
/// shows images, which are read into a copy.
fn sent(cx: &RunContext, doc: &Arc<loopstack_core::Document>) -> Result<Arc<Message>, serde_json::Error> {
    let mut message = cx.read_shared::<Message>(doc)?;
    if crate::image::shows_images(doc) {
        crate::image::resolve_images(cx, Arc::make_mut(&mut message))?;
    }
    Ok(message)
}

/// What `window` sends of conversation `name`: the messages it leaves out are not read.
pub(super) fn conversation_window(
    cx: &RunContext,
    name: Option<&str>,
    window: &crate::ContextWindow,
) -> Result<Vec<Arc<Message>>, serde_json::Error> {
    let docs = cx.documents().iter().filter(|d| in_conversation(d, name));
    let sent = docs.enumerate().filter(|(i, _)| *i == 0 || *i >= window.from);
    let mut messages = Vec::new();
    for (_, doc) in sent {
        messages.push(self::sent(cx, doc)?);
    }
    if let Some(first) = messages.first_mut() {
        crate::context::add_summary(Arc::make_mut(first), window);
    }
    Ok(messages)
}

/// Whether a document is a message of conversation `name` (the default for `None`).
pub(crate) fn in_conversation(d: &loopstack_core::Document, name: Option<&str>) -> bool {
    if d.doc_type != MESSAGE_DOCUMENT || !d.has_tag(CONVERSATION_TAG) {
        return false;
    }
    let mut named = d.tags.iter().filter_map(|t| t.strip_prefix(NAMED_CONVERSATION_PREFIX));
    match name {
        None => named.next().is_none(),
        Some(name) => named.any(|n| n == name),
    }
}

/// The tokens of each model turn of a run, in order, from its message documents
/// (each assistant message keeps its turn's usage in its `usage` metadata): pass
/// [`Store::documents`](loopstack_core::Store::documents) or
/// [`RunContext::documents`].
pub fn turn_usage(documents: &[Arc<loopstack_core::Document>]) -> Vec<Usage> {
    documents.iter().filter(|d| d.doc_type == MESSAGE_DOCUMENT).filter_map(|d| d.metadata.read("usage")?.ok()).collect()
}

/// Saves `message` to conversation `name` of the run (the default for `None`).
///
/// The data of its images is saved once as image documents of the run, which the
/// message refers to (see [`crate::image`]).
pub fn save_message(
    cx: &mut RunContext,
    message: &Message,
    name: Option<&str>,
    options: SaveOptions,
) -> Result<(), serde_json::Error> {
    if message.content.iter().any(|b| matches!(b, crate::ContentBlock::Image { .. })) {
        return crate::image::save_with_images(cx, message.clone(), name, options);
    }
    save_shared_message(cx, Arc::new(message.clone()), name, options)
}

/// Saves a shared message to conversation `name`; the steps after it read it
/// without parsing it again.
pub(crate) fn save_shared_message(
    cx: &mut RunContext,
    message: Arc<Message>,
    name: Option<&str>,
    options: SaveOptions,
) -> Result<(), serde_json::Error> {
    let options = match name {
        Some(name) => options.tag(format!("{NAMED_CONVERSATION_PREFIX}{name}")),
        None => options,
    };
    cx.save_shared(message, options)?;
    Ok(())
}
