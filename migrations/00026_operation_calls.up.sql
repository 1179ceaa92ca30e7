-- Calls whose answer is not recorded yet move out of the operations row into a table of their
-- own. Writing "recorded" on the operations row (call_recorded_at, a column of a partial index's
-- predicate) made every start's second commit rewrite the row and all seven of its index entries;
-- now a start inserts a row here with its ledger row (sent_at set when the call is sent right
-- after the commit) and deletes it when the answer is recorded. The table holds only calls in
-- flight, so the recovery sweep reads it whole.
CREATE TABLE operation_calls (
    operation_id uuid        PRIMARY KEY REFERENCES operations (id) ON DELETE CASCADE,
    -- When the call was marked sending (NULL: the row is written, the call not sent yet).
    sent_at      timestamptz,
    -- When the call's answer is due at the latest (sent + the call's budget).
    due_at       timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CHECK ((sent_at IS NULL) = (due_at IS NULL))
);

INSERT INTO operation_calls (operation_id, sent_at, due_at, created_at)
    SELECT id, call_sent_at, CASE WHEN call_sent_at IS NOT NULL THEN coalesce(call_due_at, call_sent_at) END, created_at
    FROM operations WHERE call_recorded_at IS NULL AND route IN ('task', 'sync', 'job_api');

DROP INDEX operations_call_unrecorded_idx;
ALTER TABLE operations DROP COLUMN call_sent_at, DROP COLUMN call_due_at, DROP COLUMN call_recorded_at;
