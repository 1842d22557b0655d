//! Timers whose delay the workflow gives at run time (`after = Self::method`): from
//! its configuration (an escalation time per environment) or from the run's state.
//! On each store; nothing sleeps: time moves by the runtime's clock, and a worker
//! finds a parked run by the wake time stored with it.
//!
//! - A run parks with the wake time the method gives, and a worker wakes it then,
//!   not a millisecond before; the timer fires.
//! - The delay is read each time the run parks: one from the state follows the
//!   state, and a new configuration applies from the next park.
//! - A hand-written workflow that does not give a computed timer's delay fails its
//!   run with the reason.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use loopstack::{
    BoxFuture, Definition, END, Result, RunContext, RunError, RunId, RunOutcome, RunStatus, Runtime, START, Store,
    Timestamp, TransitionDef, TransitionError, Worker, Workflow, WorkflowExt, workflow,
};
use serde::{Deserialize, Serialize};

mod common;
use common::stores::on_every_store;

#[derive(Debug, Default, Serialize, Deserialize)]
struct Incident {
    /// How long after an escalation the on-call person is reminded: set per run.
    remind_every_mins: u64,
    escalated: bool,
    reminders: u32,
}

/// An incident escalates once nobody acknowledged it within its environment's
/// escalation time, then reminds at the interval the incident itself sets.
struct Incidents {
    escalation: Duration,
}

#[workflow(state = Incident)]
impl Incidents {
    #[transition(to = Open)]
    async fn open(&self, _state: &mut Incident, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = [Open, Escalated], to = End, wait)]
    async fn acknowledge(&self, _state: &mut Incident, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Open, to = Escalated, after = Self::escalation)]
    async fn escalate(&self, state: &mut Incident, _cx: &mut RunContext) -> Result<()> {
        state.escalated = true;
        Ok(())
    }

    #[transition(from = Escalated, to = Escalated, after = Self::reminder)]
    async fn remind(&self, state: &mut Incident, _cx: &mut RunContext) -> Result<()> {
        state.reminders += 1;
        Ok(())
    }

    /// From the configuration the workflow value holds.
    fn escalation(&self, _state: &Incident) -> Duration {
        self.escalation
    }

    /// From the run's state.
    fn reminder(&self, state: &Incident) -> Duration {
        Duration::from_secs(state.remind_every_mins * 60)
    }
}

const MIN: i64 = 60_000;

/// A clock a day ahead of the system's, which moves only when the test moves it.
fn clock() -> (i64, Arc<AtomicI64>, impl Fn() -> Timestamp + Send + Sync + 'static) {
    let base = Timestamp::now().as_millis() + 24 * 60 * MIN;
    let ahead = Arc::new(AtomicI64::new(0));
    let now = {
        let ahead = ahead.clone();
        move || Timestamp::from_millis(base + ahead.load(Ordering::SeqCst))
    };
    (base, ahead, now)
}

async fn wake_at(store: &Arc<dyn Store>, run_id: RunId) -> Option<i64> {
    store.load_run(run_id).await.unwrap().wake_at.map(|at| at.as_millis())
}

/// Production escalates after 30 minutes, staging after 5: each run parks with its
/// workflow value's time, and a worker wakes it then.
async fn a_timer_from_the_configuration_parks_the_run_until_its_delay(store: Arc<dyn Store>) {
    let (base, ahead, now) = clock();
    let runtime = Runtime::with_shared_store(store.clone()).clock(now).max_steps(10);
    let production = Incidents { escalation: Duration::from_secs(30 * 60) };
    let staging = Incidents { escalation: Duration::from_secs(5 * 60) };
    let incident = || Incident { remind_every_mins: 10, ..Incident::default() };

    let report = runtime.start(&production, incident()).await.unwrap();
    assert_eq!(report.outcome, RunOutcome::Waiting { place: "open", signals: vec!["acknowledge"] });
    let run = report.run_id;
    assert_eq!(wake_at(&store, run).await, Some(base + 30 * MIN));
    let other = runtime.start(&staging, incident()).await.unwrap().run_id;
    assert_eq!(wake_at(&store, other).await, Some(base + 5 * MIN));
    // Acknowledged in time: it leaves the worker's claims to the first run.
    let acknowledged = runtime.signal(&staging, other, IncidentsSignal::Acknowledge).await.unwrap();
    assert_eq!(acknowledged.outcome, RunOutcome::Completed);

    let worker = Worker::new(runtime.clone()).register(production);
    ahead.store(30 * MIN - 1, Ordering::SeqCst);
    assert_eq!(worker.run_once().await.unwrap(), 0, "not due a millisecond before its wake time");
    ahead.store(30 * MIN, Ordering::SeqCst);
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let record = store.load_run(run).await.unwrap();
    assert_eq!((record.status, &*record.place), (RunStatus::Waiting, "escalated"));
    let state: Incident = serde_json::from_str(record.state.get()).unwrap();
    assert!(state.escalated);
    let history = store.history(run).await.unwrap();
    let at: Vec<(&str, i64)> = history.iter().map(|s| (&*s.transition, s.at.as_millis() - base)).collect();
    assert_eq!(at, [("open", 0), ("escalate", 30 * MIN)]);
}

