-- A running run's holder: when it claimed the run (NULL until a claim: a run created
-- running is held since it was created), and whose lease it took the run over from
-- when its claim was a takeover (NULL otherwise; the takeovers table keeps them all).
ALTER TABLE runs ADD COLUMN held_since INTEGER;
ALTER TABLE runs ADD COLUMN taken_from TEXT;
