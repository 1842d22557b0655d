//! W5: worker processes on one PostgreSQL database drain queued agent runs.
//!
//! For each count of processes (`--workers 1,2,4`), in one invocation: `--n` agent
//! runs are queued (`Runtime::submit`) in a fresh schema, that many copies of this
//! binary start as `Worker`s (`--concurrency` runs each, polling every 50 ms) and, once
//! all are connected, are told to go; the wall time ends when the last run completed.
//! The baseline does the same with a plain job queue over tokio-postgres: a table of
//! queued runs claimed one at a time with `FOR UPDATE SKIP LOCKED`, each run then
//! writing the W4 baseline's steps (one transaction per step: the run row and the
//! step's documents; the last step marks the job completed).

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use loopstack::{CancellationToken, RunId, Runtime, Worker};
use loopstack_store::PostgresStore;
use serde_json::{Value, json};

use crate::agent::{Baseline, Framework, QUESTION};
use crate::db::{DurableBaseline, StepWriter};
use crate::measure::{Subject as _, proc_usage, round, rss_kb};
use crate::{Args, Workload};

/// How often an idle worker, or an idle task of the baseline's, looks for work.
const POLL: Duration = Duration::from_millis(50);

const CHILD_FLAG: &str = "--w5-worker";

const QUEUE_TABLES: &[&str] = &[
    "CREATE TABLE bench_runs (id BIGSERIAL PRIMARY KEY, run_id UUID NOT NULL UNIQUE, status TEXT NOT NULL, \
     step BIGINT NOT NULL, state TEXT NOT NULL)",
    "CREATE INDEX bench_runs_queued ON bench_runs (id) WHERE status = 'queued'",
    "CREATE TABLE bench_documents (run_id UUID NOT NULL, seq BIGINT NOT NULL, content TEXT NOT NULL, \
     PRIMARY KEY (run_id, seq))",
];
const CLAIM_JOB: &str = "UPDATE bench_runs SET status = 'running' WHERE id = (SELECT id FROM bench_runs \
     WHERE status = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING run_id";
const UPDATE_RUN: &str = "UPDATE bench_runs SET step = $2, state = $3 WHERE run_id = $1";
const FINISH_RUN: &str = "UPDATE bench_runs SET step = $2, state = $3, status = 'completed' WHERE run_id = $1";
const INSERT_DOC: &str = "INSERT INTO bench_documents (run_id, seq, content) VALUES ($1, $2, $3)";

/// The go-ahead and the stop of a child process, read from its standard input: a
/// line says go, the end of the input says stop.
pub(crate) struct Control {
    pub(crate) go: tokio::sync::oneshot::Receiver<()>,
    pub(crate) stop: CancellationToken,
}

pub(crate) fn control() -> Control {
    let (go_tx, go) = tokio::sync::oneshot::channel();
    let stop = CancellationToken::new();
    let cancel = stop.clone();
    std::thread::spawn(move || {
        let mut lines = std::io::stdin().lock().lines();
        if matches!(lines.next(), Some(Ok(_))) {
            let _ = go_tx.send(());
        }
        for _ in lines.by_ref() {}
        cancel.cancel();
    });
    Control { go, stop }
}

/// A child process of this benchmark, its protocol over its standard streams.
pub(crate) struct ChildProcess {
    pub(crate) child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl ChildProcess {
    pub(crate) fn spawn(args: &[String]) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| e.to_string())?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Self { child, stdin, stdout })
    }

    /// The child's next line (blocking).
    pub(crate) fn line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) => Err("the child process ended".to_owned()),
            Ok(_) => Ok(line.trim().to_owned()),
            Err(e) => Err(e.to_string()),
        }
    }

    pub(crate) fn go(&mut self) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        stdin.write_all(b"go\n").and_then(|()| stdin.flush()).map_err(|e| e.to_string())
    }

    /// Closes the child's input (it stops), and reads its last line.
    pub(crate) fn finish(mut self) -> Result<Value, String> {
        self.stdin = None;
        let line = self.line()?;
        let _ = self.child.wait();
        serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `--w5-worker loopstack|plain --schema S --concurrency C`: one worker process.
pub(crate) fn child_main() -> Option<ExitCode> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == CHILD_FLAG)?;
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let side = args.get(at + 1).cloned().unwrap_or_default();
    let schema = flag("--schema").unwrap_or_default();
    let concurrency: usize = flag("--concurrency").and_then(|c| c.parse().ok()).unwrap_or(8);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    let out = rt.block_on(async {
        let control = control();
        match side.as_str() {
            "loopstack" => loopstack_worker(&schema, concurrency, control).await,
            _ => plain_worker(&schema, concurrency, control).await,
        }
    });
    let out = out.unwrap_or_else(|e| json!({"ok": false, "error": e}));
    println!("{out}");
    Some(ExitCode::SUCCESS)
}

