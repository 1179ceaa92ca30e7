package mcpclient_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskgate/taskgate/gates/faultproxy"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// behindFaultProxy serves a reference receiver behind a fault proxy and dials it in era.
func behindFaultProxy(t *testing.T, era mcpclient.Era) (*faultproxy.Proxy, mcpclient.Conn) {
	t.Helper()
	rig := startReceiver(t, receiver.Config{})
	p, err := faultproxy.New(rig.url)
	if err != nil {
		t.Fatal(err)
	}
	u, err := p.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	conn, err := mcpclient.Dial(ctxT(t, 20*time.Second), mcpclient.Options{URL: u, Token: "tok-a", Era: eraChoice(era)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return p, conn
}

// TestAStatusAnsweredBeforeTheTaskEndedIsNoViolation: a tasks/get sent while the task works
// is answered "working" and held on the wire until another read has learned "completed";
// the late answer is stale, not a completed → working violation, and the read returns the
// terminal status. A "working" answer to a read sent after "completed" was known is still
// recorded as a violation.
func TestAStatusAnsweredBeforeTheTaskEndedIsNoViolation(t *testing.T) {
	t.Parallel()
	for _, era := range []mcpclient.Era{mcpclient.EraLegacy, mcpclient.EraExtension} {
		t.Run(eraMode(era), func(t *testing.T) {
			t.Parallel()
			p, conn := behindFaultProxy(t, era)
			ctx := ctxT(t, 20*time.Second)
			task, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"duration_ms": 300}, mcpclient.TaskOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var taken atomic.Bool
			held, release := make(chan struct{}), make(chan struct{})
			p.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "tasks/get", Times: -1, Rewrite: func(msg map[string]any) bool {
				if r := faultproxy.ResultObject(msg); r == nil || r["status"] != "working" || taken.Swap(true) {
					return false
				}
				close(held)
				<-release
				return false
			}})
			type read struct {
				snap mcpclient.Snapshot
				err  error
			}
			late := make(chan read, 1)
			go func() {
				s, err := conn.GetTask(ctx, task.ID)
				late <- read{s, err}
			}()
			select {
			case <-held:
			case <-ctx.Done():
				t.Fatal("no working answer was held")
			}
			// Other reads pass; they learn the terminal status while the first answer waits.
			waitStatus(t, ctx, conn, task.ID, mcpclient.StatusCompleted)
			before := p.Count("request", "tasks/get")
			close(release)
			r := <-late
			if r.err != nil {
				t.Fatalf("the late read: %v", r.err)
			}
			if r.snap.Violation != nil || r.snap.Task.Status != mcpclient.StatusCompleted {
				t.Fatalf("the late read returned %s with violation %v, want completed and none", r.snap.Task.Status, r.snap.Violation)
			}
			if p.Count("request", "tasks/get") != before+1 {
				t.Errorf("tasks/get sent %d times after the stale answer, want 1 (read again)", p.Count("request", "tasks/get")-before)
			}
			p.Clear()

			// A read sent after completed was known that answers working is a violation.
			back := p.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "tasks/get", Rewrite: faultproxy.SetStatus("completed", "working")})
			s, err := conn.GetTask(ctx, task.ID)
			if err != nil || p.Fired(back) != 1 {
				t.Fatalf("read after completion: %v (rewrites %d)", err, p.Fired(back))
			}
			if s.Violation == nil || s.Violation.From != mcpclient.StatusCompleted || s.Violation.To != mcpclient.StatusWorking {
				t.Fatalf("a working answer to a read sent after completed: violation %v, want completed → working", s.Violation)
			}
		})
	}
}
