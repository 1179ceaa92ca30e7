package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/rollout"
)

// overviewWindow is how far back the overview's matrix and chart look.
const overviewWindow = 12 * time.Hour

// HomeView is the on-call overview's model.
type HomeView struct {
	Page   Page
	Policy PolicySummary
	Window time.Duration
	// Unavailable is true when the console runs without operations.
	Unavailable bool
	// Totals for the tiles.
	NeedPerson, InFlight, OpenRecon, Mismatches, Violations int
	// Working counts tasks working now; Questions counts open questions.
	Working, Questions int
	// Person lists operations waiting for a person (input required first).
	Person []OpRow
	// Workflows are the per-workflow rows: stage, kill switch, in flight.
	Workflows []OverviewWorkflow
	// Matrix rows are task states per workflow, attention first; columns are outcomes.
	Matrix []MatrixRow
	// RecentViolations are the latest transition violations.
	RecentViolations []operations.RecentViolation
	Chart            Chart
}

// PolicySummary describes the policy file in force.
type PolicySummary struct {
	Source  string
	SHA256  string
	Servers int
}

// OverviewWorkflow is one workflow's rollout and load.
type OverviewWorkflow struct {
	Name, Stage, KillSwitch, KillTone  string
	InFlight, InputRequired, OpenRecon int
}

// MatrixRow is one (workflow, task state) row of the matrix.
type MatrixRow struct {
	Workflow, StateWords, StateTone string
	First                           bool
	Span                            int
	Cells                           []MatrixCellView
	Total                           int
}

// MatrixCellView is one count with the list it links to.
type MatrixCellView struct {
	Count    int
	Href     string
	Mismatch bool
}

// Chart is the hourly activity chart: bars per hour for starts, terminal tasks and unknown
// outcomes.
type Chart struct {
	Hours []operations.HourBucket
	Max   int
	// Totals over the window.
	Starts, Terminal, Unknown int
}

// matrixStates orders task states attention first (CONSOLE.md rule 8); "" is no task.
var matrixStates = []operations.TaskState{operations.StateInputRequired, operations.StateCreating, operations.StateWorking,
	operations.StateFailed, operations.StateCancelled, operations.StateCreateUnacknowledged, operations.StateUnobservable,
	operations.StateExpired, operations.StateCompleted, ""}

var matrixOutcomes = []operations.Outcome{operations.OutcomeUnknown, operations.OutcomePending, operations.OutcomeApplied,
	operations.OutcomeNotApplied, operations.OutcomeCompensated, operations.OutcomeUnverified, operations.OutcomeNoEffect, operations.OutcomeNotRun}

