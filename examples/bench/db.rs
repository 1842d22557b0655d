//! W4's database: the framework's store or the baselines' two tables, how to read
//! its size, and the baseline loop that writes each step through a [`StepWriter`].

use std::sync::Arc;

use futures::future::BoxFuture;
use loopstack::{RunId, Store};
use loopstack_store::{PostgresStore, SqliteStore};
use serde_json::{Value, json};

use crate::DbKind;
use crate::agent::{BaseModel as _, Baseline, QUESTION};
use crate::measure::Subject;

/// The database of a W4 run: the framework's store or the baseline's tables, and how
/// to read its size.
#[derive(Clone)]
pub(crate) struct Db {
    pub(crate) kind: DbKind,
    pub(crate) postgres: Option<sqlx::PgPool>,
    /// The framework's store (absent for the baseline).
    pub(crate) store: Option<Arc<dyn Store>>,
    pub(crate) dir: Option<std::path::PathBuf>,
    pub(crate) schema: Option<String>,
}

pub(crate) const BASELINE_SQLITE: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS bench_runs (run_id BLOB PRIMARY KEY, step INTEGER NOT NULL, state TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS bench_documents (run_id BLOB NOT NULL, seq INTEGER NOT NULL, content TEXT NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID",
];
pub(crate) const BASELINE_POSTGRES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS bench_runs (run_id UUID PRIMARY KEY, step BIGINT NOT NULL, state TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS bench_documents (run_id UUID NOT NULL, seq BIGINT NOT NULL, content TEXT NOT NULL, PRIMARY KEY (run_id, seq))",
];

impl Db {
    pub(crate) async fn open(kind: DbKind, baseline: bool) -> Result<Self, String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let mut db = Self { kind, postgres: None, store: None, dir: None, schema: None };
        match kind {
            DbKind::Sqlite => {
                let dir = std::env::temp_dir().join(format!("loopstack-bench-{}", RunId::new()));
                std::fs::create_dir_all(&dir).map_err(|x| e(&x))?;
                let path = sqlite_file(&dir);
                if baseline {
                    // The same settings the store uses: WAL, synchronous=FULL.
                    let conn = crate::plain::open_sqlite(&path)?;
                    for sql in BASELINE_SQLITE {
                        conn.execute(sql, []).map_err(|x| e(&x))?;
                    }
                } else {
                    db.store = Some(Arc::new(SqliteStore::open(&path).await.map_err(|x| e(&x))?));
                }
                db.dir = Some(dir);
            }
            DbKind::Postgres | DbKind::Memory => {
                let url = crate::postgres_url();
                let schema = format!("loopstack_bench_{}", RunId::new().0.simple());
                let store = PostgresStore::connect_schema(&url, &schema).await.map_err(|x| e(&x))?;
                if baseline {
                    for sql in BASELINE_POSTGRES {
                        sqlx::query(*sql).execute(store.pool()).await.map_err(|x| e(&x))?;
                    }
                } else {
                    db.store = Some(Arc::new(store.clone()));
                }
                db.postgres = Some(store.pool().clone());
                db.schema = Some(schema);
            }
        }
        Ok(db)
    }

    /// Rows in all tables, and bytes on disk.
    pub(crate) async fn size(&self) -> Result<(i64, i64), String> {
        let tables: &[&str] = if self.store.is_some() {
            // The event log's tables too: a run nobody follows writes no row there.
            &["runs", "checkpoints", "documents", "signals", "events", "event_listeners"]
        } else {
            &["bench_runs", "bench_documents"]
        };
        let count = tables.iter().map(|t| format!("(SELECT count(*) FROM {t})")).collect::<Vec<_>>().join(" + ");
        let count = format!("SELECT {count} AS n");
        match self.kind {
            DbKind::Sqlite => {
                // A connection of its own on the file, once the runs are done.
                let path = sqlite_file(self.dir.as_ref().expect("a sqlite directory"));
                let conn = crate::plain::open_sqlite(&path)?;
                let e = |e: rusqlite::Error| e.to_string();
                let rows: i64 = conn.query_row(&count, [], |r| r.get(0)).map_err(e)?;
                // Move the WAL into the main file first, so the file size counts it.
                conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).map_err(e)?;
                let bytes: i64 = conn
                    .query_row("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()", [], |r| {
                        r.get(0)
                    })
                    .map_err(e)?;
                Ok((rows, bytes))
            }
            DbKind::Postgres | DbKind::Memory => {
                let e = |e: sqlx::Error| e.to_string();
                let pool = self.postgres.as_ref().expect("a postgres pool");
                let rows: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(count)).fetch_one(pool).await.map_err(e)?;
                let bytes: i64 = sqlx::query_scalar(
                    "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::BIGINT FROM pg_class c \
                     JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'",
                )
                .fetch_one(pool)
                .await
                .map_err(e)?;
                Ok((rows, bytes))
            }
        }
    }

    /// Drops the database, unless `LOOPSTACK_BENCH_KEEP` is set (to look at its rows).
    pub(crate) async fn cleanup(&self) {
        if std::env::var_os("LOOPSTACK_BENCH_KEEP").is_some() {
            eprintln!("kept the database: {:?} {:?}", self.dir, self.schema);
            return;
        }
        if let (Some(pool), Some(schema)) = (&self.postgres, &self.schema) {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(pool).await;
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// One plain sqlx transaction on PostgreSQL: update the run row (or create it)
    /// and insert new documents.
    async fn sqlx_step(
        &self,
        run_id: uuid::Uuid,
        step: i64,
        state: &str,
        docs: &[(i64, String)],
    ) -> Result<(), String> {
        let e = |e: sqlx::Error| e.to_string();
        let pool = self.postgres.as_ref().ok_or("sqlx writes only to PostgreSQL here")?;
        let mut tx = pool.begin().await.map_err(e)?;
        // The run row: made at step 0, updated after (the same three values either way).
        let run = if step == 0 {
            "INSERT INTO bench_runs (run_id, step, state) VALUES ($1, $2, $3)"
        } else {
            "UPDATE bench_runs SET step = $2, state = $3 WHERE run_id = $1"
        };
        sqlx::query(run).bind(run_id).bind(step).bind(state).execute(&mut *tx).await.map_err(e)?;
        for (seq, content) in docs {
            sqlx::query("INSERT INTO bench_documents (run_id, seq, content) VALUES ($1, $2, $3)")
                .bind(run_id)
                .bind(*seq)
                .bind(content.as_str())
                .execute(&mut *tx)
                .await
                .map_err(e)?;
        }
        tx.commit().await.map_err(e)
    }
}

/// The SQLite file of a W4 run in `dir`.
pub(crate) fn sqlite_file(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join("bench.db")
}

/// Writes one step of the baseline loop: in one transaction, the run row (created at
/// step 0, updated after) and the step's new documents; `last` marks the run's last
/// step (W5's queue marks its job done there).
pub(crate) trait StepWriter: Send + Sync + 'static {
    fn write_step<'a>(
        &'a self,
        run_id: uuid::Uuid,
        step: i64,
        state: &'a str,
        docs: &'a [(i64, String)],
        last: bool,
    ) -> BoxFuture<'a, Result<(), String>>;
}

