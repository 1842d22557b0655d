//! The runtime's side of [schedules](crate::schedule): storing, listing, pausing
//! and deleting them, and starting the due times a worker finds.

use serde_json::Value;

use super::Runtime;
use crate::error::{RunError, StoreError};
use crate::schedule::{Overlap, Schedule, ScheduleError, ScheduleFire, ScheduleRecord, check_id, scheduled_run_id};
use crate::store::{RunId, Timestamp};

/// How many due schedules one look starts at most; the rest wait for the next.
const DUE_PER_LOOK: u32 = 64;

impl Runtime {
    /// Stores schedule `id`: runs of the registered workflow `workflow` with
    /// `input` (JSON, checked now against the workflow's input type), queued at
    /// each due time of `schedule` for a [`Worker`](crate::Worker) of the workflow
    /// over this store to drive. Returns it as stored, next due at its first time
    /// after now (by this runtime's [clock](Runtime::clock)).
    ///
    /// ```
    /// # use loopstack_core::*;
    /// # async fn demo(runtime: Runtime) -> Result<(), ScheduleError> {
    /// let daily = Schedule::cron("0 7 * * *")?.missed(Missed::CatchUpOnce);
    /// let stored = runtime.schedule("morning-report", "report", serde_json::json!({"team": "ops"}), daily).await?;
    /// println!("next due at {}", stored.next_due);
    /// # Ok(()) }
    /// ```
    ///
    /// A bad id, a workflow that is not registered, an input that does not read,
    /// or an id that is taken is an error and stores nothing.
    pub async fn schedule(
        &self,
        id: &str,
        workflow: &str,
        input: Value,
        schedule: Schedule,
    ) -> Result<ScheduleRecord, ScheduleError> {
        check_id(id)?;
        let wf = self.registered(workflow).map_err(|e| into_schedule_error(workflow, e))?;
        let name = wf.definition().name();
        // The input must read as the workflow's: checked by making (not storing) a run of it.
        wf.new_run_json(self, RunId::new(), input.clone()).map_err(|e| into_schedule_error(workflow, e))?;
        let raw = serde_json::value::to_raw_value(&input)
            .map_err(|e| ScheduleError::Input { workflow: workflow.to_owned(), reason: e.to_string() })?;
        let record = schedule.record(id.to_owned(), name.to_owned(), raw, self.now())?;
        self.inner.store().create_schedule(&record).await?;
        Ok(record)
    }

    /// Every stored schedule, by id.
    pub async fn schedules(&self) -> Result<Vec<ScheduleRecord>, StoreError> {
        self.inner.store().list_schedules().await
    }

    /// Pauses schedule `id`: it starts nothing until resumed.
    pub async fn pause_schedule(&self, id: &str) -> Result<ScheduleRecord, ScheduleError> {
        Ok(self.inner.store().set_schedule_paused(id, true, None).await?)
    }

    /// Resumes schedule `id`, next due at its first time after now: the times that
    /// passed while it was paused are not started.
    pub async fn resume_schedule(&self, id: &str) -> Result<ScheduleRecord, ScheduleError> {
        let stored = self.inner.store().load_schedule(id).await?;
        let next = stored.schedule()?.next_after(self.now()).unwrap_or(stored.next_due);
        Ok(self.inner.store().set_schedule_paused(id, false, Some(next)).await?)
    }

    /// Deletes schedule `id`; the runs it started stay.
    pub async fn delete_schedule(&self, id: &str) -> Result<(), ScheduleError> {
        Ok(self.inner.store().delete_schedule(id).await?)
    }

    /// Starts the due times of the schedules of this runtime's registered
    /// workflows that are due now (by its clock), as queued runs, applying each
    /// schedule's missed-times and overlap policies; returns the runs it started.
    /// Workers call it as they look for work; of several that call it at once, each
    /// due time is started by one ([`Store::fire_schedule`](crate::Store::fire_schedule)).
    pub async fn start_due_schedules(&self) -> Result<Vec<RunId>, StoreError> {
        let names = self.workflows();
        let now = self.now();
        let due = self.inner.store().due_schedules(&names, now, DUE_PER_LOOK).await?;
        let mut started = Vec::new();
        for stored in due {
            let Some((fire, outcome)) = self.fire_of(&stored, now).await? else { continue };
            if !self.inner.store().fire_schedule(fire).await? {
                continue;
            }
            match outcome {
                Outcome::Started(run_id, due) => {
                    tracing::info!(schedule = %stored.id, workflow = %stored.workflow, run_id = %run_id, due = %due, "a schedule started a run");
                    started.push(run_id);
                }
                Outcome::Overlapped(due, last_run) => {
                    tracing::info!(schedule = %stored.id, due = %due, last_run = %last_run, overlap = stored.overlap.as_str(), "a due time found the last run not ended");
                }
                Outcome::Missed => {
                    tracing::info!(schedule = %stored.id, due = %stored.next_due, "skipped missed due times");
                }
                Outcome::Nothing => {}
            }
        }
        Ok(started)
    }

