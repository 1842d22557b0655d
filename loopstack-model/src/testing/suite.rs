//! The provider conformance suite: scripted turns, the [`Imitation`] a provider's
//! test writes, and the [`ProviderSuite`] that runs every [`Case`] against it.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};

use super::cases;
use super::server::{Reply, Request, Server};
use crate::message::{Role, StopReason, ToolUse, Usage};
use crate::model::ChatModel;

/// The API key the suite gives the model ([`Setup::api_key`]); an imitation checks
/// that each request carries it where its API wants it.
pub const API_KEY: &str = "conformance-test-key-0123456789";

/// The model every request of the suite names ([`Seen::model`]).
pub const MODEL: &str = "conformance-model";

/// The longest one case may take: it normally takes milliseconds (seconds when the
/// model's retries really sleep); beyond, it fails as hanging.
const CASE_LIMIT: Duration = Duration::from_secs(120);

/// What the imitation answers one request with: a provider-neutral turn that the
/// [`Imitation`] writes in its API's shapes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Turn {
    /// A complete answer: as one JSON body, or as a whole event stream when the
    /// request asked for a stream ([`Seen::stream`]).
    Answer(Answer),
    /// A failure of this class.
    Fail(Failure),
    /// The answer's stream up to and including its first piece of text, then
    /// silence with the connection left open ([`Reply::then_hang`]). The suite drops
    /// the stream there and expects the client to hang up. (Only streamed requests
    /// are answered so by the imitation; the suite answers others with silence
    /// itself, [`Reply::stall`].)
    Hang(Answer),
}

/// A complete answer, provider-neutral.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Answer {
    /// What the model reasoned first, if anything: the imitation writes it as its
    /// API's reasoning (a thinking block, a reasoning item, a thought) carrying
    /// [`Thought::token`] as the opaque part the provider must send back unchanged.
    pub reasoning: Option<Thought>,
    /// The text, before the tool calls; empty for none.
    pub text: String,
    /// The tool calls, in order (several: parallel calls), with the ids the API
    /// gives them.
    pub calls: Vec<ToolUse>,
    /// Why the model stopped: [`StopReason::EndTurn`], [`StopReason::ToolUse`] or
    /// [`StopReason::MaxTokens`].
    pub stop: StopReason,
    /// The counts the API reports, in [`Usage`]'s terms (input tokens not counting
    /// the cached ones, output tokens counting the reasoning ones); the imitation
    /// writes those its API has, in its own terms (OpenAI's `prompt_tokens` counts
    /// the cached ones, say).
    pub usage: Usage,
    /// The model the API says answered.
    pub model: String,
    /// The response id the API gives.
    pub id: String,
}

impl Answer {
    /// A text answer that ended its turn, with small usage counts.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            reasoning: None,
            text: text.into(),
            calls: Vec::new(),
            stop: StopReason::EndTurn,
            usage: Usage::new(21, 9),
            model: format!("{MODEL}-2026-01-01"),
            id: "resp_conformance_1".into(),
        }
    }

    /// An answer of tool calls (and no text) that stopped for them.
    pub fn calls(calls: impl IntoIterator<Item = ToolUse>) -> Self {
        Self { calls: calls.into_iter().collect(), stop: StopReason::ToolUse, ..Self::text("") }
    }
}

/// Reasoning an [`Answer`] carries.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Thought {
    /// The reasoning as the model shows it (a summary on some APIs).
    pub text: String,
    /// The opaque part the API needs back unchanged in the next request (a
    /// signature, encrypted content, a thought signature), as the imitation writes
    /// it; it reports what came back in [`Part::Reasoning`].
    pub token: String,
}

impl Thought {
    /// Reasoning with this text and token.
    pub fn new(text: impl Into<String>, token: impl Into<String>) -> Self {
        Self { text: text.into(), token: token.into() }
    }
}

