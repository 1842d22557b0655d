//! Schedules: each due time started once.

use std::sync::atomic::AtomicI64;

use super::*;

/// The workflows `names`, version 1 each, for [`Store::claim_runnable`].
pub(super) fn v1<'a>(names: &'a [&'a str]) -> Vec<WorkflowVersions<'a>> {
    names.iter().map(|n| WorkflowVersions::first(n)).collect()
}

pub(super) async fn schedules_start_each_due_time_once(store: &Arc<dyn Store>) {
    use std::time::Duration;

    use crate::schedule::{Missed, Schedule, ScheduleError, ScheduleFire, scheduled_run_id};

    const HOUR: i64 = 3600 * 1000;
    let probe = Schedule::every(Duration::from_secs(3600))
        .unwrap()
        .record("probe".into(), "review".into(), json_raw(json!({})), Timestamp::now())
        .unwrap();
    match store.create_schedule(&probe).await {
        Ok(()) => store.delete_schedule("probe").await.expect("a stored schedule can be deleted"),
        Err(StoreError::SchedulesUnsupported) => {
            let due = store.due_schedules(&["review"], Timestamp::from_millis(i64::MAX), 10).await.unwrap();
            assert!(due.is_empty(), "a store without schedules finds none due");
            return;
        }
        Err(e) => panic!("storing a schedule: {e}"),
    }

    // Two runtimes over the store (two workers), on one clock that jumps ahead.
    let ahead = Arc::new(AtomicI64::new(0));
    let clock = || {
        let ahead = ahead.clone();
        move || Timestamp::from_millis(Timestamp::now().as_millis() + ahead.load(Ordering::SeqCst))
    };
    let a = Runtime::with_shared_store(store.clone()).clock(clock()).register(Review::default());
    let b = Runtime::with_shared_store(store.clone()).clock(clock()).register(Review::default());
    let input_json = serde_json::to_value(input(false)).unwrap();
    let hourly = || Schedule::every(Duration::from_secs(3600)).unwrap();

    // Bad requests are typed errors and store nothing.
    let err = a.schedule("bad workflow", "review", input_json.clone(), hourly()).await.unwrap_err();
    assert!(matches!(err, ScheduleError::InvalidId(_)), "{err}");
    let err = a.schedule("s1", "no-such-workflow", input_json.clone(), hourly()).await.unwrap_err();
    assert!(matches!(err, ScheduleError::UnknownWorkflow { .. }), "{err}");
    let err = a.schedule("s1", "review", json!({"wait": "not a bool"}), hourly()).await.unwrap_err();
    assert!(matches!(err, ScheduleError::Input { .. }), "{err}");
    assert!(store.list_schedules().await.unwrap().is_empty(), "refused schedules store nothing");

    let stored = a.schedule("s1", "review", input_json.clone(), hourly()).await.unwrap();
    let t0 = stored.created_at;
    assert_eq!(stored.next_due, t0 + Duration::from_secs(3600));
    let err = b.schedule("s1", "review", input_json.clone(), hourly()).await.unwrap_err();
    assert!(matches!(err, ScheduleError::Store(StoreError::ScheduleExists(ref id)) if id == "s1"), "{err}");
    let loaded = store.load_schedule("s1").await.unwrap();
    assert_eq!(
        (loaded.next_due, &loaded.recurrence, loaded.missed, loaded.paused),
        (stored.next_due, &stored.recurrence, Missed::Skip, false)
    );
    assert_eq!(loaded.input.get(), stored.input.get());

    // Not due yet: nothing starts.
    assert!(a.start_due_schedules().await.unwrap().is_empty());

    // Due: both workers look at once; one run starts, with the derived id.
    for hour in 1..=3 {
        ahead.store(hour * HOUR, Ordering::SeqCst);
        let (x, y) = tokio::join!(a.start_due_schedules(), b.start_due_schedules());
        let started: Vec<RunId> = x.unwrap().into_iter().chain(y.unwrap()).collect();
        let due = t0 + Duration::from_millis((hour * HOUR) as u64);
        assert_eq!(started, [scheduled_run_id("s1", t0, due)], "hour {hour}: one run for one due time");
        let run = store.load_run(started[0]).await.unwrap();
        assert_eq!((run.status, &*run.workflow), (RunStatus::Queued, "review"));
        let s = store.load_schedule("s1").await.unwrap();
        assert_eq!(
            (s.last_due, s.last_run, s.next_due),
            (Some(due), Some(started[0]), due + Duration::from_secs(3600))
        );
        // Looking again at the same time starts nothing.
        assert!(a.start_due_schedules().await.unwrap().is_empty());
    }
    let runs = store.scheduled_runs("s1", 10).await.unwrap();
    assert_eq!(runs.len(), 3, "each started run is recorded with its schedule and due time");
    assert_eq!(runs[0].due, t0 + Duration::from_millis(3 * HOUR as u64), "newest first");
    assert!(runs.iter().all(|r| r.schedule == "s1" && r.run_id == scheduled_run_id("s1", t0, r.due)));

    // The compare-and-set itself: of two writers that read one due time, one moves it.
    let s = store.load_schedule("s1").await.unwrap();
    let fire = || ScheduleFire::new("s1", s.next_due, Some(s.next_due + Duration::from_secs(3600)));
    let (x, y) = tokio::join!(store.fire_schedule(fire()), store.fire_schedule(fire()));
    assert_eq!([x.unwrap(), y.unwrap()].iter().filter(|moved| **moved).count(), 1);
    assert_eq!(store.load_schedule("s1").await.unwrap().next_due, s.next_due + Duration::from_secs(3600));

    // Paused: nothing starts; resumed: next due after now, the paused times not started.
    let paused = a.pause_schedule("s1").await.unwrap();
    assert!(paused.paused);
    ahead.store(10 * HOUR, Ordering::SeqCst);
    assert!(a.start_due_schedules().await.unwrap().is_empty(), "a paused schedule starts nothing");
    let resumed = a.resume_schedule("s1").await.unwrap();
    assert!(!resumed.paused);
    assert!(resumed.next_due > a.now() && resumed.next_due <= a.now() + Duration::from_secs(3600));
    assert!(a.start_due_schedules().await.unwrap().is_empty());

    // Missed times: found five hours late, `Skip` starts nothing, `CatchUpOnce` one run.
    ahead.store(0, Ordering::SeqCst);
    let skip = a.schedule("skip", "review", input_json.clone(), hourly()).await.unwrap();
    let catch_up =
        a.schedule("catch-up", "review", input_json.clone(), hourly().missed(Missed::CatchUpOnce)).await.unwrap();
    ahead.store(5 * HOUR + 20 * 60 * 1000, Ordering::SeqCst);
    let started = a.start_due_schedules().await.unwrap();
    let latest = catch_up.created_at + Duration::from_millis(5 * HOUR as u64);
    assert_eq!(started, [scheduled_run_id("catch-up", catch_up.created_at, latest)], "one run for the missed times");
    assert_eq!(store.load_schedule("catch-up").await.unwrap().last_due, Some(latest));
    let skipped = store.load_schedule("skip").await.unwrap();
    assert_eq!(skipped.last_run, None, "skipped times start nothing");
    assert_eq!(
        skipped.next_due,
        skip.created_at + Duration::from_millis(2 * HOUR as u64),
        "on by one period: a look cannot tell late from a clock ahead"
    );
    assert!(store.scheduled_runs("skip", 10).await.unwrap().is_empty());

    // Listed by id; a worker drives what a schedule started.
    let ids: Vec<String> = store.list_schedules().await.unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(ids, ["catch-up", "s1", "skip"]);
    let worker = Worker::new(a.clone());
    worker.run_once().await.unwrap();
    assert_eq!(store.load_run(started[0]).await.unwrap().status, RunStatus::Completed);

    // Deleted: gone, with its record of runs; its runs stay.
    for id in ["s1", "skip", "catch-up"] {
        a.delete_schedule(id).await.unwrap();
    }
    assert!(matches!(store.load_schedule("s1").await, Err(StoreError::ScheduleNotFound(_))));
    assert!(matches!(a.delete_schedule("s1").await, Err(ScheduleError::Store(StoreError::ScheduleNotFound(_)))));
    assert!(matches!(a.pause_schedule("s1").await, Err(ScheduleError::Store(StoreError::ScheduleNotFound(_)))));
    assert!(matches!(store.scheduled_runs("s1", 10).await, Err(StoreError::ScheduleNotFound(_))));
    assert!(store.load_run(runs[0].run_id).await.is_ok());
    assert!(
        !store.fire_schedule(ScheduleFire::new("s1", s.next_due, None)).await.unwrap(),
        "a deleted schedule does not fire"
    );
}

/// Whether the store keeps schedules (a store that does not is checked by
/// [`schedules_start_each_due_time_once`]).
async fn keeps_schedules(store: &Arc<dyn Store>) -> bool {
    !matches!(store.list_schedules().await, Err(StoreError::SchedulesUnsupported))
}

/// `rfc3339` in milliseconds.
fn at(rfc3339: &str) -> Timestamp {
    let ts: jiff::Timestamp = rfc3339.parse().unwrap();
    Timestamp::from_millis(ts.as_millisecond())
}

/// Two runtimes over the store (two workers) on one settable clock, at `start`.
fn two_workers_at(store: &Arc<dyn Store>, start: Timestamp) -> (Arc<AtomicI64>, Runtime, Runtime) {
    let now = Arc::new(AtomicI64::new(start.as_millis()));
    let clock = || {
        let now = now.clone();
        move || Timestamp::from_millis(now.load(Ordering::SeqCst))
    };
    let a = Runtime::with_shared_store(store.clone()).clock(clock()).register(Review::default());
    let b = Runtime::with_shared_store(store.clone()).clock(clock()).register(Review::default());
    (now, a, b)
}

/// Both workers look at once; the runs they started, sorted.
async fn both_look(a: &Runtime, b: &Runtime) -> Vec<RunId> {
    let (x, y) = tokio::join!(a.start_due_schedules(), b.start_due_schedules());
    let mut started: Vec<RunId> = x.unwrap().into_iter().chain(y.unwrap()).collect();
    started.sort();
    started
}

pub(super) async fn a_clock_far_ahead_moves_a_schedule_one_period_at_most(store: &Arc<dyn Store>) {
    use std::time::Duration;

    use crate::schedule::{Schedule, scheduled_run_id};

    if !keeps_schedules(store).await {
        return;
    }
    let t0 = at("2026-06-01T00:00:00Z");
    let (now, a, b) = two_workers_at(store, t0);
    let input_json = serde_json::to_value(input(false)).unwrap();
    let hourly = Schedule::every(Duration::from_secs(3600)).unwrap();
    let daily = Schedule::cron("0 7 * * *").unwrap();
    let h = a.schedule("ahead-hourly", "review", input_json.clone(), hourly).await.unwrap();
    let d = a.schedule("ahead-daily", "review", input_json, daily).await.unwrap();
    assert_eq!((h.next_due, d.next_due), (at("2026-06-01T01:00:00Z"), at("2026-06-01T07:00:00Z")));

    // A worker whose clock is a year (and half an hour) ahead: every time it sees
    // is missed, and it moves each schedule on by one period, no further.
    now.store(at("2027-06-01T00:30:00Z").as_millis(), Ordering::SeqCst);
    assert!(a.start_due_schedules().await.unwrap().is_empty());
    let h = store.load_schedule("ahead-hourly").await.unwrap();
    let d = store.load_schedule("ahead-daily").await.unwrap();
    assert_eq!(h.next_due, at("2026-06-01T02:00:00Z"), "the interval's next time after the stored one");
    assert_eq!(d.next_due, at("2026-06-02T07:00:00Z"), "the cron expression's next time after the stored one");

    // Workers on time start the next due times as they come, once.
    now.store(at("2026-06-01T02:00:10Z").as_millis(), Ordering::SeqCst);
    assert_eq!(both_look(&a, &b).await, [scheduled_run_id("ahead-hourly", t0, at("2026-06-01T02:00:00Z"))]);
    now.store(at("2026-06-02T07:00:05Z").as_millis(), Ordering::SeqCst);
    let started = both_look(&a, &b).await;
    assert!(started.contains(&scheduled_run_id("ahead-daily", t0, at("2026-06-02T07:00:00Z"))), "{started:?}");
    for id in ["ahead-hourly", "ahead-daily"] {
        a.delete_schedule(id).await.unwrap();
    }
}
