package web

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/taskgate/taskgate/operations"
)

// TestMismatchRuleOverEveryStateAndOutcome puts one operation through every task state × tool
// error × domain outcome and checks that the mismatch filter (and the API's total), the
// overview's matrix and tile, and the row agree with the rule: failed, cancelled or a tool
// error but applied, or completed without a tool error but not applied. A tool error confirmed
// "not applied" is agreement. (That the verifiers open an item by the same rule:
// reconcile's TestToolErrorDisagreesOnlyWhenTheEffectApplied.)
func TestMismatchRuleOverEveryStateAndOutcome(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	id := e.start(t, "acme", "refund", "pair-1", `{"outcome": "hang"}`)
	ctx := context.Background()
	scope := operations.Scope{All: true}
	pairs := 0
	for _, st := range taskStates {
		for _, te := range []bool{false, true} {
			for _, out := range outcomes {
				// A tool error is the tool saying the work failed: in the 2025-11-25 era the task
				// ends failed, in the 2026-07-28 era completed with the error; both disagree with
				// an applied effect alike.
				want := (st == "failed" || st == "cancelled" || st == "completed" && te) && out == "applied" || st == "completed" && !te && out == "not_applied"
				if _, err := e.pool.Exec(ctx, `UPDATE tasks SET state = $2, tool_error = $3 WHERE operation_id = $1`, id, st, te); err != nil {
					t.Fatal(err)
				}
				if _, err := e.pool.Exec(ctx, `UPDATE operations SET domain_outcome = $2 WHERE id = $1`, id, out); err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("%s tool_error=%v %s", st, te, out)
				page, err := e.b.Ops.List(ctx, scope, operations.Filter{Mismatch: true})
				if err != nil {
					t.Fatal(err)
				}
				if (page.Total == 1) != want || len(page.Operations) != page.Total {
					t.Errorf("%s: filter total %d, want mismatch %v", name, page.Total, want)
				}
				ov, err := e.b.Ops.Overview(ctx, scope, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, c := range ov.Cells {
					if string(c.TaskState) == st && string(c.Outcome) == out && c.Count == 1 {
						found = true
						if c.Mismatch() != want {
							t.Errorf("%s: matrix cell mismatch %v, want %v", name, c.Mismatch(), want)
						}
					}
				}
				if !found {
					t.Errorf("%s: no matrix cell", name)
				}
				all, err := e.b.Ops.List(ctx, scope, operations.Filter{})
				if err != nil || len(all.Operations) != 1 || all.Operations[0].Mismatch() != want {
					t.Errorf("%s: the row's mismatch disagrees (%v)", name, err)
				}
				_, home := e.do(t, "operator", "GET", "/", nil)
				if got := tileValue(t, home, "tile-mismatch"); got != map[bool]string{true: "1", false: "0"}[want] {
					t.Errorf("%s: mismatch tile %s, want mismatch %v", name, got, want)
				}
				if has(home, "matrix-mismatch") != want {
					t.Errorf("%s: matrix marks a mismatch: %v, want %v", name, has(home, "matrix-mismatch"), want)
				}
				pairs++
			}
		}
	}
	if pairs != len(taskStates)*2*len(outcomes) {
		t.Fatalf("covered %d pairs", pairs)
	}
}

// TestElapsedStopsWhenTheWorkEnds checks the clock of each kind of work: it stops at the
// terminal time, never-run work shows none, and a lost create says its fate is unknown.
func TestElapsedStopsWhenTheWorkEnds(t *testing.T) {
	t0 := time.Date(2026, 7, 28, 10, 0, 0, 0, time.UTC)
	end := t0.Add(4200 * time.Millisecond)
	now := t0.Add(time.Hour)
	task := func(st operations.TaskState, terminal *time.Time) *operations.Task {
		return &operations.Task{State: st, TerminalAt: terminal}
	}
	for _, c := range []struct {
		name string
		op   operations.Operation
		want string
	}{
		{"completed task", operations.Operation{CreatedAt: t0, Task: task(operations.StateCompleted, &end)}, "ran 4.2 s"},
		{"working task", operations.Operation{CreatedAt: t0, Task: task(operations.StateWorking, nil)}, "running 1 h"},
		{"lost create", operations.Operation{CreatedAt: t0, Task: task(operations.StateCreateUnacknowledged, nil)}, "fate unknown since 2026-07-28 10:00:00 UTC"},
		{"unobservable", operations.Operation{CreatedAt: t0, UpdatedAt: end, Task: task(operations.StateUnobservable, nil)}, "unobservable since 2026-07-28 10:00:04 UTC"},
		{"rejected", operations.Operation{CreatedAt: t0, UpdatedAt: end, Route: operations.RouteReject, DomainOutcome: operations.OutcomeNotApplied}, ""},
		{"handoff", operations.Operation{CreatedAt: t0, UpdatedAt: end, Route: operations.RouteHandoff}, ""},
		{"not run", operations.Operation{CreatedAt: t0, UpdatedAt: end, Route: operations.RouteSync, DomainOutcome: operations.OutcomeNotRun}, ""},
		{"sync done", operations.Operation{CreatedAt: t0, UpdatedAt: end, Route: operations.RouteSync, DomainOutcome: operations.OutcomeApplied}, "ran 4.2 s"},
	} {
		if got := opElapsed(c.op, now); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	for o, want := range map[operations.Outcome]string{operations.OutcomeNoEffect: "no effect to verify", operations.OutcomeNotRun: "not run",
		operations.OutcomeUnverified: "unverified", operations.OutcomeNotApplied: "not applied"} {
		if got := outcomeWords(o); got != want {
			t.Errorf("outcome %s: %q", o, got)
		}
	}
	if got := stateWords(operations.StateCreateUnacknowledged, false); got != "create not acknowledged" {
		t.Errorf("create_unacknowledged: %q", got)
	}
	if got := eraShort("2026-07-28"); got != "2026-07-28 extension" {
		t.Errorf("era: %q", got)
	}
}
