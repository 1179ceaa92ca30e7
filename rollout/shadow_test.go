package rollout_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/rollout"
)

const chargeWorkflow = `
  - {name: charge, server: rcv, tool: work_optional, effect: effectful, task_use: preferred, fallback: {kind: job_api, job_api: "%[2]s"},
     owners: [ops], idempotency_argument: idempotency_key}
`

// TestShadowNeverExecutesTwice runs an effectful workflow in the shadow stage through the real
// router against the reference receiver: the incumbent job API executes each operation once, the
// Task route's decision is only recorded, and the receiver's counters show no tool execution and
// one effect per operation.
func TestShadowNeverExecutesTwice(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 60*time.Second)
	b := opstest.Setup(t, opstest.Options{Extra: chargeWorkflow})
	mstore := manifests.NewStore(b.Pool)
	prober, err := manifests.NewProber(manifests.ProberConfig{Policy: b.Policy, Store: mstore})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prober.ProbeNow(ctx, "rcv", manifests.Probe{Trigger: manifests.TriggerCLI}); err != nil {
		t.Fatal(err)
	}
	kill, err := killswitch.Open(ctx, b.Pool, killswitch.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kill.Close)
	stages := rollout.NewStore(b.Pool, b.Policy)
	if err := stages.Set(ctx, "charge", rollout.StageShadow, 0, "ops"); err != nil {
		t.Fatal(err)
	}
	router, err := rollout.NewRouter(rollout.RouterConfig{Policy: b.Policy, Manifests: mstore, Stages: stages, KillSwitch: kill})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var shadows []rollout.Decision
	ops, err := operations.NewService(operations.Config{Store: b.Store, Policy: b.Policy, Servers: b.Servers,
		Router: operations.RouterFunc(func(ctx context.Context, in operations.RouteInput) (operations.Decision, error) {
			r, err := router.Route(ctx, in.Request.Workflow, in.Request.Tenant)
			if err != nil {
				return operations.Decision{}, err
			}
			if r.Shadow != nil {
				mu.Lock()
				shadows = append(shadows, *r.Shadow)
				mu.Unlock()
			}
			return operations.Decision{Route: operations.Route(r.Decision.Route), ReasonCode: string(r.Decision.Reason), Reason: r.Decision.Sentence}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	before := b.Receiver.Counters()
	const n = 3
	for i := range n {
		key := fmt.Sprintf("ch-%d", i)
		res, err := ops.Start(ctx, operations.Scope{All: true}, operations.StartRequest{IdempotencyKey: key, Workflow: "charge", Tenant: "acme",
			Actor: "app:billing", Arguments: fmt.Appendf(nil, `{"idempotency_key": %q}`, key)})
		if err != nil {
			t.Fatalf("start %s: %v", key, err)
		}
		d, err := ops.Get(ctx, operations.Scope{All: true}, res.Response.OperationID)
		if err != nil {
			t.Fatal(err)
		}
		if d.Route != operations.RouteJobAPI || d.ReasonCode != string(rollout.ReasonShadow) {
			t.Fatalf("%s went %s (%s), want the incumbent job API in shadow", key, d.Route, d.ReasonCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(shadows) != n {
		t.Fatalf("%d shadow decisions recorded, want %d", len(shadows), n)
	}
	for _, s := range shadows {
		if s.Route != rollout.RouteTask {
			t.Errorf("the Task route would have gone %s (%s)", s.Route, s.Reason)
		}
	}
	// The fake system of record: no tool executed, each key applied at most once.
	deadline := time.Now().Add(10 * time.Second)
	for {
		after := b.Receiver.Counters()
		if after.Executions["work_optional"] != before.Executions["work_optional"] || after.ToolCalls["work_optional"] != before.ToolCalls["work_optional"] {
			t.Fatalf("shadow executed the tool: %d executions, %d calls", after.Executions["work_optional"], after.ToolCalls["work_optional"])
		}
		if after.EffectsRefused != before.EffectsRefused || after.Effects-before.Effects > n {
			t.Fatalf("a second execution reached the system of record: %+v", after)
		}
		if after.Effects-before.Effects == n || time.Now().After(deadline) {
			if after.Effects-before.Effects != n {
				t.Fatalf("%d effects, want %d (one per operation)", after.Effects-before.Effects, n)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}
