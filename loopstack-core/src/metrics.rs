//! Prometheus metrics of a runtime (feature `metrics`): what its drives, workers,
//! model calls and tools did, and, read from the store at each scrape, how many
//! runs there are by status and how many can move now.
//!
//! A runtime records nothing until it is given a [`Metrics`]
//! ([`Runtime::with_metrics`]): without one, a step costs a test of a pointer
//! that is null, no clock is read, no label is built and no lock is taken. With
//! one, each step, claim, model call and tool call updates an atomic counter or
//! histogram, found by its labels under a read lock.
//!
//! Recorded in this process, since it started (counters and histograms):
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `loopstack_drives_total` | `workflow`, `outcome` | drives that ended: `completed`, `waiting`, `failed`, `cancelled`, `released` (a shutdown gave the run back), `lost` (another driver took it), `refused` (its signal was refused) |
//! | `loopstack_step_duration_seconds` | `workflow`, `transition` | how long each transition ran (its commit not included) |
//! | `loopstack_claim_duration_seconds` | | how long a worker's look for work took in the store |
//! | `loopstack_runs_claimed_total` | | the runs workers claimed |
//! | `loopstack_model_call_duration_seconds` | `provider`, `model`, `outcome` | model calls, `ok` or `error`: the model a turn asks first, as the agent names it (its fallbacks are not timed) |
//! | `loopstack_model_tokens_total` | `provider`, `model`, `kind` | tokens: `input`, `output`, `cache_read`, `cache_creation`, under the model the reply names |
//! | `loopstack_model_cost_total` | `provider`, `model` | what the turns cost, in the currency of the agent's prices (turns of a model without a price are not counted) |
//! | `loopstack_tool_calls_total` | `tool`, `outcome` | an agent's tool calls, `ok` or `error` |
//!
//! Read from the store at each scrape ([`Metrics::render`]), the same in every
//! process over one store (take the `max` across them, not the `sum`):
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `loopstack_runs` | `workflow`, `status` | unfinished runs: `queued`, `running`, `waiting` ([`Store::count_runs`](crate::Store::count_runs)) |
//! | `loopstack_runs_runnable` | `workflow` | the runnable queue: runs a worker could claim now |
//! | `loopstack_schedule_lag_seconds` | `schedule` | how long past its due time each schedule that is not paused is; 0 for one not yet due |
//!
//! ```
//! # use loopstack_core::*;
//! # use loopstack_core::metrics::Metrics;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), StoreError> {
//! let metrics = Metrics::new();
//! let runtime = Runtime::with_store(MemoryStore::new()).with_metrics(metrics.clone());
//! // ... drive runs with `runtime`; here one is queued for a worker ...
//! # let input = serde_json::value::to_raw_value(&serde_json::json!({})).unwrap();
//! # runtime.store().create_run(NewRun::new(RunId::new(), "triage", "h", input).queued()).await?;
//! let text = metrics.render(&runtime).await?;
//! assert!(text.contains(r#"loopstack_runs{workflow="triage",status="queued"} 1"#));
//! assert!(text.contains(r#"loopstack_runs_runnable{workflow="triage"} 1"#));
//! # Ok(())
//! # }
//! ```

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::error::{RunError, StoreError};
use crate::runtime::{RunOutcome, Runtime};

/// The `Content-Type` of [`Metrics::render`]'s text: Prometheus' text format 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// A metric's labels: names and values. The values a runtime knows statically
/// (workflow and transition names) are borrowed, so that recording a step allocates
/// nothing once its series exists.
type Labels<const N: usize> = [(&'static str, Cow<'static, str>); N];

type Histograms<const N: usize> = Family<Labels<N>, Histogram, fn() -> Histogram>;

/// Where a runtime records its metrics, and what renders them for a scrape. Clones
/// share what they recorded; give one to each runtime of the process
/// ([`Runtime::with_metrics`]) and render it where it is served (`loopstack::serve`
/// answers `GET /metrics`).
#[derive(Clone)]
pub struct Metrics(Arc<Recorded>);

