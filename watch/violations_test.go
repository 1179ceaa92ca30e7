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

// patient is refund with a status read budget long enough for a test to hold an answer
// until the task has moved on, however slow the machine.
const patient = `
  - {name: patient, server: rcv, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     max_ttl: 30m, owners: [ops], idempotency_argument: idempotency_key,
     budgets: {status: {timeout: 20s, retries: 1}, result: {timeout: 5s, retries: 1}, create: {timeout: 3s}}}
`

// behindProxy sets up the receiver of one era behind a fault proxy the policy names.
func behindProxy(t *testing.T, era string) (*opstest.Bundle, *faultproxy.Proxy) {
	t.Helper()
	var proxy *faultproxy.Proxy
	b := opstest.Setup(t, opstest.Options{Era: era, Extra: patient, Front: func(t testing.TB, target string) string {
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

// A status read answered "working" before the task ended and delivered after another replica
// stored its completion is stale: dropped and counted as such, never a violation, and the
// outcome is still fetched.
func TestStatusAnswerOvertakenByAnotherReplicasCompletionIsNoViolation(t *testing.T) {
	t.Parallel()
	for _, era := range []string{"legacy", "extension"} {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			b, proxy := behindProxy(t, era)
			// Long enough that the first status read finds the task working however slowly the
			// watcher starts; the held answer then waits for the real end, not a fixed time,
			// inside the patient workflow's status budget.
			id := b.Start(t, "patient", "overtaken-1", `{"duration_ms": 2000}`).Response.OperationID
			// This replica's connection hears of no status change: the completion is learned by
			// another replica only.
			for _, m := range []string{"notifications/tasks/status", "notifications/tasks"} {
				proxy.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: m, Times: -1, Rewrite: elsewhere})
			}
			var overtaken atomic.Bool
			proxy.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "tasks/get", Times: -1, Rewrite: func(msg map[string]any) bool {
				task := faultproxy.ResultObject(msg)
				if task == nil || task["status"] != "working" || overtaken.Load() {
					return false
				}
				// The answer is held while the task really ends and another replica learns it.
				taskID, _ := task["taskId"].(string)
				if !endedOnReceiver(b, taskID, 10*time.Second) {
					t.Errorf("task %q did not end on the receiver while its answer was held", taskID)
					return false
				}
				r, err := b.Store.Observe(context.Background(), id, operations.Observation{State: operations.StateCompleted, Basis: operations.StateWorking}, operations.SourceNotification)
				if err != nil || !r.BecameTerminal {
					t.Errorf("the other replica's completion = %+v, %v", r, err)
				}
				overtaken.Store(true)
				task["statusMessage"] = "a progress message written before the end"
				return true
			}})
			reg := prometheus.NewRegistry()
			_, passes := b.Watcher(t, "w1", func(c *watch.Config) { c.Registerer = reg })
			opstest.WaitFor(t, passes, 15*time.Second, "envelope", func() bool { return b.Detail(t, id).Envelope != nil })
			if !overtaken.Load() {
				t.Fatal("no working answer was held: the test proves nothing")
			}
			d := b.Detail(t, id)
			if d.Task.State != operations.StateCompleted || len(d.Violations) != 0 {
				t.Fatalf("stored %s with violations %+v, want completed and none", d.Task.State, d.Violations)
			}
			if n := counterValue(t, reg, "taskgate_watch_transition_violations_total", "kind", "transition"); n != 0 {
				t.Fatalf("violations counted %v", n)
			}
			if n := plainMetric(t, reg, "taskgate_watch_stale_observations_total"); n < 1 {
				t.Fatalf("stale observations counted %v, want the held answer", n)
			}
		})
	}
}

