package faultproxy_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/taskgate/taskgate/gates/faultproxy"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var acme = operations.Scope{Tenants: []string{"acme"}}

type rig struct {
	*opstest.Bundle
	proxy *faultproxy.Proxy
}

// setup starts the reference receiver of one era behind a fault proxy; the policy names the
// proxy, so the start path and the watchers talk through it.
func setup(t *testing.T, era string) *rig {
	t.Helper()
	r := &rig{}
	r.Bundle = opstest.Setup(t, opstest.Options{Era: era, Front: func(t testing.TB, target string) string {
		p, err := faultproxy.New(target)
		if err != nil {
			t.Fatal(err)
		}
		u, err := p.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		r.proxy = p
		return u
	}})
	return r
}

// invariants checks what every fault must leave intact: the product sent exactly one
// tools/call, the ledger holds no invalid transition, and the system of record holds at most
// one effect.
func (r *rig) invariants(t *testing.T, id string) operations.Detail {
	t.Helper()
	if n := r.proxy.Count("request", "tools/call"); n != 1 {
		t.Fatalf("the product sent tools/call %d times, want 1", n)
	}
	c := r.Receiver.Counters()
	if c.ToolCallsByKey[id] > 1 || c.ToolCalls["work_required"] > 1 {
		t.Fatalf("the server saw tools/call %v (by key %d)", c.ToolCalls, c.ToolCallsByKey[id])
	}
	if c.Effects > 1 {
		t.Fatalf("system of record: %d effects", c.Effects)
	}
	d := r.Detail(t, id)
	if len(d.Violations) != 0 {
		t.Fatalf("invalid transitions stored: %+v", d.Violations)
	}
	return d
}

func (r *rig) faults(a faultproxy.Action) int {
	n := 0
	for _, m := range r.proxy.Messages() {
		if m.Fault == a {
			n++
		}
	}
	return n
}

var eras = []string{"legacy", "extension"}

func TestCutBeforeCreateResultLeavesTheCallUnacknowledgedAndUnrepeated(t *testing.T) {
	t.Parallel()
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			r := setup(t, era)
			r.proxy.Add(faultproxy.Rule{Action: faultproxy.CutBeforeCreateResult})
			id := r.Start(t, "refund", "cb-1", `{"duration_ms": 50}`).Response.OperationID
			d := r.Detail(t, id)
			if d.Task.State != operations.StateCreateUnacknowledged || d.DomainOutcome != operations.OutcomeUnknown {
				t.Fatalf("task %s outcome %s, want create_unacknowledged/unknown", d.Task.State, d.DomainOutcome)
			}
			if d.Reconciliation == nil || d.Reconciliation.Reason != operations.ReasonCreateUnacknowledged {
				t.Fatalf("reconciliation = %+v", d.Reconciliation)
			}
			_, passes := r.Watcher(t, "w1", nil)
			<-passes
			<-passes
			r.Start(t, "refund", "cb-1", `{"duration_ms": 50}`) // the application retries its request
			if r.faults(faultproxy.CutBeforeCreateResult) != 1 {
				t.Fatalf("the cut did not fire: %+v", r.proxy.Messages())
			}
			if r.Receiver.Counters().TasksCreated != 1 {
				t.Fatalf("the server created %d tasks, want 1", r.Receiver.Counters().TasksCreated)
			}
			r.invariants(t, id)
		})
	}
}

func TestCutAfterCreateResultIsWatchedToItsEnd(t *testing.T) {
	t.Parallel()
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			r := setup(t, era)
			r.proxy.Add(faultproxy.Rule{Action: faultproxy.CutAfterCreateResult})
			id := r.Start(t, "refund", "ca-1", `{"duration_ms": 100}`).Response.OperationID
			if d := r.Detail(t, id); d.Task.TaskID == "" || d.Task.State != operations.StateWorking {
				t.Fatalf("after a delivered CreateTaskResult the task is %+v", d.Task)
			}
			_, passes := r.Watcher(t, "w1", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "envelope", func() bool { return r.Detail(t, id).Envelope != nil })
			if r.faults(faultproxy.CutAfterCreateResult) < 2 { // the answer marked, the next request cut
				t.Fatalf("the cut did not fire: %+v", r.proxy.Messages())
			}
			d := r.invariants(t, id)
			if d.Task.State != operations.StateCompleted || r.Receiver.Counters().Effects != 1 {
				t.Fatalf("task %s effects %d, want completed with one effect", d.Task.State, r.Receiver.Counters().Effects)
			}
		})
	}
}

