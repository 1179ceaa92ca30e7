package operations_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var acme = operations.Scope{Tenants: []string{"acme"}}

func states(d operations.Detail) []string {
	var out []string
	for _, e := range d.Timeline {
		out = append(out, e.Source+":"+e.State)
	}
	return out
}

func TestTaskRouteRunsToCompletedWithOutcomePending(t *testing.T) {
	t.Parallel()
	for _, era := range []string{"legacy", "extension"} {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			b := opstest.Setup(t, opstest.Options{Era: era})
			res := b.Start(t, "refund", "k-1", `{"duration_ms": 150}`)
			if res.Status != http.StatusAccepted || res.Response.Route != operations.RouteTask || res.Response.TaskID == "" {
				t.Fatalf("start = %d %+v", res.Status, res.Response)
			}
			if res.Response.TaskState != operations.StateWorking {
				t.Fatalf("task state at create = %s", res.Response.TaskState)
			}
			id := res.Response.OperationID
			_, passes := b.Watcher(t, "r1", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "envelope", func() bool { return b.Detail(t, id).Envelope != nil })
			d := b.Detail(t, id)
			if d.Task.State != operations.StateCompleted || d.Envelope.Status != "completed" || d.Envelope.ResultSHA256 == "" || d.Envelope.EvidenceHandle == "" {
				t.Fatalf("task %+v envelope %+v", d.Task, d.Envelope)
			}
			// Completed never implies applied: the verifier decides.
			if d.DomainOutcome != operations.OutcomePending {
				t.Fatalf("domain outcome = %s, want pending", d.DomainOutcome)
			}
			if d.Task.Era != era && !(era == "legacy" && d.Task.Era == string(mcpclient.EraLegacy)) && !(era == "extension" && d.Task.Era == string(mcpclient.EraExtension)) {
				t.Fatalf("era = %s", d.Task.Era)
			}
			c := b.Receiver.Counters()
			if c.ToolCalls["work_required"] != 1 || c.ToolCallsByKey[id] != 1 {
				t.Fatalf("tools/call = %v by key %v, want exactly one with the operation id as key", c.ToolCalls, c.ToolCallsByKey)
			}
			if rec, ok := b.Receiver.Records().Get(id); !ok || rec.Status != receiver.RecordApplied {
				t.Fatalf("system of record for %s = %+v %v", id, rec, ok)
			}
			if tl := states(d); !slices.Contains(tl, "create:working") || !(slices.Contains(tl, "poll:completed") || slices.Contains(tl, "notification:completed")) {
				t.Fatalf("timeline = %v", tl)
			}
		})
	}
}

func TestSameKeySameRequestReplaysDifferentRequestIsRefused(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy"})
	first := b.Start(t, "refund", "k-same", `{"duration_ms": 5000, "outcome": "hang"}`)
	again := b.Start(t, "refund", "k-same", `{"outcome": "hang", "duration_ms": 5000}`) // same body, keys reordered
	if !again.Replayed || again.Response != first.Response || again.Status != first.Status {
		t.Fatalf("replay = %+v, first = %+v", again, first)
	}
	_, err := b.Ops.Start(context.Background(), acme, operations.StartRequest{IdempotencyKey: "k-same", Workflow: "refund", Tenant: "acme",
		Actor: "app:billing", ObjectRef: "refund A-1042", ObjectVersion: "3", IntendedEffect: "refund 10 EUR", Arguments: []byte(`{"duration_ms": 1}`)})
	if !errors.Is(err, operations.ErrKeyReused) {
		t.Fatalf("different body: err = %v, want ErrKeyReused", err)
	}
	if n := b.Receiver.Counters().ToolCalls["work_required"]; n != 1 {
		t.Fatalf("tools/call = %d, want 1", n)
	}
}

