//! The SQL of both stores, as named constants: numbered `$n` parameters work in
//! SQLite and PostgreSQL alike. The few statements with a dialect's words in them
//! are macros here ([`claim_runnable!`], [`due_schedules!`]) that each dialect
//! fills in (`Dialect::CLAIM_RUNNABLE`, `Dialect::DUE_SCHEDULES`); the statements
//! only one dialect has live in its file (the PostgreSQL one-statement commit).
//!
//! The column lists and shared fragments are macros that expand to literals, so
//! every statement is a `&'static str` built by `concat!` at compile time.

/// That the run has not ended (`completed`, `failed`, `cancelled` or `stopped`): a
/// fenced write never touches a run that has. Comparisons, not `NOT IN (..)`: SQLite builds
/// a temporary B-tree for a list of more than two values at every execution of the
/// statement, and a commit runs two such statements.
macro_rules! unfinished {
    () => {
        "status <> 'completed' AND status <> 'failed' AND status <> 'cancelled' AND status <> 'stopped'"
    };
}

/// The integer id of the run whose uuid is `$1`: child tables refer to a run by its
/// row's id.
macro_rules! run {
    () => {
        "(SELECT id FROM runs WHERE run_id = $1)"
    };
}

/// The run row's columns; a run's state is its latest checkpoint's (see
/// `CHECKPOINT_CHAIN`), not a column.
macro_rules! run_columns {
    () => {
        "run_id, workflow, status, place, step, error, definition_hash, version, \
     parent, parent_signal, forked_from, forked_step, epoch, signal_seq, waiting_for, place_since, wake_at, lease_owner, \
     lease_until, created_at, updated_at, trace_parent, held_since, taken_from, labels"
    };
}

macro_rules! doc_columns {
    () => {
        "seq, version, doc_type, doc_key, tags, metadata, content, step"
    };
}

macro_rules! signal_columns {
    () => {
        "id, name, payload, status, step, reason, received_at"
    };
}

/// The columns of a schedule row.
macro_rules! schedule_columns {
    () => {
        "id, workflow, input, recurrence, missed, grace_ms, paused, next_due, \
     last_due, last_run, last_error, created_at, updated_at, overlap, pending_due"
    };
}

pub(crate) use run_columns;

