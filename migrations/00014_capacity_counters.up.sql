-- Concurrency caps without a per-workflow lock held to commit: one counter row per capped
-- workflow. A start reserves a slot with a conditional UPDATE in its own short transaction
-- (in_flight < cap), so concurrent starts of a workflow never wait for each other's MCP call or
-- commit; a start that writes no task gives its slot back. The trigger below frees the slot
-- when the task leaves the open states (creating, working, input_required) or is deleted.
-- cap_seen is the cap the count was taken for: a changed cap recounts from the ledger.
CREATE TABLE workflow_in_flight (
    workflow   text        PRIMARY KEY,
    in_flight  integer     NOT NULL CHECK (in_flight >= 0),
    cap_seen   integer     NOT NULL,
    counted_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION taskgate_free_capacity() RETURNS trigger LANGUAGE plpgsql AS $$
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
    UPDATE workflow_in_flight SET in_flight = greatest(in_flight - 1, 0) WHERE workflow = w;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_free_capacity AFTER UPDATE OF state OR DELETE ON tasks
    FOR EACH ROW EXECUTE FUNCTION taskgate_free_capacity();

-- The recount's index: open tasks by operation (the cap counts them per workflow).
CREATE INDEX tasks_open_idx ON tasks (operation_id) WHERE state IN ('creating', 'working', 'input_required');

-- The overview's hourly chart counts tasks ended and items opened per hour: range scans, not a
-- read of the whole table per hour.
CREATE INDEX IF NOT EXISTS tasks_terminal_at_idx ON tasks (terminal_at) WHERE terminal_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS reconciliation_items_opened_at_idx ON reconciliation_items (opened_at);
