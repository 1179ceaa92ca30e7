package operations_test

import (
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/gates/faultproxy"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

// bigSync is a synchronous workflow with a long budget, so a fast answer is clearly fast.
const bigSync = `
  - {name: bigsync, server: rcv, tool: work_forbidden, effect: read_only, task_use: never, fallback: {kind: sync, max_duration: 20s},
     owners: [ops]}
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