struct Recorded {
    registry: Registry,
    drives: Family<Labels<2>, Counter>,
    steps: Histograms<2>,
    claims: Histogram,
    claimed: Counter,
    model_calls: Histograms<3>,
    tokens: Family<Labels<3>, Counter>,
    cost: Family<Labels<2>, Counter<f64, AtomicU64>>,
    tool_calls: Family<Labels<2>, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Buckets from 1 ms to about 33 s: a step or a claim.
fn short() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Buckets from 50 ms to about 100 s: a model call.
fn long() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 2.0, 12))
}

fn outcome(error: bool) -> Cow<'static, str> {
    Cow::Borrowed(if error { "error" } else { "ok" })
}

impl Metrics {
    /// Nothing recorded yet.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let drives = Family::default();
        registry.register("loopstack_drives", "Drives that ended, by workflow and outcome", Family::clone(&drives));
        let steps: Histograms<2> = Family::new_with_constructor(short);
        let help = "How long transitions ran, by workflow and transition";
        registry.register_with_unit("loopstack_step_duration", help, Unit::Seconds, steps.clone());
        let claims = short();
        let help = "How long a worker's look for work took in the store";
        registry.register_with_unit("loopstack_claim_duration", help, Unit::Seconds, claims.clone());
        let claimed = Counter::default();
        registry.register("loopstack_runs_claimed", "Runs claimed by workers", claimed.clone());
        let model_calls: Histograms<3> = Family::new_with_constructor(long);
        let help = "How long model calls took, by provider, model and outcome";
        registry.register_with_unit("loopstack_model_call_duration", help, Unit::Seconds, model_calls.clone());
        let tokens = Family::default();
        let help = "Tokens of model calls, by provider, model and kind (input, output, cache_read, cache_creation)";
        registry.register("loopstack_model_tokens", help, Family::clone(&tokens));
        let cost = Family::default();
        let help = "What model calls cost by the agents' prices, by provider and model";
        registry.register("loopstack_model_cost", help, Family::clone(&cost));
        let tool_calls = Family::default();
        registry.register(
            "loopstack_tool_calls",
            "Tool calls, by tool and outcome (ok, error)",
            Family::clone(&tool_calls),
        );
        Self(Arc::new(Recorded { registry, drives, steps, claims, claimed, model_calls, tokens, cost, tool_calls }))
    }

    /// Renders every metric in Prometheus' text format ([`CONTENT_TYPE`]): those
    /// recorded, and those read from `runtime`'s store now (two queries: the run
    /// counts, [`Store::count_runs`](crate::Store::count_runs), and the schedules).
    /// An error of the store is the scrape's error.
    pub async fn render(&self, runtime: &Runtime) -> Result<String, StoreError> {
        let now = runtime.now();
        let counts = runtime.store().count_runs(now).await?;
        let schedules = match runtime.store().list_schedules().await {
            Ok(schedules) => schedules,
            Err(StoreError::SchedulesUnsupported) => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut scraped = Registry::default();
        let runs = Family::<Labels<2>, Gauge>::default();
        let runnable = Family::<Labels<1>, Gauge>::default();
        for count in counts {
            let workflow: Cow<'static, str> = Cow::Owned(count.workflow);
            let status = Cow::Borrowed(count.status.as_str());
            runs.get_or_create(&[("workflow", workflow.clone()), ("status", status)]).set(gauge(count.runs));
            runnable.get_or_create(&[("workflow", workflow)]).inc_by(gauge(count.runnable));
        }
        let help = "Unfinished runs in the store, by workflow and status (queued, running, waiting)";
        scraped.register("loopstack_runs", help, runs);
        let help = "Runs in the store a worker could claim now, by workflow";
        scraped.register("loopstack_runs_runnable", help, runnable);
        let lag = Family::<Labels<1>, Gauge<f64, AtomicU64>>::default();
        for schedule in schedules.into_iter().filter(|s| !s.paused) {
            let late = now.as_millis().saturating_sub(schedule.next_due.as_millis()).max(0);
            #[allow(clippy::cast_precision_loss)]
            lag.get_or_create(&[("schedule", Cow::Owned(schedule.id))]).set(late as f64 / 1000.0);
        }
        let help = "How long past its due time each schedule that is not paused is";
        scraped.register_with_unit("loopstack_schedule_lag", help, Unit::Seconds, lag);
        let mut text = String::new();
        let written = prometheus_text::encode(&mut text, &scraped)
            .and_then(|()| prometheus_text::encode(&mut text, &self.0.registry));
        // Writing to a String fails only if a value's own formatting does.
        written.map_err(|e| StoreError::Corrupt(format!("the metrics could not be written: {e}")))?;
        Ok(text)
    }

    /// Records a drive of `workflow` that ended with `outcome`.
    pub(crate) fn drive_ended(&self, workflow: &'static str, outcome: &'static str) {
        self.0
            .drives
            .get_or_create(&[("workflow", Cow::Borrowed(workflow)), ("outcome", Cow::Borrowed(outcome))])
            .inc();
    }

    /// Records a transition of `workflow` that ran for `took`.
    pub(crate) fn step(&self, workflow: &'static str, transition: &'static str, took: Duration) {
        let labels = [("workflow", Cow::Borrowed(workflow)), ("transition", Cow::Borrowed(transition))];
        self.0.steps.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// Records a worker's look for work that took `took` and claimed `claimed` runs.
    pub(crate) fn claim(&self, took: Duration, claimed: usize) {
        self.0.claims.observe(took.as_secs_f64());
        self.0.claimed.inc_by(claimed as u64);
    }

    /// Records a call to `model` of `provider` that took `took`, and whether it
    /// failed. For the model layer (`loopstack-llm`), which calls it for each model
    /// call of a runtime with metrics.
    pub fn model_call(&self, provider: &'static str, model: &str, took: Duration, error: bool) {
        let labels = [
            ("provider", Cow::Borrowed(provider)),
            ("model", Cow::Owned(model.to_owned())),
            ("outcome", outcome(error)),
        ];
        self.0.model_calls.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// Records the tokens of one model call, by kind: `input`, `output`,
    /// `cache_read` or `cache_creation`. Kinds of 0 tokens add no series.
    pub fn tokens(&self, provider: &'static str, model: &str, tokens: &[(&'static str, u64)]) {
        let model = Cow::<'static, str>::Owned(model.to_owned());
        for &(kind, count) in tokens.iter().filter(|(_, count)| *count > 0) {
            let labels =
                [("provider", Cow::Borrowed(provider)), ("model", model.clone()), ("kind", Cow::Borrowed(kind))];
            self.0.tokens.get_or_create(&labels).inc_by(count);
        }
    }

    /// Records what one model call cost.
    pub fn cost(&self, provider: &'static str, model: &str, cost: f64) {
        let labels = [("provider", Cow::Borrowed(provider)), ("model", Cow::Owned(model.to_owned()))];
        self.0.cost.get_or_create(&labels).inc_by(cost);
    }

    /// Records a call of `tool`, and whether it failed.
    pub fn tool_call(&self, tool: &str, error: bool) {
        let labels = [("tool", Cow::Owned(tool.to_owned())), ("outcome", outcome(error))];
        self.0.tool_calls.get_or_create(&labels).inc();
    }
}

/// A count as a gauge's value.
fn gauge(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// The `outcome` label of a drive that ended with `outcome`.
pub(crate) fn drive_outcome(outcome: &Result<RunOutcome, RunError>) -> &'static str {
    match outcome {
        Ok(RunOutcome::Completed) => "completed",
        Ok(RunOutcome::Waiting { .. }) => "waiting",
        Ok(RunOutcome::Released) => "released",
        Ok(RunOutcome::Queued { .. }) => "queued",
        // The run ended otherwise: its transition stopped it.
        Ok(_) => "stopped",
        Err(
            RunError::InvalidSignalPayload { .. } | RunError::UnknownSignal { .. } | RunError::SignalRefused { .. },
        ) => "refused",
        Err(RunError::Store(e)) if e.is_lost_run() => "lost",
        Err(RunError::Cancelled { .. }) => "cancelled",
        Err(_) => "failed",
    }
}
