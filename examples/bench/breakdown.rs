//! `--workload W4 --breakdown` (SQLite): where the SQLite store's time goes.
//!
//! One real agent run through `SqliteStore` is recorded (its checkpoints' and
//! documents' rows, as stored), then replayed `--n` times, each in its own file, by
//! every combination of:
//!
//! - the writes: the baseline's (6 transactions, 10 statements a run: a run row with
//!   the question, its five updates and three more documents, on the two baseline
//!   tables) or the store's own (the same 6 transactions with 18 statements: the run,
//!   its step-0 checkpoint and the prompt; per transition a fenced checkpoint insert,
//!   the fenced run update and the transition's documents; at the end the query for
//!   pending signals to reject), on the store's schema (its indexes and foreign keys);
//! - `synchronous`: FULL (the store's) or OFF (no fsync: what is left is CPU);
//!
//! each through rusqlite on this thread (the store's driver, which runs them on a
//! thread of its own). Until sqlx's SQLite driver left the workspace (only one SQLite
//! may be linked, and the store's is rusqlite), sqlx through a pool and on one held
//! connection were measured too: docs/benchmarks.md keeps those figures.
//!
//! The store itself (`SqliteStore` under the agent, as in W4) is the last two lines,
//! in the same process, as opened and with its connection switched to
//! synchronous=OFF. The variants take turns, `--n / 5` runs each a round for five
//! rounds, so a busy disk weighs on all alike; each line gives the median round's
//! microseconds per run and per statement.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use loopstack::RunId;
use loopstack_store::SqliteStore;
use serde_json::json;

use crate::agent::Framework;
use crate::measure::{Subject as _, round};
use crate::{Args, Workload};

// The store's statements, as loopstack-store/src/sql/queries.rs has them.
const INSERT_RUN: &str = "INSERT INTO runs (run_id, workflow, status, place, step, error, definition_hash, version, \
    parent, parent_signal, forked_from, forked_step, epoch, signal_seq, waiting_for, place_since, wake_at, lease_owner, \
    lease_until, created_at, updated_at, trace_parent) VALUES ($1, $2, $3, 'start', 0, NULL, $4, $11, $5, $10, NULL, \
    NULL, $6, 0, '[]', $9, NULL, $7, $8, $9, $9, $12) ON CONFLICT (run_id) DO NOTHING";
const INSERT_CHECKPOINT: &str = "INSERT INTO checkpoints (run, step, transition, to_place, state, at) \
    VALUES ((SELECT id FROM runs WHERE run_id = $1), $2, $3, $4, $5, $6)";
const COMMIT_CHECKPOINT: &str = "INSERT INTO checkpoints (run, step, transition, to_place, state, state_patch, at) \
    SELECT id, $4, $5, $6, CASE WHEN $9 THEN NULL ELSE $7 END, $10, $8 FROM runs WHERE run_id = $1 AND epoch = $2 \
    AND step = $3 AND status <> 'completed' AND status <> 'failed' AND status <> 'cancelled'";
const COMMIT_RUN: &str = "UPDATE runs SET step = $4, place = $5, status = $6, updated_at = $7, place_since = $7, \
    lease_until = COALESCE($8, lease_until) WHERE run_id = $1 AND epoch = $2 AND step = $3 \
    AND status <> 'completed' AND status <> 'failed' AND status <> 'cancelled'";
const INSERT_DOCUMENT: &str = "INSERT INTO documents (run, seq, version, doc_type, doc_key, tags, metadata, content, \
    step) VALUES ((SELECT id FROM runs WHERE run_id = $1), $2, $3, $4, $5, $6, $7, $8, $9)";
// The store asks whether the run has pending signals (it has none here), and only
// then rejects them.
const HAS_PENDING: &str =
    "SELECT 1 FROM signals WHERE run = (SELECT id FROM runs WHERE run_id = $1) AND status = 'pending' LIMIT 1";

// The baseline's (db.rs, plain.rs).
const BASE_INSERT_RUN: &str = "INSERT INTO bench_runs (run_id, step, state) VALUES ($1, $2, $3)";
const BASE_UPDATE_RUN: &str = "UPDATE bench_runs SET step = $2, state = $3 WHERE run_id = $1";
const BASE_INSERT_DOC: &str = "INSERT INTO bench_documents (run_id, seq, content) VALUES ($1, $2, $3)";

