package watch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/watch"
)

// The watcher gives every status read it makes to the poll log, by server and tenant: once
// flushed, the table holds exactly the reads the replica's polls metric counted.
func TestWatcherCountsEveryReadInThePollLog(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "extension"})
	var ids []string
	for i := range 3 {
		ids = append(ids, b.Start(t, "refund", fmt.Sprintf("pl-%d", i), `{"duration_ms": 150}`).Response.OperationID)
	}
	log, err := operations.NewPollLog(operations.PollLogConfig{Store: b.Store, FlushEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w, passes := b.Watcher(t, "r1", func(c *watch.Config) { c.Registerer, c.PollLog = reg, log })
	opstest.WaitFor(t, passes, 20*time.Second, "every envelope", func() bool {
		for _, id := range ids {
			if b.Detail(t, id).Envelope == nil {
				return false
			}
		}
		return true
	})
	w.Stop()
	if _, err := log.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var okMetric, failedMetric float64
	for _, mf := range mfs {
		if mf.GetName() != "taskgate_watch_polls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == "ok" {
				okMetric += m.GetCounter().GetValue()
			} else {
				failedMetric += m.GetCounter().GetValue()
			}
		}
	}
	var server, tenant string
	var ok, failed int64
	if err := b.Pool.QueryRow(context.Background(), `SELECT min(server), min(tenant), sum(ok), sum(errors) FROM server_poll_hours`).
		Scan(&server, &tenant, &ok, &failed); err != nil {
		t.Fatal(err)
	}
	if ok < 3 || float64(ok) != okMetric || float64(failed) != failedMetric {
		t.Fatalf("poll log %d ok, %d failed; polls metric %v ok, %v failed", ok, failed, okMetric, failedMetric)
	}
	if server != "rcv" || tenant != "acme" {
		t.Fatalf("reads filed under %s/%s, want rcv/acme", server, tenant)
	}
}
