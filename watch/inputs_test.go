package watch_test

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
	"github.com/taskgate/taskgate/watch"
)

func TestOpenInputsCloseWithTheReasonWhenTheTaskBecomesUnobservable(t *testing.T) {
	t.Parallel()
	for _, era := range []string{"legacy", "extension"} {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			b := opstest.Setup(t, opstest.Options{Era: era})
			id := b.Start(t, "refund", "ic-1", `{"outcome": "input", "input_message": "Approve refund?"}`).Response.OperationID
			_, passes := b.Watcher(t, "r1", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "pending input", func() bool {
				d := b.Detail(t, id)
				return d.Task.State == operations.StateInputRequired && len(d.Inputs) == 1
			})
			key := b.Detail(t, id).Inputs[0].Key
			b.Receiver.Knobs().RefuseTasksGet(0, time.Now().Add(time.Hour), http.StatusServiceUnavailable)
			opstest.WaitFor(t, passes, 10*time.Second, "unobservable", func() bool { return b.Detail(t, id).Task.State == operations.StateUnobservable })
			d := b.Detail(t, id)
			if d.Inputs[0].State != "expired" {
				t.Fatalf("input %s after the task became unobservable, want expired", d.Inputs[0].State)
			}
			var said bool
			for _, e := range d.Timeline {
				said = said || (e.State == "input_closed" && strings.Contains(e.Message, "unobservable"))
			}
			if !said {
				t.Fatalf("no timeline entry says why the input closed: %+v", d.Timeline)
			}
			_, err := b.Ops.AnswerInput(context.Background(), operations.Scope{Tenants: []string{"acme"}}, id, key, "alice",
				mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"approve": true}})
			var gone *operations.InputExpiredError
			if !errors.As(err, &gone) || !errors.Is(err, operations.ErrInputExpired) || !strings.Contains(gone.Reason, "unobservable") {
				t.Fatalf("a late answer got %v, want input expired naming the reason", err)
			}
		})
	}
}

// A question can reach the console before the status read that shows input_required: on a
// 2025-11-25 server it comes on the tasks/result stream the moment the server asks, and the
// stored state says working until the next read. Leaving input_required closes every open
// question, so an open one was asked after that: it is answerable, and the server judges the
// answer. (The console used to refuse it, 410 "the task is working, no longer waiting for
// input", whenever an operator answered within that window.)
func TestAnOpenQuestionIsAnswerableBeforeTheStoredStateCatchesUp(t *testing.T) {
	t.Parallel()
	for _, era := range []string{"legacy", "extension"} {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			b := opstest.Setup(t, opstest.Options{Era: era})
			id := b.Start(t, "refund", "lag-1", `{"outcome": "input", "input_message": "Approve refund?"}`).Response.OperationID
			// Once the question is stored the watcher reads the task again only an hour later,
			// so the state written below stays as the window leaves it.
			_, passes := b.Watcher(t, "r1", func(c *watch.Config) { c.PollFloor, c.Lease = time.Hour, 2*time.Hour })
			opstest.WaitFor(t, passes, 10*time.Second, "pending input", func() bool {
				d := b.Detail(t, id)
				return len(d.Inputs) == 1 && d.Inputs[0].State == "open"
			})
			key := b.Detail(t, id).Inputs[0].Key
			if _, err := b.Store.Pool().Exec(context.Background(), `UPDATE tasks SET state = 'working' WHERE operation_id = $1`, id); err != nil {
				t.Fatal(err)
			}
			if why := operations.InputClosedReason(b.Detail(t, id).Inputs[0], operations.StateWorking, time.Now()); why != "" {
				t.Fatalf("the open question is shown closed: %s", why)
			}
			d, err := b.Ops.AnswerInput(context.Background(), operations.Scope{Tenants: []string{"acme"}}, id, key, "alice",
				mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"approve": true}})
			if err != nil {
				t.Fatalf("answer while the stored state is working: %v", err)
			}
			if d.Inputs[0].State != "answered" {
				t.Fatalf("input %s after the answer, want answered", d.Inputs[0].State)
			}
			// A task that ended still refuses a late answer, saying why.
			if _, err := b.Store.Pool().Exec(context.Background(), `UPDATE pending_inputs SET state = 'open', answered_at = NULL WHERE operation_id = $1`, id); err != nil {
				t.Fatal(err)
			}
			for _, st := range []operations.TaskState{operations.StateCompleted, operations.StateUnobservable} {
				if why := operations.InputClosedReason(b.Detail(t, id).Inputs[0], st, time.Now()); !strings.Contains(why, "no longer waiting") {
					t.Fatalf("an open question of a %s task: %q, want closed", st, why)
				}
			}
		})
	}
}
