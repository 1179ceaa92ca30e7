package operations_test

import (
	"context"
	"slices"
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

// TestABeatIsOneRoundTripAndForgetsReplicasGoneForADay: every replica beats every second or
// so, all day, so a beat is one round trip; on the way it removes the rows of replicas that
// have not beaten for a day, never its own (a replica back after a day keeps beating) nor one
// that beat within the day.
func TestABeatIsOneRoundTripAndForgetsReplicasGoneForADay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, tracer := tracedPool(t)
	st := operations.NewStore(pool)
	for _, r := range []string{"gone", "back", "recent", "beating"} {
		if err := st.Beat(ctx, r, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE watcher_replicas SET beat_at = now() - CASE replica
		WHEN 'gone' THEN interval '25 hours' WHEN 'back' THEN interval '26 hours' WHEN 'recent' THEN interval '23 hours' ELSE interval '0' END`); err != nil {
		t.Fatal(err)
	}
	sent, _ := tracer.count(func() {
		if err := st.Beat(ctx, "back", 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	if len(sent) != 1 {
		t.Errorf("a beat made %d round trips, want 1:\n%s", len(sent), strings.Join(sent, "\n"))
	}
	rs, err := st.Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rs {
		names = append(names, r.Name)
		if r.Name == "back" && (!r.Alive || r.StaleAfter != 2*time.Minute) {
			t.Errorf("the replica back after a day: %+v, want alive with its new timeout", r)
		}
	}
	slices.Sort(names)
	if want := []string{"back", "beating", "recent"}; !slices.Equal(names, want) {
		t.Fatalf("replicas after the beat: %v, want %v (only the one gone for a day removed)", names, want)
	}
}
