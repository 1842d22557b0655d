-- Takeovers: each claim of a running run whose lease still named another holder (it
-- died or hung and the lease ran out, or `resume --take-over` took it by hand), with
-- who held it, until when, who took it and when. A lease given back (lease_until = 0)
-- is no takeover. Written by a trigger, so every claim statement records them.
CREATE TABLE takeovers (
    run         INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at          INTEGER NOT NULL,
    from_owner  TEXT NOT NULL,
    lease_until INTEGER NOT NULL,
    by_owner    TEXT,
    epoch       INTEGER NOT NULL
);

CREATE INDEX takeovers_by_run ON takeovers (run, epoch);

CREATE TRIGGER runs_takeover AFTER UPDATE OF epoch ON runs
WHEN OLD.status = 'running' AND OLD.lease_owner IS NOT NULL AND OLD.lease_until > 0 AND NEW.epoch > OLD.epoch
BEGIN
    INSERT INTO takeovers (run, at, from_owner, lease_until, by_owner, epoch)
    VALUES (NEW.id, NEW.updated_at, OLD.lease_owner, OLD.lease_until, NEW.lease_owner, NEW.epoch);
END;
