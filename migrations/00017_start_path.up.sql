-- Live updates without a notification in every commit. PostgreSQL lets one notifying commit
-- through at a time, so the ledger's triggers no longer call pg_notify: they append the change
-- (area, and the tenant or the operation it belongs to) to live_changes, and the console's
-- change listeners publish what accumulated, one notification per area and tenant a batch, from
-- their own short transactions (audit.Listen). The table is unlogged: after a crash of the
-- database nothing is owed to event streams that were cut anyway.
CREATE UNLOGGED TABLE live_changes (
    area         text NOT NULL,
    tenant       text,
    operation_id uuid
);

CREATE OR REPLACE FUNCTION taskgate_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'operations' THEN
        INSERT INTO live_changes (area, tenant) VALUES (TG_ARGV[0], NEW.tenant);
    ELSE
        INSERT INTO live_changes (area, operation_id) VALUES (TG_ARGV[0], NEW.operation_id);
    END IF;
    RETURN NULL;
END
$$;

-- Slots of a concurrency cap reserved by a start that has not committed its task yet. The
-- reservation adds a row here in the same statement that takes the slot on the counter; the
-- start's transaction deletes it when it writes the task, and a start that writes no task deletes
-- it when it gives the slot back. A row left behind by a process that died in between is a
-- leaked slot: the periodic recount (operations.Store.ReclaimCapacity) gives it back.
CREATE TABLE capacity_slots (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow    text        NOT NULL,
    reserved_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX capacity_slots_workflow_idx ON capacity_slots (workflow);
CREATE INDEX capacity_slots_reserved_at_idx ON capacity_slots (reserved_at);

-- The reconciliation queue filtered by an open state, oldest first.
CREATE INDEX reconciliation_items_state_queue_idx ON reconciliation_items (state, opened_at, id) WHERE closed_at IS NULL;