/// The worker's claim: one statement that picks runs that can move and takes them,
/// visiting only such runs (queued and running ones by `runs_by_status`, due timers
/// by `runs_waking`, pending signals by `signals_pending`), however many wait.
/// `$ids` opens and closes the list of their ids the pick finds its runs by: in
/// PostgreSQL an array built once (`= ANY(ARRAY(..))`), so that the planner fetches
/// the runs by id. With `IN (..)` it could start from `runs_by_status` instead, and
/// on a table autovacuum has not analyzed yet (one a burst of runs just filled) it
/// did: a claim over 1,000 queued runs compared every one with every id (500,000
/// comparisons, 48 ms), and one over 100,000 waiting runs walked them all (28 ms; a
/// condition `r.status IN (..)`, implied by the ones below, gave it the index).
/// For the same reason the pick tests again, on the row it takes, that the run can
/// move with a `CASE` on its status, which no index serves: the test still holds
/// when another worker changed the row after the list was made (PostgreSQL tests the
/// latest version of a row it locks), and the planner has only the ids to start from.
/// `$lock` ends the pick (in PostgreSQL the picked rows are locked, skipping rows
/// another worker is taking); `$workflow_in` says that `r.workflow` is one of the
/// names in the JSON array `$4`, compared exactly (never as a pattern: `_` and `%`
/// in a name are plain characters), and `$version_in` that `r.workflow:r.version` is
/// one of the keys in the JSON array `$6` (`WorkflowVersions::keys`). `$picked`,
/// `$leased` and `$waking` are the dialect's table hints for the picked runs (found
/// by their row ids), the running runs whose lease ran out and the waiting runs with a
/// due timer.
macro_rules! claim_runnable {
    (
        $lock:literal,
        $workflow_in:literal,
        $version_in:literal,
        $picked:literal,
        $leased:literal,
        $waking:literal,
        ($ids_open:literal, $ids_close:literal) $(,)?
    ) => {
        concat!(
            "UPDATE runs SET status = 'running', epoch = epoch + 1, \
            error = NULL, waiting_for = '[]', wake_at = NULL, lease_owner = $1, lease_until = $2, updated_at = $3, held_since = $3, \
            taken_from = CASE WHEN status = 'running' AND lease_until > 0 THEN lease_owner END \
            WHERE id IN (SELECT r.id FROM runs r",
            $picked,
            " WHERE r.id ",
            $ids_open,
            "SELECT id FROM runs WHERE status = 'queued' UNION ALL SELECT id FROM runs",
            $leased,
            " WHERE status = 'running' AND lease_until IS NOT NULL AND lease_until <= $3 UNION ALL SELECT id FROM runs",
            $waking,
            " WHERE status = 'waiting' AND wake_at IS NOT NULL AND wake_at <= $3 \
            UNION ALL SELECT run FROM signals WHERE status = 'pending'",
            $ids_close,
            " AND ",
            $workflow_in,
            " AND ",
            $version_in,
            " AND CASE r.status WHEN 'queued' THEN TRUE \
            WHEN 'running' THEN r.lease_until IS NOT NULL AND r.lease_until <= $3 \
            WHEN 'waiting' THEN (r.wake_at IS NOT NULL AND r.wake_at <= $3) \
            OR EXISTS (SELECT 1 FROM signals s WHERE s.run = r.id AND s.status = 'pending') \
            ELSE FALSE END \
            ORDER BY r.updated_at LIMIT $5",
            $lock,
            ") RETURNING ",
            $crate::sql::queries::run_columns!()
        )
    };
}

/// The schedules due at `$1`, or with a pending due time and a last run that has
/// ended, at most `$2`, of the workflows `$workflow_in` names (the dialect's
/// "`r.workflow` is one of the names in the JSON array `$4`"); `$3` is unused but
/// for its place.
macro_rules! due_schedules {
    ($workflow_in:literal) => {
        concat!(
            "SELECT ",
            $crate::sql::queries::schedule_columns!(),
            " FROM schedules r WHERE NOT r.paused AND ((r.next_due <= $1 AND r.next_due <= $3) \
            OR (r.pending_due IS NOT NULL AND ",
            $crate::sql::queries::last_run_ended!("r"),
            ")) AND ",
            $workflow_in,
            " ORDER BY r.next_due LIMIT $2"
        )
    };
}

/// That the last run of the schedule row `$schedules` has ended, or the store no
/// longer has it.
macro_rules! last_run_ended {
    ($schedules:literal) => {
        concat!(
            "NOT EXISTS (SELECT 1 FROM runs u WHERE u.run_id = ",
            $schedules,
            ".last_run AND ",
            $crate::sql::queries::unfinished!(),
            ")"
        )
    };
}

pub(crate) use {claim_runnable, due_schedules, last_run_ended, schedule_columns, unfinished};

// Runs.

pub(crate) const SELECT_RUN: &str = concat!("SELECT ", run_columns!(), " FROM runs WHERE run_id = $1");

/// One run taken by id, if its status is one of the set `$5` (see `status_set`) and,
/// with `$6`, only once its lease ran out by then.
pub(crate) const CLAIM: &str = concat!(
    "UPDATE runs SET status = 'running', epoch = epoch + 1, error = NULL, waiting_for = '[]', \
            wake_at = NULL, lease_owner = $2, lease_until = $3, updated_at = $4, held_since = $4, \
            taken_from = CASE WHEN status = 'running' AND lease_until > 0 THEN lease_owner END \
            WHERE run_id = $1 AND $5 LIKE ('%,' || status || ',%') \
            AND (status <> 'running' OR $6 IS NULL OR lease_until IS NULL OR lease_until <= $6) \
            RETURNING ",
    run_columns!()
);

