-- Twin of sqlite/migrations/0007_step_times_concurrency.sql.
ALTER TABLE steps ADD COLUMN started_at  BIGINT;
ALTER TABLE steps ADD COLUMN finished_at BIGINT;

ALTER TABLE runs ADD COLUMN concurrency_group TEXT NOT NULL DEFAULT '';
CREATE INDEX runs_by_concurrency_group ON runs (repo_id, concurrency_group, state, id) WHERE concurrency_group <> '';
ALTER TABLE runs ADD COLUMN superseded_by BIGINT;
