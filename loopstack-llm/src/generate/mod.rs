//! [`LlmGenerateText`]: one model turn from a workflow transition, the conversation
//! it reads ([`conversation`]) and the documents it saves ([`MESSAGE_DOCUMENT`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use loopstack_core::{EventKind, RunContext, SaveOptions, ToolRegistry};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tracing::Instrument as _;

use crate::error::AgentError;
use crate::error::LlmError;
use crate::message::{Message, StopReason, Usage, rename_duplicate_ids};
use crate::model::{ChatModel, ChatRequest, ChatResponse, ModelSettings, ResponseSchema, StreamEvent};

mod conversation;
mod options;
pub use conversation::*;
pub use options::*;

/// Makes one model turn from a transition: builds the request from the run's
/// conversation, offers only the listed tools (schemas from the registry, computed at
/// registration), saves the assistant message as a document (metadata: provider,
/// model, usage, stop reason) and returns it.
///
/// Tool call ids are made unique before the message is saved: a call that repeats the
/// id of an earlier call in the same reply gets the id `<id>_dup<n>` (`n` from 2), and
/// a warning is logged. Every call then has an id of its own, runs, and gets its own
/// result, and the conversation sent back to the provider stays consistent.
#[derive(Debug, Clone)]
pub struct LlmGenerateText {
    models: Models,
    tools: ToolRegistry,
    /// The replay record last built, by its fingerprint: an agent's runs send the
    /// same settings and tools, so each run's first reply writes its text instead
    /// of formatting every tool's entry again.
    recorded: Arc<std::sync::Mutex<Option<Recorded>>>,
}

/// A replay record's fingerprint and its JSON text.
type Recorded = (String, Arc<RawValue>);

impl LlmGenerateText {
    /// A step over these models and tools.
    pub fn new(models: Models, tools: ToolRegistry) -> Self {
        Self { models, tools, recorded: Arc::default() }
    }

    /// The replay record of `request`, whose fingerprint is `fingerprint`.
    fn record_of(&self, request: &ChatRequest, fingerprint: &str) -> Arc<RawValue> {
        let mut last = self.recorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((fp, config)) = &*last
            && fp == fingerprint
        {
            return config.clone();
        }
        // As its text: each message that records it writes the text as it is.
        let config: Arc<RawValue> = serde_json::value::to_raw_value(&crate::recording::config(request, fingerprint))
            .expect("a JSON value serializes")
            .into();
        *last = Some((fingerprint.to_owned(), config.clone()));
        config
    }

    /// The tools.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// The models.
    pub fn models(&self) -> &Models {
        &self.models
    }

    pub(crate) fn models_mut(&mut self) -> &mut Models {
        &mut self.models
    }

    /// Runs one turn.
    pub async fn call(&self, cx: &mut RunContext, options: &GenerateOptions) -> Result<GenerateResult, AgentError> {
        self.call_with(cx, options, &NO_EXTRAS).await
    }

    /// Runs one turn that also offers `extras`.
    ///
    /// When someone subscribed to run events
    /// ([`Runtime::subscribe`](loopstack_core::Runtime::subscribe)) the reply is
    /// streamed and each piece of text is reported as it arrives
    /// ([`EventKind::TextDelta`]); the turn's token usage is reported either way
    /// ([`EventKind::Usage`]). The result is the same whether streamed or not: a
    /// stream that breaks with a retryable error is asked again without streaming.
    pub async fn call_with(
        &self,
        cx: &mut RunContext,
        options: &GenerateOptions,
        extras: &TurnExtras,
    ) -> Result<GenerateResult, AgentError> {
        let turn = self.turn(cx, options, extras).await?;
        Ok(GenerateResult {
            message: Arc::unwrap_or_clone(turn.message),
            stop_reason: turn.stop_reason,
            usage: turn.usage,
            provider: turn.provider.to_owned(),
            model: turn.model,
            offered_tools: options.tools.clone(),
        })
    }

