//! Traces to OpenTelemetry: every run's spans exported over OTLP in one call.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318), OTEL_SERVICE_NAME
//! // and OTEL_EXPORTER_OTLP_HEADERS are read as every OpenTelemetry SDK reads them;
//! // RUST_LOG filters what is logged and exported (default `info`).
//! let otel = loopstack::otel::init()?;
//! // ... run agents and workflows ...
//! otel.shutdown().await?; // sends what is still buffered
//! # Ok(())
//! # }
//! ```
//!
//! [`init`] installs a global `tracing` subscriber that logs to stderr (as
//! `tracing_subscriber::fmt` does) and exports spans over OTLP/HTTP with protobuf.
//! To compose your own subscriber, take [`Otel::layer`] instead.
//!
//! What is exported follows OpenTelemetry's
//! [GenAI conventions](https://opentelemetry.io/docs/specs/semconv/gen-ai/):
//!
//! | span | name | attributes |
//! |------|------|------------|
//! | a drive of an agent's run | `invoke_agent {agent}` | `gen_ai.operation.name` = `invoke_agent`, `gen_ai.agent.name`, `gen_ai.conversation.id` (the run id), `workflow`, `run_id` |
//! | a drive of another workflow's run | `invoke_workflow {workflow}` | `gen_ai.operation.name` = `invoke_workflow`, `gen_ai.workflow.name`, `gen_ai.conversation.id` (the run id), `workflow`, `run_id` |
//! | a model turn | `chat {model}` (kind client) | `gen_ai.operation.name` = `chat`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.conversation.id`, `gen_ai.usage.input_tokens` (cached tokens included) and `gen_ai.usage.output_tokens` (integers), `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.cache_creation.input_tokens` and `gen_ai.usage.reasoning.output_tokens` (when the provider reports them), `gen_ai.response.finish_reasons`, `gen_ai.agent.name`, `latency_ms` |
//! | a tool call | `execute_tool {tool}` | `gen_ai.operation.name` = `execute_tool`, `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.type`, `outcome`, `duration_ms`; status error and `error.type` when it failed |
//! | a transition | `loopstack.transition` | `transition`, `from`, `to`, `step` |
//!
//! A run is one conversation (`gen_ai.conversation.id` is its run id): a handoff
//! keeps it (the turns of the agent handed to are in the same run), a child run (a
//! workflow or agent called as a tool) has its own. `invoke_workflow` is the
//! conventions' operation for a workflow that is not an agent.
//!
//! With [`Otel::metrics`], the GenAI client metrics are exported beside the spans:
//! `gen_ai.client.token.usage` (histogram of tokens, `gen_ai.token.type` = `input`
//! or `output`) and `gen_ai.client.operation.duration` (histogram, seconds), each
//! with `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`,
//! and `gen_ai.response.model` or `error.type`, recorded by every model turn (see
//! [`llm::otel`](crate::llm::otel)). Without it nothing is recorded.
//!
//! Each run is one trace however many drives it takes, on whichever workers and
//! across restarts: the run keeps the trace context of the span that created it (a
//! request handler's span, or the parent run's for a child run, or a `start
//! {workflow}` span of its own), and every drive continues it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Why traces could not be set up or sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The exporter could not be built (a bad endpoint, header or setting).
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(String),
    /// The thread that sends the spans could not be started.
    #[error("cannot start the OTLP export thread: {0}")]
    Thread(String),
    /// A global `tracing` subscriber was already installed.
    #[error("cannot install the tracing subscriber: {0}")]
    Subscriber(String),
    /// `RUST_LOG` (or the filter given) is not a valid filter.
    #[error("invalid log filter: {0}")]
    Filter(String),
    /// Flushing or shutting down the exporter failed (the endpoint is unreachable, say).
    #[error("cannot send the remaining spans: {0}")]
    Shutdown(String),
}

/// Installs a global subscriber that logs to stderr and exports spans over OTLP,
/// configured from the standard `OTEL_*` environment variables: [`Otel::new`]`.init()`.
///
/// # Errors
/// [`OtelError`] when the exporter cannot be built or a subscriber is installed already.
pub fn init() -> Result<OtelGuard, OtelError> {
    Otel::new().init()
}

/// How spans are exported. Anything not set comes from the standard environment
/// variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
/// `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) and
/// then the SDK's defaults (`http://localhost:4318/v1/traces`).
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct Otel {
    endpoint: Option<String>,
    service_name: Option<String>,
    headers: HashMap<String, String>,
    filter: Option<String>,
    log: bool,
    timeout: Option<Duration>,
    metrics: bool,
}

impl Otel {
    /// Everything from the environment; logging to stderr on.
    pub fn new() -> Self {
        Self { log: true, ..Self::default() }
    }

