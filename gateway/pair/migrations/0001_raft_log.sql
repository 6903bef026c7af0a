-- uagate pair: the Raft log and the Raft node's own state, in their own
-- SQLite file (never in the configuration store).

-- The log: one row per entry, by index. `entry` is the openraft entry
-- (log id and payload) as JSON.
CREATE TABLE raft_log (
    idx   INTEGER PRIMARY KEY NOT NULL CHECK (idx >= 0),
    entry TEXT    NOT NULL
);

-- The vote, the last committed log id and the last purged log id, JSON.
CREATE TABLE raft_state (
    key   TEXT PRIMARY KEY NOT NULL CHECK (key IN ('vote', 'committed', 'last_purged')),
    value TEXT NOT NULL
);
