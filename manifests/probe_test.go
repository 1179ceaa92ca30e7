package manifests_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/mcptest"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func ctxT(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// startReceiver serves the reference receiver in the given era mode on loopback.
func startReceiver(tb testing.TB, eras receiver.Eras) string {
	tb.Helper()
	rcv := receiver.New(receiver.Config{Eras: eras})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rcv.Serve(ctx, ln) }()
	tb.Cleanup(func() { cancel(); <-done; rcv.Close() })
	return "http://" + ln.Addr().String() + "/mcp"
}

func probe(tb testing.TB, url string) *manifests.Manifest {
	tb.Helper()
	m, err := manifests.ProbeOnce(ctxT(tb, 30*time.Second), nil, "peer", mcpclient.Options{URL: url}, time.Now())
	if err != nil {
		tb.Fatalf("probe %s: %v", url, err)
	}
	return m
}

func mustTool(tb testing.TB, m *manifests.Manifest, name string) manifests.Tool {
	tb.Helper()
	t, ok := m.Tool(name)
	if !ok {
		tb.Fatalf("tool %s not in manifest %+v", name, m.Tools)
	}
	return t
}

func TestProbeReferenceReceiver(t *testing.T) {
	t.Parallel()
	t.Run("legacy era", func(t *testing.T) {
		t.Parallel()
		m := probe(t, startReceiver(t, receiver.ErasLegacy))
		if m.Era != mcpclient.EraLegacy || m.ProtocolVersion != "2025-11-25" || m.ServerName != "taskgate-reference-receiver" {
			t.Fatalf("manifest %+v", m)
		}
		if !m.Tasks.ToolsCall || !m.Tasks.Get || !m.Tasks.Result || !m.Tasks.Cancel || m.Tasks.Update || len(m.Extensions) != 0 {
			t.Errorf("task ops %+v extensions %v", m.Tasks, m.Extensions)
		}
		if m.Session.SessionIDSHA256 == "" || len(m.Session.RawCapabilitiesSHA256) != 64 || m.Session.At.IsZero() {
			t.Errorf("session evidence %+v", m.Session)
		}
		for name, mode := range map[string]string{"work_forbidden": manifests.ModeForbidden, "work_optional": manifests.ModeOptional, "work_required": manifests.ModeRequired} {
			if got := mustTool(t, m, name); got.Mode != mode {
				t.Errorf("%s mode %s, want %s", name, got.Mode, mode)
			}
		}
		if w := mustTool(t, m, "work_optional"); w.IdempotentHint == nil || !*w.IdempotentHint || w.DestructiveHint == nil || *w.DestructiveHint {
			t.Errorf("annotations %+v", w)
		}
		if !m.TaskCapable("work_optional") || m.TaskCapable("work_forbidden") {
			t.Error("task capability per tool")
		}
	})
	t.Run("extension era", func(t *testing.T) {
		t.Parallel()
		m := probe(t, startReceiver(t, receiver.ErasExtension))
		if m.Era != mcpclient.EraExtension || m.Tasks.Result || m.Tasks.List || !m.Tasks.Update || !m.Tasks.Get || !m.Tasks.Cancel {
			t.Fatalf("manifest era %s tasks %+v", m.Era, m.Tasks)
		}
		if len(m.Extensions) == 0 || m.Extensions[0] != mcpclient.ExtensionName {
			t.Errorf("extensions %v", m.Extensions)
		}
		if got := mustTool(t, m, "work_required"); got.Mode != manifests.ModeServerDecides {
			t.Errorf("extension-era mode %s", got.Mode)
		}
		if m.Session.SessionIDSHA256 != "" {
			t.Errorf("the extension era is stateless, got a session hash")
		}
	})
	t.Run("both eras: the extension is recorded as such", func(t *testing.T) {
		t.Parallel()
		m := probe(t, startReceiver(t, receiver.ErasBoth))
		if m.Era != mcpclient.EraExtension || m.Tasks.Result {
			t.Fatalf("era %s tasks %+v", m.Era, m.Tasks)
		}
	})
}

