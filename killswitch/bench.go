package killswitch

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/rollout"
)

// Propagation is the result of MeasurePropagation: for every toggle, the time from the commit
// of the switch change to the moment the slowest replica answered new starts accordingly.
type Propagation struct {
	Replicas int
	Samples  []time.Duration
}

// Quantile returns the q quantile (0..1) of the samples.
func (p Propagation) Quantile(q float64) time.Duration {
	if len(p.Samples) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), p.Samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

// MeasurePropagation runs replicas services on pool (each its own cache and listener, as
// console replicas are) and toggles the kill switch of a workflow toggles times through the
// first one's store, without refreshing any cache by hand: every replica learns of each change
// through LISTEN/NOTIFY only. It is the benchmark hook of kill switch propagation.
func MeasurePropagation(ctx context.Context, pool *pgxpool.Pool, replicas, toggles int) (Propagation, error) {
	if replicas < 1 || toggles < 1 {
		return Propagation{}, fmt.Errorf("%w: want at least one replica and one toggle", ErrInvalid)
	}
	var svcs []*Service
	defer func() {
		for _, s := range svcs {
			s.Close()
		}
	}()
	var subs []<-chan Snapshot
	for range replicas {
		s, err := Open(ctx, pool, Config{ResyncEvery: time.Hour})
		if err != nil {
			return Propagation{}, err
		}
		svcs = append(svcs, s)
		ch, stop := s.Subscribe()
		defer stop()
		subs = append(subs, ch)
	}
	actor := audit.Actor{Name: "bench", Kind: audit.KindSystem}
	start := rollout.StartCheck{Workflow: "bench-propagation", Server: "bench", Tenant: "bench"}
	out := Propagation{Replicas: replicas}
	for i := range toggles {
		engage := i%2 == 0
		var err error
		if engage {
			err = svcs[0].store.Engage(ctx, actor, ScopeWorkflow, start.Workflow, "propagation benchmark")
		} else {
			_, err = svcs[0].store.Release(ctx, actor, ScopeWorkflow, start.Workflow, "propagation benchmark", false)
		}
		if err != nil {
			return out, err
		}
		committed := time.Now()
		for r, s := range svcs {
			for s.Check(ctx, start).Blocked != engage {
				select {
				case <-subs[r]:
				case <-ctx.Done():
					return out, ctx.Err()
				case <-time.After(5 * time.Second):
					return out, fmt.Errorf("replica %d did not see toggle %d within 5s", r, i)
				}
			}
		}
		out.Samples = append(out.Samples, time.Since(committed))
	}
	// A released switch leaves no trace in the benchmark's database state but its history.
	if toggles%2 == 1 {
		_, _ = svcs[0].store.Release(ctx, actor, ScopeWorkflow, start.Workflow, "propagation benchmark", false)
	}
	return out, nil
}
