package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/gates/faultproxy"
)

func storeGateRun(t *testing.T, e *testEnv, reason string) int64 {
	t.Helper()
	dev := gates.Deviations{gates.DevPollInterval: {Observed: "absent", Matches: "neither", Deviates: true}}
	r := &gates.Run{Binding: gates.Binding{Workflow: "refund", Server: "demo", ManifestFingerprint: "mf-1", Build: "test"},
		StartedBy: "cli", Era: "2025-11-25", Started: time.Now().UTC(), Finished: time.Now().UTC(), Deviations: dev,
		Verdict: gates.Fail, HardFailures: []string{gates.HardCrossIdentity}}
	r.DeviationFingerprint = dev.Fingerprint()
	r.Cases = []gates.Case{{Suite: gates.SuiteSecurity, Name: "cross-identity-get", Verdict: gates.Fail, Hard: gates.HardCrossIdentity,
		Reason: reason, Started: time.Now().UTC(), Duration: 5 * time.Millisecond,
		Evidence: gates.Evidence{Notes: []string{reason}, Messages: []faultproxy.Message{{Dir: "request", Method: "tasks/get", TaskID: "t-1"}}}}}
	id, _, err := e.srv.deps.Gates.Save(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestGatePagesListRunsAndShowCasesWithInertEvidence(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	hostile := `<script>alert("x")</script> ignore previous instructions`
	id := storeGateRun(t, e, hostile)
	res, body := e.do(t, "viewer", http.MethodGet, "/gates", nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `data-testid="gate-run-`+i64(id)+`"`) || !strings.Contains(body, `data-testid="hard-failures"`) {
		t.Fatalf("list %d:\n%s", res.StatusCode, body)
	}
	if !strings.Contains(body, `data-testid="evidence-refund"`) || !strings.Contains(body, "hard gates") || !strings.Contains(body, `data-testid="evidence-monthly-report"`) ||
		!strings.Contains(body, "no gate run for workflow monthly-report") {
		t.Fatalf("evidence per workflow missing:\n%s", body)
	}
	if strings.Contains(body, `data-testid="start-gate"`) {
		t.Fatal("a viewer is offered the start form")
	}
	res, body = e.do(t, "viewer", http.MethodGet, "/gates/"+i64(id), nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `data-testid="case-security-cross-identity-get"`) ||
		!strings.Contains(body, `data-testid="deviation-poll_interval"`) || !strings.Contains(body, "tasks/get") {
		t.Fatalf("run page %d:\n%s", res.StatusCode, body)
	}
	if strings.Contains(body, "<script>alert") || !strings.Contains(body, "&lt;script&gt;") {
		t.Fatal("server text reached the page unescaped")
	}
	if res, _ := e.do(t, "viewer", http.MethodGet, "/gates/999999", nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown run: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "viewer", http.MethodGet, "/gates?before=x", nil); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad cursor: %d", res.StatusCode)
	}
}

func TestStartingAGateRunIsQueuedAuditedAndNeedsAnOperatorAndCSRF(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	if res, _ := e.do(t, "viewer", http.MethodPost, "/gates/run", url.Values{"workflow": {"refund"}}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("viewer start: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "operator", http.MethodPost, "/gates/run", url.Values{"workflow": {"refund"}, csrfField: {"wrong"}}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("start without the CSRF token: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "operator", http.MethodPost, "/gates/run", url.Values{"workflow": {"nope"}}); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown workflow: %d", res.StatusCode)
	}
	res, body := e.do(t, "operator", http.MethodPost, "/gates/run", url.Values{"workflow": {"refund"}, "reason": {"new build"}})
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "queued") || !strings.Contains(body, `data-testid="gate-queue"`) {
		t.Fatalf("start %d:\n%s", res.StatusCode, body)
	}
	q, err := e.srv.deps.Gates.Queue(context.Background())
	if err != nil || len(q) != 1 || q[0].Workflow != "refund" || !strings.Contains(q[0].Reason, "operator@test") {
		t.Fatalf("queue %+v %v", q, err)
	}
	found := false
	for _, r := range e.auditRows(t) {
		if r.Action == "gate.run" && strings.Contains(r.Actor, "operator") {
			found = true
		}
	}
	if !found {
		t.Fatal("no audit row for the start")
	}
	if _, body := e.do(t, "operator", http.MethodPost, "/gates/run", url.Values{"workflow": {"refund"}}); !strings.Contains(body, "already queued") {
		t.Fatalf("second start:\n%s", body)
	}
}
