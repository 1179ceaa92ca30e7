package watch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/watch"
)

func TestADeadReplicasTasksArePolledWithinSeconds(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "extension", Receiver: receiver.Config{DefaultPollInterval: 100 * time.Millisecond}})
	const n = 8
	for i := range n {
		b.Start(t, "refund", fmt.Sprintf("hb-%d", i), `{"duration_ms": 20000}`)
	}
	// Leases far longer than the takeover bound: only the heartbeats can hand the tasks on.
	long := func(c *watch.Config) { c.Lease = 30 * time.Second } // default heartbeats
	doomed, passes := b.Watcher(t, "doomed", long)
	ctx := context.Background()
	held := func(replica string) int {
		var k int
		if err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE lease_owner = $1 AND lease_expires_at > now()`, replica).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	opstest.WaitFor(t, passes, 10*time.Second, "every task leased", func() bool { return held("doomed") == n })
	doomed.Crash()
	killed := time.Now()
	var before int
	if err := b.Pool.QueryRow(ctx, `SELECT sum(polls) FROM tasks`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	_, passes = b.Watcher(t, "survivor", long)
	opstest.WaitFor(t, passes, 8*time.Second, "the survivor holds every task", func() bool { return held("survivor") == n })
	took := time.Since(killed)
	if took > 5*time.Second {
		t.Fatalf("the dead replica's tasks were taken over after %v, want within 5s", took)
	}
	// Each task is polled again by the survivor.
	opstest.WaitFor(t, passes, 5*time.Second, "polls resumed", func() bool {
		var after int
		_ = b.Pool.QueryRow(ctx, `SELECT sum(polls) FROM tasks`).Scan(&after)
		return after >= before+2*n
	})
	t.Logf("the dead replica's %d tasks were taken over %v after it stopped beating", n, took.Round(time.Millisecond))
}
