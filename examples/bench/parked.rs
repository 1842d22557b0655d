//! W6: runs parked waiting for a signal.
//!
//! `--n` runs of a two-transition workflow (`park` to `Waiting`, then the wait
//! transition `wake` to `End`) are started and left waiting, `--store sqlite|postgres|
//! memory`. Measured, in one process and one line:
//!
//! - parking: wall time and runs per second (16 starts at a time);
//! - memory: the parking process's RSS growth per parked run (the memory store keeps
//!   the runs themselves there), and a worker's: a fresh worker process over the
//!   parked runs (for the memory store, a worker task in this process), its RSS when
//!   connected, after 2 s of polling over them, and after it drove the signalled runs,
//!   with its CPU time while idle (and the same over an empty store, for reference);
//! - listing: `Store::list_runs` with status waiting, a page of 1,000 at a time, all of
//!   them, and the first page alone;
//! - waking, `--signals` runs (20 by default), median and slowest: a signal put in the
//!   inbox (`Store::send_signal`) and `Worker::run_once` claiming and driving it to its
//!   end; `Runtime::signal` (delivered and driven in this process, no claim query); and
//!   a signal seen by the worker process (its poll every 10 ms included), from the
//!   send to the run's completion as read from the store;
//! - an idle poll: `Worker::run_once` when nothing can move (the schedules' check and
//!   the claim query over the parked runs).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use loopstack::prelude::*;
use loopstack::{MemoryStore, RunId, RunQuery, RunStatus, Runtime, Store, Worker};
use loopstack_store::{PostgresStore, SqliteStore};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::measure::{proc_usage, round};
use crate::workers::{ChildProcess, control};
use crate::{Args, DbKind};

const CHILD_FLAG: &str = "--w6-worker";
/// How often the worker process polls: a signalled run waits this long at most.
const WORKER_POLL: Duration = Duration::from_millis(10);
/// Runs started at once while parking.
const PARKING: usize = 16;

/// A parked run's state.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Parked {
    woken_by: Option<String>,
}

/// The signal that wakes a parked run.
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Wake {
    by: String,
}

pub(crate) struct Parking;

#[workflow(name = "parked", input = Parked)]
impl Parking {
    #[transition(to = Waiting)]
    async fn park(&self, _parked: &mut Parked, _cx: &mut RunContext) -> Result<()> {
        Ok(())
    }

    #[transition(from = Waiting, to = End, wait)]
    async fn wake(&self, parked: &mut Parked, _cx: &mut RunContext, wake: Wake) -> Result<()> {
        parked.woken_by = Some(wake.by);
        Ok(())
    }
}

/// The store of a W6 run, and where a worker process finds it.
struct Opened {
    store: Arc<dyn Store>,
    child_args: Vec<String>,
    dir: Option<std::path::PathBuf>,
    schema: Option<String>,
}

async fn open(kind: DbKind) -> Result<Opened, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    match kind {
        DbKind::Sqlite => {
            let dir = std::env::temp_dir().join(format!("loopstack-bench-w6-{}", RunId::new()));
            std::fs::create_dir_all(&dir).map_err(|x| e(&x))?;
            let path = dir.join("parked.db");
            let store = SqliteStore::open(&path).await.map_err(|x| e(&x))?;
            let child_args = vec!["--store".into(), "sqlite".into(), "--path".into(), path.display().to_string()];
            Ok(Opened { store: Arc::new(store), child_args, dir: Some(dir), schema: None })
        }
        DbKind::Postgres => {
            let schema = format!("loopstack_bench_w6_{}", RunId::new().0.simple());
            let store = PostgresStore::connect_schema(&crate::postgres_url(), &schema).await.map_err(|x| e(&x))?;
            let child_args = vec!["--store".into(), "postgres".into(), "--schema".into(), schema.clone()];
            Ok(Opened { store: Arc::new(store), child_args, dir: None, schema: Some(schema) })
        }
        DbKind::Memory => {
            Ok(Opened { store: Arc::new(MemoryStore::new()), child_args: Vec::new(), dir: None, schema: None })
        }
    }
}

impl Opened {
    async fn cleanup(&self) {
        if std::env::var_os("LOOPSTACK_BENCH_KEEP").is_some() {
            eprintln!("kept the database: {:?} {:?}", self.dir, self.schema);
            return;
        }
        if let Some(schema) = &self.schema
            && let Ok(pool) = sqlx::PgPool::connect(&crate::postgres_url()).await
        {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {schema} CASCADE")))
                .execute(&pool)
                .await;
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// `--w6-worker --store sqlite --path P | --store postgres --schema S`: a worker over
/// the parked runs, until its input ends.
pub(crate) fn child_main() -> Option<ExitCode> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == CHILD_FLAG)?;
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    let out = rt.block_on(async {
        let store: Arc<dyn Store> = match flag("--store").as_deref() {
            Some("sqlite") => {
                Arc::new(SqliteStore::open(flag("--path").unwrap_or_default()).await.map_err(|e| e.to_string())?)
            }
            _ => Arc::new(
                PostgresStore::connect_schema(&crate::postgres_url(), &flag("--schema").unwrap_or_default())
                    .await
                    .map_err(|e| e.to_string())?,
            ),
        };
        let control = control();
        let worker = Worker::new(Runtime::with_shared_store(store)).register(Parking).poll_interval(WORKER_POLL);
        println!("ready");
        let _ = control.go.await;
        worker.run(control.stop).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(json!({"ok": true}))
    });
    println!("{}", out.unwrap_or_else(|e| json!({"ok": false, "error": e})));
    Some(ExitCode::SUCCESS)
}

fn mb(kb: u64) -> f64 {
    round(kb as f64 / 1024.0, 2)
}

/// Median and slowest, in milliseconds.
fn spread(mut times: Vec<Duration>) -> Value {
    times.sort();
    let ms = |d: Option<&Duration>| d.map(|d| round(d.as_secs_f64() * 1e3, 2));
    json!({"median_ms": ms(times.get(times.len() / 2)), "max_ms": ms(times.last())})
}

fn wake() -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(&json!({"by": "bench"})).expect("JSON")
}

