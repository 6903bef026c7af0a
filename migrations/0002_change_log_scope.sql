-- Node-local changes (rejected certificates, node-local settings) stay in
-- the change log for the audit trail but are never replicated; `scope`
-- tells them apart from the replicated configuration changes.

-- The append-only trigger is lifted for the back-fill of earlier entries.
DROP TRIGGER change_log_no_update;

ALTER TABLE change_log ADD COLUMN scope TEXT NOT NULL DEFAULT 'replicated'
    CHECK (scope IN ('replicated', 'local'));

UPDATE change_log SET scope = 'local'
WHERE kind = 'trust.reject'
   OR (kind = 'trust.remove' AND json_extract(payload, '$.kind') = 'rejected')
   OR (kind = 'setting.set'
       AND json_extract(payload, '$.key') IN ('server.requested_state', 'field.namespaces'));

CREATE TRIGGER change_log_no_update BEFORE UPDATE ON change_log
BEGIN
    SELECT RAISE(ABORT, 'change_log is append-only');
END;
