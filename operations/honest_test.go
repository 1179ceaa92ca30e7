package operations_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/gates/faultproxy"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
)

// bigSync is a synchronous workflow with a long budget, so a fast answer is clearly fast.
const bigSync = `
  - {name: bigsync, server: rcv, tool: work_forbidden, effect: read_only, task_use: never, fallback: {kind: sync, max_duration: 20s},
     owners: [ops]}
  - {name: refundkept, server: rcv, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     owners: [ops], keep_result: true}
`

// behindProxy is the reference receiver behind a fault proxy that the policy names.
func behindProxy(t *testing.T) (*opstest.Bundle, *faultproxy.Proxy) {
	t.Helper()
	var p *faultproxy.Proxy
	b := opstest.Setup(t, opstest.Options{Era: "legacy", Extra: bigSync, Front: func(t testing.TB, target string) string {
		var err error
		if p, err = faultproxy.New(target); err != nil {
			t.Fatal(err)
		}
		u, err := p.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return u
	}})
	return b, p
}

// waitFor polls the operation until its timeline holds want, and returns the timeline's text.
func waitFor(t *testing.T, b *opstest.Bundle, id, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d := b.Detail(t, id)
		var all strings.Builder
		for _, e := range d.Timeline {
			all.WriteString(e.State + ": " + e.Message + "\n")
		}
		if strings.Contains(all.String(), want) || time.Now().After(deadline) {
			return all.String()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A CreateTaskResult with a negative ttl was read: the operation says it was unusable, and
// why, rather than that none was read.
func TestNegativeTTLIsReportedAsAnUnusableAnswer(t *testing.T) {
	t.Parallel()
	b, p := behindProxy(t)
	p.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "tools/call", Rewrite: func(msg map[string]any) bool {
		task := faultproxy.ResultObject(msg)
		if task == nil || task["taskId"] == nil {
			return false
		}
		task["ttl"] = -5000
		return true
	}})
	res := b.Start(t, "refund", "neg-ttl", `{"amount":10}`)
	all := waitFor(t, b, res.Response.OperationID, "CreateTaskResult is unusable")
	if !strings.Contains(all, "CreateTaskResult is unusable") || !strings.Contains(all, "negative") ||
		strings.Contains(all, "no CreateTaskResult was read") {
		t.Errorf("timeline:\n%s", all)
	}
	if d := b.Detail(t, res.Response.OperationID); d.DomainOutcome != operations.OutcomeUnknown {
		t.Errorf("outcome %s, want unknown (the task may exist)", d.DomainOutcome)
	}
}

// A synchronous answer over the size limit that came back at once is reported as such, with
// the time it took, not as unanswered within the budget.
func TestFastOversizedSyncAnswerIsNotCalledUnanswered(t *testing.T) {
	t.Parallel()
	b, p := behindProxy(t)
	p.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "tools/call", Rewrite: func(msg map[string]any) bool {
		r, _ := msg["result"].(map[string]any)
		if r == nil {
			return false
		}
		r["structuredContent"] = map[string]any{"blob": strings.Repeat("x", 5<<20)}
		return true
	}})
	res := b.Start(t, "bigsync", "big-sync", `{"q":1}`)
	all := waitFor(t, b, res.Response.OperationID, "over the size limit")
	if !strings.Contains(all, "answered after") || !strings.Contains(all, "over the size limit") || strings.Contains(all, "unanswered within") {
		t.Errorf("timeline:\n%s", all)
	}
}

// A value the person answered and the server echoed back in its result — a card number sent
// as a JSON number, printed in exponent form or grouped — is cut out of the preview and the
// kept result.
func TestEchoedAnswerIsRedactedFromTheResult(t *testing.T) {
	t.Parallel()
	b, p := behindProxy(t)
	res := b.Start(t, "refundkept", "echo-1", `{"outcome": "input", "input_message": "Card?",
		"input_schema": {"type": "object", "properties": {"approve": {"type": "boolean"}, "card": {"type": "number"}, "code": {"type": "string"}}}}`)
	id := res.Response.OperationID
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "pending input", func() bool { return len(b.Detail(t, id).Inputs) == 1 })
	p.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "tasks/result", Times: -1, Rewrite: func(msg map[string]any) bool {
		r, _ := msg["result"].(map[string]any)
		if r == nil {
			return false
		}
		r["content"] = []any{map[string]any{"type": "text", "text": "charged card 4.111111111111111e+15 (4111 1111 1111 1111), code hunter22"}}
		r["structuredContent"] = map[string]any{"card": 4111111111111111, "code": "hunter22", "amount": 10}
		return true
	}})
	in := b.Detail(t, id).Inputs[0]
	if _, err := b.Ops.AnswerInput(context.Background(), operations.Scope{Tenants: []string{"acme"}}, id, in.Key, "alice",
		mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"approve": true, "card": float64(4111111111111111), "code": "hunter22"}}); err != nil {
		t.Fatal(err)
	}
	opstest.WaitFor(t, passes, 10*time.Second, "envelope", func() bool { return b.Detail(t, id).Envelope != nil })
	e := b.Detail(t, id).Envelope
	kept := e.Preview + " " + string(e.Result)
	t.Logf("kept: %s", kept)
	if strings.Contains(kept, "4111") || strings.Contains(kept, "4.111") || strings.Contains(kept, "hunter22") {
		t.Errorf("an echoed answer was kept: %s", kept)
	}
	if !strings.Contains(e.Preview, "[redacted]") || !strings.Contains(strings.ReplaceAll(string(e.Result), " ", ""), `"amount":10`) {
		t.Errorf("preview %q result %s", e.Preview, e.Result)
	}
}
