package reconcile

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/internal/pgtest"
)

// scans lists the plan's scans as "Node Type relation index" (a bitmap index scan names no
// relation).
func scans(t *testing.T, pool *pgxpool.Pool, q string, args ...any) []string {
	t.Helper()
	var raw []byte
	if err := pool.QueryRow(context.Background(), `EXPLAIN (FORMAT JSON) `+q, args...).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	out, err := pgtest.PlanScans(raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// seedQueue fills a ledger with n items opened over 30 days, 70 % open, and analyzes it: most
// open items verifying and most closed ones settled; a state of each, a tenant, a workflow, a
// reason and a person's claim that few items have.
func seedQueue(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO operations (tenant, workflow, idempotency_key, request_sha256, actor, route, reason_code, reason, domain_outcome, created_at)
			SELECT CASE WHEN i % 100 = 0 THEN 'initech' WHEN i % 3 = 0 THEN 'globex' ELSE 'acme' END,
			       CASE WHEN i % 200 = 0 THEN 'kyc' ELSE 'refund' END, 'k' || i, 'h', 'app', 'task', 'r', 'r', 'unknown',
			       now() - make_interval(secs => i * 60)
			FROM generate_series(1, $1::int) i`, n); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO reconciliation_items (operation_id, tenant, workflow, reason, state, opened_at, closed_at, claimed_by, claim_expires_at)
			SELECT id, tenant, workflow, CASE WHEN n % 150 = 0 THEN 'sync_timeout' ELSE 'task_unobservable' END,
			       CASE WHEN n % 10 < 3 THEN (CASE WHEN n % 97 = 0 THEN 'resolved' ELSE 'settled' END) WHEN n % 89 = 0 THEN 'needs_person' ELSE 'verifying' END,
			       created_at, CASE WHEN n % 10 < 3 THEN created_at + interval '1 hour' END,
			       CASE WHEN n % 500 = 7 THEN 'alice@example.com' END, CASE WHEN n % 500 = 7 THEN now() + interval '1 hour' END
			FROM (SELECT id, tenant, workflow, created_at, row_number() OVER (ORDER BY created_at) AS n FROM operations) o`,
		`ANALYZE`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestQueueFiltersUseAnIndex checks, on 20,000 analyzed items, that the queue with each filter
// (first and later pages, all tenants and two) is planned on an index in queue order, never a
// read of every item, and where few items match on the index that finds them without walking
// past the others.
func TestQueueFiltersUseAnIndex(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	seedQueue(t, pool, 20000)
	cursor := base64.RawURLEncoding.EncodeToString([]byte(time.Now().Add(-20*24*time.Hour).UTC().Format(time.RFC3339Nano) + "|00000000-0000-4000-8000-000000000000"))
	cases := []struct {
		name  string
		f     Filter
		index string // "" = any index
	}{
		{"open", Filter{}, "reconciliation_items_open_age_idx"},
		{"needs a person", Filter{State: string(StateNeedsPerson)}, "reconciliation_items_state_queue_idx"},
		{"verifying", Filter{State: string(StateVerifying)}, ""},
		{"settled", Filter{State: string(StateSettled)}, ""},
		{"resolved", Filter{State: string(StateResolved)}, "reconciliation_items_state_queue_idx"},
		{"closed", Filter{State: "closed"}, ""},
		{"all", Filter{State: "all"}, "reconciliation_items_opened_at_idx"},
		{"tenant", Filter{Tenant: "globex"}, ""},
		{"rare tenant", Filter{Tenant: "initech"}, "reconciliation_items_queue_idx"},
		{"rare workflow", Filter{Workflow: "kyc"}, "reconciliation_items_workflow_queue_idx"},
		{"rare reason", Filter{Reason: ReasonSyncTimeout}, "reconciliation_items_reason_queue_idx"},
		{"age", Filter{OlderThan: 24 * time.Hour}, "reconciliation_items_open_age_idx"},
		{"claimed by nobody", Filter{ClaimedBy: "nobody"}, ""},
		{"claimed by a person", Filter{ClaimedBy: "alice@example.com"}, "reconciliation_items_claimed_idx"},
		{"needs a person and rare workflow", Filter{State: string(StateNeedsPerson), Workflow: "kyc"}, ""},
	}
	for _, c := range cases {
		for _, scope := range []Scope{{All: true}, {Tenants: []string{"acme", "initech"}}} {
			for _, after := range []string{"", cursor} {
				f := c.f
				f.Limit, f.After = 50, after
				q, args, err := listQuery(scope, f)
				if err != nil {
					t.Fatal(err)
				}
				got := scans(t, pool, q, args...)
				joined := strings.Join(got, "; ")
				if strings.Contains(joined, "Seq Scan reconciliation_items") || strings.Contains(joined, "Seq Scan operations") ||
					!strings.Contains(joined, " reconciliation_items_") || !strings.Contains(joined, c.index) {
					t.Errorf("%s (scope %+v, later page %v): plan %s; want an index scan on %q", c.name, scope, after != "", joined, c.index)
				}
			}
		}
	}
}
