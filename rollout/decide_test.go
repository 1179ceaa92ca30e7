package rollout_test

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/rollout"
)

const toolName = "work"

// toolCase is one way the server may list (or not) the workflow's tool.
type toolCase struct {
	era    mcpclient.Era
	mode   string // "" = not listed
	listed bool
}

func manifestFor(era mcpclient.Era, capable bool, tc toolCase) *manifests.Manifest {
	m := &manifests.Manifest{Server: "s", Era: era, ProtocolVersion: string(era), ServerName: "peer", ServerVersion: "1"}
	if capable {
		if era == mcpclient.EraExtension {
			m.Tasks = manifests.TaskOps{ToolsCall: true, Get: true, Update: true, Cancel: true}
			m.Extensions = []string{mcpclient.ExtensionName}
		} else {
			m.Tasks = manifests.TaskOps{ToolsCall: true, Get: true, Result: true, List: true, Cancel: true}
		}
	}
	other := manifests.ModeForbidden
	if era == mcpclient.EraExtension {
		other = manifests.ModeServerDecides
	}
	m.Tools = []manifests.Tool{{Name: "other", Mode: other}}
	if tc.listed {
		m.Tools = append(m.Tools, manifests.Tool{Name: toolName, Mode: tc.mode})
	}
	return m
}

func workflow(taskUse, effect string, fb config.Fallback) config.Workflow {
	return config.Workflow{Name: "wf", Server: "s", Tool: toolName, Effect: effect, TaskUse: taskUse, Fallback: fb,
		Concurrency: 2, Backpressure: "429", RetryAfter: config.Duration{Duration: 7 * time.Second}}
}

var fallbacks = []config.Fallback{
	{Kind: config.FallbackSync, MaxDuration: config.Duration{Duration: 10 * time.Second}},
	{Kind: config.FallbackSync, MaxDuration: config.Duration{Duration: 2 * time.Minute}},
	{Kind: config.FallbackJobAPI, JobAPI: "http://jobs"},
	{Kind: config.FallbackHandoff},
	{Kind: config.FallbackReject},
}

// TestDecideEveryCombination generates every combination of era × capability × tool mode ×
// manifest state × task use × fallback × effect × kill switch × stage × bucket and checks the
// invariants on each one.
func TestDecideEveryCombination(t *testing.T) {
	t.Parallel()
	tools := []toolCase{
		{mcpclient.EraLegacy, manifests.ModeForbidden, true},
		{mcpclient.EraLegacy, manifests.ModeOptional, true},
		{mcpclient.EraLegacy, manifests.ModeRequired, true},
		{mcpclient.EraLegacy, "", false},
		{mcpclient.EraExtension, manifests.ModeServerDecides, true},
		{mcpclient.EraExtension, "", false},
	}
	states := []rollout.ManifestState{rollout.ManifestFresh, rollout.ManifestStale, rollout.ManifestUnreachable, rollout.ManifestMissing}
	kills := []struct{ engaged, unknown bool }{{false, false}, {true, false}, {false, true}}
	buckets := []int{10, 90} // inside and outside a 50% canary
	seen := map[rollout.Route]int{}
	reasons := map[rollout.Reason]int{}
	n := 0
	for _, tc := range tools {
		for _, capable := range []bool{true, false} {
			for _, state := range states {
				for _, taskUse := range []string{config.TaskRequired, config.TaskPreferred, config.TaskNever} {
					for _, fb := range fallbacks {
						for _, effect := range []string{config.EffectReadOnly, config.EffectEffectful} {
							for _, kill := range kills {
								for _, stage := range rollout.Stages {
									for _, bucket := range buckets {
										n++
										in := rollout.Input{
											Workflow: workflow(taskUse, effect, fb), ManifestState: state,
											KillSwitch: kill.engaged, KillSwitchUnknown: kill.unknown,
											Stage: stage, CanaryPercent: 50, Bucket: bucket,
										}
										if state != rollout.ManifestMissing {
											in.Manifest = manifestFor(tc.era, capable, tc)
										}
										d := rollout.Decide(in)
										name := fmt.Sprintf("era=%s cap=%v mode=%q state=%s use=%s fb=%s/%s effect=%s kill=%+v stage=%s bucket=%d",
											tc.era, capable, tc.mode, state, taskUse, fb.Kind, fb.MaxDuration.Duration, effect, kill, stage, bucket)
										checkInvariants(t, name, in, tc, capable, d)
										if again := rollout.Decide(in); again != d {
											t.Errorf("%s: not deterministic: %+v then %+v", name, d, again)
										}
										seen[d.Route]++
										reasons[d.Reason]++
									}
								}
							}
						}
					}
				}
			}
		}
	}
	if n != 6*2*4*3*5*2*3*4*2 {
		t.Fatalf("generated %d combinations", n)
	}
	for _, r := range rollout.Routes {
		if seen[r] == 0 {
			t.Errorf("no combination routes to %s", r)
		}
	}
	for r := range rollout.Reasons {
		if r == rollout.ReasonExtensionRequired || r == rollout.ReasonAtCapacity {
			continue // produced by Fallback and CheckCapacity, not Decide
		}
		if reasons[r] == 0 {
			t.Errorf("no combination gives reason %s", r)
		}
	}
	t.Logf("%d combinations: routes %v", n, seen)
}

