package operations_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

// TestAnIdleCompactionIsOneRoundTrip: every console replica compacts the overview's marks every
// second, all day. A pass with nothing to take asks the database once; a pass after a start
// takes its marks, and one after a reconciliation count change folds it in.
func TestAnIdleCompactionIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, tracer := tracedPool(t)
	b := opstest.Setup(t, opstest.Options{Pool: pool})
	if _, err := b.Store.CompactOverview(ctx); err != nil { // whatever the setup marked
		t.Fatal(err)
	}
	var n int
	var err error
	sent, _ := tracer.count(func() {
		if n, err = b.Store.CompactOverview(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 || len(sent) != 1 {
		t.Errorf("an idle pass took %d marks in %d round trips, want 0 in 1:\n%s", n, len(sent), strings.Join(sent, "\n"))
	}

	b.Start(t, "refund", "compact-1", `{"duration_ms": 60000}`)
	if n, err = b.Store.CompactOverview(ctx); err != nil || n == 0 {
		t.Fatalf("the pass after a start took %d marks (%v), want its marks", n, err)
	}

	if _, err := pool.Exec(ctx, `INSERT INTO queue_count_deltas VALUES ('t1', 'refund', 'outcome_unknown', 'open', date_trunc('hour', now(), 'UTC'), 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store.CompactOverview(ctx); err != nil {
		t.Fatal(err)
	}
	var left, counted int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM queue_count_deltas), (SELECT coalesce(sum(items), 0) FROM queue_counts WHERE tenant = 't1')`).Scan(&left, &counted); err != nil {
		t.Fatal(err)
	}
	if left != 0 || counted != 1 {
		t.Fatalf("after a pass with only a queue count change: %d deltas left, %d counted, want 0 and 1", left, counted)
	}
}

// TestAWatcherPassIsOneRoundTrip: a watcher replica passes four times a second, all day. A
// pass that finds nothing asks the database once, for the tasks and the jobs together; a
// pass that finds a due task takes it and reads it, and hands it to the hold.
func TestAWatcherPassIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, tracer := tracedPool(t)
	b := opstest.Setup(t, opstest.Options{Pool: pool})
	id := b.Start(t, "refund", "pass-1", `{"outcome": "hang"}`).Response.OperationID
	pass := func() (held []operations.Acquired, tasks int, sent []string) {
		sent, _ = tracer.count(func() {
			var err error
			if tasks, _, err = b.Ops.TakeDue(ctx, "r1", 64, time.Hour, time.Minute, 250*time.Millisecond, time.Second,
				func(got []operations.Acquired) { held = got }); err != nil {
				t.Fatal(err)
			}
		})
		return held, tasks, sent
	}
	held, n, sent := pass()
	if n != 1 || len(held) != 1 || held[0].ID != id || len(sent) != 2 {
		t.Fatalf("a pass with a due task took %d (held %d) in %d round trips, want it taken and read in 2:\n%s", n, len(held), len(sent), strings.Join(sent, "\n"))
	}
	held, n, sent = pass()
	if n != 0 || len(held) != 0 || len(sent) != 1 {
		t.Errorf("an idle pass took %d in %d round trips, want nothing in 1:\n%s", n, len(sent), strings.Join(sent, "\n"))
	}
}
