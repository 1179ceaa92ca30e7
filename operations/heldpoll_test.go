package operations_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
)

// TestAHoldersFlushIsHeapOnlyAndItsNextPollsCount: the watcher's periodic flush of poll counts
// and next polls changes no indexed column, so every row it updates is a heap-only update (no
// index entry written per poll); the next polls it wrote are still what the console shows, what
// a replica taking the tasks over after the holder died starts from, and what a replica
// handing its tasks back leaves in the queue.
func TestAHoldersFlushIsHeapOnlyAndItsNextPollsCount(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "extension", Receiver: receiver.Config{DefaultPollInterval: 60 * time.Second}})
	const n = 60
	ids := make([]string, n)
	for i := range n {
		ids[i] = b.Start(t, "refund", fmt.Sprintf("held-%d", i), `{"outcome": "hang"}`).Response.OperationID
	}
	ctx := context.Background()
	// One connection: the statistics this backend reports are the flush's own.
	cfg := b.Pool.Config().Copy()
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := operations.NewStore(pool)
	const floor, defPoll = 250 * time.Millisecond, time.Second
	got, err := st.AcquireDue(ctx, "r1", 2*n, 2*time.Hour, time.Minute, floor, defPoll)
	if err != nil || len(got) != n {
		t.Fatalf("took %d of %d tasks: %v", len(got), n, err)
	}
	queued := func(id string) (next time.Time) {
		if err := pool.QueryRow(ctx, `SELECT next_poll_at FROM tasks WHERE operation_id = $1`, id).Scan(&next); err != nil {
			t.Fatal(err)
		}
		return next
	}
	inQueue := queued(ids[0])
	updates := func() (all, heapOnly int64) {
		if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'tasks'`).Scan(&all, &heapOnly); err != nil {
			t.Fatal(err)
		}
		return all, heapOnly
	}
	flush := func(replica string, next time.Time) {
		t.Helper()
		ps := make([]operations.Progress, n)
		for i, id := range ids {
			ps[i] = operations.Progress{ID: id, Polls: 1, NextPollAt: next}
		}
		if err := st.FlushProgress(ctx, replica, ps); err != nil {
			t.Fatal(err)
		}
	}
	var next time.Time
	for round := range 3 {
		// Room for the new row versions is what PostgreSQL's pruning of the old ones leaves,
		// which a loaded machine may not have done yet: VACUUM makes it the same every time,
		// so the count below shows whether the flush changed an indexed column.
		if _, err := pool.Exec(ctx, `VACUUM tasks`); err != nil {
			t.Fatal(err)
		}
		a0, h0 := updates()
		next = time.Now().Add(90 * time.Second).Truncate(time.Millisecond)
		flush("r1", next)
		a1, h1 := updates()
		if a1-a0 != n || h1-h0 != n {
			t.Fatalf("flush %d: %d rows updated, %d of them heap-only; want %d and %d", round, a1-a0, h1-h0, n, n)
		}
	}
	if q := queued(ids[0]); !q.Equal(inQueue) {
		t.Fatalf("the flush moved the indexed next poll from %v to %v", inQueue, q)
	}
	d := b.Detail(t, ids[0])
	if d.Task.NextPollAt == nil || !d.Task.NextPollAt.Equal(next) || d.Task.Polls != 3 {
		t.Fatalf("console: next poll %v, %d polls; want the flushed %v and 3", d.Task.NextPollAt, d.Task.Polls, next)
	}

	// The holder dies (its lease ran out, it never beat): the next replica starts from the
	// next polls the holder flushed, not from the older queue entry.
	if _, err := pool.Exec(ctx, `UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE lease_owner = 'r1'`); err != nil {
		t.Fatal(err)
	}
	got, err = st.AcquireDue(ctx, "r2", 2*n, 2*time.Hour, time.Minute, floor, defPoll)
	if err != nil || len(got) != n {
		t.Fatalf("r2 took %d of %d tasks: %v", len(got), n, err)
	}
	for _, a := range got {
		if !a.NextPollAt.Equal(next) {
			t.Fatalf("taken over with next poll %v, want the holder's %v", a.NextPollAt, next)
		}
	}
	// r2 flushes a later poll and hands its tasks back: the queue keeps that poll, so no
	// replica takes them sooner.
	later := next.Add(time.Minute)
	flush("r2", later)
	if err := st.ReleaseLeases(ctx, "r2"); err != nil {
		t.Fatal(err)
	}
	if q := queued(ids[0]); !q.Equal(later) {
		t.Fatalf("handed back with next poll %v in the queue, want %v", q, later)
	}
	if got, err := st.AcquireDue(ctx, "r3", 2*n, time.Minute, time.Minute, floor, defPoll); err != nil || len(got) != 0 {
		t.Fatalf("r3 took %d handed-back tasks more than two minutes before they are due: %v", len(got), err)
	}
}
