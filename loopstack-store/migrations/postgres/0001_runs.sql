-- Runs, their checkpoints, documents and signals. The run row is narrow and
-- rewritten per commit; everything that grows is append-only.
-- JSON is kept as TEXT, not jsonb: jsonb reorders keys and rounds numbers, and a
-- checkpoint must read back exactly as it was written.
CREATE TABLE runs (
    run_id          UUID PRIMARY KEY,
    workflow        TEXT NOT NULL,
    status          TEXT NOT NULL,
    place           TEXT NOT NULL,
    step            BIGINT NOT NULL,
    state           TEXT NOT NULL,
    error           TEXT,
    definition_hash TEXT NOT NULL,
    parent          UUID,
    forked_from     UUID,
    forked_step     BIGINT,
    epoch           BIGINT NOT NULL,
    signal_seq      BIGINT NOT NULL DEFAULT 0,
    waiting_for     TEXT NOT NULL DEFAULT '[]',
    place_since     BIGINT NOT NULL,
    wake_at         BIGINT,
    lease_owner     TEXT,
    lease_until     BIGINT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);

CREATE INDEX runs_by_status ON runs (status, run_id);
CREATE INDEX runs_by_workflow ON runs (workflow, run_id);
CREATE INDEX runs_by_parent ON runs (parent) WHERE parent IS NOT NULL;
-- What workers look for: runs that are queued, running (a lease may run out) or waiting.
CREATE INDEX runs_to_claim ON runs (updated_at) WHERE status IN ('queued', 'running', 'waiting');

CREATE TABLE checkpoints (
    run_id     UUID NOT NULL,
    step       BIGINT NOT NULL,
    transition TEXT NOT NULL,
    -- The place it left is the place the step before reached (step 0: `start`).
    to_place   TEXT NOT NULL,
    -- The state after the step: in full (`state`), as a patch of the step before's
    -- (`state_patch`, see sql.rs), or neither when the step left it as it was.
    state       TEXT,
    state_patch TEXT,
    at         BIGINT NOT NULL,
    PRIMARY KEY (run_id, step)
);

CREATE TABLE documents (
    run_id   UUID NOT NULL,
    seq      BIGINT NOT NULL,
    version  BIGINT NOT NULL,
    doc_type TEXT NOT NULL,
    doc_key  TEXT,
    tags     TEXT NOT NULL,
    metadata TEXT NOT NULL,
    content  TEXT NOT NULL,
    step     BIGINT NOT NULL,
    PRIMARY KEY (run_id, seq, version)
);

CREATE TABLE signals (
    run_id      UUID NOT NULL,
    id          BIGINT NOT NULL,
    name        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    status      TEXT NOT NULL,
    step        BIGINT,
    reason      TEXT,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, id)
);
