//! Schedules: each due time started once.

use std::sync::atomic::AtomicI64;

use super::*;

/// The workflows `names`, version 1 each, for [`Store::claim_runnable`].
pub(super) fn v1<'a>(names: &'a [&'a str]) -> Vec<WorkflowVersions<'a>> {
    names.iter().map(|n| WorkflowVersions::first(n)).collect()
}

pub(super) async fn schedules_start_each_due_time_once(store: &Arc<dyn Store>) {
    use std::time::Duration;

    use crate::schedule::{Missed, Overlap, Schedule, ScheduleError, ScheduleFire, scheduled_run_id};

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

    // Its runs are left queued: each due time starts one however many still are.
    let allow = || hourly().overlap(Overlap::Allow);
    let stored = a.schedule("s1", "review", input_json.clone(), allow()).await.unwrap();
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

pub(super) async fn overlapping_due_times_follow_the_schedules_policy(store: &Arc<dyn Store>) {
    use std::time::Duration;

    use crate::schedule::{Overlap, Schedule, ScheduleFire, scheduled_run_id};

    if !keeps_schedules(store).await {
        return;
    }
    let t0 = at("2026-07-01T00:00:00Z");
    let hour = |n: u64| t0 + Duration::from_secs(n * 3600);
    let (now, a, b) = two_workers_at(store, t0);
    let input_json = serde_json::to_value(input(false)).unwrap();
    let hourly = || Schedule::every(Duration::from_secs(3600)).unwrap();
    for (id, schedule) in [
        ("o-skip", hourly()),
        ("o-allow", hourly().overlap(Overlap::Allow)),
        ("o-queue", hourly().overlap(Overlap::QueueOne)),
    ] {
        a.schedule(id, "review", input_json.clone(), schedule).await.unwrap();
    }
    assert_eq!(store.load_schedule("o-skip").await.unwrap().overlap, Overlap::Skip, "the default");
    assert_eq!(store.load_schedule("o-queue").await.unwrap().overlap, Overlap::QueueOne, "kept by the store");
    let run = |id: &str, n: u64| scheduled_run_id(id, t0, hour(n));
    let sorted = |mut ids: Vec<RunId>| {
        ids.sort();
        ids
    };

    // Hour 1: nothing runs yet; the two workers race, and each schedule starts one run.
    now.store(hour(1).as_millis(), Ordering::SeqCst);
    assert_eq!(both_look(&a, &b).await, sorted(vec![run("o-skip", 1), run("o-allow", 1), run("o-queue", 1)]));

    // Hour 2: those runs are still queued. `allow` starts another; `skip` records the
    // due time as skipped; `queue` keeps it pending.
    now.store(hour(2).as_millis(), Ordering::SeqCst);
    assert_eq!(both_look(&a, &b).await, [run("o-allow", 2)]);
    let skip = store.load_schedule("o-skip").await.unwrap();
    assert_eq!((skip.last_run, skip.next_due, skip.pending_due), (Some(run("o-skip", 1)), hour(3), None));
    assert!(skip.last_error.as_deref().is_some_and(|e| e.starts_with("skipped")), "{:?}", skip.last_error);
    let queue = store.load_schedule("o-queue").await.unwrap();
    assert_eq!((queue.last_run, queue.next_due, queue.pending_due), (Some(run("o-queue", 1)), hour(3), Some(hour(2))));
    assert!(both_look(&a, &b).await.is_empty(), "nothing starts while the last runs have not ended");

    // The store checks the last run in the fire itself: a start that needs it ended
    // does not fire while it has not.
    let fire = ScheduleFire::new("o-queue", hour(3), Some(hour(3))).pending(Some(hour(2)), None).if_last_run_ended();
    assert!(!store.fire_schedule(fire).await.unwrap());

    // `queue`'s last run ends: of the two workers, one starts the pending due time.
    a.cancel(run("o-queue", 1), "done").await.unwrap();
    assert_eq!(both_look(&a, &b).await, [run("o-queue", 2)]);
    let queue = store.load_schedule("o-queue").await.unwrap();
    assert_eq!(
        (queue.last_run, queue.last_due, queue.next_due, queue.pending_due),
        (Some(run("o-queue", 2)), Some(hour(2)), hour(3), None)
    );
    assert!(both_look(&a, &b).await.is_empty(), "a pending due time starts once");

    // Hour 3: `skip`'s last run ended, so it starts again; `queue`'s runs, so it keeps
    // hour 3 pending; hour 4 finds one pending already and is skipped.
    a.cancel(run("o-skip", 1), "done").await.unwrap();
    now.store(hour(3).as_millis(), Ordering::SeqCst);
    assert_eq!(both_look(&a, &b).await, sorted(vec![run("o-skip", 3), run("o-allow", 3)]));
    now.store(hour(4).as_millis(), Ordering::SeqCst);
    assert_eq!(both_look(&a, &b).await, [run("o-allow", 4)]);
    let queue = store.load_schedule("o-queue").await.unwrap();
    assert_eq!((queue.next_due, queue.pending_due), (hour(5), Some(hour(3))));
    assert!(queue.last_error.as_deref().is_some_and(|e| e.starts_with("skipped")), "{:?}", queue.last_error);
    let recorded: Vec<Timestamp> = store.scheduled_runs("o-queue", 10).await.unwrap().iter().map(|r| r.due).collect();
    assert_eq!(recorded, [hour(2), hour(1)]);
    assert_eq!(store.scheduled_runs("o-allow", 10).await.unwrap().len(), 4);
    assert_eq!(store.scheduled_runs("o-skip", 10).await.unwrap().len(), 2);
    for id in ["o-skip", "o-allow", "o-queue"] {
        a.delete_schedule(id).await.unwrap();
    }
}