func checkInvariants(t *testing.T, name string, in rollout.Input, tc toolCase, capable bool, d rollout.Decision) {
	t.Helper()
	w := in.Workflow
	if _, ok := rollout.Reasons[d.Reason]; !ok {
		t.Errorf("%s: undocumented reason %q", name, d.Reason)
	}
	if d.Sentence == "" {
		t.Errorf("%s: no sentence", name)
	}
	fresh := in.ManifestState == rollout.ManifestFresh
	legacyModeOK := tc.mode == manifests.ModeOptional || tc.mode == manifests.ModeRequired
	stageAllows := in.Stage == rollout.StageFull || (in.Stage == rollout.StageCanary && in.Bucket < in.CanaryPercent)
	taskAllowed := fresh && capable && tc.listed && (tc.era == mcpclient.EraExtension || legacyModeOK) &&
		!in.KillSwitch && !in.KillSwitchUnknown && w.TaskUse != config.TaskNever && stageAllows
	switch d.Route {
	case rollout.RouteTask:
		if !taskAllowed {
			t.Errorf("%s: task route without every condition met", name)
		}
	case rollout.RouteSync:
		if w.Fallback.Kind != config.FallbackSync {
			t.Errorf("%s: sync route with fallback %s", name, w.Fallback.Kind)
		}
		if w.TaskUse == config.TaskRequired && w.Fallback.MaxDuration.Duration > rollout.MaxRequiredSync {
			t.Errorf("%s: Task-required workflow sent as a long synchronous call", name)
		}
		if fresh && tc.era == mcpclient.EraLegacy && tc.mode == manifests.ModeRequired {
			t.Errorf("%s: plain call to a required tool", name)
		}
		if fresh && !tc.listed {
			t.Errorf("%s: plain call to an unlisted tool", name)
		}
		if d.MaxSync != w.Fallback.MaxDuration.Duration {
			t.Errorf("%s: max sync %s", name, d.MaxSync)
		}
	case rollout.RouteJobAPI:
		if w.Fallback.Kind != config.FallbackJobAPI {
			t.Errorf("%s: job_api route with fallback %s", name, w.Fallback.Kind)
		}
	case rollout.RouteHandoff:
		if w.Fallback.Kind != config.FallbackHandoff {
			t.Errorf("%s: handoff route with fallback %s", name, w.Fallback.Kind)
		}
	case rollout.RouteReject:
	default:
		t.Errorf("%s: unknown route %q", name, d.Route)
	}
	if taskAllowed && d.Route != rollout.RouteTask {
		t.Errorf("%s: every condition met but route %s (%s)", name, d.Route, d.Reason)
	}
	if d.DeclareExtension != (d.Route == rollout.RouteTask && tc.era == mcpclient.EraExtension) {
		t.Errorf("%s: declare extension %v on route %s", name, d.DeclareExtension, d.Route)
	}
	if in.Stage == rollout.StageShadow && w.TaskUse != config.TaskNever && !in.KillSwitch && !in.KillSwitchUnknown {
		safety := d.Route == rollout.RouteReject && (d.Reason == rollout.ReasonSyncTooLong ||
			d.Reason == rollout.ReasonToolRequiresTask || d.Reason == rollout.ReasonToolNotListed)
		if !d.Shadow.Applies || (d.Reason != rollout.ReasonShadow && !safety) {
			t.Errorf("%s: shadow stage without shadow (%+v, %s)", name, d.Shadow, d.Reason)
		}
	}
	if d.Shadow.CompareAsTask && w.Effect != config.EffectReadOnly {
		t.Errorf("%s: an effectful workflow would run twice in shadow", name)
	}
	if d.Shadow.Applies && d.Route == rollout.RouteTask {
		t.Errorf("%s: shadow executes the Task route", name)
	}
	if in.KillSwitchUnknown && d.Route == rollout.RouteTask {
		t.Errorf("%s: kill switch error did not fail safe", name)
	}
}