func TestProbeMCPGo(t *testing.T) {
	t.Parallel()
	t.Run("with task capability", func(t *testing.T) {
		t.Parallel()
		m := probe(t, mcptest.StartMCPGo(t, true))
		if m.Era != mcpclient.EraLegacy || !m.Tasks.ToolsCall || !m.Tasks.List || !m.Tasks.Cancel || m.ServerName != "mcpgo-peer" {
			t.Fatalf("manifest %+v", m)
		}
		if mustTool(t, m, "must").Mode != manifests.ModeRequired || mustTool(t, m, "report").Mode != manifests.ModeOptional ||
			mustTool(t, m, "echo").Mode != manifests.ModeForbidden {
			t.Errorf("tools %+v", m.Tools)
		}
		if e := mustTool(t, m, "echo"); e.ReadOnlyHint == nil || !*e.ReadOnlyHint {
			t.Errorf("echo annotations %+v", e)
		}
	})
	t.Run("without task capability", func(t *testing.T) {
		t.Parallel()
		m := probe(t, mcptest.StartMCPGo(t, false))
		if m.Tasks != (manifests.TaskOps{}) || m.TaskCapable("report") {
			t.Fatalf("a server without Tasks offers %+v", m.Tasks)
		}
	})
}

func TestProbeServerEverything(t *testing.T) {
	t.Parallel()
	m := probe(t, mcptest.StartEverything(t))
	if m.Era != mcpclient.EraLegacy || m.ProtocolVersion != "2025-11-25" || !m.Tasks.ToolsCall || !m.Tasks.Get || !m.Tasks.Result {
		t.Fatalf("manifest %+v", m)
	}
	r := mustTool(t, m, "simulate-research-query")
	if r.Mode != manifests.ModeRequired && r.Mode != manifests.ModeOptional {
		t.Errorf("simulate-research-query mode %s", r.Mode)
	}
	if fp1, fp2 := fingerprint(t, m), fingerprint(t, probe(t, mcptest.StartEverything(t))); fp1 != fp2 {
		t.Errorf("two sessions of the same server give fingerprints %s and %s", fp1, fp2)
	}
}

func fingerprint(tb testing.TB, m *manifests.Manifest) string {
	tb.Helper()
	fp, err := m.Fingerprint()
	if err != nil {
		tb.Fatal(err)
	}
	return fp
}

// swappable serves whichever handler is current: a real peer whose capabilities change.
type swappable struct{ h atomic.Pointer[http.Handler] }

func (s *swappable) set(h http.Handler)                               { s.h.Store(&h) }
func (s *swappable) ServeHTTP(w http.ResponseWriter, r *http.Request) { (*s.h.Load()).ServeHTTP(w, r) }