pub(crate) const INSERT_RUN: &str = "INSERT INTO runs (run_id, workflow, status, place, step, error, \
            definition_hash, version, parent, parent_signal, forked_from, forked_step, epoch, signal_seq, waiting_for, \
            place_since, wake_at, lease_owner, lease_until, created_at, updated_at, trace_parent, labels) \
            VALUES ($1, $2, $3, 'start', 0, NULL, $4, $11, $5, $10, NULL, NULL, $6, 0, '[]', $9, NULL, $7, $8, $9, $9, $12, $13) \
            ON CONFLICT (run_id) DO NOTHING";

pub(crate) const RUN_EXISTS: &str = "SELECT 1 FROM runs WHERE run_id = $1";

/// The unfinished runs by workflow and status, and how many of each can move at
/// `$1`, as the claim tests it (`claim_runnable!`): what the metrics read at each
/// scrape. PostgreSQL finds the runs by `runs_by_status`; SQLite reads its table
/// (no index holds every unfinished run), as its listings do.
pub(crate) const COUNT_RUNS: &str = "SELECT r.workflow, r.status, COUNT(*) AS runs, \
    SUM(CASE r.status WHEN 'queued' THEN 1 \
    WHEN 'running' THEN CASE WHEN r.lease_until IS NOT NULL AND r.lease_until <= $1 THEN 1 ELSE 0 END \
    ELSE CASE WHEN (r.wake_at IS NOT NULL AND r.wake_at <= $1) \
    OR EXISTS (SELECT 1 FROM signals s WHERE s.run = r.id AND s.status = 'pending') THEN 1 ELSE 0 END END) AS runnable \
    FROM runs r WHERE r.status IN ('queued', 'running', 'waiting') \
    GROUP BY r.workflow, r.status ORDER BY r.workflow, r.status";

/// SQLite's listing: one statement for every combination of filters, as SQLite has
/// no index a status or workflow filter could use (its listings walk the runs by id
/// either way). PostgreSQL's names only the filters set (`SqlStore::list_runs`).
#[cfg(feature = "sqlite")]
pub(crate) const LIST_RUNS: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM runs WHERE ($1 IS NULL OR workflow = $1) \
            AND ($2 = ',' OR $2 LIKE ('%,' || status || ',%')) AND ($3 IS NULL OR place = $3) \
            AND ($4 IS NULL OR parent = $4) AND ($5 IS NULL OR created_at >= $5) \
            AND ($6 IS NULL OR created_at < $6) AND ($7 IS NULL OR run_id < $7) \
            AND ($9 IS NULL OR EXISTS (SELECT 1 FROM json_each(labels) WHERE key = $9 AND value = $10)) \
            ORDER BY run_id DESC LIMIT $8"
);

pub(crate) const HEARTBEAT: &str = "UPDATE runs SET lease_until = $3 WHERE run_id = $1 AND epoch = $2";

/// A lease given back: the run is runnable at once (a lease that ended at the epoch
/// of time has run out by every worker's clock), as long as it is still this
/// drive's and still running.
pub(crate) const RELEASE_LEASE: &str =
    "UPDATE runs SET lease_until = 0 WHERE run_id = $1 AND epoch = $2 AND status = 'running'";

// A drive's fenced writes: each matches the run row only at the epoch and step the
// writer read, and never a finished run.

/// The place a step left is not stored: it is the place the step before reached.
pub(crate) const COMMIT_CHECKPOINT: &str = concat!(
    "INSERT INTO checkpoints (run, step, transition, \
            to_place, state, state_patch, at) SELECT id, $4, $5, $6, \
            CASE WHEN $9 THEN NULL ELSE $7 END, $10, $8 \
            FROM runs WHERE run_id = $1 AND epoch = $2 AND step = $3 AND ",
    unfinished!()
);