// TestDecideKeyCases pins exact routes and reasons of the cases people reason about.
func TestDecideKeyCases(t *testing.T) {
	t.Parallel()
	legacy := func(mode string, capable bool) *manifests.Manifest {
		return manifestFor(mcpclient.EraLegacy, capable, toolCase{mcpclient.EraLegacy, mode, true})
	}
	ext := manifestFor(mcpclient.EraExtension, true, toolCase{mcpclient.EraExtension, manifests.ModeServerDecides, true})
	reject := config.Fallback{Kind: config.FallbackReject}
	sync10 := fallbacks[0]
	cases := []struct {
		name    string
		in      rollout.Input
		route   rollout.Route
		reason  rollout.Reason
		declare bool
	}{
		{"full legacy optional runs as task", rollout.Input{Workflow: workflow(config.TaskPreferred, config.EffectReadOnly, sync10),
			Manifest: legacy(manifests.ModeOptional, true), ManifestState: rollout.ManifestFresh, Stage: rollout.StageFull},
			rollout.RouteTask, rollout.ReasonTaskFull, false},
		{"full extension era declares the extension", rollout.Input{Workflow: workflow(config.TaskRequired, config.EffectEffectful, reject),
			Manifest: ext, ManifestState: rollout.ManifestFresh, Stage: rollout.StageFull},
			rollout.RouteTask, rollout.ReasonTaskFull, true},
		{"peer without tasks takes the sync fallback", rollout.Input{Workflow: workflow(config.TaskPreferred, config.EffectReadOnly, sync10),
			Manifest: legacy(manifests.ModeForbidden, false), ManifestState: rollout.ManifestFresh, Stage: rollout.StageFull},
			rollout.RouteSync, rollout.ReasonNoTaskCapability, false},
		{"required tool without capability is never plain-called", rollout.Input{Workflow: workflow(config.TaskPreferred, config.EffectReadOnly, sync10),
			Manifest: legacy(manifests.ModeRequired, false), ManifestState: rollout.ManifestFresh, Stage: rollout.StageFull},
			rollout.RouteReject, rollout.ReasonToolRequiresTask, false},
		{"kill switch sends a required workflow to reject", rollout.Input{Workflow: workflow(config.TaskRequired, config.EffectEffectful, reject),
			Manifest: legacy(manifests.ModeRequired, true), ManifestState: rollout.ManifestFresh, Stage: rollout.StageFull, KillSwitch: true},
			rollout.RouteReject, rollout.ReasonKillSwitch, false},
		{"kill switch unreadable fails safe", rollout.Input{Workflow: workflow(config.TaskPreferred, config.EffectReadOnly, sync10),
			Manifest: legacy(manifests.ModeOptional, true), ManifestState: rollout.ManifestFresh, Stage: rollout.StageFull, KillSwitchUnknown: true},
			rollout.RouteSync, rollout.ReasonKillSwitchUnknown, false},
		{"canary inside", rollout.Input{Workflow: workflow(config.TaskPreferred, config.EffectReadOnly, sync10),
			Manifest: legacy(manifests.ModeOptional, true), ManifestState: rollout.ManifestFresh, Stage: rollout.StageCanary, CanaryPercent: 20, Bucket: 19},
			rollout.RouteTask, rollout.ReasonTaskCanary, false},
		{"canary outside", rollout.Input{Workflow: workflow(config.TaskPreferred, config.EffectReadOnly, sync10),
			Manifest: legacy(manifests.ModeOptional, true), ManifestState: rollout.ManifestFresh, Stage: rollout.StageCanary, CanaryPercent: 20, Bucket: 20},
			rollout.RouteSync, rollout.ReasonCanaryOut, false},
		{"shadow runs the incumbent job API", rollout.Input{Workflow: workflow(config.TaskPreferred, config.EffectEffectful, fallbacks[2]),
			Manifest: legacy(manifests.ModeOptional, true), ManifestState: rollout.ManifestFresh, Stage: rollout.StageShadow},
			rollout.RouteJobAPI, rollout.ReasonShadow, false},
		{"long sync of a required workflow is refused", rollout.Input{Workflow: workflow(config.TaskRequired, config.EffectEffectful, fallbacks[1]),
			ManifestState: rollout.ManifestMissing, Stage: rollout.StageFull},
			rollout.RouteReject, rollout.ReasonSyncTooLong, false},
		{"unreachable server hands off", rollout.Input{Workflow: workflow(config.TaskRequired, config.EffectReversible, fallbacks[3]),
			Manifest: legacy(manifests.ModeRequired, true), ManifestState: rollout.ManifestUnreachable, Stage: rollout.StageFull},
			rollout.RouteHandoff, rollout.ReasonServerUnreachable, false},
		{"forbidden tool falls back", rollout.Input{Workflow: workflow(config.TaskPreferred, config.EffectReadOnly, sync10),
			Manifest: legacy(manifests.ModeForbidden, true), ManifestState: rollout.ManifestFresh, Stage: rollout.StageFull},
			rollout.RouteSync, rollout.ReasonToolForbidsTask, false},
		{"stage off", rollout.Input{Workflow: workflow(config.TaskRequired, config.EffectEffectful, reject),
			Manifest: legacy(manifests.ModeRequired, true), ManifestState: rollout.ManifestFresh, Stage: rollout.StageOff},
			rollout.RouteReject, rollout.ReasonStageOff, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := rollout.Decide(tc.in)
			if d.Route != tc.route || d.Reason != tc.reason || d.DeclareExtension != tc.declare {
				t.Fatalf("got %s/%s declare=%v (%s), want %s/%s declare=%v", d.Route, d.Reason, d.DeclareExtension, d.Sentence, tc.route, tc.reason, tc.declare)
			}
		})
	}
}

