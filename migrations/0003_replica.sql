-- Where this store stands in the pair's replicated (Raft) log. One row.
--
-- last_applied: the position of the last log entry applied, JSON
--   {"index": .., "term": .., "leader": ..}; NULL before the first. It is
--   written in the same transaction as the change of that entry, so an entry
--   is applied exactly once across crashes.
-- membership: the last cluster membership the state machine saw, JSON as the
--   pair serialized it; NULL before the first.
--
-- Both are replaced together with the replicated state when a snapshot is
-- installed.
CREATE TABLE replica (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    last_applied TEXT,
    membership   TEXT
);
INSERT INTO replica (id, last_applied, membership) VALUES (1, NULL, NULL);
