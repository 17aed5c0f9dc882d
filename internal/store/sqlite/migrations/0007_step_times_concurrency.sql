-- Step timings: when a step started running and when it ended, as the
-- runner measured them (unix milliseconds); NULL while unknown (a pending
-- step, a step skipped without running, a row from before this migration).
ALTER TABLE steps ADD COLUMN started_at  INTEGER;
ALTER TABLE steps ADD COLUMN finished_at INTEGER;

-- Concurrency groups (a workflow's `concurrency: {group: ...}`): a run
-- with a group is not claimed while an older run of the same repository
-- and group has not ended. '' means no group.
ALTER TABLE runs ADD COLUMN concurrency_group TEXT NOT NULL DEFAULT '';
CREATE INDEX runs_by_concurrency_group ON runs (repo_id, concurrency_group, state, id) WHERE concurrency_group <> '';
-- superseded_by is the run that cancelled this one under its group's
-- cancel-in-progress: the run then ends cancelled with reason superseded.
ALTER TABLE runs ADD COLUMN superseded_by INTEGER;
