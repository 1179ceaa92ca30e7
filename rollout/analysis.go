package rollout

import (
	"context"
	"fmt"
	"time"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/config"
)

// Side is one route's live health over the analysis window.
type Side struct {
	Operations int `json:"operations"`
	// Failed counts tasks that failed, became unobservable or expired, tool errors and work
	// confirmed not applied; Unknown counts operations whose domain outcome is unknown.
	Failed  int `json:"failed"`
	Unknown int `json:"unknown"`
	// Violations counts operations with a recorded transition violation; ItemsOpened those
	// with a reconciliation item.
	Violations  int `json:"violations"`
	ItemsOpened int `json:"itemsOpened"`
	// Polls is the status polls made; PollsPerOperation the polling amplification.
	Polls             int     `json:"polls"`
	PollsPerOperation float64 `json:"pollsPerOperation"`
	FailureRate       float64 `json:"failureRate"`
	UnknownRate       float64 `json:"unknownRate"`
	// MeanToTerminal is the mean time from start to a terminal task state.
	MeanToTerminal time.Duration `json:"meanToTerminal"`
}

// Analysis is the canary (the Task route) beside the incumbent route over one window.
type Analysis struct {
	Workflow  string    `json:"workflow"`
	Since     time.Time `json:"since"`
	Canary    Side      `json:"canary"`
	Incumbent Side      `json:"incumbent"`
	// Judged is false when the canary had fewer operations than the plan's minimum.
	Judged bool `json:"judged"`
	// Breaches name each threshold crossed with the figures that crossed it.
	Breaches []string `json:"breaches,omitempty"`
}

// Analyze measures the workflow's canary and incumbent over the plan's window (from the
// later of the window's start and the current step's start) and lists the thresholds crossed.
func (c *Controller) Analyze(ctx context.Context, workflow string) (Analysis, error) {
	w, err := c.workflow(workflow)
	if err != nil {
		return Analysis{}, err
	}
	plan := w.Plan()
	a := Analysis{Workflow: w.Name, Since: c.cfg.Now().Add(-plan.Thresholds.Window.Duration)}
	var since *time.Time
	_ = c.cfg.Pool.QueryRow(ctx, `SELECT step_since FROM workflow_rollouts WHERE workflow = $1`, w.Name).Scan(&since)
	if since != nil && since.After(a.Since) {
		a.Since = *since
	}
	rows, err := c.cfg.Pool.Query(ctx, `
		SELECT o.route = 'task', count(*),
		    count(*) FILTER (WHERE t.state IN ('failed', 'unobservable', 'expired') OR coalesce(t.tool_error, false) OR o.domain_outcome = 'not_applied'),
		    count(*) FILTER (WHERE o.domain_outcome = 'unknown'),
		    count(*) FILTER (WHERE EXISTS (SELECT 1 FROM transition_violations v WHERE v.operation_id = o.id)),
		    count(*) FILTER (WHERE EXISTS (SELECT 1 FROM reconciliation_items r WHERE r.operation_id = o.id)),
		    coalesce(sum(t.polls), 0),
		    coalesce(avg(extract(epoch FROM t.terminal_at - o.created_at)) FILTER (WHERE t.terminal_at IS NOT NULL), 0)::float8
		FROM operations o LEFT JOIN tasks t ON t.operation_id = o.id
		WHERE o.workflow = $1 AND o.created_at >= $2 AND o.route <> 'reject'
		GROUP BY 1`, w.Name, a.Since)
	if err != nil {
		return Analysis{}, fmt.Errorf("analysis of %s: %w", w.Name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var canary bool
		var s Side
		var secs float64
		if err := rows.Scan(&canary, &s.Operations, &s.Failed, &s.Unknown, &s.Violations, &s.ItemsOpened, &s.Polls, &secs); err != nil {
			return Analysis{}, fmt.Errorf("analysis of %s: %w", w.Name, err)
		}
		if s.Operations > 0 {
			n := float64(s.Operations)
			s.FailureRate, s.UnknownRate, s.PollsPerOperation = float64(s.Failed)/n, float64(s.Unknown)/n, float64(s.Polls)/n
		}
		s.MeanToTerminal = time.Duration(secs * float64(time.Second))
		if canary {
			a.Canary = s
		} else {
			a.Incumbent = s
		}
	}
	if err := rows.Err(); err != nil {
		return Analysis{}, err
	}
	a.Breaches = breaches(plan.Thresholds, a.Canary, a.Incumbent)
	a.Judged = a.Canary.Operations >= plan.Thresholds.MinOperations
	if !a.Judged {
		a.Breaches = nil
	}
	return a, nil
}

func breaches(t config.Thresholds, canary, incumbent Side) []string {
	var out []string
	if t.FailureRate > 0 && canary.FailureRate > t.FailureRate {
		out = append(out, fmt.Sprintf("canary failure rate %.1f%% (%d of %d) above %.1f%%", 100*canary.FailureRate, canary.Failed, canary.Operations, 100*t.FailureRate))
	}
	if t.UnknownRate > 0 && canary.UnknownRate > t.UnknownRate {
		out = append(out, fmt.Sprintf("canary unknown-outcome rate %.1f%% (%d of %d) above %.1f%%", 100*canary.UnknownRate, canary.Unknown, canary.Operations, 100*t.UnknownRate))
	}
	if t.MaxExcessFailureRate > 0 && canary.FailureRate-incumbent.FailureRate > t.MaxExcessFailureRate {
		out = append(out, fmt.Sprintf("canary failure rate %.1f%% exceeds the incumbent's %.1f%% by more than %.1f points",
			100*canary.FailureRate, 100*incumbent.FailureRate, 100*t.MaxExcessFailureRate))
	}
	return out
}

// Watch analyses a workflow in the canary stage and, when a threshold is crossed, pauses the
// rollout by itself with the reason and the figures (and engages the workflow's kill switch when
// the plan's on_breach is pause_and_kill). It returns the analysis and whether it paused.
func (c *Controller) Watch(ctx context.Context, workflow string) (Analysis, bool, error) {
	st, err := c.Status(ctx, workflow)
	if err != nil || st.Stage != StageCanary || st.Paused != "" {
		return Analysis{}, false, err
	}
	a, err := c.Analyze(ctx, workflow)
	if err != nil || len(a.Breaches) == 0 {
		return a, false, err
	}
	sys := audit.Actor{Name: "rollout-analysis", Kind: audit.KindSystem}
	reason := "analysis: " + a.Breaches[0]
	if st.Plan.OnBreach == config.OnBreachPauseAndKill && c.cfg.Kill != nil {
		if err := c.cfg.Kill.Engage(ctx, sys, "workflow", st.Workflow, reason); err != nil {
			return a, false, fmt.Errorf("analysis of %s: engage kill switch: %w", st.Workflow, err)
		}
	}
	if _, err := c.pause(ctx, sys, workflow, "auto_pause", reason, a); err != nil {
		return a, false, err
	}
	return a, true, nil
}