/// A class of failure, as the imitation's API signals it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Failure {
    /// The key is refused (HTTP 401, with the API's error body; 403 for APIs that
    /// refuse credentials so, such as Bedrock).
    Authentication,
    /// The request is refused (HTTP 400, with the API's error body).
    InvalidRequest,
    /// Too many requests (HTTP 429), with the wait the API asks for, in whichever
    /// header it uses (`retry-after` in whole seconds, `retry-after-ms`).
    RateLimited {
        /// The wait asked for (whole seconds: every API can say it).
        retry_after: Duration,
    },
    /// The API is overloaded, the way it says so (Anthropic's 529, others' 503).
    Overloaded,
    /// The server failed (HTTP 500, with the API's error body).
    Server,
    /// A successful status whose body has not the API's shape: JSON missing the
    /// required fields, or (streamed) an event that is not what the API sends.
    Malformed,
    /// The answer cut off: a body (or a stream, after its first text) announced
    /// longer than what is sent before the connection closes
    /// ([`Reply::truncated`]).
    Truncated(Answer),
}

impl Failure {
    /// The message the imitation puts in its API's error body (for the classes that
    /// have one), which the provider's error must carry.
    pub fn message(&self) -> &'static str {
        match self {
            Self::Authentication => "conformance: invalid x-api-key",
            Self::InvalidRequest => "conformance: messages: field required",
            Self::RateLimited { .. } => "conformance: rate limit exceeded",
            Self::Overloaded => "conformance: overloaded",
            Self::Server => "conformance: internal server error",
            Self::Malformed | Self::Truncated(_) => "",
        }
    }
}

/// What a request carried, read by the [`Imitation`] from its API's shapes: the
/// suite compares it with what it asked the model to send.
///
/// Start from [`Seen::default`] and fill in what the request has.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Seen {
    /// The model named (in the body, or in the path for APIs that put it there).
    pub model: String,
    /// Whether a stream was asked for.
    pub stream: bool,
    /// The system prompt.
    pub system: Option<String>,
    /// The output token limit.
    pub max_tokens: Option<u64>,
    /// The conversation, in order.
    pub messages: Vec<SeenMessage>,
    /// The names of the tools offered, in order.
    pub tools: Vec<String>,
    /// The JSON Schema the answer must follow, when one was sent.
    pub response_schema: Option<Value>,
    /// Whether the request asked the model to reason (a thinking budget, an
    /// effort other than none).
    pub thinking: bool,
}

impl Seen {
    /// Every part of every message, in order.
    pub fn parts(&self) -> impl Iterator<Item = &Part> + '_ {
        self.messages.iter().flat_map(|m| &m.parts)
    }

    /// The reasoning tokens sent back, in order.
    pub fn reasoning_tokens(&self) -> Vec<&str> {
        self.parts()
            .filter_map(|p| match p {
                Part::Reasoning { token } => Some(token.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// One message of a request, as the imitation read it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SeenMessage {
    /// Who wrote it; an API's tool-result message is [`Role::User`].
    pub role: Role,
    /// What it carried.
    pub parts: Vec<Part>,
}

impl SeenMessage {
    /// A message of these parts.
    pub fn new(role: Role, parts: Vec<Part>) -> Self {
        Self { role, parts }
    }
}

/// A part of a message, provider-neutral.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Part {
    /// Text.
    Text(String),
    /// An image sent inline.
    Image {
        /// Its media type, such as `image/png`.
        media_type: String,
        /// Its bytes in base64.
        data: String,
    },
    /// An image sent by URL.
    ImageUrl(String),
    /// A tool call the model made, sent back.
    ToolCall {
        /// Its id, where the API has one.
        id: Option<String>,
        /// The tool.
        name: String,
        /// The arguments, parsed.
        input: Value,
    },
    /// A tool's result.
    ToolResult {
        /// The id of the call it answers, where the API has one.
        id: Option<String>,
        /// The result's text as sent.
        content: String,
        /// Whether it is marked as an error, where the API has such a flag.
        is_error: Option<bool>,
    },
    /// Reasoning sent back: the opaque token it carried.
    Reasoning {
        /// What the provider sent back of [`Thought::token`].
        token: String,
    },
}

/// A provider's API imitated for the suite: it reads each request strictly and
/// writes each [`Turn`] in the API's shapes.
///
/// It holds no state between requests: the suite scripts the turns and keeps what
/// was seen. See the [module docs](super) for an example.
pub trait Imitation: Send + Sync + 'static {
    /// Checks a request as the API would (method, path, the key in its header
    /// ([`API_KEY`]), content type, required fields, the shapes of messages and
    /// tools) and reads what it carried. `Err` says what is wrong: the case fails with
    /// that message (and the model gets an HTTP 400).
    fn read(&self, request: &Request) -> Result<Seen, String>;

    /// The reply to a request, read as `seen`, for `turn`.
    fn reply(&self, turn: &Turn, seen: &Seen) -> Reply;
}

/// What a provider may lack: cases that need it are skipped, and the report says
/// so with the reason given to [`ProviderSuite::lacks`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// The model streams from the API (without it, [`ChatModel::stream`] replays
    /// [`ChatModel::chat`], and the imitation sees no streamed request).
    Streaming,
    /// Several tool calls in one answer.
    ParallelCalls,
    /// The API gives each call an id, which the provider keeps (without it the
    /// provider makes ids up: they are only checked to be distinct).
    CallIds,
    /// Images a user shows the model.
    Images,
    /// Images returned with a tool's result.
    ToolImages,
    /// Reasoning, returned to the API unchanged in the next request.
    Reasoning,
    /// Counts of input tokens read from the prompt cache.
    CacheReadTokens,
    /// Counts of input tokens written to the prompt cache.
    CacheWriteTokens,
    /// Counts of output tokens spent reasoning.
    ReasoningTokens,
    /// A hook receiving each retry delay instead of sleeping ([`Setup::sleep`]):
    /// without it the retry cases sleep for real and do not check the delays.
    RecordedSleeps,
    /// The API says how long to wait after a rate limit (a `retry-after` header, a
    /// retry delay in the body): without it a rate limit carries no wait and is
    /// retried after a backoff.
    RetryAfter,
}

