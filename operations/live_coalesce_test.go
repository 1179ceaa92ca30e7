package operations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/internal/opstest"
)

// TestStartCommitsSendNoNotification checks that the start path's commits carry no NOTIFY (so
// they never queue on PostgreSQL's notification lock) and that a publication sends the
// accumulated changes coalesced: one notification per area and tenant for many starts.
func TestStartCommitsSendNoNotification(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.Pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "LISTEN "+audit.ChangeChannel); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		b.Start(t, "refund", fmt.Sprint("quiet-", i), `{"duration_ms": 60000}`)
	}
	n, err := audit.PublishPending(ctx, b.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("published %d notifications for five starts of one tenant, want 1", n)
	}
	var got []audit.Change
	for {
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		note, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			break
		}
		var c audit.Change
		if err := json.Unmarshal([]byte(note.Payload), &c); err != nil {
			t.Fatalf("payload %q: %v", note.Payload, err)
		}
		got = append(got, c)
	}
	if len(got) != 1 || got[0] != (audit.Change{Area: "operation", Tenant: "acme"}) {
		t.Fatalf("notifications %+v, want only the publication's one for acme", got)
	}
	if n, err := audit.PublishPending(ctx, b.Pool); err != nil || n != 0 {
		t.Fatalf("second publication sent %d (%v), want nothing", n, err)
	}
}
