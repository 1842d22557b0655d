//! What the SQLite and PostgreSQL stores share: the SQL (numbered `$n` parameters
//! work in both), value conversions, embedded migrations, and the `Store`
//! implementation itself, written once as a macro over the sqlx database type.

use std::borrow::Cow;

use futures::future::BoxFuture;
use loopstack_core::serde_json::value::RawValue;
use loopstack_core::{RunId, RunStatus, StoreError};
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

pub(crate) fn backend(e: sqlx::Error) -> StoreError {
    StoreError::Backend(Box::new(e))
}

pub(crate) fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

/// Steps, epochs and ids are `u64` in Rust and `BIGINT` in SQL.
pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) fn to_u64(n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| corrupt(format!("negative counter {n}")))
}

pub(crate) fn raw(text: String) -> Result<Box<RawValue>, StoreError> {
    RawValue::from_string(text).map_err(corrupt)
}

/// Statuses as `,a,b,` for `$n LIKE ('%,' || status || ',%')`: one parameter for a
/// set, the same in both dialects.
pub(crate) fn status_set(statuses: &[RunStatus]) -> String {
    let mut s = String::from(",");
    for st in statuses {
        s.push_str(st.as_str());
        s.push(',');
    }
    s
}

/// The migrations, embedded in the binary: the schema is created and upgraded on
/// first use, with no files at run time.
#[derive(Debug)]
pub(crate) struct Embedded(pub(crate) &'static [(i64, &'static str, &'static str)]);

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> BoxFuture<'static, Result<Vec<Migration>, sqlx::error::BoxDynError>> {
        Box::pin(async move {
            Ok(self
                .0
                .iter()
                .map(|&(version, description, sql)| {
                    Migration::new(
                        version,
                        Cow::Borrowed(description),
                        MigrationType::Simple,
                        Cow::Borrowed(sql),
                        false,
                    )
                })
                .collect())
        })
    }
}

pub(crate) async fn migrator(migrations: Embedded) -> Result<Migrator, StoreError> {
    Migrator::new(migrations).await.map_err(|e| StoreError::Backend(Box::new(e)))
}

/// The members of a JSON object with their values' texts exactly as written, in
/// order; `None` for any other JSON.
fn members(json: &str) -> Option<Vec<(String, &RawValue)>> {
    use loopstack_core::serde;
    struct Members<'a>(Vec<(String, &'a RawValue)>);
    impl<'de> serde::Deserialize<'de> for Members<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Members<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                    let mut out = Vec::new();
                    while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                        out.push(entry);
                    }
                    Ok(Members(out))
                }
            }
            d.deserialize_map(V)
        }
    }
    if !json.starts_with('{') {
        return None;
    }
    serde_json::from_str::<Members<'_>>(json).ok().map(|m| m.0)
}

fn push_key(out: &mut String, key: &str) {
    out.push_str(&serde_json::to_string(key).expect("a string serializes"));
}

/// A checkpoint's state as a patch of the state before it, when both are JSON
/// objects and the patch is smaller: a JSON array that lists the members of `next` in
/// order, each as the base's member at an index (`3`), a range of them (`[0, 4]`),
/// or a member with a new value (`["key", value]`). Base members not listed are
/// dropped. Values are kept as their exact texts, so applying the patch gives back
/// `next` byte for byte.
pub(crate) fn state_patch(base: &str, next: &str) -> Option<String> {
    let (base, members_next) = (members(base)?, members(next)?);
    // Each member of `next`: the index of an equal base member, or its own text.
    let mut entries: Vec<Result<usize, (&str, &str)>> = Vec::with_capacity(members_next.len());
    for (key, value) in &members_next {
        match base.iter().position(|(k, v)| k == key && v.get() == value.get()) {
            Some(i) => entries.push(Ok(i)),
            None => entries.push(Err((key, value.get()))),
        }
    }
    let mut out = String::from("[");
    let mut i = 0;
    while i < entries.len() {
        if out.len() > 1 {
            out.push(',');
        }
        match entries[i] {
            Ok(first) => {
                let mut last = first;
                while let Some(Ok(n)) = entries.get(i + 1)
                    && *n == last + 1
                {
                    last += 1;
                    i += 1;
                }
                if last == first {
                    out.push_str(&first.to_string());
                } else {
                    out.push_str(&format!("[{first},{last}]"));
                }
            }
            Err((key, value)) => {
                out.push('[');
                push_key(&mut out, key);
                out.push(',');
                out.push_str(value);
                out.push(']');
            }
        }
        i += 1;
    }
    out.push(']');
    (out.len() < next.len()).then_some(out)
}

/// The state a [`state_patch`] was made for.
pub(crate) fn apply_patch(base: &str, patch: &str) -> Result<String, StoreError> {
    let base = members(base).ok_or_else(|| corrupt("a state patch applies to an object"))?;
    let entries: Vec<&RawValue> = serde_json::from_str(patch).map_err(corrupt)?;
    let mut out = String::from("{");
    let push = |out: &mut String, key: &str, value: &str| {
        if out.len() > 1 {
            out.push(',');
        }
        push_key(out, key);
        out.push(':');
        out.push_str(value);
    };
    let member = |i: usize| base.get(i).ok_or_else(|| corrupt("a state patch names a missing member"));
    for entry in entries {
        let text = entry.get();
        if !text.starts_with('[') {
            let i: usize = serde_json::from_str(text).map_err(corrupt)?;
            let (k, v) = member(i)?;
            push(&mut out, k, v.get());
        } else if let Ok((first, last)) = serde_json::from_str::<(usize, usize)>(text) {
            for i in first..=last {
                let (k, v) = member(i)?;
                push(&mut out, k, v.get());
            }
        } else {
            let (key, value): (String, &RawValue) = serde_json::from_str(text).map_err(corrupt)?;
            push(&mut out, &key, value.get());
        }
    }
    out.push('}');
    Ok(out)
}

/// After how many patches in a row a checkpoint stores its state in full again, so
/// reading one replays a bounded chain.
pub(crate) const MAX_PATCH_CHAIN: u32 = 16;

/// The last state each run committed through this store value, by run: the base of
/// the next checkpoint's patch. Only a hint: without an entry (another process, a
/// restart) the next checkpoint stores its state in full.
#[derive(Debug, Default)]
pub(crate) struct LastStates(std::sync::Mutex<std::collections::HashMap<RunId, LastState>>);

#[derive(Debug, Clone)]
pub(crate) struct LastState {
    pub(crate) epoch: u64,
    pub(crate) step: u64,
    pub(crate) state: std::sync::Arc<str>,
    /// Patches since the last full state.
    pub(crate) chain: u32,
}

impl LastStates {
    /// Keeps at most this many runs (running ones; finished runs are dropped).
    const CAP: usize = 16_384;

    pub(crate) fn get(&self, run_id: RunId, epoch: u64, step: u64) -> Option<LastState> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&run_id).filter(|l| l.epoch == epoch && l.step == step).cloned()
    }

    pub(crate) fn set(&self, run_id: RunId, last: Option<LastState>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match last {
            Some(last) => {
                if map.len() >= Self::CAP {
                    map.clear();
                }
                map.insert(run_id, last);
            }
            None => {
                map.remove(&run_id);
            }
        }
    }
}

