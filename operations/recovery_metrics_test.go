package operations_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

// gathered returns the value of each sample of reg as name{label=value}.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

func TestRecoverySweepsAreCountedOnTheRegistry(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	ctx := context.Background()
	insert := func(key string, route operations.Route) string {
		op, _, err := b.Store.CreateOperation(ctx, operations.Insert{
			Request: operations.StartRequest{IdempotencyKey: key, Workflow: "lookup", Tenant: "acme", Actor: "app"},
			Hash:    "h", Arguments: []byte(`{}`), Decision: operations.Decision{Route: route, ReasonCode: "task_use_never", Reason: "r"}})
		if err != nil {
			t.Fatal(err)
		}
		return op.ID
	}
	sent := insert("m-sent", operations.RouteSync)
	if err := b.Store.MarkSending(ctx, sent, 0); err != nil {
		t.Fatal(err)
	}
	unsent := insert("m-unsent", operations.RouteSync)
	if _, err := b.Pool.Exec(ctx, `UPDATE operations SET created_at = now() - interval '1 minute' WHERE id = $1`, unsent); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := operations.NewRecovery(operations.RecoveryConfig{Store: b.Store, Grace: time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	before := gathered(t, reg)
	if before["taskgate_recovery_settled_total{kind=unrecorded}"] != 0 || before["taskgate_recovery_sweeps_total{result=ok}"] != 0 {
		t.Fatalf("counted before any sweep: %v", before)
	}
	if _, ok := before["taskgate_recovery_settled_total{kind=never_sent}"]; !ok {
		t.Fatalf("the settled kinds are not reported at zero: %v", before)
	}
	time.Sleep(5 * time.Millisecond)
	rec := r.Sweep(ctx)
	if rec.Unrecorded != 1 || rec.NeverSent != 1 || rec.ItemsOpened != 1 {
		t.Fatalf("sweep = %+v", rec)
	}
	r.Sweep(ctx)
	got := gathered(t, reg)
	for k, want := range map[string]float64{
		"taskgate_recovery_sweeps_total{result=ok}":        2,
		"taskgate_recovery_sweeps_total{result=error}":     0,
		"taskgate_recovery_settled_total{kind=unrecorded}": 1,
		"taskgate_recovery_settled_total{kind=never_sent}": 1,
		"taskgate_recovery_items_opened_total":             1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	if last := got["taskgate_recovery_last_sweep_timestamp_seconds"]; time.Since(time.Unix(int64(last), 0)) > time.Minute {
		t.Errorf("last sweep at %v", last)
	}
	if _, err := operations.NewRecovery(operations.RecoveryConfig{Store: b.Store, Registerer: reg}); err == nil {
		t.Error("a second recovery registered the same metrics")
	}
}
