//! Schedules: recurring runs of a registered workflow with its input, on a cron
//! expression or an interval, kept in the [`Store`](crate::Store).
//!
//! ```
//! use std::time::Duration;
//! use loopstack_core::schedule::{Missed, Schedule};
//!
//! // Every day at 07:00 in Berlin; a day no worker ran at 07:00 gets one run late.
//! let daily = Schedule::cron("0 7 * * *")?.timezone("Europe/Berlin")?.missed(Missed::CatchUpOnce);
//! // Every 15 minutes from when it is created; missed times are skipped.
//! let often = Schedule::every(Duration::from_secs(15 * 60))?;
//! # let _ = (daily, often);
//! # Ok::<(), loopstack_core::schedule::ScheduleError>(())
//! ```
//!
//! [`Runtime::schedule`](crate::Runtime::schedule) stores one for a workflow
//! registered on the runtime, with its input as JSON; every [`Worker`](crate::Worker)
//! of that workflow over the store then starts a queued run at each due time.
//!
//! # Exactly once
//!
//! A schedule row keeps its next due time. A worker that finds it due moves it on
//! with a compare-and-set on that time ([`Store::fire_schedule`](crate::Store::fire_schedule)),
//! and creates the due time's run in the same transaction: of any number of workers
//! racing on one due time, one moves it and starts the run, the others change
//! nothing. The run's id is derived from the schedule and its due time
//! ([`scheduled_run_id`]), so even a retried insert cannot start two runs, and the
//! store records which schedule and due time started it ([`ScheduledRun`]).
//!
//! # Missed times
//!
//! A due time is *missed* when no worker found it within its grace (60 s unless
//! [`Schedule::grace`] says otherwise): no worker ran then, or the schedule's
//! workflow was not registered on any that did. [`Missed::Skip`] (the default)
//! starts nothing for missed times and moves on to the next time to come;
//! [`Missed::CatchUpOnce`] starts one run for all of them (recorded at the latest
//! missed time), then moves on. A due time found within its grace is started
//! either way. Times that pass while a schedule is paused are never started: a
//! resumed schedule is next due at its first time after the resume.
//!
//! A worker cannot tell a look that is late from a clock that runs ahead, so one
//! look moves a schedule's next due time one period at most: to its first time
//! after the stored one. A worker whose clock is a year ahead cannot put a schedule
//! a year off; a late worker catches up one period a look (it looks about once a
//! second), starting the times that are on time as they come.
//!
//! # Overlap
//!
//! A due time that finds the schedule's last run not ended (queued, running or
//! waiting) does what [`Schedule::overlap`] says. [`Overlap::Skip`] (the default)
//! starts nothing: the due time is recorded as skipped (the schedule's
//! `last_error` says so, and the worker logs it). [`Overlap::Allow`] starts a run
//! anyway. [`Overlap::QueueOne`] keeps the due time as the schedule's pending one
//! (one at most: later due times are skipped while one is pending) and a worker
//! starts its run once the last run has ended. Whether the last run has ended is
//! checked again in the transaction that starts the next one, so of two workers
//! racing, one starts it, and only once it ended.
//!
//! # Time zones
//!
//! Cron expressions are read in UTC unless [`Schedule::timezone`] names an IANA
//! zone (read from the system's zoneinfo). In a zone with daylight saving time a
//! fixed time that falls in the gap of a spring-forward runs at the first instant
//! after the gap, and one in the overlap of a fall-back runs once, at its first
//! occurrence (the Open Cron Pattern Specification's rules, as the `croner` crate
//! implements them); patterns of every minute or hour follow real time.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::store::Timestamp;

mod cron;
mod record;

pub use cron::CronField;
use cron::parse_cron;
pub use record::{ScheduleFire, ScheduleRecord, ScheduledRun, scheduled_run_id};

/// How long after a due time a worker may still start it as on time, unless set.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);

/// The shortest interval of [`Schedule::every`].
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// When a schedule is due: a cron expression in a time zone, or an interval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Recurrence {
    /// A cron expression: 5 fields (minute to day of week) or 6 (seconds first).
    Cron {
        /// The expression, as given.
        expr: String,
        /// The IANA time zone it is read in; UTC when `None`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timezone: Option<String>,
    },
    /// A fixed interval, counted from the schedule's creation.
    Every {
        /// The interval in milliseconds.
        millis: u64,
    },
}

