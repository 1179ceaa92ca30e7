package reconcile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/reconcile"
)

// The rule over every task state × tool error × outcome: failed, cancelled or a tool error
// disagree with an applied effect; a completed task without a tool error with one that did not
// apply; nothing else disagrees.
func TestMismatchRuleOverEveryPair(t *testing.T) {
	t.Parallel()
	states := []string{"", "creating", "working", "input_required", "completed", "failed", "cancelled", "create_unacknowledged", "unobservable", "expired"}
	outcomes := []string{"pending", "applied", "not_applied", "compensated", "unknown", "unverified", "no_effect", "not_run"}
	for _, st := range states {
		for _, te := range []bool{false, true} {
			for _, out := range outcomes {
				saysFailed := st == "failed" || st == "cancelled" || st == "completed" && te
				want := saysFailed && out == "applied" || st == "completed" && !te && out == "not_applied"
				if got := reconcile.Mismatch(st, te, out); got != want {
					t.Errorf("%q tool_error=%v %s: mismatch %v, want %v", st, te, out, got, want)
				}
				if got := operations.Mismatch(operations.TaskState(st), te, operations.Outcome(out)); got != want {
					t.Errorf("operations.Mismatch %q tool_error=%v %s: %v, want %v", st, te, out, got, want)
				}
			}
		}
	}
}

// A 2026-07-28 server ends a tool error completed. Through the real watcher and verifier: a tool
// error whose effect the system of record confirms did not apply is agreement (no item, no
// mismatch); one whose effect applied anyway is a mismatch with an item.
func TestToolErrorDisagreesOnlyWhenTheEffectApplied(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, args string
		outcome    operations.Outcome
		mismatch   bool
	}{
		{"not applied: agreement", `{"outcome": "tool_error", "text": "declined"}`, operations.OutcomeNotApplied, false},
		{"applied anyway: mismatch", `{"outcome": "tool_error", "effect_at": "start"}`, operations.OutcomeApplied, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := opstest.Setup(t, opstest.Options{Era: "extension", Extra: extra})
			w := &world{Bundle: b, rs: reconcile.NewStore(b.Pool, reconcile.Options{Retrier: b.Ops})}
			id := w.Start(t, "refund-v", "te-"+fmt.Sprint(c.mismatch), c.args).Response.OperationID
			_, wp := w.Watcher(t, "w1", nil)
			opstest.WaitFor(t, wp, 20*time.Second, "the tool error's result", func() bool { return w.Detail(t, id).Envelope != nil })
			vp := w.verifier(t, 3)
			opstest.WaitFor(t, vp, 20*time.Second, "the verification", func() bool { return w.checked(t, id) })
			d := w.Detail(t, id)
			if d.Task.State != operations.StateCompleted || !d.Task.ToolError || d.DomainOutcome != c.outcome {
				t.Fatalf("task %s tool_error=%v outcome %s, want completed with a tool error, %s", d.Task.State, d.Task.ToolError, d.DomainOutcome, c.outcome)
			}
			if d.Mismatched != c.mismatch || w.hasItem(id) != c.mismatch {
				t.Fatalf("mismatch %v, item %v; want both %v", d.Mismatched, w.hasItem(id), c.mismatch)
			}
			if c.mismatch && w.item(t, id).Reason != reconcile.ReasonTaskDomainMismatch {
				t.Fatalf("item reason %s", w.item(t, id).Reason)
			}
			page, err := w.Ops.List(context.Background(), operations.Scope{All: true}, operations.Filter{Mismatch: true})
			if err != nil || (page.Total == 1) != c.mismatch {
				t.Fatalf("mismatch filter total %d (%v), want mismatch %v", page.Total, err, c.mismatch)
			}
		})
	}
}
