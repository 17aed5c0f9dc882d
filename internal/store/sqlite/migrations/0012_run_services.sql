-- Services with their own images (docs/workflow.md: Services): how many
-- services the run's workflow lists, so that a runner whose executor runs
-- no images (shell) does not claim the run.
ALTER TABLE runs ADD COLUMN services INTEGER NOT NULL DEFAULT 0;
