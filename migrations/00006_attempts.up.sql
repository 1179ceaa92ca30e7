-- Earlier attempts of an operation that was retried after a confirmed not_applied: the task row,
-- envelope and job run as they were when the retry replaced them. Evidence, never deleted.
CREATE TABLE operation_attempts (
    operation_id uuid        NOT NULL REFERENCES operations (id) ON DELETE CASCADE,
    attempt      integer     NOT NULL,
    route        text        NOT NULL,
    task         jsonb,
    envelope     jsonb,
    job          jsonb,
    archived_by  text        NOT NULL,
    archived_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (operation_id, attempt)
);