async fn loopstack_worker(schema: &str, concurrency: usize, control: Control) -> Result<Value, String> {
    let store = PostgresStore::connect_schema(&crate::postgres_url(), schema).await.map_err(|e| e.to_string())?;
    let fw = Framework::durable(Workload::W1, Arc::new(store));
    let worker =
        Worker::new(fw.runtime.clone()).register_shared(fw.agent.clone()).concurrency(concurrency).poll_interval(POLL);
    println!("ready");
    let _ = control.go.await;
    worker.run(control.stop).await.map_err(|e| e.to_string())?;
    let (model_calls, tool_calls) = fw.counts();
    Ok(finished(json!({"model_calls": model_calls, "tool_calls": tool_calls})))
}

async fn plain_worker(schema: &str, concurrency: usize, control: Control) -> Result<Value, String> {
    let mut writers = Vec::new();
    for _ in 0..concurrency {
        writers.push(Arc::new(QueueWriter::connect(schema).await?));
    }
    println!("ready");
    let _ = control.go.await;
    let stop = control.stop;
    let handles: Vec<_> = writers
        .into_iter()
        .map(|writer| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let subject = DurableBaseline::new(Baseline::new(Workload::W1), writer.clone());
                let mut done = 0u64;
                while !stop.is_cancelled() {
                    match writer.claim().await? {
                        Some(run_id) => {
                            subject.run_with(run_id, true).await?;
                            done += 1;
                        }
                        None => {
                            tokio::select! {
                                () = stop.cancelled() => {}
                                () = tokio::time::sleep(POLL) => {}
                            }
                        }
                    }
                }
                Ok::<_, String>((done, subject.counts()))
            })
        })
        .collect();
    let (mut runs, mut model_calls, mut tool_calls) = (0, 0, 0);
    for handle in handles {
        let (done, (m, t)) = handle.await.map_err(|e| e.to_string())??;
        runs += done;
        model_calls += m;
        tool_calls += t;
    }
    Ok(finished(json!({"runs": runs, "model_calls": model_calls, "tool_calls": tool_calls})))
}

/// A worker's last line: its counts, its peak RSS and its CPU time.
fn finished(mut counts: Value) -> Value {
    counts["ok"] = json!(true);
    counts["peak_rss_mb"] = json!(round(rss_kb().1 as f64 / 1024.0, 2));
    counts["cpu_ticks"] = json!(proc_usage("self").1);
    counts
}

/// One task's connection of the baseline queue: claims jobs, writes their steps.
struct QueueWriter {
    client: tokio::sync::Mutex<tokio_postgres::Client>,
    /// CLAIM_JOB, UPDATE_RUN, FINISH_RUN, INSERT_DOC.
    statements: [tokio_postgres::Statement; 4],
}

impl QueueWriter {
    async fn connect(schema: &str) -> Result<Self, String> {
        let client = crate::plain::pg_connect(schema).await?;
        let prepare = async |sql: &str| client.prepare(sql).await.map_err(|e| e.to_string());
        let statements = [
            prepare(CLAIM_JOB).await?,
            prepare(UPDATE_RUN).await?,
            prepare(FINISH_RUN).await?,
            prepare(INSERT_DOC).await?,
        ];
        Ok(Self { client: tokio::sync::Mutex::new(client), statements })
    }

    async fn claim(&self) -> Result<Option<uuid::Uuid>, String> {
        let client = self.client.lock().await;
        let row = client.query_opt(&self.statements[0], &[]).await.map_err(|e| e.to_string())?;
        Ok(row.map(|r| r.get(0)))
    }
}

impl StepWriter for QueueWriter {
    fn write_step<'a>(
        &'a self,
        run_id: uuid::Uuid,
        step: i64,
        state: &'a str,
        docs: &'a [(i64, String)],
        last: bool,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let e = |e: tokio_postgres::Error| e.to_string();
            let mut client = self.client.lock().await;
            let tx = client.transaction().await.map_err(e)?;
            let [_, update, finish, insert_doc] = &self.statements;
            tx.execute(if last { finish } else { update }, &[&run_id, &step, &state]).await.map_err(e)?;
            for (seq, content) in docs {
                tx.execute(insert_doc, &[&run_id, seq, content]).await.map_err(e)?;
            }
            tx.commit().await.map_err(e)
        })
    }
}

/// Runs W5 for each count of workers: loopstack, then the plain queue; one line each
/// and the ratio of their runs per second.
pub(crate) async fn run(args: &Args) -> ExitCode {
    let mut ok = true;
    for &workers in &args.workers {
        let mut rates = Vec::new();
        for side in ["plain", "loopstack"] {
            let out = match drain(args, side, workers).await {
                Ok(out) => out,
                Err(e) => json!({"workload": "W5", "framework": side, "workers": workers, "ok": false, "error": e}),
            };
            ok &= out["ok"] == true;
            println!("{out}");
            rates.push(out["runs_per_s"].as_f64());
        }
        let ratio = match (rates[0], rates[1]) {
            (Some(base), Some(fw)) if fw > 0.0 => json!(round(base / fw, 2)),
            _ => Value::Null,
        };
        // Time per run, as the other ratios: the framework's over the baseline's.
        println!(
            "{}",
            json!({"workload": "W5", "workers": workers, "ratio": "s_per_run", "framework_over_baseline": ratio})
        );
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::from(2) }
}

