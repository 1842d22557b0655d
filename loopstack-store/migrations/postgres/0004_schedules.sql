-- Schedules: recurring runs of a workflow with its input (loopstack_core::schedule).
-- A worker that finds one due moves `next_due` on with a compare-and-set on its old
-- value, in the transaction that creates the due time's run: one due time starts
-- one run, however many workers race.
CREATE TABLE schedules (
    id         TEXT PRIMARY KEY,
    workflow   TEXT NOT NULL,
    input      TEXT NOT NULL,
    -- The recurrence as JSON: {"cron": {"expr": ..., "timezone": ...}} or {"every": {"millis": ...}}.
    recurrence TEXT NOT NULL,
    missed     TEXT NOT NULL,
    grace_ms   BIGINT NOT NULL,
    paused     BOOLEAN NOT NULL,
    next_due   BIGINT NOT NULL,
    last_due   BIGINT,
    last_run   UUID,
    last_error TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- What workers look for: schedules not paused, by due time.
CREATE INDEX schedules_due ON schedules (next_due) WHERE NOT paused;

-- Which schedule and due time started which run.
CREATE TABLE schedule_runs (
    schedule TEXT NOT NULL,
    due      BIGINT NOT NULL,
    run_id   UUID NOT NULL,
    PRIMARY KEY (schedule, due)
);
