-- Scheduled runs (issue 38): one row per `on.schedule` entry of a
-- workflow on a repository's default branch, kept by SyncSchedules after
-- each push of that branch. A schedule fires by moving next_at forward in
-- the transaction that creates its pipeline (compare-and-set on next_at),
-- so each due time starts one pipeline, whichever replica fires it.
CREATE TABLE schedules (
	id               INTEGER PRIMARY KEY,
	repo_id          INTEGER NOT NULL REFERENCES repos(id) ON DELETE CASCADE,
	workflow         TEXT    NOT NULL, -- path of the workflow file
	cron             TEXT    NOT NULL, -- the expression as written
	time_zone        TEXT    NOT NULL, -- IANA name
	branch           TEXT    NOT NULL, -- branch name; '' is the default branch
	next_at          INTEGER NOT NULL, -- the next due time not yet fired or skipped
	last_at          INTEGER,          -- due time of the latest pipeline started
	last_pipeline_id INTEGER REFERENCES pipelines(id) ON DELETE SET NULL,
	problem          TEXT    NOT NULL DEFAULT '', -- why it did not or cannot fire
	paused           INTEGER NOT NULL DEFAULT 0,
	paused_by        TEXT    NOT NULL DEFAULT '', -- handle of who paused it
	paused_at        INTEGER,
	created_at       INTEGER NOT NULL,
	UNIQUE (repo_id, workflow, cron, time_zone, branch)
);
-- DueSchedules and NextScheduleAt: the schedules not paused, soonest first.
CREATE INDEX schedules_due ON schedules (next_at, id) WHERE NOT paused;
