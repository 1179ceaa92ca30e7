// Package opstest sets up the operations start path and the watchers against a real
// PostgreSQL database (pgtest) and the reference receiver over Streamable HTTP on loopback,
// for the tests of operations, watch and web.
package opstest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/watch"
)

// Bundle is one test's world.
type Bundle struct {
	Pool     *pgxpool.Pool
	Receiver *receiver.Receiver
	BaseURL  string
	Policy   *config.Config
	Servers  *operations.Servers
	Store    *operations.Store
	Ops      *operations.Service
	getenv   func(string) string
}

// Options tune Setup.
type Options struct {
	// Era is "legacy" or "extension" (the receiver serves only that era).
	Era string
	// Receiver tunes the receiver (poll interval, TTL...).
	Receiver receiver.Config
	// Pool shares a database between bundles (a restarted console); nil makes a new one.
	Pool *pgxpool.Pool
	// Extra is appended to the workflows of the policy.
	Extra string
	// Front, when set, is given the receiver's MCP URL and returns the URL the policy names
	// instead (a proxy in front of the receiver).
	Front func(t testing.TB, mcpURL string) string
	// Token, when set, makes the receiver authenticated (the token is tenant acme's; an
	// authenticated 2025-11-25 receiver offers tasks/list) and the policy's server send it.
	Token string
	// Env is the environment the policy's secrets are read from (env: NAME), besides the
	// token's.
	Env map[string]string
}

// Policy is the test policy: one workflow per route. %[1]s is the MCP URL, %[2]s the base
// URL, %[3]s the era.
const Policy = `
tenants: [acme, globex]
owners: [{name: ops, contact: ops@example.com}]
servers:
  - {name: rcv, url: "%[1]s", era: %[3]s}
workflows:
  - {name: refund, server: rcv, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     max_ttl: 30m, owners: [ops], idempotency_argument: idempotency_key,
     budgets: {status: {timeout: 2s, retries: 1}, result: {timeout: 5s, retries: 1}, create: {timeout: 3s}}}
  - {name: report, server: rcv, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 2s},
     max_ttl: 15m, owners: [ops], keep_result: true}
  - {name: lookup, server: rcv, tool: work_forbidden, effect: read_only, task_use: never, fallback: {kind: sync, max_duration: 300ms},
     owners: [ops], idempotency_argument: idempotency_key}
  - {name: payout, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: job_api, job_api: "%[2]s"},
     owners: [ops]}
  - {name: kyc, server: rcv, tool: work_forbidden, effect: reversible, task_use: never, fallback: {kind: handoff}, owners: [ops]}
  - {name: closure, server: rcv, tool: work_forbidden, effect: effectful, task_use: required, fallback: {kind: reject}, owners: [ops]}
`

// Setup starts a receiver on 127.0.0.1 and builds the store, servers and service.
func Setup(t testing.TB, o Options) *Bundle {
	t.Helper()
	if o.Era == "" {
		o.Era = "legacy"
	}
	rc := o.Receiver
	if o.Era == "legacy" {
		rc.Eras = receiver.ErasLegacy
	} else {
		rc.Eras = receiver.ErasExtension
	}
	if rc.DefaultPollInterval == 0 {
		rc.DefaultPollInterval = 50 * time.Millisecond
	}
	policy, env := Policy+o.Extra, maps.Clone(o.Env)
	if o.Token != "" {
		rc.Tokens = map[string]receiver.Identity{o.Token: {Tenant: "acme", Actor: "app:opstest"}}
		policy = strings.Replace(policy, "era: %[3]s}", "era: %[3]s, token: {env: OPSTEST_TOKEN}}", 1)
		if env == nil {
			env = map[string]string{}
		}
		env["OPSTEST_TOKEN"] = o.Token
	}
	getenv := func(k string) string { return env[k] }
	rcv := receiver.New(rc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rcv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
		rcv.Close()
	})
	base := "http://" + ln.Addr().String()
	mcpURL := base + "/mcp"
	if o.Front != nil {
		mcpURL = o.Front(t, mcpURL)
	}
	pol, err := config.Parse(fmt.Appendf(nil, policy, mcpURL, base, o.Era))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	pool := o.Pool
	if pool == nil {
		pool = pgtest.New(t)
	}
	b := &Bundle{Pool: pool, Receiver: rcv, BaseURL: base, Policy: pol, Store: operations.NewStore(pool), getenv: getenv}
	b.Servers = operations.NewServers(operations.ServersConfig{Policy: pol, BuiltinURL: base, Getenv: getenv})
	t.Cleanup(b.Servers.Close)
	b.Ops, err = operations.NewService(operations.Config{Store: b.Store, Policy: pol, Servers: b.Servers, PollFloor: 20 * time.Millisecond, DefaultPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Restart gives the bundle fresh connections and a fresh service, as a restarted console
// would have (same database, same receiver).
func (b *Bundle) Restart(t testing.TB) {
	t.Helper()
	b.Servers.Close()
	b.Servers = operations.NewServers(operations.ServersConfig{Policy: b.Policy, BuiltinURL: b.BaseURL, Getenv: b.getenv})
	t.Cleanup(b.Servers.Close)
	var err error
	b.Ops, err = operations.NewService(operations.Config{Store: b.Store, Policy: b.Policy, Servers: b.Servers, PollFloor: 20 * time.Millisecond, DefaultPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
}

// Watcher starts a watcher replica on the bundle; it is stopped at cleanup. passes receives
// a value after every pass.
func (b *Bundle) Watcher(t testing.TB, replica string, tune func(*watch.Config)) (*watch.Service, <-chan int) {
	t.Helper()
	passes := make(chan int, 1)
	cfg := watch.Config{Store: b.Store, Servers: b.Servers, Policy: b.Policy, Operations: b.Ops, ReplicaID: replica,
		Interval: 10 * time.Millisecond, PollFloor: 20 * time.Millisecond, DefaultPoll: 50 * time.Millisecond, Lease: 5 * time.Second,
		UnobservableGrace: 300 * time.Millisecond, FlushEvery: 50 * time.Millisecond, ProgressEvery: 50 * time.Millisecond, Registerer: prometheus.NewRegistry(),
		AfterPass: func(n int) {
			select {
			case passes <- n:
			default:
			}
		}}
	if tune != nil {
		tune(&cfg)
	}
	w, err := watch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w, passes
}

// WaitFor waits, pass by pass, until cond holds or the timeout passes.
func WaitFor(t testing.TB, passes <-chan int, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-passes:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Start starts an operation for tenant acme.
func (b *Bundle) Start(t testing.TB, workflow, key string, args string) operations.StartResult {
	t.Helper()
	res, err := b.Ops.Start(context.Background(), operations.Scope{Tenants: []string{"acme"}}, operations.StartRequest{
		IdempotencyKey: key, Workflow: workflow, Tenant: "acme", Actor: "app:billing", ObjectRef: "refund A-1042",
		ObjectVersion: "3", IntendedEffect: "refund 10 EUR", Arguments: []byte(args)})
	if err != nil {
		t.Fatalf("start %s: %v", workflow, err)
	}
	return res
}

// Detail reads an operation with admin scope.
func (b *Bundle) Detail(t testing.TB, id string) operations.Detail {
	t.Helper()
	d, err := b.Ops.Get(context.Background(), operations.Scope{All: true}, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return d
}
