-- uagate configuration store, initial schema.
-- Every configuration change is written in one transaction together with a
-- row in change_log; the standby replicates by replaying change_log.

-- Single-row table holding the replication epoch (starts at 1).
CREATE TABLE meta (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL CHECK (epoch >= 1)
);
INSERT INTO meta (id, epoch) VALUES (1, 1);

-- Append-only change log. AUTOINCREMENT guarantees sequence numbers are never
-- reused, even if rows were ever removed by hand.
CREATE TABLE change_log (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    epoch   INTEGER NOT NULL,
    actor   TEXT    NOT NULL,
    at      TEXT    NOT NULL,   -- RFC 3339, UTC
    kind    TEXT    NOT NULL,   -- e.g. "user.add", "trust.add", "setting.set"
    payload TEXT    NOT NULL    -- JSON object; never contains secrets
);

CREATE TRIGGER change_log_no_update BEFORE UPDATE ON change_log
BEGIN
    SELECT RAISE(ABORT, 'change_log is append-only');
END;

CREATE TRIGGER change_log_no_delete BEFORE DELETE ON change_log
BEGIN
    SELECT RAISE(ABORT, 'change_log is append-only');
END;

-- Console / REST users. password_hash is a PHC string (argon2id).
CREATE TABLE users (
    name          TEXT PRIMARY KEY NOT NULL,
    password_hash TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
);

-- Certificate trust list: trusted application certs, issuer (CA) certs and
-- certs the engine rejected (kept for the operator to review, capped).
CREATE TABLE certs (
    thumbprint      TEXT PRIMARY KEY NOT NULL,  -- SHA-1 of DER, lowercase hex
    kind            TEXT NOT NULL CHECK (kind IN ('trusted', 'issuer', 'rejected')),
    subject         TEXT NOT NULL,
    application_uri TEXT,
    not_before      TEXT NOT NULL,
    not_after       TEXT NOT NULL,
    der             BLOB NOT NULL,
    first_seen      TEXT NOT NULL,
    last_seen       TEXT NOT NULL
);
CREATE INDEX certs_kind_last_seen ON certs (kind, last_seen);

-- Certificate revocation lists, at most one per issuer (newest wins).
CREATE TABLE crls (
    issuer      TEXT PRIMARY KEY NOT NULL,
    thumbprint  TEXT NOT NULL,                  -- SHA-1 of DER, lowercase hex
    this_update TEXT NOT NULL,
    next_update TEXT,
    der         BLOB NOT NULL,
    added_at    TEXT NOT NULL
);

-- Free-form key/value settings.
CREATE TABLE settings (
    key        TEXT PRIMARY KEY NOT NULL,
    value      TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
