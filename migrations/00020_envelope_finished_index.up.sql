-- The overview's hourly chart counts synchronous calls that answered in each hour by the time
-- their envelope says the call finished.
CREATE INDEX IF NOT EXISTS task_envelopes_finished_at_idx ON task_envelopes (finished_at) WHERE finished_at IS NOT NULL;