impl std::fmt::Display for Recurrence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cron { expr, timezone: None } => write!(f, "cron `{expr}` (UTC)"),
            Self::Cron { expr, timezone: Some(tz) } => write!(f, "cron `{expr}` ({tz})"),
            Self::Every { millis } => write!(f, "every {:?}", Duration::from_millis(*millis)),
        }
    }
}

/// What a schedule does about due times that no worker started in time (see the
/// [module docs](self#missed-times)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Missed {
    /// Starts nothing for them: the schedule moves on to its next time to come.
    #[default]
    Skip,
    /// Starts one run for all of them, then moves on.
    CatchUpOnce,
}

impl Missed {
    /// The stable snake_case name, as stores write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::CatchUpOnce => "catch_up_once",
        }
    }
}

impl std::str::FromStr for Missed {
    type Err = ScheduleError;
    fn from_str(s: &str) -> Result<Self, ScheduleError> {
        match s {
            "skip" => Ok(Self::Skip),
            "catch_up_once" | "catch-up-once" => Ok(Self::CatchUpOnce),
            other => Err(ScheduleError::InvalidMissed(other.to_owned())),
        }
    }
}

/// What a schedule does at a due time while the last run it started has not ended
/// (see the [module docs](self#overlap)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Overlap {
    /// Starts no run for the due time: it is recorded as skipped.
    #[default]
    Skip,
    /// Starts a run anyway: runs of the schedule may overlap.
    Allow,
    /// Keeps the due time, one at most, and starts its run once the last run ended.
    QueueOne,
}

impl Overlap {
    /// The stable snake_case name, as stores write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Allow => "allow",
            Self::QueueOne => "queue_one",
        }
    }
}

impl std::str::FromStr for Overlap {
    type Err = ScheduleError;
    fn from_str(s: &str) -> Result<Self, ScheduleError> {
        match s {
            "skip" => Ok(Self::Skip),
            "allow" => Ok(Self::Allow),
            "queue" | "queue_one" | "queue-one" => Ok(Self::QueueOne),
            other => Err(ScheduleError::InvalidOverlap(other.to_owned())),
        }
    }
}

/// Why a schedule could not be made, stored or changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The cron expression does not parse.
    #[error("invalid cron expression `{expr}`: {reason}")]
    InvalidCron {
        /// The expression.
        expr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A field of the cron expression has a value it does not take: `0 25 * * *`
    /// is "the hour `25` is out of range 0-23".
    #[error("invalid cron expression `{expr}`: the {field} `{value}` {reason}")]
    InvalidCronField {
        /// The expression.
        expr: String,
        /// The field.
        field: CronField,
        /// The field's value that is wrong (one part of a list such as `1,99`).
        value: String,
        /// What is wrong with it: "is out of range 0-23", say.
        reason: String,
    },
    /// The cron expression never matches a time (such as `0 0 30 2 *`).
    #[error("cron expression `{expr}` is never due")]
    NeverDue {
        /// The expression.
        expr: String,
    },
    /// The time zone is not in the IANA database of this system.
    #[error("unknown time zone `{timezone}`: {reason}")]
    UnknownTimezone {
        /// The zone's name.
        timezone: String,
        /// Why it could not be read.
        reason: String,
    },
    /// An interval shorter than [`MIN_INTERVAL`].
    #[error("a schedule's interval must be at least {MIN_INTERVAL:?}, not {0:?}")]
    IntervalTooShort(Duration),
    /// An interval that does not read (see [`parse_interval`]).
    #[error("invalid interval `{0}`: expected a number and a unit, such as `90s`, `15m`, `1h30m` or `1d`")]
    InvalidInterval(String),
    /// An interval that reads, but whose parts add up to more milliseconds than
    /// a `u64` holds (see [`parse_interval`]).
    #[error("invalid interval `{0}`: too long, more than {max} ms in all", max = u64::MAX)]
    IntervalTooLong(String),
    /// A missed-times policy name that is not `skip` or `catch_up_once`.
    #[error("unknown missed-times policy `{0}`: expected `skip` or `catch_up_once`")]
    InvalidMissed(String),
    /// An overlap policy name that is not `skip`, `allow` or `queue_one`.
    #[error("unknown overlap policy `{0}`: expected `skip`, `allow` or `queue`")]
    InvalidOverlap(String),
    /// A schedule id that is empty, longer than 128 bytes, or has characters other
    /// than ASCII letters, digits, `-`, `_`, `.` and `:`.
    #[error("invalid schedule id `{0}`: use 1 to 128 ASCII letters, digits, `-`, `_`, `.` or `:`")]
    InvalidId(String),
    /// The workflow is not registered on the runtime.
    #[error("workflow `{workflow}` is not registered (registered: {registered:?})")]
    UnknownWorkflow {
        /// The name asked for.
        workflow: String,
        /// The registered names.
        registered: Vec<&'static str>,
    },
    /// The input does not read as the workflow's input (or the workflow was
    /// registered without an input that reads from JSON).
    #[error("the input of a schedule of `{workflow}` does not read: {reason}")]
    Input {
        /// The workflow.
        workflow: String,
        /// Why.
        reason: String,
    },
    /// The store failed or refused (no such schedule, one exists already).
    #[error(transparent)]
    Store(#[from] crate::StoreError),
}

/// When a schedule is due and what it does about missed times: the argument of
/// [`Runtime::schedule`](crate::Runtime::schedule).
///
/// Built by value: `Schedule::cron("0 7 * * *")?.timezone("Europe/Berlin")?`.
#[derive(Clone)]
#[must_use = "a schedule does nothing until it is stored with `Runtime::schedule`"]
pub struct Schedule {
    recurrence: Recurrence,
    compiled: Compiled,
    missed: Missed,
    overlap: Overlap,
    grace: Duration,
    paused: bool,
}

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedule")
            .field("recurrence", &self.recurrence)
            .field("missed", &self.missed)
            .field("overlap", &self.overlap)
            .field("grace", &self.grace)
            .field("paused", &self.paused)
            .finish()
    }
}

