package watch_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/gates/faultproxy"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/watch"
)

// behindProxy sets up the receiver of one era behind a fault proxy the policy names.
func behindProxy(t *testing.T, era string) (*opstest.Bundle, *faultproxy.Proxy) {
	t.Helper()
	var proxy *faultproxy.Proxy
	b := opstest.Setup(t, opstest.Options{Era: era, Front: func(t testing.TB, target string) string {
		p, err := faultproxy.New(target)
		if err != nil {
			t.Fatal(err)
		}
		u, err := p.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		proxy = p
		return u
	}})
	return b, proxy
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

func TestCompletedReportedWorkingAgainIsRecordedNotApplied(t *testing.T) {
	t.Parallel()
	b, proxy := behindProxy(t, "legacy")
	id := b.Start(t, "refund", "cw-1", `{"duration_ms": 200}`).Response.OperationID
	// Completed passes; the status read that confirms the outcome after tasks/result says
	// working.
	var fired atomic.Bool
	rule := proxy.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "tasks/get", Times: -1, Rewrite: func(msg map[string]any) bool {
		t := faultproxy.ResultObject(msg)
		if t == nil || t["status"] != "completed" || proxy.Count("request", "tasks/result") == 0 || fired.Swap(true) {
			return false
		}
		t["status"] = "working"
		return true
	}})
	reg := prometheus.NewRegistry()
	_, passes := b.Watcher(t, "w1", func(c *watch.Config) { c.Registerer = reg })
	opstest.WaitFor(t, passes, 10*time.Second, "envelope", func() bool { return b.Detail(t, id).Envelope != nil })
	if proxy.Fired(rule) != 1 {
		t.Fatalf("the rewrite fired %d times; the test proves nothing", proxy.Fired(rule))
	}
	d := b.Detail(t, id)
	if d.Task.State != operations.StateCompleted {
		t.Fatalf("stored state %s, want completed (never moved back)", d.Task.State)
	}
	if len(d.Violations) != 1 || d.Violations[0].From != "completed" || d.Violations[0].To != "working" || d.Violations[0].Kind != operations.ViolationTransition {
		t.Fatalf("violations = %+v, want one completed → working", d.Violations)
	}
	if n := counterValue(t, reg, "taskgate_watch_transition_violations_total", "kind", "transition"); n != 1 {
		t.Fatalf("violations counted %v, want 1", n)
	}
	ov, err := b.Store.Overview(context.Background(), operations.Scope{All: true}, time.Hour)
	if err != nil || ov.ViolationsInWindow != 1 || len(ov.Violations) != 1 {
		t.Fatalf("overview shows %d violations (%+v), err %v", ov.ViolationsInWindow, ov.Violations, err)
	}
}

func TestChangedTaskIDBetweenPollsIsRecorded(t *testing.T) {
	t.Parallel()
	for _, era := range []string{"legacy", "extension"} {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			b, proxy := behindProxy(t, era)
			id := b.Start(t, "refund", "tid-1", `{"duration_ms": 400}`).Response.OperationID
			rule := proxy.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "tasks/get", Rewrite: faultproxy.SetTaskID("someone-else")})
			reg := prometheus.NewRegistry()
			_, passes := b.Watcher(t, "w1", func(c *watch.Config) { c.Registerer = reg })
			opstest.WaitFor(t, passes, 10*time.Second, "envelope", func() bool { return b.Detail(t, id).Envelope != nil })
			if proxy.Fired(rule) != 1 {
				t.Fatalf("the rewrite fired %d times", proxy.Fired(rule))
			}
			d := b.Detail(t, id)
			if len(d.Violations) != 1 {
				t.Fatalf("violations = %+v, want the changed id", d.Violations)
			}
			v := d.Violations[0]
			if v.Kind != operations.ViolationTaskIDChanged || v.TaskID != "someone-else" || v.From != "working" || v.Detail == "" {
				t.Fatalf("violation = %+v", v)
			}
			if d.Task.TaskID == "someone-else" || d.Task.State != operations.StateCompleted {
				t.Fatalf("stored task %s %s: the answer for another task was applied", d.Task.TaskID, d.Task.State)
			}
			if n := counterValue(t, reg, "taskgate_watch_transition_violations_total", "kind", "task_id_changed"); n != 1 {
				t.Fatalf("violations counted %v, want 1", n)
			}
		})
	}
}
