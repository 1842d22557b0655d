-- The event log: run events that runtimes write while someone, in any process,
-- listens (`event_listeners`), for subscribers in other processes. Append-only and
-- pruned by age and count. AUTOINCREMENT: an id is never handed out twice, even
-- after every row was pruned, so "the events after id N" stays a valid cursor.
CREATE TABLE events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id  BLOB NOT NULL,
    origin  TEXT NOT NULL,
    at      INTEGER NOT NULL,
    event   TEXT NOT NULL
);

CREATE INDEX events_by_run ON events (run_id, id);
CREATE INDEX events_by_time ON events (at);

-- The runtimes that follow the log, each until its row expires unrenewed.
CREATE TABLE event_listeners (
    listener TEXT PRIMARY KEY,
    until    INTEGER NOT NULL
);