impl Schedule {
    /// Due at each time a cron expression matches, in UTC (see
    /// [`Schedule::timezone`]): five fields (`minute hour day-of-month month
    /// day-of-week`, as in `0 7 * * MON-FRI`) or six with seconds first; `L`, `W`
    /// and `#` as in Vixie cron and Quartz, and the nicknames `@daily`, `@hourly`,
    /// and so on. A day of month and a day of week both given match either, as in
    /// Vixie cron.
    ///
    /// A field with a value it does not take is an error that names both:
    ///
    /// ```
    /// use loopstack_core::schedule::{CronField, Schedule, ScheduleError};
    /// let err = Schedule::cron("0 25 * * *").unwrap_err();
    /// assert!(matches!(err, ScheduleError::InvalidCronField { field: CronField::Hour, .. }));
    /// assert!(err.to_string().ends_with("the hour `25` is out of range 0-23"));
    /// ```
    pub fn cron(expr: &str) -> Result<Self, ScheduleError> {
        Self::new(Recurrence::Cron { expr: expr.trim().to_owned(), timezone: None })
    }

    /// Due every `interval` (at least [`MIN_INTERVAL`]), the first time one
    /// interval after the schedule is stored.
    pub fn every(interval: Duration) -> Result<Self, ScheduleError> {
        let millis = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        Self::new(Recurrence::Every { millis })
    }

    /// A schedule of `recurrence`, checked: what a stored schedule is read back as.
    pub fn new(recurrence: Recurrence) -> Result<Self, ScheduleError> {
        let compiled = Compiled::new(&recurrence)?;
        Ok(Self {
            recurrence,
            compiled,
            missed: Missed::Skip,
            overlap: Overlap::Skip,
            grace: DEFAULT_GRACE,
            paused: false,
        })
    }

    /// Reads the cron expression in the IANA time zone `timezone` (such as
    /// `Europe/Berlin`) instead of UTC. No effect on an interval.
    pub fn timezone(mut self, timezone: &str) -> Result<Self, ScheduleError> {
        if let Recurrence::Cron { expr, .. } = &self.recurrence {
            let recurrence = Recurrence::Cron { expr: expr.clone(), timezone: Some(timezone.to_owned()) };
            self.compiled = Compiled::new(&recurrence)?;
            self.recurrence = recurrence;
        }
        Ok(self)
    }

    /// What to do about missed due times ([`Missed::Skip`] unless set).
    pub fn missed(mut self, missed: Missed) -> Self {
        self.missed = missed;
        self
    }

