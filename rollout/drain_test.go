package rollout_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/reconcile"
	"github.com/taskgate/taskgate/rollout"
)

// TestRollbackDrainsToZero rolls a workflow back while Tasks run on the reference receiver
// (a fourth, whose creation was lost, was settled unknown before the rollback and is not in
// flight): the kill switch is engaged, the watchers keep following what is in flight, and the
// drain reaches zero with every operation verified or queued for reconciliation.
func TestRollbackDrainsToZero(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 60*time.Second)
	var kill *killswitch.Service
	b := opstest.Setup(t, opstest.Options{})
	_, passes := b.Watcher(t, "r1", nil)
	// The verification pass after each terminal task.
	rec, err := reconcile.New(reconcile.Config{Pool: b.Pool, Policy: b.Policy, Lookup: reconcile.Lookup{BuiltinURL: b.BaseURL},
		Interval: 20 * time.Millisecond, Backoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Stop)
	kill, err = killswitch.Open(ctx, b.Pool, killswitch.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kill.Close)
	c, err := rollout.NewController(rollout.ControllerConfig{Policy: b.Policy, Pool: b.Pool, Evidence: gates.NewStore(b.Pool),
		Manifests: manifests.NewStore(b.Pool), Kill: kill, Build: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stages().Set(ctx, "refund", rollout.StageFull, 100, "ops"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		b.Start(t, "refund", fmt.Sprintf("r-%d", i), fmt.Sprintf(`{"duration_ms": 600, "idempotency_key": "r-%d"}`, i))
	}
	b.Receiver.Knobs().SetTool("work_required", receiver.Fault{DropBeforeCreateResult: true})
	b.Start(t, "refund", "r-lost", `{"duration_ms": 600, "idempotency_key": "r-lost"}`)
	b.Receiver.Knobs().SetTool("work_required", receiver.Fault{})

	st, err := c.Rollback(ctx, ops, "refund", "canary errors")
	if err != nil || st.Stage != rollout.StageOff {
		t.Fatalf("rollback: %v %+v", err, st.Stage)
	}
	if kv := kill.Check(ctx, rollout.StartCheck{Workflow: "refund", Server: "rcv", Tenant: "acme"}); !kv.Blocked {
		t.Fatalf("kill switch: %+v", kv)
	}
	d, err := c.Drain(ctx, "refund")
	if err != nil || d.Total != 3 || d.InFlight == 0 {
		t.Fatalf("drain right after the rollback: %v %+v", err, d)
	}
	var last rollout.Drain
	opstest.WaitFor(t, passes, 30*time.Second, "the drain to reach zero", func() bool {
		last, err = c.Drain(ctx, "refund")
		return err == nil && last.Drained()
	})
	if last.Total != 3 || last.Verified+last.Queued != 3 {
		var outcomes []string
		rows, _ := b.Pool.Query(ctx, `SELECT o.domain_outcome || '/' || t.state || '/' || t.result_state FROM operations o JOIN tasks t ON t.operation_id = o.id`)
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			outcomes = append(outcomes, s)
		}
		rows.Close()
		t.Fatalf("drained: %+v %v", last, outcomes)
	}
}
