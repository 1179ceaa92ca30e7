ALTER TABLE task_envelopes DROP COLUMN text_replaced;
DROP INDEX operations_call_unrecorded_idx;
UPDATE operations SET domain_outcome = 'unknown' WHERE domain_outcome IN ('no_effect', 'not_run', 'unverified');
ALTER TABLE operations DROP CONSTRAINT operations_domain_outcome_check;
ALTER TABLE operations ADD CONSTRAINT operations_domain_outcome_check
    CHECK (domain_outcome IN ('pending', 'applied', 'not_applied', 'compensated', 'unknown'));
ALTER TABLE operations DROP COLUMN call_recorded_at, DROP COLUMN call_due_at, DROP COLUMN call_sent_at;
