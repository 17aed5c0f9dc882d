-- What the runs' steps learn of the trigger (KNOTLESS_BEFORE_SHA,
-- KNOTLESS_ACTOR): the commit the pushed ref pointed at before the push
-- ('' for a new ref and for manual triggers), and the handle of the
-- account that pushed or triggered ('' for pipelines made before this).
ALTER TABLE pipelines ADD COLUMN before_sha TEXT NOT NULL DEFAULT '';
ALTER TABLE pipelines ADD COLUMN actor      TEXT NOT NULL DEFAULT '';
