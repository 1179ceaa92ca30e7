UPDATE tasks SET next_poll_at = held_poll_at
    WHERE next_poll_at IS NOT NULL AND held_poll_at > next_poll_at;
ALTER TABLE tasks RESET (fillfactor);
ALTER TABLE tasks DROP COLUMN held_poll_at;
