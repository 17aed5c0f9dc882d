-- Web sessions (knotless-server's pages, internal/web): a browser signed in
-- with an account API token. Only SHA-256 hashes are kept: of the session
-- id (the cookie's value) and of the token it was made from, so revoking
-- the token, its expiry or disabling the account ends the session too.
CREATE TABLE web_sessions (
	id_hash    TEXT    PRIMARY KEY, -- SHA-256 hex of the session id
	token_hash TEXT    NOT NULL,    -- SHA-256 hex of the API token signed in with
	csrf       TEXT    NOT NULL,    -- the session's anti-CSRF form token
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX web_sessions_expiry ON web_sessions(expires_at);

-- What a runner's latest process said of itself when its session started
-- (dev.knotless.runner.startSession), for the Runners tab.
CREATE TABLE runner_processes (
	runner_id  INTEGER PRIMARY KEY REFERENCES runners(id) ON DELETE CASCADE,
	executor   TEXT    NOT NULL DEFAULT '',
	version    TEXT    NOT NULL DEFAULT '',
	started_at INTEGER NOT NULL
);

CREATE INDEX pipelines_by_repo ON pipelines(repo_id, id);
