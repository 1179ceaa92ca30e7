-- Capability manifests: one row per version of what a server offers (a new row whenever the
-- fingerprint differs from the server's latest), and one row per probe (reachability, session
-- evidence, who asked).
CREATE TABLE manifests (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    server           text        NOT NULL,
    fingerprint      text        NOT NULL,
    era              text        NOT NULL,
    protocol_version text        NOT NULL,
    server_name      text        NOT NULL,
    server_version   text        NOT NULL,
    body             jsonb       NOT NULL,
    canonical        jsonb       NOT NULL,
    previous_id      bigint      REFERENCES manifests (id),
    first_seen_at    timestamptz NOT NULL,
    last_seen_at     timestamptz NOT NULL
);
CREATE INDEX manifests_server_id ON manifests (server, id DESC);

CREATE TABLE manifest_probes (
    id                      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    server                  text        NOT NULL,
    probed_at               timestamptz NOT NULL,
    ok                      boolean     NOT NULL,
    error                   text        NOT NULL DEFAULT '',
    manifest_id             bigint      REFERENCES manifests (id),
    session_id_sha256       text        NOT NULL DEFAULT '',
    raw_capabilities_sha256 text        NOT NULL DEFAULT '',
    trigger                 text        NOT NULL CHECK (trigger IN ('start', 'schedule', 'operator', 'cli')),
    actor                   text        NOT NULL DEFAULT ''
);
CREATE INDEX manifest_probes_server_id ON manifest_probes (server, id DESC);
CREATE INDEX manifest_probes_server_ok_id ON manifest_probes (server, id DESC) WHERE ok;

-- Rollout state per workflow. NULL stage / canary_percent = the policy file's default.
-- A manifest change pauses promotion with the reason recorded here.
CREATE TABLE workflow_rollouts (
    workflow                text        PRIMARY KEY,
    stage                   text        CHECK (stage IN ('off', 'shadow', 'canary', 'full')),
    canary_percent          integer     CHECK (canary_percent BETWEEN 0 AND 100),
    promotion_paused_reason text        NOT NULL DEFAULT '',
    promotion_paused_at     timestamptz,
    updated_at              timestamptz NOT NULL DEFAULT now(),
    updated_by              text        NOT NULL DEFAULT ''
);

-- Gate verdicts bind to the manifest fingerprint they were earned on; a changed fingerprint
-- voids them (voided_at, void_reason) so promotion needs fresh ones.
CREATE TABLE gate_verdicts (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow             text        NOT NULL,
    server               text        NOT NULL,
    suite                text        NOT NULL,
    passed               boolean     NOT NULL,
    manifest_fingerprint text        NOT NULL,
    build                text        NOT NULL DEFAULT '',
    evidence             jsonb,
    created_at           timestamptz NOT NULL DEFAULT now(),
    voided_at            timestamptz,
    void_reason          text        NOT NULL DEFAULT ''
);
CREATE INDEX gate_verdicts_live ON gate_verdicts (workflow, id DESC) WHERE voided_at IS NULL;

-- The kill switch until the OpenFeature provider replaces it: a row per workflow, '*' for all.
CREATE TABLE rollout_kill_switches (
    workflow   text        PRIMARY KEY,
    engaged    boolean     NOT NULL,
    reason     text        NOT NULL DEFAULT '',
    actor      text        NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now()
);
