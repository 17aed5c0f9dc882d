-- Several server replicas on one database (docs/scaling.md): the jti
-- values of runner tokens accepted by any replica, each kept until its
-- token expires (plus the leeway), so that a token replayed to another
-- replica, or after a restart, is refused. key is SHA-256 hex of the
-- token's issuer and jti; expires_at is milliseconds since the epoch.
CREATE TABLE service_auth_jtis (
	key        TEXT    PRIMARY KEY,
	expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX service_auth_jtis_expiry ON service_auth_jtis(expires_at);
