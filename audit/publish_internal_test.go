package audit

import (
	"context"
	"strings"
	"testing"

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
