package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/rollout"
)

const digestWorkflow = `
  - {name: digest, server: rcv, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 2s},
     owners: [ops], rollout: {steps: [50], hold: 0s, on_breach: pause_and_kill, thresholds: {min_operations: 4, unknown_rate: 0.2}}}
`

// TestInjectedFaultsInTheCanaryPauseTheRollout runs canary (Task route) and incumbent (sync)
// operations against the reference receiver; once its fault knob drops the CreateTaskResult of
// the canary's tool, the analysis pauses the rollout by itself and engages the kill switch.
func TestInjectedFaultsInTheCanaryPauseTheRollout(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 60*time.Second)
	b := opstest.Setup(t, opstest.Options{Extra: digestWorkflow})
	// The canary side is the Task route, the incumbent the workflow's sync fallback.
	ops, err := operations.NewService(operations.Config{Store: b.Store, Policy: b.Policy, Servers: b.Servers,
		PollFloor: 20 * time.Millisecond, DefaultPoll: 50 * time.Millisecond,
		Router: operations.RouterFunc(func(_ context.Context, in operations.RouteInput) (operations.Decision, error) {
			if strings.HasPrefix(in.Request.IdempotencyKey, "canary-") {
				return operations.Decision{Route: operations.RouteTask, ReasonCode: string(rollout.ReasonTaskCanary), Reason: "canary"}, nil
			}
			return operations.Decision{Route: operations.RouteSync, ReasonCode: string(rollout.ReasonCanaryOut), Reason: "incumbent"}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	kill, err := killswitch.Open(ctx, b.Pool, killswitch.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kill.Close)
	c, err := rollout.NewController(rollout.ControllerConfig{Policy: b.Policy, Pool: b.Pool, Evidence: gates.NewStore(b.Pool),
		Manifests: manifests.NewStore(b.Pool), Kill: kill, Build: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stages().Set(ctx, "digest", rollout.StageCanary, 50, "ops"); err != nil {
		t.Fatal(err)
	}
	n := 0
	start := func(side string) {
		t.Helper()
		n++
		_, err := ops.Start(ctx, operations.Scope{All: true}, operations.StartRequest{IdempotencyKey: fmt.Sprintf("%s-%d", side, n),
			Workflow: "digest", Tenant: "acme", Actor: "app:reports", Arguments: []byte(`{"duration_ms": 20}`)})
		if err != nil {
			t.Fatalf("start %s: %v", side, err)
		}
	}
	for range 4 {
		start("canary")
		start("incumbent")
	}
	a, paused, err := c.Watch(ctx, "digest")
	if err != nil || paused || !a.Judged || a.Canary.Operations != 4 || a.Incumbent.Operations != 4 || a.Canary.Unknown != 0 {
		t.Fatalf("healthy canary: paused %v, %v, %+v", paused, err, a)
	}

	b.Receiver.Knobs().SetTool("work_optional", receiver.Fault{DropBeforeCreateResult: true})
	for range 4 {
		start("canary")
	}
	a, paused, err = c.Watch(ctx, "digest")
	if err != nil || !paused {
		t.Fatalf("faulty canary did not pause: %v %+v", err, a)
	}
	if a.Canary.Unknown != 4 || a.Canary.Operations != 8 || a.Incumbent.Unknown != 0 || len(a.Breaches) != 1 ||
		!strings.Contains(a.Breaches[0], "unknown-outcome rate 50.0% (4 of 8) above 20.0%") {
		t.Fatalf("analysis: %+v", a)
	}
	st, err := c.Status(ctx, "digest")
	if err != nil || !strings.Contains(st.Paused, "unknown-outcome rate 50.0%") || st.History[0].Action != "auto_pause" ||
		!strings.Contains(string(st.History[0].Detail), `"unknown": 4`) {
		t.Fatalf("status after the breach: %v %+v", err, st)
	}
	if kv := kill.Check(ctx, rollout.StartCheck{Workflow: "digest", Server: "rcv", Tenant: "acme"}); !kv.Blocked {
		t.Fatalf("kill switch not engaged by the breach: %+v", kv)
	}
	if _, again, _ := c.Watch(ctx, "digest"); again {
		t.Fatal("a paused rollout paused again")
	}
	// The charts' series cuts the same window into intervals measured by the same query: the
	// intervals add up to the analysis.
	a, err = c.Analyze(ctx, "digest")
	if err != nil {
		t.Fatal(err)
	}
	sr, err := c.Series(ctx, "digest", 6)
	if err != nil || len(sr.Points) != 6 || sr.Since.Sub(a.Since).Abs() > time.Second {
		t.Fatalf("series: %v %+v", err, sr)
	}
	var sum [2]rollout.Side
	for _, p := range sr.Points {
		for i, s := range []rollout.Side{p.Incumbent, p.Canary} {
			sum[i].Operations += s.Operations
			sum[i].Failed += s.Failed
			sum[i].Unknown += s.Unknown
			if s.Operations > 0 && s.UnknownRate != float64(s.Unknown)/float64(s.Operations) {
				t.Fatalf("interval %s: unknown rate %v of %d/%d", p.Start, s.UnknownRate, s.Unknown, s.Operations)
			}
		}
	}
	for i, want := range []rollout.Side{a.Incumbent, a.Canary} {
		if sum[i].Operations != want.Operations || sum[i].Failed != want.Failed || sum[i].Unknown != want.Unknown {
			t.Fatalf("side %d: intervals add up to %+v, the analysis says %+v", i, sum[i], want)
		}
	}
}

const briefWorkflow = `
  - {name: brief, server: rcv, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 2s},
     owners: [ops], rollout: {steps: [50, 100], hold: 0s, require_gates: false, thresholds: {min_operations: 3, unknown_rate: 0.2}}}
`

// TestUnhealthyStepBlocksPromotion: canary operations whose creation is lost cross the
// unknown-outcome threshold; promotion is refused naming the figures before the analysis loop
// has paused anything, and after the pause and a resume the step (and its hold) starts again.
func TestUnhealthyStepBlocksPromotion(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 60*time.Second)
	b := opstest.Setup(t, opstest.Options{Extra: briefWorkflow})
	svc, err := operations.NewService(operations.Config{Store: b.Store, Policy: b.Policy, Servers: b.Servers,
		PollFloor: 20 * time.Millisecond, DefaultPoll: 50 * time.Millisecond,
		Router: operations.RouterFunc(func(_ context.Context, in operations.RouteInput) (operations.Decision, error) {
			return operations.Decision{Route: operations.RouteTask, ReasonCode: string(rollout.ReasonTaskCanary), Reason: "canary"}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	c, err := rollout.NewController(rollout.ControllerConfig{Policy: b.Policy, Pool: b.Pool, Evidence: gates.NewStore(b.Pool),
		Manifests: manifests.NewStore(b.Pool), Build: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stages().Set(ctx, "brief", rollout.StageCanary, 50, "ops"); err != nil {
		t.Fatal(err)
	}
	b.Receiver.Knobs().SetTool("work_optional", receiver.Fault{DropBeforeCreateResult: true})
	for i := range 3 {
		if _, err := svc.Start(ctx, operations.Scope{All: true}, operations.StartRequest{IdempotencyKey: fmt.Sprintf("brief-%d", i),
			Workflow: "brief", Tenant: "acme", Actor: "app:reports", Arguments: []byte(`{"duration_ms": 20}`)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.Promote(ctx, ops, "brief", "looks fine")
	refusal(t, err, "unhealthy in this step: canary unknown-outcome rate 100.0% (3 of 3) above 20.0%")
	if st, _ := c.Status(ctx, "brief"); st.Stage != rollout.StageCanary || st.Percent != 50 || len(st.History) != 0 {
		t.Fatalf("a refused promotion moved the rollout: %+v", st)
	}
	// The analysis loop pauses it; a resume restarts the step, whose analysis then starts
	// empty, so the promotion is judged on the new hold only.
	if _, paused, err := c.Watch(ctx, "brief"); err != nil || !paused {
		t.Fatalf("watch: paused %v, %v", paused, err)
	}
	before := time.Now()
	st, err := c.Resume(ctx, ops, "brief", "fixed the receiver")
	if err != nil || st.StepSince.Before(before.Add(-time.Second)) {
		t.Fatalf("resume: %v, step since %s", err, st.StepSince)
	}
	b.Receiver.Knobs().SetTool("work_optional", receiver.Fault{})
	if a, err := c.Analyze(ctx, "brief"); err != nil || a.Canary.Operations != 0 {
		t.Fatalf("analysis after the restart: %v %+v", err, a)
	}
	if st, err := c.Promote(ctx, ops, "brief", "healthy since the restart"); err != nil || st.Stage != rollout.StageCanary || st.Percent != 100 {
		t.Fatalf("promotion after a healthy restart: %v %+v", err, st)
	}
}