/// One measurement: `workers` processes of `side` drain `args.n` queued runs.
async fn drain(args: &Args, side: &str, workers: usize) -> Result<Value, String> {
    let url = crate::postgres_url();
    let schema = format!("loopstack_bench_w5_{}", RunId::new().0.simple());
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let admin = sqlx::PgPool::connect(&url).await.map_err(|x| e(&x))?;
    let result = async {
        let n = args.n;
        let count_sql;
        if side == "loopstack" {
            let store = PostgresStore::connect_schema(&url, &schema).await.map_err(|x| e(&x))?;
            let fw = Framework::durable(Workload::W1, Arc::new(store));
            submit_all(&fw.runtime, &fw, n).await?;
            count_sql =
                format!("SELECT count(*) FROM {schema}.runs WHERE status IN ('completed', 'failed', 'cancelled')");
        } else {
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
                .execute(&admin)
                .await
                .map_err(|x| e(&x))?;
            let client = crate::plain::pg_connect(&schema).await?;
            for sql in QUEUE_TABLES {
                client.batch_execute(sql).await.map_err(|x| e(&x))?;
            }
            client
                .execute(
                    "INSERT INTO bench_runs (run_id, status, step, state) \
                     SELECT gen_random_uuid(), 'queued', 0, '{\"step\":0}' FROM generate_series(1, $1::int)",
                    &[&(n as i32)],
                )
                .await
                .map_err(|x| e(&x))?;
            count_sql = format!("SELECT count(*) FROM {schema}.bench_runs WHERE status = 'completed'");
        }
        let child_args: Vec<String> =
            [CHILD_FLAG, side, "--schema", &schema, "--concurrency", &args.concurrency.to_string()]
                .iter()
                .map(|s| s.to_string())
                .collect();
        let mut children = (0..workers).map(|_| ChildProcess::spawn(&child_args)).collect::<Result<Vec<_>, _>>()?;
        for child in &mut children {
            let line = child.line()?;
            if line != "ready" {
                return Err(format!("a worker said `{line}`"));
            }
        }
        let started = Instant::now();
        for child in &mut children {
            child.go()?;
        }
        let timeout = Duration::from_secs(60 + n as u64 / 10);
        loop {
            let done: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(count_sql.as_str()))
                .fetch_one(&admin)
                .await
                .map_err(|x| e(&x))?;
            if done as usize >= n {
                break;
            }
            if started.elapsed() > timeout {
                return Err(format!("{done} of {n} runs finished in {timeout:?}"));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let wall = started.elapsed();
        let lines = children.into_iter().map(ChildProcess::finish).collect::<Result<Vec<_>, _>>()?;
        let sum = |k: &str| lines.iter().filter_map(|l| l[k].as_u64()).sum::<u64>();
        let completed: i64 = if side == "loopstack" {
            let sql = format!("SELECT count(*) FROM {schema}.runs WHERE status = 'completed'");
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&admin).await.map_err(|x| e(&x))?
        } else {
            n as i64
        };
        let (model_calls, tool_calls) = (sum("model_calls"), sum("tool_calls"));
        let ok = lines.iter().all(|l| l["ok"] == true)
            && completed as usize == n
            && model_calls == 2 * n as u64
            && tool_calls == n as u64;
        let peak: Vec<Value> = lines.iter().map(|l| l["peak_rss_mb"].clone()).collect();
        Ok(json!({
            "framework": if side == "loopstack" { "loopstack" } else { "baseline" },
            "driver": if side == "loopstack" { "sqlx" } else { "tokio-postgres" },
            "workload": "W5",
            "workers": workers,
            "concurrency": args.concurrency,
            "n": n,
            "wall_s": round(wall.as_secs_f64(), 3),
            "runs_per_s": round(n as f64 / wall.as_secs_f64(), 1),
            "completed": completed,
            "model_calls": model_calls,
            "tool_calls": tool_calls,
            "worker_peak_rss_mb": peak,
            // The workers' CPU time (user and system, 10 ms ticks) per run.
            "worker_cpu_ms_per_run": round(sum("cpu_ticks") as f64 * 10.0 / n as f64, 2),
            "ok": ok,
        }))
    }
    .await;
    if std::env::var_os("LOOPSTACK_BENCH_KEEP").is_none() {
        let _ =
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))).execute(&admin).await;
    }
    admin.close().await;
    result
}

/// Queues `n` runs of the framework's agent, 16 at a time.
async fn submit_all(runtime: &Runtime, fw: &Framework, n: usize) -> Result<(), String> {
    use futures::StreamExt as _;
    let agent = fw.agent.clone();
    let mut submitted = futures::stream::iter(0..n)
        .map(|_| {
            let agent = agent.clone();
            async move { runtime.submit(&*agent, QUESTION.into()).await.map_err(|e| e.to_string()) }
        })
        .buffer_unordered(16);
    while let Some(result) = submitted.next().await {
        result?;
    }
    Ok(())
}
