ALTER TABLE operations
    ADD COLUMN call_sent_at     timestamptz,
    ADD COLUMN call_due_at      timestamptz,
    ADD COLUMN call_recorded_at timestamptz;
UPDATE operations o SET call_sent_at = c.sent_at, call_due_at = c.due_at
    FROM operation_calls c WHERE c.operation_id = o.id;
UPDATE operations o SET call_recorded_at = o.updated_at
    WHERE NOT EXISTS (SELECT 1 FROM operation_calls c WHERE c.operation_id = o.id);
CREATE INDEX operations_call_unrecorded_idx ON operations (created_at) WHERE call_recorded_at IS NULL;
DROP TABLE operation_calls;
