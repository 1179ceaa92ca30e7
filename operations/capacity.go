package operations

import (
	"context"
	"errors"
	"fmt"
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
			fd := Decision{Route: Route(c.Decision.Route), ReasonCode: string(c.Decision.Reason), Reason: c.Decision.Sentence}
			return s.insertFor(in.Workflow, base, fd)
		}
		return base, &CapacityError{Workflow: in.Workflow.Name, InFlight: c.InFlight, Limit: c.Limit, RetryAfter: c.RetryAfter,
			Reason: c.Decision.Sentence}
	}
}

// insertFor completes base with the first row of decision d's route.
func (s *Service) insertFor(wf *config.Workflow, base Insert, d Decision) (Insert, error) {
	ins := base
	ins.Decision, ins.Task, ins.JobBaseURL, ins.Handoff, ins.RejectReply, ins.Capacity = d, nil, "", false, nil, nil
	switch d.Route {
	case RouteTask:
		var ttl *time.Duration
		if wf.MaxTTL.Duration > 0 {
			v := wf.MaxTTL.Duration
			ttl = &v
		}
		ins.Task = &NewTaskRow{Server: wf.Server, Tool: wf.Tool, RequestedTTL: ttl}
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
	default:
		return Insert{}, fmt.Errorf("route %s: unknown route %q", wf.Name, d.Route)
	}
	return ins, nil
}

// applyCapacity runs in.Capacity inside the start transaction: it takes the workflow's
// capacity lock (held to commit, so concurrent starts of one workflow count one after the
// other), leaves a repeat of a known key to the insert's conflict handling, and counts the
// workflow's non-terminal tasks.
func applyCapacity(ctx context.Context, tx pgx.Tx, in Insert) (Insert, error) {
	r := in.Request
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('taskgate.capacity:' || $1, 0))`, r.Workflow); err != nil {
		return in, fmt.Errorf("capacity lock of %s: %w", r.Workflow, err)
	}
	var known bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM operations WHERE tenant = $1 AND workflow = $2 AND idempotency_key = $3)`,
		r.Tenant, r.Workflow, r.IdempotencyKey).Scan(&known); err != nil {
		return in, fmt.Errorf("capacity of %s: %w", r.Workflow, err)
	}
	if known {
		return in, nil
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM tasks t JOIN operations o ON o.id = t.operation_id
		WHERE o.workflow = $1 AND t.state IN ('creating', 'working', 'input_required')`, r.Workflow).Scan(&n); err != nil {
		return in, fmt.Errorf("count tasks in flight of %s: %w", r.Workflow, err)
	}
	return in.Capacity(n)
}
