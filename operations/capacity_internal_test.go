package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/pgtest"
)

// taskInsert is a Task start of workflow wf with key, as Service.Start would make it.
func taskInsert(wf, key string) Insert {
	return Insert{Request: StartRequest{IdempotencyKey: key, Workflow: wf, Tenant: "acme", Actor: "app"}, Hash: "h",
		Arguments: json.RawMessage(`{}`), Decision: Decision{Route: RouteTask, ReasonCode: "task_capable", Reason: "r"},
		Task: &NewTaskRow{Server: "rcv", Tool: "work"}}
}

// capped puts in under a cap of limit, refused with atCap when the cap is reached.
func capped(in Insert, limit int, atCap error) Insert {
	in.CapacityLimit = limit
	in.Capacity = func(n int) (Insert, error) {
		if n >= limit {
			return in, atCap
		}
		return in, nil
	}
	return in
}

func inFlightOf(t *testing.T, s *Store, workflow string) int {
	t.Helper()
	n, ok, err := s.InFlight(context.Background(), workflow)
	if err != nil || !ok {
		t.Fatalf("in flight of %s: %v (counter kept: %v)", workflow, err, ok)
	}
	return n
}

// TestLeakedSlotIsReclaimed: a process that dies between reserving a slot of the cap and
// committing its start leaves the slot taken; the recount gives it back once the grace has
// passed (never before), and a start whose reservation was reclaimed writes nothing, so the cap
// never counts fewer tasks than are open.
func TestLeakedSlotIsReclaimed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewStore(pgtest.New(t))
	const wf, limit = "capped", 2
	atCap := errors.New("at the cap")
	insert := func(key string) Insert { return capped(taskInsert(wf, key), limit, atCap) }
	// Two reservations whose process "dies" before its start transaction: nothing settles them.
	for i := range limit {
		if _, slot, err := s.applyCapacity(ctx, insert(fmt.Sprint("lost-", i))); err != nil || slot == nil {
			t.Fatalf("reservation %d: %v %v", i, slot, err)
		}
	}
	if _, _, err := s.CreateOperation(ctx, insert("refused")); !errors.Is(err, atCap) {
		t.Fatalf("third start at a cap of two with two leaked slots: %v, want at the cap", err)
	}
	if n, err := s.ReclaimCapacity(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("recount within the grace gave back %d (%v), want 0", n, err)
	}
	if got := inFlightOf(t, s, wf); got != limit {
		t.Fatalf("in flight %d after an early recount, want %d", got, limit)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE capacity_slots SET reserved_at = now() - interval '10 minutes'`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ReclaimCapacity(ctx, DefaultSlotGrace); err != nil || n != limit {
		t.Fatalf("recount gave back %d (%v), want %d", n, err, limit)
	}
	if got := inFlightOf(t, s, wf); got != 0 {
		t.Fatalf("in flight %d after the recount, want 0", got)
	}
	// Both slots are usable again: two starts commit their tasks and hold the cap.
	for i := range limit {
		if _, existing, err := s.CreateOperation(ctx, insert(fmt.Sprint("kept-", i))); err != nil || existing {
			t.Fatalf("start %d after the recount: %v", i, err)
		}
	}
	if got := inFlightOf(t, s, wf); got != limit {
		t.Fatalf("in flight %d with two committed tasks, want %d", got, limit)
	}
	var slots int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM capacity_slots`).Scan(&slots); err != nil || slots != 0 {
		t.Fatalf("%d reservations left after committed starts (%v)", slots, err)
	}
	// A start too slow for the grace: its reservation is reclaimed before its transaction runs,
	// so it writes nothing and the counter is not taken twice.
	if _, err := s.pool.Exec(ctx, `UPDATE workflow_in_flight SET in_flight = 0 WHERE workflow = $1`, wf); err != nil {
		t.Fatal(err)
	}
	slow := insert("slow")
	allow := slow.Capacity
	slow.Capacity = func(n int) (Insert, error) {
		if _, err := s.pool.Exec(ctx, `UPDATE capacity_slots SET reserved_at = now() - interval '10 minutes'`); err != nil {
			t.Error(err)
		}
		if r, err := s.ReclaimCapacity(ctx, DefaultSlotGrace); err != nil || r != 1 {
			t.Errorf("reclaimed %d (%v) during the slow start, want 1", r, err)
		}
		return allow(n)
	}
	if _, _, err := s.CreateOperation(ctx, slow); !errors.Is(err, errSlotReclaimed) {
		t.Fatalf("slow start: %v, want its slot reclaimed", err)
	}
	if _, err := s.byKey(ctx, "acme", wf, "slow"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the slow start wrote its operation: %v", err)
	}
	if got := inFlightOf(t, s, wf); got != 0 {
		t.Fatalf("in flight %d after the reclaimed start, want 0", got)
	}
}
