package operations_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/internal/pgcluster"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/migrations"
	"github.com/taskgate/taskgate/operations"
)

// proxy stands between the ledger and the receiver on 127.0.0.1: it forwards every request,
// calls after(method) once the receiver answered a POST, and lets rewrite change the answer's
// bytes before they go back.
type proxy struct {
	target  string
	rewrite func(method string, body []byte) []byte
	after   func(method string)
	// refuse, when set, answers a method with an HTTP status and text instead of forwarding it.
	refuse  func(method string) (int, string)
	mu      sync.Mutex
	methods map[string]int
}

func (p *proxy) count(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.methods[method]
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var msg struct {
		Method string `json:"method"`
	}
	_ = json.Unmarshal(body, &msg)
	p.mu.Lock()
	p.methods[msg.Method]++
	p.mu.Unlock()
	if p.refuse != nil {
		if code, text := p.refuse(msg.Method); code != 0 {
			http.Error(w, text, code)
			return
		}
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		if k != "Content-Length" {
			w.Header()[k] = v
		}
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				_, _ = w.Write(buf[:n])
				w.(http.Flusher).Flush()
			}
			if err != nil {
				return
			}
		}
	}
	out, _ := io.ReadAll(resp.Body)
	if p.after != nil {
		p.after(msg.Method)
	}
	if p.rewrite != nil {
		out = p.rewrite(msg.Method, out)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
}