pub(crate) const FINISHED: &str = "('completed', 'failed', 'cancelled')";

/// The integer id of the run whose uuid is `$1`, for the child tables.
pub(crate) const RUN: &str = "(SELECT id FROM runs WHERE run_id = $1)";

/// The run row's columns; a run's state is its latest checkpoint's (see
/// `state_at`), not a column.
pub(crate) const RUN_COLUMNS: &str = "run_id, workflow, status, place, step, error, definition_hash, version, \
     parent, parent_signal, forked_from, forked_step, epoch, signal_seq, waiting_for, place_since, wake_at, lease_owner, \
     lease_until, created_at, updated_at, trace_parent";

pub(crate) const DOC_COLUMNS: &str = "seq, version, doc_type, doc_key, tags, metadata, content, step";

pub(crate) const SIGNAL_COLUMNS: &str = "id, name, payload, status, step, reason, received_at";

/// A query string built once from the shared column lists.
macro_rules! sql_static {
    ($name:ident = $($part:expr),+ $(,)?) => {
        static $name: LazyLock<String> = LazyLock::new(|| [$($part),+].concat());
    };
}

pub(crate) use sql_static;

/// Writes the `Store` impl for `$store`, whose `pool` field is a `sqlx::Pool<$db>`;
/// `$lock` ends the worker's pick of runs, `$workflow_in` says that `r.workflow`
/// is one of the names in the JSON array `$4` (an exact match, in the dialect's
/// words), and `$version_in` that `r.workflow:r.version` is one of the keys in the
/// JSON array `$6` (`WorkflowVersions::keys`).
macro_rules! sql_store {
    ($store:ident, $db:ty, $lock:literal, $workflow_in:literal, $version_in:literal) => {
        use std::sync::{Arc, LazyLock};

        use loopstack_core::serde_json;
        use loopstack_core::serde_json::value::RawValue;
        use loopstack_core::store::{OutSignal, check_claim, check_fence};
        use loopstack_core::{
            CheckpointRecord, Claim, Document, Fence, Inbox, Lease, NewRun, Park, RunId, RunPage, RunQuery, RunRecord, RunStatus, RunSummary,
            SignalReceipt, SignalRecord, SignalStatus, StepRecord, Store, StoreError, Timestamp,
        };
        use sqlx::Row as _;

        use crate::sql::{
            DOC_COLUMNS, FINISHED, RUN, RUN_COLUMNS, SIGNAL_COLUMNS, backend, corrupt, raw, status_set, to_i64, to_u64,
        };

        type DbRow = <$db as sqlx::Database>::Row;

        // Child tables refer to a run by its row's integer id: `RUN` is that id for the
        // run whose uuid is `$1`.
        // The worker's claim: one statement that picks runs that can move and takes
        // them; in PostgreSQL the picked rows are locked, skipping rows another
        // worker is taking (`$lock`). The names are compared exactly (`$workflow_in`),
        // never as a pattern: `_` and `%` in a name are plain characters.
        crate::sql::sql_static!(CLAIM_RUNNABLE = "UPDATE runs SET status = 'running', epoch = epoch + 1, \
            error = NULL, waiting_for = '[]', wake_at = NULL, lease_owner = $1, lease_until = $2, updated_at = $3 \
            WHERE id IN (SELECT r.id FROM runs r WHERE r.status IN ('queued', 'running', 'waiting') \
            AND ", $workflow_in, " AND ", $version_in, " AND (r.status = 'queued' \
            OR (r.status = 'running' AND r.lease_until IS NOT NULL AND r.lease_until <= $3) \
            OR (r.status = 'waiting' AND ((r.wake_at IS NOT NULL AND r.wake_at <= $3) \
            OR EXISTS (SELECT 1 FROM signals s WHERE s.run = r.id AND s.status = 'pending')))) \
            ORDER BY r.updated_at LIMIT $5", $lock, ") RETURNING ", RUN_COLUMNS);
        crate::sql::sql_static!(SELECT_RUN = "SELECT ", RUN_COLUMNS, " FROM runs WHERE run_id = $1");
        crate::sql::sql_static!(CLAIM = "UPDATE runs SET status = 'running', epoch = epoch + 1, error = NULL, waiting_for = '[]', \
            wake_at = NULL, lease_owner = $2, lease_until = $3, updated_at = $4 \
            WHERE run_id = $1 AND $5 LIKE ('%,' || status || ',%') \
            AND (status <> 'running' OR $6 IS NULL OR lease_until IS NULL OR lease_until <= $6) \
            RETURNING ", RUN_COLUMNS);
        // The place a step left is not stored: it is the place the step before reached.
        crate::sql::sql_static!(COMMIT_CHECKPOINT = "INSERT INTO checkpoints (run, step, transition, \
            to_place, state, state_patch, at) SELECT id, $4, $5, $6, \
            CASE WHEN $9 THEN NULL ELSE $7 END, $10, $8 \
            FROM runs WHERE run_id = $1 AND epoch = $2 AND step = $3 AND status NOT IN ", FINISHED);
        crate::sql::sql_static!(COMMIT_RUN = "UPDATE runs SET step = $4, place = $5, status = $6, updated_at = $7, \
            place_since = $7, lease_until = COALESCE($8, lease_until) \
            WHERE run_id = $1 AND epoch = $2 AND step = $3 AND status NOT IN ", FINISHED);
        crate::sql::sql_static!(SET_STATUS = "UPDATE runs SET status = $4, error = $5, updated_at = $6, lease_owner = NULL, \
            lease_until = NULL WHERE run_id = $1 AND epoch = $2 AND step = $3 AND status NOT IN ", FINISHED);
        crate::sql::sql_static!(PARK = "UPDATE runs SET status = 'waiting', waiting_for = $5, wake_at = $7, lease_owner = NULL, \
            lease_until = NULL, updated_at = $6 WHERE run_id = $1 AND epoch = $2 AND step = $3 AND signal_seq = $4 \
            AND status NOT IN ", FINISHED);
        crate::sql::sql_static!(NEXT_SIGNAL = "UPDATE runs SET signal_seq = signal_seq + 1 WHERE run_id = $1 AND status NOT IN ",
            FINISHED, " RETURNING id, signal_seq, status");
        crate::sql::sql_static!(PENDING_SIGNALS = "SELECT ", SIGNAL_COLUMNS,
            " FROM signals WHERE run = ", RUN, " AND status = 'pending' ORDER BY id");
        crate::sql::sql_static!(ALL_SIGNALS = "SELECT ", SIGNAL_COLUMNS, " FROM signals WHERE run = ", RUN, " ORDER BY id");
        crate::sql::sql_static!(LIST_RUNS = "SELECT ", RUN_COLUMNS, " FROM runs WHERE ($1 IS NULL OR workflow = $1) \
            AND ($2 = ',' OR $2 LIKE ('%,' || status || ',%')) AND ($3 IS NULL OR place = $3) \
            AND ($4 IS NULL OR parent = $4) AND ($5 IS NULL OR created_at >= $5) \
            AND ($6 IS NULL OR created_at < $6) AND ($7 IS NULL OR run_id < $7) \
            ORDER BY run_id DESC LIMIT $8");
        crate::sql::sql_static!(DOCUMENTS_AT = "SELECT ", DOC_COLUMNS, " FROM documents d WHERE d.run = ", RUN,
            " AND d.step <= $2 AND d.version = (SELECT MAX(v.version) FROM documents v \
            WHERE v.run = d.run AND v.seq = d.seq AND v.step <= $2) ORDER BY d.seq");
        crate::sql::sql_static!(DOCUMENT_VERSIONS = "SELECT ", DOC_COLUMNS,
            " FROM documents WHERE run = ", RUN, " ORDER BY step, seq, version");
        crate::sql::sql_static!(DOCUMENT_HISTORY = "SELECT ", DOC_COLUMNS,
            " FROM documents WHERE run = ", RUN, " AND doc_type = $2 AND doc_key = $3 ORDER BY version");
        crate::sql::sql_static!(INSERT_CHECKPOINT = "INSERT INTO checkpoints (run, step, transition, to_place, state, at) \
            VALUES (", RUN, ", $2, $3, $4, $5, $6)");
        crate::sql::sql_static!(INSERT_DOCUMENT = "INSERT INTO documents (run, seq, version, doc_type, doc_key, tags, \
            metadata, content, step) VALUES (", RUN, ", $2, $3, $4, $5, $6, $7, $8, $9)");
        crate::sql::sql_static!(DELIVER_SIGNAL = "UPDATE signals SET status = 'delivered', step = $3 WHERE run = ", RUN,
            " AND id = $2 AND status = 'pending'");
        crate::sql::sql_static!(REJECT_SIGNAL = "UPDATE signals SET status = 'rejected', reason = $4 \
            WHERE run = (SELECT id FROM runs WHERE run_id = $1 AND epoch = $2) AND id = $3 AND status = 'pending'");
        crate::sql::sql_static!(REJECT_PENDING = "UPDATE signals SET status = 'rejected', reason = $2 WHERE run = ", RUN,
            " AND status = 'pending'");
        crate::sql::sql_static!(HISTORY = "SELECT step, transition, LAG(to_place, 1, '') OVER (ORDER BY step) AS from_place, \
            to_place, at FROM checkpoints WHERE run = ", RUN, " ORDER BY step");
        // A checkpoint's state is the last full state at or before it, with the
        // patches after that applied (a row with neither left the state as it was).
        crate::sql::sql_static!(CHECKPOINT_CHAIN = "SELECT step, transition, COALESCE((SELECT p.to_place \
            FROM checkpoints p WHERE p.run = c.run AND p.step = c.step - 1), '') AS from_place, to_place, at, state, \
            state_patch FROM checkpoints c WHERE c.run = ", RUN, " AND c.step <= $2 AND c.step >= \
            (SELECT MAX(s.step) FROM checkpoints s WHERE s.run = c.run AND s.step <= $2 AND s.state IS NOT NULL) \
            ORDER BY c.step");
        crate::sql::sql_static!(FORK_CHECKPOINTS = "INSERT INTO checkpoints (run, step, transition, to_place, state, \
            state_patch, at) SELECT (SELECT id FROM runs WHERE run_id = $2), step, transition, to_place, state, \
            state_patch, at FROM checkpoints WHERE run = ", RUN, " AND step <= $3");
        crate::sql::sql_static!(FORK_DOCUMENTS = "INSERT INTO documents (run, seq, version, doc_type, doc_key, tags, \
            metadata, content, step) SELECT (SELECT id FROM runs WHERE run_id = $2), seq, version, doc_type, doc_key, \
            tags, metadata, content, step FROM documents WHERE run = ", RUN, " AND step <= $3");

        const INSERT_RUN: &str = "INSERT INTO runs (run_id, workflow, status, place, step, error, \
            definition_hash, version, parent, parent_signal, forked_from, forked_step, epoch, signal_seq, waiting_for, \
            place_since, wake_at, lease_owner, lease_until, created_at, updated_at, trace_parent) \
            VALUES ($1, $2, $3, 'start', 0, NULL, $4, $11, $5, $10, NULL, NULL, $6, 0, '[]', $9, NULL, $7, $8, $9, $9, $12) \
            ON CONFLICT (run_id) DO NOTHING";
        // The signal's run id comes from the update that counted it, in the same transaction.
        const INSERT_SIGNAL: &str = "INSERT INTO signals (run, id, name, payload, status, step, reason, \
            received_at) VALUES ($1, $2, $3, $4, 'pending', NULL, NULL, $5)";
        const HEARTBEAT: &str = "UPDATE runs SET lease_until = $3 WHERE run_id = $1 AND epoch = $2";
        const SIGNAL_SEQ: &str = "SELECT signal_seq FROM runs WHERE run_id = $1";
        // A fork is nobody's child: `parent` and `parent_signal` stay NULL.
        const FORK_RUN: &str = "INSERT INTO runs (run_id, workflow, status, place, step, error, \
            definition_hash, version, parent, forked_from, forked_step, epoch, signal_seq, waiting_for, place_since, \
            wake_at, lease_owner, lease_until, created_at, updated_at) \
            SELECT $2, workflow, 'running', $3, $4, NULL, definition_hash, version, NULL, run_id, $4, 1, 0, '[]', $5, \
            NULL, NULL, NULL, $5, $5 FROM runs WHERE run_id = $1";
        const RUN_EXISTS: &str = "SELECT 1 FROM runs WHERE run_id = $1";
        // A migration's commit moves the run row to its new version and table, in the
        // commit's transaction and behind the same fence.
        const MIGRATE_RUN: &str = "UPDATE runs SET version = $3, definition_hash = $4 WHERE run_id = $1 AND epoch = $2";

        const ENDED: &str = loopstack_core::store::SIGNAL_OUTLIVED_RUN;

        /// Puts a write's [`OutSignal`] in its target's inbox within `tx`, as
        /// `send_signal` does; a finished or missing target drops it.
        async fn notify(tx: &mut sqlx::Transaction<'static, $db>, signal: Option<&OutSignal>) -> Result<(), StoreError> {
            let Some(signal) = signal else { return Ok(()) };
            let row = sqlx::query(&NEXT_SIGNAL).bind(signal.run_id.0).fetch_optional(&mut **tx).await.map_err(backend)?;
            let Some(row) = row else { return Ok(()) };
            let id: i64 = row.try_get("signal_seq").map_err(corrupt)?;
            let run: i64 = row.try_get("id").map_err(corrupt)?;
            sqlx::query(INSERT_SIGNAL)
                .bind(run)
                .bind(id)
                .bind(&*signal.name)
                .bind(signal.payload.get())
                .bind(Timestamp::now().as_millis())
                .execute(&mut **tx)
                .await
                .map_err(backend)?;
            Ok(())
        }

        /// Creates a run and its step-0 checkpoint within `tx`; `false` (writing
        /// nothing) if the run exists.
        async fn insert_run(
            tx: &mut sqlx::Transaction<'static, $db>,
            run: &NewRun,
            epoch: i64,
            now: i64,
        ) -> Result<bool, StoreError> {
            let done = sqlx::query(INSERT_RUN)
                .bind(run.run_id.0)
                .bind(&*run.workflow)
                .bind(run.status.as_str())
                .bind(&*run.definition_hash)
                .bind(run.parent.map(|p| p.0))
                .bind(epoch)
                .bind(run.lease.as_ref().map(|l| l.owner.clone()))
                .bind(run.lease.as_ref().map(|l| l.until.as_millis()))
                .bind(now)
                .bind(run.parent_signal.as_deref())
                .bind(i64::from(run.version))
                .bind(run.trace_parent.as_deref())
                .execute(&mut **tx)
                .await
                .map_err(backend)?;
            if done.rows_affected() == 0 {
                return Ok(false);
            }
            sqlx::query(&INSERT_CHECKPOINT)
                .bind(run.run_id.0)
                .bind(0_i64)
                .bind("")
                .bind(loopstack_core::START)
                .bind(run.state.get())
                .bind(now)
                .execute(&mut **tx)
                .await
                .map_err(backend)?;
            Ok(true)
        }

        /// A run's row, without its state.
        fn summary_from_row(row: &DbRow) -> Result<RunSummary, StoreError> {
            let get_err = |e: sqlx::Error| corrupt(e);
            let status: String = row.try_get("status").map_err(get_err)?;
            let waiting: String = row.try_get("waiting_for").map_err(get_err)?;
            let forked_from: Option<uuid::Uuid> = row.try_get("forked_from").map_err(get_err)?;
            let forked_step: Option<i64> = row.try_get("forked_step").map_err(get_err)?;
            let parent: Option<uuid::Uuid> = row.try_get("parent").map_err(get_err)?;
            let lease_until: Option<i64> = row.try_get("lease_until").map_err(get_err)?;
            let wake_at: Option<i64> = row.try_get("wake_at").map_err(get_err)?;
            let mut record = RunSummary {
                run_id: RunId(row.try_get("run_id").map_err(get_err)?),
                workflow: std::borrow::Cow::Owned(row.try_get("workflow").map_err(get_err)?),
                status: status.parse()?,
                place: std::borrow::Cow::Owned(row.try_get("place").map_err(get_err)?),
                step: to_u64(row.try_get("step").map_err(get_err)?)?,
                error: row.try_get("error").map_err(get_err)?,
                definition_hash: std::borrow::Cow::Owned(row.try_get("definition_hash").map_err(get_err)?),
                version: u32::try_from(row.try_get::<i64, _>("version").map_err(get_err)?)
                    .map_err(|_| corrupt("a run's version is out of range"))?,
                parent: parent.map(RunId),
                parent_signal: row
                    .try_get::<Option<String>, _>("parent_signal")
                    .map_err(get_err)?
                    .map(std::borrow::Cow::Owned),
                forked_from: None,
                epoch: to_u64(row.try_get("epoch").map_err(get_err)?)?,
                signal_seq: to_u64(row.try_get("signal_seq").map_err(get_err)?)?,
                waiting_for: serde_json::from_str(&waiting).map_err(corrupt)?,
                place_since: Timestamp::from_millis(row.try_get("place_since").map_err(get_err)?),
                wake_at: wake_at.map(Timestamp::from_millis),
                lease_owner: row.try_get("lease_owner").map_err(get_err)?,
                lease_until: lease_until.map(Timestamp::from_millis),
                created_at: Timestamp::from_millis(row.try_get("created_at").map_err(get_err)?),
                updated_at: Timestamp::from_millis(row.try_get("updated_at").map_err(get_err)?),
                trace_parent: row.try_get("trace_parent").map_err(get_err)?,
            };
            if let (Some(id), Some(step)) = (forked_from, forked_step) {
                record.forked_from = Some((RunId(id), to_u64(step)?));
            }
            Ok(record)
        }

        fn step_from_row(row: &DbRow) -> Result<StepRecord, StoreError> {
            let get_err = |e: sqlx::Error| corrupt(e);
            let transition: String = row.try_get("transition").map_err(get_err)?;
            let from: String = row.try_get("from_place").map_err(get_err)?;
            let to: String = row.try_get("to_place").map_err(get_err)?;
            let mut step = StepRecord::new(to_u64(row.try_get("step").map_err(get_err)?)?, transition, from, to);
            step.at = Timestamp::from_millis(row.try_get("at").map_err(get_err)?);
            Ok(step)
        }

        fn document_from_row(row: &DbRow) -> Result<Arc<Document>, StoreError> {
            let get_err = |e: sqlx::Error| corrupt(e);
            let tags: String = row.try_get("tags").map_err(get_err)?;
            let metadata: String = row.try_get("metadata").map_err(get_err)?;
            let version: i64 = row.try_get("version").map_err(get_err)?;
            Ok(Arc::new(Document {
                seq: to_u64(row.try_get("seq").map_err(get_err)?)?,
                doc_type: std::borrow::Cow::Owned(row.try_get("doc_type").map_err(get_err)?),
                key: row.try_get("doc_key").map_err(get_err)?,
                version: u32::try_from(version).map_err(corrupt)?,
                tags: serde_json::from_str(&tags).map_err(corrupt)?,
                metadata: serde_json::from_str(&metadata).map_err(corrupt)?,
                content: raw(row.try_get("content").map_err(get_err)?)?,
                step: to_u64(row.try_get("step").map_err(get_err)?)?,
            }))
        }

        fn signal_from_row(row: &DbRow) -> Result<SignalRecord, StoreError> {
            let get_err = |e: sqlx::Error| corrupt(e);
            let status: String = row.try_get("status").map_err(get_err)?;
            let step: Option<i64> = row.try_get("step").map_err(get_err)?;
            let reason: Option<String> = row.try_get("reason").map_err(get_err)?;
            let status = match status.as_str() {
                "pending" => SignalStatus::Pending,
                "delivered" => SignalStatus::Delivered { step: to_u64(step.unwrap_or_default())? },
                "rejected" => SignalStatus::Rejected { reason: reason.unwrap_or_default() },
                other => return Err(corrupt(format!("unknown signal status `{other}`"))),
            };
            Ok(SignalRecord {
                id: to_u64(row.try_get("id").map_err(get_err)?)?,
                name: row.try_get("name").map_err(get_err)?,
                payload: raw(row.try_get("payload").map_err(get_err)?)?,
                status,
                received_at: Timestamp::from_millis(row.try_get("received_at").map_err(get_err)?),
            })
        }

        impl $store {
            async fn load(&self, run_id: RunId) -> Result<RunRecord, StoreError> {
                let row = sqlx::query(&SELECT_RUN).bind(run_id.0).fetch_optional(&self.pool).await.map_err(backend)?;
                let record = row.map(|r| summary_from_row(&r)).transpose()?.ok_or(StoreError::RunNotFound(run_id))?;
                self.with_state(record).await
            }

            /// A run's row with its state: that of its latest checkpoint.
            async fn with_state(&self, run: RunSummary) -> Result<RunRecord, StoreError> {
                match self.chain(run.run_id, run.step).await? {
                    Some((_, state)) => Ok(run.with_state(raw(state)?)),
                    None => Err(corrupt(format!("run {} has no checkpoint {}", run.run_id, run.step))),
                }
            }

            /// The step record and state of checkpoint `step`: its chain's full state
            /// with the patches after it applied.
            async fn chain(&self, run_id: RunId, step: u64) -> Result<Option<(StepRecord, String)>, StoreError> {
                let rows = sqlx::query(&CHECKPOINT_CHAIN)
                    .bind(run_id.0)
                    .bind(to_i64(step))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(backend)?;
                let mut state: Option<String> = None;
                for row in &rows {
                    let full: Option<String> = row.try_get("state").map_err(corrupt)?;
                    let patch: Option<String> = row.try_get("state_patch").map_err(corrupt)?;
                    state = match (full, patch, state) {
                        (Some(full), _, _) => Some(full),
                        (None, Some(patch), Some(base)) => Some(crate::sql::apply_patch(&base, &patch)?),
                        (None, None, base) => base,
                        (None, Some(_), None) => return Err(corrupt("a state patch without a base")),
                    };
                }
                match (rows.last(), state) {
                    (Some(row), Some(state)) if row.try_get::<i64, _>("step").map_err(corrupt)? == to_i64(step) => {
                        Ok(Some((step_from_row(row)?, state)))
                    }
                    _ => Ok(None),
                }
            }

            /// A run this store just claimed, with its state.
            async fn read_claimed(&self, row: &DbRow) -> Result<RunRecord, StoreError> {
                self.with_state(summary_from_row(row)?).await
            }

            /// Fails a run this store just claimed (`row`, as the claim returned it)
            /// but cannot read (`why`: its row or its state is not what a store
            /// writes): failed with the reason, its lease dropped and its pending
            /// signals rejected, and its parent told as a failed child tells it. So it
            /// neither stops the claim of the runs after it nor stays running under a
            /// lease nobody renews; `retry` takes it up once it reads again.
            async fn fail_unreadable(&self, row: &DbRow, why: &StoreError) {
                let run_id = match row.try_get::<uuid::Uuid, _>("run_id") {
                    Ok(id) => RunId(id),
                    Err(e) => return tracing::warn!(error = %e, %why, "a claimed run has no readable id"),
                };
                let fence = match (row.try_get::<i64, _>("epoch"), row.try_get::<i64, _>("step")) {
                    (Ok(epoch), Ok(step)) => Fence { epoch: epoch as u64, step: step as u64 },
                    _ => return tracing::warn!(run_id = %run_id, %why, "a claimed run has no readable fence"),
                };
                let error = format!("the run cannot be read: {why}");
                tracing::warn!(run_id = %run_id, %error, "failing a run that cannot be read");
                let parent = row.try_get::<Option<uuid::Uuid>, _>("parent").ok().flatten().map(RunId);
                let signal = row.try_get::<Option<String>, _>("parent_signal").ok().flatten();
                let workflow = row.try_get::<String, _>("workflow").unwrap_or_default();
                let notify = match (parent, signal) {
                    (Some(parent), Some(signal)) => {
                        let ended =
                            loopstack_core::ChildEnded::new(run_id, workflow, RunStatus::Failed, None, Some(error.clone()));
                        serde_json::value::to_raw_value(&ended).ok().map(|payload| OutSignal::new(parent, signal, payload))
                    }
                    _ => None,
                };
                if let Err(e) = self.set_status(run_id, fence, RunStatus::Failed, Some(error), notify).await {
                    tracing::warn!(run_id = %run_id, error = %e, "could not fail a run that cannot be read");
                }
            }

            /// Why a fenced write matched no row.
            async fn fence_error(&self, run_id: RunId, fence: Fence) -> StoreError {
                match self.load(run_id).await {
                    Ok(r) => match check_fence(run_id, r.status, r.epoch, r.step, fence) {
                        Err(e) => e,
                        Ok(()) => StoreError::SignalArrived { run_id },
                    },
                    Err(e) => e,
                }
            }

            /// Creates a run and its step-0 checkpoint in a transaction; `false` if the
            /// run exists.
            async fn create_in_transaction(&self, run: &NewRun, epoch: i64, now: i64) -> Result<bool, StoreError> {
                let mut tx = self.pool.begin().await.map_err(backend)?;
                if !insert_run(&mut tx, run, epoch, now).await? {
                    return Ok(false);
                }
                tx.commit().await.map_err(backend)?;
                Ok(true)
            }

            async fn exists(&self, run_id: RunId) -> Result<(), StoreError> {
                let row = sqlx::query(RUN_EXISTS).bind(run_id.0).fetch_optional(&self.pool).await.map_err(backend)?;
                row.map(|_| ()).ok_or(StoreError::RunNotFound(run_id))
            }

            async fn fetch_documents(
                &self,
                sql: &'static str,
                run_id: RunId,
                step: Option<u64>,
                key: Option<(&str, &str)>,
            ) -> Result<Vec<Arc<Document>>, StoreError> {
                let mut q = sqlx::query(sql).bind(run_id.0);
                if let Some(step) = step {
                    q = q.bind(to_i64(step));
                }
                if let Some((doc_type, key)) = key {
                    q = q.bind(doc_type.to_owned()).bind(key.to_owned());
                }
                let rows = q.fetch_all(&self.pool).await.map_err(backend)?;
                if rows.is_empty() {
                    self.exists(run_id).await?;
                }
                rows.iter().map(document_from_row).collect()
            }
        }

        #[async_trait::async_trait]
        impl Store for $store {
            async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
                let now = Timestamp::now().as_millis();
                let epoch: i64 = i64::from(run.status != RunStatus::Queued);
                let created = match self.one_statement_create(&run, epoch, now).await {
                    Some(created) => created?,
                    None => self.create_in_transaction(&run, epoch, now).await?,
                };
                if !created {
                    return Err(StoreError::RunExists(run.run_id));
                }
                let at = Timestamp::from_millis(now);

                let base = crate::sql::LastState { epoch: epoch as u64, step: 0, state: Arc::from(run.state.get()), chain: 0 };
                self.last.set(run.run_id, Some(base));
                Ok(RunRecord {
                    run_id: run.run_id,
                    workflow: run.workflow,
                    status: run.status,
                    place: std::borrow::Cow::Borrowed(loopstack_core::START),
                    step: 0,
                    state: run.state,
                    error: None,
                    definition_hash: run.definition_hash,
                    version: run.version,
                    parent: run.parent,
                    parent_signal: run.parent_signal,
                    forked_from: None,
                    epoch: epoch as u64,
                    signal_seq: 0,
                    waiting_for: Vec::new(),
                    place_since: at,
                    wake_at: None,
                    lease_owner: run.lease.as_ref().map(|l| l.owner.clone()),
                    lease_until: run.lease.map(|l| l.until),
                    created_at: at,
                    updated_at: at,
                    trace_parent: run.trace_parent,
                })
            }

            async fn claim(&self, run_id: RunId, claim: &Claim) -> Result<RunRecord, StoreError> {
                let row = sqlx::query(&CLAIM)
                    .bind(run_id.0)
                    .bind(claim.lease.as_ref().map(|l| l.owner.clone()))
                    .bind(claim.lease.as_ref().map(|l| l.until.as_millis()))
                    .bind(Timestamp::now().as_millis())
                    .bind(status_set(&claim.expect))
                    .bind(claim.lease_expired_at.map(Timestamp::as_millis))
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(backend)?;
                match row {
                    Some(row) => match self.read_claimed(&row).await {
                        Ok(run) => Ok(run),
                        // Claimed but unreadable: failed, not left running with nobody
                        // driving it.
                        Err(e @ StoreError::Corrupt(_)) => {
                            self.fail_unreadable(&row, &e).await;
                            Err(e)
                        }
                        Err(e) => Err(e),
                    },
                    None => {
                        let current = self.load(run_id).await?;
                        check_claim(&current, claim)?;
                        // It changed between the two statements: report it as taken.
                        Err(StoreError::InvalidStatus { run_id, status: current.status })
                    }
                }
            }

            async fn commit(&self, cp: loopstack_core::Checkpoint) -> Result<(), StoreError> {
                let step = cp.transition.step;
                // The state as a patch of the one this drive committed last, when that
                // is known here and the patch is smaller; else in full (or neither, in
                // SQL, when it did not change).
                let last = self.last.get(cp.run_id, cp.fence.epoch, cp.fence.step);
                let next = cp.state.get();
                let (unchanged, patch, chain) = match &last {
                    Some(l) if &*l.state == next => (true, None, l.chain),
                    Some(l) if l.chain < crate::sql::MAX_PATCH_CHAIN => match crate::sql::state_patch(&l.state, next) {
                        Some(patch) => (true, Some(patch), l.chain + 1),
                        None => (false, None, 0),
                    },
                    _ => (false, None, 0),
                };
                let committed = |this: &Self| {
                    let last = (!cp.status.is_finished()).then(|| crate::sql::LastState {
                        epoch: cp.fence.epoch,
                        step,
                        state: Arc::from(next),
                        chain,
                    });
                    this.last.set(cp.run_id, last);
                };
                // Where the dialect can, the whole commit is one statement (one round
                // trip, atomic on its own); a commit that delivers a signal, which must
                // be refused if the signal is gone, or sends one (`notify`, once per
                // child run), takes the transaction below.
                if cp.signal.is_none()
                    && cp.notify.is_none()
                    && cp.migration.is_none()
                    && let Some(done) = self.one_statement_commit(&cp, unchanged, patch.as_deref()).await
                {
                    if !done? {
                        return Err(self.fence_error(cp.run_id, cp.fence).await);
                    }
                    committed(self);
                    return Ok(());
                }
                let mut tx = self.pool.begin().await.map_err(backend)?;
                // The checkpoint first, selected from the fenced run row: a write, so it
                // takes SQLite's write lock before anything is read.
                let done = sqlx::query(&COMMIT_CHECKPOINT)
                    .bind(cp.run_id.0)
                    .bind(to_i64(cp.fence.epoch))
                    .bind(to_i64(cp.fence.step))
                    .bind(to_i64(step))
                    .bind(&*cp.transition.transition)
                    .bind(&*cp.transition.to)
                    .bind(next)
                    .bind(cp.transition.at.as_millis())
                    .bind(unchanged)
                    .bind(patch.as_deref())
                    .execute(&mut *tx)
                    .await;
                let fenced = match done {
                    Ok(done) => done.rows_affected() == 0,
                    // Two writers of one epoch and step: the second loses.
                    Err(sqlx::Error::Database(e)) if e.is_unique_violation() => true,
                    Err(e) => return Err(backend(e)),
                };
                if fenced {
                    drop(tx);
                    return Err(self.fence_error(cp.run_id, cp.fence).await);
                }
                // The same fence again: in PostgreSQL another transaction may have moved
                // the row since the select above; this update waits for it and re-checks.
                let done = sqlx::query(&COMMIT_RUN)
                    .bind(cp.run_id.0)
                    .bind(to_i64(cp.fence.epoch))
                    .bind(to_i64(cp.fence.step))
                    .bind(to_i64(step))
                    .bind(&*cp.transition.to)
                    .bind(cp.status.as_str())
                    .bind(cp.transition.at.as_millis())
                    .bind(cp.lease_until.map(Timestamp::as_millis))
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                if done.rows_affected() == 0 {
                    drop(tx);
                    return Err(self.fence_error(cp.run_id, cp.fence).await);
                }
                if let Some(migrated) = &cp.migration {
                    sqlx::query(MIGRATE_RUN)
                        .bind(cp.run_id.0)
                        .bind(to_i64(cp.fence.epoch))
                        .bind(i64::from(migrated.version))
                        .bind(&*migrated.definition_hash)
                        .execute(&mut *tx)
                        .await
                        .map_err(backend)?;
                }
                for doc in &cp.documents {
                    sqlx::query(&INSERT_DOCUMENT)
                        .bind(cp.run_id.0)
                        .bind(to_i64(doc.seq))
                        .bind(i64::from(doc.version))
                        .bind(&*doc.doc_type)
                        .bind(doc.key.as_deref())
                        .bind(serde_json::to_string(&doc.tags).map_err(corrupt)?)
                        .bind(serde_json::to_string(&doc.metadata).map_err(corrupt)?)
                        .bind(doc.content.get())
                        .bind(to_i64(doc.step))
                        .execute(&mut *tx)
                        .await
                        .map_err(backend)?;
                }
                if let Some(id) = cp.signal {
                    let done = sqlx::query(&DELIVER_SIGNAL)
                        .bind(cp.run_id.0)
                        .bind(to_i64(id))
                        .bind(to_i64(step))
                        .execute(&mut *tx)
                        .await
                        .map_err(backend)?;
                    if done.rows_affected() == 0 {
                        return Err(StoreError::SignalNotFound { run_id: cp.run_id, signal: id });
                    }
                }
                if cp.status.is_finished() {
                    sqlx::query(&REJECT_PENDING)
                        .bind(cp.run_id.0)
                        .bind(ENDED)
                        .execute(&mut *tx)
                        .await
                        .map_err(backend)?;
                }
                // Last, after the run row: a run that notifies itself as it finishes
                // drops the signal, as a finished target does.
                self::notify(&mut tx, cp.notify.as_ref()).await?;
                tx.commit().await.map_err(backend)?;
                committed(self);
                Ok(())
            }

            async fn set_status(
                &self,
                run_id: RunId,
                fence: Fence,
                status: RunStatus,
                error: Option<String>,
                notify: Option<OutSignal>,
            ) -> Result<(), StoreError> {
                let mut tx = self.pool.begin().await.map_err(backend)?;
                let done = sqlx::query(&SET_STATUS)
                    .bind(run_id.0)
                    .bind(to_i64(fence.epoch))
                    .bind(to_i64(fence.step))
                    .bind(status.as_str())
                    .bind(error)
                    .bind(Timestamp::now().as_millis())
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                if done.rows_affected() == 0 {
                    drop(tx);
                    return Err(self.fence_error(run_id, fence).await);
                }
                if status.is_finished() {
                    sqlx::query(&REJECT_PENDING).bind(run_id.0).bind(ENDED).execute(&mut *tx).await.map_err(backend)?;
                }
                self::notify(&mut tx, notify.as_ref()).await?;
                tx.commit().await.map_err(backend)
            }

            async fn park(&self, run_id: RunId, park: &Park<'_>) -> Result<(), StoreError> {
                let done = sqlx::query(&PARK)
                    .bind(run_id.0)
                    .bind(to_i64(park.fence.epoch))
                    .bind(to_i64(park.fence.step))
                    .bind(to_i64(park.inbox_seq))
                    .bind(serde_json::to_string(park.signals).map_err(corrupt)?)
                    .bind(Timestamp::now().as_millis())
                    .bind(park.wake_at.map(Timestamp::as_millis))
                    .execute(&self.pool)
                    .await
                    .map_err(backend)?;
                if done.rows_affected() == 0 {
                    // Not fenced and not finished: the signal count moved.
                    return Err(self.fence_error(run_id, park.fence).await);
                }
                Ok(())
            }

            async fn claim_runnable(
                &self,
                workflows: &[loopstack_core::WorkflowVersions<'_>],
                lease: &Lease,
                now: Timestamp,
                limit: u32,
            ) -> Result<Vec<RunRecord>, StoreError> {
                let names: Vec<&str> = workflows.iter().map(|w| w.workflow).collect();
                let names = serde_json::to_string(&names).map_err(corrupt)?;
                let keys = serde_json::to_string(&loopstack_core::WorkflowVersions::keys(workflows)).map_err(corrupt)?;
                let rows = sqlx::query(&CLAIM_RUNNABLE)
                    .bind(&lease.owner)
                    .bind(lease.until.as_millis())
                    .bind(now.as_millis())
                    .bind(names)
                    .bind(i64::from(limit))
                    .bind(keys)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(backend)?;
                let mut runs = Vec::with_capacity(rows.len());
                let mut failed = None;
                for row in &rows {
                    // A run that cannot be read fails alone; the others are driven.
                    match self.read_claimed(row).await {
                        Ok(run) => runs.push(run),
                        Err(e @ StoreError::Corrupt(_)) => self.fail_unreadable(row, &e).await,
                        // The database failed the read: the run comes back when the
                        // lease runs out, and the rest are driven meanwhile.
                        Err(e) => {
                            tracing::warn!(error = %e, "could not read a claimed run");
                            failed.get_or_insert(e);
                        }
                    }
                }
                match failed {
                    Some(e) if runs.is_empty() => Err(e),
                    _ => Ok(runs),
                }
            }

            async fn heartbeat(&self, run_id: RunId, epoch: u64, until: Timestamp) -> Result<(), StoreError> {
                let done = sqlx::query(HEARTBEAT)
                    .bind(run_id.0)
                    .bind(to_i64(epoch))
                    .bind(until.as_millis())
                    .execute(&self.pool)
                    .await
                    .map_err(backend)?;
                if done.rows_affected() == 0 {
                    let current = self.load(run_id).await?;
                    return Err(StoreError::Fenced { run_id, epoch, current: current.epoch });
                }
                Ok(())
            }

            async fn send_signal(
                &self,
                run_id: RunId,
                name: &str,
                payload: Box<RawValue>,
            ) -> Result<SignalReceipt, StoreError> {
                let mut tx = self.pool.begin().await.map_err(backend)?;
                let row =
                    sqlx::query(&NEXT_SIGNAL).bind(run_id.0).fetch_optional(&mut *tx).await.map_err(backend)?;
                let Some(row) = row else {
                    drop(tx);
                    let current = self.load(run_id).await?;
                    return Err(StoreError::Finished { run_id, status: current.status });
                };
                let id: i64 = row.try_get("signal_seq").map_err(corrupt)?;
                let status: String = row.try_get("status").map_err(corrupt)?;
                let run: i64 = row.try_get("id").map_err(corrupt)?;
                sqlx::query(INSERT_SIGNAL)
                    .bind(run)
                    .bind(id)
                    .bind(name)
                    .bind(payload.get())
                    .bind(Timestamp::now().as_millis())
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                tx.commit().await.map_err(backend)?;
                Ok(SignalReceipt { id: to_u64(id)?, status: status.parse()? })
            }

            async fn inbox(&self, run_id: RunId) -> Result<Inbox, StoreError> {
                // The count first: a signal arriving between the two reads makes the
                // count stale, so parking fails and the driver reads again.
                let row = sqlx::query(SIGNAL_SEQ).bind(run_id.0).fetch_optional(&self.pool).await.map_err(backend)?;
                let seq: i64 = row.ok_or(StoreError::RunNotFound(run_id))?.try_get("signal_seq").map_err(corrupt)?;
                let rows = sqlx::query(&PENDING_SIGNALS).bind(run_id.0).fetch_all(&self.pool).await.map_err(backend)?;
                let pending = rows.iter().map(signal_from_row).collect::<Result<_, _>>()?;
                Ok(Inbox { pending, seq: to_u64(seq)? })
            }

            async fn reject_signal(
                &self,
                run_id: RunId,
                epoch: u64,
                signal: u64,
                reason: &str,
            ) -> Result<(), StoreError> {
                let done = sqlx::query(&REJECT_SIGNAL)
                    .bind(run_id.0)
                    .bind(to_i64(epoch))
                    .bind(to_i64(signal))
                    .bind(reason)
                    .execute(&self.pool)
                    .await
                    .map_err(backend)?;
                if done.rows_affected() == 0 {
                    let current = self.load(run_id).await?;
                    if current.epoch != epoch {
                        return Err(StoreError::Fenced { run_id, epoch, current: current.epoch });
                    }
                    return Err(StoreError::SignalNotFound { run_id, signal });
                }
                Ok(())
            }

            async fn signals(&self, run_id: RunId) -> Result<Vec<SignalRecord>, StoreError> {
                let rows = sqlx::query(&ALL_SIGNALS).bind(run_id.0).fetch_all(&self.pool).await.map_err(backend)?;
                if rows.is_empty() {
                    self.exists(run_id).await?;
                }
                rows.iter().map(signal_from_row).collect()
            }

            async fn fork(&self, source: RunId, step: u64, new_run: RunId) -> Result<RunRecord, StoreError> {
                self.exists(source).await?;
                if self.exists(new_run).await.is_ok() {
                    return Err(StoreError::RunExists(new_run));
                }
                let checkpoint = self.checkpoint(source, step).await?;
                let mut tx = self.pool.begin().await.map_err(backend)?;
                sqlx::query(FORK_RUN)
                    .bind(source.0)
                    .bind(new_run.0)
                    .bind(&*checkpoint.step.to)
                    .bind(to_i64(step))
                    .bind(Timestamp::now().as_millis())
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                for sql in [&*FORK_CHECKPOINTS, &*FORK_DOCUMENTS] {
                    sqlx::query(sql)
                        .bind(source.0)
                        .bind(new_run.0)
                        .bind(to_i64(step))
                        .execute(&mut *tx)
                        .await
                        .map_err(backend)?;
                }
                tx.commit().await.map_err(backend)?;
                self.load(new_run).await
            }

            async fn load_run(&self, run_id: RunId) -> Result<RunRecord, StoreError> {
                self.load(run_id).await
            }

            async fn list_runs(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
                let size = query.page_size();
                let rows = sqlx::query(&LIST_RUNS)
                    .bind(query.workflow.as_deref())
                    .bind(status_set(&query.status))
                    .bind(query.place.as_deref())
                    .bind(query.parent.map(|p| p.0))
                    .bind(query.created_after.map(Timestamp::as_millis))
                    .bind(query.created_before.map(Timestamp::as_millis))
                    .bind(query.before.map(|b| b.0))
                    .bind(i64::from(size) + 1)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(backend)?;
                // The rows alone: a listing never reads a state.
                let mut runs =
                    rows.iter().take(size as usize).map(summary_from_row).collect::<Result<Vec<_>, _>>()?;
                let next = if rows.len() > size as usize {
                    runs.truncate(size as usize);
                    runs.last().map(|r| r.run_id)
                } else {
                    None
                };
                Ok(RunPage { runs, next })
            }

            async fn history(&self, run_id: RunId) -> Result<Vec<StepRecord>, StoreError> {
                let rows = sqlx::query(&HISTORY).bind(run_id.0).fetch_all(&self.pool).await.map_err(backend)?;
                if rows.is_empty() {
                    self.exists(run_id).await?;
                }
                // Step 0 (the initial state) only gives step 1 the place it left.
                rows.iter().skip(1).map(step_from_row).collect()
            }

            async fn checkpoint(&self, run_id: RunId, step: u64) -> Result<CheckpointRecord, StoreError> {
                match self.chain(run_id, step).await? {
                    Some((step, state)) => Ok(CheckpointRecord { step, state: raw(state)? }),
                    None => {
                        self.exists(run_id).await?;
                        Err(StoreError::CheckpointNotFound { run_id, step })
                    }
                }
            }

            async fn documents(&self, run_id: RunId) -> Result<Vec<Arc<Document>>, StoreError> {
                self.fetch_documents(&DOCUMENTS_AT, run_id, Some(i64::MAX as u64), None).await
            }

            async fn documents_at(&self, run_id: RunId, step: u64) -> Result<Vec<Arc<Document>>, StoreError> {
                self.fetch_documents(&DOCUMENTS_AT, run_id, Some(step), None).await
            }

            async fn document_versions(&self, run_id: RunId) -> Result<Vec<Arc<Document>>, StoreError> {
                self.fetch_documents(&DOCUMENT_VERSIONS, run_id, None, None).await
            }

            async fn document_history(
                &self,
                run_id: RunId,
                doc_type: &str,
                key: &str,
            ) -> Result<Vec<Arc<Document>>, StoreError> {
                self.fetch_documents(&DOCUMENT_HISTORY, run_id, None, Some((doc_type, key))).await
            }

            fn lease_duration(&self) -> Option<std::time::Duration> {
                self.lease
            }

            // Schedules: `crate::schedules`.
            async fn create_schedule(&self, schedule: &loopstack_core::ScheduleRecord) -> Result<(), StoreError> {
                self.sched_create(schedule).await
            }

            async fn load_schedule(&self, id: &str) -> Result<loopstack_core::ScheduleRecord, StoreError> {
                self.sched_load(id).await
            }

            async fn list_schedules(&self) -> Result<Vec<loopstack_core::ScheduleRecord>, StoreError> {
                self.sched_list().await
            }

            async fn set_schedule_paused(
                &self,
                id: &str,
                paused: bool,
                next_due: Option<Timestamp>,
            ) -> Result<loopstack_core::ScheduleRecord, StoreError> {
                self.sched_pause(id, paused, next_due).await
            }

            async fn delete_schedule(&self, id: &str) -> Result<(), StoreError> {
                self.sched_delete(id).await
            }

            async fn due_schedules(
                &self,
                workflows: &[&str],
                now: Timestamp,
                limit: u32,
            ) -> Result<Vec<loopstack_core::ScheduleRecord>, StoreError> {
                self.sched_due(workflows, now, limit).await
            }

            async fn fire_schedule(&self, fire: loopstack_core::schedule::ScheduleFire) -> Result<bool, StoreError> {
                self.sched_fire(fire).await
            }

            async fn scheduled_runs(
                &self,
                id: &str,
                limit: u32,
            ) -> Result<Vec<loopstack_core::schedule::ScheduledRun>, StoreError> {
                self.sched_runs(id, limit).await
            }

            // The event log: `crate::events`.
            fn has_event_log(&self) -> bool {
                true
            }

            async fn append_events(&self, origin: &str, events: &[Arc<loopstack_core::RunEvent>]) -> Result<(), StoreError> {
                self.log_append(origin, events).await
            }

            async fn read_events(
                &self,
                after: u64,
                run: Option<RunId>,
                limit: u32,
            ) -> Result<Vec<loopstack_core::store::LoggedEvent>, StoreError> {
                self.log_read(after, run, limit).await
            }

            async fn last_event_id(&self) -> Result<u64, StoreError> {
                self.log_last_id().await
            }

            async fn wait_events(&self, after: u64, max: std::time::Duration) -> Result<(), StoreError> {
                self.log_wait(after, max).await
            }

            async fn prune_events(
                &self,
                now: Timestamp,
                retention: &loopstack_core::store::EventRetention,
            ) -> Result<u64, StoreError> {
                self.log_prune(now, retention).await
            }

            async fn listen_events(&self, listener: &str, until: Timestamp) -> Result<(), StoreError> {
                self.log_listen(listener, until).await
            }

            async fn unlisten_events(&self, listener: &str) -> Result<(), StoreError> {
                self.log_unlisten(listener).await
            }

            async fn has_event_listeners(&self, now: Timestamp) -> Result<bool, StoreError> {
                self.log_has_listeners(now).await
            }
        }

        crate::events::sql_events!($store, $db);
        crate::schedules::sql_schedules!($store, $db, $workflow_in);
    };
}

