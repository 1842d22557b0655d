//! The overhead benchmark: what the framework itself costs per run, measured with the
//! scripted model through the public API (the ready-made agent loop), against a plain
//! hand-written tokio loop (`--baseline`).
//!
//! ```text
//! cargo run --release --example bench -- --workload W1 [--n 2000] [--warmup 50]
//! cargo run --release --example bench -- --workload W1 --baseline
//! cargo run --release --example bench -- --workload W2 --compare   # both, one process each, plus ratios
//! ```
//!
//! `--compare` runs each side `--rounds` times (3 by default), the sides taking turns,
//! and gives the ratio of the sides' medians with each round's ratio beside it.
//!
//! One run: the user asks `What is the weather in Berlin?`; model turn 1 asks for
//! `get_weather {"location":"Berlin"}` (W3: 64 calls at once); the tool answers; model
//! turn 2 answers `It is mostly sunny in Berlin.`. The model is stateless: it decides
//! from the conversation and checks the tool results it receives.
//!
//! - W1: sequential, no latency: runs/s and microseconds per run.
//! - W2: each model turn awaits 20 ms; N runs started at once: wall time, peak RSS and
//!   memory per in-flight run.
//! - W3: 64 tool calls per run, each awaiting 50 ms: median wall time per run.
//! - `--keyed [--n N]`: N keyed document saves in one transition (16,000 by default)
//!   and the same keys again in the next, through the in-memory store: milliseconds
//!   each (a save finds its key in an index, so both grow linearly).
//! - W4: the W1 loop with every transition checkpointed to a database
//!   (`--store sqlite|postgres`; PostgreSQL at `LOOPSTACK_DATABASE_URL`, by default the
//!   local server): runs/s, microseconds per run, and rows and bytes the database grew
//!   by per run. Its baselines write, per step, one plain transaction that updates a
//!   run row and inserts the step's new documents, at the same durability settings
//!   (SQLite WAL with synchronous=FULL; PostgreSQL synchronous commit): through the
//!   plain drivers, rusqlite and tokio-postgres (`--plain`, the lower bound), and on
//!   PostgreSQL through sqlx too (`--baseline`, the driver the store runs on).
//!   `--compare` runs them all. `--breakdown` (SQLite) replays the store's own
//!   statements through rusqlite, to say where the store's time goes (see
//!   `breakdown.rs`).
//! - W5: worker processes (`--workers 1,2,4`, each `--concurrency 8` runs at once) on
//!   one PostgreSQL database drain `--n` queued agent runs (1,000 by default): runs per
//!   second, against the same number of processes of a plain `FOR UPDATE SKIP LOCKED`
//!   job queue over tokio-postgres that does the same writes (see `workers.rs`).
//! - W6: `--n` runs (10,000 by default; the issue's figure is `--n 100000`) parked
//!   waiting for a signal (`--store sqlite|postgres|memory`): the memory the parking
//!   process and a worker over them hold, the time to list them (paged) and to claim
//!   and drive on a signalled one (see `parked.rs`).

use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{Value, json};

mod agent;
mod breakdown;
mod db;
mod keyed;
mod measure;
mod parked;
mod plain;
mod workers;

use agent::{Baseline, Framework};
use db::{Db, DurableBaseline};
use measure::{measure, round};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Workload {
    W1,
    W2,
    W3,
    W4,
    W5,
    W6,
}

impl Workload {
    fn defaults(self) -> (usize, usize) {
        match self {
            Self::W1 => (2000, 50),
            Self::W2 => (2000, 20),
            Self::W3 => (20, 2),
            Self::W4 => (500, 20),
            Self::W5 => (1000, 0),
            Self::W6 => (10_000, 0),
        }
    }
}

/// Which side of a comparison a process measures.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Side {
    Loopstack,
    /// The hand-written loop (W4: writing through sqlx).
    Baseline,
    /// W4's lower bound: the hand-written loop writing through rusqlite or tokio-postgres.
    Plain,
}

pub(crate) struct Args {
    pub(crate) workload: Workload,
    pub(crate) n: usize,
    pub(crate) warmup: usize,
    pub(crate) side: Side,
    pub(crate) compare: bool,
    pub(crate) breakdown: bool,
    pub(crate) store: DbKind,
    /// W5: how many worker processes, one measurement each.
    pub(crate) workers: Vec<usize>,
    /// W5: runs each worker process drives at once.
    pub(crate) concurrency: usize,
    /// W6: how many parked runs are signalled, one at a time.
    pub(crate) signals: usize,
    /// `--compare`: how many times each side runs, the sides taking turns.
    pub(crate) rounds: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum DbKind {
    Sqlite,
    Postgres,
    /// W6 only: the in-memory store.
    Memory,
}

impl DbKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::Memory => "memory",
        }
    }
}