impl Capability {
    /// Every capability.
    pub const ALL: &'static [Self] = &[
        Self::Streaming,
        Self::ParallelCalls,
        Self::CallIds,
        Self::Images,
        Self::ToolImages,
        Self::Reasoning,
        Self::CacheReadTokens,
        Self::CacheWriteTokens,
        Self::ReasoningTokens,
        Self::RecordedSleeps,
        Self::RetryAfter,
    ];
}

/// How the suite wants the model built: handed to the function given to
/// [`ProviderSuite::new`] for each model it needs.
#[derive(Clone)]
#[non_exhaustive]
pub struct Setup {
    /// The imitation's address, `http://127.0.0.1:<port>`: the model's base URL.
    pub base_url: String,
    /// The key to send: [`API_KEY`].
    pub api_key: String,
    /// How many times a failed request is retried (0: never).
    pub max_retries: u32,
    sleeps: Arc<Mutex<Vec<Duration>>>,
}

impl fmt::Debug for Setup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Setup")
            .field("base_url", &self.base_url)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

impl Setup {
    fn new(base_url: String, max_retries: u32) -> Self {
        Self { base_url, api_key: API_KEY.into(), max_retries, sleeps: Arc::default() }
    }

    /// The retry policy to give the model: [`Setup::max_retries`] retries, the
    /// default delays (which [`Setup::sleep`] records instead of waiting).
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn retry_policy(&self) -> crate::RetryPolicy {
        crate::RetryPolicy::new().max_retries(self.max_retries)
    }