    /// What to write for a schedule found by `due_schedules` at `now`, and what it
    /// does; `None` when there is nothing to write.
    async fn fire_of(
        &self,
        stored: &ScheduleRecord,
        now: Timestamp,
    ) -> Result<Option<(ScheduleFire, Outcome)>, StoreError> {
        let schedule = match stored.schedule() {
            Ok(schedule) => schedule,
            // Its zone is unknown here, say: paused with the reason, not retried at
            // every look.
            Err(e) => {
                tracing::warn!(schedule = %stored.id, error = %e, "pausing a schedule this build cannot read");
                let fire = ScheduleFire::new(&*stored.id, stored.next_due, None)
                    .pending(stored.pending_due, stored.pending_due)
                    .error(e.to_string());
                return Ok(Some((fire, Outcome::Nothing)));
            }
        };
        // A due time to start, and the next due time after this fire. Not due, the
        // schedule may still hold a pending due time (`Overlap::QueueOne`).
        let (start, next_due) = match schedule.plan(stored.next_due, now, stored.last_due) {
            Some(plan) => (plan.start.or(stored.pending_due), plan.next_due),
            None if stored.pending_due.is_some() => (stored.pending_due, Some(stored.next_due)),
            None => return Ok(None),
        };
        let fire = ScheduleFire::new(&*stored.id, stored.next_due, next_due);
        let Some(at) = start else {
            return Ok(Some((fire.pending(stored.pending_due, stored.pending_due), Outcome::Missed)));
        };
        if stored.overlap != Overlap::Allow
            && let Some(last_run) = stored.last_run
            && !self.has_ended(last_run).await?
        {
            let fire = match stored.overlap {
                // The pending due time is the one found: it waits on.
                _ if next_due == Some(stored.next_due) && stored.pending_due == Some(at) => return Ok(None),
                Overlap::QueueOne if stored.pending_due.is_none() => fire
                    .pending(None, Some(at))
                    .error(format!("due time {at} is pending: the last run {last_run} has not ended")),
                _ => fire
                    .pending(stored.pending_due, stored.pending_due)
                    .error(format!("skipped due time {at}: the last run {last_run} has not ended")),
            };
            return Ok(Some((fire, Outcome::Overlapped(at, last_run))));
        }
        // Whichever due time it starts, no other is left pending: one run at a time.
        let mut fire = fire.pending(stored.pending_due, None);
        if stored.overlap != Overlap::Allow {
            fire = fire.if_last_run_ended();
        }
        let run_id = scheduled_run_id(&stored.id, stored.created_at, at);
        let input = serde_json::from_str::<Value>(stored.input.get()).map_err(|e| e.to_string());
        let run = input.and_then(|input| {
            self.registered(&stored.workflow)
                .and_then(|wf| wf.new_run_json(self, run_id, input))
                .map_err(|e| self.secrets().redact(&e.to_string()).into_owned())
        });
        Ok(Some(match run {
            Ok(run) => (fire.start(at, run), Outcome::Started(run_id, at)),
            Err(error) => {
                tracing::warn!(schedule = %stored.id, due = %at, %error, "a due time started no run");
                (fire.error(error), Outcome::Nothing)
            }
        }))
    }

    /// Whether run `run_id` has ended; one the store no longer has has.
    async fn has_ended(&self, run_id: RunId) -> Result<bool, StoreError> {
        match self.inner.store().load_run(run_id).await {
            Ok(run) => Ok(run.status.is_finished()),
            Err(StoreError::RunNotFound(_)) => Ok(true),
            Err(e) => Err(e),
        }
    }
}

/// What a schedule's fire does, for the worker's log.
enum Outcome {
    /// Started the run, for the due time.
    Started(RunId, Timestamp),
    /// Found the last run not ended at the due time, and skipped or kept it.
    Overlapped(Timestamp, RunId),
    /// Skipped missed due times.
    Missed,
    /// Nothing to say (or said already).
    Nothing,
}

fn into_schedule_error(workflow: &str, e: RunError) -> ScheduleError {
    match e {
        RunError::UnknownWorkflow { workflow, registered } => ScheduleError::UnknownWorkflow { workflow, registered },
        other => ScheduleError::Input { workflow: workflow.to_owned(), reason: other.to_string() },
    }
}
