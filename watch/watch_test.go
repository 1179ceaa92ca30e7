package watch_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/watch"
)

func TestMain(m *testing.M) {
	serveBenchReceiverIfAsked()
	pgtest.Main(m)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	if _, err := watch.New(watch.Config{}); err == nil {
		t.Fatal("a config without store, servers and policy was accepted")
	}
	b := opstest.Setup(t, opstest.Options{})
	_, err := watch.New(watch.Config{Store: b.Store, Servers: b.Servers, Policy: b.Policy, Jitter: 2})
	if err == nil {
		t.Fatal("jitter 2 was accepted")
	}
	w, err := watch.New(watch.Config{Store: b.Store, Servers: b.Servers, Policy: b.Policy})
	if err != nil || w.ReplicaID() == "" {
		t.Fatalf("defaults: %v, replica %q", err, w.ReplicaID())
	}
	w.Stop() // not started: no-op
}

// settled reports whether every operation reached a terminal task state with its outcome
// fetched, or a reconciliation item.
func settled(t *testing.T, b *opstest.Bundle, ids []string) bool {
	for _, id := range ids {
		d := b.Detail(t, id)
		done := d.Task.State.Final() && (d.Envelope != nil || d.Reconciliation != nil)
		if !done {
			return false
		}
	}
	return true
}

func TestRestartResumesEveryTaskWithoutRepeatingACall(t *testing.T) {
	t.Parallel()
	for _, era := range []string{"legacy", "extension"} {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			b := opstest.Setup(t, opstest.Options{Era: era, Receiver: receiver.Config{DefaultPollInterval: 100 * time.Millisecond}})
			const n = 8
			var ids []string
			for i := range n {
				// Long enough to be working at their first polls however slowly the watcher
				// starts: a task that ends first is learned from its notification, unpolled.
				res := b.Start(t, "refund", fmt.Sprintf("rs-%d", i), fmt.Sprintf(`{"duration_ms": %d}`, 2000+100*i))
				ids = append(ids, res.Response.OperationID)
			}
			w1, passes := b.Watcher(t, "before", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "first polls", func() bool {
				var polls int
				_ = b.Pool.QueryRow(context.Background(), `SELECT coalesce(sum(polls),0) FROM tasks`).Scan(&polls)
				return polls >= n
			})
			w1.Stop()
			var inFlight int
			_ = b.Pool.QueryRow(context.Background(), `SELECT count(*) FROM tasks WHERE state IN ('working','input_required')`).Scan(&inFlight)
			if inFlight == 0 {
				t.Fatal("no task was in flight at the stop; the test proves nothing")
			}
			// A restarted console: new connections (legacy sessions resumed), a new replica.
			b.Restart(t)
			_, passes = b.Watcher(t, "after", nil)
			opstest.WaitFor(t, passes, 20*time.Second, "every task settled", func() bool { return settled(t, b, ids) })
			c := b.Receiver.Counters()
			if c.ToolCalls["work_required"] != n {
				t.Fatalf("tools/call = %d, want %d (none repeated)", c.ToolCalls["work_required"], n)
			}
			for _, id := range ids {
				if c.ToolCallsByKey[id] != 1 {
					t.Fatalf("operation %s called %d times", id, c.ToolCallsByKey[id])
				}
				if d := b.Detail(t, id); d.Task.State != operations.StateCompleted {
					t.Fatalf("operation %s ended %s (reconciliation %+v), want completed after resuming", id, d.Task.State, d.Reconciliation)
				}
			}
			t.Logf("%d tasks in flight at the stop", inFlight)
		})
	}
}

