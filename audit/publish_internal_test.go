package audit

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/internal/pgtest"
)

// TestPublishReadsOperationsByKeyOnly: the publisher runs every 100 ms on every console, so it
// must read operations only by primary key, however many there are, and whatever the planner
// believes of live_changes, whose statistics are from whenever autovacuum last looked at it: here
// thousands of rows, as under a burst of starts.
func TestPublishReadsOperationsByKeyOnly(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO operations (tenant, workflow, idempotency_key, request_sha256, actor, route, reason_code, reason)
			SELECT 't' || (i % 7), 'refund', 'k' || i, 'h', 'app', 'task', 'r', 'r' FROM generate_series(1, 50000) i`,
		`VACUUM ANALYZE operations`,
		`INSERT INTO live_changes (area, operation_id) SELECT 'tasks', id FROM operations LIMIT 3000`,
		`ANALYZE live_changes`,
		`DELETE FROM live_changes`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var raw []byte
	if err := pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+publishSQL).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	scans, err := pgtest.PlanScans(raw)
	if err != nil {
		t.Fatal(err)
	}
	byKey := false
	for _, s := range scans {
		if !strings.Contains(s, " operations") {
			continue
		}
		if s != "Index Scan operations operations_pkey" {
			t.Errorf("publishing reads operations with %q; plan: %v", s, scans)
		}
		byKey = true
	}
	if !byKey {
		t.Errorf("no read of operations by key in %v", scans)
	}

	// And it publishes: one notification per area and tenant, the tenant found by key.
	if _, err := pool.Exec(ctx, `INSERT INTO live_changes (area, operation_id) SELECT 'tasks', id FROM operations WHERE tenant = 't3' LIMIT 3`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO live_changes (area, tenant) VALUES ('tasks', 't3'), ('queue', 't4')`); err != nil {
		t.Fatal(err)
	}
	n, err := PublishPending(ctx, pool)
	if err != nil || n != 2 {
		t.Fatalf("published %d notifications, want 2 (tasks t3, queue t4): %v", n, err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM live_changes`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d changes left unpublished: %v", left, err)
	}
}

// TestPublishWaitGrowsWhileIdleAndSnapsBack: a drain that found nothing doubles the wait up to
// IdlePublishInterval; one that published brings it back to PublishInterval.
func TestPublishWaitGrowsWhileIdleAndSnapsBack(t *testing.T) {
	wait, got := PublishInterval, []time.Duration{}
	for _, n := range []int{0, 0, 0, 0, 3, 0} {
		wait = nextPublishWait(wait, n)
		got = append(got, wait)
	}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond,
		100 * time.Millisecond, 200 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
}

// drainCounter counts the publisher's drains of live_changes on a pool.
type drainCounter struct{ n atomic.Int64 }

func (c *drainCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if d.SQL == publishSQL {
		c.n.Add(1)
	}
	return ctx
}

func (c *drainCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestAnIdleListenerAsksLessOftenAndStillHearsTheNextChange: over two idle seconds a listener
// drains live_changes a handful of times (every 100 ms it would be 20), and a change after the
// quiet spell is still published.
func TestAnIdleListenerAsksLessOftenAndStillHearsTheNextChange(t *testing.T) {
	t.Parallel()
	cfg := pgtest.New(t).Config().Copy()
	drains := &drainCounter{}
	cfg.ConnConfig.Tracer = drains
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Cancelled first: the listener gives its connection back, which Close waits for.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Change, 1)
	<-Listen(ctx, pool, nil, func(c Change) {
		select {
		case got <- c:
		default:
		}
	})
	time.Sleep(2 * time.Second)
	if n := drains.n.Load(); n < 2 || n > 10 {
		t.Fatalf("%d drains in two idle seconds, want a handful (2-10)", n)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO live_changes (area, tenant) VALUES ('tasks', 'acme')`); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-got:
		if c.Area != "tasks" || c.Tenant != "acme" {
			t.Fatalf("change %+v", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the change after the quiet spell was not published")
	}
}
