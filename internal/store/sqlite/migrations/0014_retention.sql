-- Retention of runs' logs and outputs, and what a repository uses (issue
-- 36). A run's record, result and steps are never removed: only the bytes
-- under DATA/logs/<run> and DATA/outputs/<run> (or the bucket's), and
-- run_bytes says when.

-- A repository's own retention, set by its owner (knotless repo
-- set-retention); a NULL column is the server's setting (--keep-logs-days,
-- --keep-pipelines), 0 keeps everything by that rule.
CREATE TABLE repo_retention (
	repo_id        INTEGER PRIMARY KEY REFERENCES repos(id) ON DELETE CASCADE,
	keep_logs_days INTEGER,
	keep_pipelines INTEGER,
	set_by         TEXT    NOT NULL, -- handle of the account that set it
	set_at         INTEGER NOT NULL
);

-- What an ended run's logs and outputs hold, measured once by the
-- retention sweep (the usage pages sum these rows), and when retention
-- removed them (expired_at; NULL while kept).
CREATE TABLE run_bytes (
	run_id        INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	logs_bytes    INTEGER NOT NULL, -- step logs and their line times
	logs          INTEGER NOT NULL, -- step logs
	outputs_bytes INTEGER NOT NULL, -- the outputs archive
	measured_at   INTEGER NOT NULL,
	expired_at    INTEGER
);
CREATE INDEX run_bytes_kept ON run_bytes (run_id) WHERE expired_at IS NULL;
CREATE INDEX runs_by_finished ON runs (finished_at, id) WHERE finished_at IS NOT NULL;

-- The latest cache usage a runner reported for a repository and a cache
-- store (dev.knotless.runner.complete's caches).
CREATE TABLE repo_cache_usage (
	repo_id     INTEGER NOT NULL REFERENCES repos(id) ON DELETE CASCADE,
	store       TEXT    NOT NULL,
	entries     INTEGER NOT NULL,
	bytes       INTEGER NOT NULL,
	reported_at INTEGER NOT NULL,
	PRIMARY KEY (repo_id, store)
);
