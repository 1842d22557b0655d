-- A run's labels, as its starter gave them (a tenant, a protocol's conversation): a
-- JSON object of names to values, NULL for the many runs without any. Written once,
-- with the run; a fork copies its source's.
ALTER TABLE runs ADD COLUMN labels TEXT;
