-- The reconciliation queue's open items by tenant, workflow, reason, state and the UTC hour they
-- were opened, for the bulk action's count (reconcile.Store.Preview) without counting every open
-- item (an age filter counts the items of one hour at most). An item's own row
-- says everything counted, so a trigger appends +1/-1 rows from the row it changes (an update
-- of one item waits for the one before, so its OLD is what was counted) to an append-only
-- table with no index: no insert waits on another. A reader adds the appended rows to the
-- counts; the console's compactor (operations.Compactor) folds them in.
CREATE TABLE queue_counts (
    tenant   text        NOT NULL,
    workflow text        NOT NULL,
    reason   text        NOT NULL,
    state    text        NOT NULL,
    hour     timestamptz NOT NULL,
    items    bigint      NOT NULL,
    PRIMARY KEY (tenant, workflow, reason, state, hour)
);
CREATE TABLE queue_count_deltas (
    tenant   text        NOT NULL,
    workflow text        NOT NULL,
    reason   text        NOT NULL,
    state    text        NOT NULL,
    hour     timestamptz NOT NULL,
    items    integer     NOT NULL
);
INSERT INTO queue_counts (tenant, workflow, reason, state, hour, items)
    SELECT tenant, workflow, reason, state, date_trunc('hour', opened_at, 'UTC'), count(*) FROM reconciliation_items
    WHERE closed_at IS NULL GROUP BY 1, 2, 3, 4, 5;

CREATE FUNCTION taskgate_queue_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.closed_at IS NULL THEN
        INSERT INTO queue_count_deltas VALUES (OLD.tenant, OLD.workflow, OLD.reason, OLD.state, date_trunc('hour', OLD.opened_at, 'UTC'), -1);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.closed_at IS NULL THEN
        INSERT INTO queue_count_deltas VALUES (NEW.tenant, NEW.workflow, NEW.reason, NEW.state, date_trunc('hour', NEW.opened_at, 'UTC'), 1);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER reconciliation_items_queue_count AFTER INSERT OR DELETE ON reconciliation_items
    FOR EACH ROW EXECUTE FUNCTION taskgate_queue_count();
CREATE TRIGGER reconciliation_items_queue_count_update AFTER UPDATE OF tenant, workflow, reason, state, opened_at, closed_at ON reconciliation_items
    FOR EACH ROW WHEN (OLD.tenant IS DISTINCT FROM NEW.tenant OR OLD.workflow IS DISTINCT FROM NEW.workflow
        OR OLD.reason IS DISTINCT FROM NEW.reason OR OLD.state IS DISTINCT FROM NEW.state OR OLD.opened_at IS DISTINCT FROM NEW.opened_at
        OR (OLD.closed_at IS NULL) <> (NEW.closed_at IS NULL))
    EXECUTE FUNCTION taskgate_queue_count();

-- The queue's filters in its order (opened_at, public_id): a state open or closed, a workflow
-- or a reason among the open items, the closed items, and every item.
DROP INDEX reconciliation_items_state_queue_idx;
CREATE INDEX reconciliation_items_state_queue_idx ON reconciliation_items (state, opened_at, public_id);
CREATE INDEX reconciliation_items_workflow_queue_idx ON reconciliation_items (workflow, opened_at, public_id) WHERE closed_at IS NULL;
CREATE INDEX reconciliation_items_reason_queue_idx ON reconciliation_items (reason, opened_at, public_id) WHERE closed_at IS NULL;
CREATE INDEX reconciliation_items_closed_queue_idx ON reconciliation_items (opened_at, public_id) WHERE closed_at IS NOT NULL;
DROP INDEX reconciliation_items_opened_at_idx;
CREATE INDEX reconciliation_items_opened_at_idx ON reconciliation_items (opened_at, public_id);

-- The inbox: open questions, the soonest deadline first; those the task left unanswered, newest
-- first.
CREATE INDEX pending_inputs_open_idx ON pending_inputs (expires_at, requested_at, id) WHERE state = 'open';
CREATE INDEX pending_inputs_moved_on_idx ON pending_inputs (requested_at DESC, id DESC)
    WHERE state IN ('moved_on', 'expired') AND answered_at IS NULL;
