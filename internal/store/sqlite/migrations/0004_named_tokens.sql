-- Named account tokens (knotless token create/list/revoke) with an optional
-- expiry and the time of last use, and accounts an admin can disable. The
-- single token every account had becomes its token named "initial" (and
-- "initial-2", ... should an account hold more), so existing tokens keep
-- working.
ALTER TABLE accounts ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0;

CREATE TABLE tokens_named (
	id           INTEGER PRIMARY KEY,
	account_id   INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
	name         TEXT    NOT NULL,
	hash         TEXT    NOT NULL UNIQUE, -- SHA-256 hex; the token is never stored
	created_at   INTEGER NOT NULL,
	expires_at   INTEGER,                 -- NULL: never
	last_used_at INTEGER,                 -- NULL: not used since it was named
	UNIQUE (account_id, name)
);

INSERT INTO tokens_named (account_id, name, hash, created_at)
SELECT account_id,
       CASE WHEN n = 1 THEN 'initial' ELSE 'initial-' || n END,
       hash, created_at
FROM (SELECT account_id, hash, created_at,
             ROW_NUMBER() OVER (PARTITION BY account_id ORDER BY created_at, hash) AS n
      FROM tokens);

DROP TABLE tokens;
ALTER TABLE tokens_named RENAME TO tokens;
