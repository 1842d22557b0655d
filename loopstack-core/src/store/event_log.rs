//! The event log a store may keep, so that [run events](crate::events) reach
//! subscribers in every process that shares it.
//!
//! A store that keeps one answers [`Store::has_event_log`](super::Store::has_event_log)
//! with `true` and implements the `*_events` methods of [`Store`](super::Store):
//! [append](super::Store::append_events) a batch, [read](super::Store::read_events)
//! the events after an id, [wait](super::Store::wait_events) for new ones,
//! [prune](super::Store::prune_events) old ones, and keep a table of
//! [listeners](super::Store::listen_events) so that a runtime writes to the log only
//! while someone, in any process, listens. The defaults keep no log: events then
//! reach only the subscribers of the process that drives the run (the
//! [`MemoryStore`](super::MemoryStore)'s case).

use std::time::Duration;

use crate::events::RunEvent;

/// An event as the log keeps it: its id, the runtime that wrote it, the event.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedEvent {
    /// Its id in the log: ids rise in the order events were appended (committed),
    /// so "the events after id N" is a cursor that loses and repeats nothing.
    pub id: u64,
    /// The runtime that wrote it (unique per runtime), so that a runtime can tell
    /// its own events, which its subscribers have already seen, from others'.
    pub origin: String,
    /// The event.
    pub event: RunEvent,
}

/// How long the log keeps events: the writers prune it by age and by count, at
/// most every [`PRUNE_EVERY`], and both bounds apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRetention {
    /// Events older than this are deleted.
    pub max_age: Duration,
    /// At most this many events are kept (the newest).
    pub max_events: u64,
}

impl Default for EventRetention {
    /// An hour, and at most 100,000 events.
    fn default() -> Self {
        Self { max_age: Duration::from_secs(3600), max_events: 100_000 }
    }
}

/// How often a runtime that writes events prunes the log.
pub const PRUNE_EVERY: Duration = Duration::from_secs(60);
