-- The event log: run events that runtimes write while someone, in any process,
-- listens (`event_listeners`), for subscribers in other processes. Append-only and
-- pruned by age and count. Writers append under a transaction-scoped advisory lock,
-- so ids are committed in the order they are handed out and "the events after id
-- N" is a cursor that never misses a later commit of a smaller id; each append
-- notifies channel `loopstack_events` with the newest id (a pointer, never the
-- event: NOTIFY payloads stop at 8000 bytes).
CREATE TABLE events (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id  UUID NOT NULL,
    origin  TEXT NOT NULL,
    at      BIGINT NOT NULL,
    event   TEXT NOT NULL
);

CREATE INDEX events_by_run ON events (run_id, id);
CREATE INDEX events_by_time ON events (at);

-- The runtimes that follow the log, each until its row expires unrenewed.
CREATE TABLE event_listeners (
    listener TEXT PRIMARY KEY,
    until    BIGINT NOT NULL
);
