UPDATE workflow_in_flight w SET in_flight = greatest(w.in_flight - r.n, 0)
    FROM (SELECT workflow, count(*) AS n FROM capacity_releases GROUP BY workflow) r WHERE r.workflow = w.workflow;
DROP TABLE capacity_releases;
CREATE OR REPLACE FUNCTION taskgate_free_capacity() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w text;
BEGIN
    IF OLD.state NOT IN ('creating', 'working', 'input_required') THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.state IN ('creating', 'working', 'input_required') THEN
        RETURN NULL;
    END IF;
    SELECT workflow INTO w FROM operations WHERE id = OLD.operation_id;
    UPDATE workflow_in_flight SET in_flight = greatest(in_flight - 1, 0) WHERE workflow = w;
    RETURN NULL;
END
$$;
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
