package operations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/rollout"
)

// ErrAtCapacity: the workflow's concurrency cap is reached and its policy answers 429; nothing
// was written. Start returns it wrapped in a *CapacityError that says when to retry.
var ErrAtCapacity = errors.New("concurrency cap reached")

// CapacityError is Start's answer when the workflow's concurrency cap is reached and its
// backpressure is "429": no ledger row was written, so the same idempotency key may be sent
// again after RetryAfter.
type CapacityError struct {
	// Workflow is the capped workflow.
	Workflow string
	// InFlight and Limit are what was compared.
	InFlight, Limit int
	// RetryAfter is how long the caller should wait (the workflow's retry_after).
	RetryAfter time.Duration
	// Reason says the same in a sentence.
	Reason string
}

func (e *CapacityError) Error() string { return e.Reason }

// Unwrap makes errors.Is(err, ErrAtCapacity) hold.
func (e *CapacityError) Unwrap() error { return ErrAtCapacity }

// RetryAfterSeconds is the Retry-After header value: whole seconds, at least 1.
func (e *CapacityError) RetryAfterSeconds() int {
	return max(1, int((e.RetryAfter+time.Second-1)/time.Second))
}

// capacityCheck returns the check CreateOperation runs for a Task-route start of a capped
// workflow, inside the start transaction with the workflow's non-terminal tasks counted under a
// per-workflow lock. It applies rollout.CheckCapacity: below the cap the insert stands; at the
// cap the policy's fallback is written instead (checked against the live connection's tools, so
// a tool whose mode is required is never plain-called), or nothing is written and a
// *CapacityError says when to retry.
func (s *Service) capacityCheck(in RouteInput, d Decision, base Insert) func(inFlight int) (Insert, error) {
	return func(inFlight int) (Insert, error) {
		rin := rollout.Input{Workflow: *in.Workflow, ManifestState: rollout.ManifestMissing}
		if in.Conn != nil {
			if m, err := manifests.FromInfo(in.Workflow.Server, in.Conn.Info(), in.Conn.Tools(), s.cfg.Now()); err == nil {
				rin.Manifest, rin.ManifestState = m, rollout.ManifestFresh
			}
		}
		c := rollout.CheckCapacity(rin, rollout.Decision{Route: rollout.Route(d.Route), Reason: rollout.Reason(d.ReasonCode),
			Sentence: d.Reason, DeclareExtension: d.DeclareExtension}, inFlight)
		switch c.Outcome {
		case rollout.CapacityAllowed:
			return base, nil
		case rollout.CapacityFallback:
			fd := Decision{Route: Route(c.Decision.Route), ReasonCode: string(c.Decision.Reason), Reason: c.Decision.Sentence, Context: d.Context}
			return s.insertFor(in.Workflow, base, fd, in.Conn != nil)
		}
		return base, &CapacityError{Workflow: in.Workflow.Name, InFlight: c.InFlight, Limit: c.Limit, RetryAfter: c.RetryAfter,
			Reason: c.Decision.Sentence}
	}
}

// insertFor completes base with the first row of decision d's route. connected says the
// server's connection is open, so a Task or sync call is sent as soon as the row commits.
func (s *Service) insertFor(wf *config.Workflow, base Insert, d Decision, connected bool) (Insert, error) {
	ins := base
	ins.Decision, ins.Task, ins.JobBaseURL, ins.Handoff, ins.RejectReply, ins.Capacity, ins.Sending = d, nil, "", false, nil, nil, 0
	switch d.Route {
	case RouteTask:
		var ttl *time.Duration
		if wf.MaxTTL.Duration > 0 {
			v := wf.MaxTTL.Duration
			ttl = &v
		}
		ins.Task = &NewTaskRow{Server: wf.Server, Tool: wf.Tool, RequestedTTL: ttl}
		if connected {
			ins.Sending = wf.Budgets.Create.Timeout.Duration
		}
	case RouteJobAPI:
		base, err := s.cfg.Servers.JobAPIURL(wf.Fallback.JobAPI)
		if err != nil {
			return Insert{}, fmt.Errorf("job API of %s: %w", wf.Name, err)
		}
		ins.JobBaseURL = base
	case RouteHandoff:
		ins.Handoff = true
	case RouteReject:
		ins.RejectReply = &StartResponse{Route: RouteReject, ReasonCode: d.ReasonCode, Reason: d.Reason, DomainOutcome: OutcomeNotRun}
	case RouteSync:
		if connected {
			ins.Sending = wf.Fallback.MaxDuration.Duration
		}
	default:
		return Insert{}, fmt.Errorf("route %s: unknown route %q", wf.Name, d.Route)
	}
	return ins, nil
}