pub(crate) use sql_store;

#[cfg(test)]
mod tests {
    use super::{apply_patch, state_patch};

    #[test]
    fn a_patch_gives_back_the_next_state_byte_for_byte() {
        let base =
            r#"{"prompt":"What is up?","turns":0,"usage":{"input_tokens":0},"big":123456789012345678901234567890}"#;
        let next = r#"{"turns":1,"usage":{"input_tokens":50},"big":123456789012345678901234567890,"new":[1.5e300,"\u00e9\""]}"#;
        let patch = state_patch(base, next).expect("smaller than the state");
        assert_eq!(patch, r#"[["turns",1],["usage",{"input_tokens":50}],3,["new",[1.5e300,"\u00e9\""]]]"#);
        assert_eq!(apply_patch(base, &patch).unwrap(), next);
    }

    #[test]
    fn no_patch_for_other_json_or_when_it_would_not_be_smaller() {
        assert_eq!(state_patch("[1,2]", "[1,3]"), None);
        assert_eq!(state_patch(r#"{"a":1}"#, "7"), None);
        assert_eq!(state_patch(r#"{"a":1}"#, r#"{"b":2}"#), None, "a patch as long as the state is not kept");
        assert!(apply_patch("[1]", "[]").is_err());
        assert!(apply_patch(r#"{"a":1}"#, "[1]").is_err(), "a member the base lacks");
        assert!(apply_patch(r#"{"a":1}"#, r#"["a"]"#).is_err());
    }

    #[test]
    fn unchanged_members_are_listed_as_ranges_of_the_base() {
        let base = r#"{"a":1,"b":2,"c":3,"d":4,"pad":"xxxxxxxxxxxxxxxxxxxxxxxx"}"#;
        let next = r#"{"b":2,"c":3,"d":4,"pad":"xxxxxxxxxxxxxxxxxxxxxxxx","e":5}"#;
        let patch = state_patch(base, next).unwrap();
        assert_eq!(patch, r#"[[1,4],["e",5]]"#);
        assert_eq!(apply_patch(base, &patch).unwrap(), next);
        let reordered = r#"{"pad":"xxxxxxxxxxxxxxxxxxxxxxxx","a":1,"b":2,"c":3,"d":4}"#;
        let patch = state_patch(base, reordered).unwrap();
        assert_eq!(patch, "[4,[0,3]]");
        assert_eq!(apply_patch(base, &patch).unwrap(), reordered);
    }
}
