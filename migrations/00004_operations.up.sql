-- Domain-operation ledger, the Tasks Taskgate started and watches, and what it observed of them.
-- Task state (what the MCP server said) and domain outcome (what the system of record confirmed)
-- are separate columns and never merged.

CREATE TABLE operations (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant           text        NOT NULL,
    workflow         text        NOT NULL,
    idempotency_key  text        NOT NULL,
    request_sha256   text        NOT NULL,
    actor            text        NOT NULL,
    object_ref       text        NOT NULL DEFAULT '',
    object_version   text        NOT NULL DEFAULT '',
    intended_effect  text        NOT NULL DEFAULT '',
    arguments        jsonb       NOT NULL DEFAULT '{}',
    route            text        NOT NULL CHECK (route IN ('task', 'sync', 'job_api', 'handoff', 'reject')),
    reason_code      text        NOT NULL,
    reason           text        NOT NULL,
    declare_extension boolean    NOT NULL DEFAULT false,
    policy_sha256    text        NOT NULL DEFAULT '',
    domain_outcome   text        NOT NULL DEFAULT 'pending'
                     CHECK (domain_outcome IN ('pending', 'applied', 'not_applied', 'compensated', 'unknown')),
    -- attention says why a person must look (e.g. needs_reconciliation); attention_reason is the
    -- reason code (create_unacknowledged, sync_timeout, task_unobservable, task_expired, ...).
    attention        text,
    attention_reason text,
    -- The first answer given for the key, replayed to a repeat of the same request.
    response_status  integer,
    response_body    jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant, workflow, idempotency_key)
);
CREATE INDEX operations_list_idx ON operations (created_at DESC, id DESC);
CREATE INDEX operations_tenant_list_idx ON operations (tenant, created_at DESC, id DESC);
CREATE INDEX operations_attention_idx ON operations (attention) WHERE attention IS NOT NULL;

-- One row per Task-route operation (and per sync call, kept for its state): the task as last
-- observed, and what the watchers need to resume it after a restart.
CREATE TABLE tasks (
    operation_id     uuid        PRIMARY KEY REFERENCES operations (id) ON DELETE CASCADE,
    server           text        NOT NULL,
    tool             text        NOT NULL,
    era              text        NOT NULL DEFAULT '',
    task_id          text,
    session_id       text        NOT NULL DEFAULT '',
    capabilities     jsonb,
    server_name      text        NOT NULL DEFAULT '',
    server_version   text        NOT NULL DEFAULT '',
    state            text        NOT NULL
                     CHECK (state IN ('creating', 'create_unacknowledged', 'working', 'input_required',
                                      'completed', 'failed', 'cancelled', 'unobservable', 'expired')),
    status_message   text        NOT NULL DEFAULT '',
    tool_error       boolean     NOT NULL DEFAULT false,
    server_created_at timestamptz,
    server_updated_at timestamptz,
    requested_ttl_ms bigint,
    ttl_ms           bigint,
    poll_interval_ms bigint,
    deadline         timestamptz,
    next_poll_at     timestamptz,
    lease_owner      text,
    lease_expires_at timestamptz,
    polls            integer     NOT NULL DEFAULT 0,
    failure_kind     text,
    first_failure_at timestamptz,
    -- none: nothing to fetch yet; pending: terminal, outcome not fetched; fetched; failed.
    result_state     text        NOT NULL DEFAULT 'none' CHECK (result_state IN ('none', 'pending', 'fetched', 'failed')),
    cancel_requested_at timestamptz,
    cancel_requested_by text,
    cancel_reason    text,
    cancel_acknowledged_at timestamptz,
    terminal_at      timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX tasks_server_task_idx ON tasks (server, task_id) WHERE task_id IS NOT NULL;
-- The watchers' queue: due tasks in order.
CREATE INDEX tasks_due_idx ON tasks (next_poll_at)
    WHERE state IN ('working', 'input_required') OR result_state = 'pending';
CREATE INDEX tasks_state_idx ON tasks (state);

-- Every observed status change: source poll, notification, operator or create.
CREATE TABLE task_timeline (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation_id uuid        NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    at           timestamptz NOT NULL DEFAULT now(),
    source       text        NOT NULL CHECK (source IN ('poll', 'notification', 'operator', 'create', 'watcher')),
    state        text        NOT NULL,
    message      text        NOT NULL DEFAULT ''
);
CREATE INDEX task_timeline_op_idx ON task_timeline (operation_id, id);

-- Observed status changes the task state machine forbids. The stored state never moves back.
CREATE TABLE transition_violations (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation_id uuid        NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    task_id      text        NOT NULL,
    from_state   text        NOT NULL,
    to_state     text        NOT NULL,
    source       text        NOT NULL,
    observed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX transition_violations_at_idx ON transition_violations (observed_at DESC);

-- Questions a server asked for a task: field names and types, never the values.
CREATE TABLE pending_inputs (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation_id    uuid        NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    input_key       text        NOT NULL,
    method          text        NOT NULL,
    mode            text        NOT NULL DEFAULT '',
    message         text        NOT NULL DEFAULT '',
    fields          jsonb       NOT NULL DEFAULT '[]',
    redaction_class text        NOT NULL DEFAULT 'confidential',
    state           text        NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'answered', 'moved_on', 'expired')),
    requested_at    timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz,
    answered_at     timestamptz,
    answered_by     text,
    answer_action   text,
    UNIQUE (operation_id, input_key)
);

