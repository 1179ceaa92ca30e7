package killswitch

import (
	"context"
	"fmt"
	"time"
)

// Drain is what a kill switch leaves running and what it turned away.
type Drain struct {
	// InFlight counts the covered Tasks not yet terminal; Oldest is when the oldest started and
	// LatestDeadline the last deadline among them (nil when none or unknown).
	InFlight       int
	Oldest         *time.Time
	LatestDeadline *time.Time
	// FinishedSince counts covered Tasks that ended since the switch was engaged.
	FinishedSince int
	// Fallbacks counts operations that took the fallback (or were refused) because of it.
	Fallbacks int
}

// Drain measures the drain of a switch (engaged or not: for a released switch it says what
// engaging would leave running) for the tenants given (all when allTenants).
func (s *Store) Drain(ctx context.Context, w Switch, allTenants bool, tenants []string) (Drain, error) {
	var d Drain
	since := time.Now()
	if w.Engaged && w.EngagedAt != nil {
		since = *w.EngagedAt
	}
	const cover = `(($1 = 'global') OR ($1 = 'workflow' AND o.workflow = $2) OR ($1 = 'server' AND t.server = $2))
		AND ($3 OR o.tenant = ANY($4))`
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE t.state IN ('creating', 'create_unacknowledged', 'working', 'input_required')),
		       min(t.created_at) FILTER (WHERE t.state IN ('creating', 'create_unacknowledged', 'working', 'input_required')),
		       max(t.deadline) FILTER (WHERE t.state IN ('creating', 'create_unacknowledged', 'working', 'input_required')),
		       count(*) FILTER (WHERE t.terminal_at >= $5)
		FROM tasks t JOIN operations o ON o.id = t.operation_id
		WHERE `+cover, w.Scope, w.Name, allTenants, tenants, since).Scan(&d.InFlight, &d.Oldest, &d.LatestDeadline, &d.FinishedSince)
	if err != nil {
		return d, fmt.Errorf("drain of %s: %w", w.Variant(), err)
	}
	if !w.Engaged {
		d.FinishedSince = 0
		return d, nil
	}
	err = s.pool.QueryRow(ctx, `
		SELECT count(*) FROM operations o
		WHERE o.reason_code = 'kill_switch' AND o.created_at >= $1 AND position($2 in o.reason) > 0
		  AND ($3 OR o.tenant = ANY($4))`, since, w.Variant()+" ", allTenants, tenants).Scan(&d.Fallbacks)
	if err != nil {
		return d, fmt.Errorf("drain of %s: %w", w.Variant(), err)
	}
	return d, nil
}
