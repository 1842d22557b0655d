-- Runs, their checkpoints, documents and signals. The run row is narrow and
-- rewritten per commit (its state is its latest checkpoint's); everything that grows
-- is append-only and refers to its run by the row's integer id.
CREATE TABLE runs (
    id              INTEGER PRIMARY KEY,
    run_id          BLOB NOT NULL UNIQUE,
    workflow        TEXT NOT NULL,
    status          TEXT NOT NULL,
    place           TEXT NOT NULL,
    step            INTEGER NOT NULL,
    error           TEXT,
    definition_hash TEXT NOT NULL,
    parent          BLOB,
    forked_from     BLOB,
    forked_step     INTEGER,
    epoch           INTEGER NOT NULL,
    signal_seq      INTEGER NOT NULL DEFAULT 0,
    waiting_for     TEXT NOT NULL DEFAULT '[]',
    place_since     INTEGER NOT NULL,
    wake_at         INTEGER,
    lease_owner     TEXT,
    lease_until     INTEGER,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

CREATE INDEX runs_by_status ON runs (status, run_id);
CREATE INDEX runs_by_workflow ON runs (workflow, run_id);
CREATE INDEX runs_by_parent ON runs (parent) WHERE parent IS NOT NULL;
-- What workers look for: runs that are queued, running (a lease may run out) or waiting.
CREATE INDEX runs_to_claim ON runs (updated_at) WHERE status IN ('queued', 'running', 'waiting');

CREATE TABLE checkpoints (
    run        INTEGER NOT NULL,
    step       INTEGER NOT NULL,
    transition TEXT NOT NULL,
    -- The place it left is the place the step before reached (step 0: `start`).
    to_place   TEXT NOT NULL,
    -- The state after the step: in full (`state`), as a patch of the step before's
    -- (`state_patch`, see sql.rs), or neither when the step left it as it was.
    state       TEXT,
    state_patch TEXT,
    at         INTEGER NOT NULL,
    PRIMARY KEY (run, step)
) WITHOUT ROWID;

CREATE TABLE documents (
    run      INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    version  INTEGER NOT NULL,
    doc_type TEXT NOT NULL,
    doc_key  TEXT,
    tags     TEXT NOT NULL,
    metadata TEXT NOT NULL,
    content  TEXT NOT NULL,
    step     INTEGER NOT NULL,
    PRIMARY KEY (run, seq, version)
) WITHOUT ROWID;

CREATE TABLE signals (
    run         INTEGER NOT NULL,
    id          INTEGER NOT NULL,
    name        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    status      TEXT NOT NULL,
    step        INTEGER,
    reason      TEXT,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (run, id)
) WITHOUT ROWID;
