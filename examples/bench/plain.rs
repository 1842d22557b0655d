//! W4's lower bound: the baseline's writes through the plain drivers, rusqlite
//! (synchronous, on the caller's thread) and tokio-postgres (one connection, its
//! statements prepared once), at the durability settings the store uses.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use crate::DbKind;
use crate::db::{Db, StepWriter};

const INSERT_RUN: &str = "INSERT INTO bench_runs (run_id, step, state) VALUES ($1, $2, $3)";
const UPDATE_RUN: &str = "UPDATE bench_runs SET step = $2, state = $3 WHERE run_id = $1";
const INSERT_DOC: &str = "INSERT INTO bench_documents (run_id, seq, content) VALUES ($1, $2, $3)";

/// The plain driver's writer over the baseline tables `db` created.
pub(crate) async fn writer(db: &Db) -> Result<Arc<dyn StepWriter>, String> {
    match db.kind {
        DbKind::Sqlite => {
            let path = crate::db::sqlite_file(db.dir.as_ref().ok_or("no database directory")?);
            Ok(Arc::new(PlainSqlite(Mutex::new(open_sqlite(&path)?))))
        }
        _ => {
            let schema = db.schema.as_deref().ok_or("no schema")?;
            let client = pg_connect(schema).await?;
            let prepare = async |sql: &str| client.prepare(sql).await.map_err(|e| e.to_string());
            let statements = [prepare(INSERT_RUN).await?, prepare(UPDATE_RUN).await?, prepare(INSERT_DOC).await?];
            Ok(Arc::new(PlainPostgres { client: tokio::sync::Mutex::new(client), statements }))
        }
    }
}

/// A rusqlite connection as the store opens its file: WAL, synchronous=FULL, a busy
/// timeout.
pub(crate) fn open_sqlite(path: &std::path::Path) -> Result<rusqlite::Connection, String> {
    let conn = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
    conn.pragma_update(None, "journal_mode", "WAL").map_err(|e| e.to_string())?;
    conn.pragma_update(None, "synchronous", "FULL").map_err(|e| e.to_string())?;
    conn.busy_timeout(std::time::Duration::from_secs(30)).map_err(|e| e.to_string())?;
    Ok(conn)
}

/// A tokio-postgres connection with `schema` first on its search path; its
/// connection task runs on the current runtime.
pub(crate) async fn pg_connect(schema: &str) -> Result<tokio_postgres::Client, String> {
    let mut config: tokio_postgres::Config = crate::postgres_url().parse().map_err(|e| format!("{e}"))?;
    config.options(format!("-c search_path={schema}"));
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("tokio-postgres connection: {e}");
        }
    });
    Ok(client)
}

struct PlainSqlite(Mutex<rusqlite::Connection>);

impl StepWriter for PlainSqlite {
    fn write_step<'a>(
        &'a self,
        run_id: uuid::Uuid,
        step: i64,
        state: &'a str,
        docs: &'a [(i64, String)],
        _: bool,
    ) -> BoxFuture<'a, Result<(), String>> {
        let write = || -> rusqlite::Result<()> {
            let mut conn = self.0.lock().unwrap_or_else(|p| p.into_inner());
            let tx = conn.transaction()?;
            let id = run_id.as_bytes().as_slice();
            if step == 0 {
                tx.prepare_cached(INSERT_RUN)?.execute(rusqlite::params![id, step, state])?;
            } else {
                tx.prepare_cached(UPDATE_RUN)?.execute(rusqlite::params![id, step, state])?;
            }
            for (seq, content) in docs {
                tx.prepare_cached(INSERT_DOC)?.execute(rusqlite::params![id, seq, content])?;
            }
            tx.commit()
        };
        // Synchronous, as a rusqlite program writes: no thread hop.
        let result = write().map_err(|e| e.to_string());
        Box::pin(async move { result })
    }
}

struct PlainPostgres {
    client: tokio::sync::Mutex<tokio_postgres::Client>,
    /// INSERT_RUN, UPDATE_RUN, INSERT_DOC.
    statements: [tokio_postgres::Statement; 3],
}

impl StepWriter for PlainPostgres {
    fn write_step<'a>(
        &'a self,
        run_id: uuid::Uuid,
        step: i64,
        state: &'a str,
        docs: &'a [(i64, String)],
        _: bool,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let e = |e: tokio_postgres::Error| e.to_string();
            let mut client = self.client.lock().await;
            let tx = client.transaction().await.map_err(e)?;
            let [insert_run, update_run, insert_doc] = &self.statements;
            let row = if step == 0 { insert_run } else { update_run };
            tx.execute(row, &[&run_id, &step, &state]).await.map_err(e)?;
            for (seq, content) in docs {
                tx.execute(insert_doc, &[&run_id, seq, content]).await.map_err(e)?;
            }
            tx.commit().await.map_err(e)
        })
    }
}