    /// The collector's base URL (`http://collector:4318`); spans go to its
    /// `/v1/traces` and metrics ([`metrics`](Self::metrics)) to its `/v1/metrics`.
    /// A URL that already ends in `/v1/traces` is used as it is for the spans.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// Also exports the GenAI client metrics of the model turns
    /// (`gen_ai.client.token.usage`, `gen_ai.client.operation.duration`) over OTLP,
    /// to the collector's `/v1/metrics` (or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`),
    /// every `OTEL_METRIC_EXPORT_INTERVAL` milliseconds (default 60 s) and when the
    /// guard flushes or shuts down. Off by default: not every trace server takes
    /// metrics.
    pub fn metrics(mut self) -> Self {
        self.metrics = true;
        self
    }

    /// The `service.name` resource attribute.
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// A header sent with every export, such as an API key.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// What is logged and exported, in `RUST_LOG`'s syntax (default: `RUST_LOG`,
    /// else `info`). Only [`init`](Self::init) applies it.
    pub fn filter(mut self, directives: impl Into<String>) -> Self {
        self.filter = Some(directives.into());
        self
    }

    /// Export only: no log lines on stderr ([`init`](Self::init)).
    pub fn without_log(mut self) -> Self {
        self.log = false;
        self
    }

    /// How long one export may take (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Installs a global subscriber: the filter, the stderr log (unless
    /// [`without_log`](Self::without_log)) and the OTLP export.
    ///
    /// # Errors
    /// [`OtelError`] when the exporter cannot be built, the filter is invalid or a
    /// subscriber is installed already.
    pub fn init(self) -> Result<OtelGuard, OtelError> {
        let filter = match &self.filter {
            Some(f) => tracing_subscriber::EnvFilter::try_new(f),
            None => tracing_subscriber::EnvFilter::try_from_default_env()
                .or_else(|_| tracing_subscriber::EnvFilter::try_new("info")),
        }
        .map_err(|e| OtelError::Filter(e.to_string()))?;
        let log = self.log.then(|| tracing_subscriber::fmt::layer().with_writer(std::io::stderr));
        let (layer, guard) = self.layer()?;
        tracing_subscriber::registry()
            .with(filter)
            .with(log)
            .with(layer)
            .try_init()
            .map_err(|e| OtelError::Subscriber(e.to_string()))?;
        Ok(guard)
    }

    /// The export as a layer for a subscriber of your own, and the guard that
    /// flushes it.
    ///
    /// # Errors
    /// [`OtelError`] when the exporter cannot be built or its thread started.
    pub fn layer<S>(self) -> Result<(impl tracing_subscriber::Layer<S>, OtelGuard), OtelError>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        let sender = Sender::start(self.timeout.unwrap_or(Duration::from_secs(10)))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_http_client(sender.client.clone());
        let exporter = self.configure(exporter, "traces").build().map_err(|e| OtelError::Exporter(e.to_string()))?;
        let mut resource = Resource::builder();
        if let Some(name) = &self.service_name {
            resource = resource.with_service_name(name.clone());
        }
        let resource = resource.build();
        let meter = if self.metrics {
            let exporter = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_http_client(sender.client.clone());
            let exporter =
                self.configure(exporter, "metrics").build().map_err(|e| OtelError::Exporter(e.to_string()))?;
            let provider =
                SdkMeterProvider::builder().with_periodic_exporter(exporter).with_resource(resource.clone()).build();
            let installed = loopstack_llm::otel::install(&provider.meter("loopstack"));
            Some((provider, installed))
        } else {
            None
        };
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
        let tracer = provider.tracer("loopstack");
        let layer = tracing_opentelemetry::layer().with_tracer(tracer);
        Ok((layer, OtelGuard { inner: Some(Inner { provider, meter, sender }) }))
    }

    /// Sets what was given on an exporter of `signal` (`traces` or `metrics`); the
    /// rest it reads from the environment.
    fn configure<B: WithExportConfig + WithHttpConfig>(&self, mut builder: B, signal: &str) -> B {
        if let Some(url) = &self.endpoint {
            builder = builder.with_endpoint(signal_url(url, signal));
        }
        if !self.headers.is_empty() {
            builder = builder.with_headers(self.headers.clone());
        }
        if let Some(timeout) = self.timeout {
            builder = builder.with_timeout(timeout);
        }
        builder
    }
}

/// The URL `signal` (`traces`, `metrics`) is sent to for the endpoint `url`: its
/// `/v1/{signal}`, also when `url` already names another signal's path.
fn signal_url(url: &str, signal: &str) -> String {
    let url = url.trim_end_matches('/');
    let base = ["/v1/traces", "/v1/metrics"].iter().find_map(|path| url.strip_suffix(path)).unwrap_or(url);
    format!("{base}/v1/{signal}")
}

/// Keeps the export running; [`shutdown`](Self::shutdown) (or dropping it) sends
/// the spans still buffered and stops it.
#[must_use = "dropping the guard stops the export"]
pub struct OtelGuard {
    inner: Option<Inner>,
}

