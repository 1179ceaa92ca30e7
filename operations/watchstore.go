package operations

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// WatchPokeChannel is the PostgreSQL notification channel on which Reschedule tells the
// replica holding a task that its next poll moved (payload: operation id, a space, the new
// time in Unix milliseconds). A holder that misses one polls at its own schedule.
const WatchPokeChannel = "taskgate_watch_poke"

// Acquired is a task a watcher replica took into its hold.
type Acquired struct {
	Due
	// NextPollAt is when the task may be polled first: its stored next poll, or, when the
	// task was taken from a replica that stopped beating without handing it back, no sooner
	// than one poll interval after that replica's last possible poll.
	NextPollAt time.Time
}

// watchable is the condition of a task a watcher holds: still running, or terminal with its
// outcome not fetched.
const watchable = `(t.state IN ('working','input_required') OR t.result_state = 'pending')`

// AcquireDue takes up to n due tasks into replica's hold (FOR UPDATE SKIP LOCKED): tasks whose
// stored next poll comes within ahead that no live replica holds (the holder polls each when it
// falls due, so a replica taking tasks in every ahead has each in hand before its poll). A hold lasts while its replica beats
// (the heartbeat renews all of a replica's holds in one statement); lease bounds the hold of
// a replica that has no heartbeat row. A task taken from a replica that stopped beating
// without handing it back is scheduled no sooner than one poll interval (at least floor,
// defPoll when the server suggested none) after that replica's beats lapsed, the last moment
// it could have polled, so a takeover is never less polite than the replica it replaces. The
// poll count and next poll are not written here: the holder keeps them in memory and persists
// them with FlushProgress.
//
// A pass reads only what it may take: free tasks in next-poll order (tasks_free_due_idx), and
// the tasks of holders that stopped beating, found by walking the few distinct holders in
// tasks_lease_owner_idx. The tasks live holders keep, whose stored next poll stays at their
// take-in time, are never read (migration 00028).
func (s *Store) AcquireDue(ctx context.Context, replica string, n int, ahead, lease, floor, defPoll time.Duration) ([]Acquired, error) {
	rows, err := s.pool.Query(ctx, acquireDueSQL, acquireDueArgs(replica, n, ahead, lease, floor, defPoll)...)
	if err != nil {
		return nil, fmt.Errorf("acquire due tasks: %w", err)
	}
	tk, err := collectTaken(rows)
	if err != nil {
		return nil, err
	}
	return s.loadTaken(ctx, tk)
}

// acquireDueSQL is AcquireDue's statement (acquireDueArgs gives its arguments).
const acquireDueSQL = `
		WITH RECURSIVE holders(h) AS (
			SELECT min(t.lease_owner) FROM tasks t WHERE t.lease_owner IS NOT NULL
			UNION ALL
			SELECT (SELECT min(t.lease_owner) FROM tasks t WHERE t.lease_owner > holders.h) FROM holders WHERE holders.h IS NOT NULL),
		lapsed AS (
			SELECT h FROM holders WHERE h IS NOT NULL AND h <> $1
			  AND NOT EXISTS (SELECT 1 FROM watcher_replicas r WHERE r.replica = holders.h
			    AND r.beat_at + r.stale_after_ms * interval '1 millisecond' >= now())),
		free AS (
			SELECT t.operation_id, t.next_poll_at, NULL::text AS prev, NULL::timestamptz AS lease_expires_at
			FROM tasks t
			WHERE ` + watchable + ` AND t.lease_owner IS NULL
			  AND t.next_poll_at <= now() + $6 * interval '1 millisecond'
			ORDER BY t.next_poll_at
			LIMIT $2
			FOR UPDATE OF t SKIP LOCKED),
		orphaned AS (
			SELECT o.* FROM lapsed l CROSS JOIN LATERAL (
				SELECT t.operation_id, t.next_poll_at, t.lease_owner AS prev, t.lease_expires_at
				FROM tasks t
				WHERE t.lease_owner = l.h AND ` + watchable + `
				  AND t.next_poll_at <= now() + $6 * interval '1 millisecond'
				  AND (t.lease_expires_at IS NULL OR t.lease_expires_at < now() OR ` + ownerGoneT + `)
				ORDER BY t.next_poll_at
				LIMIT $2
				FOR UPDATE OF t SKIP LOCKED) o),
		due AS (
			SELECT d.operation_id, d.prev,
				CASE WHEN d.prev IS NOT NULL THEN coalesce(
					(SELECT r.beat_at + r.stale_after_ms * interval '1 millisecond' FROM watcher_replicas r WHERE r.replica = d.prev),
					d.lease_expires_at, now()) END AS fence
			FROM (SELECT * FROM orphaned UNION ALL SELECT * FROM free) d
			ORDER BY d.next_poll_at
			LIMIT $2)
		UPDATE tasks t SET lease_owner = $1, lease_expires_at = now() + $3 * interval '1 millisecond',
			next_poll_at = CASE WHEN due.fence IS NOT NULL AND ` + NextPollSQL + ` <= due.fence
				THEN due.fence + greatest(coalesce(t.poll_interval_ms, $5), $4) * interval '1 millisecond'
				ELSE ` + NextPollSQL + ` END,
			held_poll_at = NULL
		FROM due WHERE t.operation_id = due.operation_id
		  -- The ids as an index condition as well: the rows are then read by key whatever the
		  -- planner thinks of the join (a hash of every task when the ids follow the heap).
		  AND t.operation_id = ANY(ARRAY(SELECT operation_id FROM due))
		RETURNING t.operation_id, t.next_poll_at`

