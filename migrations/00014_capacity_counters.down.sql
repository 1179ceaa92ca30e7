DROP INDEX IF EXISTS tasks_open_idx;
DROP TRIGGER IF EXISTS tasks_free_capacity ON tasks;
DROP FUNCTION IF EXISTS taskgate_free_capacity();
DROP TABLE IF EXISTS workflow_in_flight;
