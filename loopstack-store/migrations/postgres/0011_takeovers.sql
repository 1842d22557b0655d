-- Takeovers: each claim of a running run whose lease still named another holder (it
-- died or hung and the lease ran out, or `resume --take-over` took it by hand), with
-- who held it, until when, who took it and when. A lease given back (lease_until = 0)
-- is no takeover. Written by a trigger, so every claim statement records them.
CREATE TABLE takeovers (
    run         BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at          BIGINT NOT NULL,
    from_owner  TEXT NOT NULL,
    lease_until BIGINT NOT NULL,
    by_owner    TEXT,
    epoch       BIGINT NOT NULL
);

CREATE INDEX takeovers_by_run ON takeovers (run, epoch);

CREATE FUNCTION loopstack_record_takeover() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO takeovers (run, at, from_owner, lease_until, by_owner, epoch)
    VALUES (NEW.id, NEW.updated_at, OLD.lease_owner, OLD.lease_until, NEW.lease_owner, NEW.epoch);
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_takeover AFTER UPDATE OF epoch ON runs FOR EACH ROW
WHEN (OLD.status = 'running' AND OLD.lease_owner IS NOT NULL AND OLD.lease_until > 0 AND NEW.epoch > OLD.epoch)
EXECUTE FUNCTION loopstack_record_takeover();
