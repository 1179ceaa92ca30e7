package operations_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

// TestRetryIsDecidedAgainAndKeepsTheFirstAttempt checks that a retry after not_applied is refused
// while the route decided now differs (a kill switch engaged after the first attempt), sends
// nothing in that case, and when allowed archives the first attempt instead of deleting it.
func TestRetryIsDecidedAgainAndKeepsTheFirstAttempt(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy"})
	var killed atomic.Bool
	svc, err := operations.NewService(operations.Config{Store: b.Store, Policy: b.Policy, Servers: b.Servers,
		PollFloor: 20 * time.Millisecond, DefaultPoll: 50 * time.Millisecond,
		Router: operations.RouterFunc(func(ctx context.Context, in operations.RouteInput) (operations.Decision, error) {
			if killed.Load() {
				return operations.Decision{Route: operations.RouteReject, ReasonCode: "kill_switch", Reason: "The kill switch is engaged."}, nil
			}
			return operations.PolicyRouter{}.Decide(ctx, in)
		})})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := svc.Start(ctx, acme, operations.StartRequest{IdempotencyKey: "retry-1", Workflow: "refund", Tenant: "acme",
		Actor: "app", ObjectRef: "refund A-1", Arguments: []byte(`{"outcome": "rpc_error"}`)})
	if err != nil || res.Response.Route != operations.RouteTask {
		t.Fatalf("start: %v %+v", err, res.Response)
	}
	id := res.Response.OperationID
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "envelope", func() bool { return b.Detail(t, id).Envelope != nil })
	// A person confirmed with the system of record that nothing was applied.
	if _, err := b.Pool.Exec(ctx, `UPDATE operations SET domain_outcome = 'not_applied' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}

	killed.Store(true)
	if err := svc.Retry(ctx, id, "support@test"); !errors.Is(err, operations.ErrRetryRouteChanged) {
		t.Fatalf("retry with the kill switch engaged: %v", err)
	}
	if n := b.Receiver.Counters().ToolCallsByKey[id]; n != 1 {
		t.Fatalf("tools/call with the key = %d after a refused retry, want 1", n)
	}
	if d := b.Detail(t, id); d.DomainOutcome != operations.OutcomeNotApplied || d.Envelope == nil {
		t.Fatalf("a refused retry changed the operation: outcome %s envelope %v", d.DomainOutcome, d.Envelope)
	}

	killed.Store(false)
	if err := svc.Retry(ctx, id, "support@test"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if n := b.Receiver.Counters().ToolCallsByKey[id]; n != 2 {
		t.Fatalf("tools/call with the key = %d after the retry, want 2", n)
	}
	var attempts int
	var status, by string
	if err := b.Pool.QueryRow(ctx, `SELECT count(*), max(envelope->>'status'), max(archived_by) FROM operation_attempts WHERE operation_id = $1`, id).
		Scan(&attempts, &status, &by); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || status != "failed" || by != "support@test" {
		t.Fatalf("archived attempts = %d (envelope status %q, by %q), want the failed first attempt", attempts, status, by)
	}
}
