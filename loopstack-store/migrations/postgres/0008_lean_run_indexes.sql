-- `runs_to_claim` is unused since migration 7 (the claim finds the runs that can
-- move by an index for each way a run becomes claimable), and, on `updated_at`,
-- it kept every commit of an unfinished run from being a HOT update: each commit
-- wrote a new entry into every index of `runs`, bytes each run kept until a vacuum.
DROP INDEX IF EXISTS runs_to_claim;