    /// A sleep for the model's retries that records each delay and returns at once
    /// (the providers of this crate take it with their hidden `__sleep_with`).
    pub fn sleep(&self) -> impl Fn(Duration) -> std::future::Ready<()> + Send + Sync + 'static {
        let sleeps = self.sleeps.clone();
        move |delay| {
            sleeps.lock().unwrap_or_else(PoisonError::into_inner).push(delay);
            std::future::ready(())
        }
    }

    pub(super) fn slept(&self) -> Vec<Duration> {
        self.sleeps.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Builds the provider's model from a [`Setup`].
pub type ModelFactory = dyn Fn(&Setup) -> Arc<dyn ChatModel> + Send + Sync;

/// One case of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Case {
    /// A text answer: the request's model, system prompt, limit and text reach the
    /// API; the text, stop reason (also `max_tokens`), usage come back.
    Text,
    /// A streamed answer: its events add up to the response it ends with, which
    /// equals the non-streamed one.
    Streaming,
    /// A tool call, offered and made, then sent back with its result.
    ToolCalls,
    /// Two tool calls in one answer, plain and streamed, both sent back with their
    /// results.
    ParallelCalls,
    /// A user's image reaches the API, with its text.
    Images,
    /// A tool's image reaches the API, after the call it answers.
    ToolImages,
    /// Typed answers: with [`ChatModel::structured_output`] the schema is sent and
    /// the answer's JSON text comes back as is; without it no schema is sent.
    StructuredOutput,
    /// Reasoning comes back as a reasoning block of the provider, plain and
    /// streamed, and is sent back in the next request with its token unchanged.
    ReasoningRoundTrip,
    /// Cache and reasoning token counts are mapped to [`Usage`], plain and streamed.
    Usage,
    /// A refused key: [`LlmError::Authentication`](crate::LlmError::Authentication)
    /// (HTTP 401, or 403), not retried.
    AuthenticationError,
    /// A refused request: [`LlmError::InvalidRequest`](crate::LlmError::InvalidRequest),
    /// not retried.
    InvalidRequestError,
    /// Too many requests: [`LlmError::RateLimited`](crate::LlmError::RateLimited)
    /// with the wait asked for (none without [`Capability::RetryAfter`]), retryable.
    RateLimitedError,
    /// Overloaded: [`LlmError::Overloaded`](crate::LlmError::Overloaded) (or
    /// [`LlmError::Server`](crate::LlmError::Server) for APIs that say so with a
    /// 5xx), retryable.
    OverloadedError,
    /// A server error: [`LlmError::Server`](crate::LlmError::Server), retryable.
    ServerError,
    /// A body not in the API's shape:
    /// [`LlmError::MalformedResponse`](crate::LlmError::MalformedResponse), not retried.
    MalformedResponse,
    /// An answer cut off: an error (never a response), and the request not sent
    /// again.
    TruncatedResponse,
    /// Retry hints: a rate limit is retried after exactly the wait asked for, a
    /// server error after a backoff, and the call then succeeds.
    RetryHints,
    /// Dropping a call, or a stream, mid-answer closes its connection.
    Cancellation,
}

impl Case {
    /// Every case, in the order [`ProviderSuite::run`] runs them.
    pub const ALL: &'static [Self] = &[
        Self::Text,
        Self::Streaming,
        Self::ToolCalls,
        Self::ParallelCalls,
        Self::Images,
        Self::ToolImages,
        Self::StructuredOutput,
        Self::ReasoningRoundTrip,
        Self::Usage,
        Self::AuthenticationError,
        Self::InvalidRequestError,
        Self::RateLimitedError,
        Self::OverloadedError,
        Self::ServerError,
        Self::MalformedResponse,
        Self::TruncatedResponse,
        Self::RetryHints,
        Self::Cancellation,
    ];

    /// The case's name in snake_case, as the report shows it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Streaming => "streaming",
            Self::ToolCalls => "tool_calls",
            Self::ParallelCalls => "parallel_calls",
            Self::Images => "images",
            Self::ToolImages => "tool_images",
            Self::StructuredOutput => "structured_output",
            Self::ReasoningRoundTrip => "reasoning_round_trip",
            Self::Usage => "usage",
            Self::AuthenticationError => "authentication_error",
            Self::InvalidRequestError => "invalid_request_error",
            Self::RateLimitedError => "rate_limited_error",
            Self::OverloadedError => "overloaded_error",
            Self::ServerError => "server_error",
            Self::MalformedResponse => "malformed_response",
            Self::TruncatedResponse => "truncated_response",
            Self::RetryHints => "retry_hints",
            Self::Cancellation => "cancellation",
        }
    }

    /// What the case needs; it is skipped when the provider lacks one.
    pub fn needs(self) -> &'static [Capability] {
        match self {
            Self::ParallelCalls => &[Capability::ParallelCalls],
            Self::Images => &[Capability::Images],
            Self::ToolImages => &[Capability::Images, Capability::ToolImages],
            Self::ReasoningRoundTrip => &[Capability::Reasoning],
            _ => &[],
        }
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How one case went.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Every check held.
    Passed,
    /// Not run: the provider lacks what it needs (the reason given).
    Skipped(String),
    /// A check failed: what was expected and what happened.
    Failed(String),
}

/// The outcome of each case run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "a report says nothing unless it is read: call `assert_passed`"]
pub struct Report {
    /// The provider's name, as its model gives it.
    pub provider: String,
    /// Each case run with its outcome, in order.
    pub outcomes: Vec<(Case, Outcome)>,
}

