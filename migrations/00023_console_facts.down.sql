DROP TABLE server_poll_hours;

-- Handoffs closed by the up migration stay closed: their work was settled.

ALTER TABLE operations DROP CONSTRAINT operations_failure_reason_check;
ALTER TABLE operations DROP COLUMN failure_reason_by;
ALTER TABLE operations DROP COLUMN failure_reason;

-- Back to the five sources 00004 admits, each line under the nearest one it was stored as
-- before: the verifier's checks as watcher, the server's replies to a cancel as poll (its
-- absence as watcher), a refused answer as operator. The person's name stays in the message.
ALTER TABLE task_timeline DROP CONSTRAINT task_timeline_actor_check;
ALTER TABLE task_timeline DROP CONSTRAINT task_timeline_source_check;
UPDATE task_timeline SET source = 'watcher' WHERE source = 'verifier';
UPDATE task_timeline SET source = 'watcher' WHERE source = 'cancel_reply' AND state = 'cancel_unanswered';
UPDATE task_timeline SET source = 'poll' WHERE source = 'cancel_reply';
UPDATE task_timeline SET source = 'operator' WHERE source = 'answer_reply';
ALTER TABLE task_timeline DROP COLUMN actor;
ALTER TABLE task_timeline ADD CONSTRAINT task_timeline_source_check CHECK (source IN ('poll', 'notification', 'operator', 'create', 'watcher'));
