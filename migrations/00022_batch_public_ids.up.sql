-- Bulk reconciliation batches get a random public id (a version 4 UUID) that pages, links,
-- exports and audit rows use, so nobody can count how many bulk actions were run; the bigint
-- stays the row's internal key. Existing batches each get their own id as the column is added.
ALTER TABLE reconciliation_batches ADD COLUMN public_id uuid NOT NULL DEFAULT gen_random_uuid();
CREATE UNIQUE INDEX reconciliation_batches_public_id_idx ON reconciliation_batches (public_id);

-- Audit rows naming a batch by its internal key, as their target or as the "batch" of an
-- item's change, name it by its public id. The append-only rule is lifted for these
-- statements only, inside the migration.
ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only;
UPDATE audit_log a SET target = 'reconciliation-batch:' || b.public_id
    FROM reconciliation_batches b WHERE a.target = 'reconciliation-batch:' || b.id;
UPDATE audit_log a SET after = jsonb_set(a.after, '{batch}', to_jsonb(b.public_id::text))
    FROM reconciliation_batches b
    WHERE a.action LIKE 'reconcile.%' AND jsonb_typeof(a.after -> 'batch') = 'number' AND (a.after ->> 'batch')::bigint = b.id;
ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only;
