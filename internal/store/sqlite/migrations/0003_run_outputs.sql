-- Outputs a run stored (dev.knotless.runner.uploadOutputs): the archive
-- itself is DATA/outputs/<run>/outputs.tar; these rows describe it and
-- list its entries for `knotless run show`. Both go with their run.
CREATE TABLE run_outputs (
	run_id    INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	size      INTEGER NOT NULL, -- bytes of the archive
	sha256    TEXT    NOT NULL, -- hex
	entries   INTEGER NOT NULL,
	bytes     INTEGER NOT NULL, -- total of the regular files
	stored_at INTEGER NOT NULL
);

CREATE TABLE run_output_entries (
	run_id INTEGER NOT NULL REFERENCES run_outputs(run_id) ON DELETE CASCADE,
	path   TEXT    NOT NULL, -- slash path relative to the checkout
	kind   TEXT    NOT NULL, -- file, dir, symlink
	size   INTEGER NOT NULL DEFAULT 0,
	mode   INTEGER NOT NULL DEFAULT 0,
	target TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (run_id, path)
) WITHOUT ROWID;
