package rollout_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/rollout"
)

const planYAML = `servers:
  - name: peer
    url: URL
    probe_every: 1m
owners: [{name: team}]
workflows:
  - name: refund
    server: peer
    tool: work_optional
    effect: effectful
    task_use: preferred
    fallback: {kind: handoff}
    owners: [team]
    max_ttl: 10m
    concurrency: 5
    rollout:
      steps: [5, 50]
      hold: 0s
      pins: PINS
`

type ctl struct {
	*bundle
	ctl   *rollout.Controller
	gates *gates.Store
}

func setupController(t *testing.T, pinned string) *ctl {
	t.Helper()
	return setupControllerPins(t, fmt.Sprintf("{server_version: %q}", pinned))
}

// setupControllerPins is setupController with the plan's pins given as a YAML flow mapping.
func setupControllerPins(t *testing.T, pins string) *ctl {
	t.Helper()
	url, _ := startReceiver(t, receiver.ErasLegacy)
	ctx := ctxT(t, 60*time.Second)
	pol, err := config.Parse([]byte(replace(replace(planYAML, "URL", url), "PINS", pins)))
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.New(t)
	b := &bundle{ctx: ctx, policy: pol, mstore: manifests.NewStore(pool)}
	if b.kill, err = killswitch.Open(ctx, pool, killswitch.Config{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.kill.Close)
	if b.prober, err = manifests.NewProber(manifests.ProberConfig{Policy: pol, Store: b.mstore}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.prober.ProbeNow(ctx, "peer", manifests.Probe{Trigger: manifests.TriggerCLI}); err != nil {
		t.Fatal(err)
	}
	c := &ctl{bundle: b, gates: gates.NewStore(pool)}
	if c.ctl, err = rollout.NewController(rollout.ControllerConfig{Policy: pol, Pool: pool, Evidence: c.gates, Manifests: b.mstore,
		Kill: b.kill, Canary: b.kill, Build: "test"}); err != nil {
		t.Fatal(err)
	}
	return c
}

// passGates stores a passing gate run for the server's current manifest and this build.
func (c *ctl) passGates(t *testing.T) {
	t.Helper()
	v, err := c.mstore.Latest(c.ctx, "peer")
	if err != nil {
		t.Fatal(err)
	}
	w, _ := c.policy.Workflow("refund")
	pins := w.Plan().Pins.Map()
	r := &gates.Run{Binding: gates.Binding{Workflow: "refund", Server: "peer", ManifestFingerprint: v.Fingerprint, Build: "test", Pins: pins},
		StartedBy: "cli", Era: "2025-11-25", Started: time.Now().UTC(), Finished: time.Now().UTC(), Verdict: gates.Pass}
	r.DeviationFingerprint = r.Deviations.Fingerprint()
	if _, _, err := c.gates.Save(c.ctx, r); err != nil {
		t.Fatal(err)
	}
}

var ops = audit.Actor{Name: "ops@example.com", Kind: audit.KindAccount, Role: "operator"}

func refusal(t *testing.T, err error, want ...string) {
	t.Helper()
	var ref *rollout.Refusal
	if !errors.Is(err, rollout.ErrRefused) || !errors.As(err, &ref) {
		t.Fatalf("want a refusal, got %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not say %q", err, w)
		}
	}
}

func TestPromotionNeedsCurrentPassingGates(t *testing.T) {
	t.Parallel()
	c := setupController(t, "")

	// No gate run: refused, naming the missing evidence; nothing moved.
	_, err := c.ctl.Promote(c.ctx, ops, "refund", "start shadow")
	refusal(t, err, "gate missing", "no gate run for workflow refund")
	if st, _ := c.ctl.Status(c.ctx, "refund"); st.Stage != rollout.StageOff || len(st.History) != 0 {
		t.Fatalf("a refused promotion moved the rollout: %+v", st)
	}
	if _, err := c.ctl.Promote(c.ctx, ops, "refund", " "); err == nil || errors.Is(err, rollout.ErrRefused) {
		t.Fatalf("a move without a reason: %v", err)
	}

	c.passGates(t)
	want := []struct {
		stage   rollout.Stage
		percent int
	}{{rollout.StageShadow, 0}, {rollout.StageCanary, 5}, {rollout.StageCanary, 50}}
	for i, w := range want {
		st, err := c.ctl.Promote(c.ctx, ops, "refund", "evidence passed")
		if err != nil {
			t.Fatalf("promotion %d: %v", i, err)
		}
		if st.Stage != w.stage || st.Percent != w.percent || st.History[0].Action != "promote" || st.History[0].Reason != "evidence passed" {
			t.Fatalf("promotion %d: %s %d%% %+v", i, st.Stage, st.Percent, st.History[0])
		}
	}
	// The router sees the controller's stage and step.
	st, _ := c.ctl.Stages().Get(c.ctx, "refund")
	if st.Stage != rollout.StageCanary || st.CanaryPercent != 50 || st.FromPolicy {
		t.Fatalf("stage store: %+v", st)
	}

	// The server's manifest changes: the evidence is stale and promotion is refused again.
	v, err := c.mstore.Latest(c.ctx, "peer")
	if err != nil {
		t.Fatal(err)
	}
	m := *v.Manifest
	m.ServerVersion += "-changed"
	if _, err := c.mstore.Record(c.ctx, &m, manifests.Probe{Trigger: manifests.TriggerCLI}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = c.ctl.Promote(c.ctx, ops, "refund", "go full")
	refusal(t, err, "gate stale", "manifest fingerprint")
	// Fresh gates for the new manifest: allowed to full.
	c.passGates(t)
	if st, err := c.ctl.Promote(c.ctx, ops, "refund", "go full"); err != nil || st.Stage != rollout.StageFull {
		t.Fatalf("after fresh gates: %v %+v", err, st.Stage)
	}
	_, err = c.ctl.Promote(c.ctx, ops, "refund", "beyond")
	refusal(t, err, "already at full")

	// Every move is audited with its reason.
	page, err := audit.NewStore(c.ctl.Pool()).List(c.ctx, audit.Filter{AllTenants: true, Action: "rollout.promote"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range page.Rows {
		if r.Action == "rollout.promote" && r.Target == "workflow:refund" && r.Reason != "" {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("%d audited promotions, want 4", n)
	}
}

func TestPauseResumeRollbackAndDrift(t *testing.T) {
	t.Parallel()
	c := setupController(t, "")
	c.passGates(t)
	for range 2 {
		if _, err := c.ctl.Promote(c.ctx, ops, "refund", "up"); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.ctl.Pause(c.ctx, ops, "refund", "looking at latency")
	if err != nil || st.Paused != "looking at latency" || st.Stage != rollout.StageCanary {
		t.Fatalf("pause: %v %+v", err, st)
	}
	_, err = c.ctl.Promote(c.ctx, ops, "refund", "up")
	refusal(t, err, "paused: looking at latency")
	if _, err := c.ctl.Resume(c.ctx, ops, "refund", "latency fine"); err != nil {
		t.Fatal(err)
	}
	// Rollback: the kill switch engaged for the workflow, the stage back to off.
	st, err = c.ctl.Rollback(c.ctx, ops, "refund", "errors in canary")
	if err != nil || st.Stage != rollout.StageOff || st.History[0].Action != "rollback" {
		t.Fatalf("rollback: %v %+v", err, st)
	}
	if kv := c.kill.Check(c.ctx, rollout.StartCheck{Workflow: "refund", Server: "peer", Tenant: "acme"}); !kv.Blocked {
		t.Fatalf("kill switch not engaged after rollback: %+v", kv)
	}
	// Re-enabling starts again from shadow.
	if st, err := c.ctl.Promote(c.ctx, ops, "refund", "again"); err != nil || st.Stage != rollout.StageShadow {
		t.Fatalf("re-enable: %v %+v", err, st.Stage)
	}
}

func TestPinDriftPauses(t *testing.T) {
	t.Parallel()
	c := setupController(t, "9.9.9-not-this")
	c.passGates(t)
	_, err := c.ctl.Promote(c.ctx, ops, "refund", "start")
	refusal(t, err, "pin drift: server version is")
	// Drift found while in shadow pauses it by itself.
	if _, err := c.ctl.Pool().Exec(c.ctx, `INSERT INTO workflow_rollouts (workflow, stage, canary_percent) VALUES ('refund', 'shadow', 0)`); err != nil {
		t.Fatal(err)
	}
	drift, paused, err := c.ctl.CheckDrift(c.ctx, "refund")
	if err != nil || !paused || len(drift) != 1 {
		t.Fatalf("drift check: %v %v %v", drift, paused, err)
	}
	st, _ := c.ctl.Status(c.ctx, "refund")
	if !strings.Contains(st.Paused, "server version is") || st.History[0].Action != "drift_pause" {
		t.Fatalf("after drift: %+v", st)
	}
	if _, again, _ := c.ctl.CheckDrift(c.ctx, "refund"); again {
		t.Fatal("a paused rollout paused twice")
	}
}

// TestPolicyAndTaskSupportPinsDrift pins max TTL, concurrency, status retention, owners and
// each tool's taskSupport: pins that match the policy and the live manifest give no drift;
// each one that does not is named, promotion is refused and the drift check pauses the
// rollout with every reason.
func TestPolicyAndTaskSupportPinsDrift(t *testing.T) {
	t.Parallel()
	t.Run("matching", func(t *testing.T) {
		t.Parallel()
		c := setupControllerPins(t, `{max_ttl: 10m, concurrency: 5, status_retention: 720h, owners: [team],
        task_support: {work_optional: optional, work_required: required, work_forbidden: forbidden}}`)
		if st, err := c.ctl.Status(c.ctx, "refund"); err != nil || len(st.Drift) != 0 {
			t.Fatalf("matching pins drifted: %v %q", err, st.Drift)
		}
	})
	t.Run("drifted", func(t *testing.T) {
		t.Parallel()
		c := setupControllerPins(t, `{max_ttl: 5m, concurrency: 3, status_retention: 24h, owners: [team, payments],
        task_support: {work_optional: required, work_required: required, work_gone: optional}}`)
		c.passGates(t)
		want := []string{
			"max TTL is 10m0s, pinned 5m0s",
			"concurrency is 5, pinned 3",
			"status retention is 720h0m0s, pinned 24h0m0s",
			"owners are team, pinned payments, team",
			"tool work_gone (taskSupport pinned optional) is no longer listed",
			"tool work_optional taskSupport is optional, pinned required",
		}
		st, err := c.ctl.Status(c.ctx, "refund")
		if err != nil || strings.Join(st.Drift, "|") != strings.Join(want, "|") {
			t.Fatalf("drift: %v\n got %q\nwant %q", err, st.Drift, want)
		}
		_, err = c.ctl.Promote(c.ctx, ops, "refund", "start")
		refusal(t, err, "pin drift: max TTL", "pin drift: concurrency", "pin drift: status retention", "pin drift: owners", "pin drift: tool work_optional taskSupport")
		if _, err := c.ctl.Pool().Exec(c.ctx, `INSERT INTO workflow_rollouts (workflow, stage, canary_percent) VALUES ('refund', 'shadow', 0)`); err != nil {
			t.Fatal(err)
		}
		if _, paused, err := c.ctl.CheckDrift(c.ctx, "refund"); err != nil || !paused {
			t.Fatalf("drift check: paused %v, %v", paused, err)
		}
		st, _ = c.ctl.Status(c.ctx, "refund")
		for _, w := range want {
			if !strings.Contains(st.Paused, w) {
				t.Errorf("pause reason %q does not say %q", st.Paused, w)
			}
		}
	})
}
