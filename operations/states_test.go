package operations_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

// A synchronous call the server refused is recorded with the server's status and text, not as
// a call left unanswered, in both eras: HTTP 413, another 4xx and a 5xx without a JSON-RPC body
// (read structurally from the transport's refusal), and a JSON-RPC error body.
func TestSyncCallRefusedIsRecordedWithStatusAndText(t *testing.T) {
	t.Parallel()
	const rpcBody = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"refused by the gateway: payload rules"}}`
	for _, era := range []string{"legacy", "extension"} {
		for _, tc := range []struct {
			name string
			code int
			body string
			want string
		}{
			{"413", http.StatusRequestEntityTooLarge, "refused by the gateway: payload rules", "HTTP 413"},
			{"400", http.StatusBadRequest, "refused by the gateway: payload rules", "HTTP 400"},
			{"500", http.StatusInternalServerError, "refused by the gateway: payload rules", "HTTP 500"},
			{"json-rpc", http.StatusBadRequest, rpcBody, "JSON-RPC error -32600"},
		} {
			t.Run(era+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				b := opstest.Setup(t, opstest.Options{Era: era})
				p := &proxy{refuse: func(m string) (int, string) {
					if m == "tools/call" {
						return tc.code, tc.body
					}
					return 0, ""
				}}
				throughProxy(t, b, era, p)
				res, err := b.Ops.Start(context.Background(), acme, operations.StartRequest{IdempotencyKey: "refused", Workflow: "lookup",
					Tenant: "acme", Actor: "app:billing", Arguments: []byte(`{}`)})
				if err != nil {
					t.Fatal(err)
				}
				d := b.Detail(t, res.Response.OperationID)
				var msgs []string
				for _, e := range d.Timeline {
					msgs = append(msgs, e.State+": "+e.Message)
				}
				all := strings.Join(msgs, "\n")
				if !strings.Contains(all, tc.want) || !strings.Contains(all, "payload rules") || strings.Contains(all, "unanswered") {
					t.Fatalf("timeline:\n%s", all)
				}
				if n := p.count("tools/call"); n != 1 {
					t.Fatalf("tools/call sent %d times", n)
				}
				if tc.name == "json-rpc" {
					return
				}
				want := operations.OutcomeNotRun // a 4xx refused the call before it ran
				if tc.code >= 500 {
					want = operations.OutcomePending // the verifier decides
					if d.Envelope == nil || !strings.Contains(d.Envelope.Preview, fmt.Sprint(tc.code)) || d.Envelope.Status != "failed" {
						t.Fatalf("envelope %+v", d.Envelope)
					}
				}
				if res.Status != http.StatusCreated || d.Reconciliation != nil || d.DomainOutcome != want {
					t.Fatalf("answer %d, outcome %s (want %s), item %+v", res.Status, d.DomainOutcome, want, d.Reconciliation)
				}
			})
		}
	}
}

// A replay of a key answers the first answer's status code with the operation as it is now.
func TestReplayAnswersTheFirstStatusWithTheOperationAsItIsNow(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	first := b.Start(t, "refund", "replay-1", `{"duration_ms": 100}`)
	if first.Status != http.StatusAccepted || first.Response.TaskState != operations.StateWorking {
		t.Fatalf("first answer %d %+v", first.Status, first.Response)
	}
	id := first.Response.OperationID
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "completed", func() bool { return b.Detail(t, id).Task.State == operations.StateCompleted })
	again := b.Start(t, "refund", "replay-1", `{"duration_ms": 100}`)
	if !again.Replayed || again.Status != first.Status || again.Response.OperationID != id || again.Response.TaskState != operations.StateCompleted {
		t.Fatalf("replay %d %+v, want %d with the task completed", again.Status, again.Response, first.Status)
	}
	// Keys are unique per tenant and workflow: the same key in another workflow is another operation.
	other := b.Start(t, "lookup", "replay-1", `{}`)
	if other.Replayed || other.Response.OperationID == id {
		t.Fatalf("the key of another workflow replayed %+v", other)
	}
}

// Work that never ran ends not_run: a rejected route (and, above, a call the server refused
// with a 4xx before it reached the tool).
func TestWorkThatNeverRanIsNotRun(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	res := b.Start(t, "closure", "reject-1", `{}`)
	if res.Status != http.StatusConflict || res.Response.DomainOutcome != operations.OutcomeNotRun {
		t.Fatalf("reject answer %d %+v", res.Status, res.Response)
	}
	if d := b.Detail(t, res.Response.OperationID); d.DomainOutcome != operations.OutcomeNotRun || d.Reconciliation != nil {
		t.Fatalf("reject: outcome %s item %+v", d.DomainOutcome, d.Reconciliation)
	}
	page, err := b.Ops.List(context.Background(), acme, operations.Filter{DomainOutcome: operations.OutcomeNotRun})
	if err != nil || len(page.Operations) != 1 {
		t.Fatalf("list not_run: %+v %v", page.Operations, err)
	}
}

// A synchronous call answered with a JSON-RPC error is recorded with its code and text.
func TestSyncCallJSONRPCErrorIsRecordedWithCodeAndText(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	res := b.Start(t, "lookup", "rpc-1", `{"outcome": "rpc_error", "error_code": -32001, "text": "ledger closed for the night"}`)
	d := b.Detail(t, res.Response.OperationID)
	if d.Envelope == nil || d.Envelope.ErrorCode == nil || *d.Envelope.ErrorCode != -32001 || !strings.Contains(d.Envelope.Preview, "ledger closed") {
		t.Fatalf("envelope %+v", d.Envelope)
	}
	found := false
	for _, e := range d.Timeline {
		found = found || (e.State == "failed" && strings.Contains(e.Message, "-32001") && strings.Contains(e.Message, "ledger closed"))
	}
	if !found || d.Reconciliation != nil {
		t.Fatalf("timeline %+v item %+v", d.Timeline, d.Reconciliation)
	}
}
