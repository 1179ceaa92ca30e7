-- Live updates: every change an operator would want to see without reloading signals on the
-- channel the console's event streams listen to (audit.ChangeChannel), whoever wrote it: the
-- start path, a watcher on any replica, the verifier or a person. The payload names the area and
-- the tenant, so each stream passes on only what its viewer may see.
CREATE FUNCTION taskgate_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER operations_live_insert AFTER INSERT ON operations
    FOR EACH ROW EXECUTE FUNCTION taskgate_notify_change('operation');
CREATE TRIGGER operations_live_update AFTER UPDATE OF domain_outcome, attention ON operations
    FOR EACH ROW WHEN (OLD.domain_outcome IS DISTINCT FROM NEW.domain_outcome OR OLD.attention IS DISTINCT FROM NEW.attention)
    EXECUTE FUNCTION taskgate_notify_change('operation');
CREATE TRIGGER task_timeline_live AFTER INSERT ON task_timeline
    FOR EACH ROW EXECUTE FUNCTION taskgate_notify_change('operation');
CREATE TRIGGER pending_inputs_live AFTER INSERT OR UPDATE ON pending_inputs
    FOR EACH ROW EXECUTE FUNCTION taskgate_notify_change('operation');
CREATE TRIGGER reconciliation_items_live AFTER INSERT OR UPDATE ON reconciliation_items
    FOR EACH ROW EXECUTE FUNCTION taskgate_notify_change('reconcile');
