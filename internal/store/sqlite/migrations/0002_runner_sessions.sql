-- Runner sessions (dev.knotless.runner.startSession): the server serves
-- runner calls only with the runner's current session, so two knotless-run
-- processes with one identity never both run jobs. handed_over_at and
-- handover_until are set while that session has handed its runs over
-- (dev.knotless.runner.handover: the session is ended) and no new one has
-- started; NULL otherwise.
ALTER TABLE runners ADD COLUMN session            TEXT NOT NULL DEFAULT '';
ALTER TABLE runners ADD COLUMN session_started_at INTEGER;
ALTER TABLE runners ADD COLUMN handed_over_at     INTEGER;
ALTER TABLE runners ADD COLUMN handover_until     INTEGER;