impl StepWriter for Db {
    fn write_step<'a>(
        &'a self,
        run_id: uuid::Uuid,
        step: i64,
        state: &'a str,
        docs: &'a [(i64, String)],
        _: bool,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.sqlx_step(run_id, step, state, docs))
    }
}

/// The baseline loop, persisting the same steps the agent checkpoints, each in one
/// plain transaction: create the run with the question (as the agent saves its
/// prompt when the run is created), then `llm_turn` (the model's message),
/// `run_tool_calls` (the results, and back to the model in the same step), the
/// second `llm_turn`, and `respond` (no document). A queued run (W5's job, its row made
/// without the question) writes the question with its first `llm_turn`.
pub(crate) struct DurableBaseline {
    inner: Baseline,
    writer: Arc<dyn StepWriter>,
}

impl DurableBaseline {
    pub(crate) fn new(inner: Baseline, writer: Arc<dyn StepWriter>) -> Self {
        Self { inner, writer }
    }

    /// One run; `queued` when its row exists already (W5's job), so step 0 is not
    /// written again.
    pub(crate) fn run_with(&self, run_id: uuid::Uuid, queued: bool) -> BoxFuture<'static, Result<(), String>> {
        let (model, tools, db) = (self.inner.model.clone(), self.inner.tools.clone(), self.writer.clone());
        Box::pin(async move {
            // A queued run's row is step 0 already.
            let mut step = i64::from(queued);
            let mut write = async |docs: &[(i64, String)], last: bool| {
                let state = format!(r#"{{"step":{step}}}"#);
                let result = db.write_step(run_id, step, &state, docs, last).await;
                step += 1;
                result
            };
            let question = json!({"role": "user", "content": [{"type": "text", "text": QUESTION}]});
            let mut unsaved = Some((0, question.to_string()));
            if !queued {
                write(&[unsaved.take().expect("not saved yet")], false).await?; // the run row, with the question
            }
            let mut messages = vec![question];
            loop {
                let mut reply = model.chat(&messages).await?;
                let stop = reply["stop_reason"].clone();
                let message = reply["message"].take();
                let docs: Vec<(i64, String)> =
                    unsaved.take().into_iter().chain([(messages.len() as i64, message.to_string())]).collect();
                write(&docs, false).await?; // llm_turn
                let calls: Vec<(String, Value)> = message["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == "tool_use")
                    .map(|b| (b["id"].as_str().unwrap_or_default().to_owned(), b["input"].clone()))
                    .collect();
                messages.push(message);
                if stop != "tool_use" {
                    write(&[], true).await?; // respond
                    return Ok(());
                }
                let mut results = Vec::new();
                for (id, input) in calls {
                    let content = match tools.get("get_weather") {
                        Some(tool) => tool(input).await?,
                        None => return Err("no tool".to_owned()),
                    };
                    results
                        .push(json!({"type": "tool_result", "tool_use_id": id, "content": content, "is_error": false}));
                }
                let results = json!({"role": "user", "content": results});
                write(&[(messages.len() as i64, results.to_string())], false).await?; // run_tool_calls
                messages.push(results);
            }
        })
    }
}

impl Subject for DurableBaseline {
    fn run_one(&self) -> BoxFuture<'static, Result<(), String>> {
        self.run_with(RunId::new().0, false)
    }
    fn counts(&self) -> (u64, u64) {
        self.inner.counts()
    }
}
