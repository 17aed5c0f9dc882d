-- Twin of sqlite/migrations/0002_runner_sessions.sql.
ALTER TABLE runners ADD COLUMN session            TEXT NOT NULL DEFAULT '';
ALTER TABLE runners ADD COLUMN session_started_at BIGINT;
ALTER TABLE runners ADD COLUMN handed_over_at     BIGINT;
ALTER TABLE runners ADD COLUMN handover_until     BIGINT;
