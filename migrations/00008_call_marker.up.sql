-- The call marker: the ledger says a call is being sent before it is sent, and when its answer
-- was recorded. An operation sent and never recorded is found by the recovery sweep.
-- Domain outcomes that say what happened: no_effect (read-only work), not_run (the work never
-- ran), unverified (no verifier and no manual verification asked).
ALTER TABLE operations
    ADD COLUMN call_sent_at     timestamptz,
    -- When the call's answer is due at the latest (sent + the call's budget).
    ADD COLUMN call_due_at      timestamptz,
    ADD COLUMN call_recorded_at timestamptz;
ALTER TABLE operations DROP CONSTRAINT operations_domain_outcome_check;
ALTER TABLE operations ADD CONSTRAINT operations_domain_outcome_check
    CHECK (domain_outcome IN ('pending', 'applied', 'not_applied', 'compensated', 'unknown', 'no_effect', 'not_run', 'unverified'));

-- Rows written before the marker: a task still creating may have been sent; every other row's
-- call was recorded.
UPDATE operations o SET call_sent_at = o.created_at, call_due_at = o.created_at
    WHERE EXISTS (SELECT 1 FROM tasks t WHERE t.operation_id = o.id AND t.state = 'creating');
UPDATE operations SET call_recorded_at = updated_at WHERE call_sent_at IS NULL;


-- The sweep's queue: calls sent and not recorded.
CREATE INDEX operations_call_unrecorded_idx ON operations (created_at) WHERE call_recorded_at IS NULL;

-- An envelope whose server text was altered to be stored (NUL, invalid UTF-8) says so.
ALTER TABLE task_envelopes ADD COLUMN text_replaced boolean NOT NULL DEFAULT false;