/// A bound value; `Id` is the replayed run's id.
#[derive(Clone, Debug)]
enum V {
    Id,
    I(i64),
    T(Option<String>),
    B(bool),
}

fn t(s: &str) -> V {
    V::T(Some(s.to_owned()))
}

/// A run's writes: transactions of statements with their values.
type Replay = Vec<Vec<(&'static str, Vec<V>)>>;

/// A checkpoint row: step, transition, to_place, state, state_patch.
type CheckpointRow = (i64, String, String, Option<String>, Option<String>);
/// A document row: seq, version, doc_type, doc_key, tags, metadata, content, step.
type DocumentRow = (i64, i64, String, Option<String>, String, String, String, i64);

/// One recorded run's rows.
struct Recorded {
    run: (String, String, i64, Option<String>),
    checkpoints: Vec<CheckpointRow>,
    documents: Vec<DocumentRow>,
}

fn record(conn: &rusqlite::Connection, run_id: RunId) -> rusqlite::Result<Recorded> {
    let id = run_id.0.as_bytes();
    let run = conn.query_row(
        "SELECT workflow, definition_hash, version, lease_owner FROM runs WHERE run_id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    let mut stmt = conn.prepare(
        "SELECT step, transition, to_place, state, state_patch FROM checkpoints \
         WHERE run = (SELECT id FROM runs WHERE run_id = ?1) ORDER BY step",
    )?;
    let checkpoints = stmt
        .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut stmt = conn.prepare(
        "SELECT seq, version, doc_type, doc_key, tags, metadata, content, step FROM documents \
         WHERE run = (SELECT id FROM runs WHERE run_id = ?1) ORDER BY step, seq",
    )?;
    let documents = stmt
        .query_map([id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(Recorded { run, checkpoints, documents })
}

impl Recorded {
    /// The store's writes of this run, statement by statement.
    fn store_replay(&self) -> Replay {
        let now = 1_700_000_000_000_i64;
        let (workflow, hash, version, owner) = &self.run;
        let last = self.checkpoints.last().map_or(0, |c| c.0);
        let mut txs = Vec::new();
        let state0 = self.checkpoints.first().and_then(|c| c.3.clone());
        txs.push(vec![
            (
                INSERT_RUN,
                vec![
                    V::Id,
                    t(workflow),
                    t("running"),
                    t(hash),
                    V::T(None),
                    V::I(1),
                    V::T(owner.clone()),
                    V::I(now + 30_000),
                    V::I(now),
                    V::T(None),
                    V::I(*version),
                    V::T(None),
                ],
            ),
            (INSERT_CHECKPOINT, vec![V::Id, V::I(0), t(""), t("start"), V::T(state0.clone()), V::I(now)]),
        ]);
        // The documents the run was created with (the agent's prompt), in its first transaction.
        self.store_documents(0, txs.last_mut().expect("just pushed"));
        let mut full = state0.unwrap_or_default();
        for (step, transition, to, state, patch) in &self.checkpoints[1..] {
            let unchanged = state.is_none();
            if let Some(state) = state {
                full.clone_from(state);
            }
            let status = if *step == last { "completed" } else { "running" };
            let mut tx = vec![
                (
                    COMMIT_CHECKPOINT,
                    vec![
                        V::Id,
                        V::I(1),
                        V::I(step - 1),
                        V::I(*step),
                        t(transition),
                        t(to),
                        t(&full),
                        V::I(now),
                        V::B(unchanged),
                        V::T(patch.clone()),
                    ],
                ),
                (
                    COMMIT_RUN,
                    vec![V::Id, V::I(1), V::I(step - 1), V::I(*step), t(to), t(status), V::I(now), V::I(now + 30_000)],
                ),
            ];
            self.store_documents(*step, &mut tx);
            if *step == last {
                tx.push((HAS_PENDING, vec![V::Id]));
            }
            txs.push(tx);
        }
        txs
    }

    /// The store's inserts of the documents step `step` saved.
    fn store_documents(&self, step: i64, tx: &mut Vec<(&'static str, Vec<V>)>) {
        for (seq, version, doc_type, key, tags, metadata, content, _) in self.documents.iter().filter(|d| d.7 == step) {
            let values = vec![
                V::Id,
                V::I(*seq),
                V::I(*version),
                t(doc_type),
                V::T(key.clone()),
                t(tags),
                t(metadata),
                t(content),
                V::I(step),
            ];
            tx.push((INSERT_DOCUMENT, values));
        }
    }

    /// The baseline's writes of the same run: the run row (with the documents it was
    /// created with), then per transition its update and the transition's documents
    /// (their contents as the store has them).
    fn baseline_replay(&self) -> Replay {
        let docs = |step: i64, tx: &mut Vec<(&'static str, Vec<V>)>| {
            for d in self.documents.iter().filter(|d| d.7 == step) {
                tx.push((BASE_INSERT_DOC, vec![V::Id, V::I(d.0), t(&d.6)]));
            }
        };
        let mut first = vec![(BASE_INSERT_RUN, vec![V::Id, V::I(0), t(r#"{"step":0}"#)])];
        docs(0, &mut first);
        let mut txs = vec![first];
        for (step, ..) in &self.checkpoints[1..] {
            let state = format!(r#"{{"step":{step}}}"#);
            let mut tx = vec![(BASE_UPDATE_RUN, vec![V::Id, V::I(*step), V::T(Some(state))])];
            docs(*step, &mut tx);
            txs.push(tx);
        }
        txs
    }
}

fn rusqlite_run(conn: &mut rusqlite::Connection, replay: &Replay, id: &[u8]) -> rusqlite::Result<()> {
    for statements in replay {
        let tx = conn.transaction()?;
        for (sql, values) in statements {
            // `$n` is a name to SQLite (numbered by first appearance); `?n` is the n-th.
            let sql = sql.replace('$', "?");
            let mut stmt = tx.prepare_cached(&sql)?;
            for (i, v) in values.iter().enumerate() {
                match v {
                    V::Id => stmt.raw_bind_parameter(i + 1, id)?,
                    V::I(n) => stmt.raw_bind_parameter(i + 1, n)?,
                    V::T(s) => stmt.raw_bind_parameter(i + 1, s)?,
                    V::B(b) => stmt.raw_bind_parameter(i + 1, b)?,
                }
            }
            stmt.raw_execute()?;
        }
        tx.commit()?;
    }
    Ok(())
}

/// A fresh file with the writes' tables: the store's schema (created by the store,
/// which is then closed) or the baseline's two tables.
async fn fresh(dir: &std::path::Path, name: &str, store_schema: bool) -> Result<std::path::PathBuf, String> {
    let path = dir.join(format!("{name}.db"));
    if store_schema {
        drop(SqliteStore::open(&path).await.map_err(|e| e.to_string())?);
    } else {
        let conn = crate::plain::open_sqlite(&path)?;
        for sql in crate::db::BASELINE_SQLITE {
            conn.execute(sql, []).map_err(|e| e.to_string())?;
        }
    }
    Ok(path)
}

/// One way of writing: its open connection and its replay, timed round by round.
struct Variant<'r> {
    writes: &'static str,
    driver: &'static str,
    full: bool,
    replay: &'r Replay,
    conn: rusqlite::Connection,
    /// Microseconds per run, one figure a round.
    rounds: Vec<f64>,
}

impl<'r> Variant<'r> {
    async fn open(
        dir: &std::path::Path,
        (writes, replay): (&'static str, &'r Replay),
        full: bool,
    ) -> Result<Variant<'r>, String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let file = format!("{writes}-rusqlite-{}", if full { "full" } else { "off" });
        let path = fresh(dir, &file, writes == "store").await?;
        let conn = crate::plain::open_sqlite(&path)?;
        // As the store connects: foreign keys on.
        conn.pragma_update(None, "foreign_keys", "ON").map_err(|x| e(&x))?;
        if !full {
            conn.pragma_update(None, "synchronous", "OFF").map_err(|x| e(&x))?;
        }
        Ok(Variant { writes, driver: "rusqlite", full, replay, conn, rounds: Vec::new() })
    }

    /// Replays `n` runs; microseconds per run.
    fn runs(&mut self, n: usize) -> Result<f64, String> {
        let started = Instant::now();
        for _ in 0..n {
            rusqlite_run(&mut self.conn, self.replay, RunId::new().0.as_bytes()).map_err(|x| x.to_string())?;
        }
        Ok(started.elapsed().as_secs_f64() * 1e6 / n as f64)
    }
}

/// The median of a variant's rounds.
fn median(rounds: &[f64]) -> f64 {
    let mut sorted = rounds.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Rounds of the breakdown: each variant runs `n / ROUNDS` runs a round, in turn, so
/// a busy disk or CPU weighs on all of them alike; each line is the median round.
const ROUNDS: usize = 5;

pub(crate) async fn run(args: &Args) -> ExitCode {
    match breakdown(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("{}", json!({"workload": "W4", "breakdown": true, "ok": false, "error": e}));
            ExitCode::from(2)
        }
    }
}

async fn breakdown(args: &Args) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let dir = std::env::temp_dir().join(format!("loopstack-bench-breakdown-{}", RunId::new()));
    std::fs::create_dir_all(&dir).map_err(|x| e(&x))?;
    let result = async {
        // The store under the agent, as W4 measures it; its first run is the recording.
        let store = SqliteStore::open(dir.join("loopstack.db")).await.map_err(|x| e(&x))?;
        let reader = crate::plain::open_sqlite(&dir.join("loopstack.db"))?;
        let fw = Framework::durable(Workload::W4, Arc::new(store));
        let reply = fw.agent.ask(&fw.runtime, crate::agent::QUESTION).await.map_err(|x| e(&x))?;
        let recorded = record(&reader, reply.run_id).map_err(|x| e(&x))?;
        drop(reader);
        for _ in 0..args.warmup {
            fw.run_one().await?;
        }
        // The store again, its connection switched to synchronous=OFF.
        let off_store = SqliteStore::open(dir.join("loopstack-off.db")).await.map_err(|x| e(&x))?;
        off_store
            .with_connection(|c| c.pragma_update(None, "synchronous", "OFF"))
            .await
            .map_err(|x| e(&x))?
            .map_err(|x| e(&x))?;
        let fw_off = Framework::durable(Workload::W4, Arc::new(off_store));
        for _ in 0..args.warmup {
            fw_off.run_one().await?;
        }

        let store_writes = recorded.store_replay();
        let base_writes = recorded.baseline_replay();
        let mut variants = Vec::new();
        for writes in [("baseline", &base_writes), ("store", &store_writes)] {
            for full in [true, false] {
                let mut variant = Variant::open(&dir, writes, full).await?;
                variant.runs(20)?; // warm up
                variants.push(variant);
            }
        }
        let per_round = (args.n / ROUNDS).max(1);
        let (mut loopstack, mut loopstack_off) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            for variant in &mut variants {
                let us = variant.runs(per_round)?;
                variant.rounds.push(us);
            }
            let started = Instant::now();
            for _ in 0..per_round {
                fw.run_one().await?;
            }
            loopstack.push(started.elapsed().as_secs_f64() * 1e6 / per_round as f64);
            let started = Instant::now();
            for _ in 0..per_round {
                fw_off.run_one().await?;
            }
            loopstack_off.push(started.elapsed().as_secs_f64() * 1e6 / per_round as f64);
        }
        let count = |r: &Replay| r.iter().map(Vec::len).sum::<usize>();
        let line = |writes: &str, driver: &str, sync: &str, us: f64, replay: &Replay| {
            let statements = count(replay);
            json!({
                "workload": "W4", "breakdown": true, "store": "sqlite", "writes": writes, "driver": driver,
                "synchronous": sync, "n": per_round * ROUNDS, "us_per_run": round(us, 1),
                "statements_per_run": statements, "transactions_per_run": replay.len(),
                "us_per_statement": round(us / statements as f64, 1),
            })
        };
        for variant in variants {
            let sync = if variant.full { "full" } else { "off" };
            println!("{}", line(variant.writes, variant.driver, sync, median(&variant.rounds), variant.replay));
        }
        // The same statements through the store, with the framework's own work.
        println!("{}", line("loopstack", "SqliteStore", "full", median(&loopstack), &store_writes));
        println!("{}", line("loopstack", "SqliteStore", "off", median(&loopstack_off), &store_writes));
        Ok(())
    }
    .await;
    if std::env::var_os("LOOPSTACK_BENCH_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}
