-- Twin of sqlite/migrations/0003_run_outputs.sql.
CREATE TABLE run_outputs (
	run_id    BIGINT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	size      BIGINT NOT NULL, -- bytes of the archive
	sha256    TEXT   NOT NULL, -- hex
	entries   BIGINT NOT NULL,
	bytes     BIGINT NOT NULL, -- total of the regular files
	stored_at BIGINT NOT NULL
);

CREATE TABLE run_output_entries (
	run_id BIGINT NOT NULL REFERENCES run_outputs(run_id) ON DELETE CASCADE,
	path   TEXT   COLLATE "C" NOT NULL, -- slash path relative to the checkout
	kind   TEXT   NOT NULL, -- file, dir, symlink
	size   BIGINT NOT NULL DEFAULT 0,
	mode   BIGINT NOT NULL DEFAULT 0,
	target TEXT   NOT NULL DEFAULT '',
	PRIMARY KEY (run_id, path)
);