func TestTwoReplicasShareTasksWithoutDoublePolling(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	b := opstest.Setup(t, opstest.Options{Era: "extension", Receiver: receiver.Config{DefaultPollInterval: interval}})
	const n = 12
	// Long enough for each replica to run several passes while the other holds tasks.
	const duration = 3 * time.Second
	var a, bb, passesA, passesB atomic.Int64
	// Which replica takes a new task is a race its passes' timing decides (one replica won
	// every task in some runs). So each replica's passes are paused in turn while half the
	// tasks start: each then holds tasks the other's passes run beside, which is what the test
	// is about. A paused replica still polls what it holds.
	pauseA, pauseB := make(chan chan struct{}, 1), make(chan chan struct{}, 1)
	parked, done := make(chan string, 2), make(chan struct{})
	tune := func(name string, c, p *atomic.Int64, pause chan chan struct{}) func(*watch.Config) {
		return func(cfg *watch.Config) {
			cfg.BatchSize = 4
			prev := cfg.AfterPass
			cfg.AfterPass = func(k int) {
				c.Add(int64(k))
				p.Add(1)
				prev(k)
				select {
				case resume := <-pause:
					parked <- name
					select {
					case <-resume:
					case <-done: // the test ended while this replica was paused
					}
				default:
				}
			}
		}
	}
	_, pa := b.Watcher(t, "replica-a", tune("a", &a, &passesA, pauseA))
	_, pb := b.Watcher(t, "replica-b", tune("b", &bb, &passesB, pauseB))
	t.Cleanup(func() { close(done) }) // before the replicas stop
	opstest.WaitFor(t, pa, 20*time.Second, "both replicas running", func() bool { return passesA.Load() > 0 && passesB.Load() > 0 })
	held := func(replica string) int {
		var k int
		if err := b.Pool.QueryRow(context.Background(), `SELECT count(*) FROM tasks WHERE lease_owner = $1`, replica).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	var ids []string
	startHalf := func(from int) {
		for i := from; i < from+n/2; i++ {
			res := b.Start(t, "refund", fmt.Sprintf("two-%d", i), fmt.Sprintf(`{"duration_ms": %d}`, duration.Milliseconds()))
			ids = append(ids, res.Response.OperationID)
		}
	}
	park := func(pause chan chan struct{}, name string) chan struct{} {
		resume := make(chan struct{})
		pause <- resume
		select {
		case got := <-parked:
			if got != name {
				t.Fatalf("replica %s parked, want %s", got, name)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("replica %s never finished a pass", name)
		}
		return resume
	}
	resumeA := park(pauseA, "a")
	startHalf(0)
	opstest.WaitFor(t, pb, 20*time.Second, "replica b holding the first half", func() bool { return held("replica-b") == n/2 })
	resumeB := park(pauseB, "b")
	close(resumeA)
	startHalf(n / 2)
	opstest.WaitFor(t, pa, 20*time.Second, "replica a holding the second half", func() bool { return held("replica-a") == n/2 })
	close(resumeB)
	opstest.WaitFor(t, pa, 20*time.Second, "every task settled", func() bool { return settled(t, b, ids) })
	if a.Load() == 0 || bb.Load() == 0 {
		t.Fatalf("polls by replica: a=%d b=%d; both should have worked", a.Load(), bb.Load())
	}
	var polls int
	if err := b.Pool.QueryRow(context.Background(), `SELECT sum(polls) FROM tasks`).Scan(&polls); err != nil {
		t.Fatal(err)
	}
	gets := b.Receiver.Counters().Methods["tasks/get"]
	if gets != polls {
		t.Fatalf("receiver saw %d tasks/get, the claims recorded %d polls", gets, polls)
	}
	// Each task lives about 1 s and may be polled at most once per interval (plus the first
	// poll and one for lateness): double polling would about double this.
	if limit := n * (int(duration/interval) + 3); polls > limit {
		t.Fatalf("%d polls for %d tasks, more than %d: tasks were polled twice inside an interval", polls, n, limit)
	}
	if c := b.Receiver.Counters(); c.ToolCalls["work_required"] != n {
		t.Fatalf("tools/call = %d", c.ToolCalls["work_required"])
	}
	t.Logf("%d polls for %d tasks (a=%d, b=%d)", polls, n, a.Load(), bb.Load())
}

func TestUnobservableTaskGoesToReconciliationNeverFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
	}{{"unauthorized", http.StatusUnauthorized}, {"server error", http.StatusServiceUnavailable}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := opstest.Setup(t, opstest.Options{Era: "extension"})
			res := b.Start(t, "refund", "u-1", `{"outcome": "hang"}`)
			id := res.Response.OperationID
			b.Receiver.Knobs().RefuseTasksGet(0, time.Now().Add(time.Hour), tc.status)
			_, passes := b.Watcher(t, "r1", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "unobservable", func() bool { return b.Detail(t, id).Task.State.Final() })
			d := b.Detail(t, id)
			if d.Task.State != operations.StateUnobservable || d.DomainOutcome != operations.OutcomeUnknown {
				t.Fatalf("state %s outcome %s, want unobservable/unknown", d.Task.State, d.DomainOutcome)
			}
			if d.Reconciliation == nil || d.Reconciliation.Reason != operations.ReasonTaskUnobservable {
				t.Fatalf("reconciliation = %+v", d.Reconciliation)
			}
		})
	}
}