    /// What to do at a due time while the last run has not ended ([`Overlap::Skip`]
    /// unless set).
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// How late a worker may start a due time as on time ([`DEFAULT_GRACE`] unless
    /// set); later, the time counts as missed.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Stores the schedule paused: it starts nothing until resumed.
    pub fn paused(mut self) -> Self {
        self.paused = true;
        self
    }

    /// When it is due.
    pub fn recurrence(&self) -> &Recurrence {
        &self.recurrence
    }

    /// The first due time after `t`, if it is ever due again.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        self.compiled.next_after(t)
    }

    /// What a worker does at `now` with a schedule whose next due time is `due`:
    /// `None` if it is not due yet.
    /// `last_due` is the due time of the last run it started.
    pub(crate) fn plan(&self, due: Timestamp, now: Timestamp, last_due: Option<Timestamp>) -> Option<Plan> {
        plan(&self.compiled, self.missed, self.grace, due, now, last_due)
    }

    /// The record [`Runtime::schedule`](crate::Runtime::schedule) stores: next due
    /// at the first time after `now`.
    pub(crate) fn record(
        &self,
        id: String,
        workflow: String,
        input: Box<RawValue>,
        now: Timestamp,
    ) -> Result<ScheduleRecord, ScheduleError> {
        let next_due = self.next_after(now).ok_or_else(|| ScheduleError::NeverDue {
            expr: match &self.recurrence {
                Recurrence::Cron { expr, .. } => expr.clone(),
                other => other.to_string(),
            },
        })?;
        Ok(ScheduleRecord {
            id,
            workflow,
            input,
            recurrence: self.recurrence.clone(),
            missed: self.missed,
            overlap: self.overlap,
            grace_ms: u64::try_from(self.grace.as_millis()).unwrap_or(u64::MAX),
            paused: self.paused,
            next_due,
            pending_due: None,
            last_due: None,
            last_run: None,
            last_error: None,
            created_at: now,
            updated_at: now,
        })
    }
}

/// A recurrence ready to compute due times.
#[derive(Clone)]
enum Compiled {
    Cron(Arc<croner::Cron>, jiff::tz::TimeZone),
    Every(Duration),
}

impl Compiled {
    fn new(recurrence: &Recurrence) -> Result<Self, ScheduleError> {
        match recurrence {
            Recurrence::Cron { expr, timezone } => {
                let cron = parse_cron(expr)?;
                let tz = match timezone {
                    None => jiff::tz::TimeZone::UTC,
                    Some(name) => jiff::tz::TimeZone::get(name).map_err(|e| ScheduleError::UnknownTimezone {
                        timezone: name.clone(),
                        reason: e.to_string(),
                    })?,
                };
                let compiled = Self::Cron(Arc::new(cron), tz);
                // A pattern that parses but never matches (the 30th of February).
                if compiled.next_after(Timestamp::from_millis(0)).is_none() {
                    return Err(ScheduleError::NeverDue { expr: expr.clone() });
                }
                Ok(compiled)
            }
            Recurrence::Every { millis } => {
                let interval = Duration::from_millis(*millis);
                if interval < MIN_INTERVAL {
                    return Err(ScheduleError::IntervalTooShort(interval));
                }
                Ok(Self::Every(interval))
            }
        }
    }

    fn zoned(tz: &jiff::tz::TimeZone, t: Timestamp) -> Option<jiff::Zoned> {
        jiff::Timestamp::from_millisecond(t.as_millis()).ok().map(|ts| ts.to_zoned(tz.clone()))
    }

    /// The first due time strictly after `t`.
    fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        match self {
            Self::Cron(cron, tz) => {
                let next = cron.find_next_occurrence(&Self::zoned(tz, t)?, false).ok()?;
                Some(Timestamp::from_millis(next.timestamp().as_millisecond()))
            }
            Self::Every(interval) => Some(t + *interval),
        }
    }

    /// The latest due time at or before `now`, given that `due` is one and is not
    /// after `now`.
    fn latest(&self, due: Timestamp, now: Timestamp) -> Timestamp {
        match self {
            Self::Cron(cron, tz) => Self::zoned(tz, now)
                .and_then(|z| cron.find_previous_occurrence(&z, true).ok())
                .map(|z| Timestamp::from_millis(z.timestamp().as_millisecond()))
                .filter(|t| *t >= due)
                .unwrap_or(due),
            Self::Every(interval) => {
                let step = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX).max(1);
                let k = (now.as_millis() - due.as_millis()) / step;
                Timestamp::from_millis(due.as_millis() + k * step)
            }
        }
    }
}

