DROP INDEX IF EXISTS task_envelopes_finished_at_idx;
