CREATE TABLE rollout_kill_switches (
    workflow   text        PRIMARY KEY,
    engaged    boolean     NOT NULL,
    reason     text        NOT NULL DEFAULT '',
    actor      text        NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO rollout_kill_switches (workflow, engaged, reason, actor, updated_at)
SELECT CASE WHEN scope = 'global' THEN '*' ELSE name END, engaged, reason, actor,
       coalesce(engaged_at, released_at, now())
FROM kill_switches WHERE scope IN ('global', 'workflow');
DROP TABLE kill_switches;
DROP TABLE flag_history;
DROP TABLE flag_evaluators;
DROP TABLE flags;
