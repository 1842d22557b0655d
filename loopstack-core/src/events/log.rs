//! Run events through the store's event log, for subscribers in other processes.
//!
//! A runtime over a store that keeps a log ([`Store::has_event_log`]) has a
//! [`LogLink`], and two background tasks at most, each started only when needed:
//!
//! - The **publisher**, started by the first drive: every [`LISTENER_CHECK`] it asks
//!   the store whether anyone, in any process, listens (one read); while someone
//!   does, the runtime's events are queued as they are emitted and the publisher
//!   appends what is queued in one write per batch (text deltas come in dozens a
//!   second: they share a write), and prunes the log every
//!   [`PRUNE_EVERY`](crate::store::PRUNE_EVERY). While nobody listens, nothing is
//!   queued and nothing written.
//! - The **follower**, started by the first subscriber: it keeps the runtime's row in
//!   the store's listener table fresh (so that drivers everywhere publish), reads the
//!   log after its cursor as the store wakes it ([`Store::wait_events`]), and hands the
//!   events that other runtimes wrote to this runtime's subscribers (its own events
//!   reached them directly). It stops, and removes its row, when the last
//!   subscriber is gone.
//!
//! Both tasks hold the runtime's state weakly: they end when the runtime is dropped.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use super::RunEvent;
use crate::store::{EventRetention, PRUNE_EVERY, Store, Timestamp};

/// How often a runtime that drives runs asks its store whether anyone listens to
/// events: a subscriber in another process sees a driver's events from at most
/// about this long after it subscribed.
pub const LISTENER_CHECK: Duration = Duration::from_secs(1);

/// How long a listener's row in the store holds unrenewed; a following runtime
/// renews it every third of this. A process that died without removing its row
/// makes drivers publish for at most this long more.
pub const LISTENER_TTL: Duration = Duration::from_secs(10);

/// The most events one append writes.
const MAX_BATCH: usize = 512;

/// The most events queued for the log: beyond it (the store is down, or the
/// publisher's tokio runtime is gone until the next drive starts another) new
/// events are not queued, so memory stays bounded; the log misses them.
const OUTBOX_LIMIT: usize = 64 * MAX_BATCH;

/// How many events the follower reads at a time.
const READ_BATCH: u32 = 512;

/// The events a runtime queued for the log, shared with its publisher, which
/// writes what is left even after the runtime is gone.
#[derive(Default)]
struct Outbox {
    events: Mutex<Vec<Arc<RunEvent>>>,
    wake: Notify,
    /// Held while a batch is taken and written, so that batches are written in the
    /// order they were taken, by the publisher or by a flush.
    writing: tokio::sync::Mutex<()>,
}

impl Outbox {
    /// Writes one batch of what is queued; whether there was any.
    async fn write_batch(&self, store: &dyn Store, origin: &str) -> bool {
        let _writing = self.writing.lock().await;
        let batch = take(self);
        if batch.is_empty() {
            return false;
        }
        if let Err(e) = store.append_events(origin, &batch).await {
            tracing::warn!(error = %e, events = batch.len(), "could not write run events to the store's log");
        }
        true
    }
}

/// What a runtime over a store with an event log shares with its two tasks.
pub(crate) struct LogLink {
    store: Arc<dyn Store>,
    /// The runtime's name in the log and the listener table.
    origin: Arc<str>,
    /// Whether someone listens: this runtime's events go to the log.
    publishing: AtomicBool,
    outbox: Arc<Outbox>,
    /// When the publisher last checked for listeners (Unix ms); 0 before it ran.
    beat: AtomicI64,
    /// The publisher's generation: a publisher of an older one stops.
    generation: AtomicU64,
    /// This runtime's subscribers, the local ones included: the follower runs
    /// while there is any.
    pub(super) followers: Arc<AtomicUsize>,
    /// This runtime's followers of the log itself ([`LogEvents`](super::LogEvents)):
    /// while there is any, its own drives publish.
    pub(super) log_followers: AtomicUsize,
    /// Whether the follower runs.
    following: AtomicBool,
    /// The hub's channel, for the events the follower reads.
    sender: super::Channel,
    /// The hub's interest count: raised by one while publishing, so that emitting
    /// stays one atomic load.
    interest: Arc<AtomicUsize>,
    retention: EventRetention,
}

