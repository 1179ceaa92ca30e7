package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/migrations"
	"github.com/taskgate/taskgate/reconcile"
)

// Items are named by random version 4 UUIDs that say nothing about how many items exist; the
// audit log names them the same way; a foreign, a missing and an old numeric id are refused
// alike.
func TestItemIDsCannotBeCounted(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := context.Background()
	var ids []string
	for i := range 6 {
		ids = append(ids, w.handoff(t, "acme", fmt.Sprintf("pub-%d", i)).ID)
	}
	seen := map[string]bool{}
	for i, id := range ids {
		if !reconcile.ValidID(id) || id[14] != '4' || !ascii(id[19], "89ab") {
			t.Fatalf("item id %q is not a version 4 UUID", id)
		}
		if seen[id] {
			t.Fatalf("item id %s given twice", id)
		}
		seen[id] = true
		if _, err := strconv.ParseInt(id, 10, 64); err == nil {
			t.Fatalf("item id %q is a number", id)
		}
		if i > 0 && id[:8] == ids[i-1][:8] {
			t.Errorf("consecutive items %s and %s share their first 8 hex digits", ids[i-1], id)
		}
	}
	// The audit rows of an item name it by its public id, never by its row key.
	var n, bad int
	if err := w.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE a.target = 'reconciliation:' || r.public_id),
		count(*) FILTER (WHERE a.target = 'reconciliation:' || r.id)
		FROM audit_log a JOIN reconciliation_items r ON a.target IN ('reconciliation:' || r.public_id, 'reconciliation:' || r.id)`).Scan(&n, &bad); err != nil {
		t.Fatal(err)
	}
	if n < len(ids) || bad != 0 {
		t.Fatalf("audit targets: %d by public id, %d by row key", n, bad)
	}

	foreign := w.handoff(t, "globex", "pub-g")
	var seq int64
	if err := w.Pool.QueryRow(ctx, `SELECT id FROM reconciliation_items WHERE public_id = $1`, ids[0]).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]string{
		"another tenant's": foreign.ID, "missing": "6f1c1e0a-3b9d-4c2e-8a7f-5d4e3c2b1a09",
		"row key": strconv.FormatInt(seq, 10), "malformed": "'; SELECT 1 --", "empty": "",
	} {
		if _, err := w.rs.Get(ctx, acme, id); !errors.Is(err, reconcile.ErrNotFound) {
			t.Errorf("get of a %s id: %v", name, err)
		}
		if _, err := w.rs.Claim(ctx, support, acme, id, 0); !errors.Is(err, reconcile.ErrNotFound) {
			t.Errorf("claim of a %s id: %v", name, err)
		}
	}
	if got, err := w.rs.Get(ctx, acme, ids[0]); err != nil || got.ID != ids[0] {
		t.Fatalf("get by public id: %+v %v", got, err)
	}
}

func ascii(c byte, set string) bool {
	for i := 0; i < len(set); i++ {
		if set[i] == c {
			return true
		}
	}
	return false
}

// Items and audit rows that existed before public ids get one each when the migration runs,
// the audit rows name the new id, and undoing it gives the row keys back.
func TestMigrationGivesExistingItemsPublicIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	runner, err := migrations.NewRunner(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer runner.Close()
	st, err := runner.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range st {
		if m.Applied && m.Version >= 21 {
			n++
		}
	}
	if _, err := runner.Down(ctx, n); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		var op string
		if err := pool.QueryRow(ctx, `INSERT INTO operations (tenant, workflow, idempotency_key, request_sha256, actor, object_ref, route,
			reason_code, reason, domain_outcome) VALUES ('acme','refund',$1,'h','app','refund A-1','sync','x','x','unknown') RETURNING id`,
			fmt.Sprintf("old-%d", i)).Scan(&op); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `WITH r AS (INSERT INTO reconciliation_items (operation_id, tenant, workflow, reason, state)
			VALUES ($1, 'acme', 'refund', 'human_handoff', 'needs_person') RETURNING id)
			INSERT INTO audit_log (actor, actor_kind, action, target) SELECT 'reconciler', 'system', 'reconcile.open', 'reconciliation:' || id FROM r`, op); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := runner.Up(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT r.public_id::text, count(a.id) FROM reconciliation_items r
		LEFT JOIN audit_log a ON a.target = 'reconciliation:' || r.public_id GROUP BY r.public_id`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for rows.Next() {
		var id string
		var c int64
		if err := rows.Scan(&id, &c); err != nil {
			t.Fatal(err)
		}
		got[id] = c
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if len(got) != 3 {
		t.Fatalf("%d distinct public ids for 3 items: %v", len(got), got)
	}
	for id, c := range got {
		if !reconcile.ValidID(id) || c != 1 {
			t.Errorf("item %s: %d audit rows name it", id, c)
		}
	}
	if _, err := runner.Down(ctx, n); err != nil {
		t.Fatal(err)
	}
	var back int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log a JOIN reconciliation_items r ON a.target = 'reconciliation:' || r.id`).Scan(&back); err != nil || back != 3 {
		t.Fatalf("after undoing: %d audit rows name their item's row key (%v)", back, err)
	}
}
