package web

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

// apiDo sends a JSON request with who's API token.
func (e *testEnv) apiDo(t testing.TB, who, method, path, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	} else {
		rd = strings.NewReader("")
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tok, ok := e.tokens[who]; ok {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return send(t, req)
}

func TestOpenAPIDocumentMatchesTheRoutes(t *testing.T) {
	t.Parallel()
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Servers []struct{ URL string }                `json:"servers"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc.OpenAPI != "3.1.0" || len(doc.Servers) != 1 || doc.Servers[0].URL != "/api/v1" {
		t.Fatalf("openapi %q servers %v", doc.OpenAPI, doc.Servers)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented[strings.ToUpper(method)+" /api/v1"+path] = true
		}
	}
	served := map[string]bool{}
	for _, rt := range walkRoutes(t, newTestEnv(t).srv) {
		if _, p, _ := strings.Cut(rt, " "); strings.HasPrefix(p, "/api/v1/") {
			served[rt] = true
		}
	}
	var missing, extra []string
	for rt := range served {
		if !documented[rt] {
			missing = append(missing, rt)
		}
	}
	for rt := range documented {
		if !served[rt] {
			extra = append(extra, rt)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("routes not in openapi.json: %v; documented but not served: %v", missing, extra)
	}
	if len(served) < 6 {
		t.Fatalf("only %d /api/v1 routes walked", len(served))
	}
}

func TestOperationsAPI(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy"})
	e := newTestEnv(t, func(d *Deps) { d.Operations = b.Ops })
	start := `{"workflow": "refund", "tenant": "acme", "actor": "app:billing", "object_ref": "refund A-1042", "object_version": "3",
		"intended_effect": "refund 10 EUR", "arguments": {"outcome": "hang"}}`
	key := map[string]string{"Idempotency-Key": "api-1"}

	if res, _ := e.apiDo(t, "acme-token", "POST", "/api/v1/operations", start, nil); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("no Idempotency-Key: %d", res.StatusCode)
	}
	res, body := e.apiDo(t, "acme-token", "POST", "/api/v1/operations", start, key)
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("start: %d %s", res.StatusCode, body)
	}
	var sr operations.StartResponse
	if err := json.Unmarshal([]byte(body), &sr); err != nil || sr.Route != operations.RouteTask || sr.TaskState != operations.StateWorking {
		t.Fatalf("start body %s (%v)", body, err)
	}
	if res.Header.Get("Location") != "/api/v1/operations/"+sr.OperationID {
		t.Fatalf("Location = %q", res.Header.Get("Location"))
	}
	res2, body2 := e.apiDo(t, "acme-token", "POST", "/api/v1/operations", start, key)
	if res2.StatusCode != http.StatusAccepted || body2 != body || res2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %q %s", res2.StatusCode, res2.Header.Get("Idempotent-Replayed"), body2)
	}
	res, body = e.apiDo(t, "acme-token", "POST", "/api/v1/operations", strings.Replace(start, "hang", "complete", 1), key)
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "idempotency_key_reused") || !strings.Contains(body, sr.OperationID) {
		t.Fatalf("reused key: %d %s", res.StatusCode, body)
	}
	if res, body := e.apiDo(t, "acme-token", "POST", "/api/v1/operations", strings.Replace(start, `"acme"`, `"globex"`, 1),
		map[string]string{"Idempotency-Key": "api-2"}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("start for another tenant: %d %s", res.StatusCode, body)
	}
	if res, body := e.apiDo(t, "acme-token", "POST", "/api/v1/operations", strings.Replace(start, "refund", "closure", 1),
		map[string]string{"Idempotency-Key": "api-3"}); res.StatusCode != http.StatusConflict || !strings.Contains(body, `"route":"reject"`) {
		t.Fatalf("reject: %d %s", res.StatusCode, body)
	}

	self := "/api/v1/operations/" + sr.OperationID
	if res, body := e.apiDo(t, "acme-token", "GET", self, "", nil); res.StatusCode != http.StatusOK || !strings.Contains(body, `"task_id":"`+sr.TaskID) {
		t.Fatalf("get: %d %s", res.StatusCode, body)
	}
	if res, _ := e.apiDo(t, "acme-token", "GET", "/api/v1/operations/not-a-uuid", "", nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("get malformed id: %d", res.StatusCode)
	}
	// Another tenant's token sees nothing and can do nothing.
	for _, c := range []struct{ method, path, body string }{
		{"GET", self, ""},
		{"POST", self + "/cancel", `{"reason": "x"}`},
		{"POST", self + "/input", `{"key": "k", "action": "accept", "content": {"approve": true}}`},
	} {
		if res, body := e.apiDo(t, "globex-token", c.method, c.path, c.body, nil); res.StatusCode != http.StatusNotFound {
			t.Fatalf("globex %s %s: %d %s", c.method, c.path, res.StatusCode, body)
		}
	}
	if _, body := e.apiDo(t, "globex-token", "GET", "/api/v1/operations?tenant=acme", "", nil); strings.Contains(body, sr.OperationID) {
		t.Fatalf("globex list shows acme's operation: %s", body)
	}
	_, body = e.apiDo(t, "acme-token", "GET", "/api/v1/operations?route=task&limit=10", "", nil)
	var page operations.Page
	if err := json.Unmarshal([]byte(body), &page); err != nil || len(page.Operations) != 1 || page.Operations[0].ID != sr.OperationID {
		t.Fatalf("list: %s", body)
	}
	if res, _ := e.apiDo(t, "acme-token", "GET", "/api/v1/operations?limit=-1", "", nil); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad limit: %d", res.StatusCode)
	}
	if res, body := e.apiDo(t, "acme-token", "POST", self+"/input", `{"key": "nope", "action": "accept"}`, nil); res.StatusCode != http.StatusConflict {
		t.Fatalf("input without a pending request: %d %s", res.StatusCode, body)
	}
	res, body = e.apiDo(t, "acme-token", "POST", self+"/cancel", `{"reason": "customer withdrew"}`, nil)
	if res.StatusCode != http.StatusAccepted || !strings.Contains(body, `"cancel_requested_by"`) || !strings.Contains(body, `"domain_outcome":"pending"`) {
		t.Fatalf("cancel: %d %s", res.StatusCode, body)
	}
	// The API's timeline names who wrote each line: the token's request as a person's action,
	// the server's acknowledgement as the server's answer.
	var cancelled operations.Detail
	if err := json.Unmarshal([]byte(body), &cancelled); err != nil {
		t.Fatal(err)
	}
	sources, actors := map[string]string{}, map[string]string{}
	for _, te := range cancelled.Timeline {
		sources[te.State], actors[te.State] = te.Source, te.Actor
	}
	if sources["cancel_requested"] != operations.SourceOperator || actors["cancel_requested"] == "" ||
		sources["cancel_acknowledged"] != operations.SourceCancelReply || actors["cancel_acknowledged"] != "" {
		t.Fatalf("API timeline sources %v actors %v: want cancel_requested by a named person, cancel_acknowledged as the server's reply (%s)",
			sources, actors, operations.SourceCancelReply)
	}
	if !strings.Contains(body, `"actor":`) {
		t.Errorf("the API's timeline does not carry the actor: %s", body)
	}
	if res, body := e.apiDo(t, "acme-token", "GET", "/api/v1/openapi.json", "", nil); res.StatusCode != http.StatusOK || !strings.Contains(body, `"openapi": "3.1.0"`) {
		t.Fatalf("openapi.json: %d %.80s", res.StatusCode, body)
	}
	if n := b.Receiver.Counters().ToolCalls["work_required"]; n != 1 {
		t.Fatalf("tools/call = %d, want 1", n)
	}
}