func TestSessionGoneMakesTheTaskUnobservable(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy"})
	res := b.Start(t, "refund", "sg-1", `{"outcome": "hang"}`)
	id := res.Response.OperationID
	var sid string
	if err := b.Pool.QueryRow(context.Background(), `SELECT session_id FROM tasks WHERE operation_id = $1`, id).Scan(&sid); err != nil || sid == "" {
		t.Fatalf("no session id stored with the legacy task: %q %v", sid, err)
	}
	req, _ := http.NewRequest(http.MethodDelete, b.BaseURL+"/mcp", nil)
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("end session: %v %v", resp, err)
	}
	resp.Body.Close()
	b.Restart(t) // the watcher resumes the stored session, which the server no longer knows
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "unobservable", func() bool { return b.Detail(t, id).Task.State.Final() })
	d := b.Detail(t, id)
	if d.Task.State != operations.StateUnobservable || d.Reconciliation == nil || d.Reconciliation.Reason != operations.ReasonSessionGone {
		t.Fatalf("state %s reconciliation %+v", d.Task.State, d.Reconciliation)
	}
	if n := b.Receiver.Counters().ToolCalls["work_required"]; n != 1 {
		t.Fatalf("tools/call = %d: the task was re-created", n)
	}
}

func TestDeadlineExpiresTheTaskIntoReconciliation(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy", Receiver: receiver.Config{MaxTTL: 500 * time.Millisecond, DefaultTTL: 500 * time.Millisecond}})
	res := b.Start(t, "refund", "e-1", `{"outcome": "hang"}`)
	id := res.Response.OperationID
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "expired", func() bool { return b.Detail(t, id).Task.State.Final() })
	d := b.Detail(t, id)
	if d.Task.State != operations.StateExpired || d.DomainOutcome != operations.OutcomeUnknown ||
		d.Reconciliation == nil || d.Reconciliation.Reason != operations.ReasonTaskExpired {
		t.Fatalf("state %s outcome %s reconciliation %+v", d.Task.State, d.DomainOutcome, d.Reconciliation)
	}
	if d.Task.Deadline == nil || d.Task.Deadline.Sub(*d.Task.ServerCreatedAt) > 600*time.Millisecond {
		t.Fatalf("deadline %v not creation + granted ttl", d.Task.Deadline)
	}
}

func TestMetricsAreExported(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "extension"})
	res := b.Start(t, "refund", "m-1", `{"duration_ms": 200}`)
	reg := prometheus.NewRegistry()
	_, passes := b.Watcher(t, "r1", func(c *watch.Config) { c.Registerer = reg })
	opstest.WaitFor(t, passes, 10*time.Second, "envelope", func() bool { return b.Detail(t, res.Response.OperationID).Envelope != nil })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
		if mf.GetName() == "taskgate_watch_polls_total" {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			if sum < 1 {
				t.Fatalf("polls counted %v", sum)
			}
		}
	}
	for _, name := range []string{"taskgate_watch_polls_total", "taskgate_watch_poll_lateness_seconds", "taskgate_tasks", "taskgate_watch_polling_amplification"} {
		if !got[name] {
			t.Errorf("metric %s missing; have %v", name, strings.Join(keys(got), ","))
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
