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

-- A task leaving the open states gives its cap's slot back by appending a release, not by
-- updating the counter row: that update held the row's lock until the ending transaction's
-- commit was flushed, so every reservation of the workflow queued behind every task that ended.
-- A reservation folds the releases in (deletes them and lowers the counter in its own short
-- statement); a recount deletes those its count already reflects.
CREATE TABLE capacity_releases (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow text   NOT NULL
);
CREATE INDEX capacity_releases_workflow_idx ON capacity_releases (workflow);

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
    IF EXISTS (SELECT 1 FROM workflow_in_flight WHERE workflow = w) THEN
        INSERT INTO capacity_releases (workflow) VALUES (w);
    END IF;
    RETURN NULL;
END
$$;
