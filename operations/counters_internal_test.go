package operations

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/internal/pgtest"
)

// ledger drives a test database through the changes the console counts, by SQL on the tables
// the triggers watch (whatever code path writes them, the counts must follow).
type ledger struct {
	t    *testing.T
	pool *pgxpool.Pool
	rng  *rand.Rand
	ops  []string // ids of the operations in the ledger
	n    int
}

var (
	testTenants   = []string{"acme", "globex", "initech"}
	testWorkflows = []string{"refund", "report", "lookup", "kyc"}
	testStates    = []string{"creating", "create_unacknowledged", "working", "input_required", "completed", "failed", "cancelled", "unobservable", "expired"}
	testOutcomes  = []string{"pending", "applied", "not_applied", "compensated", "unknown", "no_effect", "not_run", "unverified"}
)

func (l *ledger) exec(q string, args ...any) {
	l.t.Helper()
	if _, err := l.pool.Exec(context.Background(), q, args...); err != nil {
		l.t.Fatalf("%s: %v", q, err)
	}
}

func (l *ledger) pick(list []string) string { return list[l.rng.IntN(len(list))] }

// ago is an offset into the last 30 hours, in whole seconds plus some microseconds.
func (l *ledger) ago() string {
	return fmt.Sprintf("%d.%06d seconds", l.rng.IntN(30*3600), l.rng.IntN(1_000_000))
}

// newOp inserts an operation started some time in the last 30 hours, with a task (in any state)
// or, off the Task route, an envelope or nothing.
func (l *ledger) newOp() string {
	l.t.Helper()
	l.n++
	route := []string{"task", "task", "task", "sync", "job_api", "handoff", "reject"}[l.rng.IntN(7)]
	var id string
	err := l.pool.QueryRow(context.Background(), `INSERT INTO operations (tenant, workflow, idempotency_key, request_sha256, actor, route,
		reason_code, reason, domain_outcome, created_at, object_ref) VALUES ($1, $2, $3, 'h', 'app', $4, 'r', 'r', $5, now() - $6::interval, $7)
		RETURNING id`,
		l.pick(testTenants), l.pick(testWorkflows), fmt.Sprint("k-", l.n), route, l.pick(testOutcomes), l.ago(), fmt.Sprintf("refund R-%d_%d", l.n%7, l.n)).Scan(&id)
	if err != nil {
		l.t.Fatal(err)
	}
	l.ops = append(l.ops, id)
	switch route {
	case "task":
		l.exec(`INSERT INTO tasks (operation_id, server, tool, state, polls) VALUES ($1, $2, 'work', 'creating', $3)`, id, l.pick([]string{"rcv", "other"}), l.rng.IntN(20))
		l.setState(id)
	case "sync", "job_api":
		if l.rng.IntN(3) > 0 {
			l.exec(`INSERT INTO task_envelopes (operation_id, status, era, finished_at) VALUES ($1, 'completed', 'sync', now() - $2::interval)`, id, l.ago())
		}
	case "handoff":
		l.exec(`INSERT INTO handoff_items (operation_id) VALUES ($1)`, id)
		l.exec(`UPDATE operations SET attention = 'needs_handoff' WHERE id = $1`, id)
	}
	return id
}

// setState moves a task to a random state, final ones with a terminal time.
func (l *ledger) setState(id string) {
	st := l.pick(testStates)
	final := !slices.Contains([]string{"creating", "working", "input_required"}, st)
	l.exec(`UPDATE tasks SET state = $2, terminal_at = CASE WHEN $3 THEN coalesce(terminal_at, now() - $4::interval) END WHERE operation_id = $1`,
		id, st, final, l.ago())
}

