-- Twin of sqlite/migrations/0006_pipeline_push.sql.
ALTER TABLE pipelines ADD COLUMN before_sha TEXT NOT NULL DEFAULT '';
ALTER TABLE pipelines ADD COLUMN actor      TEXT NOT NULL DEFAULT '';
