-- Reconciliation: outcome verifications (the system of record's answers and receipts), the
-- queue of items a verifier could not settle, claims as leases, resolutions and bulk batches.
-- Extends the minimal reconciliation_items of 00004.

ALTER TABLE reconciliation_items
    ADD COLUMN tenant           text,
    ADD COLUMN workflow         text,
    ADD COLUMN detail           text        NOT NULL DEFAULT '',
    -- verifying: automatic re-verification with backoff; needs_person: a person must settle it;
    -- settled: a verifier answered; resolved: a person resolved it.
    ADD COLUMN state            text        NOT NULL DEFAULT 'verifying'
                                CHECK (state IN ('verifying', 'needs_person', 'settled', 'resolved')),
    ADD COLUMN attempts         integer     NOT NULL DEFAULT 0,
    ADD COLUMN next_verify_at   timestamptz DEFAULT now(),
    ADD COLUMN verify_owner     text,
    ADD COLUMN verify_lease_expires_at timestamptz,
    ADD COLUMN claimed_by       text,
    ADD COLUMN claimed_at       timestamptz,
    ADD COLUMN claim_expires_at timestamptz,
    ADD COLUMN resolution       text CHECK (resolution IN ('applied', 'not_applied', 'compensated', 'duplicate')),
    ADD COLUMN resolution_reason text,
    ADD COLUMN note             text,
    ADD COLUMN evidence_url     text,
    ADD COLUMN closed_by        text,
    ADD COLUMN batch_id         bigint,
    ADD COLUMN retried_at       timestamptz,
    ADD COLUMN retried_by       text;

UPDATE reconciliation_items r SET tenant = o.tenant, workflow = o.workflow FROM operations o WHERE o.id = r.operation_id;
UPDATE reconciliation_items SET state = 'resolved' WHERE closed_at IS NOT NULL;
ALTER TABLE reconciliation_items ALTER COLUMN tenant SET NOT NULL, ALTER COLUMN workflow SET NOT NULL;

-- The queue's filters: open items of a tenant, oldest first (keyset on opened_at, id).
CREATE INDEX reconciliation_items_queue_idx ON reconciliation_items (tenant, opened_at, id) WHERE closed_at IS NULL;
CREATE INDEX reconciliation_items_open_age_idx ON reconciliation_items (opened_at, id) WHERE closed_at IS NULL;
-- The re-verification service's due items.
CREATE INDEX reconciliation_items_verify_idx ON reconciliation_items (next_verify_at) WHERE state = 'verifying';
CREATE INDEX reconciliation_items_claimed_idx ON reconciliation_items (claimed_by) WHERE closed_at IS NULL;

-- Every answer an outcome verifier gave (or a person's resolution): the evidence.
CREATE TABLE outcome_verifications (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation_id uuid        NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    item_id      bigint      REFERENCES reconciliation_items (id) ON DELETE SET NULL,
    tenant       text        NOT NULL,
    -- http, job_api, none (no verifier) or person.
    source       text        NOT NULL CHECK (source IN ('http', 'job_api', 'none', 'person')),
    -- task_terminal, sync_answer, job_answer, reverify, resolution.
    trigger      text        NOT NULL,
    answer       text        NOT NULL CHECK (answer IN ('applied', 'not_applied', 'compensated', 'duplicate', 'unknown')),
    receipt      text        NOT NULL DEFAULT '',
    detail       text        NOT NULL DEFAULT '',
    http_status  integer,
    attempt      integer     NOT NULL DEFAULT 1,
    at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outcome_verifications_op_idx ON outcome_verifications (operation_id, id);

-- The verified outcome of an operation: what, from which source, with which receipt.
CREATE TABLE verified_outcomes (
    operation_id uuid        PRIMARY KEY REFERENCES operations (id) ON DELETE CASCADE,
    outcome      text        NOT NULL CHECK (outcome IN ('applied', 'not_applied', 'compensated')),
    source       text        NOT NULL,
    receipt      text        NOT NULL DEFAULT '',
    verified_at  timestamptz NOT NULL DEFAULT now()
);

-- Operations whose outcome is to be verified after a terminal task, a sync answer or a job
-- answer: one row each, claimed by the reconcilers with FOR UPDATE SKIP LOCKED.
CREATE TABLE outcome_checks (
    operation_id     uuid        PRIMARY KEY REFERENCES operations (id) ON DELETE CASCADE,
    tenant           text        NOT NULL,
    trigger          text        NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    next_at          timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    lease_expires_at timestamptz,
    done_at          timestamptz
);
CREATE INDEX outcome_checks_due_idx ON outcome_checks (next_at) WHERE done_at IS NULL;
-- Finding operations still waiting for a verdict.
CREATE INDEX operations_pending_idx ON operations (created_at) WHERE domain_outcome = 'pending';

-- Bulk actions run by filter, each an audited batch.
CREATE TABLE reconciliation_batches (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    actor      text        NOT NULL,
    action     text        NOT NULL,
    filter     jsonb       NOT NULL,
    matched    integer     NOT NULL,
    applied    integer     NOT NULL,
    skipped    integer     NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
