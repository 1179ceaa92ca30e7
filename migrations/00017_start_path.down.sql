DROP INDEX reconciliation_items_state_queue_idx;
DROP TABLE capacity_slots;

CREATE OR REPLACE FUNCTION taskgate_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t text;
BEGIN
    IF TG_TABLE_NAME = 'operations' THEN
        t := NEW.tenant;
    ELSE
        SELECT tenant INTO t FROM operations WHERE id = NEW.operation_id;
    END IF;
    PERFORM pg_notify('taskgate_changes', json_build_object('area', TG_ARGV[0], 'tenant', coalesce(t, ''))::text);
    RETURN NULL;
END
$$;

DROP TABLE live_changes;