impl Report {
    /// The cases that failed, with why.
    pub fn failures(&self) -> Vec<(Case, &str)> {
        self.outcomes
            .iter()
            .filter_map(|(case, outcome)| match outcome {
                Outcome::Failed(why) => Some((*case, why.as_str())),
                _ => None,
            })
            .collect()
    }

    /// The cases that were skipped, with why.
    pub fn skipped(&self) -> Vec<(Case, &str)> {
        self.outcomes
            .iter()
            .filter_map(|(case, outcome)| match outcome {
                Outcome::Skipped(why) => Some((*case, why.as_str())),
                _ => None,
            })
            .collect()
    }

    /// Prints the report (so skipped cases show in the test's output) and panics
    /// with every failure when a case failed.
    #[track_caller]
    pub fn assert_passed(&self) {
        println!("{self}");
        let failures = self.failures();
        if !failures.is_empty() {
            let list: Vec<String> = failures.iter().map(|(case, why)| format!("- {case}: {why}")).collect();
            panic!(
                "{} of {} conformance cases failed for {}:\n{}",
                failures.len(),
                self.outcomes.len(),
                self.provider,
                list.join("\n")
            );
        }
    }
}

/// One line per case: `ok`, `skipped (why)` or `FAILED: why`.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "provider conformance of {}:", self.provider)?;
        for (case, outcome) in &self.outcomes {
            match outcome {
                Outcome::Passed => writeln!(f, "  {case}: ok")?,
                Outcome::Skipped(why) => writeln!(f, "  {case}: skipped ({why})")?,
                Outcome::Failed(why) => writeln!(f, "  {case}: FAILED: {why}")?,
            }
        }
        Ok(())
    }
}

/// The conformance suite over one provider: its [`Imitation`] and a way to build its
/// model pointed at it. [`ProviderSuite::run`] runs the cases.
#[must_use = "the suite does nothing until `run` is awaited"]
pub struct ProviderSuite {
    imitation: Arc<dyn Imitation>,
    factory: Arc<ModelFactory>,
    lacks: Vec<(Capability, String)>,
    only: Option<Vec<Case>>,
}

impl fmt::Debug for ProviderSuite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderSuite").field("lacks", &self.lacks).field("only", &self.only).finish_non_exhaustive()
    }
}

impl ProviderSuite {
    /// The suite over the provider that `model` builds (pointed at
    /// [`Setup::base_url`], with [`Setup::api_key`], [`Setup::max_retries`] and,
    /// where it can, [`Setup::sleep`]), answered by `imitation`.
    pub fn new(
        imitation: impl Imitation,
        model: impl Fn(&Setup) -> Arc<dyn ChatModel> + Send + Sync + 'static,
    ) -> Self {
        Self { imitation: Arc::new(imitation), factory: Arc::new(model), lacks: Vec::new(), only: None }
    }

    /// Declares that the provider lacks `capability`, for this reason: the cases
    /// that need it are skipped, and the report shows the reason.
    pub fn lacks(mut self, capability: Capability, why: impl Into<String>) -> Self {
        self.lacks.push((capability, why.into()));
        self
    }

    /// Runs only these cases (all by default).
    pub fn only(mut self, cases: &[Case]) -> Self {
        self.only = Some(cases.to_vec());
        self
    }

    /// Runs the cases in turn, each against a fresh imitation server and within two
    /// minutes, and reports how each went; [`Report::assert_passed`] fails the test
    /// if one failed. Needs a Tokio runtime with its time driver (`#[tokio::test]`).
    pub async fn run(self) -> Report {
        let cases = self.only.clone().unwrap_or_else(|| Case::ALL.to_vec());
        let ctx = Context { imitation: self.imitation.clone(), factory: self.factory.clone(), lacks: self.lacks };
        let provider = (ctx.factory)(&Setup::new("http://127.0.0.1:9".into(), 0)).provider().to_owned();
        let mut report = Report { provider, outcomes: Vec::new() };
        for case in cases {
            let outcome = match case.needs().iter().find_map(|&c| ctx.lacking(c)) {
                Some(why) => Outcome::Skipped(why.to_owned()),
                None => match tokio::time::timeout(CASE_LIMIT, cases::run(case, &ctx)).await {
                    Ok(Ok(())) => Outcome::Passed,
                    Ok(Err(why)) => Outcome::Failed(why),
                    Err(_) => Outcome::Failed(format!("the case did not finish within {CASE_LIMIT:?}")),
                },
            };
            report.outcomes.push((case, outcome));
        }
        report
    }
}

