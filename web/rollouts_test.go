package web

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"net/http/httptest"

	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/rollout"
)

// withRollouts gives the console a rollout controller on top of withRollout's manifests and
// flags, with the demo server probed once.
func withRollouts(t *testing.T, e *testEnv) *rollout.Controller {
	t.Helper()
	prober := withRollout(t, e)
	if _, err := prober.ProbeNow(t.Context(), "demo", manifests.Probe{Trigger: manifests.TriggerCLI}); err != nil {
		t.Fatal(err)
	}
	deps := e.srv.deps
	deps.Manifests, deps.Prober, deps.Flags = manifests.NewStore(e.pool), prober, e.flags
	deps.Registry = prometheus.NewRegistry()
	c, err := rollout.NewController(rollout.ControllerConfig{Policy: deps.Policy, Pool: e.pool, Evidence: deps.Gates,
		Manifests: deps.Manifests, Kill: e.flags, Build: "test"})
	if err != nil {
		t.Fatal(err)
	}
	deps.Rollouts = c
	srv, err := NewServer(deps)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.CloseStreams)
	e.URL = ts.URL
	return c
}

// passRefundGates stores a passing gate run of refund for the demo server's current manifest.
func passRefundGates(t *testing.T, e *testEnv) {
	t.Helper()
	v, err := manifests.NewStore(e.pool).Latest(t.Context(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	r := &gates.Run{Binding: gates.Binding{Workflow: "refund", Server: "demo", ManifestFingerprint: v.Fingerprint, Build: "test"},
		StartedBy: "test", Era: "2025-11-25", Started: time.Now().UTC(), Finished: time.Now().UTC(), Verdict: gates.Pass}
	r.DeviationFingerprint = r.Deviations.Fingerprint()
	if _, _, err := e.srv.deps.Gates.Save(t.Context(), r); err != nil {
		t.Fatal(err)
	}
}

func TestRolloutsPageMovesWithConfirmation(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	withRollouts(t, e)
	res, body := e.do(t, "viewer", http.MethodGet, "/rollouts", nil)
	if res.StatusCode != 200 || !strings.Contains(body, `data-testid="rollout-refund"`) || !strings.Contains(body, `data-testid="rollout-health"`) {
		t.Fatalf("viewer page %d:\n%s", res.StatusCode, body)
	}
	if strings.Contains(body, `data-testid="rollback-form-refund"`) {
		t.Error("a viewer is offered a move")
	}
	if res, _ := e.do(t, "viewer", http.MethodPost, "/rollouts/refund/rollback", url.Values{"reason": {"x"}}); res.StatusCode != http.StatusForbidden {
		t.Errorf("viewer rollback: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "operator", http.MethodPost, "/rollouts/refund/rollback", url.Values{"reason": {"x"}, csrfField: {"forged"}}); res.StatusCode != http.StatusForbidden {
		t.Errorf("rollback with a forged CSRF token: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "operator", http.MethodPost, "/rollouts/refund/rollback", url.Values{}); res.StatusCode != http.StatusBadRequest {
		t.Errorf("rollback without a reason: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "operator", http.MethodPost, "/rollouts/nope/rollback", url.Values{"reason": {"x"}}); res.StatusCode != http.StatusNotFound {
		t.Errorf("rollback of an unknown workflow: %d", res.StatusCode)
	}
	// Rollback (refund is full in the example policy): first a confirmation, then the move.
	res, body = e.do(t, "operator", http.MethodPost, "/rollouts/refund/rollback", url.Values{"reason": {"errors"}})
	if res.StatusCode != 200 || !strings.Contains(body, `data-testid="move-confirm"`) || !strings.Contains(body, "3 of 3 tenants return to the incumbent route") {
		t.Fatalf("rollback confirmation %d:\n%s", res.StatusCode, body)
	}
	res, body = e.do(t, "operator", http.MethodPost, "/rollouts/refund/rollback", url.Values{"reason": {"errors"}, "confirm": {"yes"}})
	if res.StatusCode != 200 || !strings.Contains(body, "Rollback of refund done") || !strings.Contains(body, `data-testid="rollout-drain"`) ||
		!strings.Contains(body, "0 in flight, 0 verified, 0 queued for reconciliation, of 0 open at the rollback") {
		t.Fatalf("rollback %d:\n%s", res.StatusCode, body)
	}
	if v := e.flags.Check(t.Context(), startOf("refund")); !v.Blocked {
		t.Fatalf("rollback left the kill switch released: %+v", v)
	}
	// Promotion without gate evidence is refused, naming it.
	res, body = e.do(t, "operator", http.MethodPost, "/rollouts/refund/promote", url.Values{"reason": {"go"}, "confirm": {"yes"}})
	if res.StatusCode != http.StatusConflict || !strings.Contains(body, `data-testid="refusal"`) || !strings.Contains(body, "no gate run for workflow refund") {
		t.Fatalf("promote without gates %d:\n%s", res.StatusCode, body)
	}
	passRefundGates(t, e)
	res, body = e.do(t, "operator", http.MethodPost, "/rollouts/refund/promote", url.Values{"reason": {"gates passed"}})
	if !strings.Contains(body, "refund moves from off to shadow") {
		t.Fatalf("promote confirmation %d:\n%s", res.StatusCode, body)
	}
	res, body = e.do(t, "operator", http.MethodPost, "/rollouts/refund/promote", url.Values{"reason": {"gates passed"}, "confirm": {"yes"}})
	if res.StatusCode != 200 || !strings.Contains(body, "Promote of refund done") {
		t.Fatalf("promote %d:\n%s", res.StatusCode, body)
	}
	res, body = e.do(t, "operator", http.MethodPost, "/rollouts/refund/pause", url.Values{"reason": {"watching"}, "confirm": {"yes"}})
	if res.StatusCode != 200 || !strings.Contains(body, `data-testid="rollout-paused"`) || !strings.Contains(body, "pause by operator@test: shadow → shadow: watching") {
		t.Fatalf("pause %d:\n%s", res.StatusCode, body)
	}
	for _, action := range []string{"rollout.rollback", "rollout.promote", "rollout.pause"} {
		found := false
		for _, r := range e.auditRows(t) {
			if r.Action == action && r.Target == "workflow:refund" && r.Actor == "operator@test" {
				found = true
			}
		}
		if !found {
			t.Errorf("no audit entry %s by the operator", action)
		}
	}
}

// TestRolloutsPageListsShadowComparisons: the shadow's comparisons of the workflow show on the
// page beside its stage (divergences listed, server text escaped) and in its JSON.
func TestRolloutsPageListsShadowComparisons(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	withRollouts(t, e)
	ctx := t.Context()
	var agree, diverged string
	for i, id := range []*string{&agree, &diverged} {
		if err := e.pool.QueryRow(ctx, `INSERT INTO operations (tenant, workflow, idempotency_key, request_sha256, actor, route, reason_code, reason)
			VALUES ('acme', 'refund', $1, 'x', 'app', 'sync', 'shadow_incumbent', 'shadow') RETURNING id::text`, fmt.Sprint("sh-", i)).Scan(id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO rollout_shadow_comparisons (operation_id, workflow, kind, state, incumbent_route, incumbent_state,
		    shadow_route, shadow_reason, shadow_state, divergences, started_at)
		VALUES ($1, 'refund', 'run', 'compared', 'sync', 'completed', 'task', 'task_full', 'completed', '[]', now() - interval '1 minute'),
		       ($2, 'refund', 'run', 'compared', 'sync', 'completed', 'task', 'task_full', 'failed', $3, now())`,
		agree, diverged, `["task state: shadow failed, incumbent completed", "<script>x</script>"]`); err != nil {
		t.Fatal(err)
	}
	res, body := e.do(t, "viewer", http.MethodGet, "/rollouts", nil)
	if res.StatusCode != 200 {
		t.Fatalf("page %d", res.StatusCode)
	}
	sec := body[strings.Index(body, `data-testid="rollout-refund"`):]
	if i := strings.Index(sec, "</section>"); i > 0 {
		sec = sec[:i]
	}
	for _, want := range []string{`data-testid="rollout-shadow"`, "latest 2, 1 diverged", "/operations/" + agree, "/operations/" + diverged,
		"task state: shadow failed, incumbent completed", "&lt;script&gt;x&lt;/script&gt;", ">agree<", ">diverged<", "ran as a Task"} {
		if !strings.Contains(sec, want) {
			t.Errorf("refund's section lacks %q", want)
		}
	}
	if strings.Contains(body, "<script>x</script>") {
		t.Error("server text reached the page unescaped")
	}
	req := e.request(t, "viewer", http.MethodGet, "/rollouts", nil)
	req.Header.Set("Accept", "application/json")
	res, jbody := send(t, req)
	if res.StatusCode != 200 || !strings.Contains(jbody, `"divergences":["task state: shadow failed, incumbent completed"`) ||
		!strings.Contains(jbody, `"operationId":"`+diverged+`"`) {
		t.Fatalf("JSON %d: %s", res.StatusCode, jbody)
	}
}

// CONSOLE.md rule 10: every operation row, and the operation's page, say which stage, step,
// flag and bucket sent it to its route.
func TestOperationRowsSayTheirRolloutContext(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	id := e.start(t, "acme", "refund", "1042", `{"outcome": "hang"}`)
	other := e.start(t, "acme", "refund", "1043", `{"outcome": "hang"}`)
	rc := rollout.RouteContext{Stage: rollout.StageCanary, Step: 2, Steps: 5, Percent: 25, Flag: rollout.CanaryFlagKey("refund"),
		Variant: rollout.CanaryTask, Bucket: 17}
	if _, err := e.pool.Exec(t.Context(), `UPDATE operations SET route_context = $2 WHERE id = $1`, id, rc.JSON()); err != nil {
		t.Fatal(err)
	}
	const words = "canary step 2 of 5 (25%) · flag rollout-canary.refund: task · bucket 17"
	_, body := e.do(t, "operator", "GET", "/operations", nil)
	row := body[strings.Index(body, id):]
	if j := strings.Index(row, "</tr>"); j > 0 {
		row = row[:j]
	}
	if !strings.Contains(row, `data-testid="route-context">`+words+"<") {
		t.Fatalf("the row of %s does not say its rollout context:\n%s", id, row)
	}
	orow := body[strings.Index(body, other):]
	if j := strings.Index(orow, "</tr>"); j > 0 && strings.Contains(orow[:j], "route-context") {
		t.Error("a row without a rollout context shows one")
	}
	_, page := e.do(t, "operator", "GET", "/operations/"+id, nil)
	if !strings.Contains(page, `data-testid="route-context">`+words+"<") {
		t.Fatalf("the operation page does not say its rollout context")
	}
}

// TestRolloutChartsMatchTheAnalysis: the Rollouts page's charts draw, for the canary and the
// incumbent, each interval's failure and unknown-outcome rate; every figure on them (rate,
// count, operations, interval) is the analysis query's.
func TestRolloutChartsMatchTheAnalysis(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	c := withRollouts(t, e)
	ctx := t.Context()
	for i, op := range []struct{ route, outcome string }{
		{"task", "unknown"}, {"task", "unknown"}, {"task", "applied"}, {"task", "pending"},
		{"sync", "applied"}, {"sync", "not_applied"}, {"sync", "applied"},
	} {
		if _, err := e.pool.Exec(ctx, `INSERT INTO operations (tenant, workflow, idempotency_key, request_sha256, actor, route, reason_code, reason, domain_outcome)
			VALUES ('acme', 'refund', $1, 'x', 'app', $2, 'test', 'test', $3)`, fmt.Sprint("c-", i), op.route, op.outcome); err != nil {
			t.Fatal(err)
		}
	}
	_, body := e.do(t, "viewer", http.MethodGet, "/rollouts", nil)
	sec := body[strings.Index(body, `data-testid="rollout-refund"`):]
	sec = sec[:strings.Index(sec, "</section>")]
	sr, err := c.Series(ctx, "refund", 12)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Analyze(ctx, "refund")
	if err != nil {
		t.Fatal(err)
	}
	if a.Canary.Operations != 4 || a.Canary.Unknown != 2 || a.Incumbent.Operations != 3 || a.Incumbent.Failed != 1 {
		t.Fatalf("analysis %+v", a)
	}
	dot := regexp.MustCompile(`data-testid="chart-dot" data-side="(\w+)" data-i="(\d+)" data-value="([0-9.]+)" data-count="(\d+)" data-ops="(\d+)"`)
	for _, metric := range []string{"failure", "unknown"} {
		chart := sec[strings.Index(sec, `data-testid="chart-`+metric+`"`):]
		chart = chart[:strings.Index(chart, "</figure>")]
		ops := map[string]int{}
		dots := dot.FindAllStringSubmatch(chart, -1)
		if len(dots) == 0 {
			t.Fatalf("%s chart has no dots:\n%s", metric, chart)
		}
		for _, m := range dots {
			i, _ := strconv.Atoi(m[2])
			p := sr.Points[i]
			s := p.Incumbent
			if m[1] == "canary" {
				s = p.Canary
			}
			v, count := s.FailureRate, s.Failed
			if metric == "unknown" {
				v, count = s.UnknownRate, s.Unknown
			}
			if m[3] != strconv.FormatFloat(v, 'f', 4, 64) || m[4] != strconv.Itoa(count) || m[5] != strconv.Itoa(s.Operations) {
				t.Errorf("%s %s interval %d: chart says %s (%s of %s), the analysis %v (%d of %d)", metric, m[1], i, m[3], m[4], m[5], v, count, s.Operations)
			}
			n, _ := strconv.Atoi(m[5])
			ops[m[1]] += n
		}
		if ops["canary"] != a.Canary.Operations || ops["incumbent"] != a.Incumbent.Operations {
			t.Errorf("%s chart covers %v operations, the analysis canary %d, incumbent %d", metric, ops, a.Canary.Operations, a.Incumbent.Operations)
		}
	}
	if !strings.Contains(sec, "unknown-outcome rate 50.0% (2 of 4)") || !strings.Contains(sec, "failure rate 33.3% (1 of 3)") {
		t.Errorf("the dots' titles do not say the figures:\n%s", sec)
	}
}

// TestRunbookStepsNameTheirPageAndShowScreenshots: every step of docs/runbook.md names the
// console page it happens on, and every screenshot it embeds is in the repository under the
// relative path it gives.
func TestRunbookStepsNameTheirPageAndShowScreenshots(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	steps := regexp.MustCompile(`(?m)^## \d+\. .*$`).FindAllStringIndex(doc, -1)
	if len(steps) < 6 {
		t.Fatalf("%d numbered steps, want engage, drain, roll back, reconcile, re-enable, promote", len(steps))
	}
	for i, st := range steps {
		end := len(doc)
		if i+1 < len(steps) {
			end = steps[i+1][0]
		}
		body := doc[st[0]:end]
		if !regexp.MustCompile(`(?m)^Pages?: \*\*[A-Z][a-z ]+\*\*`).MatchString(body) {
			t.Errorf("step %q does not name its console page", doc[st[0]:st[1]])
		}
	}
	imgs := regexp.MustCompile(`!\[[^\]]*\]\(([^)]+)\)`).FindAllStringSubmatch(doc, -1)
	if len(imgs) < 6 {
		t.Fatalf("%d screenshots embedded", len(imgs))
	}
	for _, m := range imgs {
		if strings.Contains(m[1], "://") || strings.HasPrefix(m[1], "/") {
			t.Errorf("screenshot %s is not a relative path", m[1])
			continue
		}
		if fi, err := os.Stat(filepath.Join("..", "docs", m[1])); err != nil || fi.Size() == 0 {
			t.Errorf("screenshot %s: %v", m[1], err)
		}
	}
}
