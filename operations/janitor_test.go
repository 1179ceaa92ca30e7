package operations_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

const briefWorkflow = `
  - {name: brief, server: rcv, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     owners: [ops], idempotency_argument: idempotency_key, status_retention: 1h}
`

// evidence counts the rows retention must never remove.
type evidence struct {
	Operations, Reconciliation, Audit, Inputs, Violations int
	Outcomes                                              string
}

func countEvidence(t *testing.T, b *opstest.Bundle) evidence {
	t.Helper()
	var e evidence
	err := b.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM operations), (SELECT count(*) FROM reconciliation_items), (SELECT count(*) FROM audit_log),
		(SELECT count(*) FROM pending_inputs), (SELECT count(*) FROM transition_violations),
		(SELECT string_agg(id::text || '=' || domain_outcome, ',' ORDER BY id) FROM operations)`).
		Scan(&e.Operations, &e.Reconciliation, &e.Audit, &e.Inputs, &e.Violations, &e.Outcomes)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func rows(t *testing.T, b *opstest.Bundle, table, id string) int {
	t.Helper()
	var n int
	if err := b.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table+` WHERE operation_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestJanitorRemovesEnvelopesAndTimelinesPastRetentionAndKeepsEvidence(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy", Extra: briefWorkflow})
	ctx := context.Background()
	short := b.Start(t, "brief", "ret-1", `{"duration_ms": 50}`).Response.OperationID // retention 1h
	long := b.Start(t, "refund", "ret-2", `{"duration_ms": 50}`).Response.OperationID // retention 30 days
	open := b.Start(t, "brief", "ret-3", `{"outcome": "hang"}`).Response.OperationID  // reconciliation open
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "envelopes", func() bool {
		return b.Detail(t, short).Envelope != nil && b.Detail(t, long).Envelope != nil
	})
	if err := b.Store.MarkUnknown(ctx, open, operations.StateUnobservable, operations.ReasonTaskUnobservable, "test"); err != nil {
		t.Fatal(err)
	}
	// The verifier confirmed the short one; every task is two hours past its end and far past
	// its protocol TTL; an audit entry exists.
	for _, q := range []string{
		`UPDATE operations SET domain_outcome = 'applied' WHERE id = '` + short + `'`,
		`UPDATE tasks SET terminal_at = now() - interval '2 hours', ttl_ms = 1, server_created_at = now() - interval '3 hours'`,
		`UPDATE task_envelopes SET fetched_at = now() - interval '2 hours'`,
		`INSERT INTO audit_log (actor, actor_kind, action, target) VALUES ('ops', 'system', 'operation.cancel', '` + short + `')`,
		// Poll-log hours: one past the poll log's week, one within it.
		`INSERT INTO server_poll_hours (server, tenant, hour, ok, errors) VALUES
			('rcv', 'acme', date_trunc('hour', now(), 'UTC') - interval '8 days', 5, 1),
			('rcv', 'acme', date_trunc('hour', now(), 'UTC') - interval '6 days', 7, 0)`,
	} {
		if _, err := b.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if rows(t, b, "task_timeline", short) == 0 || rows(t, b, "task_timeline", open) == 0 {
		t.Fatal("no timeline to prune: the test proves nothing")
	}
	before := countEvidence(t, b)

	pruned := make(chan operations.Pruned, 4)
	j, err := operations.NewJanitor(operations.JanitorConfig{Store: b.Store, Policy: b.Policy, Interval: 20 * time.Millisecond, BatchSize: 1,
		AfterPass: func(p operations.Pruned) { pruned <- p }})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Stop)
	p := <-pruned
	if p.Err != nil || p.Envelopes != 1 || p.TimelineEntries == 0 || p.PollHours != 1 {
		t.Fatalf("first pass %+v, want the short workflow's envelope and timeline and the poll hour past a week", p)
	}
	var kept int
	if err := b.Pool.QueryRow(ctx, `SELECT coalesce(sum(ok), 0) FROM server_poll_hours`).Scan(&kept); err != nil || kept != 7 {
		t.Fatalf("poll hours kept: %d reads (%v), want the 7 of the hour within the week", kept, err)
	}
	if rows(t, b, "task_envelopes", short) != 0 || rows(t, b, "task_timeline", short) != 0 {
		t.Fatal("envelope or timeline past retention kept")
	}
	if rows(t, b, "task_envelopes", long) != 1 || rows(t, b, "task_timeline", long) == 0 {
		t.Fatal("the 30-day workflow's envelope or timeline was removed after 2 hours")
	}
	if rows(t, b, "task_timeline", open) == 0 {
		t.Fatal("the timeline of an operation in reconciliation was removed")
	}
	if after := countEvidence(t, b); after != before {
		t.Fatalf("evidence changed: before %+v after %+v", before, after)
	}
	if d := b.Detail(t, short); d.DomainOutcome != operations.OutcomeApplied || d.Task.State != operations.StateCompleted {
		t.Fatalf("ledger row after pruning: outcome %s state %s", d.DomainOutcome, d.Task.State)
	}

	// Once the item is closed, its timeline may go too; the item itself stays.
	if _, err := b.Pool.Exec(ctx, `UPDATE reconciliation_items SET closed_at = now() WHERE operation_id = $1`, open); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for rows(t, b, "task_timeline", open) != 0 {
		select {
		case p := <-pruned:
			if p.Err != nil {
				t.Fatal(p.Err)
			}
		case <-deadline:
			t.Fatal("the closed item's timeline was never pruned")
		}
	}
	if rows(t, b, "reconciliation_items", open) != 1 || countEvidence(t, b).Operations != before.Operations {
		t.Fatal("reconciliation item or ledger row removed")
	}
	j.Stop()
	j.Stop() // idempotent
}

func TestJanitorConfigValidation(t *testing.T) {
	t.Parallel()
	if _, err := operations.NewJanitor(operations.JanitorConfig{}); err == nil {
		t.Fatal("a janitor without store and policy was accepted")
	}
}
