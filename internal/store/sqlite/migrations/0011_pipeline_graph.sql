-- Pipelines real projects need (docs/workflow.md: Matrix, Needs, Retry).
-- matrix is the run's values of its workflow's matrix, a JSON array of
-- {"name","value"} objects ('' for none); fail_fast its fail-fast.
ALTER TABLE runs ADD COLUMN matrix TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN fail_fast INTEGER NOT NULL DEFAULT 0;
-- Attempts: a run retried after an environment's failure (retry:) is a
-- new run with attempt + 1 and retry_of the run before, which gets
-- retried_by; retry_max and retry_when (a JSON array of reasons) are
-- the workflow's retry:, timeout_ms its timeout.
ALTER TABLE runs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
ALTER TABLE runs ADD COLUMN retry_of INTEGER;
ALTER TABLE runs ADD COLUMN retried_by INTEGER;
ALTER TABLE runs ADD COLUMN retry_max INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN retry_when TEXT NOT NULL DEFAULT '[]';
ALTER TABLE runs ADD COLUMN timeout_ms INTEGER NOT NULL DEFAULT 0;
-- When the run's environment is known to be gone (unix milliseconds):
-- reported by its runner, or its timeout past its start for a lost one.
ALTER TABLE runs ADD COLUMN env_gone_at INTEGER;
-- The values the run exported, a JSON object ('' for none).
ALTER TABLE runs ADD COLUMN exports TEXT NOT NULL DEFAULT '';
-- A cancel the server asked for on its own (fail-fast): the reason and
-- message the run ends with when its runner reports it cancelled.
ALTER TABLE runs ADD COLUMN cancel_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN cancel_message TEXT NOT NULL DEFAULT '';
-- needs: run_id waits for need_id (a run of the same pipeline), which its
-- workflow's needs: entry name names.
CREATE TABLE run_needs (
	run_id  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	need_id INTEGER NOT NULL,
	name    TEXT    NOT NULL,
	PRIMARY KEY (run_id, need_id)
);
CREATE INDEX run_needs_by_need ON run_needs (need_id);
