package web

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

func TestAnswerAPIChecksTheSchemaAndSaysWhenTooLate(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "extension"})
	e := newTestEnv(t, func(d *Deps) { d.Operations = b.Ops })
	id := b.Start(t, "refund", "ans-1", `{"outcome": "input", "input_message": "Approve refund?"}`).Response.OperationID
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "pending input", func() bool {
		d := b.Detail(t, id)
		return d.Task.State == operations.StateInputRequired && len(d.Inputs) == 1
	})
	key := b.Detail(t, id).Inputs[0].Key
	self := "/api/v1/operations/" + id + "/input"
	for _, c := range []struct{ content, problem string }{{`{}`, "required"}, {`{"approve": "yes"}`, "true or false"}} {
		res, body := e.apiDo(t, "acme-token", "POST", self, `{"key": "`+key+`", "action": "accept", "content": `+c.content+`}`, nil)
		if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `"invalid_answer"`) || !strings.Contains(body, "approve") || !strings.Contains(body, c.problem) {
			t.Fatalf("answer %s: %d %s, want 422 naming the field", c.content, res.StatusCode, body)
		}
	}
	b.Receiver.Knobs().RefuseTasksGet(0, time.Now().Add(time.Hour), http.StatusServiceUnavailable)
	opstest.WaitFor(t, passes, 10*time.Second, "unobservable", func() bool { return b.Detail(t, id).Task.State == operations.StateUnobservable })
	res, body := e.apiDo(t, "acme-token", "POST", self, `{"key": "`+key+`", "action": "accept", "content": {"approve": true}}`, nil)
	if res.StatusCode != http.StatusGone || !strings.Contains(body, `"input_expired"`) || !strings.Contains(body, "unobservable") {
		t.Fatalf("late answer: %d %s, want 410 input_expired with the reason", res.StatusCode, body)
	}
	// The page offers no form for it and says why in the question's ledger row.
	res, body = e.do(t, "operator", "GET", "/operations/"+id, nil)
	if res.StatusCode != http.StatusOK || strings.Contains(body, `data-testid="input-form"`) ||
		!strings.Contains(body, `data-testid="input-closed-why">the question was closed: the task is unobservable`) {
		t.Fatalf("page of the closed question: %d, want no form and the reason", res.StatusCode)
	}
}
