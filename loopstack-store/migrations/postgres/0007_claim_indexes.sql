-- A worker's claim visits only the runs that can move, whatever the number of runs
-- parked waiting for a signal: each way a run becomes claimable has an index that
-- holds only such rows (a due timer, a pending signal; queued runs, and running ones
-- whose lease may have run out, are few and found by `runs_by_status`). Without them
-- every poll scanned every waiting run and looked up its signals. No index on
-- `lease_until`: every commit of a running run moves it, and would write the index.
CREATE INDEX runs_waking ON runs (wake_at) WHERE status = 'waiting' AND wake_at IS NOT NULL;
CREATE INDEX signals_pending ON signals (run) WHERE status = 'pending';