/// What a worker does with a due schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The due time to start a run for, if any.
    pub(crate) start: Option<Timestamp>,
    /// The schedule's next due time after this (`None`: never again).
    pub(crate) next_due: Option<Timestamp>,
}

fn plan(
    compiled: &Compiled,
    missed: Missed,
    grace: Duration,
    due: Timestamp,
    now: Timestamp,
    last_due: Option<Timestamp>,
) -> Option<Plan> {
    if due > now {
        return None;
    }
    let latest = compiled.latest(due, now);
    let on_time = now.since(latest) <= grace;
    // A schedule held back by the bound below is found due again while `latest`
    // is still the latest: its run was started by the look before.
    let start = (on_time || missed == Missed::CatchUpOnce).then_some(latest).filter(|t| Some(*t) != last_due);
    // The time after the latest one is after `now`; should a cron search have
    // failed to find the latest, the first after `now` is.
    let after_now = compiled.next_after(latest).filter(|t| *t > now).or_else(|| compiled.next_after(now));
    // A worker cannot tell a late look from a clock running ahead: one whose clock
    // is a year ahead would put the schedule a year off for every worker. So a look
    // moves it one period at most, to its first time after the stored one; a look
    // that is truly late catches up one period a look.
    let next_due = match (after_now, compiled.next_after(due)) {
        (Some(next), Some(bound)) => Some(next.min(bound)),
        (next, _) => next,
    };
    Some(Plan { start, next_due })
}

/// Reads an interval as numbers with units, `ms`, `s`, `m`, `h` or `d`, one after
/// another: `90s`, `15m`, `1h30m`, `1d`. For command lines and HTTP callers of
/// [`Schedule::every`]. Parts that add up to more than `u64::MAX` milliseconds are
/// [`ScheduleError::IntervalTooLong`].
///
/// ```
/// use std::time::Duration;
/// assert_eq!(loopstack_core::schedule::parse_interval("1h30m")?, Duration::from_secs(5400));
/// # Ok::<(), loopstack_core::schedule::ScheduleError>(())
/// ```
pub fn parse_interval(text: &str) -> Result<Duration, ScheduleError> {
    let bad = || ScheduleError::InvalidInterval(text.to_owned());
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    // Summed in milliseconds, checked: a schedule keeps its interval as a `u64` of
    // them, and `Duration`'s own sum panics on overflow.
    let too_long = || ScheduleError::IntervalTooLong(text.to_owned());
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let n: u64 = match rest[..digits].parse() {
            Ok(n) => n,
            Err(_) if digits > 0 => return Err(too_long()),
            Err(_) => return Err(bad()),
        };
        rest = &rest[digits..];
        let unit = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let millis = match &rest[..unit] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit..];
        total = n.checked_mul(millis).and_then(|part| total.checked_add(part)).ok_or_else(too_long)?;
    }
    Ok(Duration::from_millis(total))
}

