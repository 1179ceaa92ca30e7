package watch_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/receiver"
)

// TestAPassTakesInTheTasksFallingDueBeforeTheNext: a pass takes in a task whose next poll
// comes within its look-ahead (the pause until the next pass) and no task due later, and keeps
// the stored next poll: the holder polls the task when it falls due, not when it was taken.
func TestAPassTakesInTheTasksFallingDueBeforeTheNext(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "extension", Receiver: receiver.Config{DefaultPollInterval: 5 * time.Second}})
	id := b.Start(t, "refund", "look-ahead", `{"outcome": "hang"}`).Response.OperationID
	due := b.Detail(t, id).Task.NextPollAt
	if due == nil || time.Until(*due) < 3*time.Second {
		t.Fatalf("next poll %v, want about 5 s from now", due)
	}
	ctx := context.Background()
	const floor, defPoll = 250 * time.Millisecond, time.Second
	got, err := b.Store.AcquireDue(ctx, "r-ahead", 10, time.Second, 30*time.Second, floor, defPoll)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("a pass looking 1 s ahead took %d tasks due in about 5 s", len(got))
	}
	got, err = b.Store.AcquireDue(ctx, "r-ahead", 10, 10*time.Second, 30*time.Second, floor, defPoll)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("a pass looking 10 s ahead took %d tasks, want the one due in about 5 s", len(got))
	}
	if !got[0].NextPollAt.Equal(*due) {
		t.Fatalf("taken with next poll %v, stored %v: taking a task in early must not move its poll", got[0].NextPollAt, *due)
	}
}