/// W6 on each store, one process each.
pub(crate) fn compare(args: &Args) -> ExitCode {
    let mut ok = true;
    for store in ["sqlite", "postgres", "memory"] {
        let n = args.n.to_string();
        let signals = args.signals.to_string();
        let child = ["--workload", "W6", "--store", store, "--n", &n, "--signals", &signals];
        match std::process::Command::new(std::env::current_exe().expect("own path")).args(child).status() {
            Ok(status) => ok &= status.success(),
            Err(e) => {
                eprintln!("could not run W6 on {store}: {e}");
                ok = false;
            }
        }
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::from(2) }
}

pub(crate) async fn run(args: &Args) -> ExitCode {
    let opened = match open(args.store).await {
        Ok(opened) => opened,
        Err(e) => {
            println!("{}", json!({"workload": "W6", "store": args.store.name(), "ok": false, "error": e}));
            return ExitCode::from(2);
        }
    };
    let out = measure(args, &opened).await.unwrap_or_else(|e| json!({"ok": false, "error": e}));
    opened.cleanup().await;
    let mut line = json!({"framework": "loopstack", "workload": "W6", "store": args.store.name(), "n": args.n});
    if let (Some(line), Some(out)) = (line.as_object_mut(), out.as_object()) {
        line.extend(out.clone());
    }
    println!("{line}");
    if line["ok"] == true { ExitCode::SUCCESS } else { ExitCode::from(2) }
}

/// Parks `n` runs; returns `keep` of their ids, spread over them.
async fn park(runtime: &Runtime, n: usize, keep: usize) -> Result<Vec<RunId>, String> {
    let every = (n / keep.max(1)).max(1);
    let mut parked = futures::stream::iter(0..n)
        .map(|i| async move {
            let report = runtime.start(&Parking, Parked::default()).await.map_err(|e| e.to_string())?;
            match report.outcome {
                RunOutcome::Waiting { .. } => Ok((i, report.run_id)),
                other => Err(format!("a run did not park: {other:?}")),
            }
        })
        .buffer_unordered(PARKING);
    let mut ids = Vec::with_capacity(keep);
    while let Some(result) = parked.next().await {
        let (i, id) = result?;
        if i % every == 0 && ids.len() < keep {
            ids.push(id);
        }
    }
    Ok(ids)
}