func TestCutBetweenCompletedAndResultRetrievalStillFetchesTheResultOnce(t *testing.T) {
	t.Parallel()
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			r := setup(t, era)
			r.proxy.Add(faultproxy.Rule{Action: faultproxy.CutBeforeResult})
			id := r.Start(t, "refund", "cr-1", `{"duration_ms": 50}`).Response.OperationID
			_, passes := r.Watcher(t, "w1", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "envelope", func() bool { return r.Detail(t, id).Envelope != nil })
			if r.faults(faultproxy.CutBeforeResult) != 1 {
				t.Fatalf("the cut did not fire: %+v", r.proxy.Messages())
			}
			d := r.invariants(t, id)
			if d.Task.State != operations.StateCompleted || d.Envelope.Status != "completed" || r.Receiver.Counters().Effects != 1 {
				t.Fatalf("task %s envelope %+v effects %d", d.Task.State, d.Envelope, r.Receiver.Counters().Effects)
			}
		})
	}
}

func TestCutDuringInputRequiredKeepsTheQuestionAndTheAnswerWorks(t *testing.T) {
	t.Parallel()
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			r := setup(t, era)
			r.proxy.Add(faultproxy.Rule{Action: faultproxy.CutDuringInput})
			id := r.Start(t, "refund", "ci-1", `{"outcome": "input", "input_message": "Approve refund?"}`).Response.OperationID
			_, passes := r.Watcher(t, "w1", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "pending input", func() bool {
				d := r.Detail(t, id)
				return d.Task.State == operations.StateInputRequired && len(d.Inputs) == 1
			})
			if r.faults(faultproxy.CutDuringInput) != 1 {
				t.Fatalf("the cut did not fire: %+v", r.proxy.Messages())
			}
			in := r.Detail(t, id).Inputs[0]
			if _, err := r.Ops.AnswerInput(context.Background(), acme, id, in.Key, "alice",
				mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"approve": true}}); err != nil {
				t.Fatal(err)
			}
			opstest.WaitFor(t, passes, 10*time.Second, "envelope", func() bool { return r.Detail(t, id).Envelope != nil })
			d := r.invariants(t, id)
			if d.Task.State != operations.StateCompleted || r.Receiver.Counters().Effects != 1 {
				t.Fatalf("task %s effects %d", d.Task.State, r.Receiver.Counters().Effects)
			}
		})
	}
}

func TestCutAfterCancelRequestIsFollowedToCancelled(t *testing.T) {
	t.Parallel()
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			r := setup(t, era)
			id := r.Start(t, "refund", "cc-1", `{"duration_ms": 20000}`).Response.OperationID
			_, passes := r.Watcher(t, "w1", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "first poll", func() bool { return r.Detail(t, id).Task.Polls > 0 })
			r.proxy.Add(faultproxy.Rule{Action: faultproxy.CutAfterCancel})
			if _, err := r.Ops.Cancel(context.Background(), acme, id, "alice", "customer withdrew"); err == nil {
				t.Fatal("a cancel whose answer was cut reported success")
			}
			opstest.WaitFor(t, passes, 10*time.Second, "cancelled", func() bool { return r.Detail(t, id).Task.State == operations.StateCancelled })
			if r.faults(faultproxy.CutAfterCancel) != 1 {
				t.Fatalf("the cut did not fire: %+v", r.proxy.Messages())
			}
			d := r.invariants(t, id)
			if d.Task.CancelRequested == nil || d.DomainOutcome == operations.OutcomeNotApplied {
				t.Fatalf("cancel requested %v, outcome %s: cancelled must not imply not_applied", d.Task.CancelRequested, d.DomainOutcome)
			}
			if r.Receiver.Counters().Effects != 0 {
				t.Fatalf("a cancelled task applied %d effects", r.Receiver.Counters().Effects)
			}
		})
	}
}