-- The bounded record of a terminal task's result: never an unbounded payload.
CREATE TABLE task_envelopes (
    operation_id    uuid        PRIMARY KEY REFERENCES operations (id) ON DELETE CASCADE,
    status          text        NOT NULL,
    era             text        NOT NULL,
    tool_error      boolean     NOT NULL DEFAULT false,
    error_code      integer,
    started_at      timestamptz,
    finished_at     timestamptz,
    status_message  text        NOT NULL DEFAULT '',
    result_size     integer     NOT NULL DEFAULT 0,
    result_sha256   text        NOT NULL DEFAULT '',
    preview         text        NOT NULL DEFAULT '',
    evidence_handle text        NOT NULL DEFAULT '',
    result          jsonb,
    fetched_at      timestamptz NOT NULL DEFAULT now()
);

-- The job_api route: the incumbent job the operation was sent to, followed to its end.
CREATE TABLE job_runs (
    operation_id    uuid        PRIMARY KEY REFERENCES operations (id) ON DELETE CASCADE,
    base_url        text        NOT NULL,
    job_id          text,
    status          text        NOT NULL DEFAULT 'submitting',
    receipt_id      text        NOT NULL DEFAULT '',
    error           text        NOT NULL DEFAULT '',
    next_poll_at    timestamptz,
    lease_owner     text,
    lease_expires_at timestamptz,
    polls           integer     NOT NULL DEFAULT 0,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_runs_due_idx ON job_runs (next_poll_at) WHERE status IN ('queued', 'running');

-- Operations handed to a person (the handoff route).
CREATE TABLE handoff_items (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation_id uuid        NOT NULL UNIQUE REFERENCES operations (id) ON DELETE CASCADE,
    opened_at    timestamptz NOT NULL DEFAULT now(),
    closed_at    timestamptz
);

-- Minimal reconciliation queue rows: one open item per operation whose outcome is unknown.
-- The reconciliation package (issue 8) owns claims, verifiers and resolutions and extends this.
CREATE TABLE reconciliation_items (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation_id uuid        NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    reason       text        NOT NULL,
    opened_at    timestamptz NOT NULL DEFAULT now(),
    closed_at    timestamptz
);
CREATE UNIQUE INDEX reconciliation_items_open_idx ON reconciliation_items (operation_id) WHERE closed_at IS NULL;
