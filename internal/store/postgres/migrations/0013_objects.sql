-- Twin of sqlite/migrations/0013_objects.sql.
CREATE TABLE moved_runs (
	run_id   BIGINT  PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	outputs  BOOLEAN NOT NULL, -- outputs/<run>/outputs.tar is in the bucket
	moved_at BIGINT  NOT NULL, -- Unix ms
	cleaned  BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX moved_runs_unclean ON moved_runs (run_id) WHERE NOT cleaned;

CREATE TABLE moved_logs (
	run_id     BIGINT NOT NULL REFERENCES moved_runs(run_id) ON DELETE CASCADE,
	step       INTEGER NOT NULL,
	size       BIGINT NOT NULL,
	times_size BIGINT NOT NULL,
	PRIMARY KEY (run_id, step)
);
