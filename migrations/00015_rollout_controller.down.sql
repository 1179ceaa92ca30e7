DROP TABLE rollout_moves;
ALTER TABLE workflow_rollouts DROP COLUMN step_since;
ALTER TABLE workflow_rollouts DROP COLUMN step;
