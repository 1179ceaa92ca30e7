package operations_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

const cappedWorkflows = `
  - {name: capped, server: rcv, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     concurrency: 2, backpressure: "429", retry_after: 7s, owners: [ops], idempotency_argument: idempotency_key}
  - {name: capped-sync, server: rcv, tool: work_optional, effect: read_only, task_use: preferred,
     fallback: {kind: sync, max_duration: 2s}, concurrency: 1, backpressure: fallback, owners: [ops]}
`

func TestConcurrencyCapAnswers429WithRetryAfterAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Extra: cappedWorkflows})
	// Six starts at once against a cap of two: the per-workflow lock lets exactly two through.
	var wg sync.WaitGroup
	results := make([]error, 6)
	ids := make([]string, 6)
	for i := range results {
		wg.Go(func() {
			res, err := b.Ops.Start(context.Background(), acme, operations.StartRequest{IdempotencyKey: fmt.Sprint("cap-", i),
				Workflow: "capped", Tenant: "acme", Actor: "app:billing", Arguments: []byte(`{"outcome": "hang"}`)})
			results[i] = err
			if err == nil {
				ids[i] = res.Response.OperationID
				if res.Response.Route != operations.RouteTask {
					t.Errorf("start %d took route %s", i, res.Response.Route)
				}
			}
		})
	}
	wg.Wait()
	started, refused := 0, 0
	for i, err := range results {
		var ce *operations.CapacityError
		switch {
		case err == nil:
			started++
		case errors.As(err, &ce) && errors.Is(err, operations.ErrAtCapacity):
			refused++
			if ce.RetryAfter != 7*time.Second || ce.RetryAfterSeconds() != 7 || ce.InFlight != 2 || ce.Limit != 2 {
				t.Errorf("start %d: %+v", i, ce)
			}
		default:
			t.Fatalf("start %d: %v", i, err)
		}
	}
	if started != 2 || refused != 4 {
		t.Fatalf("started %d, refused %d; want 2 and 4", started, refused)
	}
	// A refused start wrote nothing: the ledger holds the two started operations only.
	page, err := b.Ops.List(context.Background(), acme, operations.Filter{Workflow: "capped"})
	if err != nil || len(page.Operations) != 2 {
		t.Fatalf("ledger: %d operations (%v)", len(page.Operations), err)
	}
	if n := b.Receiver.Counters().ToolCalls["work_required"]; n != 2 {
		t.Fatalf("tools/call = %d, want 2", n)
	}
	// A repeat of a started key is replayed, never refused at the cap.
	for i, id := range ids {
		if id == "" {
			continue
		}
		res, err := b.Ops.Start(context.Background(), acme, operations.StartRequest{IdempotencyKey: fmt.Sprint("cap-", i),
			Workflow: "capped", Tenant: "acme", Actor: "app:billing", Arguments: []byte(`{"outcome": "hang"}`)})
		if err != nil || !res.Replayed || res.Response.OperationID != id {
			t.Fatalf("replay of cap-%d: %+v %v", i, res, err)
		}
		// The same key with another request is a reused key, not a start refused at the cap.
		if _, err := b.Ops.Start(context.Background(), acme, operations.StartRequest{IdempotencyKey: fmt.Sprint("cap-", i),
			Workflow: "capped", Tenant: "acme", Actor: "app:billing", Arguments: []byte(`{"outcome": "other"}`)}); !errors.Is(err, operations.ErrKeyReused) {
			t.Fatalf("cap-%d with another request at the cap: %v, want the key reused", i, err)
		}
	}
	// Cancelling one frees a slot once its task is terminal.
	var first string
	for _, id := range ids {
		if id != "" {
			first = id
			break
		}
	}
	if _, err := b.Ops.Cancel(context.Background(), acme, first, "alice", "free a slot"); err != nil {
		t.Fatal(err)
	}
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "cancelled", func() bool { return b.Detail(t, first).Task.State.Final() })
	res := b.Start(t, "capped", "cap-after", `{"outcome": "hang"}`)
	if res.Response.Route != operations.RouteTask {
		t.Fatalf("after a slot freed: %+v", res.Response)
	}
}