pub(crate) const COMMIT_RUN: &str = concat!(
    "UPDATE runs SET step = $4, place = $5, status = $6, updated_at = $7, \
            place_since = $7, lease_until = COALESCE($8, lease_until) \
            WHERE run_id = $1 AND epoch = $2 AND step = $3 AND ",
    unfinished!()
);

/// SQLite's commit of a step that leaves a running run running with its lease: the
/// run row's step and place, and nothing of what its indexes hold. SQLite rewrites
/// an index's entry whenever an `UPDATE` sets a column the index holds or its `WHERE`
/// reads, even to the value it had: [`COMMIT_RUN`], which sets `status` and
/// `lease_until`, wrote `runs_leased`'s page at every step, for nothing. No row when
/// the run is not `running` (then [`COMMIT_RUN`] decides).
#[cfg(feature = "sqlite")]
pub(crate) const COMMIT_STEP: &str = "UPDATE runs SET step = $4, place = $5, updated_at = $6, place_since = $6 \
            WHERE run_id = $1 AND epoch = $2 AND step = $3 AND status = 'running'";

/// A migration's commit moves the run row to its new version and table, in the
/// commit's transaction and behind the same fence.
pub(crate) const MIGRATE_RUN: &str =
    "UPDATE runs SET version = $3, definition_hash = $4 WHERE run_id = $1 AND epoch = $2";

pub(crate) const SET_STATUS: &str = concat!(
    "UPDATE runs SET status = $4, error = $5, updated_at = $6, lease_owner = NULL, \
            lease_until = NULL WHERE run_id = $1 AND epoch = $2 AND step = $3 AND ",
    unfinished!()
);

pub(crate) const PARK: &str = concat!(
    "UPDATE runs SET status = 'waiting', waiting_for = $5, wake_at = $7, lease_owner = NULL, \
            lease_until = NULL, updated_at = $6 WHERE run_id = $1 AND epoch = $2 AND step = $3 AND signal_seq = $4 \
            AND ",
    unfinished!()
);

// Checkpoints and documents.

pub(crate) const INSERT_CHECKPOINT: &str = concat!(
    "INSERT INTO checkpoints (run, step, transition, to_place, state, at) \
            VALUES (",
    run!(),
    ", $2, $3, $4, $5, $6)"
);

pub(crate) const INSERT_DOCUMENT: &str = concat!(
    "INSERT INTO documents (run, seq, version, doc_type, doc_key, tags, \
            metadata, content, step) VALUES (",
    run!(),
    ", $2, $3, $4, $5, $6, $7, $8, $9)"
);

pub(crate) const HISTORY: &str = concat!(
    "SELECT step, transition, LAG(to_place, 1, '') OVER (ORDER BY step) AS from_place, \
            to_place, at FROM checkpoints WHERE run = ",
    run!(),
    " ORDER BY step"
);

/// A checkpoint's state is the last full state at or before it, with the patches
/// after that applied (a row with neither left the state as it was).
pub(crate) const CHECKPOINT_CHAIN: &str = concat!(
    "SELECT step, transition, COALESCE((SELECT p.to_place \
            FROM checkpoints p WHERE p.run = c.run AND p.step = c.step - 1), '') AS from_place, to_place, at, state, \
            state_patch FROM checkpoints c WHERE c.run = ",
    run!(),
    " AND c.step <= $2 AND c.step >= \
            (SELECT MAX(s.step) FROM checkpoints s WHERE s.run = c.run AND s.step <= $2 AND s.state IS NOT NULL) \
            ORDER BY c.step"
);

pub(crate) const DOCUMENTS_AT: &str = concat!(
    "SELECT ",
    doc_columns!(),
    " FROM documents d WHERE d.run = ",
    run!(),
    " AND d.step <= $2 AND d.version = (SELECT MAX(v.version) FROM documents v \
            WHERE v.run = d.run AND v.seq = d.seq AND v.step <= $2) ORDER BY d.seq"
);