func TestShadowComparesReadOnlyOnly(t *testing.T) {
	t.Parallel()
	m := manifestFor(mcpclient.EraLegacy, true, toolCase{mcpclient.EraLegacy, manifests.ModeOptional, true})
	for _, tc := range []struct {
		effect  string
		compare bool
	}{{config.EffectReadOnly, true}, {config.EffectEffectful, false}, {config.EffectReversible, false}} {
		d := rollout.Decide(rollout.Input{Workflow: workflow(config.TaskPreferred, tc.effect, fallbacks[0]), Manifest: m,
			ManifestState: rollout.ManifestFresh, Stage: rollout.StageShadow})
		if d.Route != rollout.RouteSync || !d.Shadow.Applies || d.Shadow.CompareAsTask != tc.compare {
			t.Errorf("%s: %+v", tc.effect, d)
		}
	}
}

func TestFallbackTurnsExtensionRequiredIntoPolicyFallback(t *testing.T) {
	t.Parallel()
	extErr := fmt.Errorf("call work: %w", &mcpclient.ExtensionRequiredError{
		RPC:                  &mcpclient.RPCError{Code: mcpclient.CodeMissingCapability, Message: "needs tasks"},
		RequiredCapabilities: []byte(`{"extensions":{"io.modelcontextprotocol/tasks":{}}}`),
	})
	sync := rollout.Decision{Route: rollout.RouteSync, Reason: rollout.ReasonStageOff, Era: mcpclient.EraExtension}
	cases := []struct {
		fb   config.Fallback
		want rollout.Route
	}{
		{fallbacks[0], rollout.RouteReject}, // the plain call itself was the fallback: never retried
		{fallbacks[2], rollout.RouteJobAPI},
		{fallbacks[3], rollout.RouteHandoff},
		{fallbacks[4], rollout.RouteReject},
	}
	for _, tc := range cases {
		d, ok := rollout.Fallback(workflow(config.TaskPreferred, config.EffectEffectful, tc.fb), sync, extErr)
		if !ok || d.Route != tc.want || d.Reason != rollout.ReasonExtensionRequired || d.DeclareExtension {
			t.Errorf("fallback %s: ok=%v %+v", tc.fb.Kind, ok, d)
		}
		if d.Route == rollout.RouteSync || d.Route == rollout.RouteTask {
			t.Errorf("fallback %s retried the call as %s", tc.fb.Kind, d.Route)
		}
	}
	if d, ok := rollout.Fallback(workflow(config.TaskPreferred, config.EffectEffectful, fallbacks[0]), sync, errors.New("boom")); ok || d != sync {
		t.Errorf("other error: ok=%v %+v", ok, d)
	}
}

