-- Gate runs: what was tested, what it was bound to, how it ended; their cases with evidence;
-- and the queue of runs to repeat after a change, taken by one replica under a lease.
CREATE TABLE gate_runs (
    id                    bigserial PRIMARY KEY,
    workflow              text NOT NULL DEFAULT '',
    server                text NOT NULL,
    started_by            text NOT NULL,
    era                   text NOT NULL DEFAULT '',
    server_name           text NOT NULL DEFAULT '',
    server_version        text NOT NULL DEFAULT '',
    manifest_fingerprint  text NOT NULL DEFAULT '',
    deviation_fingerprint text NOT NULL,
    deviations            jsonb NOT NULL,
    deviation_diff        jsonb NOT NULL DEFAULT '[]',
    build                 text NOT NULL,
    pins                  jsonb NOT NULL DEFAULT '{}',
    pins_key              text NOT NULL DEFAULT '',
    verdict               text NOT NULL CHECK (verdict IN ('pass', 'fail', 'inconclusive')),
    hard_failures         text[] NOT NULL DEFAULT '{}',
    passed                int NOT NULL DEFAULT 0,
    failed                int NOT NULL DEFAULT 0,
    inconclusive          int NOT NULL DEFAULT 0,
    error                 text NOT NULL DEFAULT '',
    started_at            timestamptz NOT NULL,
    finished_at           timestamptz NOT NULL,
    voided_at             timestamptz,
    voided_reason         text NOT NULL DEFAULT ''
);
CREATE INDEX gate_runs_server_idx ON gate_runs (server, id DESC);
CREATE INDEX gate_runs_workflow_idx ON gate_runs (workflow, id DESC);

CREATE TABLE gate_cases (
    run_id      bigint NOT NULL REFERENCES gate_runs (id) ON DELETE CASCADE,
    position    int NOT NULL,
    suite       text NOT NULL,
    name        text NOT NULL,
    verdict     text NOT NULL CHECK (verdict IN ('pass', 'fail', 'inconclusive')),
    hard        text NOT NULL DEFAULT '',
    reason      text NOT NULL,
    started_at  timestamptz NOT NULL,
    duration_ms bigint NOT NULL,
    evidence    jsonb NOT NULL,
    PRIMARY KEY (run_id, position)
);

CREATE TABLE gate_queue (
    id          bigserial PRIMARY KEY,
    workflow    text NOT NULL,
    server      text NOT NULL,
    reason      text NOT NULL,
    queued_at   timestamptz NOT NULL DEFAULT now(),
    lease_owner text,
    lease_until timestamptz,
    done_at     timestamptz,
    run_id      bigint REFERENCES gate_runs (id) ON DELETE SET NULL
);
CREATE UNIQUE INDEX gate_queue_open_idx ON gate_queue (workflow, server) WHERE done_at IS NULL;
