-- Registration tokens (dev.knotless.runner.createRegistrationToken): an
-- owner's consent that a runner may register for one repository. Only the
-- token's SHA-256 is kept; uses_left counts down to 0, and a token is dead
-- once expires_at has passed. They go with their repository.
CREATE TABLE registration_tokens (
	hash       TEXT    PRIMARY KEY, -- SHA-256 hex of the token
	repo_id    INTEGER NOT NULL REFERENCES repos(id) ON DELETE CASCADE,
	created_by TEXT    NOT NULL,    -- handle of the account that made it
	uses_left  INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	created_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX registration_tokens_repo ON registration_tokens(repo_id, expires_at);
