//! A chat model that answers from a script: for tests and offline runs.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use serde_json::Value;

use crate::error::LlmError;
use crate::message::{ContentBlock, Message, Role, StopReason, ToolUse, Usage};
use crate::model::{ChatModel, ChatRequest, ChatResponse, StreamEvent, replay};

type ReplyFn = dyn Fn(&ChatRequest) -> Result<ChatResponse, LlmError> + Send + Sync;

/// A [`ChatModel`] that answers from a queue of replies, or computes each reply from
/// the request with a function (like PydanticAI's `FunctionModel`).
///
/// The queue resumes where a run is: a run resumed by a new process (whose model is
/// built anew, with its whole queue) is sent its conversation so far, and the replies
/// its assistant turns already hold are skipped, so it gets the reply of the turn it
/// has reached, not the first one again. In one process the replies are given in
/// order, across runs too.
///
/// It records every request it receives, so tests assert on what was sent, and it
/// reports the usage given with each reply. Clones share the script and the record.
/// Through the `loopstack` crate it is `loopstack::llm::ScriptedModel`.
///
/// ```
/// use loopstack_model::{ChatModel, ChatRequest, Message, ScriptedModel, StopReason};
/// use serde_json::json;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let model = ScriptedModel::new()
///     .tool_call("get_weather", json!({"location": "Berlin"}))
///     .text("It is mostly sunny in Berlin.");
///
/// let request = ChatRequest::new("scripted", vec![Message::user("Weather in Berlin?")]);
/// let first = model.chat(&request).await?;
/// assert_eq!(first.stop_reason, StopReason::ToolUse);
/// let second = model.chat(&request).await?;
/// assert_eq!(second.message.text(), "It is mostly sunny in Berlin.");
/// assert_eq!(model.requests().len(), 2);
/// model.assert_finished();
/// # Ok::<(), loopstack_model::LlmError>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct ScriptedModel {
    inner: Arc<Inner>,
}

struct Inner {
    replies: Mutex<VecDeque<ChatResponse>>,
    /// Replies taken from the queue so far (given, or skipped for a resumed run).
    given: AtomicUsize,
    function: Option<Box<ReplyFn>>,
    requests: Mutex<Vec<ChatRequest>>,
    record: bool,
    latency: Option<Duration>,
    usage: Usage,
    model_name: String,
    totals: Mutex<(u64, Usage)>,
    structured: bool,
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("remaining", &self.remaining())
            .field("function", &self.inner.function.is_some())
            .field("calls", &self.calls())
            .finish()
    }
}

impl Default for ScriptedModel {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ScriptedModel {
    /// A model with an empty queue of replies; add replies with the builder methods.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// A model that computes each reply from the request. The function decides from
    /// the conversation it is given, so the model is stateless.
    pub fn from_fn(f: impl Fn(&ChatRequest) -> Result<ChatResponse, LlmError> + Send + Sync + 'static) -> Self {
        Self::build(Some(Box::new(f)))
    }

    fn build(function: Option<Box<ReplyFn>>) -> Self {
        Self {
            inner: Arc::new(Inner {
                replies: Mutex::new(VecDeque::new()),
                given: AtomicUsize::new(0),
                function,
                requests: Mutex::new(Vec::new()),
                record: true,
                latency: None,
                usage: Usage::new(10, 10),
                model_name: "scripted".to_owned(),
                totals: Mutex::new((0, Usage::default())),
                structured: false,
            }),
        }
    }

    fn inner_mut(&mut self) -> &mut Inner {
        Arc::get_mut(&mut self.inner).expect("configure a ScriptedModel before cloning it")
    }

    /// Says the model has structured output
    /// ([`ChatModel::structured_output`]), so a typed agent asks it for JSON text
    /// instead of a `respond` call; the scripted replies are what it answers.
    #[must_use]
    pub fn structured_output(mut self, structured: bool) -> Self {
        self.inner_mut().structured = structured;
        self
    }

    /// Queues a reply.
    ///
    /// # Panics
    /// If the model was already cloned: configure it first.
    #[must_use]
    pub fn reply(mut self, response: ChatResponse) -> Self {
        self.inner_mut().replies.get_mut().unwrap_or_else(|p| p.into_inner()).push_back(response);
        self
    }

    /// Queues a text reply that ends the turn.
    #[must_use]
    pub fn text(self, text: impl Into<String>) -> Self {
        let response = self.text_response(text);
        self.reply(response)
    }

    /// Queues a reply with one tool call (stop reason tool use); its id is `call_<n>`
    /// with `n` counting the tool calls queued so far.
    #[must_use]
    pub fn tool_call(self, name: impl Into<String>, input: Value) -> Self {
        self.tool_calls([(name.into(), input)])
    }

    /// Queues a reply with several tool calls at once.
    #[must_use]
    pub fn tool_calls<N: Into<String>>(self, calls: impl IntoIterator<Item = (N, Value)>) -> Self {
        let queued: usize = lock(&self.inner.replies).iter().map(|r| r.message.tool_uses().count()).sum();
        let content = calls
            .into_iter()
            .enumerate()
            .map(|(i, (name, input))| ContentBlock::ToolUse(ToolUse::new(format!("call_{}", queued + i), name, input)))
            .collect();
        let response = self.response(Message { role: Role::Assistant, content }, StopReason::ToolUse);
        self.reply(response)
    }

    /// Sets the usage reported with the replies the builder methods make (default 10
    /// input and 10 output tokens).
    #[must_use]
    pub fn usage(mut self, usage: Usage) -> Self {
        self.inner_mut().usage = usage;
        self
    }

