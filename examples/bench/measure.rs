//! Timing a workload's runs, and the process's memory.

use std::time::Instant;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::db::Db;
use crate::{Args, Side, Workload};

/// One side of a comparison: starts one run, and counts the model and tool calls.
pub(crate) trait Subject {
    fn run_one(&self) -> BoxFuture<'static, Result<(), String>>;
    fn counts(&self) -> (u64, u64);
}
/// Resident set size and its peak, in kB, from /proc (Linux).
pub(crate) fn rss_kb() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A process's resident set and CPU time (user + system, in clock ticks) from /proc.
pub(crate) fn proc_usage(pid: &str) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command's closing parenthesis: utime and stime are the
    // 12th and 13th.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let tick = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (rss, tick(11) + tick(12))
}

/// The CPU time this process spent so far, every thread's, user and system, in
/// microseconds (the kernel's process CPU clock, not 10 ms ticks).
pub(crate) fn process_cpu_us() -> f64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID) {
        Ok(t) => t.tv_sec() as f64 * 1e6 + t.tv_nsec() as f64 / 1e3,
        Err(_) => f64::NAN,
    }
}

/// Resets the kernel's peak-RSS mark to the current RSS.
pub(crate) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

pub(crate) async fn measure(args: &Args, subject: &dyn Subject, db: Option<&Db>) -> Value {
    let w = args.workload;
    let mut errors = Vec::new();
    for _ in 0..args.warmup {
        if let Err(e) = subject.run_one().await {
            errors.push(e);
        }
    }
    let before = subject.counts();
    let db_before = match db {
        Some(db) => match db.size().await {
            Ok(size) => Some(size),
            Err(e) => {
                errors.push(format!("could not measure the database: {e}"));
                None
            }
        },
        None => None,
    };
    let (rss_before, _) = rss_kb();
    reset_peak_rss();
    let cpu_before = process_cpu_us();
    let started = Instant::now();
    let mut walls = Vec::new();
    match w {
        Workload::W1 | Workload::W3 | Workload::W4 | Workload::W5 | Workload::W6 => {
            for _ in 0..args.n {
                let t = Instant::now();
                if let Err(e) = subject.run_one().await {
                    errors.push(e);
                }
                walls.push(t.elapsed());
            }
        }
        Workload::W2 => {
            let handles: Vec<_> = (0..args.n).map(|_| tokio::spawn(subject.run_one())).collect();
            for h in handles {
                match h.await {
                    Ok(Err(e)) => errors.push(e),
                    Err(e) => errors.push(e.to_string()),
                    Ok(Ok(())) => {}
                }
            }
        }
    }
    let wall = started.elapsed();
    let cpu_after = process_cpu_us();
    let (_, peak) = rss_kb();
    let after = subject.counts();
    let (model_calls, tool_calls) = (after.0 - before.0, after.1 - before.1);
    let growth = match (db, db_before) {
        (Some(db), Some(before)) => Some(db.size().await.map(|after| (after.0 - before.0, after.1 - before.1))),
        _ => None,
    };
    let n = args.n as u64;
    let mut ok = errors.is_empty() && model_calls == 2 * n && tool_calls == n * w.calls_per_run() as u64;
    if let Some(e) = errors.first() {
        eprintln!("{} runs failed; first error: {e}", errors.len());
    }
    let mut out = json!({
        "framework": if args.side == Side::Loopstack { "loopstack" } else { "baseline" },
        "version": env!("CARGO_PKG_VERSION"),
        "workload": format!("{w:?}"),
        "n": args.n,
        "wall_s": round(wall.as_secs_f64(), 4),
        "runs_per_s": round(args.n as f64 / wall.as_secs_f64(), 1),
        "rss_before_mb": round(rss_before as f64 / 1024.0, 2),
        "peak_rss_mb": round(peak as f64 / 1024.0, 2),
        "model_calls": model_calls,
        "tool_calls": tool_calls,
        "ok": ok,
    });
    match w {
        Workload::W1 => out["us_per_run"] = json!(round(wall.as_secs_f64() * 1e6 / args.n as f64, 2)),
        Workload::W4 => {
            out["us_per_run"] = json!(round(wall.as_secs_f64() * 1e6 / args.n as f64, 2));
            // The process's CPU (user and system): steadier than the wall time when
            // other work shares the disk.
            out["cpu_us_per_run"] = json!(round((cpu_after - cpu_before) / args.n as f64, 1));
            out["store"] = json!(args.store.name());
            out["driver"] = json!(match (args.side, args.store) {
                // The SQLite store runs on rusqlite too (on a thread of its own).
                (Side::Plain | Side::Loopstack, crate::DbKind::Sqlite) => "rusqlite",
                (Side::Plain, _) => "tokio-postgres",
                _ => "sqlx",
            });
            match growth {
                Some(Ok((rows, bytes))) => {
                    out["rows_per_run"] = json!(round(rows as f64 / args.n as f64, 2));
                    out["db_bytes_per_run"] = json!(round(bytes as f64 / args.n as f64, 1));
                }
                Some(Err(e)) => {
                    eprintln!("could not measure the database: {e}");
                    ok = false;
                }
                None => ok = false,
            }
            out["ok"] = json!(ok);
        }
        Workload::W2 => {
            out["kb_per_inflight_run"] = json!(round(peak.saturating_sub(rss_before) as f64 / args.n as f64, 2))
        }
        // W5 and W6 measure in workers.rs and parked.rs.
        Workload::W5 | Workload::W6 => {}
        Workload::W3 => {
            walls.sort();
            let median = walls.get(walls.len() / 2).copied().unwrap_or_default();
            out["wall_ms"] = json!(round(median.as_secs_f64() * 1e3, 2));
        }
    }
    out
}

pub(crate) fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}