// openTaskStates are the task states that hold a slot of the workflow's cap.
const openTaskStates = `('creating', 'working', 'input_required')`

// capacitySlot is a slot of a workflow's cap reserved for one start. The reservation is also a
// row of capacity_slots: the start's transaction deletes it when it writes the task (take), and
// settle gives the slot back with the row otherwise, so a slot whose start died in between is
// found by ReclaimCapacity.
type capacitySlot struct {
	store    *Store
	workflow string
	id       int64
}

// slotID is the reservation's row for the start's task insert, nil without a slot.
func (c *capacitySlot) slotID() *int64 {
	if c == nil {
		return nil
	}
	return &c.id
}

func (c *capacitySlot) settle(ctx context.Context, kept bool) {
	if c == nil || kept {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	b := &pgx.Batch{}
	asyncCommit(b)
	b.Queue(`WITH d AS (DELETE FROM capacity_slots WHERE id = $1 RETURNING workflow)
		UPDATE workflow_in_flight w SET in_flight = greatest(w.in_flight - 1, 0) FROM d WHERE w.workflow = d.workflow`, c.id)
	if err := c.store.pool.SendBatch(ctx, b).Close(); err != nil {
		// The slot stays taken until ReclaimCapacity finds its row.
		slog.Default().Warn("capacity slot not released", "workflow", c.workflow, "err", err)
	}
}

// asyncCommit makes the transaction of batch b (the statements of one batch run in one
// transaction) commit without waiting for its WAL to reach disk. Reservations and give-backs
// of a cap's slots commit this way: the counter row's lock is held only until the commit is
// written, not until it is flushed, so a workflow's concurrent starts queue on it for
// microseconds. It is safe because the WAL is one sequence: the start that uses a slot commits
// synchronously after its reservation, which flushes the reservation too, and a crash can only
// lose reservations (with their capacity_slots rows, together) whose starts never committed.
func asyncCommit(b *pgx.Batch) {
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
}

// errSlotReclaimed: the start's reservation was given back by ReclaimCapacity before the start
// committed (it took longer than the grace); the start writes nothing and may be sent again.
var errSlotReclaimed = errors.New("the start took too long: its slot of the concurrency cap was reclaimed; nothing was written, send it again")

// applyCapacity runs in.Capacity for a start of a capped workflow. One slot is reserved on the
// workflow's counter row in its own statement, outside the start transaction and committed
// without waiting for a flush (asyncCommit): concurrent starts of a workflow never wait for each
// other's commit, and no start gets past the cap. The same statement folds in the releases of
// tasks that ended (capacity_releases) and records the reservation in capacity_slots. At the cap
// nothing is reserved and in.Capacity chooses the policy's backpressure. A start that turns out
// to repeat a known key gives its slot back. The counter row is created on first use, and
// recounted from the ledger (open tasks plus reservations not yet committed) when the cap in
// force differs from the one it was counted for; a start below the cap costs one round trip.
func (s *Store) applyCapacity(ctx context.Context, in Insert) (Insert, *capacitySlot, error) {
	r := in.Request
	limit := in.CapacityLimit
	var id int64
	// reserve folds in the releases of tasks that ended and takes a slot below the cap; found
	// is false when the counter is missing or was counted for another cap.
	reserve := func() (n int, granted, found bool, err error) {
		var slot *int64
		// Reservations of concurrent starts share a round trip and a commit (Store.reservations);
		// in one transaction each statement sees the counter as the one before left it.
		err = s.reservations.row(ctx, func(row pgx.Row) error {
			// A batch refused as a whole reads the row again when it is sent alone.
			n, granted, found, slot = 0, false, false, nil
			err := row.Scan(&n, &granted, &slot)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			found = err == nil
			return err
		},
			// The counter row is locked first; the releases are folded in only under that lock.
			`WITH w AS (SELECT in_flight FROM workflow_in_flight WHERE workflow = $1 AND cap_seen = $2 FOR UPDATE),
				r AS (DELETE FROM capacity_releases WHERE workflow = $1 AND EXISTS (SELECT 1 FROM w) RETURNING 1),
				f AS (SELECT greatest(w.in_flight - (SELECT count(*) FROM r), 0) AS n FROM w),
				u AS (UPDATE workflow_in_flight SET in_flight = f.n + CASE WHEN f.n < $2 THEN 1 ELSE 0 END
					FROM f WHERE workflow_in_flight.workflow = $1 RETURNING f.n, f.n < $2 AS granted),
				s AS (INSERT INTO capacity_slots (workflow) SELECT $1 FROM u WHERE u.granted RETURNING id)
			SELECT u.n, u.granted, (SELECT id FROM s) FROM u`, r.Workflow, limit)
		if err != nil {
			return 0, false, false, err
		}
		if granted && slot != nil {
			id = *slot
		}
		return n, granted && slot != nil, found, nil
	}
	n, ok, found, err := reserve()
	if err == nil && !found {
		// The counter is missing or was counted for another cap: count the open tasks and the
		// reservations not committed yet; the releases the count already reflects go.
		count := `((SELECT count(*) FROM tasks t JOIN operations o ON o.id = t.operation_id
			WHERE o.workflow = $1 AND t.state IN ` + openTaskStates + `) + (SELECT count(*) FROM capacity_slots WHERE workflow = $1))`
		if _, err = s.pool.Exec(ctx, `WITH x AS (INSERT INTO workflow_in_flight (workflow, in_flight, cap_seen) SELECT $1, `+count+`, $2
				ON CONFLICT (workflow) DO UPDATE SET in_flight = `+count+`, cap_seen = $2, counted_at = now()
				WHERE workflow_in_flight.cap_seen <> $2 RETURNING 1)
			DELETE FROM capacity_releases WHERE workflow = $1 AND EXISTS (SELECT 1 FROM x)`, r.Workflow, limit); err == nil {
			n, ok, _, err = reserve()
		}
	}
	if err != nil {
		return in, nil, fmt.Errorf("reserve a slot of %s: %w", r.Workflow, err)
	}
	if !ok {
		out, err := in.Capacity(max(n, limit))
		return out, nil, err
	}
	slot := &capacitySlot{store: s, workflow: r.Workflow, id: id}
	out, err := in.Capacity(n)
	if err != nil {
		slot.settle(ctx, false)
		return out, nil, err
	}
	return out, slot, nil
}

// InFlight returns how many open tasks and uncommitted reservations the workflow's cap
// counts now (its counter less the releases not folded in yet); ok is false without a counter.
func (s *Store) InFlight(ctx context.Context, workflow string) (n int, ok bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT greatest(in_flight - (SELECT count(*) FROM capacity_releases WHERE workflow = $1), 0)
		FROM workflow_in_flight WHERE workflow = $1`, workflow).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return n, err == nil, err
}

// Capacity recount defaults.
const (
	// DefaultSlotGrace is how long a reservation may stay uncommitted before ReclaimCapacity
	// takes it for leaked: far beyond a start transaction, which runs no MCP call.
	DefaultSlotGrace = 2 * time.Minute
	// DefaultRecountInterval is the pause between recounts.
	DefaultRecountInterval = 30 * time.Second
)

// ReclaimCapacity gives back the slots of concurrency caps whose reservation is older than
// grace and was neither committed into a task nor given back: the process that took them died
// between the reservation and its start's commit. It returns how many it gave back. A start
// still holding such a reservation finds it gone and writes nothing, so the cap stays exact.
func (s *Store) ReclaimCapacity(ctx context.Context, grace time.Duration) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `WITH d AS (DELETE FROM capacity_slots WHERE reserved_at < now() - $1 * interval '1 millisecond' RETURNING workflow),
			c AS (SELECT workflow, count(*) AS n FROM d GROUP BY workflow),
			u AS (UPDATE workflow_in_flight w SET in_flight = greatest(w.in_flight - c.n, 0) FROM c WHERE w.workflow = c.workflow)
		SELECT coalesce(sum(n), 0) FROM c`, grace.Milliseconds()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("reclaim capacity slots: %w", err)
	}
	return n, nil
}

// RecountCapacity calls ReclaimCapacity every interval until ctx ends (zero values take
// DefaultRecountInterval and DefaultSlotGrace), logging what it gave back.
func (s *Store) RecountCapacity(ctx context.Context, interval, grace time.Duration, logger *slog.Logger) {
	if interval <= 0 {
		interval = DefaultRecountInterval
	}
	if grace <= 0 {
		grace = DefaultSlotGrace
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		switch n, err := s.ReclaimCapacity(ctx, grace); {
		case err != nil && ctx.Err() == nil:
			logger.Warn("capacity recount failed", "err", err)
		case n > 0:
			logger.Warn("capacity slots reclaimed from starts that never committed", "slots", n)
		}
	}
}
