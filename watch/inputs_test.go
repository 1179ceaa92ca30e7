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
