-- The watchers' queue in two parts, so a pass costs what it takes, not what is held.
-- A holder polls from memory and flushes only held_poll_at, so a held task's next_poll_at stays
-- at its take-in time, in the past: in tasks_due_idx every held task stayed "due", and each
-- pass of every replica walked all of them to skip them (O(held) per pass, four times a second).
-- Free tasks (no holder) are found in next-poll order in tasks_free_due_idx; held tasks are found
-- by holder in tasks_lease_owner_idx, which a pass reads once per holder to find the ones that
-- stopped beating, and which hand-backs (WHERE lease_owner = …) use as well. Neither index
-- covers held_poll_at or polls, so the holders' flush stays heap-only.
CREATE INDEX tasks_free_due_idx ON tasks (next_poll_at)
    WHERE (state IN ('working', 'input_required') OR result_state = 'pending') AND lease_owner IS NULL;
CREATE INDEX tasks_lease_owner_idx ON tasks (lease_owner, next_poll_at) WHERE lease_owner IS NOT NULL;
DROP INDEX tasks_due_idx;
