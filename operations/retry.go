package operations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrNotRetryable: only an operation whose outcome is confirmed not_applied may be retried.
var ErrNotRetryable = errors.New("operation is not retryable: its outcome is not not_applied")

// Retry sends an operation whose domain outcome was confirmed not_applied again, once, on its
// recorded route and through the same call path as Start, with the same operation id as the
// idempotency key (tool argument, _meta and the job API's Idempotency-Key). The system of
// record applies an effect at most once per key, so a retry never causes a second effect even
// if the first call did apply. The previous attempt's task state and envelope are replaced; its
// timeline is kept and the retry is written to it. Reconciliation calls it (reconcile.Retrier)
// after a person resolved the operation's item as not_applied.
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
	err = pgx.BeginFunc(ctx, s.cfg.Store.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE operations SET domain_outcome = 'pending', attention = NULL, attention_reason = NULL,
			updated_at = now() WHERE id = $1 AND domain_outcome = 'not_applied'`, id)
		if err != nil {
			return fmt.Errorf("retry %s: %w", id, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("retry %s: %w", id, ErrNotRetryable)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM task_envelopes WHERE operation_id = $1`, id); err != nil {
			return fmt.Errorf("retry %s: %w", id, err)
		}
		switch op.Route {
		case RouteTask:
			if _, err := tx.Exec(ctx, `UPDATE tasks SET state = 'creating', task_id = NULL, era = '', session_id = '', status_message = '',
				tool_error = false, server_created_at = NULL, server_updated_at = NULL, ttl_ms = NULL, poll_interval_ms = NULL,
				deadline = NULL, next_poll_at = NULL, lease_owner = NULL, lease_expires_at = NULL, polls = 0, failure_kind = NULL,
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
		return addTimeline(ctx, tx, id, SourceOperator, "retry", "retry requested by "+by+" after not_applied; same idempotency key")
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
		s.createTask(cctx, op, wf, conn, Decision{Route: RouteTask, ReasonCode: op.ReasonCode, Reason: op.Reason})
	case RouteSync:
		conn, derr := s.cfg.Servers.Conn(ctx, wf.Server)
		if derr != nil {
			conn = nil
		}
		s.callSync(cctx, op, wf, conn)
	case RouteJobAPI:
		s.submitJob(cctx, op, wf)
	}
	return nil
}
