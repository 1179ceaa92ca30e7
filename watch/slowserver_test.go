package watch_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/watch"
)

// trickler forwards MCP Streamable HTTP to target and sends every tasks/get answer one byte
// every 200ms: a server that answers, but too slowly to be of use.
func trickler(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.FlushInterval = -1
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"tasks/get"`)) {
			w = &trickle{ResponseWriter: w, ctx: r.Context()}
		}
		rp.ServeHTTP(w, r)
	})
	return serveLoopback(t, h, u.Path)
}

type trickle struct {
	http.ResponseWriter
	ctx context.Context
}

func (w *trickle) Write(p []byte) (int, error) {
	for i := range p {
		if _, err := w.ResponseWriter.Write(p[i : i+1]); err != nil {
			return i, err
		}
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		select {
		case <-w.ctx.Done():
			return i + 1, w.ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return len(p), nil
}

func (w *trickle) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

const twoServers = `
tenants: [acme]
owners: [{name: ops, contact: ops@example.com}]
servers:
  - {name: rcv, url: "%[1]s", era: extension}
  - {name: slow, url: "%[2]s", era: extension}
workflows:
  - {name: refund, server: rcv, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     max_ttl: 30m, owners: [ops], idempotency_argument: idempotency_key,
     budgets: {status: {timeout: 1s, retries: 0}, result: {timeout: 5s, retries: 1}, create: {timeout: 3s}}}
  - {name: slowrefund, server: slow, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     max_ttl: 30m, owners: [ops], idempotency_argument: idempotency_key,
     budgets: {status: {timeout: 1s, retries: 0}, result: {timeout: 5s, retries: 1}, create: {timeout: 3s}}}
`

func TestOneTricklingServerNeverSlowsAnother(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "extension", Receiver: receiver.Config{DefaultPollInterval: 100 * time.Millisecond}})
	direct := b.BaseURL + "/mcp"
	pol, err := config.Parse(fmt.Appendf(nil, twoServers, direct, trickler(t, direct)))
	if err != nil {
		t.Fatal(err)
	}
	b.Policy = pol
	b.Restart(t)
	var slow []string
	for i := range 4 {
		slow = append(slow, b.Start(t, "slowrefund", fmt.Sprintf("slow-%d", i), `{"outcome": "hang"}`).Response.OperationID)
	}
	var fast []string
	for i := range 4 {
		// 3 s: long enough that the starts' own time under load leaves most of it watched.
		fast = append(fast, b.Start(t, "refund", fmt.Sprintf("fast-%d", i), `{"duration_ms": 3000}`).Response.OperationID)
	}
	reg := prometheus.NewRegistry()
	var peakSlow float64
	_, passes := b.Watcher(t, "w1", func(c *watch.Config) {
		c.Registerer = reg
		c.UnobservableGrace = 2 * time.Second
		c.Parallel = 4
		c.ServerParallel = 2
		prev := c.AfterPass
		c.AfterPass = func(n int) {
			if v := gaugeValue(reg, "taskgate_watch_reads_in_flight", "server", "slow"); v > peakSlow {
				peakSlow = v
			}
			prev(n)
		}
	})
	began := time.Now()
	opstest.WaitFor(t, passes, 15*time.Second, "every task settled", func() bool { return settled(t, b, append(fast, slow...)) })
	t.Logf("settled after %v", time.Since(began).Round(time.Millisecond))
	ctx := context.Background()
	for _, id := range fast {
		d := b.Detail(t, id)
		if d.Task.State != operations.StateCompleted {
			t.Fatalf("fast task ended %s", d.Task.State)
		}
		// A 3 s task polled every 100 ms: a pass waiting on the slow server's reads would
		// poll it once a second at best, three or four times.
		if d.Task.Polls < 8 {
			t.Fatalf("fast task polled %d times in its 3 s; the slow server held the passes", d.Task.Polls)
		}
		var lag time.Duration
		if err := b.Pool.QueryRow(ctx, `SELECT terminal_at - (server_created_at + interval '3000 milliseconds') FROM tasks WHERE operation_id = $1`, id).Scan(&lag); err != nil {
			t.Fatal(err)
		}
		if lag > 700*time.Millisecond {
			t.Fatalf("fast task seen finished %v after it finished", lag)
		}
	}
	for _, id := range slow {
		d := b.Detail(t, id)
		if d.Task.State != operations.StateUnobservable || d.Reconciliation == nil || d.Reconciliation.Reason != operations.ReasonTaskUnobservable {
			t.Fatalf("slow task %s, reconciliation %+v; want unobservable with an item", d.Task.State, d.Reconciliation)
		}
	}
	if peakSlow > 2 {
		t.Fatalf("%v reads of the slow server ran at once, above its limit of 2", peakSlow)
	}
	if n := counterValue(t, reg, "taskgate_watch_budget_exhausted_total", "server", "slow"); n < 1 {
		t.Fatalf("budget exhaustion of the slow server counted %v", n)
	}
	if n := counterValue(t, reg, "taskgate_watch_budget_exhausted_total", "server", "rcv"); n != 0 {
		t.Fatalf("budget exhaustion counted for the healthy server: %v", n)
	}
	var msg string
	_ = b.Pool.QueryRow(ctx, `SELECT message FROM task_timeline WHERE operation_id = $1 ORDER BY id DESC LIMIT 1`, slow[0]).Scan(&msg)
	if !strings.Contains(msg, "status reads failed") {
		t.Fatalf("the slow task's last entry says %q", msg)
	}
}

func gaugeValue(reg *prometheus.Registry, name, label, value string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}
