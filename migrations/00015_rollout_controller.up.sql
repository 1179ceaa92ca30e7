-- The rollout controller: the canary step in force (an index into the plan's steps), when the
-- current stage or step began (for the hold time), and every move with its reason.
ALTER TABLE workflow_rollouts ADD COLUMN step integer NOT NULL DEFAULT 0 CHECK (step >= 0);
ALTER TABLE workflow_rollouts ADD COLUMN step_since timestamptz;

CREATE TABLE rollout_moves (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow      text        NOT NULL,
    action        text        NOT NULL CHECK (action IN ('promote', 'pause', 'resume', 'rollback', 'auto_pause', 'drift_pause')),
    from_stage    text        NOT NULL,
    from_step     integer     NOT NULL,
    to_stage      text        NOT NULL,
    to_step       integer     NOT NULL,
    to_percent    integer     NOT NULL,
    actor         text        NOT NULL,
    reason        text        NOT NULL,
    detail        jsonb,
    at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX rollout_moves_workflow_id ON rollout_moves (workflow, id DESC);
