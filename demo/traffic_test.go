package demo_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskgate/taskgate/demo"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/operations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestTrafficStartsOperationsOnSeveralRoutesAndTasksEnd(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy"})
	var started, failed atomic.Int64
	tr, err := demo.New(demo.Config{Ops: b.Ops, Policy: b.Policy, Knobs: b.Receiver.Knobs(), Interval: 10 * time.Millisecond,
		WorkDuration: 100 * time.Millisecond,
		AfterStart: func(_ operations.StartResult, err error) {
			if err != nil {
				failed.Add(1)
			} else {
				started.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Stop)
	_, passes := b.Watcher(t, "demo", nil)

	var routes, terminal, unacknowledged, lastStarted int
	opstest.WaitFor(t, passes, 30*time.Second, "operations on several routes, a terminal task and an unacknowledged create", func() bool {
		err := b.Pool.QueryRow(context.Background(), `SELECT
			(SELECT count(DISTINCT route) FROM operations),
			(SELECT count(*) FROM tasks WHERE state IN ('completed', 'failed', 'cancelled')),
			(SELECT count(*) FROM tasks WHERE state = 'create_unacknowledged'),
			(SELECT count(*) FROM operations WHERE actor = 'demo:traffic')`).Scan(&routes, &terminal, &unacknowledged, &lastStarted)
		if err != nil {
			t.Fatal(err)
		}
		return routes >= 4 && terminal >= 1 && unacknowledged >= 1
	})
	tr.Stop()
	tr.Stop() // idempotent
	if started.Load() == 0 || lastStarted == 0 {
		t.Fatalf("started %d (failed %d), %d in the ledger", started.Load(), failed.Load(), lastStarted)
	}
	var tenants int
	if err := b.Pool.QueryRow(context.Background(), `SELECT count(DISTINCT tenant) FROM operations`).Scan(&tenants); err != nil || tenants < 2 {
		t.Fatalf("operations in %d tenants (%v), want the demo tenants in turn", tenants, err)
	}
	// The lost create response was never sent again.
	if c := b.Receiver.Counters(); c.Dropped == 0 {
		t.Fatalf("no create response was dropped: %+v", c)
	}
	t.Logf("%d routes, %d terminal tasks, %d unacknowledged creates, %d started, %d refused", routes, terminal, unacknowledged, started.Load(), failed.Load())
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	if _, err := demo.New(demo.Config{}); err == nil {
		t.Fatal("a generator without Ops and Policy was accepted")
	}
}
