//! OpenTelemetry's GenAI client metrics of the model turns (feature `otel`).
//!
//! Every model turn records `gen_ai.client.operation.duration` (seconds) and, when
//! the model answered, `gen_ai.client.token.usage` (tokens, one record for `input`
//! and one for `output` in `gen_ai.token.type`), as the
//! [GenAI metric conventions](https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-metrics/)
//! name them, with the bucket boundaries they advise. The attributes are
//! `gen_ai.operation.name` (`chat`), `gen_ai.provider.name`, `gen_ai.request.model`,
//! and `gen_ai.response.model` on success or `error.type` on failure. Input tokens
//! count the cached ones too (read and written), as the conventions ask.
//!
//! Nothing is recorded until [`install`] gives the instruments a meter:
//! `loopstack::otel` does when its metrics export is set up. Until then a turn
//! checks one lock and records nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};
use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Histogram, Meter};

use crate::error::{AgentError, LlmError};
use crate::message::Usage;

/// The instruments turns record to, and the id of the [`Installed`] that set them.
static INSTRUMENTS: RwLock<Option<(u64, Instruments)>> = RwLock::new(None);

#[derive(Clone)]
struct Instruments {
    tokens: Histogram<u64>,
    duration: Histogram<f64>,
}

/// Records the GenAI client metrics of every model turn in this process with
/// instruments of `meter`, until the value returned is dropped (or another install
/// replaces them).
pub fn install(meter: &Meter) -> Installed {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let tokens = meter
        .u64_histogram("gen_ai.client.token.usage")
        .with_unit("{token}")
        .with_description("Number of input and output tokens used.")
        .with_boundaries(
            [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
                .map(f64::from)
                .to_vec(),
        )
        .build();
    let duration = meter
        .f64_histogram("gen_ai.client.operation.duration")
        .with_unit("s")
        .with_description("GenAI operation duration.")
        .with_boundaries(vec![0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92])
        .build();
    *INSTRUMENTS.write().unwrap_or_else(PoisonError::into_inner) = Some((id, Instruments { tokens, duration }));
    Installed { id }
}

/// Keeps the instruments of [`install`] recording; dropping it stops them (unless
/// a later install replaced them).
#[derive(Debug)]
#[must_use = "dropping it stops the metrics"]
pub struct Installed {
    id: u64,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let mut current = INSTRUMENTS.write().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|(id, _)| *id == self.id) {
            *current = None;
        }
    }
}

/// One model turn being measured: nothing when no metrics are installed.
pub(crate) struct Measure(Option<(Instruments, Instant)>);

impl Measure {
    /// Starts the clock, if metrics are installed.
    pub(crate) fn start() -> Self {
        let instruments = INSTRUMENTS.read().unwrap_or_else(PoisonError::into_inner);
        Self(instruments.as_ref().map(|(_, instruments)| (instruments.clone(), Instant::now())))
    }

    /// The turn's model (`provider`, asked for `request_model`) answered as
    /// `response_model` with `usage`.
    pub(crate) fn answered(self, provider: &str, request_model: &str, response_model: &str, usage: &Usage) {
        let Some((instruments, started)) = self.0 else { return };
        let mut attributes = common(provider, request_model);
        attributes.push(KeyValue::new("gen_ai.response.model", response_model.to_owned()));
        instruments.duration.record(started.elapsed().as_secs_f64(), &attributes);
        let input = usage
            .input_tokens
            .saturating_add(usage.cache_read_input_tokens)
            .saturating_add(usage.cache_creation_input_tokens);
        for (kind, count) in [("input", input), ("output", usage.output_tokens)] {
            attributes.push(KeyValue::new("gen_ai.token.type", kind));
            instruments.tokens.record(count, &attributes);
            attributes.pop();
        }
    }

    /// The turn failed with `error`: the last model's, asked for `request_model`.
    pub(crate) fn failed(self, request_model: &str, error: &AgentError) {
        let Some((instruments, started)) = self.0 else { return };
        let llm = last_model_error(error);
        let mut attributes = common(llm.map_or("_OTHER", LlmError::provider), request_model);
        attributes.push(KeyValue::new("error.type", llm.map_or("_OTHER", error_type)));
        instruments.duration.record(started.elapsed().as_secs_f64(), &attributes);
    }
}

fn common(provider: &str, request_model: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::new("gen_ai.operation.name", "chat"),
        KeyValue::new("gen_ai.provider.name", provider.to_owned()),
        KeyValue::new("gen_ai.request.model", request_model.to_owned()),
    ]
}

/// The error of the last model a failed turn asked.
fn last_model_error(error: &AgentError) -> Option<&LlmError> {
    match error {
        AgentError::Llm(e) => Some(e),
        AgentError::AllModelsFailed { failures } => failures.last(),
        _ => None,
    }
}

/// A failed turn's `error.type`: the kind of model error, low in cardinality as
/// the conventions ask.
fn error_type(error: &LlmError) -> &'static str {
    error.kind()
}
