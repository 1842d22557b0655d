//! Schedules as the store keeps them: the record, a due time's fire, the runs a
//! schedule started, and their ids.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{Missed, Overlap, Recurrence, Schedule, ScheduleError};
use crate::store::{NewRun, RunId, Timestamp};

/// A schedule as the store keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleRecord {
    /// Its id, unique in the store.
    pub id: String,
    /// The workflow whose runs it starts.
    pub workflow: String,
    /// The input of each run, as JSON.
    pub input: Box<RawValue>,
    /// When it is due.
    pub recurrence: Recurrence,
    /// What it does about missed due times.
    pub missed: Missed,
    /// What it does at a due time while its last run has not ended.
    #[serde(default)]
    pub overlap: Overlap,
    /// How late, in milliseconds, a due time may still be started as on time.
    pub grace_ms: u64,
    /// Whether it is paused (starts nothing).
    pub paused: bool,
    /// The next due time to start.
    pub next_due: Timestamp,
    /// A due time that found the last run not ended, kept by [`Overlap::QueueOne`]
    /// to start once it has.
    #[serde(default)]
    pub pending_due: Option<Timestamp>,
    /// The due time of the last run it started.
    pub last_due: Option<Timestamp>,
    /// The last run it started.
    pub last_run: Option<RunId>,
    /// Why the last due time started no run (its input no longer reads, say).
    pub last_error: Option<String>,
    /// When it was stored.
    pub created_at: Timestamp,
    /// When its row last changed.
    pub updated_at: Timestamp,
}

impl ScheduleRecord {
    /// A record with every field given: for stores of your own that read one back
    /// (and set [`overlap`](Self::overlap) and the others after).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: String,
        workflow: String,
        input: Box<RawValue>,
        recurrence: Recurrence,
        missed: Missed,
        grace_ms: u64,
        paused: bool,
        next_due: Timestamp,
        created_at: Timestamp,
    ) -> Self {
        Self {
            id,
            workflow,
            input,
            recurrence,
            missed,
            overlap: Overlap::default(),
            grace_ms,
            paused,
            next_due,
            pending_due: None,
            last_due: None,
            last_run: None,
            last_error: None,
            created_at,
            updated_at: created_at,
        }
    }

    /// The schedule it keeps, checked again (a zone this system does not have is
    /// an error here).
    pub fn schedule(&self) -> Result<Schedule, ScheduleError> {
        let mut schedule = Schedule::new(self.recurrence.clone())?.missed(self.missed).overlap(self.overlap);
        schedule.grace = Duration::from_millis(self.grace_ms);
        schedule.paused = self.paused;
        Ok(schedule)
    }
}

/// What a worker writes when it finds a schedule due, for
/// [`Store::fire_schedule`](crate::Store::fire_schedule): all of it, in one
/// transaction, only if the schedule is still due at `due` with the pending due
/// time `pending`, not paused, and (with `if_last_run_ended`) its last run ended.
#[derive(Debug)]
#[non_exhaustive]
pub struct ScheduleFire {
    /// The schedule.
    pub schedule: String,
    /// The next due time the worker read: the compare-and-set's expected value.
    pub due: Timestamp,
    /// Its next due time after this one; `None` when it is never due again (it is
    /// then paused).
    pub next_due: Option<Timestamp>,
    /// The run to start, queued, with the due time it is for.
    pub run: Option<(Timestamp, NewRun)>,
    /// Why no run was started for a due time (recorded as the schedule's `last_error`).
    pub error: Option<String>,
    /// The pending due time the worker read ([`ScheduleRecord::pending_due`]):
    /// compared with the stored one as `due` is.
    pub pending: Option<Timestamp>,
    /// The pending due time after this one.
    pub next_pending: Option<Timestamp>,
    /// Fires only if the schedule's last run has ended (or it has none, or the
    /// store no longer has it), checked in the fire's transaction: what
    /// [`Overlap::Skip`] and [`Overlap::QueueOne`] start a run with.
    pub if_last_run_ended: bool,
}

impl ScheduleFire {
    /// A fire of `schedule` at `due` that moves it to `next_due`.
    pub fn new(schedule: impl Into<String>, due: Timestamp, next_due: Option<Timestamp>) -> Self {
        Self {
            schedule: schedule.into(),
            due,
            next_due,
            run: None,
            error: None,
            pending: None,
            next_pending: None,
            if_last_run_ended: false,
        }
    }

    /// Starts `run` for due time `at` with the fire.
    pub fn start(mut self, at: Timestamp, run: NewRun) -> Self {
        self.run = Some((at, run));
        self
    }

    /// Records why the due time started no run.
    pub fn error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }

    /// Expects the pending due time `read`, and sets it to `next`.
    pub fn pending(mut self, read: Option<Timestamp>, next: Option<Timestamp>) -> Self {
        self.pending = read;
        self.next_pending = next;
        self
    }

    /// Fires only if the schedule's last run has ended.
    pub fn if_last_run_ended(mut self) -> Self {
        self.if_last_run_ended = true;
        self
    }
}

/// A run a schedule started: which schedule, for which due time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduledRun {
    /// The schedule.
    pub schedule: String,
    /// The due time it was started for.
    pub due: Timestamp,
    /// The run.
    pub run_id: RunId,
}

/// The id of the run schedule `schedule` (stored at `created_at`) starts for due
/// time `due`: the same for every worker, so two can never start two runs for one
/// due time. A version-8 UUID from an FNV-1a hash of the three, whose first 48
/// bits are the due time's milliseconds, so that runs of schedules sort by due time
/// among other runs, as version-7 ids sort by creation.
pub fn scheduled_run_id(schedule: &str, created_at: Timestamp, due: Timestamp) -> RunId {
    let mut hash = crate::fnv::Fnv1a::<u128>::default();
    hash.bytes(b"schedule\0");
    hash.bytes(schedule.as_bytes());
    hash.bytes(&created_at.as_millis().to_le_bytes());
    hash.bytes(&due.as_millis().to_le_bytes());
    let mut bytes = hash.finish().to_be_bytes();
    let millis = u64::try_from(due.as_millis()).unwrap_or(0);
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    bytes[6] = (bytes[6] & 0x0f) | 0x80; // version 8
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
    RunId(uuid::Uuid::from_bytes(bytes))
}