/// The PostgreSQL server: `LOOPSTACK_DATABASE_URL`, or the local one.
pub(crate) fn postgres_url() -> String {
    std::env::var("LOOPSTACK_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

const USAGE: &str = "usage: bench --workload W1|W2|W3|W4|W5|W6 [--n N] [--warmup K] [--baseline | --plain | --compare] \
    [--store sqlite|postgres|memory] [--breakdown] [--workers 1,2,4] [--concurrency C] [--signals K] [--rounds R]";

fn parse_args() -> Result<Args, String> {
    let mut workload = None;
    let (mut n, mut warmup, mut side, mut compare, mut breakdown) = (None, None, Side::Loopstack, false, false);
    let mut store = DbKind::Sqlite;
    let (mut workers, mut concurrency, mut signals, mut rounds) = (vec![1, 2, 4], 8, 20, 3);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--workload" => {
                workload = Some(match value()?.to_ascii_uppercase().as_str() {
                    "W1" => Workload::W1,
                    "W2" => Workload::W2,
                    "W3" => Workload::W3,
                    "W4" => Workload::W4,
                    "W5" => Workload::W5,
                    "W6" => Workload::W6,
                    other => return Err(format!("unknown workload `{other}`; use W1 to W6")),
                })
            }
            "--n" => n = Some(value()?.parse().map_err(|e| format!("--n: {e}"))?),
            "--warmup" => warmup = Some(value()?.parse().map_err(|e| format!("--warmup: {e}"))?),
            "--baseline" => side = Side::Baseline,
            "--plain" => side = Side::Plain,
            "--compare" => compare = true,
            "--breakdown" => breakdown = true,
            "--store" => {
                store = match value()?.as_str() {
                    "sqlite" => DbKind::Sqlite,
                    "postgres" => DbKind::Postgres,
                    "memory" => DbKind::Memory,
                    other => return Err(format!("unknown store `{other}`; use sqlite, postgres or memory")),
                }
            }
            "--workers" => {
                workers = value()?
                    .split(',')
                    .map(|w| w.trim().parse::<usize>().map_err(|e| format!("--workers: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--concurrency" => concurrency = value()?.parse().map_err(|e| format!("--concurrency: {e}"))?,
            "--signals" => signals = value()?.parse().map_err(|e| format!("--signals: {e}"))?,
            "--rounds" => rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    let workload = workload.ok_or(USAGE)?;
    if store == DbKind::Memory && workload != Workload::W6 {
        return Err("--store memory is for W6 only".to_owned());
    }
    if workload == Workload::W4 && store == DbKind::Sqlite && side == Side::Baseline {
        return Err(
            "W4's sqlx baseline is PostgreSQL's (--store postgres); on SQLite use --plain (rusqlite)".to_owned()
        );
    }
    let (dn, dw) = workload.defaults();
    Ok(Args {
        workload,
        n: n.unwrap_or(dn),
        warmup: warmup.unwrap_or(dw),
        side,
        compare,
        breakdown,
        store,
        workers,
        concurrency,
        signals,
        rounds: rounds.max(1),
    })
}

/// Runs the framework and the baselines in one child process each, so neither's
/// memory colours the other's, `--rounds` times (3 by default) with the sides taking
/// turns, and prints every line, then the ratios of each side's median: a burst of
/// another machine's work on the host slows one process, not the comparison.
fn compare(args: &Args) -> ExitCode {
    let exe = std::env::current_exe().expect("own path");
    // The sqlx baseline first, as before; W4 adds the plain drivers (on SQLite the
    // only baseline: the store's driver is rusqlite).
    let sides: &[Side] = if args.workload == Workload::W4 && args.store == DbKind::Sqlite {
        &[Side::Plain, Side::Loopstack]
    } else if args.workload == Workload::W4 {
        &[Side::Baseline, Side::Plain, Side::Loopstack]
    } else {
        &[Side::Baseline, Side::Loopstack]
    };
    let mut lines: Vec<Vec<Value>> = vec![Vec::new(); sides.len()];
    for _ in 0..args.rounds {
        for (&side, runs) in sides.iter().zip(&mut lines) {
            let mut cmd = std::process::Command::new(&exe);
            cmd.args([
                "--workload",
                &format!("{:?}", args.workload),
                "--n",
                &args.n.to_string(),
                "--warmup",
                &args.warmup.to_string(),
                "--store",
                args.store.name(),
            ]);
            match side {
                Side::Baseline => cmd.arg("--baseline"),
                Side::Plain => cmd.arg("--plain"),
                Side::Loopstack => &mut cmd,
            };
            let out = match cmd.output() {
                Ok(out) => out,
                Err(e) => {
                    eprintln!("could not run {}: {e}", exe.display());
                    return ExitCode::FAILURE;
                }
            };
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
            let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            println!("{line}");
            runs.push(serde_json::from_str::<Value>(&line).unwrap_or(Value::Null));
        }
    }
    let key = match args.workload {
        Workload::W1 | Workload::W4 => "us_per_run",
        Workload::W2 => "kb_per_inflight_run",
        Workload::W3 => "wall_ms",
        Workload::W5 | Workload::W6 => unreachable!("W5 and W6 compare within one invocation of their own"),
    };
    let fw = lines.last().expect("the framework's lines");
    for base in &lines[..lines.len() - 1] {
        let ratio = |field: &str| -> Value {
            match (median(fw, field), median(base, field)) {
                (Some(a), Some(b)) if b > 0.0 => json!(round(a / b, 2)),
                _ => Value::Null,
            }
        };
        // Each round's ratio too, the framework's run against the baseline's just before it.
        let each: Vec<Value> = fw
            .iter()
            .zip(base)
            .map(|(a, b)| match (a[key].as_f64(), b[key].as_f64()) {
                (Some(a), Some(b)) if b > 0.0 => json!(round(a / b, 2)),
                _ => Value::Null,
            })
            .collect();
        let mut out = json!({
            "workload": format!("{:?}", args.workload),
            "ratio": key,
            "framework_over_baseline": ratio(key),
            "rounds": each,
            "framework_median": median(fw, key),
            "baseline_median": median(base, key),
        });
        if let Some(driver) = base[0].get("driver") {
            out["baseline"] = driver.clone();
            if median(base, "cpu_us_per_run").is_some() {
                out["cpu_framework_over_baseline"] = ratio("cpu_us_per_run");
            }
        }
        println!("{out}");
    }
    if lines.iter().flatten().all(|l| l["ok"] == true) { ExitCode::SUCCESS } else { ExitCode::from(2) }
}

/// The median of `field` over `lines` (the mean of the middle two for an even count).
fn median(lines: &[Value], field: &str) -> Option<f64> {
    let mut values: Vec<f64> = lines.iter().filter_map(|l| l[field].as_f64()).collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 { values[mid] } else { (values[mid - 1] + values[mid]) / 2.0 })
}

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        // `RUST_LOG=sqlx=debug` lists every statement a store issues.
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(std::env::var("RUST_LOG").unwrap_or_default())
            .init();
    }
    if std::env::args().any(|a| a == "--keyed") {
        let n = std::env::args().skip_while(|a| a != "--n").nth(1).and_then(|n| n.parse().ok()).unwrap_or(16_000);
        return keyed::keyed(n);
    }
    // The processes W5 and W6 start of themselves.
    if let Some(code) = workers::child_main() {
        return code;
    }
    if let Some(code) = parked::child_main() {
        return code;
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    match args.workload {
        Workload::W5 => return rt.block_on(workers::run(&args)),
        Workload::W6 if args.compare => return parked::compare(&args),
        Workload::W6 => return rt.block_on(parked::run(&args)),
        Workload::W4 if args.breakdown => return rt.block_on(breakdown::run(&args)),
        _ => {}
    }
    if args.compare {
        return compare(&args);
    }
    let out = rt.block_on(async {
        if args.workload == Workload::W4 {
            let db = match Db::open(args.store, args.side != Side::Loopstack).await {
                Ok(db) => db,
                Err(e) => return json!({"workload": "W4", "ok": false, "error": e}),
            };
            let out = match args.side {
                Side::Baseline => {
                    let subject = DurableBaseline::new(Baseline::new(args.workload), Arc::new(db.clone()));
                    measure(&args, &subject, Some(&db)).await
                }
                Side::Plain => match plain::writer(&db).await {
                    Ok(writer) => {
                        let subject = DurableBaseline::new(Baseline::new(args.workload), writer);
                        measure(&args, &subject, Some(&db)).await
                    }
                    Err(e) => json!({"workload": "W4", "ok": false, "error": e}),
                },
                Side::Loopstack => {
                    let fw = Framework::durable(args.workload, db.store.clone().expect("a framework store"));
                    measure(&args, &fw, Some(&db)).await
                }
            };
            db.cleanup().await;
            return out;
        }
        match args.side {
            Side::Loopstack => measure(&args, &Framework::new(args.workload), None).await,
            _ => measure(&args, &Baseline::new(args.workload), None).await,
        }
    });
    println!("{out}");
    if out["ok"] == true { ExitCode::SUCCESS } else { ExitCode::from(2) }
}
