-- Feature flags in flagd's definition format: the live copy of every flag and shared evaluator.
CREATE TABLE flags (
    key        text        PRIMARY KEY CHECK (key ~ '^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$'),
    definition jsonb       NOT NULL CHECK (jsonb_typeof(definition) = 'object'),
    updated_by text        NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE flag_evaluators (
    name       text        PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$'),
    definition jsonb       NOT NULL,
    updated_by text        NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- Every change of a flag or evaluator: who, when, the definition before and after, and why.
CREATE TABLE flag_history (
    id      bigserial   PRIMARY KEY,
    kind    text        NOT NULL DEFAULT 'flag' CHECK (kind IN ('flag', 'evaluator')),
    key     text        NOT NULL,
    before  jsonb,
    after   jsonb,
    actor   text        NOT NULL,
    reason  text        NOT NULL DEFAULT '',
    at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX flag_history_key ON flag_history (key, id DESC);

-- The kill switches: global, per workflow and per server. Their engaged set generates the
-- new-task-starts flag; the rows keep who engaged each and since when, for the drain gauge.
CREATE TABLE kill_switches (
    scope       text        NOT NULL CHECK (scope IN ('global', 'workflow', 'server')),
    name        text        NOT NULL DEFAULT '' CHECK ((scope = 'global') = (name = '')),
    engaged     boolean     NOT NULL,
    reason      text        NOT NULL DEFAULT '',
    actor       text        NOT NULL DEFAULT '',
    engaged_at  timestamptz,
    released_at timestamptz,
    -- A release waiting for a second person's approval (four-eyes policy).
    release_requested_by     text        NOT NULL DEFAULT '',
    release_requested_reason text        NOT NULL DEFAULT '',
    release_requested_at     timestamptz,
    PRIMARY KEY (scope, name)
);

INSERT INTO kill_switches (scope, name, engaged, reason, actor, engaged_at)
SELECT CASE WHEN workflow = '*' THEN 'global' ELSE 'workflow' END,
       CASE WHEN workflow = '*' THEN '' ELSE workflow END,
       engaged, reason, actor, CASE WHEN engaged THEN updated_at END
FROM rollout_kill_switches;

-- new-task-starts: true lets new Task starts through; each engaged switch is a variant of its
-- own (false) chosen by targeting, so the variant names the switch.
WITH v AS (
    SELECT 'kill-switch:' || scope || CASE WHEN name = '' THEN '' ELSE ':' || name END AS variant,
           CASE WHEN scope = 'global' THEN 'true'::jsonb
                ELSE jsonb_build_object('==', jsonb_build_array(jsonb_build_object('var', scope), name)) END AS cond,
           CASE scope WHEN 'global' THEN 0 WHEN 'workflow' THEN 1 ELSE 2 END AS ord, name
    FROM kill_switches WHERE engaged
)
INSERT INTO flags (key, definition, updated_by)
SELECT 'new-task-starts', jsonb_build_object(
    'state', 'ENABLED',
    'variants', '{"allowed": true}'::jsonb || coalesce((SELECT jsonb_object_agg(variant, false) FROM v), '{}'::jsonb),
    'defaultVariant', 'allowed',
    'targeting', CASE WHEN NOT EXISTS (SELECT 1 FROM v) THEN '{}'::jsonb ELSE jsonb_build_object('if',
        (SELECT jsonb_agg(x ORDER BY ord, name, k) FROM v, LATERAL (VALUES (0, cond), (1, to_jsonb(variant))) AS p(k, x))
        || '["allowed"]'::jsonb) END),
    'migration';
INSERT INTO flag_history (key, after, actor, reason)
SELECT key, definition, 'migration', 'kill switches moved into flags' FROM flags;

DROP TABLE rollout_kill_switches;
