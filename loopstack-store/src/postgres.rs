//! The PostgreSQL store.

use std::str::FromStr as _;
use std::time::Duration;

use loopstack_core::{Checkpoint, NewRun, StoreError};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgQueryResult};
use sqlx::{Postgres, Transaction};

use crate::sql::queries::{claim_runnable, due_schedules};
use crate::sql::{Dialect, SqlStore};

/// The PostgreSQL migrations, in order.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "runs", include_str!("../migrations/postgres/0001_runs.sql")),
    (2, "parent signal", include_str!("../migrations/postgres/0002_parent_signal.sql")),
    (3, "events", include_str!("../migrations/postgres/0003_events.sql")),
    (4, "schedules", include_str!("../migrations/postgres/0004_schedules.sql")),
    (5, "versions", include_str!("../migrations/postgres/0005_versions.sql")),
    (6, "trace parent", include_str!("../migrations/postgres/0006_trace_parent.sql")),
    (7, "claim indexes", include_str!("../migrations/postgres/0007_claim_indexes.sql")),
    (8, "lean run indexes", include_str!("../migrations/postgres/0008_lean_run_indexes.sql")),
    (9, "schedule overlap", include_str!("../migrations/postgres/0009_schedule_overlap.sql")),
    (11, "takeovers", include_str!("../migrations/postgres/0011_takeovers.sql")),
    (12, "holder", include_str!("../migrations/postgres/0012_holder.sql")),
    (13, "labels", include_str!("../migrations/postgres/0013_labels.sql")),
];

/// A [`Store`](loopstack_core::Store) in PostgreSQL: for many workers and processes
/// sharing runs.
///
/// Every write of a drive is a compare-and-set on the run row (its epoch and step),
/// so a worker whose lease was taken over cannot commit. Commits use synchronous
/// commit as the server is configured. The schema is created and migrated on
/// connect, in the connection's schema (`search_path`).
#[derive(Clone)]
pub struct PostgresStore {
    sql: SqlStore<Postgres>,
}

/// Runs the statement `sql` makes of `schema` over a connection of its own and gives
/// the options of `url`: `schema` is checked to be a plain identifier first, since it
/// is written into the statement.
async fn in_schema(
    url: &str,
    schema: &str,
    sql: fn(&str) -> String,
) -> Result<PgConnectOptions, loopstack_core::StoreError> {
    let valid = !schema.is_empty() && schema.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(loopstack_core::StoreError::Corrupt(format!(
            "schema name `{schema}` must be ASCII letters, digits and underscores"
        )));
    }
    let options = PgConnectOptions::from_str(url).map_err(crate::sql::backend)?;
    let setup = PgPool::connect_with(options.clone()).await.map_err(crate::sql::backend)?;
    // `schema` is written into the statement: it was checked above.
    let done = sqlx::query(sqlx::AssertSqlSafe(sql(schema))).execute(&setup).await.map_err(crate::sql::backend);
    setup.close().await;
    done.map(|_| options)
}

/// Whether PostgreSQL aborted the statement to break a deadlock (SQLSTATE 40P01).
fn is_deadlock(e: &loopstack_core::StoreError) -> bool {
    let loopstack_core::StoreError::Backend(e) = e else { return false };
    let database = e.downcast_ref::<sqlx::Error>().and_then(sqlx::Error::as_database_error);
    database.and_then(|d| d.code()).is_some_and(|code| code == "40P01")
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.sql.debug_as("PostgresStore", f)
    }
}

impl PostgresStore {
    /// Connects to `url` (such as `postgres://postgres@127.0.0.1:5432/postgres`) and
    /// brings the schema up to date.
    pub async fn connect(url: &str) -> Result<Self, loopstack_core::StoreError> {
        let options = PgConnectOptions::from_str(url).map_err(crate::sql::backend)?;
        Self::connect_with(options, PgPoolOptions::new().max_connections(8)).await
    }

    /// Connects to `url` with every table in `schema` (created if missing): for
    /// several independent stores in one database, such as one per test.
    pub async fn connect_schema(url: &str, schema: &str) -> Result<Self, loopstack_core::StoreError> {
        let options = in_schema(url, schema, |s| format!("CREATE SCHEMA IF NOT EXISTS {s}")).await?;
        let options = options.options([("search_path", schema)]);
        Self::connect_with(options, PgPoolOptions::new().max_connections(8)).await
    }

