package operations_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/internal/opstest"
)

// TestWatcherChangesReachLiveUpdates checks that changes written by the start path and by a
// watcher (not only audited actions) signal the console's event streams, tagged with the tenant.
func TestWatcherChangesReachLiveUpdates(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes := make(chan audit.Change, 256)
	<-audit.Listen(ctx, b.Pool, slog.New(slog.DiscardHandler), func(c audit.Change) {
		select {
		case changes <- c:
		default:
		}
	})
	waitChange := func(what string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case c := <-changes:
				if c.Area == "operation" && c.Tenant == "acme" {
					return
				}
			case <-timeout:
				t.Fatalf("no live change for %s", what)
			}
		}
	}
	res := b.Start(t, "refund", "live-1", `{"duration_ms": 100}`)
	waitChange("the start")
	for len(changes) > 0 {
		<-changes
	}
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "terminal", func() bool { return b.Detail(t, res.Response.OperationID).Envelope != nil })
	waitChange("the watcher's observation")
}
