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
	a, err := c.window(ctx, workflow)
	if err != nil {
		return Analysis{}, err
	}
	w, _ := c.workflow(workflow)
	plan := w.Plan()
	sides, err := c.measure(ctx, w.Name, a.Since, 0)
	if err != nil {
		return Analysis{}, err
	}
	if len(sides) > 0 {
		a.Incumbent, a.Canary = sides[0][0], sides[0][1]
	}
	a.Breaches = breaches(plan.Thresholds, a.Canary, a.Incumbent)
	a.Judged = a.Canary.Operations >= plan.Thresholds.MinOperations
	if !a.Judged {
		a.Breaches = nil
	}
	return a, nil
}

// window is the analysis window: the plan's, from the current step's start when later.
func (c *Controller) window(ctx context.Context, workflow string) (Analysis, error) {
	w, err := c.workflow(workflow)
	if err != nil {
		return Analysis{}, err
	}
	a := Analysis{Workflow: w.Name, Since: c.cfg.Now().Add(-w.Plan().Thresholds.Window.Duration)}
	var since *time.Time
	_ = c.cfg.Pool.QueryRow(ctx, `SELECT step_since FROM workflow_rollouts WHERE workflow = $1`, w.Name).Scan(&since)
	if since != nil && since.After(a.Since) {
		a.Since = *since
	}
	return a, nil
}

// measure runs the analysis query over the workflow's operations created since since: per
// interval of width (0: one interval), the incumbent's side [0] and the canary's [1].
func (c *Controller) measure(ctx context.Context, workflow string, since time.Time, width time.Duration) (map[int][2]Side, error) {
	secs := width.Seconds()
	if secs <= 0 {
		secs = 0
	}
	rows, err := c.cfg.Pool.Query(ctx, `
		SELECT CASE WHEN $3::float8 > 0 THEN floor(extract(epoch FROM o.created_at - $2) / $3::float8)::int ELSE 0 END, o.route = 'task', count(*),
		    count(*) FILTER (WHERE t.state IN ('failed', 'unobservable', 'expired') OR coalesce(t.tool_error, false) OR o.domain_outcome = 'not_applied'),
		    count(*) FILTER (WHERE o.domain_outcome = 'unknown'),
		    count(*) FILTER (WHERE EXISTS (SELECT 1 FROM transition_violations v WHERE v.operation_id = o.id)),
		    count(*) FILTER (WHERE EXISTS (SELECT 1 FROM reconciliation_items r WHERE r.operation_id = o.id)),
		    coalesce(sum(t.polls), 0),
		    coalesce(avg(extract(epoch FROM t.terminal_at - o.created_at)) FILTER (WHERE t.terminal_at IS NOT NULL), 0)::float8
		FROM operations o LEFT JOIN tasks t ON t.operation_id = o.id
		WHERE o.workflow = $1 AND o.created_at >= $2 AND o.route <> 'reject'
		GROUP BY 1, 2`, workflow, since, secs)
	if err != nil {
		return nil, fmt.Errorf("analysis of %s: %w", workflow, err)
	}
	defer rows.Close()
	out := map[int][2]Side{}
	for rows.Next() {
		var i int
		var canary bool
		var s Side
		var tt float64
		if err := rows.Scan(&i, &canary, &s.Operations, &s.Failed, &s.Unknown, &s.Violations, &s.ItemsOpened, &s.Polls, &tt); err != nil {
			return nil, fmt.Errorf("analysis of %s: %w", workflow, err)
		}
		if s.Operations > 0 {
			n := float64(s.Operations)
			s.FailureRate, s.UnknownRate, s.PollsPerOperation = float64(s.Failed)/n, float64(s.Unknown)/n, float64(s.Polls)/n
		}
		s.MeanToTerminal = time.Duration(tt * float64(time.Second))
		p := out[i]
		if canary {
			p[1] = s
		} else {
			p[0] = s
		}
		out[i] = p
	}
	return out, rows.Err()
}

// Point is one interval of a Series.
type Point struct {
	Start     time.Time `json:"start"`
	Canary    Side      `json:"canary"`
	Incumbent Side      `json:"incumbent"`
}

// Series is the analysis window cut into equal intervals, each measured by the analysis query.
type Series struct {
	Workflow string        `json:"workflow"`
	Since    time.Time     `json:"since"`
	Width    time.Duration `json:"width"`
	Points   []Point       `json:"points"`
}

// Series measures the canary beside the incumbent over the same window as Analyze, in n equal
// intervals (n defaults to 12), for the Rollouts page's charts.
func (c *Controller) Series(ctx context.Context, workflow string, n int) (Series, error) {
	if n <= 0 {
		n = 12
	}
	a, err := c.window(ctx, workflow)
	if err != nil {
		return Series{}, err
	}
	width := c.cfg.Now().Sub(a.Since) / time.Duration(n)
	width = max(width, time.Second)
	sr := Series{Workflow: a.Workflow, Since: a.Since, Width: width}
	sides, err := c.measure(ctx, a.Workflow, a.Since, width)
	if err != nil {
		return Series{}, err
	}
	for i := range n {
		p := Point{Start: a.Since.Add(time.Duration(i) * width)}
		p.Incumbent, p.Canary = sides[i][0], sides[i][1]
		sr.Points = append(sr.Points, p)
	}
	// An operation created in the last instant falls just past the last interval: keep it.
	if last, ok := sides[n]; ok {
		sr.Points[n-1].Incumbent = addSide(sr.Points[n-1].Incumbent, last[0])
		sr.Points[n-1].Canary = addSide(sr.Points[n-1].Canary, last[1])
	}
	return sr, nil
}

// addSide merges two sides' counts and recomputes their rates (the mean time to terminal is
// weighted by operations).
func addSide(a, b Side) Side {
	s := Side{Operations: a.Operations + b.Operations, Failed: a.Failed + b.Failed, Unknown: a.Unknown + b.Unknown,
		Violations: a.Violations + b.Violations, ItemsOpened: a.ItemsOpened + b.ItemsOpened, Polls: a.Polls + b.Polls}
	if s.Operations > 0 {
		n := float64(s.Operations)
		s.FailureRate, s.UnknownRate, s.PollsPerOperation = float64(s.Failed)/n, float64(s.Unknown)/n, float64(s.Polls)/n
		s.MeanToTerminal = time.Duration((float64(a.MeanToTerminal)*float64(a.Operations) + float64(b.MeanToTerminal)*float64(b.Operations)) / n)
	}
	return s
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
