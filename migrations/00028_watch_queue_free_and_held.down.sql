CREATE INDEX tasks_due_idx ON tasks (next_poll_at)
    WHERE state IN ('working', 'input_required') OR result_state = 'pending';
DROP INDEX tasks_lease_owner_idx;
DROP INDEX tasks_free_due_idx;