on_every_store!(a_timer_from_the_configuration_parks_the_run_until_its_delay);

/// The reminder's interval is the incident's: the run parks for it after each
/// reminder. A changed escalation time applies when the run parks again.
async fn a_timer_from_the_state_follows_the_run(store: Arc<dyn Store>) {
    let (base, ahead, now) = clock();
    let runtime = Runtime::with_shared_store(store.clone()).clock(now).max_steps(10);
    let wf = Incidents { escalation: Duration::from_secs(30 * 60) };
    let report = runtime.start(&wf, Incident { remind_every_mins: 7, ..Incident::default() }).await.unwrap();
    let run = report.run_id;
    // The delays the run waits for, as the workflow gives them at its place.
    assert_eq!(wf.timers("open", &report.state).unwrap(), [(2, Duration::from_secs(30 * 60))]);

    // Before it is due, a new configuration (an hour) is what the next park stores.
    ahead.store(20 * MIN, Ordering::SeqCst);
    let slower = Incidents { escalation: Duration::from_secs(60 * 60) };
    let again = runtime.resume(&slower, run).await.unwrap();
    assert_eq!(again.outcome, RunOutcome::Waiting { place: "open", signals: vec!["acknowledge"] });
    assert_eq!(wake_at(&store, run).await, Some(base + 60 * MIN));

    ahead.store(60 * MIN, Ordering::SeqCst);
    let escalated = runtime.resume(&slower, run).await.unwrap();
    assert_eq!(escalated.outcome, RunOutcome::Waiting { place: "escalated", signals: vec!["acknowledge"] });
    assert_eq!(wake_at(&store, run).await, Some(base + 67 * MIN), "7 minutes, from the state");

    let worker = Worker::new(runtime.clone()).register(slower);
    ahead.store(67 * MIN, Ordering::SeqCst);
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let record = store.load_run(run).await.unwrap();
    let state: Incident = serde_json::from_str(record.state.get()).unwrap();
    assert_eq!((state.escalated, state.reminders), (true, 1));
    // A self-loop counts from the reminder it just took.
    assert_eq!(wake_at(&store, run).await, Some(base + 74 * MIN));
    let history = store.history(run).await.unwrap();
    let at: Vec<(&str, i64)> = history.iter().map(|s| (&*s.transition, s.at.as_millis() - base)).collect();
    assert_eq!(at, [("open", 0), ("escalate", 60 * MIN), ("remind", 67 * MIN)]);
}

on_every_store!(a_timer_from_the_state_follows_the_run);

#[test]
fn a_computed_timer_is_a_timer_of_the_table() {
    let wf = Incidents { escalation: Duration::from_secs(60) };
    let def = wf.definition();
    let (_, escalate) = def.transition("escalate").unwrap();
    assert_eq!((escalate.after, escalate.after_fn), (None, Some("escalation")));
    assert!(escalate.is_timer() && escalate.waits() && !escalate.wait);
    assert_eq!(def.check(), Ok(()));
    // The table alone knows no delay for it; the workflow does.
    assert!(def.timers("open", |_| true).unwrap().is_empty());
    assert!(def.mermaid().contains("open --> escalated: escalate (after escalation)\n"), "{}", def.mermaid());
}

/// A hand-written workflow whose table has a computed timer must give its delay:
/// without `Workflow::timer`, the run fails with the reason rather than wait for a
/// wake that never comes.
struct Forgetful;

static FORGETFUL: Definition = Definition::new(
    "forgetful",
    &[START, "open", END],
    &[TransitionDef::new("open", &[START], "open"), TransitionDef::new("expire", &["open"], END).after_fn("expiry")],
);

impl Workflow for Forgetful {
    type State = ();
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &FORGETFUL
    }
    fn init(&self, (): ()) {}
    fn guard(&self, _: usize, (): &()) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        _: usize,
        _: &'a mut (),
        _: &'a mut RunContext,
        _: Option<serde_json::Value>,
    ) -> BoxFuture<'a, std::result::Result<(), TransitionError>> {
        Box::pin(async { Ok(()) })
    }
}

#[tokio::test]
async fn a_computed_timer_without_a_delay_fails_the_run() {
    assert_eq!(FORGETFUL.check(), Ok(()));
    let err = Runtime::new().start(&Forgetful, ()).await.unwrap_err();
    let RunError::Mismatch { workflow, reason, .. } = &err else { panic!("{err:?}") };
    assert_eq!(*workflow, "forgetful");
    assert_eq!(
        reason,
        "timer transition `expire` takes its delay from `expiry`, and the workflow's `Workflow::timer` gives none"
    );
}