func TestSyncRoute(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy"})
	t.Run("answered", func(t *testing.T) {
		res := b.Start(t, "lookup", "s-1", `{"text": "balance 10"}`)
		if res.Status != http.StatusCreated || res.Response.Route != operations.RouteSync || res.Response.ReasonCode != "task_use_never" {
			t.Fatalf("start = %d %+v", res.Status, res.Response)
		}
		d := b.Detail(t, res.Response.OperationID)
		if d.Envelope == nil || d.Envelope.Status != "completed" || d.Envelope.Preview != "balance 10" || d.Envelope.Result != nil {
			t.Fatalf("envelope = %+v (no result kept without keep_result)", d.Envelope)
		}
		if n := b.Receiver.Counters().ToolCallsByKey[res.Response.OperationID]; n != 1 {
			t.Fatalf("calls with the operation id as key = %d", n)
		}
	})
	t.Run("timeout goes to reconciliation", func(t *testing.T) {
		res := b.Start(t, "lookup", "s-2", `{"duration_ms": 3000}`)
		if res.Status != http.StatusAccepted || res.Response.DomainOutcome != operations.OutcomeUnknown ||
			res.Response.Attention != operations.AttentionReconcile || res.Response.AttentionReason != operations.ReasonSyncTimeout {
			t.Fatalf("start = %d %+v", res.Status, res.Response)
		}
		d := b.Detail(t, res.Response.OperationID)
		if d.Reconciliation == nil || d.Reconciliation.Reason != operations.ReasonSyncTimeout {
			t.Fatalf("reconciliation = %+v", d.Reconciliation)
		}
	})
}

func TestJobAPIRouteFollowsTheJob(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy"})
	res := b.Start(t, "payout", "j-1", `{"duration_ms": 100}`)
	if res.Status != http.StatusAccepted || res.Response.Route != operations.RouteJobAPI {
		t.Fatalf("start = %d %+v", res.Status, res.Response)
	}
	id := res.Response.OperationID
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "job succeeded", func() bool { return b.Detail(t, id).Job.Status == "succeeded" })
	d := b.Detail(t, id)
	if d.Job.JobID == "" || d.Job.ReceiptID == "" {
		t.Fatalf("job = %+v", d.Job)
	}
	if rec, ok := b.Receiver.Records().Get(id); !ok || rec.Status != receiver.RecordApplied {
		t.Fatalf("record = %+v %v", rec, ok)
	}
	if d.Task != nil {
		t.Fatalf("job route has a task row: %+v", d.Task)
	}
	// The submission and the job API's answer to it are the call's; later statuses are reads.
	var lines []string
	for _, e := range d.Timeline {
		lines = append(lines, e.State+"="+e.Source)
	}
	got := strings.Join(lines, " ")
	if !strings.HasPrefix(got, "submitting=create job_queued=create") || !strings.HasSuffix(got, "job_succeeded=poll") {
		t.Fatalf("job timeline %s: want the submission and its answer from the call, the end from a poll", got)
	}
}

func TestHandoffAndRejectRoutes(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy"})
	h := b.Start(t, "kyc", "h-1", `{}`)
	if h.Status != http.StatusAccepted || h.Response.Route != operations.RouteHandoff || h.Response.Attention != operations.AttentionHandoff {
		t.Fatalf("handoff = %d %+v", h.Status, h.Response)
	}
	r := b.Start(t, "closure", "r-1", `{}`)
	if r.Status != http.StatusConflict || r.Response.Route != operations.RouteReject || r.Response.ReasonCode != "tool_forbids_task" || r.Response.Reason == "" {
		t.Fatalf("reject = %d %+v", r.Status, r.Response)
	}
	again := b.Start(t, "closure", "r-1", `{}`)
	if again.Status != http.StatusConflict || !again.Replayed || again.Response.OperationID != r.Response.OperationID {
		t.Fatalf("reject replay = %+v", again)
	}
	if c := b.Receiver.Counters(); c.ToolCalls["work_forbidden"] != 0 {
		t.Fatalf("a rejected operation was called: %v", c.ToolCalls)
	}
}