    /// Drops `schema` and every table in it, runs and documents included: the end of
    /// a test that made it with [`connect_schema`](Self::connect_schema). Stores
    /// still connected to it fail from then on. Dropping a schema that does not
    /// exist is not an error.
    ///
    /// ```no_run
    /// # async fn test() -> Result<(), loopstack_core::StoreError> {
    /// use loopstack_store::PostgresStore;
    ///
    /// let url = "postgres://postgres@127.0.0.1:5432/postgres";
    /// let store = PostgresStore::connect_schema(url, "test_refunds").await?;
    /// // ... the test ...
    /// drop(store);
    /// PostgresStore::drop_schema(url, "test_refunds").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// A connection still writing to the schema (a runtime's task that has not ended
    /// yet) can deadlock with the drop, which takes each table's exclusive lock in
    /// turn; PostgreSQL then aborts one of the two, and the drop is tried again (up
    /// to 5 times) once the other has gone through.
    pub async fn drop_schema(url: &str, schema: &str) -> Result<(), loopstack_core::StoreError> {
        let mut tries = 1;
        loop {
            match in_schema(url, schema, |s| format!("DROP SCHEMA IF EXISTS {s} CASCADE")).await {
                Err(e) if tries < 5 && is_deadlock(&e) => tries += 1,
                done => return done.map(drop),
            }
        }
    }

    /// Connects with options and a pool of your own.
    pub async fn connect_with(
        options: PgConnectOptions,
        pool: PgPoolOptions,
    ) -> Result<Self, loopstack_core::StoreError> {
        let pool = pool.connect_with(options).await.map_err(crate::sql::backend)?;
        let migrator = crate::sql::migrator(crate::sql::Embedded(MIGRATIONS)).await?;
        migrator.run(&pool).await.map_err(|e| loopstack_core::StoreError::Backend(Box::new(e)))?;
        Ok(Self { sql: SqlStore::new(pool) })
    }

    /// Sets the lease runtimes and workers take on runs they drive (30 s unless set).
    #[must_use]
    pub fn with_lease(mut self, lease: Option<Duration>) -> Self {
        self.sql.lease = lease;
        self
    }

    /// Sets how long a follower of the event log waits for a notification before it
    /// reads the log anyway (`loopstack_store::POSTGRES_FALLBACK_POLL`
    /// unless set): the bound on how late it sees events whose notification was lost
    /// while the listening connection reconnected. Shorter costs a read of the log
    /// that often per idle follower; tests that must see the notification itself
    /// wake a follower set it to [`Duration::MAX`].
    #[must_use]
    pub fn with_fallback_poll(mut self, every: Duration) -> Self {
        self.sql.fallback_poll = every;
        self
    }

    /// The connection pool, for queries of your own.
    pub fn pool(&self) -> &PgPool {
        &self.sql.pool
    }
}

crate::sql::forward_store!(PostgresStore);

/// A whole commit in one statement: the fenced run row update, the checkpoint, the
/// documents (as arrays) and, when the run ends, the rejection of pending signals.
/// A commit that delivers a signal or sends one (`notify`) takes a transaction
/// instead (see `SqlStore::commit`).
/// Data-modifying `WITH` clauses all run, in one snapshot and one implicit
/// transaction; when the fence does not hold, `r` is empty and nothing is written.
const COMMIT_ONE: &str = "WITH r AS (UPDATE runs SET step = $4, place = $5, status = $6, updated_at = $7, \
    place_since = $7, lease_until = COALESCE($8, lease_until) \
    WHERE run_id = $1 AND epoch = $2 AND step = $3 AND status NOT IN ('completed', 'failed', 'cancelled', 'stopped') \
    RETURNING id), \
    d AS (INSERT INTO documents (run, seq, version, doc_type, doc_key, tags, metadata, content, step) \
    SELECT r.id, x.seq, x.version, x.doc_type, x.doc_key, x.tags, x.metadata, x.content, x.step FROM r, \
    UNNEST($12::BIGINT[], $13::BIGINT[], $14::TEXT[], $15::TEXT[], $16::TEXT[], $17::TEXT[], $18::TEXT[], \
    $19::BIGINT[]) AS x(seq, version, doc_type, doc_key, tags, metadata, content, step)), \
    p AS (UPDATE signals SET status = 'rejected', reason = $20 \
    WHERE $21 AND run IN (SELECT id FROM r) AND status = 'pending') \
    INSERT INTO checkpoints (run, step, transition, to_place, state, state_patch, at) \
    SELECT id, $4, $9, $5, CASE WHEN $10 THEN NULL ELSE $11 END, $22, $7 FROM r";