/// What the cases run with.
pub(super) struct Context {
    imitation: Arc<dyn Imitation>,
    factory: Arc<ModelFactory>,
    lacks: Vec<(Capability, String)>,
}

impl Context {
    /// Why the provider lacks `capability`, if it does.
    pub(super) fn lacking(&self, capability: Capability) -> Option<&str> {
        self.lacks.iter().find(|(c, _)| *c == capability).map(|(_, why)| why.as_str())
    }

    pub(super) fn has(&self, capability: Capability) -> bool {
        self.lacking(capability).is_none()
    }

    /// Starts an imitation server scripted with `turns` and a model pointed at it,
    /// retrying `max_retries` times.
    pub(super) async fn start(&self, turns: Vec<Turn>, max_retries: u32) -> Session {
        let script = Arc::new(Script {
            turns: Mutex::new(turns.into()),
            seen: Mutex::default(),
            problems: Mutex::default(),
            arrived: tokio::sync::watch::channel(0).0,
        });
        let imitation = self.imitation.clone();
        let handler_script = script.clone();
        let server = Server::handle(move |request| answer(&*imitation, &handler_script, request)).await;
        let setup = Setup::new(server.url(), max_retries);
        let model = (self.factory)(&setup);
        Session { server, script, setup, model }
    }
}

/// The turns left, and what the imitation saw.
struct Script {
    turns: Mutex<VecDeque<Turn>>,
    seen: Mutex<Vec<Seen>>,
    /// What was wrong with requests: the imitation's refusals, requests beyond the
    /// script.
    problems: Mutex<Vec<String>>,
    /// How many requests arrived.
    arrived: tokio::sync::watch::Sender<usize>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Answers one request: the imitation reads it, and writes the next turn.
fn answer(imitation: &dyn Imitation, script: &Script, request: &Request) -> Reply {
    script.arrived.send_modify(|n| *n += 1);
    let refuse = |problem: String| {
        let body = json!({"error": {"type": "invalid_request_error", "message": problem}});
        lock(&script.problems).push(problem);
        Reply::json(400, body)
    };
    let seen = match imitation.read(request) {
        Ok(seen) => seen,
        Err(why) => return refuse(format!("the imitation refused request {}: {why}", *script.arrived.borrow())),
    };
    lock(&script.seen).push(seen.clone());
    let Some(turn) = lock(&script.turns).pop_front() else {
        return refuse(format!("request {} came after the scripted turns ran out", lock(&script.seen).len()));
    };
    match turn {
        // Not streamed: silence needs no shape of the API.
        Turn::Hang(_) if !seen.stream => Reply::stall(),
        turn => imitation.reply(&turn, &seen),
    }
}

/// One model against one scripted imitation server.
pub(super) struct Session {
    pub(super) server: Server,
    script: Arc<Script>,
    pub(super) setup: Setup,
    pub(super) model: Arc<dyn ChatModel>,
}

impl Session {
    /// What the imitation read of each request so far.
    pub(super) fn seen(&self) -> Vec<Seen> {
        lock(&self.script.seen).clone()
    }

    /// The requests' problems, if any, as a failure.
    pub(super) fn problems(&self) -> Result<(), String> {
        let problems = lock(&self.script.problems);
        if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
    }

    /// Checks that every turn was asked for once and no request was refused.
    pub(super) fn finish(&self) -> Result<(), String> {
        self.problems()?;
        let left = lock(&self.script.turns).len();
        if left > 0 {
            return Err(format!("{left} scripted turn(s) were never asked for"));
        }
        Ok(())
    }

    /// Waits (at most `limit`) until `n` requests arrived.
    pub(super) async fn arrived(&self, n: usize, limit: Duration) -> bool {
        let mut arrived = self.script.arrived.subscribe();
        tokio::time::timeout(limit, arrived.wait_for(|&seen| seen >= n)).await.is_ok_and(|r| r.is_ok())
    }
}
