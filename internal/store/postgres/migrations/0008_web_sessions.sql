-- Twin of sqlite/migrations/0008_web_sessions.sql.
CREATE TABLE web_sessions (
	id_hash    TEXT   PRIMARY KEY, -- SHA-256 hex of the session id
	token_hash TEXT   NOT NULL,    -- SHA-256 hex of the API token signed in with
	csrf       TEXT   NOT NULL,    -- the session's anti-CSRF form token
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL
);

CREATE INDEX web_sessions_expiry ON web_sessions(expires_at);

CREATE TABLE runner_processes (
	runner_id  BIGINT PRIMARY KEY REFERENCES runners(id) ON DELETE CASCADE,
	executor   TEXT   NOT NULL DEFAULT '',
	version    TEXT   NOT NULL DEFAULT '',
	started_at BIGINT NOT NULL
);

CREATE INDEX pipelines_by_repo ON pipelines(repo_id, id);