func TestCheckCapacity(t *testing.T) {
	t.Parallel()
	m := manifestFor(mcpclient.EraLegacy, true, toolCase{mcpclient.EraLegacy, manifests.ModeOptional, true})
	mk := func(bp string) rollout.Input {
		w := workflow(config.TaskPreferred, config.EffectReadOnly, fallbacks[0])
		w.Backpressure = bp
		return rollout.Input{Workflow: w, Manifest: m, ManifestState: rollout.ManifestFresh, Stage: rollout.StageFull}
	}
	t.Run("below the cap the decision stands", func(t *testing.T) {
		t.Parallel()
		in := mk("429")
		d := rollout.Decide(in)
		c := rollout.CheckCapacity(in, d, 1)
		if !c.Allowed() || c.Outcome != rollout.CapacityAllowed || c.Decision != d {
			t.Fatalf("%+v", c)
		}
	})
	t.Run("at the cap 429 with Retry-After", func(t *testing.T) {
		t.Parallel()
		in := mk("429")
		c := rollout.CheckCapacity(in, rollout.Decide(in), 2)
		if c.Allowed() || c.Status != http.StatusTooManyRequests || c.RetryAfter != 7*time.Second || c.RetryAfterSeconds() != "7" || c.Decision.Reason != rollout.ReasonAtCapacity {
			t.Fatalf("%+v", c)
		}
	})
	t.Run("at the cap the fallback route", func(t *testing.T) {
		t.Parallel()
		in := mk("fallback")
		c := rollout.CheckCapacity(in, rollout.Decide(in), 5)
		if !c.Allowed() || c.Outcome != rollout.CapacityFallback || c.Decision.Route != rollout.RouteSync || c.Decision.Reason != rollout.ReasonAtCapacity {
			t.Fatalf("%+v", c)
		}
	})
	t.Run("fallback at the cap never plain-calls a required tool", func(t *testing.T) {
		t.Parallel()
		in := mk("fallback")
		in.Manifest = manifestFor(mcpclient.EraLegacy, true, toolCase{mcpclient.EraLegacy, manifests.ModeRequired, true})
		c := rollout.CheckCapacity(in, rollout.Decide(in), 5)
		if c.Decision.Route != rollout.RouteReject || c.Decision.Reason != rollout.ReasonToolRequiresTask {
			t.Fatalf("%+v", c)
		}
	})
	t.Run("non-task routes are not capped", func(t *testing.T) {
		t.Parallel()
		in := mk("429")
		in.Stage = rollout.StageOff
		c := rollout.CheckCapacity(in, rollout.Decide(in), 99)
		if !c.Allowed() || c.Decision.Route != rollout.RouteSync {
			t.Fatalf("%+v", c)
		}
	})
}

// TestBucketDistribution checks that tenants spread evenly over the 100 buckets and that a
// tenant's bucket never changes.
func TestBucketDistribution(t *testing.T) {
	t.Parallel()
	const tenants = 100000
	counts := make([]int, 100)
	in10 := 0
	for i := range tenants {
		tenant := fmt.Sprintf("tenant-%d", i)
		b := rollout.Bucket("refund", tenant)
		if b < 0 || b > 99 {
			t.Fatalf("bucket %d", b)
		}
		if b != rollout.Bucket("refund", tenant) {
			t.Fatalf("bucket of %s not stable", tenant)
		}
		counts[b]++
		if rollout.InCanary(b, 10) {
			in10++
		}
	}
	// Chi-square against uniform, 99 degrees of freedom: 99.9th percentile ≈ 148.2.
	exp := float64(tenants) / 100
	chi := 0.0
	for _, c := range counts {
		chi += (float64(c) - exp) * (float64(c) - exp) / exp
	}
	if chi > 148.2 {
		t.Errorf("chi-square %.1f: buckets not uniform: %v", chi, counts)
	}
	if share := float64(in10) / tenants; math.Abs(share-0.10) > 0.01 {
		t.Errorf("10%% canary holds %.3f of tenants", share)
	}
	if rollout.Bucket("refund", "acme") == rollout.Bucket("payout", "acme") && rollout.Bucket("refund", "globex") == rollout.Bucket("payout", "globex") &&
		rollout.Bucket("refund", "initech") == rollout.Bucket("payout", "initech") {
		t.Error("buckets do not depend on the workflow")
	}
	// Raising the percent never moves a tenant out of the canary.
	for i := range 1000 {
		b := rollout.Bucket("refund", fmt.Sprint(i))
		for p := 0; p < 100; p++ {
			if rollout.InCanary(b, p) && !rollout.InCanary(b, p+1) {
				t.Fatalf("tenant %d left the canary when it grew to %d%%", i, p+1)
			}
		}
	}
}
