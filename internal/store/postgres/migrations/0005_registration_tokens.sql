-- Twin of sqlite/migrations/0005_registration_tokens.sql.
CREATE TABLE registration_tokens (
	hash       TEXT    PRIMARY KEY, -- SHA-256 hex of the token
	repo_id    BIGINT  NOT NULL REFERENCES repos(id) ON DELETE CASCADE,
	created_by TEXT    NOT NULL,    -- handle of the account that made it
	uses_left  INTEGER NOT NULL,
	expires_at BIGINT  NOT NULL,
	created_at BIGINT  NOT NULL
);

CREATE INDEX registration_tokens_repo ON registration_tokens(repo_id, expires_at);
