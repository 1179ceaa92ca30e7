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

// Bulk batches are named by random version 4 UUIDs wherever they appear: the result, the items
// they resolved, the audit rows; a foreign, a missing, an old numeric and a malformed batch id
// are refused alike.
func TestBatchIDsCannotBeCounted(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := context.Background()
	var batches []string
	var resolved []reconcile.Item
	for i := range 3 {
		it := w.handoff(t, "acme", fmt.Sprintf("bid-%d", i))
		f := reconcile.Filter{Tenant: "acme", Workflow: "kyc"}
		out, err := w.rs.Bulk(ctx, support, acme, reconcile.BulkRequest{Filter: f, Action: reconcile.BulkResolve,
			Confirm:    reconcile.ConfirmPhrase(reconcile.BulkResolve, 1),
			Resolution: reconcile.Resolution{Outcome: reconcile.OutcomeCompensated, Reason: "compensating action taken", Note: "n", EvidenceURL: "https://x.example/1"}})
		if err != nil || out.Applied != 1 {
			t.Fatalf("bulk %d: %+v %v", i, out, err)
		}
		batches = append(batches, out.BatchID)
		resolved = append(resolved, w.item(t, it.OperationID))
	}
	for i, id := range batches {
		if !reconcile.ValidID(id) || id[14] != '4' || !ascii(id[19], "89ab") {
			t.Fatalf("batch id %q is not a version 4 UUID", id)
		}
		if _, err := strconv.ParseInt(id, 10, 64); err == nil {
			t.Fatalf("batch id %q is a number", id)
		}
		if i > 0 && (id == batches[i-1] || id[:8] == batches[i-1][:8]) {
			t.Errorf("consecutive batches %s and %s share their first 8 hex digits", batches[i-1], id)
		}
		if got := resolved[i].BatchID; got == nil || *got != id {
			t.Errorf("item resolved by batch %s names batch %v", id, got)
		}
		b, err := w.rs.Batch(ctx, acme, id)
		if err != nil || b.ID != id || b.Applied != 1 || len(b.Resolved) != 1 || b.Resolved[0] != resolved[i].ID {
			t.Fatalf("batch %s: %+v %v", id, b, err)
		}
	}
	// Audit rows name a batch by its public id, as target and as an item change's batch.
	var byPublic, byKey, afterPublic, afterKey int
	if err := w.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM audit_log a JOIN reconciliation_batches b ON a.target = 'reconciliation-batch:' || b.public_id),
		(SELECT count(*) FROM audit_log a JOIN reconciliation_batches b ON a.target = 'reconciliation-batch:' || b.id),
		(SELECT count(*) FROM audit_log a JOIN reconciliation_batches b ON a.after ->> 'batch' = b.public_id::text),
		(SELECT count(*) FROM audit_log a WHERE jsonb_typeof(a.after -> 'batch') = 'number')`).Scan(&byPublic, &byKey, &afterPublic, &afterKey); err != nil {
		t.Fatal(err)
	}
	// Each resolve in a batch also claims first: two item rows per batch carry it.
	if byPublic != 3 || byKey != 0 || afterPublic != 6 || afterKey != 0 {
		t.Fatalf("audit: targets %d by public id, %d by row key; item changes %d by public id, %d by number", byPublic, byKey, afterPublic, afterKey)
	}

	// A batch run on another tenant, a missing one, a row key, a malformed id: the same answer.
	w.handoff(t, "globex", "bid-g")
	out, err := w.rs.Bulk(ctx, support, globex, reconcile.BulkRequest{Filter: reconcile.Filter{Workflow: "kyc"}, Action: reconcile.BulkClaim,
		Confirm: reconcile.ConfirmPhrase(reconcile.BulkClaim, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.rs.Batch(ctx, globex, out.BatchID); err != nil {
		t.Fatalf("the runner's own batch, no tenant named: %v", err)
	}
	if _, err := w.rs.Batch(ctx, all, out.BatchID); err != nil {
		t.Fatalf("an all-tenant account reading a batch: %v", err)
	}
	var seq int64
	if err := w.Pool.QueryRow(ctx, `SELECT id FROM reconciliation_batches WHERE public_id = $1`, batches[0]).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]string{
		"another tenant's": out.BatchID, "missing": "6f1c1e0a-3b9d-4c2e-8a7f-5d4e3c2b1a09",
		"row key": strconv.FormatInt(seq, 10), "malformed": "'; SELECT 1 --", "empty": "",
	} {
		if _, err := w.rs.Batch(ctx, acme, id); !errors.Is(err, reconcile.ErrNotFound) {
			t.Errorf("batch by a %s id: %v", name, err)
		}
	}
	if _, err := w.rs.Batch(ctx, globex, batches[0]); !errors.Is(err, reconcile.ErrNotFound) {
		t.Errorf("acme's batch read in globex's scope: %v", err)
	}
}

// Batches and audit rows that existed before public ids get one each when the migration runs,
// the audit rows name the new id, and undoing it gives the row keys back.
func TestMigrationGivesExistingBatchesPublicIDs(t *testing.T) {
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
		if m.Applied && m.Version >= 22 {
			n++
		}
	}
	if _, err := runner.Down(ctx, n); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := pool.Exec(ctx, `WITH b AS (INSERT INTO reconciliation_batches (actor, action, filter, matched, applied, skipped)
			VALUES ('support@test', 'resolve', '{"tenant": "acme"}', 1, 1, 0) RETURNING id)
			INSERT INTO audit_log (actor, actor_kind, action, target, after)
			SELECT 'support@test', 'account', 'reconcile.batch', 'reconciliation-batch:' || id, '{"action": "resolve"}' FROM b
			UNION ALL SELECT 'support@test', 'account', 'reconcile.resolve', 'reconciliation:x', jsonb_build_object('batch', id, 'state', 'resolved') FROM b`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := runner.Up(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT b.public_id::text,
		count(a.id) FILTER (WHERE a.target = 'reconciliation-batch:' || b.public_id),
		count(a.id) FILTER (WHERE a.after ->> 'batch' = b.public_id::text AND jsonb_typeof(a.after -> 'batch') = 'string')
		FROM reconciliation_batches b LEFT JOIN audit_log a ON true GROUP BY b.public_id`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int64{}
	for rows.Next() {
		var id string
		var c [2]int64
		if err := rows.Scan(&id, &c[0], &c[1]); err != nil {
			t.Fatal(err)
		}
		got[id] = c
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if len(got) != 3 {
		t.Fatalf("%d distinct public ids for 3 batches: %v", len(got), got)
	}
	for id, c := range got {
		if !reconcile.ValidID(id) || c != [2]int64{1, 1} {
			t.Errorf("batch %s: %d audit targets and %d item changes name it", id, c[0], c[1])
		}
	}
	var numeric int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE target ~ '^reconciliation-batch:[0-9]+$' OR jsonb_typeof(after -> 'batch') = 'number'`).Scan(&numeric); err != nil || numeric != 0 {
		t.Fatalf("after the migration: %d audit rows still name a batch by its row key (%v)", numeric, err)
	}
	if _, err := runner.Down(ctx, n); err != nil {
		t.Fatal(err)
	}
	var targets, changes int
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM audit_log a JOIN reconciliation_batches b ON a.target = 'reconciliation-batch:' || b.id),
		(SELECT count(*) FROM audit_log a JOIN reconciliation_batches b ON jsonb_typeof(a.after -> 'batch') = 'number' AND (a.after ->> 'batch')::bigint = b.id)`).Scan(&targets, &changes); err != nil || targets != 3 || changes != 3 {
		t.Fatalf("after undoing: %d targets and %d item changes name their batch's row key (%v)", targets, changes, err)
	}
}
