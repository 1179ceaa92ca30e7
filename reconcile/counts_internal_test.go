package reconcile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/pgtest"
)

// TestQueueCountsEqualTheItems drives items through opening, state changes, claims, closing
// (with and without a state change) and opening again, moving between tenants, workflows and
// reasons, and deleting, and holds the bulk preview's
// counts (compacted and not, then recounted) to a count of the items themselves, for each
// filter the counts serve (claimed by nobody and ages among them) and in three scopes.
func TestQueueCountsEqualTheItems(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	s := NewStore(pool, Options{})
	seedQueue(t, pool, 600)
	rng := rand.New(rand.NewPCG(3, 4))
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	pick := func(list ...string) string { return list[rng.IntN(len(list))] }
	change := func() {
		item := fmt.Sprintf(`(SELECT id FROM reconciliation_items ORDER BY id OFFSET %d LIMIT 1)`, rng.IntN(550))
		switch rng.IntN(12) {
		case 0:
			exec(`UPDATE reconciliation_items SET state = $1 WHERE id = `+item, pick("verifying", "needs_person"))
		case 1:
			exec(`UPDATE reconciliation_items SET state = $1, closed_at = now() WHERE closed_at IS NULL AND id = `+item, pick("settled", "resolved"))
		case 2:
			// A claim that holds, one that has expired, one released.
			exec(`UPDATE reconciliation_items SET claimed_by = $1, claim_expires_at = now() + $2::interval WHERE id = `+item,
				pick("bob", "carol"), pick("1 hour", "-1 minute"))
		case 11:
			exec(`UPDATE reconciliation_items SET opened_at = now() - $1::interval WHERE id = `+item, fmt.Sprintf("%d minutes", rng.IntN(3*24*60)))
		case 10:
			exec(`UPDATE reconciliation_items SET claimed_by = NULL, claim_expires_at = NULL WHERE id = ` + item)
		case 3:
			exec(`UPDATE reconciliation_items SET tenant = $1, workflow = $2 WHERE id = `+item, pick("acme", "globex", "initech"), pick("refund", "kyc"))
		case 4:
			exec(`UPDATE reconciliation_items SET reason = $1 WHERE id = `+item, pick("sync_timeout", "task_unobservable", "human_handoff"))
		case 5:
			exec(`DELETE FROM reconciliation_items WHERE id = ` + item)
		case 8:
			exec(`UPDATE reconciliation_items SET closed_at = now() WHERE id = ` + item)
		case 9:
			exec(`UPDATE reconciliation_items r SET closed_at = NULL WHERE id = ` + item + ` AND NOT EXISTS (SELECT 1 FROM reconciliation_items o
				WHERE o.operation_id = r.operation_id AND o.closed_at IS NULL AND o.id <> r.id)`)
		case 6, 7:
			exec(`INSERT INTO reconciliation_items (operation_id, tenant, workflow, reason, state)
				SELECT o.id, o.tenant, o.workflow, $1, $2 FROM operations o
				WHERE NOT EXISTS (SELECT 1 FROM reconciliation_items r WHERE r.operation_id = o.id AND r.closed_at IS NULL)
				ORDER BY o.id OFFSET $3 LIMIT 1`, pick("sync_timeout", "task_unobservable"), pick("verifying", "needs_person"), rng.IntN(100))
		}
	}
	check := func(when string) {
		t.Helper()
		for _, scope := range []Scope{{All: true}, {Tenants: []string{"acme"}}, {Tenants: []string{"globex", "initech"}}} {
			for _, f := range []Filter{{}, {State: string(StateNeedsPerson)}, {State: string(StateVerifying)}, {Tenant: "initech"},
				{Workflow: "kyc"}, {Reason: ReasonSyncTimeout}, {State: string(StateNeedsPerson), Workflow: "refund", Tenant: "acme"},
				{ClaimedBy: "nobody"}, {ClaimedBy: "nobody", State: string(StateVerifying), Tenant: "globex"},
				{OlderThan: 36 * time.Hour}, {OlderThan: 90 * time.Minute, Workflow: "refund"}, {OlderThan: 10 * 24 * time.Hour, ClaimedBy: "nobody"}} {
				got, err := s.Preview(ctx, scope, f)
				if err != nil {
					t.Fatal(err)
				}
				var args []any
				w, err := where(scope, f, &args)
				if err != nil {
					t.Fatal(err)
				}
				var want int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM reconciliation_items r WHERE `+w, args...).Scan(&want); err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("%s: preview of %+v in %+v = %d, the items say %d", when, f, scope, got, want)
				}
			}
		}
	}
	check("seeded")
	for round := range 6 {
		for range 80 {
			change()
		}
		check(fmt.Sprintf("round %d", round))
		if round%2 == 1 {
			if err := CompactQueueCounts(ctx, pool); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("round %d compacted", round))
		}
	}
	table := func() string {
		var out string
		if err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(c::text, ';' ORDER BY c::text), '') FROM queue_counts c WHERE items <> 0`).Scan(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if err := CompactQueueCounts(ctx, pool); err != nil {
		t.Fatal(err)
	}
	compacted := table()
	if err := RecountQueueCounts(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if recounted := table(); recounted != compacted {
		t.Errorf("recount %s\ncompacted %s", recounted, compacted)
	}
	check("recounted")
}
