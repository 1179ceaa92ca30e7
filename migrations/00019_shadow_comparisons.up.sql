-- The shadow stage's comparisons: for a read-only workflow the same call also run as a Task
-- and its result and state compared with the incumbent's; for the others the Task route's
-- projected decision compared with what the incumbent did, without a second execution.
CREATE TABLE rollout_shadow_comparisons (
    operation_id            uuid        PRIMARY KEY REFERENCES operations (id) ON DELETE CASCADE,
    workflow                text        NOT NULL,
    kind                    text        NOT NULL CHECK (kind IN ('run', 'projection')),
    state                   text        NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'compared', 'failed')),
    replica                 text        NOT NULL DEFAULT '',
    incumbent_route         text        NOT NULL DEFAULT '',
    incumbent_state         text        NOT NULL DEFAULT '',
    incumbent_tool_error    boolean     NOT NULL DEFAULT false,
    incumbent_result_sha256 text        NOT NULL DEFAULT '',
    shadow_route            text        NOT NULL DEFAULT '',
    shadow_reason           text        NOT NULL DEFAULT '',
    shadow_task_id          text        NOT NULL DEFAULT '',
    shadow_state            text        NOT NULL DEFAULT '',
    shadow_tool_error       boolean     NOT NULL DEFAULT false,
    shadow_result_sha256    text        NOT NULL DEFAULT '',
    divergences             jsonb       NOT NULL DEFAULT '[]',
    error                   text        NOT NULL DEFAULT '',
    started_at              timestamptz NOT NULL DEFAULT now(),
    compared_at             timestamptz
);
-- What sent each operation to its route: stage, canary step and percent, the canary flag and the
-- tenant's bucket (the console's rollout context on every operation row).
ALTER TABLE operations ADD COLUMN route_context jsonb;

CREATE INDEX rollout_shadow_comparisons_workflow ON rollout_shadow_comparisons (workflow, started_at DESC);
