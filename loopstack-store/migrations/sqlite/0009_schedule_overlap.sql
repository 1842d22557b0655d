-- Overlap policies (loopstack_core::schedule::Overlap): what a due time does while
-- the schedule's last run has not ended. `skip` is the default of new schedules;
-- the schedules stored before this migration started a run at every due time,
-- whatever still ran, and keep doing so: they are `allow`.
ALTER TABLE schedules ADD COLUMN overlap TEXT NOT NULL DEFAULT 'skip';
UPDATE schedules SET overlap = 'allow';
-- The due time `queue_one` keeps until the last run ends, if any.
ALTER TABLE schedules ADD COLUMN pending_due INTEGER;

-- What workers look for besides due times: pending ones, whose last run may have ended.
CREATE INDEX schedules_pending ON schedules (next_due) WHERE pending_due IS NOT NULL AND NOT paused;
