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