pub(crate) const DOCUMENT_VERSIONS: &str =
    concat!("SELECT ", doc_columns!(), " FROM documents WHERE run = ", run!(), " ORDER BY step, seq, version");

pub(crate) const DOCUMENT_HISTORY: &str = concat!(
    "SELECT ",
    doc_columns!(),
    " FROM documents WHERE run = ",
    run!(),
    " AND doc_type = $2 AND doc_key = $3 ORDER BY version"
);

// Signals.

pub(crate) const NEXT_SIGNAL: &str = concat!(
    "UPDATE runs SET signal_seq = signal_seq + 1 WHERE run_id = $1 AND ",
    unfinished!(),
    " RETURNING id, signal_seq, status"
);

/// The signal's run id comes from the update that counted it, in the same
/// transaction.
pub(crate) const INSERT_SIGNAL: &str = "INSERT INTO signals (run, id, name, payload, status, step, reason, \
            received_at) VALUES ($1, $2, $3, $4, 'pending', NULL, NULL, $5)";

pub(crate) const SIGNAL_SEQ: &str = "SELECT signal_seq FROM runs WHERE run_id = $1";

pub(crate) const PENDING_SIGNALS: &str =
    concat!("SELECT ", signal_columns!(), " FROM signals WHERE run = ", run!(), " AND status = 'pending' ORDER BY id");

/// A run's takeovers, as the trigger of migration 11 records them.
pub(crate) const TAKEOVERS: &str = concat!(
    "SELECT at, from_owner, lease_until, by_owner, epoch FROM takeovers WHERE run = ",
    run!(),
    " ORDER BY epoch"
);

pub(crate) const ALL_SIGNALS: &str =
    concat!("SELECT ", signal_columns!(), " FROM signals WHERE run = ", run!(), " ORDER BY id");

pub(crate) const DELIVER_SIGNAL: &str = concat!(
    "UPDATE signals SET status = 'delivered', step = $3 WHERE run = ",
    run!(),
    " AND id = $2 AND status = 'pending'"
);

pub(crate) const REJECT_SIGNAL: &str = "UPDATE signals SET status = 'rejected', reason = $4 \
            WHERE run = (SELECT id FROM runs WHERE run_id = $1 AND epoch = $2) AND id = $3 AND status = 'pending'";

pub(crate) const REJECT_PENDING: &str =
    concat!("UPDATE signals SET status = 'rejected', reason = $2 WHERE run = ", run!(), " AND status = 'pending'");

/// Whether the run has a pending signal: SQLite's update above builds a temporary
/// B-tree for the rows it changes, so its store asks first (most runs end with none).
#[cfg(feature = "sqlite")]
pub(crate) const HAS_PENDING: &str =
    concat!("SELECT 1 FROM signals WHERE run = ", run!(), " AND status = 'pending' LIMIT 1");

// Forks.

/// A fork is nobody's child: `parent` and `parent_signal` stay NULL.
pub(crate) const FORK_RUN: &str = "INSERT INTO runs (run_id, workflow, status, place, step, error, \
            definition_hash, version, parent, forked_from, forked_step, epoch, signal_seq, waiting_for, place_since, \
            wake_at, lease_owner, lease_until, created_at, updated_at, labels) \
            SELECT $2, workflow, 'running', $3, $4, NULL, definition_hash, version, NULL, run_id, $4, 1, 0, '[]', $5, \
            NULL, NULL, NULL, $5, $5, labels FROM runs WHERE run_id = $1";

pub(crate) const FORK_CHECKPOINTS: &str = concat!(
    "INSERT INTO checkpoints (run, step, transition, to_place, state, \
            state_patch, at) SELECT (SELECT id FROM runs WHERE run_id = $2), step, transition, to_place, state, \
            state_patch, at FROM checkpoints WHERE run = ",
    run!(),
    " AND step <= $3"
);