// change makes one random change to a random operation.
func (l *ledger) change() {
	l.t.Helper()
	i := l.rng.IntN(len(l.ops))
	id := l.ops[i]
	switch l.rng.IntN(20) {
	case 0, 1, 2:
		l.setState(id)
	case 3:
		l.exec(`UPDATE tasks SET tool_error = NOT tool_error WHERE operation_id = $1`, id)
	case 4, 5:
		l.exec(`UPDATE operations SET domain_outcome = $2 WHERE id = $1`, id, l.pick(testOutcomes))
	case 6:
		l.exec(`UPDATE operations SET attention = $2, attention_reason = $2 WHERE id = $1`, id,
			[]any{nil, "needs_reconciliation", "needs_handoff"}[l.rng.IntN(3)])
	case 7, 8:
		l.exec(`INSERT INTO reconciliation_items (operation_id, tenant, workflow, reason, state, opened_at)
			SELECT id, tenant, workflow, 'task_unobservable', $2, now() - $3::interval FROM operations WHERE id = $1
			ON CONFLICT (operation_id) WHERE closed_at IS NULL DO NOTHING`, id, l.pick([]string{"verifying", "needs_person"}), l.ago())
	case 9:
		l.exec(`UPDATE reconciliation_items SET closed_at = now(), state = 'resolved' WHERE operation_id = $1 AND closed_at IS NULL`, id)
	case 10:
		l.exec(`INSERT INTO pending_inputs (operation_id, input_key, method) VALUES ($1, $2, 'elicitation/create') ON CONFLICT DO NOTHING`,
			id, fmt.Sprint("q", l.rng.IntN(3)))
	case 11:
		l.exec(`UPDATE pending_inputs SET state = $2 WHERE operation_id = $1 AND state = 'open'`, id, l.pick([]string{"answered", "moved_on", "expired"}))
	case 12:
		l.exec(`INSERT INTO handoff_items (operation_id) VALUES ($1) ON CONFLICT (operation_id) DO UPDATE SET closed_at = NULL`, id)
	case 13:
		l.exec(`UPDATE handoff_items SET closed_at = now() WHERE operation_id = $1`, id)
	case 14:
		l.exec(`INSERT INTO task_envelopes (operation_id, status, era, finished_at) VALUES ($1, 'completed', 'sync', now() - $2::interval)
			ON CONFLICT (operation_id) DO UPDATE SET finished_at = excluded.finished_at`, id, l.ago())
	case 15:
		l.exec(`DELETE FROM task_envelopes WHERE operation_id = $1`, id)
	case 16:
		l.exec(`UPDATE tasks SET polls = polls + 1 WHERE operation_id = $1`, id)
	case 17:
		if l.rng.IntN(4) == 0 {
			l.exec(`DELETE FROM operations WHERE id = $1`, id)
			l.ops = slices.Delete(l.ops, i, i+1)
		} else {
			l.exec(`DELETE FROM tasks WHERE operation_id = $1`, id)
		}
	case 18:
		if l.rng.IntN(2) == 0 {
			l.exec(`INSERT INTO tasks (operation_id, server, tool, state) VALUES ($1, 'rcv', 'work', 'working') ON CONFLICT DO NOTHING`, id)
		} else {
			l.exec(`UPDATE tasks SET task_id = $2 WHERE operation_id = $1`, id, fmt.Sprint("task-", l.rng.IntN(1000)))
		}
	case 19:
		l.newOp()
	}
}

