package operations

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/internal/pgtest"
)

// planScans lists the scans of q's plan as "Node Type relation index" (a bitmap index scan
// names no relation), joined by "; ".
func planScans(t *testing.T, pool *pgxpool.Pool, q string, args ...any) string {
	return planScansWith(t, pool, "", q, args...)
}

// planScansWith is planScans under a setting (SET LOCAL) when set is not "".
func planScansWith(t *testing.T, pool *pgxpool.Pool, set, q string, args ...any) string {
	t.Helper()
	var raw []byte
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		if set != "" {
			if _, err := tx.Exec(context.Background(), `SET LOCAL `+set); err != nil {
				return err
			}
		}
		return tx.QueryRow(context.Background(), `EXPLAIN (FORMAT JSON) `+q, args...).Scan(&raw)
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
	out, err := pgtest.PlanScans(raw)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, "; ")
}

// seedLedger writes n operations over ten days with their tasks, through the triggers, in the
// proportions of a ledger at scale (most completed and applied; few working, waiting for an
// answer, expired, unknown with an open item, mismatched, of a rare workflow, route or tenant),
// compacts the marks and analyzes.
func seedLedger(t *testing.T, s *Store, n int) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		fmt.Sprintf(`WITH o AS (INSERT INTO operations (tenant, workflow, idempotency_key, request_sha256, actor, route, reason_code, reason,
				domain_outcome, attention, created_at, object_ref)
			SELECT CASE WHEN i %% 100 = 0 THEN 'initech' WHEN i %% 3 = 0 THEN 'globex' ELSE 'acme' END,
			       CASE WHEN i %% 200 = 0 THEN 'kyc' ELSE 'refund' END, 'k' || i, 'h', 'app',
			       CASE WHEN i %% 300 = 0 THEN 'handoff' ELSE 'task' END, 'r', 'r',
			       CASE WHEN i %% 50 = 0 THEN 'unknown' WHEN i %% 311 = 0 THEN 'not_applied' WHEN i %% 47 = 0 THEN 'pending' ELSE 'applied' END,
			       CASE WHEN i %% 50 = 0 THEN 'needs_reconciliation' END,
			       now() - make_interval(secs => i * 864000.0 / %[1]d), 'refund R-' || i
			FROM generate_series(1, %[1]d) i RETURNING id, route, domain_outcome, created_at)
		INSERT INTO tasks (operation_id, server, tool, state, terminal_at, polls, created_at)
			SELECT id, 'rcv', 'work', s, CASE WHEN s NOT IN ('working', 'input_required') THEN created_at + interval '5 seconds' END, 3, created_at
			FROM (SELECT *, CASE WHEN domain_outcome = 'pending' THEN (CASE WHEN random() < 0.1 THEN 'input_required' ELSE 'working' END)
			                     WHEN random() < 0.005 THEN 'expired' ELSE 'completed' END AS s FROM o WHERE route = 'task') x`, n),
		`INSERT INTO reconciliation_items (operation_id, tenant, workflow, reason, state)
			SELECT id, tenant, workflow, 'task_unobservable', 'needs_person' FROM operations WHERE attention IS NOT NULL`,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CompactOverview(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
}

