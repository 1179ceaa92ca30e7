-- The next poll a replica holding a task scheduled, written by its periodic flush. It is not
-- indexed, so the flush's row updates are heap-only (no index entry written per poll); the
-- indexed next_poll_at stays the watchers' queue and moves only when a task is taken, handed
-- back, observed to change, or poked. A task's next poll is the later of the two.
ALTER TABLE tasks ADD COLUMN held_poll_at timestamptz;
-- Room on each page for the flush's new row versions (heap-only updates need it).
ALTER TABLE tasks SET (fillfactor = 50);
