-- Times are INTEGER milliseconds since the Unix epoch (UTC).

CREATE TABLE accounts (
	id         INTEGER PRIMARY KEY,
	handle     TEXT    NOT NULL UNIQUE,
	did        TEXT    NOT NULL UNIQUE,
	admin      INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL
);

-- API tokens, by SHA-256 hex of the token; the token itself is never stored.
CREATE TABLE tokens (
	hash       TEXT    PRIMARY KEY,
	account_id INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
	created_at INTEGER NOT NULL
);

CREATE TABLE repos (
	id         INTEGER PRIMARY KEY,
	owner_id   INTEGER NOT NULL REFERENCES accounts(id),
	name       TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	UNIQUE (owner_id, name)
);

CREATE TABLE pipelines (
	id         INTEGER PRIMARY KEY,
	repo_id    INTEGER NOT NULL REFERENCES repos(id),
	ref        TEXT    NOT NULL,
	sha        TEXT    NOT NULL,
	event      TEXT    NOT NULL,
	created_at INTEGER NOT NULL
);

CREATE TABLE runs (
	id               INTEGER PRIMARY KEY,
	pipeline_id      INTEGER NOT NULL REFERENCES pipelines(id),
	repo_id          INTEGER NOT NULL REFERENCES repos(id),
	workflow         TEXT    NOT NULL,
	workflow_path    TEXT    NOT NULL,
	source           TEXT    NOT NULL,
	secrets          TEXT    NOT NULL DEFAULT '[]', -- JSON array of names
	runners          TEXT    NOT NULL DEFAULT '[]', -- JSON array of names/labels
	state            TEXT    NOT NULL,
	reason           TEXT    NOT NULL DEFAULT '',
	message          TEXT    NOT NULL DEFAULT '',
	exit_code        INTEGER,
	runner_id        INTEGER,              -- no foreign key: a runner may be removed
	runner_name      TEXT    NOT NULL DEFAULT '',
	cancel_requested INTEGER NOT NULL DEFAULT 0,
	token_hash       TEXT    UNIQUE,       -- SHA-256 hex of the run token while active
	created_at       INTEGER NOT NULL,
	claimed_at       INTEGER,
	started_at       INTEGER,
	finished_at      INTEGER,
	lease_expires    INTEGER
);
CREATE INDEX runs_by_repo_state ON runs (repo_id, state, id);
CREATE INDEX runs_by_state_lease ON runs (state, lease_expires);
CREATE INDEX runs_by_pipeline ON runs (pipeline_id);

CREATE TABLE steps (
	run_id     INTEGER NOT NULL REFERENCES runs(id),
	idx        INTEGER NOT NULL,
	name       TEXT    NOT NULL DEFAULT '',
	state      TEXT    NOT NULL,
	exit_code  INTEGER,
	reason     TEXT    NOT NULL DEFAULT '',
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (run_id, idx)
);

CREATE TABLE runners (
	id           INTEGER PRIMARY KEY,
	repo_id      INTEGER NOT NULL REFERENCES repos(id),
	name         TEXT    NOT NULL,
	did          TEXT    NOT NULL UNIQUE,
	public_key   TEXT    NOT NULL,
	labels       TEXT    NOT NULL DEFAULT '[]', -- JSON array
	status       TEXT    NOT NULL,
	created_at   INTEGER NOT NULL,
	last_seen_at INTEGER,
	UNIQUE (repo_id, name)
);

-- Secret values are AES-256-GCM ciphertexts (nonce || sealed); the key is
-- not in the database.
CREATE TABLE secrets (
	repo_id    INTEGER NOT NULL REFERENCES repos(id),
	name       TEXT    NOT NULL,
	runner     TEXT    NOT NULL DEFAULT '',
	ciphertext BLOB    NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (repo_id, name, runner)
);