/// A run, its step-0 checkpoint and the documents it starts with (as arrays) in
/// one statement.
const CREATE_ONE: &str = "WITH r AS (INSERT INTO runs (run_id, workflow, status, place, step, error, \
    definition_hash, version, parent, parent_signal, forked_from, forked_step, epoch, signal_seq, waiting_for, \
    place_since, wake_at, lease_owner, lease_until, created_at, updated_at, trace_parent, labels) \
    VALUES ($1, $2, $3, 'start', 0, NULL, $4, $12, $5, $11, NULL, NULL, $6, 0, '[]', $9, NULL, $7, $8, $9, $9, $13, $22) \
    ON CONFLICT (run_id) DO NOTHING RETURNING id), \
    d AS (INSERT INTO documents (run, seq, version, doc_type, doc_key, tags, metadata, content, step) \
    SELECT r.id, x.seq, x.version, x.doc_type, x.doc_key, x.tags, x.metadata, x.content, x.step FROM r, \
    UNNEST($14::BIGINT[], $15::BIGINT[], $16::TEXT[], $17::TEXT[], $18::TEXT[], $19::TEXT[], $20::TEXT[], \
    $21::BIGINT[]) AS x(seq, version, doc_type, doc_key, tags, metadata, content, step)) \
    INSERT INTO checkpoints (run, step, transition, to_place, state, at) SELECT id, 0, '', 'start', $10, $9 FROM r";

/// Documents as the columns `UNNEST` reads them, one array per column.
#[derive(Default)]
struct DocumentColumns {
    seq: Vec<i64>,
    version: Vec<i64>,
    doc_type: Vec<String>,
    key: Vec<Option<String>>,
    tags: Vec<String>,
    metadata: Vec<String>,
    content: Vec<String>,
    step: Vec<i64>,
}

impl DocumentColumns {
    fn of(docs: &[std::sync::Arc<loopstack_core::Document>]) -> Result<Self, loopstack_core::StoreError> {
        use crate::sql::{corrupt, to_i64};
        let mut columns = Self::default();
        for d in docs {
            columns.tags.push(serde_json::to_string(&d.tags).map_err(corrupt)?);
            columns.seq.push(to_i64(d.seq));
            columns.version.push(i64::from(d.version));
            columns.doc_type.push(d.doc_type.to_string());
            columns.key.push(d.key.clone());
            columns.metadata.push(d.metadata.as_str().to_owned());
            columns.content.push(d.content.get().to_owned());
            columns.step.push(to_i64(d.step));
        }
        Ok(columns)
    }

    /// Binds the eight arrays, in column order.
    fn bind<'q>(
        self,
        query: sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
        query
            .bind(self.seq)
            .bind(self.version)
            .bind(self.doc_type)
            .bind(self.key)
            .bind(self.tags)
            .bind(self.metadata)
            .bind(self.content)
            .bind(self.step)
    }
}

