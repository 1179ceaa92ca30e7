package watch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/mcptest"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
)

// sdkPolicy routes one task-required workflow to the TypeScript SDK task server.
const sdkPolicy = `
tenants: [acme]
owners: [{name: ops, contact: ops@example.com}]
servers:
  - {name: sdk, url: "%s", era: legacy}
workflows:
  - {name: refund, server: sdk, tool: slow_job, effect: effectful, task_use: required, fallback: {kind: reject},
     max_ttl: 30m, owners: [ops], idempotency_argument: idempotency_key,
     budgets: {status: {timeout: 2s, retries: 1}, result: {timeout: 5s, retries: 1}, create: {timeout: 5s}}}
`

// sdkSetup is opstest.Setup against interop/sdk-task-server.mjs (the official TypeScript
// SDK's InMemoryTaskStore, which binds each task to the session that created it).
func sdkSetup(t *testing.T) (*opstest.Bundle, *mcptest.SDKServer) {
	t.Helper()
	srv := mcptest.StartSDKServer(t)
	pol, err := config.Parse(fmt.Appendf(nil, sdkPolicy, srv.URL))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	pool := pgtest.New(t)
	b := &opstest.Bundle{Pool: pool, BaseURL: srv.Base, Policy: pol, Store: operations.NewStore(pool)}
	b.Servers = operations.NewServers(operations.ServersConfig{Policy: pol})
	t.Cleanup(b.Servers.Close)
	b.Ops, err = operations.NewService(operations.Config{Store: b.Store, Policy: pol, Servers: b.Servers,
		PollFloor: 20 * time.Millisecond, DefaultPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return b, srv
}

// sdkToolCalls reads the SDK server's count of task-creating tools/call.
func sdkToolCalls(t *testing.T, srv *mcptest.SDKServer) int {
	t.Helper()
	resp, err := http.Get(srv.Base + "/counters")
	if err != nil {
		t.Fatalf("counters: %v", err)
	}
	defer resp.Body.Close()
	var c struct {
		ToolCalls int `json:"toolCalls"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatalf("counters: %v", err)
	}
	return c.ToolCalls
}

func storedSession(t *testing.T, b *opstest.Bundle, id string) string {
	t.Helper()
	var sid string
	if err := b.Pool.QueryRow(context.Background(), `SELECT coalesce(session_id, '') FROM tasks WHERE operation_id = $1`, id).Scan(&sid); err != nil || sid == "" {
		t.Fatalf("no Mcp-Session-Id stored with the task: %q %v", sid, err)
	}
	return sid
}

func TestSDKTaskStoreRestartedWatcherResumesTheSession(t *testing.T) {
	t.Parallel()
	b, srv := sdkSetup(t)
	res := b.Start(t, "refund", "sdk-1", `{"duration_ms": 1500, "poll_ms": 50, "text": "refund sent"}`)
	id := res.Response.OperationID
	if res.Response.Route != operations.RouteTask {
		t.Fatalf("route %s (%s), want task", res.Response.Route, res.Response.Reason)
	}
	sid := storedSession(t, b, id)
	// The SDK's store binds the task to its session: a new session cannot see it, so only
	// resuming the stored session keeps it observable.
	other, err := mcpclient.Dial(context.Background(), mcpclient.Options{URL: srv.URL, Era: mcpclient.EraChoiceLegacy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.GetTask(context.Background(), b.Detail(t, id).Task.TaskID); !errors.Is(err, mcpclient.ErrUnknownTask) {
		t.Fatalf("another session observed the task: %v, want ErrUnknownTask", err)
	}
	_ = other.Close()

	w1, passes := b.Watcher(t, "before", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "a working status observed", func() bool {
		return b.Detail(t, id).Task.Polls >= 2
	})
	w1.Stop()
	if st := b.Detail(t, id).Task.State; st != operations.StateWorking {
		t.Fatalf("state %s at the stop, want working: the test proves nothing", st)
	}

	// A restarted console: new process-level connections; the stored session is resumed.
	b.Restart(t)
	_, passes = b.Watcher(t, "after", nil)
	opstest.WaitFor(t, passes, 15*time.Second, "the outcome", func() bool {
		d := b.Detail(t, id)
		return d.Task.State.Final() && (d.Envelope != nil || d.Reconciliation != nil)
	})
	d := b.Detail(t, id)
	if d.Task.State != operations.StateCompleted || d.Envelope == nil || d.Reconciliation != nil {
		t.Fatalf("state %s envelope %+v reconciliation %+v, want completed with its envelope", d.Task.State, d.Envelope, d.Reconciliation)
	}
	if got := storedSession(t, b, id); got != sid {
		t.Fatalf("session changed from %s to %s", sid, got)
	}
	if n := sdkToolCalls(t, srv); n != 1 {
		t.Fatalf("tools/call = %d, want 1 (never re-created)", n)
	}
}

func TestSDKTaskStoreForgottenSessionGoesToReconciliation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		forget func(t *testing.T, srv *mcptest.SDKServer, sid string)
		// restarts: the server's counters start again from zero.
		restarts bool
	}{
		{"session deleted", func(t *testing.T, srv *mcptest.SDKServer, sid string) {
			req, _ := http.NewRequest(http.MethodDelete, srv.URL, nil)
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("MCP-Protocol-Version", "2025-11-25")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("end session: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("end session: HTTP %d", resp.StatusCode)
			}
		}, false},
		{"server restarted", func(t *testing.T, srv *mcptest.SDKServer, _ string) { srv.Restart() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, srv := sdkSetup(t)
			res := b.Start(t, "refund", "sdk-gone", `{"outcome": "hang"}`)
			id := res.Response.OperationID
			sid := storedSession(t, b, id)
			w1, passes := b.Watcher(t, "before", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "a working status observed", func() bool {
				return b.Detail(t, id).Task.Polls >= 1 && b.Detail(t, id).Task.State == operations.StateWorking
			})
			w1.Stop()
			calls := sdkToolCalls(t, srv)

			tc.forget(t, srv, sid)
			b.Restart(t)
			_, passes = b.Watcher(t, "after", nil)
			opstest.WaitFor(t, passes, 15*time.Second, "a final state", func() bool { return b.Detail(t, id).Task.State.Final() })
			d := b.Detail(t, id)
			if d.Task.State != operations.StateUnobservable || d.DomainOutcome != operations.OutcomeUnknown {
				t.Fatalf("state %s outcome %s, want unobservable/unknown (never failed)", d.Task.State, d.DomainOutcome)
			}
			if d.Reconciliation == nil || d.Reconciliation.Reason != operations.ReasonSessionGone {
				t.Fatalf("reconciliation %+v, want one for the gone session", d.Reconciliation)
			}
			want := calls
			if tc.restarts {
				want = 0
			}
			if n := sdkToolCalls(t, srv); calls != 1 || n != want {
				t.Fatalf("tools/call = %d before and %d after forgetting the session, want 1 and %d: the task was re-created", calls, n, want)
			}
		})
	}
}
