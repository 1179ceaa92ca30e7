-- Reconciliation items get a random public id (a version 4 UUID) that pages, links, exports and
-- audit targets use, so nobody can count items or guess another tenant's; the bigint stays the
-- row's internal key. Existing rows each get their own id as the column is added.
ALTER TABLE reconciliation_items ADD COLUMN public_id uuid NOT NULL DEFAULT gen_random_uuid();
CREATE UNIQUE INDEX reconciliation_items_public_id_idx ON reconciliation_items (public_id);
-- The queue's keyset order breaks ties on the public id.
DROP INDEX reconciliation_items_queue_idx;
CREATE INDEX reconciliation_items_queue_idx ON reconciliation_items (tenant, opened_at, public_id) WHERE closed_at IS NULL;
DROP INDEX reconciliation_items_open_age_idx;
CREATE INDEX reconciliation_items_open_age_idx ON reconciliation_items (opened_at, public_id) WHERE closed_at IS NULL;

-- Audit rows naming an item by its internal key name it by its public id, so their links keep
-- resolving. The append-only rule is lifted for this statement only, inside the migration.
ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only;
UPDATE audit_log a SET target = 'reconciliation:' || r.public_id
    FROM reconciliation_items r WHERE a.target = 'reconciliation:' || r.id;
ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only;

-- Keys of this installation, made once by the first replica that needs one and shared by all.
CREATE TABLE install_keys (
    name       text        PRIMARY KEY,
    key        bytea       NOT NULL CHECK (length(key) >= 32),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- What a person answered, as keyed hashes (HMAC-SHA256 under the answer_echo install key) of
-- the normalised values, never the values: every replica recording a result or a status
-- message of the operation cuts out the text whose hash matches. kind text: a value's words,
-- case-folded, with its length in characters to slide over the server's text; kind digits: a
-- number's digits.
CREATE TABLE answer_echoes (
    operation_id uuid        NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    kind         text        NOT NULL CHECK (kind IN ('text', 'digits')),
    mac          bytea       NOT NULL CHECK (length(mac) = 32),
    runes        integer     NOT NULL CHECK (runes > 0),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (operation_id, kind, mac)
);

-- The anti-forgery token is derived from the session cookie (a keyed hash of it), so the
-- database holds nothing that forges a form.
ALTER TABLE sessions DROP COLUMN csrf_token;