/// Checks a schedule id: 1 to 128 ASCII letters, digits, `-`, `_`, `.` or `:`.
pub fn check_id(id: &str) -> Result<(), ScheduleError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    if ok { Ok(()) } else { Err(ScheduleError::InvalidId(id.to_owned())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-03-01T00:00:00Z and friends, in milliseconds.
    fn at(rfc3339: &str) -> Timestamp {
        let ts: jiff::Timestamp = rfc3339.parse().unwrap();
        Timestamp::from_millis(ts.as_millisecond())
    }

    #[test]
    fn a_bad_cron_expression_is_a_typed_error() {
        for bad in ["", "* * * *", "every day", "@often"] {
            match Schedule::cron(bad) {
                Err(ScheduleError::InvalidCron { expr, .. }) => assert_eq!(expr, bad),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        for (bad, field, value) in [
            ("61 * * * *", CronField::Minute, "61"),
            ("0 7 * * MOO", CronField::DayOfWeek, "MOO"),
            ("0 0 32 * *", CronField::DayOfMonth, "32"),
            ("0 0 1 13 *", CronField::Month, "13"),
            ("0 0 * * 1,9", CronField::DayOfWeek, "9"),
            ("75 0 0 * * *", CronField::Seconds, "75"),
        ] {
            match Schedule::cron(bad) {
                Err(ScheduleError::InvalidCronField { expr, field: f, value: v, .. }) => {
                    assert_eq!((expr.as_str(), f, v.as_str()), (bad, field, value));
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert_eq!(
            Schedule::cron("0 25 * * *").unwrap_err().to_string(),
            "invalid cron expression `0 25 * * *`: the hour `25` is out of range 0-23"
        );
        assert_eq!(
            Schedule::cron("0 8-30 * * *").unwrap_err().to_string(),
            "invalid cron expression `0 8-30 * * *`: the hour `8-30` is out of range 0-23"
        );
        assert!(matches!(Schedule::cron("0 0 30 2 *"), Err(ScheduleError::NeverDue { .. })));
        assert!(matches!(
            Schedule::cron("0 7 * * *").unwrap().timezone("Mars/Olympus_Mons"),
            Err(ScheduleError::UnknownTimezone { .. })
        ));
        assert!(matches!(Schedule::every(Duration::from_millis(10)), Err(ScheduleError::IntervalTooShort(_))));
    }

    #[test]
    fn cron_takes_the_field_counts_the_docs_promise() {
        assert!(Schedule::cron("0 7 * * *").is_ok(), "five fields");
        assert!(Schedule::cron("30 0 7 * * *").is_ok(), "six, seconds first");
        assert!(Schedule::cron("@daily").is_ok(), "a nickname");
        // croner reads a seventh field as years; the docs promise no such thing.
        for bad in ["0 0 7 * * * 2030", "0 7 * * * * * *"] {
            let err = Schedule::cron(bad).unwrap_err();
            assert!(matches!(err, ScheduleError::InvalidCron { .. }), "{bad:?}: {err:?}");
            assert!(err.to_string().contains("expected 5 fields"), "{err}");
        }
    }

    #[test]
    fn cron_is_utc_unless_a_zone_is_given() {
        let daily = Schedule::cron("0 7 * * *").unwrap();
        assert_eq!(daily.next_after(at("2026-06-01T08:00:00Z")), Some(at("2026-06-02T07:00:00Z")));
        let berlin = daily.timezone("Europe/Berlin").unwrap();
        assert_eq!(berlin.next_after(at("2026-06-01T08:00:00Z")), Some(at("2026-06-02T05:00:00Z")), "CEST is +2");
        assert_eq!(berlin.next_after(at("2026-12-01T08:00:00Z")), Some(at("2026-12-02T06:00:00Z")), "CET is +1");
    }

    #[test]
    fn a_time_in_the_spring_forward_gap_runs_once_after_it_and_one_in_the_overlap_once() {
        // Berlin skips 02:00-03:00 on 2026-03-29 and repeats 02:00-03:00 on 2026-10-25.
        let s = Schedule::cron("30 2 * * *").unwrap().timezone("Europe/Berlin").unwrap();
        let gap_day = s.next_after(at("2026-03-28T12:00:00Z")).unwrap();
        assert_eq!(gap_day, at("2026-03-29T01:00:00Z"), "03:00 CEST, the first instant after the gap");
        assert_eq!(s.next_after(gap_day), Some(at("2026-03-30T00:30:00Z")), "02:30 CEST the day after");
        let overlap_day = s.next_after(at("2026-10-24T12:00:00Z")).unwrap();
        assert_eq!(overlap_day, at("2026-10-25T00:30:00Z"), "the first 02:30, in CEST");
        assert_eq!(s.next_after(overlap_day), Some(at("2026-10-26T01:30:00Z")), "not again at 02:30 CET");
    }

    #[test]
    fn the_29th_of_february_waits_for_a_leap_year() {
        let s = Schedule::cron("0 12 29 2 *").unwrap();
        assert_eq!(s.next_after(at("2026-03-01T00:00:00Z")), Some(at("2028-02-29T12:00:00Z")));
        assert_eq!(s.next_after(at("2028-02-29T12:00:00Z")), Some(at("2032-02-29T12:00:00Z")));
    }

    #[test]
    fn due_times_found_late_are_missed_by_policy() {
        let hourly = Schedule::every(Duration::from_secs(3600)).unwrap();
        let due = at("2026-06-01T10:00:00Z");
        assert_eq!(hourly.plan(due, at("2026-06-01T09:59:59Z"), None), None, "not due yet");
        // Found within its grace: started, whatever the policy.
        let on_time = hourly.plan(due, at("2026-06-01T10:00:30Z"), None).unwrap();
        assert_eq!(on_time, Plan { start: Some(due), next_due: Some(at("2026-06-01T11:00:00Z")) });
        // Found five hours late: four times passed unseen after it. The schedule
        // moves on one period a look (a clock ahead looks the same).
        let late = at("2026-06-01T15:20:00Z");
        let skipped = hourly.plan(due, late, None).unwrap();
        assert_eq!(skipped, Plan { start: None, next_due: Some(at("2026-06-01T11:00:00Z")) });
        let catch_up = hourly.clone().missed(Missed::CatchUpOnce);
        let caught_up = catch_up.plan(due, late, None).unwrap();
        let latest = at("2026-06-01T15:00:00Z");
        assert_eq!(caught_up, Plan { start: Some(latest), next_due: Some(at("2026-06-01T11:00:00Z")) });
        // The next looks catch up without starting the latest time again.
        let again = catch_up.plan(at("2026-06-01T11:00:00Z"), late, Some(latest)).unwrap();
        assert_eq!(again, Plan { start: None, next_due: Some(at("2026-06-01T12:00:00Z")) });
        let caught = catch_up.plan(latest, late, Some(latest)).unwrap();
        assert_eq!(caught, Plan { start: None, next_due: Some(at("2026-06-01T16:00:00Z")) });
        // The latest time is on time: it is started, the older ones are not.
        let latest_on_time = hourly.plan(due, at("2026-06-01T15:00:10Z"), None).unwrap();
        assert_eq!(latest_on_time.start, Some(latest));

        let daily = Schedule::cron("0 7 * * *").unwrap();
        let due = at("2026-06-01T07:00:00Z");
        let week_later = at("2026-06-08T09:00:00Z");
        assert_eq!(daily.plan(due, week_later, None).unwrap().start, None);
        let caught_up = daily.missed(Missed::CatchUpOnce).plan(due, week_later, None).unwrap();
        assert_eq!(
            caught_up,
            Plan { start: Some(at("2026-06-08T07:00:00Z")), next_due: Some(at("2026-06-02T07:00:00Z")) }
        );
    }

    #[test]
    fn scheduled_run_ids_are_stable_distinct_and_sort_by_due_time() {
        let (created, due) = (at("2026-06-01T00:00:00Z"), at("2026-06-01T07:00:00Z"));
        let id = scheduled_run_id("nightly", created, due);
        assert_eq!(id, scheduled_run_id("nightly", created, due));
        assert_ne!(id, scheduled_run_id("nightly", created, due + Duration::from_secs(1)));
        assert_ne!(
            id,
            scheduled_run_id("nightly", created + Duration::from_millis(1), due),
            "a new schedule of the same id"
        );
        assert_ne!(id, scheduled_run_id("daily", created, due));
        assert_eq!(id.0.get_version_num(), 8);
        assert!(scheduled_run_id("x", created, due) < scheduled_run_id("a", created, due + Duration::from_secs(60)));
        // Pins the derivation: workers of different builds must derive the same id for
        // one due time, and stored runs of schedules keep theirs, so this literal (computed
        // once from the code) must never change.
        assert_eq!(id.to_string(), "019e81fb-7180-822b-be07-8131f5ab8678");
    }

    #[test]
    fn intervals_read_with_units() {
        assert_eq!(parse_interval("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_interval("1d2h3m4s5ms").unwrap(), Duration::from_millis(93_784_005));
        for bad in ["", "15", "m", "1w", "1.5h", "-1h", "1h 30m"] {
            assert!(matches!(parse_interval(bad), Err(ScheduleError::InvalidInterval(_))), "{bad:?}");
        }
        let most = format!("{}ms", u64::MAX);
        assert_eq!(parse_interval(&most).unwrap(), Duration::from_millis(u64::MAX));
        for long in ["213503982335d", "99999999999999999999s", &format!("{most}1ms"), &"213503982334d".repeat(1001)] {
            assert!(matches!(parse_interval(long), Err(ScheduleError::IntervalTooLong(_))), "{long:?}");
        }
    }

    #[test]
    fn ids_are_checked() {
        assert!(check_id("nightly-report.v2:eu_1").is_ok());
        for bad in ["", "has space", "slash/", &"x".repeat(129)] {
            assert!(matches!(check_id(bad), Err(ScheduleError::InvalidId(_))), "{bad:?}");
        }
    }
}
