-- Twin of sqlite/migrations/0012_run_services.sql.
ALTER TABLE runs ADD COLUMN services INTEGER NOT NULL DEFAULT 0;