// throughProxy points the bundle's servers, policy and service at a proxy in front of its
// receiver.
func throughProxy(t *testing.T, b *opstest.Bundle, era string, p *proxy) {
	t.Helper()
	p.target, p.methods = b.BaseURL, map[string]int{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String()
	pol, err := config.Parse(fmt.Appendf(nil, opstest.Policy, base+"/mcp", b.BaseURL, era))
	if err != nil {
		t.Fatal(err)
	}
	b.Policy = pol
	b.Servers = operations.NewServers(operations.ServersConfig{Policy: pol, BuiltinURL: b.BaseURL})
	t.Cleanup(b.Servers.Close)
	b.Ops, err = operations.NewService(operations.Config{Store: b.Store, Policy: pol, Servers: b.Servers, PollFloor: 20 * time.Millisecond, DefaultPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
}

// outage makes the test's database refuse every connection (as a stopped server would) and
// returns the function that ends the outage.
func outage(t *testing.T, dbURL string) (stop func(), restore func()) {
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	u.Path = "/postgres"
	admin := u.String()
	run := func(sql string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("outage: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Errorf("outage: %s: %v", sql, err)
		}
	}
	ident := pgx.Identifier{db}.Sanitize()
	return func() {
			run("ALTER DATABASE " + ident + " ALLOW_CONNECTIONS false")
			run("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '" + db + "'")
		}, func() {
			run("ALTER DATABASE " + ident + " ALLOW_CONNECTIONS true")
		}
}

func sweep(t *testing.T, store *operations.Store, grace time.Duration) operations.Recovered {
	t.Helper()
	r, err := operations.NewRecovery(operations.RecoveryConfig{Store: store, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	return r.Sweep(context.Background())
}

func opByKey(t *testing.T, pool *pgxpool.Pool, key string) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(context.Background(), `SELECT id FROM operations WHERE idempotency_key = $1`, key).Scan(&id); err != nil {
		t.Fatalf("operation of key %s: %v", key, err)
	}
	return id
}

// A call that reached the server while PostgreSQL was down is found by the recovery sweep
// and becomes unknown with an item; it is never sent again.
func TestCallSentWhileDatabaseDownBecomesUnknownWithItem(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ workflow, args string }{
		{"lookup", `{}`},                   // sync
		{"refund", `{"duration_ms": 100}`}, // task creation
		{"payout", `{"duration_ms": 100}`}, // job API
	} {
		t.Run(c.workflow, func(t *testing.T) {
			t.Parallel()
			dbURL := pgtest.URL(t)
			pool, err := pgxpool.New(context.Background(), dbURL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			b := opstest.Setup(t, opstest.Options{Pool: pool})
			stop, restore := outage(t, dbURL)
			var once sync.Once
			p := &proxy{after: func(method string) {
				if method == "tools/call" {
					once.Do(stop)
				}
			}}
			throughProxy(t, b, "legacy", p)
			if c.workflow == "payout" {
				// The job API is reached directly: cut the database when it answers.
				b.Ops, err = operations.NewService(operations.Config{Store: b.Store, Policy: b.Policy, Servers: b.Servers,
					JobClient: &http.Client{Transport: afterRoundTrip(func() { once.Do(stop) })}})
				if err != nil {
					t.Fatal(err)
				}
			}
			_, err = b.Ops.Start(context.Background(), acme, operations.StartRequest{IdempotencyKey: "down-1", Workflow: c.workflow,
				Tenant: "acme", Actor: "app:billing", Arguments: []byte(c.args)})
			if err == nil {
				t.Fatal("start succeeded with the database down")
			}
			restore()
			id := opByKey(t, pool, "down-1")
			d := b.Detail(t, id)
			if d.DomainOutcome != operations.OutcomePending {
				t.Fatalf("before the sweep: outcome %s", d.DomainOutcome)
			}
			if got := sweep(t, b.Store, time.Hour); got.Unrecorded != 0 {
				t.Fatalf("a sweep within the grace settled %+v", got)
			}
			// The call's budget runs out (the job API's is the 30 s default: skip to its end).
			if _, err := pool.Exec(context.Background(), `UPDATE operation_calls SET due_at = least(due_at, now()) WHERE operation_id = $1`, id); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			got := sweep(t, b.Store, 10*time.Millisecond)
			if got.Unrecorded != 1 {
				t.Fatalf("sweep = %+v, want one unrecorded call", got)
			}
			d = b.Detail(t, id)
			if d.DomainOutcome != operations.OutcomeUnknown || d.Reconciliation == nil || d.Reconciliation.Reason != operations.ReasonCallUnrecorded {
				t.Fatalf("after the sweep: outcome %s item %+v", d.DomainOutcome, d.Reconciliation)
			}
			if d.Task != nil && d.Task.State != operations.StateCreateUnacknowledged {
				t.Fatalf("task state %s, want create_unacknowledged", d.Task.State)
			}
			// Settled once: a second sweep finds nothing, and a replay answers the operation as it is.
			if again := sweep(t, b.Store, 0); again.Unrecorded+again.NeverSent != 0 {
				t.Fatalf("second sweep = %+v", again)
			}
			res, err := b.Ops.Start(context.Background(), acme, operations.StartRequest{IdempotencyKey: "down-1", Workflow: c.workflow,
				Tenant: "acme", Actor: "app:billing", Arguments: []byte(c.args)})
			if err != nil || res.Response.DomainOutcome != operations.OutcomeUnknown || res.Response.OperationID != id {
				t.Fatalf("replay = %+v, %v", res, err)
			}
			calls := b.Receiver.Counters().ToolCalls
			if c.workflow != "payout" && calls["work_required"]+calls["work_forbidden"] != 1 {
				t.Fatalf("tools/call = %v, want exactly one", calls)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func afterRoundTrip(after func()) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		after()
		return resp, err
	})
}

// A start that stopped between the ledger row and the call leaves a creating task that holds a
// concurrency slot; the sweep frees it as not_run, since nothing was sent.
func TestNeverSentCreatingTaskIsSettledNotRun(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	op, _, err := b.Store.CreateOperation(context.Background(), operations.Insert{
		Request: operations.StartRequest{IdempotencyKey: "never", Workflow: "refund", Tenant: "acme", Actor: "app"},
		Hash:    "h", Arguments: []byte(`{}`),
		Decision: operations.Decision{Route: operations.RouteTask, ReasonCode: "task_capable", Reason: "r"},
		Task:     &operations.NewTaskRow{Server: "rcv", Tool: "work_required"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := sweep(t, b.Store, time.Minute); got.NeverSent != 0 {
		t.Fatalf("a fresh row was settled: %+v", got)
	}
	if _, err := b.Pool.Exec(context.Background(), `UPDATE operation_calls SET created_at = now() - interval '2 minutes' WHERE operation_id = $1`, op.ID); err != nil {
		t.Fatal(err)
	}
	if got := sweep(t, b.Store, time.Minute); got.NeverSent != 1 {
		t.Fatalf("sweep = %+v", got)
	}
	d := b.Detail(t, op.ID)
	if d.DomainOutcome != operations.OutcomeNotRun || d.Task.State != operations.StateFailed || d.Reconciliation != nil {
		t.Fatalf("outcome %s task %s item %+v", d.DomainOutcome, d.Task.State, d.Reconciliation)
	}
}

// nul replaces the marker NUL in a server's answer with a JSON \u0000 escape.
func nul(only string) func(string, []byte) []byte {
	return func(method string, body []byte) []byte {
		if only != "" && method != only {
			return body
		}
		return bytes.ReplaceAll(body, []byte("NUL"), []byte(`\u0000`))
	}
}

// Text PostgreSQL cannot store in a server's answer is replaced and flagged; the operation ends
// with a reconciliation item, and the result is fetched once.
func TestNULFromServerIsReplacedFlaggedAndItemised(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, workflow, args string
		rewrite              func(string, []byte) []byte
	}{
		{"sync result", "lookup", `{"text": "aNULb"}`, nul("tools/call")},
		{"task result", "refund", `{"duration_ms": 50, "text": "aNULb"}`, nul("tasks/result")},
		{"capabilities", "refund", `{"duration_ms": 50}`, func(m string, b []byte) []byte {
			if m != "initialize" {
				return b
			}
			return bytes.Replace(b, []byte(`"capabilities":{`), []byte(`"capabilities":{"x-note":"a\u0000b",`), 1)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := opstest.Setup(t, opstest.Options{})
			p := &proxy{rewrite: c.rewrite}
			throughProxy(t, b, "legacy", p)
			res, err := b.Ops.Start(context.Background(), acme, operations.StartRequest{IdempotencyKey: "nul", Workflow: c.workflow,
				Tenant: "acme", Actor: "app:billing", Arguments: []byte(c.args)})
			if err != nil {
				t.Fatalf("start: %v", err)
			}
			id := res.Response.OperationID
			if c.workflow != "lookup" {
				_, passes := b.Watcher(t, "r1", nil)
				opstest.WaitFor(t, passes, 10*time.Second, "envelope", func() bool { return b.Detail(t, id).Envelope != nil })
				// More passes: the result is not fetched again.
				for range 10 {
					<-passes
				}
				if n := p.count("tasks/result"); n != 1 {
					t.Fatalf("tasks/result fetched %d times", n)
				}
			}
			d := b.Detail(t, id)
			if d.Envelope == nil {
				t.Fatal("no envelope")
			}
			if d.Reconciliation == nil || d.Reconciliation.Reason != operations.ReasonServerTextReplaced || d.DomainOutcome != operations.OutcomeUnknown {
				t.Fatalf("outcome %s item %+v", d.DomainOutcome, d.Reconciliation)
			}
			if strings.HasPrefix(c.name, "sync") || strings.HasPrefix(c.name, "task") {
				if !d.Envelope.TextReplaced || !strings.Contains(d.Envelope.Preview, "a\uFFFDb") {
					t.Fatalf("envelope %+v", d.Envelope)
				}
			}
		})
	}
}

// A status message with NUL or invalid UTF-8 (as a server not stripping them sends it) is
// stored replaced, once, with an item; the same message again writes nothing.
func TestObservedStatusMessageWithNULIsStoredReplaced(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	res := b.Start(t, "refund", "status-nul", `{"duration_ms": 5000}`)
	id := res.Response.OperationID
	obs := operations.Observation{State: operations.StateWorking, StatusMessage: "Work\x00ing \xff"}
	r, err := b.Store.Observe(context.Background(), id, obs, operations.SourcePoll)
	if err != nil || !r.Changed {
		t.Fatalf("observe = %+v, %v", r, err)
	}
	d := b.Detail(t, id)
	if d.Task.StatusMessage != "Work\uFFFDing \uFFFD" || d.Reconciliation == nil || d.Reconciliation.Reason != operations.ReasonServerTextReplaced {
		t.Fatalf("status %q item %+v", d.Task.StatusMessage, d.Reconciliation)
	}
	n := len(d.Timeline)
	if r, err = b.Store.Observe(context.Background(), id, obs, operations.SourcePoll); err != nil || r.Changed {
		t.Fatalf("second observe = %+v, %v", r, err)
	}
	if got := len(b.Detail(t, id).Timeline); got != n {
		t.Fatalf("timeline grew from %d to %d on the same message", n, got)
	}
}

// The same with the PostgreSQL server itself stopped between the send and the record, and
// started again: the task creation reached the server once, and the sweep of the restarted
// console settles it.
func TestCallSentWhilePostgreSQLStoppedIsRecovered(t *testing.T) {
	t.Parallel()
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Skip("no PostgreSQL server binaries: ", err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Settings: map[string]string{"fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	current := c
	t.Cleanup(func() { _ = current.Remove() })
	pool, err := pgxpool.New(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	r, err := migrations.NewRunner(pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Up(ctx); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	b := opstest.Setup(t, opstest.Options{Pool: pool})
	var once sync.Once
	throughProxy(t, b, "legacy", &proxy{after: func(method string) {
		if method == "tools/call" {
			once.Do(func() {
				if err := c.Stop(); err != nil {
					t.Errorf("stop: %v", err)
				}
			})
		}
	}})
	if _, err := b.Ops.Start(ctx, acme, operations.StartRequest{IdempotencyKey: "stopped-1", Workflow: "refund",
		Tenant: "acme", Actor: "app:billing", Arguments: []byte(`{"duration_ms": 100}`)}); err == nil {
		t.Fatal("start succeeded with PostgreSQL stopped")
	}
	if current, err = pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Settings: map[string]string{"fsync": "off"}}); err != nil {
		t.Fatal(err)
	}
	id := opByKey(t, pool, "stopped-1")
	if d := b.Detail(t, id); d.Task.State != operations.StateCreating || d.DomainOutcome != operations.OutcomePending {
		t.Fatalf("before the sweep: task %s outcome %s", d.Task.State, d.DomainOutcome)
	}
	if _, err := pool.Exec(ctx, `UPDATE operation_calls SET due_at = least(due_at, now()) WHERE operation_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if got := sweep(t, b.Store, 10*time.Millisecond); got.Unrecorded != 1 {
		t.Fatalf("sweep = %+v", got)
	}
	d := b.Detail(t, id)
	if d.Task.State != operations.StateCreateUnacknowledged || d.DomainOutcome != operations.OutcomeUnknown ||
		d.Reconciliation == nil || d.Reconciliation.Reason != operations.ReasonCallUnrecorded {
		t.Fatalf("after the sweep: task %s outcome %s item %+v", d.Task.State, d.DomainOutcome, d.Reconciliation)
	}
	if n := b.Receiver.Counters().ToolCalls["work_required"]; n != 1 {
		t.Fatalf("tools/call = %d, want exactly one", n)
	}
}

// The recovery service sweeps on its own, every Interval, until Stop.
func TestRecoveryServiceSweepsUntilStopped(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	op, _, err := b.Store.CreateOperation(context.Background(), operations.Insert{
		Request: operations.StartRequest{IdempotencyKey: "svc", Workflow: "lookup", Tenant: "acme", Actor: "app"},
		Hash:    "h", Arguments: []byte(`{}`), Decision: operations.Decision{Route: operations.RouteSync, ReasonCode: "task_use_never", Reason: "r"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Store.MarkSending(context.Background(), op.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Store.MarkSending(context.Background(), op.ID, 0); err == nil {
		t.Fatal("a call was marked sending twice")
	}
	sweeps := make(chan operations.Recovered, 100)
	r, err := operations.NewRecovery(operations.RecoveryConfig{Store: b.Store, Grace: 50 * time.Millisecond, Interval: 20 * time.Millisecond,
		AfterSweep: func(rec operations.Recovered, _ error) { sweeps <- rec }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err == nil {
		t.Fatal("a second Start was allowed")
	}
	deadline := time.After(5 * time.Second)
	for settled := false; !settled; {
		select {
		case rec := <-sweeps:
			settled = rec.Unrecorded == 1
		case <-deadline:
			t.Fatal("the service did not settle the call")
		}
	}
	r.Stop()
	if d := b.Detail(t, op.ID); d.DomainOutcome != operations.OutcomeUnknown || d.Reconciliation == nil || d.Reconciliation.Reason != operations.ReasonCallUnrecorded {
		t.Fatalf("outcome %s item %+v", d.DomainOutcome, d.Reconciliation)
	}
	n := len(sweeps)
	time.Sleep(60 * time.Millisecond)
	if len(sweeps) != n {
		t.Fatal("sweeps went on after Stop")
	}
}