// A final status another writer stored while this replica's read was out, answered by that
// read with a different message, still gets the outcome fetched: the answer changes the row,
// but the holder's copy lacks the pending result the other writer set.
func TestFinalAnswerAfterAnotherWritersCompletionStillFetchesTheOutcome(t *testing.T) {
	t.Parallel()
	for _, era := range []string{"legacy", "extension"} {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			b, proxy := behindProxy(t, era)
			id := b.Start(t, "patient", "final-elsewhere", `{"duration_ms": 1000}`).Response.OperationID
			for _, m := range []string{"notifications/tasks/status", "notifications/tasks"} {
				proxy.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: m, Times: -1, Rewrite: elsewhere})
			}
			var stored atomic.Bool
			proxy.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "tasks/get", Times: -1, Rewrite: func(msg map[string]any) bool {
				task := faultproxy.ResultObject(msg)
				if task == nil || task["status"] != "completed" || stored.Load() {
					return false
				}
				// Another replica learns the end first, with its own message.
				r, err := b.Store.Observe(context.Background(), id, operations.Observation{State: operations.StateCompleted,
					StatusMessage: "Completed, as another replica heard", Basis: operations.StateWorking}, operations.SourceNotification)
				if err != nil || !r.BecameTerminal {
					t.Errorf("the other replica's completion = %+v, %v", r, err)
				}
				stored.Store(true)
				task["statusMessage"] = "Completed, as this replica reads"
				return true
			}})
			_, passes := b.Watcher(t, "w1", nil)
			opstest.WaitFor(t, passes, 15*time.Second, "envelope", func() bool { return b.Detail(t, id).Envelope != nil })
			if !stored.Load() {
				t.Fatal("no final answer was rewritten: the test proves nothing")
			}
			d := b.Detail(t, id)
			if d.Task.State != operations.StateCompleted || d.Task.ResultState != "fetched" || len(d.Violations) != 0 {
				t.Fatalf("stored %s, result %s, violations %+v", d.Task.State, d.Task.ResultState, d.Violations)
			}
		})
	}
}

// endedOnReceiver waits until the receiver's own record of a task shows it ended.
func endedOnReceiver(b *opstest.Bundle, taskID string, within time.Duration) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if h := b.Receiver.History(taskID); len(h) > 0 && h[len(h)-1].Terminal() {
			return true
		}
	}
	return false
}

// elsewhere makes a status notification name another task.
func elsewhere(msg map[string]any) bool {
	p, _ := msg["params"].(map[string]any)
	if t, ok := p["task"].(map[string]any); ok {
		p = t
	}
	if _, ok := p["taskId"].(string); !ok {
		return false
	}
	p["taskId"] = "elsewhere"
	return true
}

// plainMetric is the value of an unlabelled counter or gauge (0 when not gathered).
func plainMetric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return 0
}

// A status read answered "working" before the server asked its question, and delivered after the
// question's input_required was stored from a notification, is stale: the task stays
// input_required and its question open, not moved on by an answer older than it.
func TestWorkingAnswerOvertakenByTheQuestionLeavesItOpen(t *testing.T) {
	t.Parallel()
	b, proxy := behindProxy(t, "legacy")
	// The question comes late enough that the first status read finds the task working.
	id := b.Start(t, "patient", "overtaken-q", `{"duration_ms": 2000, "outcome": "input"}`).Response.OperationID
	var held atomic.Bool
	proxy.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "tasks/get", Times: -1, Rewrite: func(msg map[string]any) bool {
		task := faultproxy.ResultObject(msg)
		if task == nil || task["status"] != "working" || held.Load() {
			return false
		}
		// Held until the question's status is stored, as a notification delivers it.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if d, err := b.Store.Get(context.Background(), id); err == nil && d.Task != nil && d.Task.State == operations.StateInputRequired {
				held.Store(true)
				break
			}
		}
		task["statusMessage"] = "a progress message written before the question"
		return true
	}})
	reg := prometheus.NewRegistry()
	_, passes := b.Watcher(t, "w1", func(c *watch.Config) { c.Registerer = reg })
	opstest.WaitFor(t, passes, 15*time.Second, "the held answer delivered", func() bool {
		return held.Load() && plainMetric(t, reg, "taskgate_watch_stale_observations_total") >= 1
	})
	opstest.WaitFor(t, passes, 15*time.Second, "the question stored", func() bool { return len(b.Detail(t, id).Inputs) > 0 })
	d := b.Detail(t, id)
	if d.Task.State != operations.StateInputRequired || len(d.Inputs) == 0 || d.Inputs[0].State != "open" {
		t.Fatalf("task %s inputs %+v: the older answer moved the question on", d.Task.State, d.Inputs)
	}
	if len(d.Violations) != 0 {
		t.Fatalf("violations %+v", d.Violations)
	}
}
