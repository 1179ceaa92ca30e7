package operations_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/operations"
)

// roundTrips records what is sent to PostgreSQL while on: each statement sent on its own and
// each batch (sent in one round trip, run as one transaction) is a round trip; a transaction
// that writes and commits without synchronous_commit turned off for it is a synchronous commit
// (one WAL flush the caller waits for).
type roundTrips struct {
	mu      sync.Mutex
	on      bool
	sent    []string
	commits []string
	inTx    map[*pgx.Conn]bool
	batch   map[*pgx.Conn]*batchTrace
}

type batchTrace struct {
	sqls   []string
	writes bool
	async  bool
}

var writeSQL = regexp.MustCompile(`(?i)^\s*(INSERT|UPDATE|DELETE)\b|\b(INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b`)

func flat(sql string) string { return strings.Join(strings.Fields(sql), " ") }

func (c *roundTrips) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on {
		return ctx
	}
	sql := flat(d.SQL)
	c.sent = append(c.sent, sql)
	switch strings.ToLower(sql) {
	case "begin", "begin isolation level read committed":
		c.inTx[conn] = true
	case "commit":
		c.inTx[conn] = false
		c.commits = append(c.commits, "transaction")
	case "rollback":
		c.inTx[conn] = false
	default:
		if !c.inTx[conn] && writeSQL.MatchString(sql) {
			c.commits = append(c.commits, sql)
		}
	}
	return ctx
}

func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *roundTrips) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.on {
		c.batch[conn] = &batchTrace{}
	}
	return ctx
}

func (c *roundTrips) TraceBatchQuery(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.batch[conn]
	if b == nil {
		return
	}
	sql := flat(d.SQL)
	b.sqls = append(b.sqls, sql)
	b.writes = b.writes || writeSQL.MatchString(sql)
	b.async = b.async || strings.Contains(sql, "set_config('synchronous_commit', 'off', true)")
}

func (c *roundTrips) TraceBatchEnd(_ context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.batch[conn]
	delete(c.batch, conn)
	if b == nil {
		return
	}
	sql := "batch: " + strings.Join(b.sqls, "; ")
	c.sent = append(c.sent, sql)
	if b.writes && !b.async && !c.inTx[conn] {
		c.commits = append(c.commits, sql)
	}
}

// tracedPool is a pool on a fresh migrated database whose round trips tracer counts.
func tracedPool(t *testing.T) (*pgxpool.Pool, *roundTrips) {
	t.Helper()
	tracer := &roundTrips{}
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, tracer
}

func (c *roundTrips) count(f func()) (sent, commits []string) {
	c.mu.Lock()
	c.on, c.sent, c.commits, c.inTx, c.batch = true, nil, nil, map[*pgx.Conn]bool{}, map[*pgx.Conn]*batchTrace{}
	c.mu.Unlock()
	f()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	return c.sent, c.commits
}

// TestRoundTripsPerStart bounds what a start asks of the database, Task (capped and uncapped)
// and sync, once the server's connection is open: under a cap the slot's reservation
// (committed without waiting for a flush), the ledger row written with its call marked sending
// (a repeat is found by its key's conflict, not by a lookup first), then after the call the
// created task (or the sync answer) with the first answer. Two synchronous commits around the
// MCP call: the least that keeps a call from being sent before the ledger says so and an answer
// from being given before it is durable.
func TestRoundTripsPerStart(t *testing.T) {
	t.Parallel()
	pool, tracer := tracedPool(t)
	b := opstest.Setup(t, opstest.Options{Pool: pool, Extra: `
  - {name: capped, server: rcv, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     concurrency: 100, backpressure: "429", retry_after: 1s, owners: [ops], idempotency_argument: idempotency_key}
  - {name: plain, server: rcv, tool: work_optional, effect: read_only, task_use: never, fallback: {kind: sync, max_duration: 5s}, owners: [ops]}
`})
	for _, c := range []struct {
		workflow, args string
		route          operations.Route
		bound          int
	}{
		{"refund", `{"duration_ms": 60000}`, operations.RouteTask, 2},
		{"capped", `{"duration_ms": 60000}`, operations.RouteTask, 3},
		{"plain", `{}`, operations.RouteSync, 2},
	} {
		// The first start of each workflow opens the connection and creates the counter row.
		b.Start(t, c.workflow, c.workflow+"-warm", c.args)
		for i := range 3 {
			var res operations.StartResult
			sent, commits := tracer.count(func() { res = b.Start(t, c.workflow, fmt.Sprint(c.workflow, "-", i), c.args) })
			if res.Response.Route != c.route || (c.route == operations.RouteTask && res.Response.TaskID == "") {
				t.Fatalf("%s start %d: %+v", c.workflow, i, res.Response)
			}
			if len(sent) > c.bound {
				t.Errorf("%s start %d made %d round trips, want at most %d:\n%s", c.workflow, i, len(sent), c.bound, strings.Join(sent, "\n"))
			}
			if len(commits) != 2 {
				t.Errorf("%s start %d committed synchronously %d times, want 2:\n%s", c.workflow, i, len(commits), strings.Join(commits, "\n"))
			}
			if i == 0 {
				t.Logf("%s: %d round trips, %d synchronous commits", c.workflow, len(sent), len(commits))
			}
		}
	}
}
