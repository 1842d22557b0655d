//! Following the store's event log itself: events with their ids, from a cursor.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::log::LogLink;
use crate::StoreError;
use crate::store::{LoggedEvent, RunId};

/// How many events a follower reads at a time.
const READ_BATCH: u32 = 256;

/// The longest a follower waits for the store before it reads the log again.
const WAIT: Duration = Duration::from_secs(1);

/// A follower of the store's event log, from
/// [`Runtime::follow_log`](crate::Runtime::follow_log): the events of every
/// runtime that shares the store (this one's included), each with its id in the
/// log, in the log's order, from a cursor on.
///
/// It reads the log at its own pace, so it never lags: after a pause it goes on
/// where it stopped, and resuming with the id of the last event it returned
/// ([`LogEvents::cursor`]) loses and repeats nothing (as the HTTP API's event stream
/// does with `Last-Event-ID`), unless the events were pruned in between
/// ([`EventRetention`](crate::store::EventRetention)). While it lives, its runtime
/// counts as a listener, so drivers in every process write their events to the log.
pub struct LogEvents {
    link: Arc<LogLink>,
    run: Option<RunId>,
    cursor: u64,
    pending: VecDeque<LoggedEvent>,
}

impl LogEvents {
    pub(super) fn new(link: &Arc<LogLink>, run: Option<RunId>, cursor: u64) -> Self {
        link.log_followers.fetch_add(1, Ordering::AcqRel);
        link.followers.fetch_add(1, Ordering::AcqRel);
        link.ensure_follower();
        // This runtime's own drives publish at once, without waiting for their next
        // check of the listener table.
        link.publish_now();
        Self { link: link.clone(), run, cursor, pending: VecDeque::new() }
    }

    /// The id of the last event returned (or the cursor it started from).
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The next event, waiting for it; an error when the store cannot be read (the
    /// next call tries again from the same cursor).
    pub async fn recv(&mut self) -> Result<LoggedEvent, StoreError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                self.cursor = event.id;
                return Ok(event);
            }
            let store = self.link.store();
            // The newest id before the read: with a filter, the read finds nothing
            // of the events after the cursor that are other runs', and the wait must
            // wake only for newer ones (ids are committed in order, so what the read
            // did not find is above this).
            let newest = if self.run.is_some() { store.last_event_id().await? } else { self.cursor };
            let events = store.read_events(self.cursor, self.run, READ_BATCH).await?;
            if events.is_empty() {
                store.wait_events(newest.max(self.cursor), WAIT).await?;
            } else {
                self.pending.extend(events);
            }
        }
    }

    /// The events as a stream.
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<LoggedEvent, StoreError>> + Send + Unpin {
        Box::pin(futures::stream::unfold(self, |mut events| async move {
            let next = events.recv().await;
            Some((next, events))
        }))
    }
}

impl Drop for LogEvents {
    fn drop(&mut self) {
        self.link.log_followers.fetch_sub(1, Ordering::AcqRel);
        self.link.followers.fetch_sub(1, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for LogEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogEvents").field("run", &self.run).field("cursor", &self.cursor).finish_non_exhaustive()
    }
}
