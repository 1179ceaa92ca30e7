-- The timeline names the real source of each line. Besides a status read (poll), a
-- notification, the call to the server (create) and Taskgate's own background work (watcher),
-- the source is now one of: the outcome verifier (verifier), the server's reply to a cancel
-- request, or its absence (cancel_reply), the server's reply to a person's answer that was
-- not taken (answer_reply), or a person (operator), whose name is in its own column, actor.
ALTER TABLE task_timeline DROP CONSTRAINT task_timeline_source_check;
ALTER TABLE task_timeline ADD COLUMN actor text;

-- Old rows, where they can be told apart: the verifier's checks (stored as operator before they
-- were stored as watcher), the server's replies to a cancel (stored as poll, earlier as
-- operator, with the status it carried also as operator), a refused answer, and the person's
-- name in a person's line, read from the message each action wrote.
UPDATE task_timeline SET source = 'verifier'
    WHERE source IN ('operator', 'watcher') AND state IN ('verified', 'unverified', 'no_effect_to_verify', 'manual_verification');
UPDATE task_timeline SET source = 'cancel_reply'
    WHERE (source IN ('poll', 'operator') AND state IN ('cancel_acknowledged', 'cancel_refused'))
       OR (source IN ('watcher', 'operator') AND state = 'cancel_unanswered')
       OR (source = 'operator' AND state IN ('creating', 'working', 'input_required', 'completed', 'failed', 'cancelled',
                                             'create_unacknowledged', 'unobservable', 'expired'));
UPDATE task_timeline SET source = 'answer_reply' WHERE source = 'operator' AND state = 'input_refused';
UPDATE task_timeline SET actor = CASE state
        WHEN 'cancel_requested' THEN substring(message FROM '^cancel requested by (.+?): ')
        WHEN 'input_answered' THEN substring(message FROM '^input .* answered \((?:accept|decline|cancel)\) by (.+)$')
        WHEN 'retry' THEN substring(message FROM '^retry requested by (.+) after not_applied; same idempotency key$')
        WHEN 'reconciled' THEN substring(message FROM '^resolved [a-z_]+? by (.+?) \(')
    END
    WHERE source = 'operator';

ALTER TABLE task_timeline ADD CONSTRAINT task_timeline_source_check CHECK (source IN
    ('poll', 'notification', 'create', 'watcher', 'verifier', 'cancel_reply', 'answer_reply', 'operator'));
-- Only a person's line names a person.
ALTER TABLE task_timeline ADD CONSTRAINT task_timeline_actor_check CHECK (actor IS NULL OR source = 'operator');

-- Why the work failed, in the words of whoever said so, kept on the operation so that every
-- list can show it without reading another table per row, and so that it outlives the
-- envelope's retention: the first line of the tool's error text or the JSON-RPC error
-- message, else the final status message (by 'tool' or 'server'), or a failed job's error
-- (by 'job_api'). NULL when the work did not fail.
ALTER TABLE operations ADD COLUMN failure_reason text;
ALTER TABLE operations ADD COLUMN failure_reason_by text CHECK (failure_reason_by IN ('tool', 'server', 'job_api'));
ALTER TABLE operations ADD CONSTRAINT operations_failure_reason_check CHECK ((failure_reason IS NULL) = (failure_reason_by IS NULL));

UPDATE operations o SET failure_reason = left(r.line, 200) || CASE WHEN char_length(r.line) > 200 THEN '…' ELSE '' END,
        failure_reason_by = CASE WHEN r.tool_error THEN 'tool' ELSE 'server' END
    FROM (SELECT e.operation_id, e.tool_error,
                 btrim(split_part(btrim(CASE WHEN btrim(e.preview, E' \t\r\n') <> '' THEN e.preview ELSE e.status_message END, E' \t\r\n'),
                                  E'\n', 1), E' \t\r\n') AS line
          FROM task_envelopes e
          WHERE e.tool_error OR e.error_code IS NOT NULL OR e.status = 'failed') r
    WHERE r.operation_id = o.id AND r.line <> '';
UPDATE operations o SET failure_reason = left(btrim(j.error, E' \t\r\n'), 200) || CASE WHEN char_length(btrim(j.error, E' \t\r\n')) > 200 THEN '…' ELSE '' END,
        failure_reason_by = 'job_api'
    FROM job_runs j WHERE j.operation_id = o.id AND j.status = 'failed' AND btrim(j.error, E' \t\r\n') <> '' AND o.failure_reason IS NULL;

-- A handoff is settled when the outcome of its operation is: handoffs whose operation has no
-- open reconciliation item and an outcome a person or a verifier settled are closed (nothing
-- closed them before, so each stayed "needs a person" for ever).
UPDATE handoff_items h SET closed_at = coalesce((SELECT max(r.closed_at) FROM reconciliation_items r WHERE r.operation_id = h.operation_id), now())
    WHERE h.closed_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM reconciliation_items r WHERE r.operation_id = h.operation_id AND r.closed_at IS NULL)
      AND EXISTS (SELECT 1 FROM operations o WHERE o.id = h.operation_id AND o.domain_outcome IN ('applied', 'not_applied', 'compensated'));

-- Status reads per server, tenant and hour, as the watchers made them: counted in memory and
-- added here every few seconds by each replica (replicas share rows; an upsert adds). The
-- Servers page's poll-load chart reads it. Kept a week (the janitor removes older hours).
CREATE TABLE server_poll_hours (
    server  text        NOT NULL,
    tenant  text        NOT NULL,
    -- the start of the hour (UTC)
    hour    timestamptz NOT NULL,
    ok      bigint      NOT NULL DEFAULT 0 CHECK (ok >= 0),
    errors  bigint      NOT NULL DEFAULT 0 CHECK (errors >= 0),
    PRIMARY KEY (server, tenant, hour)
);
CREATE INDEX server_poll_hours_hour_idx ON server_poll_hours (hour);