func TestProberRecordsChangesAndPausesPromotion(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	store := manifests.NewStore(pool)
	peer := &swappable{}
	peer.set(server.NewStreamableHTTPServer(mcptest.MCPGoServer(true)))
	ts := httptest.NewServer(peer)
	t.Cleanup(ts.Close)
	policy, err := config.Parse([]byte(`servers:
  - name: peer
    url: ` + ts.URL + `
    probe_every: 1h
  - name: gone
    url: http://127.0.0.1:1/mcp
owners: [{name: team}]
workflows:
  - {name: report, server: peer, tool: report, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 5s}, owners: [team]}
  - {name: other, server: gone, tool: x, effect: read_only, task_use: never, fallback: {kind: handoff}, owners: [team]}
`))
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan manifests.Result, 8)
	p, err := manifests.NewProber(manifests.ProberConfig{Policy: policy, Store: store, Timeout: 10 * time.Second,
		OnProbe: func(r manifests.Result) { results <- r }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 60*time.Second)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	got := map[string]manifests.Result{}
	for len(got) < 2 {
		select {
		case r := <-results:
			got[r.Server] = r
		case <-ctx.Done():
			t.Fatal("start probes did not finish")
		}
	}
	if got["peer"].Err != nil || got["peer"].Recorded.Changed || got["gone"].Err == nil {
		t.Fatalf("start probes: %+v", got)
	}
	first := got["peer"].Recorded.Version
	// A verdict earned on the first manifest.
	if _, err := pool.Exec(ctx, `INSERT INTO gate_verdicts (workflow, server, suite, passed, manifest_fingerprint) VALUES ('report', 'peer', 'contract', true, $1)`, first.Fingerprint); err != nil {
		t.Fatal(err)
	}
	// Same server, new session: the same version, no change.
	r, err := p.ProbeNow(ctx, "peer", manifests.Probe{Trigger: manifests.TriggerOperator, Actor: "ops@example.com"})
	if err != nil || r.Recorded.Changed || r.Recorded.Version.ID != first.ID {
		t.Fatalf("second probe: %+v %v", r, err)
	}
	<-results
	// The server drops Tasks: a new version, the verdict voided, promotion paused.
	peer.set(server.NewStreamableHTTPServer(mcptest.MCPGoServer(false)))
	r, err = p.ProbeNow(ctx, "peer", manifests.Probe{Actor: "ops@example.com"})
	if err != nil || !r.Recorded.Changed || r.Recorded.VoidedVerdicts != 1 || len(r.Recorded.PausedWorkflows) != 1 {
		t.Fatalf("changed probe: %+v %v", r, err)
	}
	<-results
	var reason string
	if err := pool.QueryRow(ctx, `SELECT promotion_paused_reason FROM workflow_rollouts WHERE workflow = 'report'`).Scan(&reason); err != nil || reason == "" {
		t.Fatalf("promotion pause: %q %v", reason, err)
	}
	var voidReason string
	if err := pool.QueryRow(ctx, `SELECT void_reason FROM gate_verdicts WHERE workflow = 'report'`).Scan(&voidReason); err != nil || voidReason != reason {
		t.Fatalf("void reason %q vs pause reason %q: %v", voidReason, reason, err)
	}
	st, err := store.Status(ctx, "peer")
	if err != nil || !st.Reachable() || st.Latest == nil || st.Latest.ID == first.ID || st.LastProbe.Actor != "ops@example.com" {
		t.Fatalf("status %+v %v", st, err)
	}
	d := manifests.Compare(first.Manifest, st.Latest.Manifest)
	var removed, capability bool
	for _, c := range d.Changes {
		removed = removed || (c.Kind == manifests.ChangeToolRemoved && c.Subject == "must")
		capability = capability || (c.Kind == manifests.ChangeCapability && c.Subject == "tools/call as task")
	}
	if !removed || !capability {
		t.Errorf("diff:\n%s", d)
	}
	gone, err := store.Status(ctx, "gone")
	if err != nil || gone.Reachable() || gone.Latest != nil || gone.LastProbe == nil || gone.LastProbe.Error == "" {
		t.Fatalf("unreachable server status %+v %v", gone, err)
	}
	if _, err := p.ProbeNow(ctx, "nope", manifests.Probe{}); err == nil {
		t.Error("probing a server outside the policy succeeded")
	}
	p.Stop()
	p.Stop() // idempotent
}

// A server that takes the probe's request and never answers delays no other server's probe:
// the prober probes the due servers together, each under its own timeout.
func TestASilentServerDelaysNoOtherProbe(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read to the end, so that the server sees the prober hang up (it watches the
		// connection only once the body is read), then never answer.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	t.Cleanup(silent.Close)
	peer := httptest.NewServer(server.NewStreamableHTTPServer(mcptest.MCPGoServer(true)))
	t.Cleanup(peer.Close)
	policy, err := config.Parse([]byte(`servers:
  - name: silent
    url: ` + silent.URL + `
  - name: peer
    url: ` + peer.URL + `
owners: [{name: team}]
workflows:
  - {name: report, server: peer, tool: report, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 5s}, owners: [team]}
`))
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan manifests.Result, 4)
	p, err := manifests.NewProber(manifests.ProberConfig{Policy: policy, Store: manifests.NewStore(pool), Timeout: 3 * time.Second,
		OnProbe: func(r manifests.Result) { results <- r }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	var order []string
	for len(order) < 2 {
		select {
		case r := <-results:
			order = append(order, r.Server)
			if r.Server == "peer" && r.Err != nil {
				t.Fatalf("the answering server's probe failed: %v", r.Err)
			}
			if r.Server == "silent" && r.Err == nil {
				t.Fatal("the silent server's probe succeeded")
			}
		case <-ctx.Done():
			t.Fatal("the start probes did not end")
		}
	}
	if order[0] != "peer" {
		t.Errorf("probes ended in the order %v: the answering server waited for the silent one's timeout", order)
	}
}
