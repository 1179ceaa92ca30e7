package operations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/config"
)

// ErrNotRetryable: only an operation whose outcome is confirmed not_applied may be retried.
var ErrNotRetryable = errors.New("operation is not retryable: its outcome is not not_applied")

// ErrRetryRouteChanged: a retry is decided afresh (kill switch, stage, live capabilities) and
// refused when that decision no longer picks the route the operation was recorded on. A kill
// switch therefore blocks a retry that would start a new Task.
var ErrRetryRouteChanged = errors.New("retry refused: the route decided now differs from the recorded route")

// Retry sends an operation whose domain outcome was confirmed not_applied again, once, on its
// recorded route and through the same call path as Start, with the same operation id as the
// idempotency key (tool argument, _meta and the job API's Idempotency-Key). The system of
// record applies an effect at most once per key, so a retry never causes a second effect even
// if the first call did apply. The route is decided again first (the kill switch, the stage and
// the server's live capabilities may have changed) and the retry is refused with
// ErrRetryRouteChanged unless that decision picks the recorded route. The previous attempt's
// task row and envelope are archived in operation_attempts, never deleted; the timeline is kept
// and the retry is written to it. Reconciliation calls it (reconcile.Retrier) after a person
// resolved the operation's item as not_applied.
func (s *Service) Retry(ctx context.Context, id, by string) error {
	op, err := s.cfg.Store.Get(ctx, id)
	if err != nil {
		return err
	}
	if op.DomainOutcome != OutcomeNotApplied {
		return fmt.Errorf("retry %s (outcome %s): %w", id, op.DomainOutcome, ErrNotRetryable)
	}
	wf, ok := s.cfg.Policy.Workflow(op.Workflow)
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownWorkflow, op.Workflow)
	}
	if op.Route != RouteTask && op.Route != RouteSync && op.Route != RouteJobAPI {
		return fmt.Errorf("retry %s on route %s: %w", id, op.Route, ErrNotRetryable)
	}
	in := RouteInput{Workflow: wf, Request: StartRequest{IdempotencyKey: op.IdempotencyKey, Workflow: op.Workflow,
		Tenant: op.Tenant, Actor: op.Actor, ObjectRef: op.ObjectRef, ObjectVersion: op.ObjectVersion,
		IntendedEffect: op.IntendedEffect, Arguments: op.arguments}}
	if wf.TaskUse != config.TaskNever || wf.Fallback.Kind == config.FallbackSync {
		in.Conn, in.DialErr = s.cfg.Servers.Conn(ctx, wf.Server)
	}
	now, err := s.cfg.Router.Decide(ctx, in)
	if err != nil {
		return fmt.Errorf("retry %s: route: %w", id, err)
	}
	if now.Route != op.Route {
		return fmt.Errorf("retry %s: recorded on %s, now %s (%s): %w", id, op.Route, now.Route, now.ReasonCode, ErrRetryRouteChanged)
	}
	err = pgx.BeginFunc(ctx, s.cfg.Store.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE operations SET domain_outcome = 'pending', attention = NULL, attention_reason = NULL,
			failure_reason = NULL, failure_reason_by = NULL,
			updated_at = now() WHERE id = $1 AND domain_outcome = 'not_applied'`, id)
		if err != nil {
			return fmt.Errorf("retry %s: %w", id, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("retry %s: %w", id, ErrNotRetryable)
		}
		// The retry's call is to be sent: the sweep finds it if it never is, or never answered.
		if _, err := tx.Exec(ctx, `INSERT INTO operation_calls (operation_id) VALUES ($1)
			ON CONFLICT (operation_id) DO UPDATE SET sent_at = NULL, due_at = NULL, created_at = now()`, id); err != nil {
			return fmt.Errorf("retry %s: %w", id, err)
		}
		// The previous attempt is evidence: archive it before the task row is reset.
		if _, err := tx.Exec(ctx, `INSERT INTO operation_attempts (operation_id, attempt, route, task, envelope, job, archived_by)
			SELECT $1, coalesce((SELECT max(attempt) FROM operation_attempts WHERE operation_id = $1), 0) + 1, $2,
				(SELECT to_jsonb(t) FROM tasks t WHERE t.operation_id = $1),
				(SELECT to_jsonb(e) FROM task_envelopes e WHERE e.operation_id = $1),
				(SELECT to_jsonb(j) FROM job_runs j WHERE j.operation_id = $1), $3`, id, string(op.Route), by); err != nil {
			return fmt.Errorf("retry %s: archive attempt: %w", id, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM task_envelopes WHERE operation_id = $1`, id); err != nil {
			return fmt.Errorf("retry %s: %w", id, err)
		}
		switch op.Route {
		case RouteTask:
			if _, err := tx.Exec(ctx, `UPDATE tasks SET state = 'creating', task_id = NULL, era = '', session_id = '', status_message = '',
				tool_error = false, server_created_at = NULL, server_updated_at = NULL, ttl_ms = NULL, poll_interval_ms = NULL,
				deadline = NULL, next_poll_at = NULL, held_poll_at = NULL, lease_owner = NULL, lease_expires_at = NULL, polls = 0, failure_kind = NULL,
				first_failure_at = NULL, result_state = 'none', cancel_requested_at = NULL, cancel_requested_by = NULL,
				cancel_reason = NULL, cancel_acknowledged_at = NULL, terminal_at = NULL, updated_at = now() WHERE operation_id = $1`, id); err != nil {
				return fmt.Errorf("retry %s: reset task: %w", id, err)
			}
		case RouteJobAPI:
			if _, err := tx.Exec(ctx, `UPDATE job_runs SET status = 'submitting', error = '', next_poll_at = NULL, lease_owner = NULL,
				lease_expires_at = NULL, updated_at = now() WHERE operation_id = $1`, id); err != nil {
				return fmt.Errorf("retry %s: reset job: %w", id, err)
			}
		}
		return addPersonTimeline(ctx, tx, id, by, "retry", "retry requested by "+by+" after not_applied; same idempotency key")
	})
	if err != nil {
		return err
	}
	op, err = s.cfg.Store.Get(ctx, id)
	if err != nil {
		return err
	}
	cctx := context.WithoutCancel(ctx)
	switch op.Route {
	case RouteTask:
		conn, derr := s.cfg.Servers.Conn(ctx, wf.Server)
		if derr != nil {
			s.refuse(cctx, op, "server unreachable; the retry was not sent: "+safeMessage(derr), true)
			return nil
		}
		s.createTask(cctx, op, wf, conn, Decision{Route: RouteTask, ReasonCode: op.ReasonCode, Reason: op.Reason, DeclareExtension: now.DeclareExtension}, false)
	case RouteSync:
		conn, derr := s.cfg.Servers.Conn(ctx, wf.Server)
		if derr != nil {
			conn = nil
		}
		s.callSync(cctx, op, wf, conn, false)
	case RouteJobAPI:
		s.submitJob(cctx, op, wf)
	}
	return nil
}
