package web

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/rollout"
)

// withRollout serves e's console again with the manifests store, a prober aimed at a real
// reference receiver as builtin:demo, and a router.
func withRollout(t *testing.T, e *testEnv) *manifests.Prober {
	t.Helper()
	rcv := receiver.New(receiver.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rcv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done; rcv.Close() })
	deps := e.srv.deps
	mstore := manifests.NewStore(e.pool)
	prober, err := manifests.NewProber(manifests.ProberConfig{Policy: deps.Policy, Store: mstore, DemoURL: "http://" + ln.Addr().String() + "/mcp"})
	if err != nil {
		t.Fatal(err)
	}
	flags, err := killswitch.Open(ctx, e.pool, killswitch.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(flags.Close)
	router, err := rollout.NewRouter(rollout.RouterConfig{Policy: deps.Policy, Manifests: mstore,
		Stages: rollout.NewStore(e.pool, deps.Policy), KillSwitch: flags})
	if err != nil {
		t.Fatal(err)
	}
	deps.Manifests, deps.Prober, deps.Router, deps.Flags = mstore, prober, router, flags
	deps.Registry = prometheus.NewRegistry()
	srv, err := NewServer(deps)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.CloseStreams)
	e.URL, e.flags = ts.URL, flags
	return prober
}

func TestServersProbeNowIsAuditedAndShown(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	withRollout(t, e)

	res, body := e.do(t, "viewer", http.MethodGet, "/servers", nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `data-testid="server-demo"`) || !strings.Contains(body, "never probed") {
		t.Fatalf("servers before a probe: %d\n%s", res.StatusCode, body)
	}
	if strings.Contains(body, `data-testid="probe-demo"`) {
		t.Error("a viewer sees the probe now action")
	}
	// Without the CSRF token the probe is refused.
	res, _ = e.do(t, "operator", http.MethodPost, "/servers/demo/probe", url.Values{csrfField: {"forged"}})
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("probe without the CSRF token: %d", res.StatusCode)
	}
	res, body = e.do(t, "operator", http.MethodPost, "/servers/demo/probe", url.Values{"reason": {"check after deploy"}})
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "Probed demo on a new session") {
		t.Fatalf("probe now: %d\n%s", res.StatusCode, body)
	}
	row := e.findAudit(t, "server.probe", res.Header.Get("X-Request-ID"))
	var after map[string]any
	if err := json.Unmarshal(row.After, &after); err != nil || after["ok"] != true || len(after["fingerprint"].(string)) != 64 ||
		row.Actor != "operator@test" || row.Reason != "check after deploy" {
		t.Fatalf("audit row %+v after %v", row, after)
	}
	_, body = e.do(t, "viewer", http.MethodGet, "/servers", nil)
	for _, want := range []string{"reachable", "2026-07-28 tasks extension", `data-testid="tool-work_required"`, "server decides per call", "/servers/demo/manifests"} {
		if !strings.Contains(body, want) {
			t.Errorf("servers page lacks %q", want)
		}
	}
	if res, _ := e.do(t, "operator", http.MethodPost, "/servers/nope/probe", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("probe of an unknown server: %d", res.StatusCode)
	}
}

func TestManifestHistoryShowsDiff(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	withRollout(t, e)
	ctx := context.Background()
	store := manifests.NewStore(e.pool)
	base := &manifests.Manifest{Server: "demo", Era: "2025-11-25", ProtocolVersion: "2025-11-25", ServerName: "r", ServerVersion: "1",
		Tasks: manifests.TaskOps{ToolsCall: true, Get: true, Result: true, Cancel: true},
		Tools: []manifests.Tool{{Name: "work_optional", Mode: manifests.ModeOptional}, {Name: "gone", Mode: manifests.ModeForbidden}}}
	if _, err := store.Record(ctx, base, manifests.Probe{Trigger: manifests.TriggerCLI}, nil); err != nil {
		t.Fatal(err)
	}
	next := *base
	next.Tools = []manifests.Tool{{Name: "work_optional", Mode: manifests.ModeRequired}}
	rec, err := store.Record(ctx, &next, manifests.Probe{Trigger: manifests.TriggerCLI}, manifests.Affected(e.srv.deps.Policy, "demo"))
	if err != nil || !rec.Changed {
		t.Fatalf("%+v %v", rec, err)
	}
	res, body := e.do(t, "viewer", http.MethodGet, "/servers/demo/manifests", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("history: %d", res.StatusCode)
	}
	for _, want := range []string{"tool gone removed (was forbidden)", "tool work_optional: mode optional → required", `data-testid="version-1"`, `data-testid="version-2"`} {
		if !strings.Contains(body, want) {
			t.Errorf("history page lacks %q", want)
		}
	}
	_, body = e.do(t, "viewer", http.MethodGet, "/servers/demo/manifests?a=2&b=2", nil)
	if !strings.Contains(body, `data-testid="diff-empty"`) {
		t.Error("a version compared with itself shows changes")
	}
	// The change paused promotion of the demo workflows: the workflows page says so.
	_, body = e.do(t, "viewer", http.MethodGet, "/workflows?tenant=acme", nil)
	if !strings.Contains(body, `data-testid="promotion-paused"`) {
		t.Error("workflows page does not show the paused promotion")
	}
}

func TestWorkflowsShowDecisionForTenant(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	prober := withRollout(t, e)
	if _, err := prober.ProbeNow(context.Background(), "demo", manifests.Probe{Trigger: manifests.TriggerCLI}); err != nil {
		t.Fatal(err)
	}
	res, body := e.do(t, "acme-viewer", http.MethodGet, "/workflows", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("workflows: %d", res.StatusCode)
	}
	refund := section(body, `data-testid="workflow-refund"`)
	if !strings.Contains(refund, ">task<") || !strings.Contains(refund, "task_full") || !strings.Contains(refund, "declares the tasks extension") {
		t.Errorf("refund row:\n%s", refund)
	}
	kyc := section(body, `data-testid="workflow-kyc-review"`)
	if !strings.Contains(kyc, ">handoff<") || !strings.Contains(kyc, "task_use_never") {
		t.Errorf("kyc-review row:\n%s", kyc)
	}
	if res, _ := e.do(t, "acme-viewer", http.MethodGet, "/workflows?tenant=globex", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("acme viewer asked for globex decisions: %d", res.StatusCode)
	}
}

// section returns body from marker to the end of its table row.
func section(body, marker string) string {
	i := strings.Index(body, marker)
	if i < 0 {
		return ""
	}
	rest := body[i:]
	if j := strings.Index(rest, "</tr>"); j >= 0 {
		return rest[:j]
	}
	return rest
}
