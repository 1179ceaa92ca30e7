package operations_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
)

// Each way a task stops waiting for an answer closes its open question with that reason on the
// timeline, and a late answer is refused as expired, saying why.
func TestOpenInputsCloseWithTheReasonForEachWayTheTaskStopsWaiting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, state, closedAs, reason string
		end                           func(t *testing.T, b *opstest.Bundle, id string)
	}{
		{name: "unobservable", state: string(operations.StateUnobservable), closedAs: "expired", reason: "unobservable",
			end: func(t *testing.T, b *opstest.Bundle, id string) {
				b.Receiver.Knobs().RefuseTasksGet(0, time.Now().Add(time.Hour), http.StatusServiceUnavailable)
			}},
		{name: "deadline passed", state: string(operations.StateExpired), closedAs: "expired", reason: "expired",
			end: func(t *testing.T, b *opstest.Bundle, id string) {
				// The task's deadline comes (the clock is moved, not waited for).
				if _, err := b.Store.Pool().Exec(context.Background(), `UPDATE tasks SET deadline = now() - interval '1 second' WHERE operation_id = $1`, id); err != nil {
					t.Fatal(err)
				}
				// The watcher holding the task keeps its row in memory: a writer that changes a
				// held task tells the holder, which reads the row again.
				if err := b.Store.Reschedule(context.Background(), id, time.Now()); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "cancelled", state: string(operations.StateCancelled), closedAs: "moved_on", reason: "cancelled",
			end: func(t *testing.T, b *opstest.Bundle, id string) {
				if _, err := b.Ops.Cancel(context.Background(), operations.Scope{Tenants: []string{"acme"}}, id, "alice", "wrong customer"); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := opstest.Setup(t, opstest.Options{Era: "extension"})
			id := b.Start(t, "refund", "close-"+c.name, `{"outcome": "input", "input_message": "Approve refund?"}`).Response.OperationID
			_, passes := b.Watcher(t, "r1", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "pending input", func() bool {
				d := b.Detail(t, id)
				return d.Task.State == operations.StateInputRequired && len(d.Inputs) == 1 && d.Inputs[0].State == "open"
			})
			key := b.Detail(t, id).Inputs[0].Key
			c.end(t, b, id)
			opstest.WaitFor(t, passes, 10*time.Second, c.state, func() bool { return string(b.Detail(t, id).Task.State) == c.state })
			d := b.Detail(t, id)
			if d.Inputs[0].State != c.closedAs {
				t.Fatalf("input %s after the task became %s, want %s", d.Inputs[0].State, c.state, c.closedAs)
			}
			said := false
			for _, e := range d.Timeline {
				said = said || e.State == "input_closed" && strings.Contains(e.Message, key) && strings.Contains(e.Message, c.reason)
			}
			if !said {
				t.Fatalf("no timeline entry says the input closed because the task is %s: %+v", c.reason, d.Timeline)
			}
			_, err := b.Ops.AnswerInput(context.Background(), operations.Scope{Tenants: []string{"acme"}}, id, key, "alice",
				mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"approve": true}})
			var gone *operations.InputExpiredError
			if !errors.As(err, &gone) || !strings.Contains(gone.Reason, c.reason) {
				t.Fatalf("a late answer got %v, want input expired naming %s", err, c.reason)
			}
		})
	}
}