func (v *HomeView) fill(s *Server, r *http.Request, ov operations.Overview) {
	var names []string
	if s.deps.Policy != nil {
		for _, wf := range s.deps.Policy.Workflows {
			names = append(names, wf.Name)
		}
	}
	for _, c := range ov.Cells {
		if c.Mismatch() {
			v.Mismatches += c.Count
		}
	}
	for _, n := range ov.InFlight {
		v.InFlight += n
	}
	for _, n := range ov.OpenReconciliation {
		v.OpenRecon += n
	}
	v.Violations = ov.ViolationsInWindow
	v.RecentViolations = ov.Violations
	for _, name := range names {
		row := OverviewWorkflow{Name: name, InFlight: ov.InFlight[name], InputRequired: ov.InputRequired[name], OpenRecon: ov.OpenReconciliation[name],
			Stage: "—", KillSwitch: "unknown", KillTone: "idle"}
		if s.deps.Router != nil {
			if rt, err := s.deps.Router.Route(r.Context(), name, ""); err == nil {
				row.Stage = string(rt.Input.Stage)
				if rt.Input.Stage == rollout.StageCanary {
					row.Stage += " " + strconv.Itoa(rt.Input.CanaryPercent) + "%"
				}
				switch {
				case rt.Input.KillSwitchUnknown:
					row.KillSwitch, row.KillTone = "unreadable: starts blocked", "bad"
				case rt.Input.KillSwitch:
					row.KillSwitch, row.KillTone = "engaged", "bad"
				default:
					row.KillSwitch, row.KillTone = "released", "ok"
				}
			}
		}
		v.Workflows = append(v.Workflows, row)
	}
	// Matrix: per workflow, its task states attention first, with outcome columns.
	type key struct {
		wf string
		st operations.TaskState
		te bool
	}
	counts := map[key]map[operations.Outcome]int{}
	for _, c := range ov.Cells {
		k := key{c.Workflow, c.TaskState, c.ToolError && c.TaskState == operations.StateCompleted}
		if counts[k] == nil {
			counts[k] = map[operations.Outcome]int{}
		}
		counts[k][c.Outcome] += c.Count
	}
	for _, wf := range names {
		var rows []MatrixRow
		for _, st := range matrixStates {
			for _, te := range []bool{false, true} {
				m := counts[key{wf, st, te}]
				if m == nil {
					continue
				}
				row := MatrixRow{Workflow: wf, StateWords: stateWords(st, te), StateTone: stateTone(st, te)}
				for _, o := range matrixOutcomes {
					// The cell's list: the same workflow, state, tool error and outcome over the
					// same window (operations.RecentSQL), so its total is the cell's count.
					q := url.Values{"workflow": {wf}, "domain_outcome": {string(o)}, "window": {fmt.Sprintf("%dh", int(overviewWindow/time.Hour))}}
					switch {
					case st == "":
						q.Set("task_state", taskStateNone)
					case st == operations.StateCompleted:
						q.Set("task_state", string(st))
						q.Set("tool_error", strconv.FormatBool(te))
					default:
						q.Set("task_state", string(st))
					}
					mc := MatrixCellView{Count: m[o], Href: "/operations?" + q.Encode()}
					mc.Mismatch = mc.Count > 0 && operations.MatrixCell{TaskState: st, ToolError: te, Outcome: o}.Mismatch()
					row.Cells = append(row.Cells, mc)
					row.Total += m[o]
				}
				rows = append(rows, row)
			}
		}
		if len(rows) > 0 {
			rows[0].First, rows[0].Span = true, len(rows)
		}
		v.Matrix = append(v.Matrix, rows...)
	}
	// The chart's window adapts to the data: from the first hour with anything in it, never
	// fewer than minChartHours.
	first := len(ov.Hours) - minChartHours
	for i, h := range ov.Hours {
		if h.Starts+h.Terminal+h.Unknown > 0 {
			first = min(first, i)
			break
		}
	}
	v.Chart = Chart{Hours: ov.Hours[max(first, 0):]}
	for _, h := range v.Chart.Hours {
		v.Chart.Max = max(v.Chart.Max, h.Starts, h.Terminal, h.Unknown)
		v.Chart.Starts += h.Starts
		v.Chart.Terminal += h.Terminal
		v.Chart.Unknown += h.Unknown
	}
}

// Chart geometry (SVG user units).
const (
	chartW, chartH       = 720, 150
	chartLeft, chartBase = 34, 124
)

// barX is the x of series k's bar in hour i.
func (c Chart) barX(i, k int) string {
	slot := float64(chartW-chartLeft) / float64(max(1, len(c.Hours)))
	return fmt.Sprintf("%.1f", float64(chartLeft)+float64(i)*slot+slot*0.15+float64(k)*slot*0.23)
}

func (c Chart) barW() string {
	slot := float64(chartW-chartLeft) / float64(max(1, len(c.Hours)))
	return fmt.Sprintf("%.1f", slot*0.21)
}

func (c Chart) barH(n int) float64 {
	if c.Max == 0 {
		return 0
	}
	return float64(n) / float64(c.Max) * float64(chartBase-14)
}

func (c Chart) barY(n int) string  { return fmt.Sprintf("%.1f", float64(chartBase)-c.barH(n)) }
func (c Chart) barHS(n int) string { return fmt.Sprintf("%.1f", c.barH(n)) }
func (c Chart) labelX(i int) string {
	slot := float64(chartW-chartLeft) / float64(max(1, len(c.Hours)))
	return fmt.Sprintf("%.1f", float64(chartLeft)+float64(i)*slot+slot/2)
}

func (c Chart) desc() string {
	return fmt.Sprintf("Over the last %d hours: %d operations started, %d tasks reached a final state, %d outcomes became unknown. The busiest hour had %d.",
		len(c.Hours), c.Starts, c.Terminal, c.Unknown, c.Max)
}

func hourLabel(t time.Time) string { return t.UTC().Format("15:04") }
