package operations_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/operations"
)

// statementCounter counts the statements sent to PostgreSQL (BEGIN and COMMIT included).
type statementCounter struct {
	mu   sync.Mutex
	on   bool
	sqls []string
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.on {
		c.sqls = append(c.sqls, strings.Join(strings.Fields(d.SQL), " "))
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) count(f func()) []string {
	c.mu.Lock()
	c.on, c.sqls = true, nil
	c.mu.Unlock()
	f()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	return c.sqls
}

// TestStatementsPerStart bounds the statements (round trips) a Task start sends to the
// database, capped and uncapped: the ledger row, the cap's slot, the call marker, the created
// task and the first answer.
func TestStatementsPerStart(t *testing.T) {
	t.Parallel()
	counter := &statementCounter{}
	cfg, err := pgxpool.ParseConfig(pgtest.New(t).Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := opstest.Setup(t, opstest.Options{Pool: pool, Extra: `
  - {name: capped, server: rcv, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     concurrency: 100, backpressure: "429", retry_after: 1s, owners: [ops], idempotency_argument: idempotency_key}
`})
	for _, c := range []struct {
		workflow string
		bound    int
	}{{"refund", 10}, {"capped", 11}} {
		// The first start of each workflow opens the connection and creates the counter row.
		b.Start(t, c.workflow, c.workflow+"-warm", `{"duration_ms": 60000}`)
		for i := range 3 {
			var res operations.StartResult
			sqls := counter.count(func() { res = b.Start(t, c.workflow, fmt.Sprint(c.workflow, "-", i), `{"duration_ms": 60000}`) })
			if res.Response.Route != operations.RouteTask || res.Response.TaskID == "" {
				t.Fatalf("%s start %d: %+v", c.workflow, i, res.Response)
			}
			if len(sqls) > c.bound {
				t.Errorf("%s start %d sent %d statements, want at most %d:\n%s", c.workflow, i, len(sqls), c.bound, strings.Join(sqls, "\n"))
			}
			if i == 0 {
				t.Logf("%s: %d statements", c.workflow, len(sqls))
			}
		}
	}
}
