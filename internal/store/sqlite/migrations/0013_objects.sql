-- Finished logs and outputs in an object store (knotless-server
-- --object-store, issue 36): which ended runs' bytes the server moved to
-- the bucket. A row is written only once every object of the run is whole
-- in the bucket, in one transaction with its logs' rows: readers look here
-- when the local file is gone, so they never see half of a move. cleaned
-- says the local copies are removed (until then a pass finishes it).
CREATE TABLE moved_runs (
	run_id   INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	outputs  INTEGER NOT NULL, -- 1: outputs/<run>/outputs.tar is in the bucket
	moved_at INTEGER NOT NULL, -- Unix ms
	cleaned  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX moved_runs_unclean ON moved_runs (run_id) WHERE cleaned = 0;

-- One step log of a moved run: logs/<run>/<step>.log (size bytes) and, when
-- times_size > 0, its line times logs/<run>/<step>.times.
CREATE TABLE moved_logs (
	run_id     INTEGER NOT NULL REFERENCES moved_runs(run_id) ON DELETE CASCADE,
	step       INTEGER NOT NULL,
	size       INTEGER NOT NULL,
	times_size INTEGER NOT NULL,
	PRIMARY KEY (run_id, step)
) WITHOUT ROWID;