    /// Sets the model name reported in replies the builder methods make.
    #[must_use]
    pub fn model_name(mut self, name: impl Into<String>) -> Self {
        self.inner_mut().model_name = name.into();
        self
    }

    /// Waits this long (on the async runtime's timer) before each reply.
    #[must_use]
    pub fn latency(mut self, latency: Duration) -> Self {
        self.inner_mut().latency = Some(latency);
        self
    }

    /// Whether to keep a copy of every request (default `true`). Turn it off for
    /// long-running or benchmark use, where the record would grow without bound.
    #[must_use]
    pub fn record_requests(mut self, record: bool) -> Self {
        self.inner_mut().record = record;
        self
    }

    /// A text reply in this model's name and usage, for [`ScriptedModel::from_fn`].
    pub fn text_response(&self, text: impl Into<String>) -> ChatResponse {
        self.response(Message::assistant(text), StopReason::EndTurn)
    }

    /// A reply with one tool call (stop reason tool use) in this model's name and
    /// usage, for [`ScriptedModel::from_fn`]. Its id is `call_<id>` with a fresh
    /// random suffix, so calls of one conversation never share one.
    pub fn tool_call_response(&self, name: impl Into<String>, input: Value) -> ChatResponse {
        self.tool_calls_response([(name.into(), input)])
    }

    /// A reply with several tool calls, ids as in
    /// [`ScriptedModel::tool_call_response`].
    pub fn tool_calls_response<N: Into<String>>(&self, calls: impl IntoIterator<Item = (N, Value)>) -> ChatResponse {
        let content = calls
            .into_iter()
            .map(|(name, input)| {
                ContentBlock::ToolUse(ToolUse::new(format!("call_{:016x}", fastrand_u64()), name, input))
            })
            .collect();
        self.response(Message { role: Role::Assistant, content }, StopReason::ToolUse)
    }

    fn response(&self, message: Message, stop_reason: StopReason) -> ChatResponse {
        ChatResponse::new(message, stop_reason, self.inner.usage, self.inner.model_name.clone())
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        lock(&self.inner.requests).clone()
    }

    /// The last request received.
    pub fn last_request(&self) -> Option<ChatRequest> {
        lock(&self.inner.requests).last().cloned()
    }

    /// How many calls were answered.
    pub fn calls(&self) -> u64 {
        lock(&self.inner.totals).0
    }

    /// The usage of all replies given so far, summed.
    pub fn total_usage(&self) -> Usage {
        lock(&self.inner.totals).1
    }

    /// How many queued replies are left.
    pub fn remaining(&self) -> usize {
        lock(&self.inner.replies).len()
    }

    /// Panics unless every queued reply was used.
    #[track_caller]
    pub fn assert_finished(&self) {
        let left = self.remaining();
        assert!(left == 0, "the scripted model still has {left} unused replies");
    }
}

#[async_trait::async_trait]
impl ChatModel for ScriptedModel {
    fn provider(&self) -> &'static str {
        "scripted"
    }

    fn structured_output(&self) -> bool {
        self.inner.structured
    }

    /// Streams the reply as a provider would: its text in word-sized pieces, then
    /// each tool call, then the whole response.
    fn stream<'a>(&'a self, request: &'a ChatRequest) -> BoxStream<'a, Result<StreamEvent, LlmError>> {
        futures::stream::once(async move { self.chat(request).await })
            .flat_map(|r| {
                let events: Vec<Result<StreamEvent, LlmError>> = match r {
                    Ok(resp) => word_pieces(replay(resp)).into_iter().map(Ok).collect(),
                    Err(e) => vec![Err(e)],
                };
                futures::stream::iter(events)
            })
            .boxed()
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        if let Some(latency) = self.inner.latency {
            tokio::time::sleep(latency).await;
        }
        if self.inner.record {
            lock(&self.inner.requests).push(request.clone());
        }
        let response = match &self.inner.function {
            Some(f) => f(request)?,
            None => {
                let mut replies = lock(&self.inner.replies);
                // A run resumed in a new process (a new model, its queue full) is at
                // the turn its conversation has reached: the replies it already had
                // are skipped.
                let answered = request.messages.iter().filter(|m| m.role == Role::Assistant).count();
                while self.inner.given.load(Ordering::Relaxed) < answered && replies.pop_front().is_some() {
                    self.inner.given.fetch_add(1, Ordering::Relaxed);
                }
                let reply = replies.pop_front().ok_or_else(|| LlmError::Script {
                    model: request.model.clone(),
                    message: "no scripted reply is left for this request".to_owned(),
                })?;
                self.inner.given.fetch_add(1, Ordering::Relaxed);
                reply
            }
        };
        let mut totals = lock(&self.inner.totals);
        totals.0 = totals.0.saturating_add(1);
        totals.1 += response.usage;
        Ok(response)
    }
}

/// Splits each text delta into pieces of one word and the spaces after it.
fn word_pieces(events: Vec<StreamEvent>) -> Vec<StreamEvent> {
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        match event {
            StreamEvent::TextDelta { index, text } => {
                let mut rest = text.as_str();
                while !rest.is_empty() {
                    let word_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                    let end = rest[word_end..].find(|c: char| !c.is_whitespace()).map_or(rest.len(), |n| word_end + n);
                    out.push(StreamEvent::TextDelta { index, text: rest[..end].to_owned() });
                    rest = &rest[end..];
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// A random number for call ids, without a dependency: the standard library's
/// randomly seeded hasher, fed a counter.
fn fastrand_u64() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}