impl Dialect for Postgres {
    const CLAIM_RUNNABLE: &'static str = claim_runnable!(
        " FOR UPDATE SKIP LOCKED",
        "r.workflow IN (SELECT jsonb_array_elements_text(CAST($4 AS TEXT)::jsonb))",
        "(r.workflow || ':' || r.version) IN (SELECT jsonb_array_elements_text(CAST($6 AS TEXT)::jsonb))",
        "",
        "",
        "",
        ("= ANY(ARRAY(", "))"),
    );

    const DUE_SCHEDULES: &'static str =
        due_schedules!("r.workflow IN (SELECT jsonb_array_elements_text(CAST($4 AS TEXT)::jsonb))");

    fn rows_affected(done: &PgQueryResult) -> u64 {
        done.rows_affected()
    }

    /// Commits `cp` in one round trip ([`COMMIT_ONE`]); `Ok(false)` when the fence
    /// did not hold.
    async fn one_statement_commit(
        store: &SqlStore<Self>,
        cp: &Checkpoint,
        unchanged: bool,
        patch: Option<&str>,
    ) -> Option<Result<bool, StoreError>> {
        use crate::sql::{backend, to_i64};
        let columns = match DocumentColumns::of(&cp.documents) {
            Ok(columns) => columns,
            Err(e) => return Some(Err(e)),
        };
        let query = sqlx::query(COMMIT_ONE)
            .bind(cp.run_id.0)
            .bind(to_i64(cp.fence.epoch))
            .bind(to_i64(cp.fence.step))
            .bind(to_i64(cp.transition.step))
            .bind(&*cp.transition.to)
            .bind(cp.status.as_str())
            .bind(cp.transition.at.as_millis())
            .bind(cp.lease_until.map(loopstack_core::Timestamp::as_millis))
            .bind(&*cp.transition.transition)
            .bind(unchanged)
            .bind(cp.state.get());
        let done = columns
            .bind(query)
            .bind(loopstack_core::store::SIGNAL_OUTLIVED_RUN)
            .bind(cp.status.is_finished())
            .bind(patch)
            .execute(&store.pool)
            .await;
        Some(match done {
            Ok(done) => Ok(done.rows_affected() == 1),
            // Two writers of one epoch and step: the second loses.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(false),
            Err(e) => Err(backend(e)),
        })
    }

    /// Creates a run with its documents in one round trip ([`CREATE_ONE`]); `Ok(false)`
    /// if it exists.
    async fn one_statement_create(
        store: &SqlStore<Self>,
        run: &NewRun,
        epoch: i64,
        now: i64,
    ) -> Option<Result<bool, StoreError>> {
        let columns = match DocumentColumns::of(&run.documents) {
            Ok(columns) => columns,
            Err(e) => return Some(Err(e)),
        };
        let query = sqlx::query(CREATE_ONE)
            .bind(run.run_id.0)
            .bind(&*run.workflow)
            .bind(run.status.as_str())
            .bind(&*run.definition_hash)
            .bind(run.parent.map(|p| p.0))
            .bind(epoch)
            .bind(run.lease.as_ref().map(|l| l.owner.clone()))
            .bind(run.lease.as_ref().map(|l| l.until.as_millis()))
            .bind(now)
            .bind(run.state.get())
            .bind(run.parent_signal.as_deref())
            .bind(i64::from(run.version))
            .bind(run.trace_parent.as_deref());
        let labels = match crate::sql::labels_column(&run.labels) {
            Ok(labels) => labels,
            Err(e) => return Some(Err(e)),
        };
        let done = columns.bind(query).bind(labels).execute(&store.pool).await;
        Some(done.map(|d| d.rows_affected() == 1).map_err(crate::sql::backend))
    }

    /// Serializes appends ([`EVENT_LOCK`]).
    async fn begin_append(tx: &mut Transaction<'static, Self>) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(EVENT_LOCK)
            .execute(&mut **tx)
            .await
            .map_err(crate::sql::backend)?;
        Ok(())
    }

    /// Notifies the followers of this schema's log (delivered at commit).
    async fn end_append(tx: &mut Transaction<'static, Self>, newest: i64) -> Result<(), StoreError> {
        sqlx::query(NOTIFY).bind(newest.to_string()).execute(&mut **tx).await.map_err(crate::sql::backend)?;
        Ok(())
    }

    /// Waits for a notification, or the store's fallback poll
    /// ([`PostgresStore::with_fallback_poll`]).
    async fn wait_events(store: &SqlStore<Self>, after: u64, max: Duration) {
        listen_for_events(store);
        store.events.wait(after, max.min(store.fallback_poll)).await;
    }
}

