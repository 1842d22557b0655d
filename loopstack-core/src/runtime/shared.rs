//! What a runtime's clones share: its store, settings, events, registered workflows
//! and secrets, behind methods that say what the runtime does with them.
//!
//! [`Runtime`](super::Runtime) is a handle over one `Arc<Shared>` (as tokio's
//! `Handle` wraps its scheduler's): the fields here are private, so the driver, the
//! run loop and the worker reach them only through these methods, each a trivial
//! `#[inline]` getter or a small operation, costing nothing per step.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use super::registry::{Drivable, Registry};
use crate::events::EventHub;
use crate::secrets::Secrets;
use crate::store::{Lease, Store, Timestamp};
use crate::workflow::Workflow;

/// What a runtime reads the time from for timers, leases and step timestamps: the
/// system clock unless one was set ([`Runtime::clock`](super::Runtime::clock)).
/// Read at every step, so the system clock is a direct call, not a closure's.
#[derive(Clone, Default)]
pub(crate) struct Clock(Option<Arc<dyn Fn() -> Timestamp + Send + Sync>>);

impl Clock {
    /// A clock that reads `now`.
    pub(super) fn new(now: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(now)))
    }

    /// The current time by this clock.
    #[inline]
    pub(crate) fn now(&self) -> Timestamp {
        match &self.0 {
            None => Timestamp::now(),
            Some(now) => now(),
        }
    }
}

/// How a registered workflow's input is read from JSON, when it can be.
type FromJson<W> = fn(serde_json::Value) -> Result<<W as Workflow>::Input, serde_json::Error>;

/// How long a worker's lease lasts when its runtime takes none.
const WORKER_LEASE: Duration = Duration::from_secs(30);

/// The lease a drive holds and renews: whose it is and how long it lasts unrenewed.
pub(crate) struct LeaseCfg {
    pub(crate) owner: Arc<str>,
    pub(crate) duration: Duration,
}

impl LeaseCfg {
    /// A lease of this drive's, running out `duration` after `now`.
    pub(crate) fn from(&self, now: Timestamp) -> Lease {
        Lease { owner: self.owner.to_string(), until: now + self.duration }
    }
}

/// What a runtime's clones share. Cloned only when a builder method of a runtime
/// whose `Arc` is shared changes a setting (`Arc::make_mut`).
#[derive(Clone)]
pub(crate) struct Shared {
    store: Arc<dyn Store>,
    max_steps: u64,
    owner: Arc<str>,
    lease: Option<Duration>,
    clock: Clock,
    events: EventHub,
    registry: Registry,
    child_concurrency: usize,
    secrets: Secrets,
    /// Where steps, claims and drives are recorded; `None` records nothing.
    #[cfg(feature = "metrics")]
    metrics: Option<crate::metrics::Metrics>,
}

impl Shared {
    /// The settings of a new runtime over `store`: its lease, the system clock, a
    /// random owner name, no workflows and no secrets.
    pub(super) fn new(store: Arc<dyn Store>) -> Self {
        let lease = store.lease_duration();
        let owner = format!("{}:{}:{:08x}", host_name(), std::process::id(), fastrand::u32(..));
        let events = EventHub::new(&store);
        Self {
            store,
            max_steps: super::DEFAULT_MAX_STEPS,
            owner: owner.into(),
            lease,
            clock: Clock::default(),
            events,
            registry: Registry::default(),
            child_concurrency: super::DEFAULT_CHILD_CONCURRENCY,
            secrets: Secrets::new(),
            #[cfg(feature = "metrics")]
            metrics: None,
        }
    }

    // ------------------------------------------------------------ settings

    pub(super) fn set_max_steps(&mut self, max_steps: u64) {
        self.max_steps = max_steps;
    }

    pub(super) fn set_lease(&mut self, lease: Option<Duration>) {
        self.lease = lease;
    }

    pub(super) fn set_owner(&mut self, owner: Arc<str>) {
        self.owner = owner;
    }

    pub(super) fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    #[cfg(feature = "metrics")]
    pub(super) fn set_metrics(&mut self, metrics: crate::metrics::Metrics) {
        self.metrics = Some(metrics);
    }

    pub(super) fn set_child_concurrency(&mut self, concurrency: usize) {
        self.child_concurrency = concurrency.max(1);
    }

    /// Registers `workflow` by its name; a name taken already is refused.
    pub(super) fn register<W: Workflow>(
        &mut self,
        workflow: Arc<W>,
        from_json: Option<FromJson<W>>,
    ) -> Result<(), crate::RegistryError> {
        self.registry.insert(workflow, from_json)
    }

    // ------------------------------------------------------------ reads

    /// The store runs are kept in.
    #[inline]
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The step limit of a drive that sets none.
    #[inline]
    pub(super) fn max_steps(&self) -> u64 {
        self.max_steps
    }

    /// The name this runtime's leases carry.
    #[inline]
    pub(super) fn owner(&self) -> &str {
        &self.owner
    }

    /// How long a drive's lease lasts unrenewed, if drives take one.
    #[inline]
    pub(super) fn lease_duration(&self) -> Option<Duration> {
        self.lease
    }

    /// The lease a drive takes and renews, if drives take one (once per drive).
    pub(super) fn drive_lease(&self) -> Option<LeaseCfg> {
        self.lease.map(|duration| LeaseCfg { owner: self.owner.clone(), duration })
    }

    /// The lease a worker claims runs with, from now: the runtime's duration, or 30
    /// s when it takes none (a worker always leases what it claims).
    pub(super) fn worker_lease(&self) -> Lease {
        Lease { owner: self.owner.to_string(), until: self.now() + self.lease.unwrap_or(WORKER_LEASE) }
    }

    /// The current time by this runtime's clock.
    #[inline]
    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The clock, for what reads the time while it runs (a lease's heartbeat).
    #[inline]
    pub(super) fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The run events' subscribers.
    #[inline]
    pub(crate) fn events(&self) -> &EventHub {
        &self.events
    }

    /// The registered workflow of this name.
    #[inline]
    pub(super) fn workflow(&self, name: &str) -> Option<&Arc<dyn Drivable>> {
        self.registry.get(name)
    }

    /// The registered workflows, for debug output.
    pub(super) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// How many child runs one drive drives at once.
    #[inline]
    pub(super) fn child_concurrency(&self) -> usize {
        self.child_concurrency
    }

    /// Where this runtime records its metrics, if anywhere.
    #[cfg(feature = "metrics")]
    #[inline]
    pub(crate) fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        self.metrics.as_ref()
    }

    /// The secrets kept out of what runs record.
    #[inline]
    pub(crate) fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// `text` with the secrets redacted (borrowed when there is none in it).
    #[inline]
    pub(super) fn redact_text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.secrets.redact(text)
    }
}

/// This machine's name, for the default owner of a runtime's leases: what tells an
/// operator which worker holds a run (a pod's name under Kubernetes). Read once.
fn host_name() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .or_else(|| std::env::var("COMPUTERNAME").ok())
            .map(|name| name.trim().to_owned())
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "localhost".to_owned())
    })
}