func TestCreateFaultsNeverRepeatAndQueueAnItem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault receiver.Fault
	}{
		{"drop before CreateTaskResult", receiver.Fault{DropBeforeCreateResult: true}},
		{"drop after CreateTaskResult", receiver.Fault{DropAfterCreateResult: true}},
	} {
		for _, era := range []string{"legacy", "extension"} {
			t.Run(tc.name+"/"+era, func(t *testing.T) {
				t.Parallel()
				b := opstest.Setup(t, opstest.Options{Era: era})
				b.Receiver.Knobs().SetTool("work_required", tc.fault)
				res := b.Start(t, "refund", "f-1", `{"duration_ms": 50}`)
				id := res.Response.OperationID
				d := b.Detail(t, id)
				if tc.fault.DropBeforeCreateResult {
					if d.Task.State != operations.StateCreateUnacknowledged || d.DomainOutcome != operations.OutcomeUnknown {
						t.Fatalf("task %s outcome %s, want create_unacknowledged/unknown", d.Task.State, d.DomainOutcome)
					}
					if d.Reconciliation == nil || d.Reconciliation.Reason != operations.ReasonCreateUnacknowledged || d.Reconciliation.ClosedAt != nil {
						t.Fatalf("reconciliation = %+v", d.Reconciliation)
					}
				} else if d.Task.State != operations.StateCreateUnacknowledged && d.Task.TaskID == "" {
					// The answer was read before the drop: the task must be known and watched.
					t.Fatalf("task %+v: neither acknowledged nor queued for reconciliation", d.Task)
				}
				// A watcher pass and a repeated start must not resend the call.
				_, passes := b.Watcher(t, "r1", nil)
				<-passes
				<-passes
				b.Start(t, "refund", "f-1", `{"duration_ms": 50}`)
				if n := b.Receiver.Counters().ToolCalls["work_required"]; n != 1 {
					t.Fatalf("tools/call = %d, want 1", n)
				}
			})
		}
	}
}

func TestDuplicateDeliveryMakesOneEffect(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy"})
	b.Receiver.Knobs().SetTool("work_required", receiver.Fault{Duplicate: true})
	res := b.Start(t, "refund", "d-1", `{"duration_ms": 50}`)
	id := res.Response.OperationID
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "envelope", func() bool { return b.Detail(t, id).Envelope != nil })
	// Let the duplicate execution finish too.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for b.Receiver.Counters().Executions["work_required"] < 2 || b.Receiver.Counters().EffectsRefused < 1 {
		select {
		case <-ctx.Done():
			t.Fatalf("duplicate execution did not finish: %+v", b.Receiver.Counters())
		case <-passes:
		}
	}
	c := b.Receiver.Counters()
	if c.Effects != 1 {
		t.Fatalf("effects = %d, want 1 (executions %d)", c.Effects, c.Executions["work_required"])
	}
}

func TestInputRequiredIsAnsweredThroughTheService(t *testing.T) {
	t.Parallel()
	for _, era := range []string{"legacy", "extension"} {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			b := opstest.Setup(t, opstest.Options{Era: era})
			res := b.Start(t, "refund", "i-1", `{"outcome": "input", "input_message": "Approve refund?"}`)
			id := res.Response.OperationID
			_, passes := b.Watcher(t, "r1", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "pending input", func() bool {
				d := b.Detail(t, id)
				return d.Task.State == operations.StateInputRequired && len(d.Inputs) == 1
			})
			in := b.Detail(t, id).Inputs[0]
			if in.Key == "" || in.State != "open" || len(in.Fields) != 1 || in.Fields[0].Name != "approve" || in.Fields[0].Type != "boolean" {
				t.Fatalf("input = %+v", in)
			}
			// Another tenant cannot answer.
			if _, err := b.Ops.AnswerInput(context.Background(), operations.Scope{Tenants: []string{"globex"}}, id, in.Key, "eve",
				mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"approve": true}}); !errors.Is(err, operations.ErrNotFound) {
				t.Fatalf("cross-tenant answer: %v", err)
			}
			if _, err := b.Ops.AnswerInput(context.Background(), acme, id, in.Key, "alice",
				mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"approve": true}}); err != nil {
				t.Fatal(err)
			}
			opstest.WaitFor(t, passes, 10*time.Second, "completed", func() bool { return b.Detail(t, id).Envelope != nil })
			d := b.Detail(t, id)
			if d.Task.State != operations.StateCompleted || d.Envelope.ToolError {
				t.Fatalf("task %s envelope %+v", d.Task.State, d.Envelope)
			}
			if d.Inputs[0].State != "answered" || d.Inputs[0].AnsweredBy != "alice" || d.Inputs[0].Action != "accept" {
				t.Fatalf("input ledger = %+v", d.Inputs[0])
			}
		})
	}
}