    /// [`LlmGenerateText::call_with`], with the message shared with the saved
    /// document: the agent's turns read it without a copy.
    pub(crate) async fn turn(
        &self,
        cx: &mut RunContext,
        options: &GenerateOptions,
        extras: &TurnExtras,
    ) -> Result<Turn, AgentError> {
        let model = self.models.get(&options.provider)?;
        // The chain is checked before the first model is asked, so that a fallback
        // that is not registered is an error at once, not when it is needed.
        let fallbacks = options
            .fallbacks
            .iter()
            .map(|f| Ok((self.models.get(&f.provider)?, f)))
            .collect::<Result<Vec<_>, AgentError>>()?;
        let mut tools = options
            .tools
            .iter()
            .map(|name| {
                self.tools.spec(name).map(|s| s.definition.clone()).ok_or_else(|| AgentError::UnknownTool {
                    tool: name.clone(),
                    available: self.tools.names().map(str::to_owned).collect(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        tools.extend(extras.tools.iter().cloned());
        let messages = match &extras.context {
            Some(window) => conversation_window(cx, options.conversation.as_deref(), window)?,
            None => conversation_named(cx, options.conversation.as_deref())?,
        };
        let mut request = ChatRequest::new(options.model.clone(), messages).tools(tools);
        request.settings.clone_from(&options.settings);
        request.response_schema.clone_from(&extras.response_schema);
        // What the turn sent besides the conversation, for replays: its fingerprint
        // and itself, with the first reply sent under it (the replies after it that
        // sent the same record nothing).
        // The record is built once the model answered, from the request as the first
        // model got it: a run in flight keeps only the fingerprint while it waits.
        let fingerprint = crate::recording::fingerprint(&request);
        let record = |request: &ChatRequest, cx: &RunContext| {
            let fingerprint = crate::recording::fingerprint_text(fingerprint);
            (!crate::recording::same_as_last(cx, options.conversation.as_deref(), &fingerprint))
                .then(|| self.record_of(request, &fingerprint))
        };

        #[cfg(feature = "otel")]
        let measure = crate::otel::Measure::start();
        // Named after OpenTelemetry's GenAI conventions, so an OTLP exporter (the
        // `otel` feature) sends what trace backends read: a span `chat {model}`.
        // None when nothing records it: a disabled span costs a call into the logger
        // at every enter, exit and drop while no subscriber is installed.
        let span = if tracing::level_enabled!(tracing::Level::INFO) {
            tracing::info_span!(
                "loopstack.llm",
                // Formatted only when the span is recorded.
                otel.name = tracing::field::display(format_args!("chat {}", options.model)),
                otel.kind = "client",
                gen_ai.operation.name = "chat",
                gen_ai.provider.name = model.provider(),
                gen_ai.request.model = %options.model,
                // The agent that has the conversation (a team's member), else the run's workflow.
                gen_ai.agent.name = extras.agent.unwrap_or(cx.workflow()),
                // The run is the conversation, whichever of a team's members speaks.
                gen_ai.conversation.id = %cx.run_id(),
                gen_ai.response.model = tracing::field::Empty,
                gen_ai.usage.input_tokens = tracing::field::Empty,
                gen_ai.usage.output_tokens = tracing::field::Empty,
                gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
                gen_ai.usage.cache_creation.input_tokens = tracing::field::Empty,
                gen_ai.usage.reasoning.output_tokens = tracing::field::Empty,
                gen_ai.response.finish_reasons = tracing::field::Empty,
                latency_ms = tracing::field::Empty,
            )
        } else {
            tracing::Span::none()
        };
        // The clock is read only for a span or metrics that record the latency.
        let started = (!span.is_disabled() || records_metrics(cx)).then(Instant::now);
        let first = ask(model.as_ref(), &request, cx).instrument(span.clone()).await;
        #[cfg(feature = "metrics")]
        if let (Some(metrics), Some(started)) = (cx.runtime().metrics(), started) {
            metrics.model_call(model.provider(), &options.model, started.elapsed(), first.is_err());
        }
        let (mut response, model, failures, recorded) = match first {
            Ok(response) => (response, model, Vec::new(), record(&request, cx)),
            Err(error) if fallbacks.is_empty() || !error.is_unavailable() => {
                let error = AgentError::from(error);
                #[cfg(feature = "otel")]
                measure.failed(&options.model, &error);
                return Err(error);
            }
            Err(error) => {
                // Before the fallbacks change the request's model.
                let recorded = record(&request, cx);
                // Boxed: only turns whose model failed pay for the chain's state.
                let fell_back = Box::pin(fall_back(model, &options.model, error, &fallbacks, &mut request, cx))
                    .instrument(span.clone())
                    .await;
                let (response, model, failures) = match fell_back {
                    Ok(fell_back) => fell_back,
                    Err(error) => {
                        #[cfg(feature = "otel")]
                        measure.failed(&request.model, &error);
                        return Err(error);
                    }
                };
                (response, model, failures, recorded)
            }
        };
        for (old, new) in rename_duplicate_ids(&mut response.message) {
            span.in_scope(|| tracing::warn!(id = %old, new_id = %new, "the model repeated a tool call id; renamed"));
        }
        // Nobody listens to a disabled span: its fields would only cost (tracing's
        // `log` feature turns each record into a check of the logger).
        if !span.is_disabled() {
            // As i64: tracing-opentelemetry exports a u64 field as a string.
            span.record("gen_ai.response.model", response.model.as_str());
            let usage = &response.usage;
            // The conventions' input tokens count the cached ones too.
            let input = usage
                .input_tokens
                .saturating_add(usage.cache_read_input_tokens)
                .saturating_add(usage.cache_creation_input_tokens);
            span.record("gen_ai.usage.input_tokens", loopstack_model::usage::as_i64(input));
            span.record("gen_ai.usage.output_tokens", loopstack_model::usage::as_i64(usage.output_tokens));
            // Only what the provider reported: an empty field is not exported.
            for (field, count) in [
                ("gen_ai.usage.cache_read.input_tokens", usage.cache_read_input_tokens),
                ("gen_ai.usage.cache_creation.input_tokens", usage.cache_creation_input_tokens),
                ("gen_ai.usage.reasoning.output_tokens", usage.reasoning_output_tokens),
            ] {
                if count > 0 {
                    span.record(field, loopstack_model::usage::as_i64(count));
                }
            }
            span.record("gen_ai.response.finish_reasons", response.stop_reason.as_str());
            let latency = started.map_or(Duration::ZERO, |started| started.elapsed());
            span.record("latency_ms", loopstack_model::usage::as_i64(latency.as_millis()));
        }
        #[cfg(feature = "otel")]
        measure.answered(model.provider(), &request.model, &response.model, &response.usage);

        let provider = model.provider();
        cx.emit(|| EventKind::Usage {
            provider: provider.to_owned(),
            model: response.model.clone(),
            input_tokens: response.usage.input_tokens,
            output_tokens: response.usage.output_tokens,
            cache_read_input_tokens: response.usage.cache_read_input_tokens,
            cache_creation_input_tokens: response.usage.cache_creation_input_tokens,
            reasoning_output_tokens: response.usage.reasoning_output_tokens,
        });
        #[cfg(feature = "metrics")]
        if let Some(metrics) = cx.runtime().metrics() {
            let usage = &response.usage;
            metrics.tokens(
                provider,
                &response.model,
                &[
                    ("input", usage.input_tokens),
                    ("output", usage.output_tokens),
                    ("cache_read", usage.cache_read_input_tokens),
                    ("cache_creation", usage.cache_creation_input_tokens),
                ],
            );
        }
        let meta = SaveOptions::new().metadata(&TurnMeta {
            agent: extras.agent,
            fallbacks: &failures,
            model: &response.model,
            provider,
            request: recorded.as_deref(),
            stop_reason: response.stop_reason.as_str(),
            usage: &response.usage,
        });
        // Kept shared in the context, so the steps after this turn read the message
        // without parsing it again.
        let message = Arc::new(response.message);
        save_shared_message(cx, message.clone(), options.conversation.as_deref(), meta)?;
        Ok(Turn { message, stop_reason: response.stop_reason, usage: response.usage, provider, model: response.model })
    }
}

/// The metadata of a model's message, written in one serialization (entries in the
/// order of their names, as a map of them would be written).
#[derive(Serialize)]
struct TurnMeta<'a> {
    /// The agent that took the turn (a team's member).
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<&'a str>,
    /// The models of the chain that failed before this one answered.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    fallbacks: &'a [Failure],
    model: &'a str,
    provider: &'a str,
    /// What the turn sent besides its messages, when it differs from the last turn's.
    #[serde(rename = "request", skip_serializing_if = "Option::is_none")]
    request: Option<&'a RawValue>,
    stop_reason: &'a str,
    usage: &'a Usage,
}

/// One model turn as [`LlmGenerateText::turn`] gives it: a [`GenerateResult`] whose
/// message is the saved document's, shared.
#[derive(Debug)]
pub(crate) struct Turn {
    pub(crate) message: Arc<Message>,
    pub(crate) stop_reason: StopReason,
    pub(crate) usage: Usage,
    pub(crate) provider: &'static str,
    pub(crate) model: String,
}

/// Whether the run's runtime records metrics (feature `metrics`).
fn records_metrics(cx: &RunContext) -> bool {
    #[cfg(feature = "metrics")]
    return cx.runtime().metrics().is_some();
    #[cfg(not(feature = "metrics"))]
    {
        let _ = cx;
        false
    }
}

/// One model's reply: streamed when someone subscribed to the run's events.
async fn ask(model: &dyn ChatModel, request: &ChatRequest, cx: &RunContext) -> Result<ChatResponse, LlmError> {
    if cx.events_enabled() {
        // Boxed: only subscribed runs stream, and its state would otherwise sit in
        // every model turn's future.
        Box::pin(streamed(model, request, cx)).await
    } else {
        model.chat(request).await
    }
}

/// A model of the chain that failed, as the saved message's metadata and
/// [`AgentError::AllModelsFailed`] list it.
#[derive(Debug, Serialize)]
pub(crate) struct Failure {
    provider: &'static str,
    model: String,
    error: String,
}

/// Asks the fallbacks in turn after the first model failed with `error`: the reply,
/// the model that gave it, and the failures before it.
async fn fall_back<'a>(
    first: &'a Arc<dyn ChatModel>,
    first_name: &str,
    error: LlmError,
    fallbacks: &[(&'a Arc<dyn ChatModel>, &ModelRef)],
    request: &mut ChatRequest,
    cx: &RunContext,
) -> Result<(ChatResponse, &'a Arc<dyn ChatModel>, Vec<Failure>), AgentError> {
    let mut errors = vec![(first.provider(), first_name.to_owned(), error)];
    for (model, to) in fallbacks {
        let (provider, from, error) = errors.last().expect("one failure at least");
        tracing::warn!(%error, next_provider = %to.provider, next_model = %to.model, "the model failed; falling back");
        cx.emit(|| EventKind::Custom {
            name: "model_fallback".into(),
            data: serde_json::json!({
                "provider": provider, "model": from, "error": error.to_string(),
                "next_provider": to.provider, "next_model": to.model,
            }),
        });
        request.model.clone_from(&to.model);
        match ask(model.as_ref(), request, cx).await {
            Ok(response) => {
                let failures = errors.iter().map(Failure::of).collect();
                return Ok((response, model, failures));
            }
            Err(error) => {
                let unavailable = error.is_unavailable();
                errors.push((model.provider(), to.model.clone(), error));
                if !unavailable {
                    break;
                }
            }
        }
    }
    Err(AgentError::AllModelsFailed { failures: errors.into_iter().map(|(_, _, error)| error).collect() })
}

impl Failure {
    fn of((provider, model, error): &(&'static str, String, LlmError)) -> Self {
        Self { provider, model: model.clone(), error: error.to_string() }
    }
}

/// Streams a reply, reporting its text as it arrives.
/// An error that breaks a stream after it started is not retried by the transport
/// (the reply had begun); a retryable one (overloaded, rate limited, a server error)
/// is, here, by asking again without streaming, which retries as a turn without a
/// subscriber would: the result does not depend on whether anyone listens. The text
/// already reported belongs to the broken reply; a [`EventKind::Custom`] event named
/// `stream_restarted` says so.
async fn streamed(model: &dyn ChatModel, request: &ChatRequest, cx: &RunContext) -> Result<ChatResponse, LlmError> {
    let mut stream = model.stream(request);
    // The calls being written: content index, id and tool name.
    let mut calls: Vec<(usize, String, String)> = Vec::new();
    let error = loop {
        match stream.next().await {
            Some(Ok(StreamEvent::TextDelta { text, .. })) => cx.emit(|| EventKind::TextDelta { text }),
            Some(Ok(StreamEvent::ReasoningDelta { text, .. })) => cx.emit(|| EventKind::ReasoningDelta { text }),
            Some(Ok(StreamEvent::ToolUseStart { index, id, name })) => {
                cx.emit(|| EventKind::ToolCallDelta {
                    call_id: id.clone(),
                    name: name.clone(),
                    partial_json: String::new(),
                });
                calls.push((index, id, name));
            }
            Some(Ok(StreamEvent::ToolInputDelta { index, partial_json })) => {
                if let Some((_, id, name)) = calls.iter().find(|(i, ..)| *i == index) {
                    cx.emit(|| EventKind::ToolCallDelta { call_id: id.clone(), name: name.clone(), partial_json });
                }
            }
            Some(Ok(StreamEvent::Done(response))) => return Ok(response),
            // Events a provider may add later are not shown.
            Some(Ok(_)) => {}
            Some(Err(e)) => break e,
            None => {
                break LlmError::MalformedResponse {
                    provider: model.provider(),
                    model: request.model.clone(),
                    message: "the stream ended without a complete response".to_owned(),
                };
            }
        }
    };
    drop(stream);
    if !error.is_retryable() {
        return Err(error);
    }
    tracing::warn!(%error, "the stream broke; asking again without streaming");
    cx.emit(|| EventKind::Custom {
        name: "stream_restarted".into(),
        data: serde_json::json!({ "error": error.to_string() }),
    });
    model.chat(request).await
}
