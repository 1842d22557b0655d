-- Runs, their checkpoints, documents and signals. The run row is narrow and
-- rewritten per commit; everything that grows is append-only.
CREATE TABLE runs (
    run_id          BLOB PRIMARY KEY,
    workflow        TEXT NOT NULL,
    status          TEXT NOT NULL,
    place           TEXT NOT NULL,
    step            INTEGER NOT NULL,
    state           TEXT NOT NULL,
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
) WITHOUT ROWID;

CREATE INDEX runs_by_status ON runs (status, run_id);
CREATE INDEX runs_by_workflow ON runs (workflow, run_id);
CREATE INDEX runs_by_parent ON runs (parent) WHERE parent IS NOT NULL;
-- What workers look for: runs that are queued, running (a lease may run out) or waiting.
CREATE INDEX runs_to_claim ON runs (updated_at) WHERE status IN ('queued', 'running', 'waiting');

CREATE TABLE checkpoints (
    run_id     BLOB NOT NULL,
    step       INTEGER NOT NULL,
    transition TEXT NOT NULL,
    -- The place it left is the place the step before reached (step 0: `start`).
    to_place   TEXT NOT NULL,
    -- The state after the step: in full (`state`), as a patch of the step before's
    -- (`state_patch`, see sql.rs), or neither when the step left it as it was.
    state       TEXT,
    state_patch TEXT,
    at         INTEGER NOT NULL,
    PRIMARY KEY (run_id, step)
) WITHOUT ROWID;

CREATE TABLE documents (
    run_id   BLOB NOT NULL,
    seq      INTEGER NOT NULL,
    version  INTEGER NOT NULL,
    doc_type TEXT NOT NULL,
    doc_key  TEXT,
    tags     TEXT NOT NULL,
    metadata TEXT NOT NULL,
    content  TEXT NOT NULL,
    step     INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq, version)
) WITHOUT ROWID;

CREATE TABLE signals (
    run_id      BLOB NOT NULL,
    id          INTEGER NOT NULL,
    name        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    status      TEXT NOT NULL,
    step        INTEGER,
    reason      TEXT,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, id)
) WITHOUT ROWID;
