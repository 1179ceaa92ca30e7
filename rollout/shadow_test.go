package rollout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
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
	// The shadow pass compares the projected decisions only: no call, no Task.
	sh, err := rollout.NewShadower(rollout.ShadowConfig{Policy: b.Policy, Pool: b.Pool, Router: router, Conns: b.Servers})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := sh.RunOnce(ctx); err != nil || got != n {
		t.Fatalf("shadow pass compared %d, %v; want %d", got, err, n)
	}
	ctl, err := rollout.NewController(rollout.ControllerConfig{Policy: b.Policy, Pool: b.Pool, Evidence: gates.NewStore(b.Pool),
		Manifests: mstore, Build: "test"})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := ctl.Comparisons(ctx, "charge", 10)
	if err != nil || len(cs) != n {
		t.Fatalf("comparisons: %v %d", err, len(cs))
	}
	for _, c := range cs {
		if c.Kind != rollout.ComparisonProjection || c.ShadowTaskID != "" || c.ShadowRoute != "task" || c.IncumbentRoute != "job_api" || len(c.Divergences) != 0 {
			t.Fatalf("effectful comparison: %+v", c)
		}
	}
	if got := b.Receiver.Counters().TasksCreated - before.TasksCreated; got != 0 {
		t.Fatalf("the shadow created %d tasks for an effectful workflow", got)
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

const lookupWorkflow = `
  - {name: inventory, server: rcv, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 5s},
     owners: [ops]}
`

// shadowBed is a workflow in the shadow stage behind the real router, with a Shadower.
type shadowBed struct {
	b      *opstest.Bundle
	ops    *operations.Service
	shadow *rollout.Shadower
	ctl    *rollout.Controller
}

func setupShadow(t *testing.T, extra, workflow string) *shadowBed {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	b := opstest.Setup(t, opstest.Options{Extra: extra})
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
	if err := stages.Set(ctx, workflow, rollout.StageShadow, 0, "ops"); err != nil {
		t.Fatal(err)
	}
	router, err := rollout.NewRouter(rollout.RouterConfig{Policy: b.Policy, Manifests: mstore, Stages: stages, KillSwitch: kill})
	if err != nil {
		t.Fatal(err)
	}
	sb := &shadowBed{b: b}
	if sb.ops, err = operations.NewService(operations.Config{Store: b.Store, Policy: b.Policy, Servers: b.Servers,
		Router: operations.RouterFunc(func(ctx context.Context, in operations.RouteInput) (operations.Decision, error) {
			r, err := router.Route(ctx, in.Request.Workflow, in.Request.Tenant)
			if err != nil {
				return operations.Decision{}, err
			}
			return operations.Decision{Route: operations.Route(r.Decision.Route), ReasonCode: string(r.Decision.Reason), Reason: r.Decision.Sentence,
				Context: r.Context().JSON()}, nil
		})}); err != nil {
		t.Fatal(err)
	}
	if sb.shadow, err = rollout.NewShadower(rollout.ShadowConfig{Policy: b.Policy, Pool: b.Pool, Router: router, Conns: b.Servers,
		Replica: "r1", Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if sb.ctl, err = rollout.NewController(rollout.ControllerConfig{Policy: b.Policy, Pool: b.Pool, Evidence: gates.NewStore(b.Pool),
		Manifests: mstore, Build: "test"}); err != nil {
		t.Fatal(err)
	}
	return sb
}

func (sb *shadowBed) start(t *testing.T, ctx context.Context, workflow, key, args string) string {
	t.Helper()
	res, err := sb.ops.Start(ctx, operations.Scope{All: true}, operations.StartRequest{IdempotencyKey: key, Workflow: workflow, Tenant: "acme",
		Actor: "app:reports", Arguments: []byte(args)})
	if err != nil {
		t.Fatalf("start %s: %v", key, err)
	}
	d, err := sb.ops.Get(ctx, operations.Scope{All: true}, res.Response.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	if d.ReasonCode != string(rollout.ReasonShadow) || d.Route == operations.RouteTask {
		t.Fatalf("%s went %s (%s), want the incumbent in shadow", key, d.Route, d.ReasonCode)
	}
	// The ledger row keeps what sent it there.
	var rc rollout.RouteContext
	if err := json.Unmarshal(d.RouteContext, &rc); err != nil || rc.Stage != rollout.StageShadow || rc.ShadowRoute != rollout.RouteTask ||
		rc.Bucket != rollout.Bucket(workflow, "acme") ||
		rc.Words() != fmt.Sprintf("shadow, Task route would go task · bucket %d", rollout.Bucket(workflow, "acme")) {
		t.Fatalf("%s route context %s: %+v %v", key, d.RouteContext, rc, err)
	}
	return res.Response.OperationID
}

// TestReadOnlyShadowRunsAsTaskAndCompares: a read-only workflow in shadow is executed by its
// incumbent (a synchronous call), and the shadow runs the same call once more as a Task on the
// reference receiver and compares the two; equal answers give no divergence, a Task creation
// whose answer is lost is listed as a divergence of state; nothing runs a third time.
func TestReadOnlyShadowRunsAsTaskAndCompares(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 60*time.Second)
	sb := setupShadow(t, lookupWorkflow, "inventory")
	before := sb.b.Receiver.Counters()
	ids := map[string]bool{}
	for i := range 2 {
		ids[sb.start(t, ctx, "inventory", fmt.Sprintf("lk-%d", i), `{"text": "42 rows"}`)] = true
	}
	n, err := sb.shadow.RunOnce(ctx)
	if err != nil || n != 2 {
		t.Fatalf("shadow pass compared %d, %v; want 2", n, err)
	}
	if n, err := sb.shadow.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("a second pass compared %d again, %v", n, err)
	}
	after := sb.b.Receiver.Counters()
	if got := after.Executions["work_optional"] - before.Executions["work_optional"]; got != 4 {
		t.Fatalf("%d executions, want 4 (each operation once on the incumbent, once as a shadow Task)", got)
	}
	if got := after.TasksCreated - before.TasksCreated; got != 2 {
		t.Fatalf("%d tasks created, want 2 shadow Tasks", got)
	}
	cs, err := sb.ctl.Comparisons(ctx, "inventory", 10)
	if err != nil || len(cs) != 2 {
		t.Fatalf("comparisons: %v %+v", err, cs)
	}
	for _, c := range cs {
		if !ids[c.OperationID] || c.Kind != rollout.ComparisonRun || c.State != "compared" || c.ShadowTaskID == "" ||
			c.ShadowState != "completed" || c.IncumbentState != "completed" || c.IncumbentRoute != "sync" ||
			c.ShadowResultHash == "" || c.ShadowResultHash != c.IncumbentResultHash || len(c.Divergences) != 0 {
			t.Fatalf("comparison of equal answers: %+v", c)
		}
	}

	// The shadow Task's creation answer is lost: a divergence of state, and no resend.
	id := sb.start(t, ctx, "inventory", "lk-lost", `{"text": "7 rows"}`)
	sb.b.Receiver.Knobs().SetTool("work_optional", receiver.Fault{DropBeforeCreateResult: true})
	mid := sb.b.Receiver.Counters()
	if n, err := sb.shadow.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("shadow pass compared %d, %v; want 1", n, err)
	}
	if got := sb.b.Receiver.Counters().ToolCalls["work_optional"] - mid.ToolCalls["work_optional"]; got != 1 {
		t.Fatalf("%d calls for the lost creation, want exactly 1 (never resent)", got)
	}
	cs, _ = sb.ctl.Comparisons(ctx, "inventory", 10)
	var lost *rollout.Comparison
	for i := range cs {
		if cs[i].OperationID == id {
			lost = &cs[i]
		}
	}
	if lost == nil || lost.ShadowState != "create_unacknowledged" || len(lost.Divergences) != 1 ||
		lost.Divergences[0] != "task state: shadow create_unacknowledged, incumbent completed" {
		t.Fatalf("comparison after a lost creation: %+v", lost)
	}
}

// TestDivergeNamesEachDifference checks the comparison of two sides field by field.
func TestDivergeNamesEachDifference(t *testing.T) {
	t.Parallel()
	base := rollout.Comparison{Kind: rollout.ComparisonRun, ShadowRoute: "task", ShadowState: "completed", IncumbentState: "completed",
		ShadowResultHash: "aaaaaaaaaaaaaaaaaaaa", IncumbentResultHash: "aaaaaaaaaaaaaaaaaaaa"}
	if d := rollout.Diverge(base); len(d) != 0 {
		t.Fatalf("equal sides diverge: %q", d)
	}
	c := base
	c.ShadowState, c.ShadowToolError, c.ShadowResultHash = "failed", true, "bbbbbbbbbbbbbbbbbbbb"
	want := []string{"task state: shadow failed, incumbent completed", "tool error: shadow yes, incumbent no",
		"result: shadow sha256 bbbbbbbbbbbbbbbb, incumbent aaaaaaaaaaaaaaaa"}
	if d := rollout.Diverge(c); fmt.Sprint(d) != fmt.Sprint(want) {
		t.Fatalf("divergences %q, want %q", d, want)
	}
	p := rollout.Comparison{Kind: rollout.ComparisonProjection, ShadowRoute: "handoff", ShadowReason: "tool_forbids_task", ShadowState: "x"}
	if d := rollout.Diverge(p); len(d) != 1 || d[0] != "the Task route would go handoff (tool_forbids_task), not as a Task" {
		t.Fatalf("projection divergences %q", d)
	}
}
