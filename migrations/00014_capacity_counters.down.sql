DROP INDEX IF EXISTS reconciliation_items_opened_at_idx;
DROP INDEX IF EXISTS tasks_terminal_at_idx;
DROP INDEX IF EXISTS tasks_open_idx;
DROP TRIGGER IF EXISTS tasks_free_capacity ON tasks;
DROP FUNCTION IF EXISTS taskgate_free_capacity();
DROP TABLE IF EXISTS workflow_in_flight;