// checkCounts holds the counted overview, server hours, list totals and list pages to the
// ledger's direct aggregation, in one snapshot, for several scopes, windows and filters.
func checkCounts(t *testing.T, s *Store, when string) {
	t.Helper()
	ctx := context.Background()
	scopes := []Scope{{All: true}, {Tenants: []string{"acme"}}, {Tenants: []string{"globex", "initech"}}, {}}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		for _, scope := range scopes {
			for _, hours := range []int{1, 12, 24} {
				want, err := overviewDirect(ctx, tx, scope, hours)
				if err != nil {
					return err
				}
				// Each way through the window's first hour: the ledger's part inside the window, or
				// the hour's counts less the part before it.
				for _, split := range []time.Duration{0, time.Hour} {
					got, err := overviewCounted(ctx, tx, scope, hours, split)
					if err != nil {
						return err
					}
					if !reflect.DeepEqual(got, want) {
						t.Errorf("%s: overview of %+v over %dh (split %v) differs from the ledger:\ncounted %+v\nledger  %+v", when, scope, hours, split, got, want)
					}
				}
			}
			wantSH, err := serverHoursDirect(ctx, tx, scope, 12)
			if err != nil {
				return err
			}
			gotSH, err := serverHoursCounted(ctx, tx, scope, 12)
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(gotSH, wantSH) {
				t.Errorf("%s: server hours of %+v differ:\ncounted %+v\nledger  %+v", when, scope, gotSH, wantSH)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Lists and totals: every filter alone and some together, two pages deep, as List serves
	// them and as the ledger's own query does.
	filters := []Filter{{}, {Attention: true}, {Mismatch: true}, {TaskState: StateWorking}, {TaskState: StateCompleted},
		{TaskState: StateInputRequired}, {DomainOutcome: OutcomeUnknown}, {Workflow: "kyc"}, {Route: RouteSync}, {Route: RouteHandoff},
		{Tenant: "acme"}, {Tenant: "globex", TaskState: StateFailed}, {Tenant: "acme", Attention: true}, {Workflow: "refund", DomainOutcome: OutcomeApplied},
		{Attention: true, Mismatch: true}, {Route: RouteTask, TaskState: StateCancelled, DomainOutcome: OutcomeApplied},
		{Search: "R-3"}, {Search: "r-5_1"}, {Search: "k-17"}, {Search: "task-"}, {Search: "%"}, {Tenant: "acme", Search: "refund", Attention: true}}
	// A search for an operation id and a task id that exist.
	var opID, taskID string
	if err := s.pool.QueryRow(ctx, `SELECT o.id::text, coalesce(max(t.task_id), 'none') FROM operations o LEFT JOIN tasks t ON t.task_id IS NOT NULL
		GROUP BY o.id ORDER BY o.id LIMIT 1`).Scan(&opID, &taskID); err != nil {
		t.Fatal(err)
	}
	filters = append(filters, Filter{Search: strings.ToUpper(opID)}, Filter{Search: taskID})
	for _, scope := range scopes[:3] {
		for _, f := range filters {
			f.Limit = 7
			for page := 0; page < 3; page++ {
				got, err := s.list(ctx, scope, f, true)
				if err != nil {
					t.Fatal(err)
				}
				want, err := s.list(ctx, scope, f, false)
				if err != nil {
					t.Fatal(err)
				}
				if ids(got) != ids(want) || got.Total != want.Total || got.Next != want.Next {
					t.Errorf("%s: list %+v of %+v page %d: counted %d %s next %q, ledger %d %s next %q", when, f, scope, page,
						got.Total, ids(got), got.Next, want.Total, ids(want), want.Next)
					break
				}
				if want.Next == "" {
					break
				}
				f.After = want.Next
			}
		}
	}
}

func ids(p Page) string {
	var out []string
	for _, o := range p.Operations {
		out = append(out, o.ID[:8])
	}
	return strings.Join(out, ",")
}

// TestCountsEqualTheLedger drives a ledger through starts, task transitions, tool errors,
// outcome and attention changes, reconciliation items opened and closed, questions asked and
// answered, handoffs, envelopes written and pruned, polls, tasks and operations deleted, in
// three tenants, and holds the counters (compacted, partly compacted and not compacted at all,
// then recounted) to the direct aggregation the console read before them.
func TestCountsEqualTheLedger(t *testing.T) {
	t.Parallel()
	s := NewStore(pgtest.New(t))
	ctx := context.Background()
	l := &ledger{t: t, pool: s.pool, rng: rand.New(rand.NewPCG(12, 34))}
	for range 150 {
		l.newOp()
	}
	checkCounts(t, s, "seeded, nothing compacted")
	if _, err := s.CompactOverview(ctx); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s, "seeded and compacted")
	for round := range 8 {
		for range 60 {
			l.change()
		}
		// Half the rounds compact what the first part changed, so readers see both compacted
		// counts and dirty operations.
		if round%2 == 0 {
			if _, err := s.CompactOverview(ctx); err != nil {
				t.Fatal(err)
			}
			for range 30 {
				l.change()
			}
		}
		checkCounts(t, s, fmt.Sprintf("round %d", round))
		if t.Failed() {
			return
		}
	}
	if _, err := s.CompactOverview(ctx); err != nil {
		t.Fatal(err)
	}
	var dirty int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM overview_dirty`).Scan(&dirty); err != nil || dirty != 0 {
		t.Fatalf("%d marks left after compacting (%v)", dirty, err)
	}
	checkCounts(t, s, "all compacted")
	// A task given its id, and nothing else, is found by it (compacted or not).
	l.exec(`UPDATE tasks SET task_id = 'given-late' WHERE operation_id = (SELECT min(operation_id::text)::uuid FROM tasks)`)
	for _, compact := range []bool{false, true} {
		if compact {
			if _, err := s.CompactOverview(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if p, err := s.List(ctx, Scope{All: true}, Filter{Search: "given-late"}); err != nil || p.Total != 1 || len(p.Operations) != 1 {
			t.Errorf("search for a task id given late (compacted %v): %+v %v", compact, p, err)
		}
	}
	// A recount from scratch keeps what the compactions built.
	before := counterTables(t, s)
	if err := s.RecountOverview(ctx); err != nil {
		t.Fatal(err)
	}
	if after := counterTables(t, s); after != before {
		a, b := strings.Split(after, ";"), strings.Split(before, ";")
		var onlyA, onlyB []string
		for _, r := range a {
			if !slices.Contains(b, r) {
				onlyA = append(onlyA, r)
			}
		}
		for _, r := range b {
			if !slices.Contains(a, r) {
				onlyB = append(onlyB, r)
			}
		}
		t.Errorf("the recount differs from the compacted counts:\nonly recounted %s\nonly compacted %s", onlyA, onlyB)
	}
	checkCounts(t, s, "recounted")
}

// counterTables renders the counter tables' non-zero rows.
func counterTables(t *testing.T, s *Store) string {
	t.Helper()
	var out string
	err := s.pool.QueryRow(context.Background(), `SELECT
		(SELECT string_agg(x::text, ';' ORDER BY x::text) FROM overview_totals x WHERE ops <> 0 OR ri_open <> 0) || '|' ||
		(SELECT string_agg(x::text, ';' ORDER BY x::text) FROM overview_created x WHERE ops <> 0) || '|' ||
		(SELECT string_agg(x::text, ';' ORDER BY x::text) FROM overview_hourly x WHERE starts <> 0 OR ended <> 0 OR unknown <> 0) || '|' ||
		(SELECT string_agg(x::text, ';' ORDER BY x::text) FROM overview_server_hours x WHERE ended <> 0) || '|' ||
		(SELECT string_agg(x::text, ';' ORDER BY x::text) FROM overview_ops x)`).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCountsExactWhenTwoTransactionsChangeOneOperation: a task's state and its operation's
// outcome changed at once by two transactions (and a question answered while the watcher
// moves its task on) still count as the ledger says once both commit, which a trigger adding
// +1/-1 from the row it sees would get wrong.
func TestCountsExactWhenTwoTransactionsChangeOneOperation(t *testing.T) {
	t.Parallel()
	s := NewStore(pgtest.New(t))
	ctx := context.Background()
	l := &ledger{t: t, pool: s.pool, rng: rand.New(rand.NewPCG(5, 6))}
	var id string
	for id == "" {
		if cand := l.newOp(); strings.HasPrefix(l.routeOf(cand), "task") {
			id = cand
		}
	}
	l.exec(`UPDATE tasks SET state = 'input_required', terminal_at = NULL WHERE operation_id = $1`, id)
	l.exec(`UPDATE operations SET domain_outcome = 'pending', attention = NULL WHERE id = $1`, id)
	l.exec(`DELETE FROM reconciliation_items WHERE operation_id = $1`, id)
	l.exec(`DELETE FROM handoff_items WHERE operation_id = $1`, id)
	l.exec(`INSERT INTO pending_inputs (operation_id, input_key, method) VALUES ($1, 'q', 'elicitation/create')`, id)
	if _, err := s.CompactOverview(ctx); err != nil {
		t.Fatal(err)
	}
	both := func(a, b string) {
		t.Helper()
		t1, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t2, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := t1.Exec(ctx, a, id); err != nil {
			t.Fatal(err)
		}
		if _, err := t2.Exec(ctx, b, id); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for _, tx := range []pgx.Tx{t1, t2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	// The person's answer closes the question while the watcher sees the task working again:
	// neither transaction sees the other's change, and the operation no longer needs a person.
	both(`UPDATE pending_inputs SET state = 'answered' WHERE operation_id = $1`,
		`UPDATE tasks SET state = 'working' WHERE operation_id = $1`)
	checkCounts(t, s, "question answered while the task moved on")
	if _, err := s.CompactOverview(ctx); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s, "question answered while the task moved on, compacted")
	both(`UPDATE tasks SET state = 'failed', terminal_at = now() WHERE operation_id = $1`,
		`UPDATE operations SET domain_outcome = 'applied' WHERE id = $1`)
	if _, err := s.CompactOverview(ctx); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s, "task failed while the outcome became applied")
	page, err := s.List(ctx, Scope{All: true}, Filter{Mismatch: true})
	if err != nil || page.Total != 1 || len(page.Operations) != 1 || page.Operations[0].ID != id {
		t.Fatalf("mismatch list = %+v (%v), want the one operation", page, err)
	}
}

func (l *ledger) routeOf(id string) string {
	var r string
	if err := l.pool.QueryRow(context.Background(), `SELECT route FROM operations WHERE id = $1`, id).Scan(&r); err != nil {
		l.t.Fatal(err)
	}
	return r
}

// TestCompactorsOnTwoReplicas: compactions running at once on several connections while the
// ledger changes count every change once.
func TestCompactorsOnTwoReplicas(t *testing.T) {
	t.Parallel()
	s := NewStore(pgtest.New(t))
	ctx := context.Background()
	l := &ledger{t: t, pool: s.pool, rng: rand.New(rand.NewPCG(7, 8))}
	for range 100 {
		l.newOp()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.CompactOverview(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 400 {
		l.change()
	}
	close(stop)
	wg.Wait()
	checkCounts(t, s, "changed while three compactors ran")
	if _, err := s.CompactOverview(ctx); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s, "compacted after")
}

// TestRecountRepairsRowsWrittenWithTriggersOff: operations and reconciliation items written with
// the triggers off (as the benchmark seeds) are missing from the counts until RecountOverview,
// and counted after it.
func TestRecountRepairsRowsWrittenWithTriggersOff(t *testing.T) {
	t.Parallel()
	s := NewStore(pgtest.New(t))
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l := &ledger{t: t, pool: s.pool, rng: rand.New(rand.NewPCG(9, 10))}
	l.newOp()
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO operations (tenant, workflow, idempotency_key, request_sha256, actor, route, reason_code, reason)
		SELECT 'acme', 'refund', 'quiet-' || i, 'h', 'app', 'sync', 'r', 'r' FROM generate_series(1, 5) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO reconciliation_items (operation_id, tenant, workflow, reason)
		SELECT id, tenant, workflow, 'sync_timeout' FROM operations WHERE idempotency_key LIKE 'quiet-%'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `RESET session_replication_role`); err != nil {
		t.Fatal(err)
	}
	conn.Release()
	n, err := s.Count(ctx, Scope{All: true}, Filter{Route: RouteSync, Workflow: "refund", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := s.count(ctx, Scope{All: true}, Filter{Route: RouteSync, Workflow: "refund", Tenant: "acme"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if direct < 5 || n != direct-5 {
		t.Fatalf("before the recount: counted %d, ledger %d; want the 5 quiet rows missing", n, direct)
	}
	queued := func() (counted, items int) {
		t.Helper()
		if err := s.pool.QueryRow(ctx, `SELECT (SELECT coalesce(sum(items), 0) FROM queue_counts) + (SELECT coalesce(sum(items), 0) FROM queue_count_deltas),
			(SELECT count(*) FROM reconciliation_items WHERE closed_at IS NULL)`).Scan(&counted, &items); err != nil {
			t.Fatal(err)
		}
		return counted, items
	}
	if counted, items := queued(); counted != items-5 {
		t.Fatalf("before the recount the queue counts %d of %d open items; want the 5 quiet ones missing", counted, items)
	}
	if err := s.RecountOverview(ctx); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s, "recounted")
	if counted, items := queued(); counted != items {
		t.Errorf("after the recount the queue counts %d of %d open items", counted, items)
	}
}

// TestCompactionStaysLinearWithAPlanCachedWhileEmpty: the compactor's statement is prepared
// once per connection, so its plan can be one made while overview_dirty was empty (just
// vacuumed: zero pages, zero rows). Under a burst of marks that plan must not test every mark
// against the marks taken (an array searched per row made one statement quadratic: 2-5 s at
// 75,000 marks), and the passes still take every mark, more than one batch of them.
func TestCompactionStaysLinearWithAPlanCachedWhileEmpty(t *testing.T) {
	t.Parallel()
	s := NewStore(pgtest.New(t))
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `VACUUM overview_dirty`); err != nil {
		t.Fatal(err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, q := range []string{`SET plan_cache_mode = force_generic_plan`, `PREPARE compact AS ` + compactSQL} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	plan := func() []map[string]any {
		t.Helper()
		var raw []map[string]any
		if err := conn.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE compact(5000)`).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var scans []map[string]any
		var walk func(n map[string]any)
		walk = func(n map[string]any) {
			if n["Relation Name"] == "overview_dirty" && n["Node Type"] != "ModifyTable" {
				scans = append(scans, n)
			}
			kids, _ := n["Plans"].([]any)
			for _, k := range kids {
				walk(k.(map[string]any))
			}
		}
		walk(raw[0]["Plan"].(map[string]any))
		return scans
	}
	plan() // the generic plan, made and cached while the table is empty

	l := &ledger{t: t, pool: s.pool, rng: rand.New(rand.NewPCG(56, 78))}
	for range 40 {
		l.newOp()
	}
	l.exec(`INSERT INTO overview_dirty (operation_id) SELECT o.id FROM operations o, generate_series(1, 300)`)
	scans := plan()
	if len(scans) == 0 {
		t.Fatal("the compaction's plan reads no overview_dirty")
	}
	for _, n := range scans {
		for _, k := range []string{"Filter", "TID Cond"} {
			if c, _ := n[k].(string); strings.Contains(c, "ANY") {
				t.Errorf("the cached plan tests each mark against an array (%s %s: %s)", n["Node Type"], k, c)
			}
		}
	}
	if _, err := conn.Exec(ctx, `DEALLOCATE compact`); err != nil {
		t.Fatal(err)
	}

	var marks int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM overview_dirty`).Scan(&marks); err != nil || marks <= 2*compactBatch {
		t.Fatalf("%d marks, want more than two batches: %v", marks, err)
	}
	n, err := s.CompactOverview(ctx)
	if err != nil || n != marks {
		t.Fatalf("compaction took %d marks of %d: %v", n, marks, err)
	}
	var left int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM overview_dirty`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d marks left: %v", left, err)
	}
	checkCounts(t, s, "a burst compacted in batches")
}