func acquireDueArgs(replica string, n int, ahead, lease, floor, defPoll time.Duration) []any {
	return []any{replica, n, lease.Milliseconds(), floor.Milliseconds(), defPoll.Milliseconds(), ahead.Milliseconds()}
}

// taken is a task acquireDueSQL took and its next poll.
type taken struct {
	id   string
	next time.Time
}

func collectTaken(rows pgx.Rows) ([]taken, error) {
	tk, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (taken, error) {
		var c taken
		return c, r.Scan(&c.id, &c.next)
	})
	if err != nil {
		return nil, fmt.Errorf("acquire due tasks: %w", err)
	}
	return tk, nil
}

// loadTaken reads what the watcher needs of the tasks taken.
func (s *Store) loadTaken(ctx context.Context, tk []taken) ([]Acquired, error) {
	if len(tk) == 0 {
		return nil, nil
	}
	ids := make([]string, len(tk))
	next := make(map[string]time.Time, len(tk))
	for i, c := range tk {
		ids[i], next[c.id] = c.id, c.next
	}
	ds, err := s.LoadDue(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]Acquired, 0, len(ds))
	for _, d := range ds {
		d.DueAt = next[d.ID]
		out = append(out, Acquired{Due: d, NextPollAt: next[d.ID]})
	}
	return out, nil
}

// ownerGoneT is true when the task's lease owner has a heartbeat row and stopped beating for
// longer than it announced: its holds pass to others however long their leases still run.
const ownerGoneT = `EXISTS (SELECT 1 FROM watcher_replicas r WHERE r.replica = t.lease_owner
	AND r.beat_at + r.stale_after_ms * interval '1 millisecond' < now())`