// TestListFiltersUseAnIndex checks, on 30,000 analyzed operations, that the operations list
// with each filter (first and later pages, all tenants and two) is planned on an index in list
// order where few operations match, never a read of the whole ledger (a search on the search
// table's indexes: words, key, task id); that its total and the
// overview's reads probe the ledger by index; and that this holds whether the dirty marks'
// statistics say none or thousands.
func TestListFiltersUseAnIndex(t *testing.T) {
	t.Parallel()
	s := NewStore(pgtest.New(t))
	ctx := context.Background()
	seedLedger(t, s, 30000)
	cursor := encodeCursor(time.Now().Add(-5*24*time.Hour), "00000000-0000-4000-8000-000000000000")
	cases := []struct {
		name  string
		f     Filter
		index string // "" = any index
	}{
		{"all", Filter{}, "operations_list_idx"},
		{"tenant", Filter{Tenant: "globex"}, ""},
		{"rare tenant", Filter{Tenant: "initech"}, "operations_tenant_list_idx"},
		{"needs a person", Filter{Attention: true}, "overview_ops_needs_person_idx"},
		{"mismatch", Filter{Mismatch: true}, "overview_ops_mismatch_idx"},
		{"working", Filter{TaskState: StateWorking}, "overview_ops_task_state_idx"},
		{"input required", Filter{TaskState: StateInputRequired}, "overview_ops_task_state_idx"},
		{"expired", Filter{TaskState: StateExpired}, "overview_ops_task_state_idx"},
		{"completed", Filter{TaskState: StateCompleted}, ""},
		{"unknown", Filter{DomainOutcome: OutcomeUnknown}, "overview_ops_outcome_idx"},
		{"rare workflow", Filter{Workflow: "kyc"}, "overview_ops_workflow_idx"},
		{"rare route", Filter{Route: RouteHandoff}, "overview_ops_route_idx"},
		{"tenant and completed", Filter{Tenant: "acme", TaskState: StateCompleted}, ""},
		{"rare tenant and needs a person", Filter{Tenant: "initech", Attention: true}, ""},
		{"workflow and outcome", Filter{Workflow: "refund", DomainOutcome: OutcomeApplied}, ""},
		{"search for words", Filter{Search: "R-1234"}, "overview_search_object_ref_idx"},
		{"search for a key", Filter{Search: "k777"}, "overview_search_key_idx"},
		{"search for a task id", Filter{Search: "task-9"}, "overview_search_task_idx"},
		{"search and a filter", Filter{Search: "R-12", Attention: true}, "overview_search_object_ref_idx"},
	}
	check := func(when string) {
		for _, c := range cases {
			for _, scope := range []Scope{{All: true}, {Tenants: []string{"acme", "initech"}}} {
				for _, after := range []string{"", cursor} {
					f := c.f
					f.Limit, f.After = 50, after
					q, args, err := listQuery(scope, f, true)
					if f.Search != "" {
						q, args, err = searchQuery(scope, f)
					}
					if err != nil {
						t.Fatal(err)
					}
					// A search reads the narrow search table sequentially at this size (the cheaper
					// plan); the check is that its indexes serve every way it matches.
					set := ""
					if f.Search != "" {
						set = "enable_seqscan = off"
					}
					plan := planScansWith(t, s.pool, set, q, args...)
					if strings.Contains(plan, "Seq Scan operations") || strings.Contains(plan, "Seq Scan overview_ops") || !strings.Contains(plan, c.index) {
						t.Errorf("%s: %s (scope %+v, later page %v): plan %s; want no whole read of the ledger, and %q", when, c.name, scope, after != "", plan, c.index)
					}
				}
			}
			// The total: the counters, and index probes for the dirty ids.
			for _, scope := range []Scope{{All: true}, {Tenants: []string{"acme"}}} {
				q, args := countQuery(scope, c.f, true)
				if plan := planScans(t, s.pool, q, args...); strings.Contains(plan, "Seq Scan operations") || strings.Contains(plan, "Seq Scan overview_ops") {
					t.Errorf("%s: %s: the total reads the whole ledger: %s", when, c.name, plan)
				}
			}
		}
		// The overview, each way through the window's first hour, and the servers page: the
		// ledger by index only.
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{overviewCountedSQL, []any{true, []string{}, 12, time.Duration(0)}},
			{overviewCountedSQL, []any{false, []string{"acme"}, 12, time.Hour}},
			{serverHoursCountedSQL, []any{true, []string{}, 12}},
		} {
			if plan := planScans(t, s.pool, q.sql, q.args...); strings.Contains(plan, "Seq Scan operations") || strings.Contains(plan, "Seq Scan overview_ops") ||
				strings.Contains(plan, "Seq Scan tasks") {
				t.Errorf("%s: an overview read reads a whole table: %s", when, plan)
			}
		}
	}
	check("no operation dirty")
	// Thousands of marks, analyzed: the reads still probe the ledger by the dirty ids.
	if _, err := s.pool.Exec(ctx, `INSERT INTO overview_dirty SELECT id FROM operations ORDER BY id LIMIT 3000`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE overview_dirty`); err != nil {
		t.Fatal(err)
	}
	check("3,000 operations dirty")
}

// TestTheProgressFlushReadsItsTasksByKey: a watcher's flush writes a thousand tasks or more of
// a large ledger at a time. Planned for the ids it is given, it must read those tasks by key,
// never the whole tasks table (a hash of every task, which the join alone was planned as).
func TestTheProgressFlushReadsItsTasksByKey(t *testing.T) {
	t.Parallel()
	s := NewStore(pgtest.New(t))
	ctx := context.Background()
	seedLedger(t, s, 30000)
	for _, n := range []int{10, 1000, 5000} {
		rows, err := s.pool.Query(ctx, `SELECT operation_id::text FROM tasks ORDER BY random() LIMIT $1`, n)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		polls, next := make([]int64, len(ids)), make([]time.Time, len(ids))
		for i := range ids {
			polls[i], next[i] = 1, time.Now().Add(time.Second)
		}
		scans := planScans(t, s.pool, flushProgressSQL, ids, polls, next, "r1")
		if strings.Contains(scans, "Seq Scan tasks") || !strings.Contains(scans, "tasks_pkey") {
			t.Errorf("the flush of %d tasks of 30,000 reads %s, want the tasks by their key", len(ids), scans)
		}
	}
}