func TestCancelKeepsTheOutcomeUnverified(t *testing.T) {
	t.Parallel()
	for _, era := range []string{"legacy", "extension"} {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			b := opstest.Setup(t, opstest.Options{Era: era})
			res := b.Start(t, "refund", "c-1", `{"outcome": "hang"}`)
			id := res.Response.OperationID
			if _, err := b.Ops.Cancel(context.Background(), operations.Scope{Tenants: []string{"globex"}}, id, "eve", "no"); !errors.Is(err, operations.ErrNotFound) {
				t.Fatalf("cross-tenant cancel: %v", err)
			}
			d, err := b.Ops.Cancel(context.Background(), acme, id, "alice", "customer withdrew")
			if err != nil {
				t.Fatal(err)
			}
			if d.Task.CancelRequested == nil || d.Task.CancelBy != "alice" || d.Task.CancelAcked == nil {
				t.Fatalf("cancel steps = %+v", d.Task)
			}
			// The stored timeline names who wrote each line: the person's request as operator,
			// the server's acknowledgement as the server's answer, never as a person's.
			// The status the cancel reply carried is the reply's too, never a poll (no watcher
			// runs yet, so no line here is a poll).
			sources, actors := map[string]string{}, map[string]string{}
			for _, e := range b.Detail(t, id).Timeline {
				sources[e.State], actors[e.State] = e.Source, e.Actor
				if e.Source == operations.SourcePoll {
					t.Errorf("a line stored as a poll before any poll: %+v", e)
				}
				if e.Actor != "" && e.Source != operations.SourceOperator {
					t.Errorf("a line names a person but is not a person's: %+v", e)
				}
			}
			if sources["cancel_requested"] != operations.SourceOperator || actors["cancel_requested"] != "alice" ||
				sources["cancel_acknowledged"] != operations.SourceCancelReply {
				t.Fatalf("timeline sources = %v actors = %v: want cancel_requested by operator alice, cancel_acknowledged as the server's reply (%s)",
					sources, actors, operations.SourceCancelReply)
			}
			_, passes := b.Watcher(t, "r1", nil)
			opstest.WaitFor(t, passes, 10*time.Second, "cancelled", func() bool { return b.Detail(t, id).Task.State == operations.StateCancelled })
			if d := b.Detail(t, id); d.DomainOutcome != operations.OutcomePending {
				t.Fatalf("outcome after cancel = %s, want pending (to be verified)", d.DomainOutcome)
			}
			if _, err := b.Ops.Cancel(context.Background(), acme, id, "alice", "again"); !errors.Is(err, operations.ErrNotCancellable) {
				t.Fatalf("cancel of a cancelled task: %v", err)
			}
		})
	}
}

func TestCrossTenantReadsAndListsAreRefused(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy"})
	res := b.Start(t, "kyc", "x-1", `{}`)
	globex := operations.Scope{Tenants: []string{"globex"}}
	if _, err := b.Ops.Get(context.Background(), globex, res.Response.OperationID); !errors.Is(err, operations.ErrNotFound) {
		t.Fatalf("cross-tenant get: %v", err)
	}
	p, err := b.Ops.List(context.Background(), globex, operations.Filter{})
	if err != nil || len(p.Operations) != 0 {
		t.Fatalf("cross-tenant list = %d, %v", len(p.Operations), err)
	}
	p, err = b.Ops.List(context.Background(), globex, operations.Filter{Tenant: "acme"})
	if err != nil || len(p.Operations) != 0 {
		t.Fatalf("cross-tenant filtered list = %d, %v", len(p.Operations), err)
	}
	_, err = b.Ops.Start(context.Background(), globex, operations.StartRequest{IdempotencyKey: "x-2", Workflow: "kyc", Tenant: "acme", Actor: "eve"})
	if !errors.Is(err, operations.ErrForbiddenTenant) {
		t.Fatalf("start for another tenant: %v", err)
	}
}

func TestListFiltersAndKeysetPagination(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy"})
	for i := range 5 {
		b.Start(t, "kyc", "p-"+string(rune('a'+i)), `{}`)
	}
	b.Start(t, "closure", "p-z", `{}`)
	var seen []string
	after := ""
	for {
		p, err := b.Ops.List(context.Background(), acme, operations.Filter{Route: operations.RouteHandoff, Limit: 2, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Operations {
			if o.Route != operations.RouteHandoff {
				t.Fatalf("filter leaked route %s", o.Route)
			}
			seen = append(seen, o.ID)
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	slices.Sort(seen)
	if len(slices.Compact(seen)) != 5 {
		t.Fatalf("pages returned %d distinct operations, want 5", len(seen))
	}
	if _, err := b.Ops.List(context.Background(), acme, operations.Filter{After: "garbage"}); !errors.Is(err, operations.ErrInvalidRequest) {
		t.Fatalf("bad cursor: %v", err)
	}
}