async fn measure(args: &Args, opened: &Opened) -> Result<Value, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let store = opened.store.clone();
    let runtime = Runtime::with_shared_store(store.clone());
    let worker = Worker::new(runtime.clone()).register(Parking);
    let (n, k) = (args.n, args.signals.max(2));
    if n < 3 * k {
        return Err(format!("--n {n} is too few for --signals {k}: at least {} runs", 3 * k));
    }
    // Warm every path once (a park, a wake, a claim) before the first reading.
    for id in park(&runtime, 4, 4).await? {
        runtime.signal(&Parking, id, ("wake", json!({"by": "warmup"}))).await.map_err(|x| e(&x))?;
    }
    let (rss_before, _) = crate::measure::rss_kb();
    let started = Instant::now();
    let ids = park(&runtime, n, 3 * k).await?;
    let park_wall = started.elapsed();
    let (rss_parked, _) = crate::measure::rss_kb();

    // An idle poll: nothing can move.
    let mut idle = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let driven = worker.run_once().await.map_err(|x| e(&x))?;
        idle.push(t.elapsed());
        if driven != 0 {
            return Err(format!("an idle poll drove {driven} runs"));
        }
    }

    // Listing every waiting run, a page at a time.
    let started = Instant::now();
    let (mut listed, mut pages, mut first_page, mut query) =
        (0, 0, None, RunQuery::new().status(RunStatus::Waiting).limit(1000));
    loop {
        let page = store.list_runs(&query).await.map_err(|x| e(&x))?;
        first_page.get_or_insert(started.elapsed());
        listed += page.runs.len();
        pages += 1;
        match page.next {
            Some(next) => query = query.before(next),
            None => break,
        }
    }
    let list_wall = started.elapsed();

    // Waking: through the inbox and a worker's claim, then through `Runtime::signal`.
    let (mut claimed, mut signalled) = (Vec::new(), Vec::new());
    for id in &ids[..k] {
        store.send_signal(*id, "wake", wake()).await.map_err(|x| e(&x))?;
        let t = Instant::now();
        let driven = worker.run_once().await.map_err(|x| e(&x))?;
        claimed.push(t.elapsed());
        if driven != 1 || store.load_run(*id).await.map_err(|x| e(&x))?.status != RunStatus::Completed {
            return Err(format!("a signalled run was not driven to its end ({driven} driven)"));
        }
    }
    for id in &ids[k..2 * k] {
        let t = Instant::now();
        let report = runtime.signal(&Parking, *id, ("wake", json!({"by": "bench"}))).await.map_err(|x| e(&x))?;
        signalled.push(t.elapsed());
        if report.outcome != RunOutcome::Completed {
            return Err(format!("a signalled run did not complete: {:?}", report.outcome));
        }
    }

    let worker_process = watch_worker(opened, &ids[2 * k..]).await?;
    // The same worker over an empty store of the same kind, for reference.
    let empty = if opened.child_args.is_empty() {
        Value::Null
    } else {
        let empty = open(args.store).await?;
        let watched = watch_worker(&empty, &[]).await;
        empty.cleanup().await;
        watched?
    };
    let ok = listed == n && worker_process["ok"] == true && (empty.is_null() || empty["ok"] == true);
    Ok(json!({
        "park_wall_s": round(park_wall.as_secs_f64(), 2),
        "parked_per_s": round(n as f64 / park_wall.as_secs_f64(), 1),
        "rss_before_mb": mb(rss_before),
        "rss_parked_mb": mb(rss_parked),
        "parker_bytes_per_parked_run": round(rss_parked.saturating_sub(rss_before) as f64 * 1024.0 / n as f64, 1),
        "idle_poll": spread(idle),
        "list_all_ms": round(list_wall.as_secs_f64() * 1e3, 1),
        "list_first_page_ms": first_page.map(|d| round(d.as_secs_f64() * 1e3, 2)),
        "listed": listed,
        "pages": pages,
        "claim_and_drive": spread(claimed),
        "runtime_signal": spread(signalled),
        "worker": worker_process,
        "worker_over_empty_store": empty,
        "ok": ok,
    }))
}

/// A worker over the parked runs: its memory, idle and after it drove the runs `ids`
/// signalled through the store, and how long each took from the signal to its end.
async fn watch_worker(opened: &Opened, ids: &[RunId]) -> Result<Value, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let store = &opened.store;
    let tick_ms = 1000.0 / 100.0; // USER_HZ
    let idle_window = Duration::from_secs(2);
    // The memory store lives in this process: its worker is a task here.
    let in_process = opened.child_args.is_empty();
    let mut child = None;
    let stop = loopstack::CancellationToken::new();
    let pid = if in_process {
        "self".to_owned()
    } else {
        let mut args = vec![CHILD_FLAG.to_owned()];
        args.extend(opened.child_args.iter().cloned());
        let mut process = ChildProcess::spawn(&args)?;
        let line = process.line()?;
        if line != "ready" {
            return Err(format!("the worker said `{line}`"));
        }
        let pid = process.child.id().to_string();
        child = Some(process);
        pid
    };
    let (rss_ready, _) = proc_usage(&pid);
    let task = if let Some(process) = child.as_mut() {
        process.go()?;
        None
    } else {
        let worker =
            Worker::new(Runtime::with_shared_store(store.clone())).register(Parking).poll_interval(WORKER_POLL);
        Some(tokio::spawn(worker.run(stop.clone())))
    };
    let (_, cpu_before) = proc_usage(&pid);
    tokio::time::sleep(idle_window).await;
    let (rss_idle, cpu_after) = proc_usage(&pid);
    let mut latencies = Vec::new();
    for id in ids {
        let t = Instant::now();
        store.send_signal(*id, "wake", wake()).await.map_err(|x| e(&x))?;
        loop {
            let status = store.load_run(*id).await.map_err(|x| e(&x))?.status;
            if status == RunStatus::Completed {
                break;
            }
            if t.elapsed() > Duration::from_secs(30) {
                return Err(format!("a signalled run is still {status:?} after 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        latencies.push(t.elapsed());
    }
    let (rss_after, _) = proc_usage(&pid);
    let ok = match (child, task) {
        (Some(process), _) => process.finish()?["ok"] == true,
        (None, Some(task)) => {
            stop.cancel();
            matches!(task.await, Ok(Ok(())))
        }
        (None, None) => false,
    };
    Ok(json!({
        "process": if in_process { "this one (memory store)" } else { "its own" },
        "rss_ready_mb": mb(rss_ready),
        "rss_idle_mb": mb(rss_idle),
        "rss_after_signals_mb": mb(rss_after),
        "idle_cpu_percent": round((cpu_after - cpu_before) as f64 * tick_ms / idle_window.as_secs_f64() / 10.0, 1),
        "signal_to_end": spread(latencies),
        "signals": ids.len(),
        "ok": ok,
    }))
}
