-- What people read about a pipeline besides its runs (issue 25): its notes,
-- a JSON list of strings ('' for none: entries of .knotless/workflows that are not workflows and
-- did not run), and the pipeline whose runs it re-runs (0: none).
ALTER TABLE pipelines ADD COLUMN notes    TEXT    NOT NULL DEFAULT '';
ALTER TABLE pipelines ADD COLUMN rerun_of INTEGER NOT NULL DEFAULT 0;

-- The Pipelines tab's branch filter.
CREATE INDEX pipelines_by_repo_ref ON pipelines(repo_id, ref, id);

-- What a runner's latest process said of itself besides its executor and
-- version: the SHA-256 of its executable, its --capacity, and the facts
-- its executor gives (a JSON object of strings, e.g. a kube runner's
-- namespace and pod).
ALTER TABLE runner_processes ADD COLUMN digest   TEXT    NOT NULL DEFAULT '';
ALTER TABLE runner_processes ADD COLUMN capacity INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runner_processes ADD COLUMN facts    TEXT    NOT NULL DEFAULT '';
