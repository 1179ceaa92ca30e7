DROP TABLE reconciliation_batches;
DROP INDEX operations_pending_idx;
DROP TABLE outcome_checks;
DROP TABLE verified_outcomes;
DROP TABLE outcome_verifications;
DROP INDEX reconciliation_items_claimed_idx;
DROP INDEX reconciliation_items_verify_idx;
DROP INDEX reconciliation_items_open_age_idx;
DROP INDEX reconciliation_items_queue_idx;
ALTER TABLE reconciliation_items
    DROP COLUMN tenant, DROP COLUMN workflow, DROP COLUMN detail, DROP COLUMN state, DROP COLUMN attempts,
    DROP COLUMN next_verify_at, DROP COLUMN verify_owner, DROP COLUMN verify_lease_expires_at,
    DROP COLUMN claimed_by, DROP COLUMN claimed_at, DROP COLUMN claim_expires_at, DROP COLUMN resolution,
    DROP COLUMN resolution_reason, DROP COLUMN note, DROP COLUMN evidence_url, DROP COLUMN closed_by,
    DROP COLUMN batch_id, DROP COLUMN retried_at, DROP COLUMN retried_by;
