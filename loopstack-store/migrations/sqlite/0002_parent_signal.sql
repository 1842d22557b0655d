-- Child runs: the signal a child sends its parent (`runs.parent`) when it finishes,
-- the name of the parent's wait transition that takes the child's result. NULL for a
-- run that is nobody's child, and for every run created before this migration.
ALTER TABLE runs ADD COLUMN parent_signal TEXT;
