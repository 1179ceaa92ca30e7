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

// TestAPassReadsNoTaskALiveReplicaHolds: a holder never writes its tasks' queued next poll
// again (it flushes held_poll_at), so every held task stays "due" in the queue's order. A
// watcher pass must still read only what it may take: the tasks a live replica holds cost a
// pass nothing, however many there are, while the tasks of a replica that stopped beating are
// found and taken.
func TestAPassReadsNoTaskALiveReplicaHolds(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "extension", Receiver: receiver.Config{DefaultPollInterval: 60 * time.Second, MaxConcurrentTasks: 100}})
	const n = 80
	for i := range n {
		b.Start(t, "refund", fmt.Sprintf("cost-%d", i), `{"outcome": "hang"}`)
	}
	ctx := context.Background()
	// One connection: the statistics this backend reports are the passes' own. On a table of a
	// few pages a sequential scan is the cheapest plan for any query; the ledgers this is about
	// hold millions of rows, so the test asks for the plans an index allows.
	cfg := b.Pool.Config().Copy()
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := operations.NewStore(pool)
	const floor, defPoll, lease = 250 * time.Millisecond, time.Second, time.Hour
	if err := st.Beat(ctx, "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := st.AcquireDue(ctx, "holder", 2*n, time.Hour, lease, floor, defPoll)
	if err != nil || len(got) != n {
		t.Fatalf("holder took %d of %d tasks: %v", len(got), n, err)
	}
	// Every held task's queued next poll lies in the past, as it does while a holder polls
	// them from memory.
	if _, err := pool.Exec(ctx, `UPDATE tasks SET next_poll_at = now() - interval '1 minute' WHERE lease_owner = 'holder'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	read := func() int64 {
		t.Helper()
		if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		var seq, idx int64
		if err := pool.QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0), coalesce(idx_tup_fetch, 0)
			FROM pg_stat_user_tables WHERE relname = 'tasks'`).Scan(&seq, &idx); err != nil {
			t.Fatal(err)
		}
		var entries int64
		if err := pool.QueryRow(ctx, `SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes WHERE relname = 'tasks'`).Scan(&entries); err != nil {
			t.Fatal(err)
		}
		return seq + idx + entries
	}
	for _, replica := range []string{"holder", "other"} {
		for range 3 {
			r0 := read()
			got, err := st.AcquireDue(ctx, replica, 64, time.Second, lease, floor, defPoll)
			if err != nil || len(got) != 0 {
				t.Fatalf("%s took %d tasks a live replica holds: %v", replica, len(got), err)
			}
			// The walk over holders reads an index entry per holder and one past the last.
			if r := read() - r0; r > 8 {
				t.Fatalf("a pass of %s read %d rows and index entries of tasks while %d are held by a live replica; want a few", replica, r, n)
			}
		}
	}
	// The holder stops beating: its tasks are found through its entries and taken.
	if _, err := pool.Exec(ctx, `UPDATE watcher_replicas SET beat_at = now() - interval '1 hour' WHERE replica = 'holder'`); err != nil {
		t.Fatal(err)
	}
	taken := 0
	for range 3 {
		got, err := st.AcquireDue(ctx, "other", 64, time.Second, lease, floor, defPoll)
		if err != nil {
			t.Fatal(err)
		}
		taken += len(got)
	}
	if taken != n {
		t.Fatalf("other took %d of the %d tasks of a replica that stopped beating", taken, n)
	}
}
