package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Drain is the progress of a rollback: the Task-route operations that were started before it,
// followed until each is terminal and verified, or has a reconciliation item.
type Drain struct {
	Workflow string `json:"workflow"`
	// Since is the latest rollback (zero: never rolled back; then every Task operation counts).
	Since time.Time `json:"since"`
	// Total is the Task operations started before the rollback that were still open at it.
	Total int `json:"total"`
	// InFlight are still running, or their result is still to be fetched, or their outcome is
	// still to be verified (pending, or unknown and not yet queued for reconciliation).
	InFlight int `json:"inFlight"`
	// Verified ended with a known domain outcome (applied, not applied, no effect, not run,
	// unverified as listed); Queued have an open reconciliation item.
	Verified int `json:"verified"`
	Queued   int `json:"queued"`
}

// Drained is true when nothing started before the rollback is still in flight.
func (d Drain) Drained() bool { return d.InFlight == 0 }

// Drain measures the rollback's progress for workflow.
func (c *Controller) Drain(ctx context.Context, workflow string) (Drain, error) {
	w, err := c.workflow(workflow)
	if err != nil {
		return Drain{}, err
	}
	d := Drain{Workflow: w.Name}
	var since *time.Time
	err = c.cfg.Pool.QueryRow(ctx, `SELECT max(at) FROM rollout_moves WHERE workflow = $1 AND action = 'rollback'`, w.Name).Scan(&since)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Drain{}, fmt.Errorf("drain of %s: %w", w.Name, err)
	}
	cutoff := time.Now().Add(time.Hour)
	if since != nil {
		d.Since, cutoff = *since, *since
	}
	err = c.cfg.Pool.QueryRow(ctx, `
		WITH ops AS (
		    SELECT o.domain_outcome, t.state, t.result_state,
		        EXISTS (SELECT 1 FROM reconciliation_items r WHERE r.operation_id = o.id AND r.closed_at IS NULL) AS queued
		    FROM operations o JOIN tasks t ON t.operation_id = o.id
		    WHERE o.workflow = $1 AND o.route = 'task' AND o.created_at < $2 AND (t.terminal_at IS NULL OR t.terminal_at >= $3))
		SELECT count(*),
		    count(*) FILTER (WHERE NOT queued AND (state IN ('creating', 'working', 'input_required', 'create_unacknowledged') OR result_state = 'pending'
		        OR domain_outcome IN ('pending', 'unknown'))),
		    count(*) FILTER (WHERE NOT queued AND domain_outcome NOT IN ('pending', 'unknown')
		        AND state NOT IN ('creating', 'working', 'input_required', 'create_unacknowledged') AND result_state <> 'pending'),
		    count(*) FILTER (WHERE queued)
		FROM ops`, w.Name, cutoff, d.Since).Scan(&d.Total, &d.InFlight, &d.Verified, &d.Queued)
	if err != nil {
		return Drain{}, fmt.Errorf("drain of %s: %w", w.Name, err)
	}
	return d, nil
}