pub(crate) const FORK_DOCUMENTS: &str = concat!(
    "INSERT INTO documents (run, seq, version, doc_type, doc_key, tags, \
            metadata, content, step) SELECT (SELECT id FROM runs WHERE run_id = $2), seq, version, doc_type, doc_key, \
            tags, metadata, content, step FROM documents WHERE run = ",
    run!(),
    " AND step <= $3"
);

// Schedules (see `crate::schedules`).

pub(crate) const SELECT_SCHEDULE: &str = concat!("SELECT ", schedule_columns!(), " FROM schedules WHERE id = $1");

pub(crate) const LIST_SCHEDULES: &str = concat!("SELECT ", schedule_columns!(), " FROM schedules ORDER BY id");

pub(crate) const PAUSE_SCHEDULE: &str = concat!(
    "UPDATE schedules SET paused = $2, next_due = COALESCE($3, next_due), \
            updated_at = $4 WHERE id = $1 RETURNING ",
    schedule_columns!()
);

pub(crate) const INSERT_SCHEDULE: &str = "INSERT INTO schedules (id, workflow, input, recurrence, missed, grace_ms, \
            paused, next_due, last_due, last_run, last_error, created_at, updated_at, overlap, pending_due) \
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, NULL, NULL, $9, $9, $10, NULL) ON CONFLICT (id) DO NOTHING";

/// The compare-and-set: only the writer that read `next_due = $2` and
/// `pending_due = $8` moves them, and with `$10` only while the last run it read
/// has ended (that run is the last one as long as `next_due` and `pending_due` are
/// as read: every fire that starts a run moves one of them).
pub(crate) const FIRE_SCHEDULE: &str = concat!(
    "UPDATE schedules SET next_due = COALESCE($3, next_due), \
            paused = ($3 IS NULL), last_due = COALESCE($4, last_due), last_run = COALESCE($5, last_run), \
            last_error = $6, updated_at = $7, pending_due = $9 WHERE id = $1 AND next_due = $2 AND NOT paused \
            AND (pending_due = $8 OR (pending_due IS NULL AND $8 IS NULL)) AND (NOT $10 OR ",
    last_run_ended!("schedules"),
    ")"
);

pub(crate) const INSERT_SCHEDULED_RUN: &str = "INSERT INTO schedule_runs (schedule, due, run_id) VALUES ($1, $2, $3) \
            ON CONFLICT (schedule, due) DO NOTHING";

pub(crate) const SCHEDULED_RUNS: &str = "SELECT schedule, due, run_id FROM schedule_runs WHERE schedule = $1 \
            ORDER BY due DESC LIMIT $2";

pub(crate) const DELETE_SCHEDULE: &str = "DELETE FROM schedules WHERE id = $1";

pub(crate) const DELETE_SCHEDULE_RUNS: &str = "DELETE FROM schedule_runs WHERE schedule = $1";

// The event log (see `crate::events`).

pub(crate) const READ_RUN_EVENTS: &str =
    "SELECT id, origin, event FROM events WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3";

pub(crate) const READ_EVENTS: &str = "SELECT id, origin, event FROM events WHERE id > $1 ORDER BY id LIMIT $2";

pub(crate) const LAST_EVENT_ID: &str = "SELECT MAX(id) FROM events";

pub(crate) const PRUNE_EVENTS_BY_AGE: &str = "DELETE FROM events WHERE at < $1";

pub(crate) const PRUNE_EVENTS_BY_COUNT: &str = "DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - $1";

pub(crate) const DROP_EXPIRED_LISTENERS: &str = "DELETE FROM event_listeners WHERE until < $1";

pub(crate) const LISTEN: &str = "INSERT INTO event_listeners (listener, until) VALUES ($1, $2) \
                     ON CONFLICT (listener) DO UPDATE SET until = excluded.until";

pub(crate) const UNLISTEN: &str = "DELETE FROM event_listeners WHERE listener = $1";

pub(crate) const HAS_LISTENERS: &str = "SELECT CAST(1 AS BIGINT) FROM event_listeners WHERE until > $1 LIMIT 1";
