package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/rollout"
)

func TestKillSwitchPageEngageConfirmRelease(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	withRollout(t, e)
	res, body := e.do(t, "viewer", http.MethodGet, "/killswitch", nil)
	if res.StatusCode != 200 || !strings.Contains(body, `data-testid="switch-kill-switch:global"`) || !strings.Contains(body, `data-testid="drain-gauge"`) {
		t.Fatalf("viewer page %d:\n%s", res.StatusCode, body)
	}
	if strings.Contains(body, `data-testid="engage-form"`) {
		t.Error("a viewer is offered the engage form")
	}
	form := url.Values{"scope": {"workflow"}, "name": {"refund"}, "reason": {"bad deploy"}}
	if res, _ := e.do(t, "viewer", http.MethodPost, "/killswitch/engage", cloneForm(form)); res.StatusCode != http.StatusForbidden {
		t.Errorf("viewer engage: %d", res.StatusCode)
	}
	noCSRF := url.Values{"scope": {"workflow"}, "name": {"refund"}, "reason": {"x"}, csrfField: {"forged"}}
	if res, _ := e.do(t, "operator", http.MethodPost, "/killswitch/engage", noCSRF); res.StatusCode != http.StatusForbidden {
		t.Errorf("engage with a forged CSRF token: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "operator", http.MethodPost, "/killswitch/engage", url.Values{"scope": {"workflow"}, "name": {"refund"}}); res.StatusCode != http.StatusBadRequest {
		t.Errorf("engage without a reason: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "operator", http.MethodPost, "/killswitch/engage", url.Values{"scope": {"workflow"}, "name": {"nope"}, "reason": {"x"}}); res.StatusCode != http.StatusBadRequest {
		t.Errorf("engage of an unknown workflow: %d", res.StatusCode)
	}
	// The first POST only asks for confirmation, saying what drains and what new starts get.
	res, body = e.do(t, "operator", http.MethodPost, "/killswitch/engage", form)
	if res.StatusCode != 200 || !strings.Contains(body, `data-testid="engage-confirm"`) || !strings.Contains(body, "0 running Tasks will drain") ||
		!strings.Contains(body, "New operations get: refused (refund)") {
		t.Fatalf("confirmation %d:\n%s", res.StatusCode, body)
	}
	if v := e.flags.Check(t.Context(), startOf("refund")); v.Blocked {
		t.Fatal("asking for confirmation engaged the switch")
	}
	form.Set("confirm", "yes")
	res, body = e.do(t, "operator", http.MethodPost, "/killswitch/engage", form)
	if res.StatusCode != 200 || !strings.Contains(body, "kill-switch:workflow:refund engaged") {
		t.Fatalf("engage %d:\n%s", res.StatusCode, body)
	}
	if v := e.flags.Check(t.Context(), startOf("refund")); !v.Blocked || v.Switch != "kill-switch:workflow:refund" {
		t.Fatalf("after engage: %+v", v)
	}
	// The Servers and Workflows pages carry the drain gauges too.
	for _, page := range []string{"/servers", "/workflows"} {
		if _, body := e.do(t, "viewer", http.MethodGet, page, nil); !strings.Contains(body, `data-testid="drain-gauge"`) {
			t.Errorf("%s has no drain gauge", page)
		}
	}
	if _, body := e.do(t, "viewer", http.MethodGet, "/workflows", nil); !strings.Contains(body, "Finished since the switch") {
		t.Error("the workflows page's gauge of the engaged switch lacks what finished since")
	}
	if res, _ := e.do(t, "operator", http.MethodPost, "/killswitch/release", url.Values{"scope": {"workflow"}, "name": {"refund"}}); res.StatusCode != http.StatusBadRequest {
		t.Errorf("release without a reason: %d", res.StatusCode)
	}
	res, body = e.do(t, "operator", http.MethodPost, "/killswitch/release", url.Values{"scope": {"workflow"}, "name": {"refund"}, "reason": {"fixed"}})
	if res.StatusCode != 200 || !strings.Contains(body, "released") {
		t.Fatalf("release %d:\n%s", res.StatusCode, body)
	}
	if v := e.flags.Check(t.Context(), startOf("refund")); v.Blocked {
		t.Fatalf("after release: %+v", v)
	}
	engaged := 0
	for _, r := range e.auditRows(t) {
		if r.Action == "killswitch.engage" && r.Reason == "bad deploy" {
			engaged++
		}
	}
	if engaged != 1 {
		t.Errorf("audited engagements: %d", engaged)
	}
}

func TestFlagsPageChangePreviewRevert(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	withRollout(t, e)
	def := `{"state":"ENABLED","variants":{"on":true,"off":false},"defaultVariant":"off","targeting":{"if":[{"starts_with":[{"var":"tenant"},"ac"]},"on",null]}}`
	form := url.Values{"key": {"beta"}, "definition": {def}, "reason": {"try"}}
	if res, _ := e.do(t, "viewer", http.MethodPost, "/flags", cloneForm(form)); res.StatusCode != http.StatusForbidden {
		t.Errorf("viewer change: %d", res.StatusCode)
	}
	if res, body := e.do(t, "operator", http.MethodPost, "/flags", url.Values{"key": {"beta"}, "definition": {`{"state":"ON"}`}, "reason": {"x"}}); res.StatusCode != 400 || !strings.Contains(body, "state must be") {
		t.Errorf("malformed: %d", res.StatusCode)
	}
	if res, body := e.do(t, "operator", http.MethodPost, "/flags", form); res.StatusCode != 200 || !strings.Contains(body, "Flag beta saved") {
		t.Fatalf("save %d:\n%s", res.StatusCode, body)
	}
	res, body := e.do(t, "viewer", http.MethodGet, "/flags?tenant=acme&workflow=refund&server=demo", nil)
	if res.StatusCode != 200 || !strings.Contains(body, `data-testid="preview-results"`) || !strings.Contains(body, "TARGETING_MATCH") {
		t.Fatalf("preview %d:\n%s", res.StatusCode, body)
	}
	hist, err := e.flags.Store().History(t.Context(), "beta", 5)
	if err != nil || len(hist) != 1 {
		t.Fatalf("history %v %v", hist, err)
	}
	res, _ = e.do(t, "operator", http.MethodPost, "/flags/revert", url.Values{"change": {idText(hist[0].ID)}, "reason": {"undo"}})
	if res.StatusCode != 200 {
		t.Fatalf("revert: %d", res.StatusCode)
	}
	if r := e.flags.Evaluate("beta", nil); r.ErrorCode != killswitch.ErrorFlagNotFound {
		t.Errorf("after reverting the creation: %+v", r)
	}
}

func startOf(workflow string) rollout.StartCheck {
	return rollout.StartCheck{Workflow: workflow, Server: "demo", Tenant: "acme"}
}

func idText(n int64) string { return strconv.FormatInt(n, 10) }

func cloneForm(f url.Values) url.Values {
	out := url.Values{}
	for k, v := range f {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// Scripts use the same routes with Accept: application/json and the session's CSRF token.
func TestKillSwitchJSONAndHistoryExport(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	withRollout(t, e)
	jsonReq := func(who, method, path string, form url.Values) (*http.Response, map[string]any) {
		t.Helper()
		req := e.request(t, who, method, path, form)
		req.Header.Set("Accept", "application/json")
		res, body := send(t, req)
		var out map[string]any
		if err := json.Unmarshal([]byte(body), &out); err != nil && res.StatusCode < 400 {
			t.Fatalf("%s %s: %v\n%s", method, path, err, body)
		}
		return res, out
	}
	form := url.Values{"scope": {"global"}, "reason": {"incident"}}
	res, out := jsonReq("operator", http.MethodPost, "/killswitch/engage", cloneForm(form))
	if res.StatusCode != 200 || out["confirm"] == nil {
		t.Fatalf("unconfirmed engage: %d %v", res.StatusCode, out)
	}
	form.Set("confirm", "yes")
	res, out = jsonReq("operator", http.MethodPost, "/killswitch/engage", form)
	if res.StatusCode != 200 || out["ok"] != true {
		t.Fatalf("engage: %d %v", res.StatusCode, out)
	}
	_, out = jsonReq("viewer", http.MethodGet, "/killswitch", nil)
	sws, _ := out["switches"].([]any)
	if len(sws) == 0 || sws[0].(map[string]any)["switch"] != "kill-switch:global" || sws[0].(map[string]any)["engaged"] != true {
		t.Fatalf("switches: %v", out)
	}
	res, body := e.do(t, "viewer", http.MethodGet, "/flags/history?format=csv", nil)
	if res.StatusCode != 200 || !strings.Contains(body, "new-task-starts") || !strings.Contains(body, "incident") {
		t.Fatalf("history export %d:\n%s", res.StatusCode, body)
	}
}