func TestConcurrencyCapTakesTheFallbackWhenThePolicySaysSo(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Extra: cappedWorkflows})
	first := b.Start(t, "capped-sync", "fb-1", `{"outcome": "hang"}`)
	if first.Response.Route != operations.RouteTask {
		t.Fatalf("first: %+v", first.Response)
	}
	second := b.Start(t, "capped-sync", "fb-2", `{"duration_ms": 10}`)
	if second.Status != http.StatusCreated || second.Response.Route != operations.RouteSync || second.Response.ReasonCode != "at_capacity" {
		t.Fatalf("second: %d %+v", second.Status, second.Response)
	}
	d := b.Detail(t, second.Response.OperationID)
	if d.Route != operations.RouteSync || d.Task != nil || d.Envelope == nil {
		t.Fatalf("fallback operation: route %s task %+v envelope %+v", d.Route, d.Task, d.Envelope)
	}
}

func TestConcurrencyCapSlotIsFreedWhenATaskEnds(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Extra: cappedWorkflows})
	ctx := context.Background()
	start := func(i int) (operations.StartResult, error) {
		return b.Ops.Start(ctx, acme, operations.StartRequest{IdempotencyKey: fmt.Sprint("slot-", i), Workflow: "capped",
			Tenant: "acme", Actor: "app:billing", Arguments: []byte(`{"outcome": "hang"}`)})
	}
	var first string
	for i := range 2 {
		res, err := start(i)
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if i == 0 {
			first = res.Response.OperationID
		}
	}
	if _, err := start(2); !errors.Is(err, operations.ErrAtCapacity) {
		t.Fatalf("third start at a cap of 2: %v", err)
	}
	// A repeat of a known key is a replay, not a new slot.
	if res, err := start(1); err != nil || !res.Replayed {
		t.Fatalf("repeat: %v (replayed %v)", err, res.Replayed)
	}
	// The task ends (as a watcher records it): its slot is free for the next start.
	if _, err := b.Pool.Exec(ctx, `UPDATE tasks SET state = 'cancelled', terminal_at = now() WHERE operation_id = $1`, first); err != nil {
		t.Fatal(err)
	}
	if _, err := start(3); err != nil {
		t.Fatalf("start after a task ended: %v", err)
	}
	inFlight, _, err := b.Store.InFlight(ctx, "capped")
	if err != nil {
		t.Fatal(err)
	}
	if inFlight != 2 {
		t.Errorf("counter says %d in flight, want 2", inFlight)
	}
	if _, err := start(4); !errors.Is(err, operations.ErrAtCapacity) {
		t.Fatalf("start at the cap again: %v", err)
	}
}

// A task that ends gives its slot back without locking the cap's counter: while the
// transaction that ended it is still open, starts of the workflow reserve their slots without
// waiting for it, and the slot it frees is usable once it commits.
func TestATaskEndingHoldsUpNoStartOfItsWorkflow(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Extra: `
  - {name: capped3, server: rcv, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     concurrency: 3, backpressure: "429", retry_after: 1s, owners: [ops], idempotency_argument: idempotency_key}
`})
	ctx := context.Background()
	start := func(i int) (operations.StartResult, error) {
		return b.Ops.Start(ctx, acme, operations.StartRequest{IdempotencyKey: fmt.Sprint("end-", i), Workflow: "capped3",
			Tenant: "acme", Actor: "app:billing", Arguments: []byte(`{"outcome": "hang"}`)})
	}
	var ids []string
	for i := range 2 {
		res, err := start(i)
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		ids = append(ids, res.Response.OperationID)
	}
	tx, err := b.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `UPDATE tasks SET state = 'completed', terminal_at = now() WHERE operation_id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	// The third slot is taken while the ending transaction is open; a fourth start is at the
	// cap, since that end is not committed.
	done := make(chan error, 1)
	go func() {
		_, err := start(2)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("start while a task's end is uncommitted: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a start waited for the transaction that ended another task of its workflow")
	}
	if _, err := start(3); !errors.Is(err, operations.ErrAtCapacity) {
		t.Fatalf("fourth start with the end uncommitted: %v, want at the cap", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _, err := b.Store.InFlight(ctx, "capped3"); err != nil || n != 2 {
		t.Fatalf("in flight after the end committed: %d (%v), want 2", n, err)
	}
	if _, err := start(4); err != nil {
		t.Fatalf("start after the end committed: %v", err)
	}
	if _, err := start(5); !errors.Is(err, operations.ErrAtCapacity) {
		t.Fatalf("start over the cap: %v", err)
	}
	if n, _, err := b.Store.InFlight(ctx, "capped3"); err != nil || n != 3 {
		t.Fatalf("in flight at the cap: %d (%v), want 3", n, err)
	}
}
