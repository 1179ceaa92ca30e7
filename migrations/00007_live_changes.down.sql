DROP TRIGGER reconciliation_items_live ON reconciliation_items;
DROP TRIGGER pending_inputs_live ON pending_inputs;
DROP TRIGGER task_timeline_live ON task_timeline;
DROP TRIGGER operations_live_update ON operations;
DROP TRIGGER operations_live_insert ON operations;
DROP FUNCTION taskgate_notify_change();
