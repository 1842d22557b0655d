-- Versioned workflows: the version of its workflow a run was started under, or
-- migrated to last (`#[workflow(version = N)]`). Every run stored before this
-- migration is of version 1, the version of a workflow that names none. A worker
-- claims only the versions it drives or migrates from.
ALTER TABLE runs ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