// LoadDue reads what a watcher needs of the given tasks in one query (dueColumns). DueAt is the
// stored next poll (zero when none).
func (s *Store) LoadDue(ctx context.Context, ids []string) ([]Due, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+dueColumns+`, `+NextPollSQL+` FROM operations o JOIN tasks t ON t.operation_id = o.id
		WHERE o.id = ANY($1::text[]::uuid[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("read held tasks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Due, error) {
		var next *time.Time
		op, err := scanDueWith(r, &next)
		d := Due{Operation: op}
		if next != nil {
			d.DueAt = *next
			op.Task.NextPollAt = next
		}
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("read held tasks: %w", err)
	}
	return out, nil
}

// NextPollSQL is a task's next poll (of the task row t): the later of the queue's next_poll_at
// and the next poll its holder last flushed (held_poll_at); none once the task needs no more
// polls. The holder's flush writes only the unindexed held_poll_at, so its updates are
// heap-only; next_poll_at moves when a task is taken, handed back, created or poked.
const NextPollSQL = `CASE WHEN t.next_poll_at IS NOT NULL THEN greatest(t.next_poll_at, t.held_poll_at) END`

// Progress is what a watcher persists of a held task in its periodic batch.
type Progress struct {
	// ID is the operation id.
	ID string
	// Polls are the status reads made since the stored count was last written.
	Polls int
	// NextPollAt is the next poll the holder scheduled.
	NextPollAt time.Time
}

// FlushProgress writes, in one statement per 5,000 tasks, the poll counts and next polls of
// tasks replica holds: the console shows them (lagging by at most the watcher's flush period)
// and a replica that takes a task over starts from them. The next polls go to held_poll_at,
// which no index covers, so these updates write no index entries (see NextPollSQL). Rows the
// replica no longer holds get only their poll counts.
func (s *Store) FlushProgress(ctx context.Context, replica string, ps []Progress) error {
	const chunk = 5000
	for len(ps) > 0 {
		part := ps[:min(chunk, len(ps))]
		ps = ps[len(part):]
		ids := make([]string, len(part))
		polls := make([]int64, len(part))
		next := make([]time.Time, len(part))
		for i, p := range part {
			ids[i], polls[i], next[i] = p.ID, int64(p.Polls), p.NextPollAt
		}
		if _, err := s.pool.Exec(ctx, flushProgressSQL, ids, polls, next, replica); err != nil {
			return fmt.Errorf("persist watch progress: %w", err)
		}
	}
	return nil
}

// flushProgressSQL adds $2 polls to the tasks $1 and stores their next polls $3 while replica
// $4 holds them. It reads each task by its key whatever the planner makes of the ids: planned
// for the thousand ids it was given, the join was a hash of every task of the ledger (a
// sequential scan, 25-50 ms a flush at 22,000 tasks, and linear in the ledger) whenever the
// connection's plan was a custom one. The arrays come through sub-selects, whose length the
// planner cannot see: it plans a lookup per id, which a flush of a few thousand ids always
// wants, on any ledger.
const flushProgressSQL = `UPDATE tasks t SET polls = (t.polls + u.n)::int,
		held_poll_at = CASE WHEN t.lease_owner = $4 AND ` + watchable + ` AND t.next_poll_at IS NOT NULL THEN u.next ELSE t.held_poll_at END
	FROM unnest((SELECT $1::text[]::uuid[]), (SELECT $2::bigint[]), (SELECT $3::timestamptz[])) AS u(id, n, next)
	WHERE t.operation_id = u.id`

// StillHeld returns which of ids replica still holds (after its beats lapsed, other replicas
// may have taken some).
func (s *Store) StillHeld(ctx context.Context, replica string, ids []string) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT operation_id FROM tasks WHERE operation_id = ANY($1::text[]::uuid[]) AND lease_owner = $2`, ids, replica)
	if err != nil {
		return nil, fmt.Errorf("check held tasks: %w", err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("check held tasks: %w", err)
	}
	out := make(map[string]bool, len(held))
	for _, id := range held {
		out[id] = true
	}
	return out, nil
}

// ReleaseFrom hands back the holds replica keeps under its name from an earlier run (a
// restart under the same name, after a crash): each such task is scheduled no sooner than one
// poll interval from now, since the earlier run may have polled it just before it died.
func (s *Store) ReleaseFrom(ctx context.Context, replica string, floor, defPoll time.Duration) error {
	if _, err := s.pool.Exec(ctx, `UPDATE tasks t SET lease_owner = NULL, lease_expires_at = NULL, held_poll_at = NULL,
			next_poll_at = CASE WHEN `+NextPollSQL+` <= now() THEN now() + greatest(coalesce(t.poll_interval_ms, $3), $2) * interval '1 millisecond'
				ELSE `+NextPollSQL+` END
		WHERE t.lease_owner = $1 AND t.next_poll_at IS NOT NULL`, replica, floor.Milliseconds(), defPoll.Milliseconds()); err != nil {
		return fmt.Errorf("hand back an earlier run's tasks: %w", err)
	}
	return nil
}
