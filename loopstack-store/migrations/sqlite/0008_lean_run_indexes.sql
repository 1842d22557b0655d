-- Indexes of `runs` that cost more than they help: every run paid for their entries
-- in bytes, and every commit for moving them, and no query needs them.
-- `runs_to_claim` is unused since migration 7 (the claim finds the runs that can
-- move by an index for each way a run becomes claimable), yet, on `updated_at`,
-- every commit of an unfinished run moved its entry.
DROP INDEX IF EXISTS runs_to_claim;
-- A listing cannot use `runs_by_workflow` or `runs_by_status` (its optional filters,
-- `$1 IS NULL OR workflow = $1`, are not indexable in SQLite: it scans by run id),
-- so they only found the claim its queued runs: an index of those alone holds
-- nothing for a run that is not queued.
DROP INDEX IF EXISTS runs_by_workflow;
DROP INDEX IF EXISTS runs_by_status;
CREATE INDEX runs_queued ON runs (id) WHERE status = 'queued';
