package rollout_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/rollout"
)

type countedStages struct {
	rollout.StageSource
	n atomic.Int64
}

func (c *countedStages) Get(ctx context.Context, w string) (rollout.State, error) {
	c.n.Add(1)
	return c.StageSource.Get(ctx, w)
}

type countedManifests struct {
	rollout.ManifestSource
	n atomic.Int64
}

func (c *countedManifests) Status(ctx context.Context, s string) (manifests.Status, error) {
	c.n.Add(1)
	return c.ManifestSource.Status(ctx, s)
}

// TestRouterInputsFromMemory checks that a caching router decides from memory (no stage or
// manifest read per start), sees an audited rollout move through the change notification
// at once, and sees a change that sends none within CacheFor.
func TestRouterInputsFromMemory(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 60*time.Second)
	url, _ := startReceiver(t, receiver.ErasLegacy)
	policy, err := config.Parse([]byte(replace(replace(policyYAML, "URL", url), "TOOL", "work_forbidden")))
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.New(t)
	mstore := manifests.NewStore(pool)
	store := rollout.NewStore(pool, policy)
	kill, err := killswitch.Open(ctx, pool, killswitch.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kill.Close)
	prober, err := manifests.NewProber(manifests.ProberConfig{Policy: policy, Store: mstore})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prober.ProbeNow(ctx, "peer", manifests.Probe{Trigger: manifests.TriggerCLI}); err != nil {
		t.Fatal(err)
	}
	newRouter := func(cacheFor time.Duration) (*rollout.Router, *countedStages, *countedManifests) {
		st, ms := &countedStages{StageSource: store}, &countedManifests{ManifestSource: mstore}
		r, err := rollout.NewRouter(rollout.RouterConfig{Policy: policy, Manifests: ms, Stages: st, KillSwitch: kill, CacheFor: cacheFor})
		if err != nil {
			t.Fatal(err)
		}
		return r, st, ms
	}
	route := func(r *rollout.Router) rollout.Route {
		t.Helper()
		got, err := r.Route(ctx, "refund", "acme")
		if err != nil {
			t.Fatal(err)
		}
		return got.Decision.Route
	}
	waitRoute := func(r *rollout.Router, want rollout.Route, within time.Duration, what string) {
		t.Helper()
		deadline := time.Now().Add(within)
		for route(r) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: route still not %s after %s", what, want, within)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Notifications only: a cache that would otherwise hold for an hour.
	r, stages, mans := newRouter(time.Hour)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	<-audit.Listen(lctx, pool, nil, func(c audit.Change) { r.Changed(c.Area) })
	for range 20 {
		if got := route(r); got != rollout.RouteReject {
			t.Fatalf("refund at stage off routed %s", got)
		}
	}
	if stages.n.Load() != 1 || mans.n.Load() != 1 {
		t.Fatalf("20 decisions read the stage %d times and the manifest %d times, want once each", stages.n.Load(), mans.n.Load())
	}
	// An audited rollout move (as the rollout controller writes it) is seen through its
	// notification, long before the cache would expire.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := store.SetTx(ctx, tx, "refund", rollout.StageFull, 0, "ops"); err != nil {
			return err
		}
		return audit.Record(ctx, tx, audit.Entry{Actor: audit.Actor{Name: "ops", Kind: audit.KindAccount}, Action: "rollout.promote",
			Target: "workflow:refund"})
	})
	if err != nil {
		t.Fatal(err)
	}
	waitRoute(r, rollout.RouteTask, 5*time.Second, "after an audited promotion")
	if stages.n.Load() != 2 {
		t.Fatalf("stage read %d times, want twice (once after the notification)", stages.n.Load())
	}

	// Bounded staleness: a change without a notification is seen within CacheFor.
	const bound = 200 * time.Millisecond
	r2, _, _ := newRouter(bound)
	if got := route(r2); got != rollout.RouteTask {
		t.Fatalf("refund at full routed %s", got)
	}
	if err := store.Set(ctx, "refund", rollout.StageOff, 0, "ops"); err != nil {
		t.Fatal(err)
	}
	set := time.Now()
	waitRoute(r2, rollout.RouteReject, 2*time.Second, "after a stage set without a notification")
	if lag := time.Since(set); lag > bound+500*time.Millisecond {
		t.Fatalf("the change took %s to be seen, bound %s", lag, bound)
	}
}