func TestDuplicateDeliveryOfTheCallMakesOneEffect(t *testing.T) {
	t.Parallel()
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			r := setup(t, era)
			r.proxy.Add(faultproxy.Rule{Action: faultproxy.Duplicate, Method: "tools/call"})
			id := r.Start(t, "refund", "dd-1", `{"duration_ms": 50}`).Response.OperationID
			_, passes := r.Watcher(t, "w1", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "envelope", func() bool { return r.Detail(t, id).Envelope != nil })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for r.Receiver.Counters().EffectsRefused < 1 {
				select {
				case <-ctx.Done():
					t.Fatalf("the duplicate did not reach the system of record: %+v", r.Receiver.Counters())
				case <-passes:
				}
			}
			if n := r.Receiver.Counters().ToolCalls["work_required"]; n != 2 {
				t.Fatalf("the server saw %d tools/call, want the duplicate (2)", n)
			}
			if c := r.Receiver.Counters(); c.Effects != 1 {
				t.Fatalf("effects = %d, want 1", c.Effects)
			}
			if n := r.proxy.Count("request", "tools/call"); n != 1 {
				t.Fatalf("the product sent tools/call %d times, want 1", n)
			}
			if d := r.Detail(t, id); len(d.Violations) != 0 || d.Task.State != operations.StateCompleted {
				t.Fatalf("task %s violations %+v", d.Task.State, d.Violations)
			}
		})
	}
}

func TestRewrittenForbiddenStatusIsNeverStored(t *testing.T) {
	t.Parallel()
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			r := setup(t, era)
			id := r.Start(t, "refund", "rw-1", `{"duration_ms": 300}`).Response.OperationID
			rule := r.proxy.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "tasks/get", Rewrite: faultproxy.SetStatus("working", "paused")})
			_, passes := r.Watcher(t, "w1", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "envelope", func() bool { return r.Detail(t, id).Envelope != nil })
			if r.proxy.Fired(rule) != 1 {
				t.Fatalf("the rewrite fired %d times", r.proxy.Fired(rule))
			}
			d := r.invariants(t, id)
			for _, e := range d.Timeline {
				if e.State == "paused" {
					t.Fatalf("the forbidden status was stored: %+v", d.Timeline)
				}
			}
			if d.Task.State != operations.StateCompleted {
				t.Fatalf("stored state %s, want completed", d.Task.State)
			}
		})
	}
}

func TestRewriteHelpers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		f    func(map[string]any) bool
		in   string
		want string
		ok   bool
	}{
		{"status flat", faultproxy.SetStatus("working", "failed"), `{"result":{"taskId":"a","status":"working"}}`, `{"result":{"status":"failed","taskId":"a"}}`, true},
		{"status other", faultproxy.SetStatus("working", "failed"), `{"result":{"taskId":"a","status":"completed"}}`, `{"result":{"status":"completed","taskId":"a"}}`, false},
		{"task id wrapped", faultproxy.SetTaskID("z"), `{"result":{"task":{"taskId":"a","status":"working"}}}`, `{"result":{"task":{"status":"working","taskId":"z"}}}`, true},
		{"drop field", faultproxy.DropField("pollIntervalMs"), `{"result":{"taskId":"a","pollIntervalMs":5}}`, `{"result":{"taskId":"a"}}`, true},
		{"error answer", faultproxy.DropField("status"), `{"error":{"code":-32602}}`, `{"error":{"code":-32602}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			if err := jsonUnmarshal(tc.in, &m); err != nil {
				t.Fatal(err)
			}
			if ok := tc.f(m); ok != tc.ok {
				t.Fatalf("fired = %v, want %v", ok, tc.ok)
			}
			if got := jsonMarshal(m); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
	if _, err := faultproxy.New("ftp://x"); err == nil {
		t.Fatal("a non-http target was accepted")
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func jsonMarshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestThrottleAnswers429WithRetryAfterWithoutForwarding(t *testing.T) {
	t.Parallel()
	r := setup(t, "extension")
	r.proxy.Add(faultproxy.Rule{Action: faultproxy.Throttle, Method: "tools/call", Delay: 1500 * time.Millisecond})
	res, err := r.Ops.Start(context.Background(), acme, operations.StartRequest{IdempotencyKey: "th-1", Workflow: "refund", Tenant: "acme",
		Actor: "app", ObjectRef: "refund A-1", ObjectVersion: "1", IntendedEffect: "refund", Arguments: []byte(`{"duration_ms": 20}`)})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Receiver.Counters().ToolCalls["work_required"]; n != 0 {
		t.Fatalf("a throttled call reached the server %d times", n)
	}
	if r.faults(faultproxy.Throttle) != 1 {
		t.Fatalf("messages %+v", r.proxy.Messages())
	}
	for _, m := range r.proxy.Messages() {
		if m.Fault == faultproxy.Throttle && m.HTTPStatus != 429 {
			t.Fatalf("throttle logged as %+v", m)
		}
	}
	// The product cannot know the call did not run: it is unacknowledged, never resent.
	if d := r.Detail(t, res.Response.OperationID); d.Task.State != operations.StateCreateUnacknowledged {
		t.Fatalf("a 429 on create left the task %s", d.Task.State)
	}
}