impl LogLink {
    pub(super) fn new(store: Arc<dyn Store>, sender: super::Channel, interest: Arc<AtomicUsize>) -> Self {
        Self {
            store,
            origin: format!("{}-{:016x}", std::process::id(), fastrand::u64(..)).into(),
            publishing: AtomicBool::new(false),
            outbox: Arc::default(),
            beat: AtomicI64::new(0),
            generation: AtomicU64::new(0),
            followers: Arc::new(AtomicUsize::new(0)),
            log_followers: AtomicUsize::new(0),
            following: AtomicBool::new(false),
            sender,
            interest,
            retention: EventRetention::default(),
        }
    }

    /// The store.
    pub(super) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Queues `event` for the log if someone listens.
    #[inline]
    pub(super) fn offer(&self, event: &Arc<RunEvent>) {
        if self.publishing.load(Ordering::Relaxed) {
            let mut events = self.outbox.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if events.len() < OUTBOX_LIMIT {
                events.push(event.clone());
            }
            drop(events);
            self.outbox.wake.notify_one();
        }
    }

    fn set_publishing(&self, on: bool) {
        if self.publishing.swap(on, Ordering::Relaxed) != on {
            if on {
                self.interest.fetch_add(1, Ordering::Relaxed);
            } else {
                self.interest.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Publishes from now on (a follower of the log in this process), and makes
    /// sure the publisher runs to write it.
    pub(super) fn publish_now(self: &Arc<Self>) {
        self.set_publishing(true);
        self.ensure_publisher();
    }

    /// Before a drive: unless the publisher runs (it checked for listeners
    /// lately), checks for listeners here, so that the drive's first events are
    /// published when someone listens, and starts the publisher. While it runs,
    /// a clock read and an atomic load.
    pub(super) async fn prepare_drive(self: &Arc<Self>) {
        if !self.publisher_stale() {
            return;
        }
        let listening = self.store.has_event_listeners(Timestamp::now()).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "could not read the store's event listeners");
            false
        });
        self.set_publishing(listening || self.log_followers.load(Ordering::Acquire) > 0);
        self.ensure_publisher();
    }

    fn publisher_stale(&self) -> bool {
        let now = Timestamp::now().as_millis();
        let stale = i64::try_from(3 * LISTENER_CHECK.as_millis()).unwrap_or(i64::MAX);
        now.saturating_sub(self.beat.load(Ordering::Relaxed)) >= stale
    }

    /// Starts the publisher unless it runs (it checked for listeners lately).
    pub(super) fn ensure_publisher(self: &Arc<Self>) {
        let now = Timestamp::now().as_millis();
        let beat = self.beat.load(Ordering::Relaxed);
        let stale = i64::try_from(3 * LISTENER_CHECK.as_millis()).unwrap_or(i64::MAX);
        if now.saturating_sub(beat) < stale {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        if self.beat.compare_exchange(beat, now, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            return;
        }
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        handle.spawn(publish(
            Arc::downgrade(self),
            self.outbox.clone(),
            self.store.clone(),
            self.origin.clone(),
            generation,
        ));
    }

    /// Records this runtime in the store's listener table now (its follower
    /// renews the row).
    pub(super) async fn listen_now(&self) -> Result<(), crate::StoreError> {
        self.store.listen_events(&self.origin, Timestamp::now() + LISTENER_TTL).await
    }

    /// Writes every event queued so far to the log.
    pub(super) async fn flush(&self) {
        while self.outbox.write_batch(&*self.store, &self.origin).await {}
    }

    /// Starts the follower unless it runs; called by each new subscriber.
    pub(super) fn ensure_follower(self: &Arc<Self>) {
        if self.following.swap(true, Ordering::AcqRel) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(follow(Arc::downgrade(self), self.store.clone(), self.origin.clone()));
            }
            Err(_) => {
                self.following.store(false, Ordering::Release);
                tracing::warn!("subscribed outside a tokio runtime: events of other processes will not arrive");
            }
        }
    }
}

/// Takes up to [`MAX_BATCH`] queued events.
fn take(outbox: &Outbox) -> Vec<Arc<RunEvent>> {
    let mut events = outbox.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if events.len() <= MAX_BATCH { std::mem::take(&mut *events) } else { events.drain(..MAX_BATCH).collect() }
}

