-- Watcher replicas beat here; a lease whose owner stopped beating for longer than the
-- timeout it announced is taken over before the lease itself runs out.
CREATE TABLE watcher_replicas (
    replica          text        PRIMARY KEY,
    started_at       timestamptz NOT NULL DEFAULT now(),
    beat_at          timestamptz NOT NULL DEFAULT now(),
    stale_after_ms   bigint      NOT NULL CHECK (stale_after_ms > 0)
);

-- What kind of violation was seen (a forbidden status change, or an answer naming another
-- task) and what the server said, bounded.
ALTER TABLE transition_violations
    ADD COLUMN kind   text NOT NULL DEFAULT 'transition',
    ADD COLUMN detail text NOT NULL DEFAULT '';
