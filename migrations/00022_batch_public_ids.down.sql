ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only;
UPDATE audit_log a SET after = jsonb_set(a.after, '{batch}', to_jsonb(b.id))
    FROM reconciliation_batches b
    WHERE a.action LIKE 'reconcile.%' AND jsonb_typeof(a.after -> 'batch') = 'string' AND a.after ->> 'batch' = b.public_id::text;
UPDATE audit_log a SET target = 'reconciliation-batch:' || b.id
    FROM reconciliation_batches b WHERE a.target = 'reconciliation-batch:' || b.public_id;
ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only;

DROP INDEX reconciliation_batches_public_id_idx;
ALTER TABLE reconciliation_batches DROP COLUMN public_id;
