package operations_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

// An observation that contradicts a stored final state is a violation only when the observer
// had seen that final state; one begun before another connection or replica stored it is
// stale: nothing is written.
func TestObservationAgainstAFinalStateIsStaleOrAViolationByItsBasis(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	cases := []struct {
		name      string
		source    string
		basis     operations.TaskState
		violation bool
	}{
		{"status read sent while the task was working is stale", operations.SourcePoll, operations.StateWorking, false},
		{"status read sent while input was required is stale", operations.SourcePoll, operations.StateInputRequired, false},
		{"status read sent on the final state is a violation", operations.SourcePoll, operations.StateCompleted, true},
		{"status read without a basis is a violation", operations.SourcePoll, "", true},
		{"cancel answer sent while working is stale", operations.SourceCancelReply, operations.StateWorking, false},
		{"notification whose connection never saw the final state is stale", operations.SourceNotification, "", false},
		{"notification after its own stream said completed is a violation", operations.SourceNotification, operations.StateCompleted, true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			id := b.Start(t, "refund", "stale-"+string(rune('a'+i)), `{"duration_ms": 60000}`).Response.OperationID
			done, err := b.Store.Observe(ctx, id, operations.Observation{State: operations.StateCompleted, Basis: operations.StateWorking}, operations.SourceNotification)
			if err != nil || !done.BecameTerminal {
				t.Fatalf("completing = %+v, %v", done, err)
			}
			before := b.Detail(t, id)
			r, err := b.Store.Observe(ctx, id, operations.Observation{State: operations.StateWorking, StatusMessage: "still at it", Basis: c.basis}, c.source)
			if err != nil {
				t.Fatal(err)
			}
			d := b.Detail(t, id)
			if d.Task.State != operations.StateCompleted || r.Changed {
				t.Fatalf("stored %s (changed %v): a final state moved", d.Task.State, r.Changed)
			}
			if len(d.Timeline) != len(before.Timeline) {
				t.Fatalf("timeline grew from %d to %d", len(before.Timeline), len(d.Timeline))
			}
			if r.Violation != c.violation || r.Stale == c.violation {
				t.Fatalf("result %+v, want violation %v", r, c.violation)
			}
			want := 0
			if c.violation {
				want = 1
			}
			if len(d.Violations) != want {
				t.Fatalf("violations stored %+v, want %d", d.Violations, want)
			}
		})
	}
}

// A status answer read before another status was stored, which the server wrote no later than
// that one (by its lastUpdatedAt), is stale even between open states: an input_required learned
// from a notification is not moved back to working by a read answered before it. A read begun
// on the stored state is taken whatever its timestamp.
func TestStatusAnswerWrittenBeforeTheStoredStatusIsStale(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	ctx := context.Background()
	id := b.Start(t, "refund", "older-1", `{"duration_ms": 60000}`).Response.OperationID
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := b.Store.Observe(ctx, id, operations.Observation{State: operations.StateInputRequired, StatusMessage: "asking",
		UpdatedAt: t0.Add(time.Second)}, operations.SourceNotification); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		at    time.Time
		basis operations.TaskState
		stale bool
	}{
		{"written earlier", t0, operations.StateWorking, true},
		{"written at the same instant, read on another state", t0.Add(time.Second), operations.StateWorking, true},
		{"read on the stored state, written earlier by another clock", t0, operations.StateInputRequired, false},
	} {
		if c.stale {
			r, err := b.Store.Observe(ctx, id, operations.Observation{State: operations.StateWorking, StatusMessage: "older",
				UpdatedAt: c.at, Basis: c.basis}, operations.SourcePoll)
			if err != nil || !r.Stale || r.Changed {
				t.Fatalf("%s: %+v %v, want stale", c.name, r, err)
			}
			if d := b.Detail(t, id); d.Task.State != operations.StateInputRequired {
				t.Fatalf("%s: stored %s", c.name, d.Task.State)
			}
			continue
		}
		r, err := b.Store.Observe(ctx, id, operations.Observation{State: operations.StateWorking, StatusMessage: "moved on",
			UpdatedAt: c.at, Basis: c.basis}, operations.SourcePoll)
		if err != nil || r.Stale || !r.Changed || r.Now != operations.StateWorking {
			t.Fatalf("%s: %+v %v, want the change", c.name, r, err)
		}
	}
}

// A final status written at the same instant as a stored open one is the later of the two,
// whichever arrived first: a notification of the end is taken after a read that reported the
// task working at that instant, and a read saying working again is then a violation.
func TestFinalStatusAtTheStoredInstantIsTaken(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	ctx := context.Background()
	id := b.Start(t, "refund", "same-instant", `{"duration_ms": 60000}`).Response.OperationID
	at := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := b.Store.Observe(ctx, id, operations.Observation{State: operations.StateWorking, StatusMessage: "Completed",
		UpdatedAt: at, Basis: operations.StateWorking}, operations.SourcePoll); err != nil {
		t.Fatal(err)
	}
	// A notification of input_required at that instant stays stale: of two open states written
	// at once, neither is known to be the later.
	r, err := b.Store.Observe(ctx, id, operations.Observation{State: operations.StateInputRequired, UpdatedAt: at}, operations.SourceNotification)
	if err != nil || !r.Stale {
		t.Fatalf("input_required at the same instant: %+v %v, want stale", r, err)
	}
	r, err = b.Store.Observe(ctx, id, operations.Observation{State: operations.StateCompleted, StatusMessage: "Completed", UpdatedAt: at}, operations.SourceNotification)
	if err != nil || r.Stale || !r.BecameTerminal {
		t.Fatalf("completed at the same instant: %+v %v, want it taken", r, err)
	}
	// An earlier final status is still older than the stored one.
	id2 := b.Start(t, "refund", "earlier-final", `{"duration_ms": 60000}`).Response.OperationID
	if _, err := b.Store.Observe(ctx, id2, operations.Observation{State: operations.StateWorking, StatusMessage: "still",
		UpdatedAt: at, Basis: operations.StateWorking}, operations.SourcePoll); err != nil {
		t.Fatal(err)
	}
	r, err = b.Store.Observe(ctx, id2, operations.Observation{State: operations.StateCompleted, UpdatedAt: at.Add(-time.Second)}, operations.SourceNotification)
	if err != nil || !r.Stale {
		t.Fatalf("completed before the stored instant: %+v %v, want stale", r, err)
	}
	r, err = b.Store.Observe(ctx, id, operations.Observation{State: operations.StateWorking, StatusMessage: "Completed",
		UpdatedAt: at, Basis: operations.StateCompleted}, operations.SourcePoll)
	if err != nil || !r.Violation {
		t.Fatalf("working again after the end: %+v %v, want a violation", r, err)
	}
}