/// The publisher: checks for listeners every [`LISTENER_CHECK`], writes what is
/// queued, prunes the log now and then.
async fn publish(link: Weak<LogLink>, outbox: Arc<Outbox>, store: Arc<dyn Store>, origin: Arc<str>, generation: u64) {
    let mut next_check = tokio::time::Instant::now();
    let mut next_prune = next_check + PRUNE_EVERY;
    loop {
        if outbox.write_batch(&*store, &origin).await {
            continue;
        }
        let Some(strong) = link.upgrade() else { return };
        if strong.generation.load(Ordering::Relaxed) != generation {
            return;
        }
        let now = tokio::time::Instant::now();
        if now >= next_check {
            strong.beat.store(Timestamp::now().as_millis(), Ordering::Relaxed);
            let retention = strong.retention;
            drop(strong);
            let listening = store.has_event_listeners(Timestamp::now()).await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "could not read the store's event listeners");
                false
            });
            let Some(strong) = link.upgrade() else { return };
            strong.set_publishing(listening || strong.log_followers.load(Ordering::Acquire) > 0);
            drop(strong);
            next_check = tokio::time::Instant::now() + LISTENER_CHECK;
            if listening && now >= next_prune {
                next_prune = now + PRUNE_EVERY;
                if let Err(e) = store.prune_events(Timestamp::now(), &retention).await {
                    tracing::warn!(error = %e, "could not prune the store's event log");
                }
            }
            continue;
        }
        drop(strong);
        tokio::select! {
            () = outbox.wake.notified() => {}
            () = tokio::time::sleep_until(next_check) => {}
        }
    }
}

/// The follower: keeps this runtime's listener row fresh and hands other
/// runtimes' events from the log to its subscribers.
async fn follow(link: Weak<LogLink>, store: Arc<dyn Store>, origin: Arc<str>) {
    let renew_every = LISTENER_TTL / 3;
    let mut renew_at = tokio::time::Instant::now();
    let mut cursor = None;
    loop {
        let Some(strong) = link.upgrade() else { break };
        if strong.followers.load(Ordering::Acquire) == 0 {
            drop(strong);
            if let Err(e) = store.unlisten_events(&origin).await {
                tracing::debug!(error = %e, "could not remove this runtime's event listener row");
            }
            let Some(strong) = link.upgrade() else { return };
            strong.following.store(false, Ordering::Release);
            // A subscriber that came while the row was removed found `following`
            // still set and started no follower: this one goes on, listening again.
            if strong.followers.load(Ordering::Acquire) == 0 || strong.following.swap(true, Ordering::AcqRel) {
                return;
            }
            renew_at = tokio::time::Instant::now();
            continue;
        }
        // The channel is made by the first local subscriber, so it is looked up
        // at each send: one that subscribes while this reads gets what it reads.
        let sender = strong.sender.clone();
        drop(strong);
        if tokio::time::Instant::now() >= renew_at {
            if let Err(e) = store.listen_events(&origin, Timestamp::now() + LISTENER_TTL).await {
                tracing::warn!(error = %e, "could not record this runtime as an event listener");
            }
            renew_at = tokio::time::Instant::now() + renew_every;
        }
        let after = match cursor {
            Some(after) => after,
            None => match store.last_event_id().await {
                Ok(id) => *cursor.insert(id),
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the store's event log");
                    tokio::time::sleep(LISTENER_CHECK).await;
                    continue;
                }
            },
        };
        let events = match store.read_events(after, None, READ_BATCH).await {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the store's event log");
                Vec::new()
            }
        };
        let full = events.len() == READ_BATCH as usize;
        for logged in events {
            cursor = Some(logged.id);
            if *logged.origin != *origin
                && let Some(sender) = sender.get()
            {
                let _ = sender.send(Arc::new(logged.event));
            }
        }
        drop(sender);
        if !full {
            let wait = renew_at.saturating_duration_since(tokio::time::Instant::now()).min(renew_every);
            if let Err(e) = store.wait_events(cursor.unwrap_or(after), wait).await {
                tracing::debug!(error = %e, "waiting for run events failed");
                tokio::time::sleep(wait.min(LISTENER_CHECK)).await;
            }
        }
    }
    let _ = store.unlisten_events(&origin).await;
}
