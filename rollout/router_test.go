package rollout_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/mcptest"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/rollout"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func ctxT(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

func startReceiver(tb testing.TB, eras receiver.Eras) (string, *receiver.Receiver) {
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
	return "http://" + ln.Addr().String() + "/mcp", rcv
}

const policyYAML = `servers:
  - name: peer
    url: URL
    probe_every: 1m
owners: [{name: team}]
workflows:
  - {name: report, server: peer, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 10s}, owners: [team], stage: full}
  - {name: lookup, server: peer, tool: TOOL, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 10s}, owners: [team], stage: full}
  - {name: refund, server: peer, tool: work_required, effect: effectful, task_use: required, fallback: {kind: sync, max_duration: 10s}, owners: [team], stage: off}
  - {name: payout, server: peer, tool: work_optional, effect: effectful, task_use: preferred, fallback: {kind: handoff}, owners: [team], stage: canary, canary_percent: 30}
`

type bundle struct {
	policy *config.Config
	mstore *manifests.Store
	stages *rollout.Store
	kill   *killswitch.Service
	router *rollout.Router
	prober *manifests.Prober
	ctx    context.Context
}

// setup probes a real peer at url into a fresh database and builds a Router on it. tool is
// the tool of the "lookup" workflow.
func setup(t *testing.T, url, tool string) *bundle {
	t.Helper()
	b := &bundle{ctx: ctxT(t, 60*time.Second)}
	yaml := []byte(replace(replace(policyYAML, "URL", url), "TOOL", tool))
	var err error
	if b.policy, err = config.Parse(yaml); err != nil {
		t.Fatal(err)
	}
	pool := pgtest.New(t)
	b.mstore = manifests.NewStore(pool)
	b.stages = rollout.NewStore(pool, b.policy)
	if b.kill, err = killswitch.Open(b.ctx, pool, killswitch.Config{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.kill.Close)
	if b.prober, err = manifests.NewProber(manifests.ProberConfig{Policy: b.policy, Store: b.mstore}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.prober.ProbeNow(b.ctx, "peer", manifests.Probe{Trigger: manifests.TriggerCLI}); err != nil {
		t.Fatal(err)
	}
	if b.router, err = rollout.NewRouter(rollout.RouterConfig{Policy: b.policy, Manifests: b.mstore, Stages: b.stages, KillSwitch: b.kill}); err != nil {
		t.Fatal(err)
	}
	return b
}

func replace(s, old, new string) string {
	for i := 0; i+len(old) <= len(s); i++ {
		if s[i:i+len(old)] == old {
			return s[:i] + new + replace(s[i+len(old):], old, new)
		}
	}
	return s
}

func (b *bundle) route(t *testing.T, workflow, tenant string) rollout.Routed {
	t.Helper()
	r, err := b.router.Route(b.ctx, workflow, tenant)
	if err != nil {
		t.Fatalf("route %s: %v", workflow, err)
	}
	return r
}

func TestRouterOnLiveManifest(t *testing.T) {
	t.Parallel()
	url, _ := startReceiver(t, receiver.ErasLegacy)
	b := setup(t, url, "work_forbidden")

	r := b.route(t, "report", "acme")
	if r.Decision.Route != rollout.RouteTask || r.Decision.Reason != rollout.ReasonTaskFull || r.ToolMode != manifests.ModeOptional ||
		r.Input.ManifestState != rollout.ManifestFresh || !r.StageFromPolicy || r.ManifestID == 0 || r.Decision.DeclareExtension {
		t.Fatalf("report: %+v", r)
	}
	if r := b.route(t, "refund", "acme"); r.Decision.Route != rollout.RouteReject || r.Decision.Reason != rollout.ReasonToolRequiresTask {
		t.Errorf("refund at stage off: %+v", r.Decision)
	}
	// An operator promotes refund: it runs as a Task.
	if err := b.stages.Set(b.ctx, "refund", rollout.StageFull, 0, "ops"); err != nil {
		t.Fatal(err)
	}
	if r := b.route(t, "refund", "acme"); r.Decision.Route != rollout.RouteTask || r.StageFromPolicy {
		t.Errorf("refund at full: %+v", r)
	}
	// Canary: the tenant's side is decided by its bucket.
	for _, tenant := range []string{"acme", "globex", "initech", "umbrella", "hooli"} {
		r := b.route(t, "payout", tenant)
		in := rollout.Bucket("payout", tenant) < 30
		if (r.Decision.Route == rollout.RouteTask) != in || (!in && r.Decision.Route != rollout.RouteHandoff) {
			t.Errorf("payout for %s (bucket %d): %s/%s", tenant, r.Input.Bucket, r.Decision.Route, r.Decision.Reason)
		}
	}
	// Kill switch: new Task starts stop at once.
	if err := b.kill.Engage(b.ctx, audit.Actor{Name: "ops", Kind: audit.KindCLI}, killswitch.ScopeGlobal, "", "incident"); err != nil {
		t.Fatal(err)
	}
	if r := b.route(t, "report", "acme"); r.Decision.Route != rollout.RouteSync || r.Decision.Reason != rollout.ReasonKillSwitch {
		t.Errorf("kill switch: %+v", r.Decision)
	}
	if _, err := b.router.Route(b.ctx, "nope", "acme"); !errors.Is(err, rollout.ErrUnknownWorkflow) {
		t.Errorf("unknown workflow: %v", err)
	}
}

type brokenSwitch struct{}

func (brokenSwitch) Check(context.Context, rollout.StartCheck) rollout.KillVerdict {
	return rollout.KillVerdict{Blocked: true, FailedSafe: true, Why: "flag store down"}
}

func TestRouterKillSwitchErrorFailsSafe(t *testing.T) {
	t.Parallel()
	url, _ := startReceiver(t, receiver.ErasLegacy)
	b := setup(t, url, "work_forbidden")
	r, err := rollout.NewRouter(rollout.RouterConfig{Policy: b.policy, Manifests: b.mstore, Stages: b.stages, KillSwitch: brokenSwitch{},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Route(b.ctx, "report", "acme")
	if err != nil || got.Decision.Route == rollout.RouteTask || got.Decision.Reason != rollout.ReasonKillSwitchUnknown || got.KillSwitchError == "" {
		t.Fatalf("%+v %v", got, err)
	}
}

func TestRouterStaleAndUnreachable(t *testing.T) {
	t.Parallel()
	url, _ := startReceiver(t, receiver.ErasLegacy)
	b := setup(t, url, "work_forbidden")
	later, err := rollout.NewRouter(rollout.RouterConfig{Policy: b.policy, Manifests: b.mstore, Stages: b.stages, KillSwitch: b.kill,
		Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := later.Route(b.ctx, "report", "acme"); err != nil || r.Decision.Reason != rollout.ReasonManifestStale || r.Decision.Route != rollout.RouteSync {
		t.Fatalf("stale: %+v %v", r.Decision, err)
	}
	if err := b.mstore.RecordFailure(b.ctx, "peer", time.Now(), errors.New("connection refused"), manifests.Probe{Trigger: manifests.TriggerSchedule}); err != nil {
		t.Fatal(err)
	}
	if r := b.route(t, "report", "acme"); r.Decision.Reason != rollout.ReasonServerUnreachable || r.Decision.Route != rollout.RouteSync {
		t.Fatalf("unreachable: %+v", r.Decision)
	}
}

func TestStageStore(t *testing.T) {
	t.Parallel()
	policy, err := config.Parse([]byte(replace(replace(policyYAML, "URL", "http://127.0.0.1:1/mcp"), "TOOL", "x")))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	s := rollout.NewStore(pgtest.New(t), policy)
	st, err := s.Get(ctx, "payout")
	if err != nil || st.Stage != rollout.StageCanary || st.CanaryPercent != 30 || !st.FromPolicy {
		t.Fatalf("policy default: %+v %v", st, err)
	}
	if err := s.PausePromotion(ctx, "payout", "manifest changed", "prober"); err != nil {
		t.Fatal(err)
	}
	if st, err = s.Get(ctx, "payout"); err != nil || !st.FromPolicy || st.PromotionPausedReason != "manifest changed" || st.Stage != rollout.StageCanary {
		t.Fatalf("paused keeps the policy stage: %+v %v", st, err)
	}
	if err := s.Set(ctx, "payout", rollout.StageFull, 100, "ops"); err != nil {
		t.Fatal(err)
	}
	if st, err = s.Get(ctx, "payout"); err != nil || st.FromPolicy || st.Stage != rollout.StageFull || st.UpdatedBy != "ops" || st.PromotionPausedReason == "" {
		t.Fatalf("set: %+v %v", st, err)
	}
	if err := s.ResumePromotion(ctx, "payout", "ops"); err != nil {
		t.Fatal(err)
	}
	if st, _ = s.Get(ctx, "payout"); st.PromotionPausedReason != "" {
		t.Errorf("resume: %+v", st)
	}
	if err := s.Set(ctx, "payout", "everywhere", 0, "ops"); !errors.Is(err, rollout.ErrInvalidStage) {
		t.Errorf("bad stage: %v", err)
	}
	if err := s.Set(ctx, "payout", rollout.StageCanary, 101, "ops"); !errors.Is(err, rollout.ErrInvalidStage) {
		t.Errorf("bad percent: %v", err)
	}
	if _, err := s.Get(ctx, "nope"); !errors.Is(err, rollout.ErrUnknownWorkflow) {
		t.Errorf("unknown workflow: %v", err)
	}
}

// TestCompatibilityPeerWithoutTasks routes to peers that offer no Task for the tool and checks
// that the configured fallback really serves the operation.
func TestCompatibilityPeerWithoutTasks(t *testing.T) {
	t.Parallel()
	t.Run("reference receiver tool work_forbidden: sync fallback serves", func(t *testing.T) {
		t.Parallel()
		url, rcv := startReceiver(t, receiver.ErasLegacy)
		b := setup(t, url, "work_forbidden")
		r := b.route(t, "lookup", "acme")
		if r.Decision.Route != rollout.RouteSync || r.Decision.Reason != rollout.ReasonToolForbidsTask {
			t.Fatalf("decision %+v", r.Decision)
		}
		res := execSync(t, b.ctx, url, r, map[string]any{"text": "balance 42", "idempotency_key": "op-1"})
		if res.IsError {
			t.Fatalf("sync fallback failed: %+v", res)
		}
		if rec, _ := rcv.Records().Get("op-1"); rec.Status != receiver.RecordApplied {
			t.Error("the fallback call did not reach the system of record")
		}
	})
	t.Run("mcp-go server without task capability: sync fallback serves", func(t *testing.T) {
		t.Parallel()
		url := mcptest.StartMCPGo(t, false)
		b := setup(t, url, "report")
		r := b.route(t, "lookup", "acme")
		if r.Decision.Route != rollout.RouteSync || r.Decision.Reason != rollout.ReasonNoTaskCapability {
			t.Fatalf("decision %+v", r.Decision)
		}
		if res := execSync(t, b.ctx, url, r, map[string]any{"month": "2026-01"}); res.IsError {
			t.Fatalf("sync fallback failed: %+v", res)
		}
	})
	t.Run("extension era: -32021 on a plain call becomes the policy's fallback, never a retry", func(t *testing.T) {
		t.Parallel()
		url, rcv := startReceiver(t, receiver.ErasExtension)
		b := setup(t, url, "work_forbidden")
		r := b.route(t, "refund", "acme") // stage off: the incumbent plain call
		if r.Decision.Route != rollout.RouteSync || r.Decision.DeclareExtension {
			t.Fatalf("decision %+v", r.Decision)
		}
		conn, err := mcpclient.Dial(b.ctx, mcpclient.Options{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = conn.CallTool(b.ctx, "work_required", map[string]any{"idempotency_key": "op-2"}, mcpclient.CallOptions{})
		d, ok := rollout.Fallback(*mustWorkflow(t, b.policy, "refund"), r.Decision, err)
		if !ok || d.Route != rollout.RouteReject || d.Reason != rollout.ReasonExtensionRequired {
			t.Fatalf("err %v → %+v ok=%v", err, d, ok)
		}
		if rec, known := rcv.Records().Get("op-2"); known && rec.Status == receiver.RecordApplied {
			t.Error("a refused plain call applied an effect")
		}
	})
}

func mustWorkflow(t *testing.T, p *config.Config, name string) *config.Workflow {
	t.Helper()
	w, ok := p.Workflow(name)
	if !ok {
		t.Fatalf("no workflow %s", name)
	}
	return w
}

// execSync runs a decision's sync route the way the start path does: a plain call on a new
// session, bounded by the fallback's max duration.
func execSync(t *testing.T, ctx context.Context, url string, r rollout.Routed, args map[string]any) *mcpclient.ToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, r.Decision.MaxSync)
	defer cancel()
	conn, err := mcpclient.Dial(ctx, mcpclient.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res, err := conn.CallTool(ctx, r.Tool, args, mcpclient.CallOptions{})
	if err != nil {
		t.Fatalf("sync call %s: %v", r.Tool, err)
	}
	return res
}