/// Serializes appends to the event log (`pg_advisory_xact_lock`), so that its ids
/// are committed in the order they are handed out: "events after id N" then never
/// misses a smaller id committed later. ASCII `loopevts`.
const EVENT_LOCK: i64 = 0x6c6f_6f70_6576_7473;

/// This schema's channel ([`NOTIFY_CHANNEL`](crate::NOTIFY_CHANNEL)): a channel
/// name holds 63 bytes, so the schema is in it as a hash.
const CHANNEL: &str = "SELECT 'loopstack_events_' || left(md5(current_schema()), 16)";

/// Notifies this schema's channel of the newest id `$1`.
const NOTIFY: &str = "SELECT pg_notify('loopstack_events_' || left(md5(current_schema()), 16), $1)";

/// Starts, once, the task that `LISTEN`s on this schema's channel and wakes the
/// followers; it reconnects after a lost connection (the fallback poll covers
/// what was missed) and ends with the store's pool.
fn listen_for_events(store: &SqlStore<Postgres>) {
    if store.events.listening.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    let pool = store.pool.clone();
    let wake = std::sync::Arc::downgrade(&store.events);
    tokio::spawn(async move {
        let mut listener = loop {
            let connected = async {
                let channel: String = sqlx::query_scalar(CHANNEL).fetch_one(&pool).await?;
                let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await?;
                listener.listen(&channel).await?;
                Ok::<_, sqlx::Error>(listener)
            };
            match connected.await {
                Ok(listener) => break listener,
                Err(sqlx::Error::PoolClosed) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "could not LISTEN for run events; polling");
                    tokio::time::sleep(crate::events::POSTGRES_FALLBACK_POLL).await;
                }
            }
            if wake.strong_count() == 0 {
                return;
            }
        };
        loop {
            match listener.recv().await {
                Ok(notification) => {
                    let Some(wake) = wake.upgrade() else { return };
                    if let Ok(id) = notification.payload().parse() {
                        wake.saw(id);
                    }
                }
                Err(sqlx::Error::PoolClosed) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "the LISTEN connection failed; reconnecting");
                    tokio::time::sleep(crate::events::POSTGRES_FALLBACK_POLL).await;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use loopstack_core::{Lease, RunId, Store as _, Timestamp, WorkflowVersions};
    use sqlx::Postgres;

    use super::PostgresStore;
    use crate::sql::Dialect;

    /// A store in a schema of its own whose tables autovacuum leaves alone: as a
    /// burst of runs leaves them, before autovacuum has analyzed them.
    async fn unanalyzed(name: &str) -> (PostgresStore, String) {
        let url = url();
        let schema = format!("loopstack_test_{name}_{}", RunId::new().0.simple());
        let store = PostgresStore::connect_schema(&url, &schema).await.unwrap_or_else(|e| {
            panic!("PostgreSQL at {url} is needed for this test (`.ci/run` starts it; set LOOPSTACK_DATABASE_URL): {e}")
        });
        for sql in [
            "ALTER TABLE runs SET (autovacuum_enabled = false)",
            "ALTER TABLE signals SET (autovacuum_enabled = false)",
        ] {
            sqlx::query(sql).execute(store.pool()).await.unwrap();
        }
        (store, schema)
    }

    fn url() -> String {
        std::env::var("LOOPSTACK_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
    }

    /// The claim over many parked runs reads the few runs that can move (here one,
    /// with a pending signal), not every waiting run. It used to read them all, so an
    /// idle poll grew with the parked runs. (40,000 of them: what the claim reads besides
    /// the runs, such as the catalog pages a new connection reads for the run table's
    /// trigger, stays a few dozen pages, well under a tenth of the table.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_claim_reads_only_the_waiting_runs_that_can_move() {
        let (store, schema) = unanalyzed("claim_waiting").await;
        let pool = store.pool();
        sqlx::query(
            "INSERT INTO runs (run_id, workflow, status, place, step, definition_hash, epoch, place_since, \
             created_at, updated_at, waiting_for) SELECT gen_random_uuid(), 'parked', 'waiting', 'waiting', 1, 'h', \
             1, g, g, g, '[\"wake\"]' FROM generate_series(1, 40000) g",
        )
        .execute(pool)
        .await
        .unwrap();
        let (id, signalled): (i64, uuid::Uuid) =
            sqlx::query_as("SELECT id, run_id FROM runs ORDER BY id OFFSET 777 LIMIT 1").fetch_one(pool).await.unwrap();
        // Its checkpoints, which a claim reads, and a pending signal.
        for sql in [
            "INSERT INTO checkpoints (run, step, transition, to_place, state, at) VALUES \
             ($1, 0, '', 'start', '{}', 1), ($1, 1, 'park', 'waiting', '{}', 1)",
            "INSERT INTO signals (run, id, name, payload, status, received_at) VALUES ($1, 1, 'wake', '{}', 'pending', 1)",
        ] {
            sqlx::query(sql).bind(id).execute(pool).await.unwrap();
        }

        let plan = explain_claim(pool).await;
        let pages = pages_read(&plan);
        let (table_pages,): (i64,) =
            sqlx::query_as("SELECT pg_relation_size('runs') / 8192").fetch_one(pool).await.unwrap();
        assert!(
            pages * 10 < u64::try_from(table_pages).unwrap(),
            "the claim read {pages} pages of a {table_pages}-page table:\n{}",
            plan.join("\n")
        );

        // And it takes that run, and only it.
        let lease = Lease { owner: "worker".into(), until: Timestamp::from_millis(2_000) };
        let claimed = store
            .claim_runnable(&[WorkflowVersions::new("parked", &[1])], &lease, Timestamp::from_millis(1_000), 8)
            .await
            .unwrap();
        assert_eq!(claimed.iter().map(|r| r.run_id.0).collect::<Vec<_>>(), [signalled]);
        PostgresStore::drop_schema(&url(), &schema).await.unwrap();
    }

    /// A burst of queued runs: the claim compares each run with its list of ids once,
    /// not with every id of it. It compared every pair, so a claim grew with the square
    /// of the queue and a burst of queued runs starved the workers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_claim_over_many_queued_runs_compares_each_once() {
        let (store, schema) = unanalyzed("claim_queued").await;
        let pool = store.pool();
        sqlx::query(
            "INSERT INTO runs (run_id, workflow, status, place, step, definition_hash, epoch, place_since, \
             created_at, updated_at) SELECT gen_random_uuid(), 'parked', 'queued', 'start', 0, 'h', 0, g, g, g \
             FROM generate_series(1, 1000) g",
        )
        .execute(pool)
        .await
        .unwrap();
        let plan = explain_claim(pool).await;
        let compared: u64 = plan
            .iter()
            .filter_map(|l| l.trim().strip_prefix("Rows Removed by Join Filter: "))
            .map(|n| n.parse::<u64>().unwrap())
            .sum();
        assert!(compared < 10_000, "the claim compared {compared} pairs:\n{}", plan.join("\n"));
        // And it took as many as asked.
        let update = plan.iter().find(|l| l.starts_with("Update on runs")).expect("the update");
        assert!(update.ends_with("rows=8 loops=1)"), "{}", plan.join("\n"));
        PostgresStore::drop_schema(&url(), &schema).await.unwrap();
    }

    /// The plan of the claim as it ran (`EXPLAIN ANALYZE`, its update rolled back).
    async fn explain_claim(pool: &sqlx::PgPool) -> Vec<String> {
        let mut tx = pool.begin().await.unwrap();
        let plan: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "EXPLAIN (ANALYZE, BUFFERS) {}",
            <Postgres as Dialect>::CLAIM_RUNNABLE
        )))
        .bind("worker")
        .bind(2_000_i64)
        .bind(1_000_i64)
        .bind(r#"["parked"]"#)
        .bind(8_i64)
        .bind(r#"["parked:1"]"#)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
        tx.rollback().await.unwrap();
        plan.into_iter().map(|(line,)| line).collect()
    }

    /// The pages a plan read: its first `Buffers:` line is the whole statement's.
    fn pages_read(plan: &[String]) -> u64 {
        let buffers = plan.iter().find_map(|l| l.trim().strip_prefix("Buffers: shared ")).expect("a buffers line");
        buffers
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| matches!(*k, "hit" | "read"))
            .map(|(_, v)| v.parse::<u64>().unwrap())
            .sum()
    }
}
