-- A worker's claim visits only the runs that can move, whatever the number of runs
-- parked waiting for a signal: each way a run becomes claimable has an index that
-- holds only such rows (a due timer, a lease that ran out, a pending signal; queued
-- runs are found by `runs_by_status`). Without them every poll scanned every
-- waiting run and looked up its signals.
-- The claim names these indexes (`INDEXED BY`): SQLite keeps no statistics unless
-- ANALYZE runs, and without them it would search `runs_by_status` for every
-- waiting run instead.
CREATE INDEX runs_waking ON runs (wake_at) WHERE status = 'waiting' AND wake_at IS NOT NULL;
CREATE INDEX runs_leased ON runs (lease_until) WHERE status = 'running' AND lease_until IS NOT NULL;
CREATE INDEX signals_pending ON signals (run) WHERE status = 'pending';
