-- Twin of sqlite/migrations/0010_pipeline_notes_rerun_runner_facts.sql.
ALTER TABLE pipelines ADD COLUMN notes    TEXT   NOT NULL DEFAULT '';
ALTER TABLE pipelines ADD COLUMN rerun_of BIGINT NOT NULL DEFAULT 0;

CREATE INDEX pipelines_by_repo_ref ON pipelines(repo_id, ref, id);

ALTER TABLE runner_processes ADD COLUMN digest   TEXT   NOT NULL DEFAULT '';
ALTER TABLE runner_processes ADD COLUMN capacity BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runner_processes ADD COLUMN facts    TEXT   NOT NULL DEFAULT '';
