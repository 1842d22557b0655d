-- When the run's current holder claimed it, so listings can say who holds a running
-- run and since when. NULL until a claim: a run created running is held since it was
-- created (created_at).
ALTER TABLE runs ADD COLUMN held_since BIGINT;