struct Inner {
    provider: SdkTracerProvider,
    /// The metrics' provider, and what keeps the model turns recording to it.
    meter: Option<(SdkMeterProvider, loopstack_llm::otel::Installed)>,
    sender: Sender,
}

impl fmt::Debug for OtelGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OtelGuard").field("running", &self.inner.is_some()).finish()
    }
}

impl OtelGuard {
    /// Sends the spans ended so far, and the metrics recorded so far, and waits
    /// until they are sent.
    ///
    /// # Errors
    /// [`OtelError::Shutdown`] when they could not be sent.
    pub async fn flush(&self) -> Result<(), OtelError> {
        let Some(inner) = &self.inner else { return Ok(()) };
        let provider = inner.provider.clone();
        let meter = inner.meter.as_ref().map(|(meter, _)| meter.clone());
        // The SDK waits on a thread of its own; not on the async runtime's.
        tokio::task::spawn_blocking(move || {
            let spans = provider.force_flush();
            let metrics = meter.map_or(Ok(()), |meter| meter.force_flush());
            spans.and(metrics)
        })
        .await
        .map_err(|e| OtelError::Shutdown(e.to_string()))?
        .map_err(|e| OtelError::Shutdown(e.to_string()))
    }

    /// Sends the spans still buffered, then stops the export.
    ///
    /// # Errors
    /// [`OtelError::Shutdown`] when they could not be sent.
    pub async fn shutdown(mut self) -> Result<(), OtelError> {
        let Some(inner) = self.inner.take() else { return Ok(()) };
        tokio::task::spawn_blocking(move || inner.stop()).await.map_err(|e| OtelError::Shutdown(e.to_string()))?
    }
}

impl Inner {
    fn stop(self) -> Result<(), OtelError> {
        // The model turns stop recording before the last export.
        let metrics = self.meter.map_or(Ok(()), |(meter, installed)| {
            drop(installed);
            meter.shutdown()
        });
        let spans = self.provider.shutdown();
        self.sender.stop();
        spans.and(metrics).map_err(|e| OtelError::Shutdown(e.to_string()))
    }
}

impl Drop for OtelGuard {
    /// Flushes as [`shutdown`](Self::shutdown) does, blocking this thread while it
    /// does (up to the export timeout): at the end of `main` that is what is wanted;
    /// in async code, prefer `shutdown().await`.
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            let _ = inner.stop();
        }
    }
}

/// The HTTP side of the export: a reqwest client on a current-thread runtime of its
/// own, since the SDK's batch processor exports from a plain thread (no runtime),
/// and a user's runtime may be gone (or be the thread that waits) at shutdown.
struct Sender {
    client: ExportClient,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sender {
    fn start(timeout: Duration) -> Result<Self, OtelError> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("loopstack-otlp".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
                match runtime {
                    Ok(runtime) => {
                        let _ = ready_tx.send(Ok(runtime.handle().clone()));
                        runtime.block_on(async {
                            let _ = stop_rx.await;
                        });
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| OtelError::Thread(e.to_string()))?;
        let handle = ready_rx
            .recv()
            .map_err(|e| OtelError::Thread(e.to_string()))?
            .map_err(|e| OtelError::Thread(e.to_string()))?;
        let client = loopstack_model::http::client_builder()
            .timeout(timeout)
            .build()
            .map_err(|e| OtelError::Exporter(e.to_string()))?;
        Ok(Self {
            client: ExportClient { client, handle: Arc::new(handle) },
            stop: Mutex::new(Some(stop_tx)),
            thread: Some(thread),
        })
    }

    fn stop(mut self) {
        if let Some(stop) = self.stop.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[derive(Clone)]
struct ExportClient {
    client: reqwest::Client,
    handle: Arc<tokio::runtime::Handle>,
}

impl fmt::Debug for ExportClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExportClient").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl HttpClient for ExportClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        self.handle
            .spawn(async move {
                let response = client.execute(request).await?;
                let mut builder = Response::builder().status(response.status().as_u16());
                for (name, value) in response.headers() {
                    builder = builder.header(name.as_str(), value.as_bytes());
                }
                let body = response.bytes().await?;
                Ok::<_, HttpError>(builder.body(body)?)
            })
            .await?
    }
}

#[cfg(test)]
mod tests {
    use super::signal_url;

    #[test]
    fn each_signal_goes_to_its_own_path_beside_the_endpoint() {
        assert_eq!(signal_url("http://collector:4318", "traces"), "http://collector:4318/v1/traces");
        assert_eq!(signal_url("http://collector:4318/", "metrics"), "http://collector:4318/v1/metrics");
        assert_eq!(signal_url("http://collector:4318/v1/traces", "traces"), "http://collector:4318/v1/traces");
        assert_eq!(signal_url("http://collector:4318/v1/traces/", "metrics"), "http://collector:4318/v1/metrics");
        assert_eq!(signal_url("https://host/otlp", "metrics"), "https://host/otlp/v1/metrics");
    }
}
