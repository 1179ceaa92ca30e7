package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

// opsEnv is a console whose operations run against the reference receiver on the console's own
// database, so actions and their audit rows share transactions.
type opsEnv struct {
	*testEnv
	b *opstest.Bundle
}

func newOpsEnv(t testing.TB) *opsEnv {
	t.Helper()
	e := newTestEnv(t)
	b := opstest.Setup(t, opstest.Options{Pool: e.pool})
	// No request has reached the server yet: give it the operations and their policy.
	e.srv.deps.Operations, e.srv.deps.Policy = b.Ops, b.Policy
	return &opsEnv{testEnv: e, b: b}
}

// start starts an operation of workflow for tenant.
func (e *opsEnv) start(t testing.TB, tenant, workflow, key, args string) string {
	t.Helper()
	res, err := e.b.Ops.Start(context.Background(), operations.Scope{All: true}, operations.StartRequest{IdempotencyKey: key,
		Workflow: workflow, Tenant: tenant, Actor: "app:billing", ObjectRef: "refund A-" + key, IntendedEffect: "refund 10 EUR",
		Arguments: []byte(args)})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	return res.Response.OperationID
}

func has(body, testid string) bool { return strings.Contains(body, `data-testid="`+testid+`"`) }

func TestOperationPagesKeepToTheTenantScope(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	acmeOp := e.start(t, "acme", "refund", "1042", `{"outcome": "hang"}`)
	globexOp := e.start(t, "globex", "refund", "2001", `{"outcome": "hang"}`)

	res, body := e.do(t, "operator", "GET", "/operations", nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, acmeOp) || !strings.Contains(body, globexOp) || !has(body, "group-running") {
		t.Fatalf("operator list: %d\n%.400s", res.StatusCode, body)
	}
	if !strings.Contains(body, "refund A-1042") || !strings.Contains(body, "work_required") || !has(body, "expires-in") {
		t.Fatalf("a row does not say what the work is:\n%s", body)
	}
	_, body = e.do(t, "acme-viewer", "GET", "/operations", nil)
	if !strings.Contains(body, acmeOp) || strings.Contains(body, globexOp) {
		t.Fatalf("acme-viewer list shows another tenant or misses its own")
	}
	if res, _ := e.do(t, "globex-viewer", "GET", "/operations?tenant=acme", nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("globex-viewer filtering on acme: %d", res.StatusCode)
	}
	for _, format := range []string{"csv", "json"} {
		res, body := e.do(t, "acme-viewer", "GET", "/operations/export?format="+format+"&route=task", nil)
		if res.StatusCode != http.StatusOK || !strings.Contains(body, acmeOp) || strings.Contains(body, globexOp) ||
			!strings.Contains(res.Header.Get("Content-Disposition"), "attachment") {
			t.Fatalf("export %s: %d %s", format, res.StatusCode, body)
		}
	}
	_, body = e.do(t, "acme-viewer", "GET", "/operations/export?format=json&route=sync", nil)
	var exp struct{ Operations []operations.Operation }
	if err := json.Unmarshal([]byte(body), &exp); err != nil || len(exp.Operations) != 0 {
		t.Fatalf("export ignores the filter: %s", body)
	}

	res, body = e.do(t, "acme-viewer", "GET", "/operations/"+acmeOp, nil)
	if res.StatusCode != http.StatusOK || !has(body, "task-state") || !has(body, "domain-outcome") || !has(body, "timeline") ||
		!has(body, "task-id") || !has(body, "ttl") || !has(body, "polling") || has(body, "cancel-confirm") {
		t.Fatalf("detail as acme-viewer: %d\n%s", res.StatusCode, body)
	}
	if !strings.Contains(body, "TTL requested 30 min") {
		t.Fatalf("TTL not in human units:\n%s", body)
	}
	if res, _ := e.do(t, "globex-viewer", "GET", "/operations/"+acmeOp, nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("globex-viewer reads acme's operation: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "operator", "GET", "/operations/not-a-uuid", nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("malformed id: %d", res.StatusCode)
	}
	// Actions: the role and the tenant are checked on the server.
	if res, _ := e.do(t, "acme-viewer", "POST", "/operations/"+acmeOp+"/cancel", url.Values{"reason": {"x"}}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("viewer cancel: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "acme-admin", "POST", "/operations/"+globexOp+"/cancel", url.Values{"reason": {"x"}}); res.StatusCode != http.StatusNotFound {
		t.Fatalf("acme-admin cancels globex's task: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "acme-admin", "POST", "/operations/"+globexOp+"/input", url.Values{"key": {"k"}, "action": {"accept"}}); res.StatusCode != http.StatusNotFound {
		t.Fatalf("acme-admin answers globex's input: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "acme-viewer", "POST", "/operations/"+acmeOp+"/input", url.Values{"key": {"k"}, "action": {"accept"}}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("viewer answers input: %d", res.StatusCode)
	}
	if d := e.b.Detail(t, globexOp); d.Task.CancelRequested != nil {
		t.Fatal("a refused cancel was recorded")
	}
	// The overview counts within scope.
	res, body = e.do(t, "acme-viewer", "GET", "/", nil)
	if res.StatusCode != http.StatusOK || !has(body, "matrix") || !has(body, "chart") || !strings.Contains(body, "<title id=\"chart-title\">") ||
		!has(body, "chart-values") || !has(body, "overview-workflows") {
		t.Fatalf("overview: %d\n%.600s", res.StatusCode, body)
	}
	if !strings.Contains(body, `data-testid="tile-inflight"`) || !strings.Contains(sliceAfter(body, `data-testid="tile-inflight"`), `<div class="value">1</div>`) {
		t.Fatalf("acme-viewer's in-flight tile is not 1:\n%s", sliceAfter(body, `data-testid="tile-inflight"`))
	}
}

func sliceAfter(s, sep string) string {
	_, after, _ := strings.Cut(s, sep)
	if len(after) > 200 {
		after = after[:200]
	}
	return after
}

func TestCancelFromTheConsoleIsAuditedWithTheServersReply(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	id := e.start(t, "acme", "refund", "c-1", `{"outcome": "hang"}`)
	_, body := e.do(t, "operator", "GET", "/operations/"+id, nil)
	if !has(body, "cancel-confirm") || !strings.Contains(body, "may already have been applied") || !strings.Contains(body, "refund 10 EUR") {
		t.Fatalf("no honest confirmation:\n%s", body)
	}
	if res, body := e.do(t, "operator", "POST", "/operations/"+id+"/cancel", url.Values{}); res.StatusCode != http.StatusUnprocessableEntity || !has(body, "flash") {
		t.Fatalf("cancel without a reason: %d", res.StatusCode)
	}
	req := e.request(t, "operator", "POST", "/operations/"+id+"/cancel", url.Values{"reason": {"customer withdrew"}})
	req.Header.Set("X-Request-ID", "cancel-req-1")
	res, _ := send(t, req)
	if res.StatusCode != http.StatusSeeOther || !strings.HasSuffix(res.Header.Get("Location"), "?done=cancel-sent") {
		t.Fatalf("cancel: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	a := e.findAudit(t, "operation.cancel", "cancel-req-1")
	if a.Actor != "operator@test" || a.Tenant != "acme" || a.Target != "operation:"+id || a.Reason != "customer withdrew" {
		t.Fatalf("audit row %+v", a)
	}
	reply := e.findAudit(t, "operation.cancel_reply", "cancel-req-1")
	if !strings.Contains(string(reply.After), "acknowledged") {
		t.Fatalf("reply audit row %s", reply.After)
	}
	_, body = e.do(t, "operator", "GET", "/operations/"+id+"?done=cancel-sent", nil)
	if !has(body, "cancel-steps") || !strings.Contains(body, "customer withdrew") || has(body, "cancel-confirm") && e.b.Detail(t, id).Task.State.Final() {
		t.Fatalf("cancel steps:\n%s", body)
	}
	// The API's cancel is audited as the token.
	id2 := e.start(t, "acme", "refund", "c-2", `{"outcome": "hang"}`)
	res, _ = e.apiDo(t, "acme-token", "POST", "/api/v1/operations/"+id2+"/cancel", `{"reason": "api says stop"}`, map[string]string{"X-Request-ID": "api-cancel-1"})
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("api cancel: %d", res.StatusCode)
	}
	if a := e.findAudit(t, "operation.cancel", "api-cancel-1"); a.ActorKind != "token" || a.Reason != "api says stop" || a.Tenant != "acme" {
		t.Fatalf("api audit row %+v", a)
	}
}

func TestInputAnsweredFromTheConsoleIsRedactedAndAudited(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	id := e.start(t, "acme", "refund", "i-1", `{"outcome": "input", "input_message": "Approve refund?"}`)
	_, passes := e.b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "pending input", func() bool {
		d := e.b.Detail(t, id)
		return d.Task.State == operations.StateInputRequired && len(d.Inputs) == 1
	})
	key := e.b.Detail(t, id).Inputs[0].Key
	_, body := e.do(t, "support", "GET", "/operations/"+id, nil)
	if !has(body, "input-form") || !has(body, "input-ledger") || !strings.Contains(body, "Approve refund?") {
		t.Fatalf("no input form for support:\n%s", body)
	}
	if _, body := e.do(t, "viewer", "GET", "/operations/"+id, nil); has(body, "input-form") {
		t.Fatal("a viewer gets the input form")
	}
	req := e.request(t, "support", "POST", "/operations/"+id+"/input", url.Values{"key": {key}, "action": {"accept"}, "field.approve": {"true"}})
	req.Header.Set("X-Request-ID", "input-req-1")
	if res, _ := send(t, req); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("answer: %d", res.StatusCode)
	}
	a := e.findAudit(t, "operation.input", "input-req-1")
	if a.Actor != "support@test" || a.Tenant != "acme" || !strings.Contains(string(a.After), `"values": "redacted"`) && !strings.Contains(string(a.After), `"values":"redacted"`) {
		t.Fatalf("input audit row %+v %s", a, a.After)
	}
	opstest.WaitFor(t, passes, 10*time.Second, "completed", func() bool { return e.b.Detail(t, id).Envelope != nil })
	_, body = e.do(t, "support", "GET", "/operations/"+id, nil)
	if has(body, "input-form") || !strings.Contains(body, "values: redacted") || !strings.Contains(body, "support@test") || !has(body, "envelope") {
		t.Fatalf("after the answer:\n%s", body)
	}
	// A second answer to the same question is refused: it is no longer open.
	if res, _ := e.do(t, "support", "POST", "/operations/"+id+"/input", url.Values{"key": {key}, "action": {"accept"}, "field.approve": {"true"}}); res.StatusCode != http.StatusConflict {
		t.Fatalf("second answer: %d", res.StatusCode)
	}
}
