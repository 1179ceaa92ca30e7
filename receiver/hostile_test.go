package receiver_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
)

// TestMain removes the PostgreSQL cluster the hostile-server tests start (through opstest).
func TestMain(m *testing.M) { pgtest.Main(m) }

func TestParseHostile(t *testing.T) {
	t.Parallel()
	m, err := receiver.ParseHostile(" huge, trickle ")
	if err != nil || len(m) != 2 || m[0] != receiver.HostileHuge || m[1] != receiver.HostileTrickle {
		t.Fatalf("ParseHostile = %v, %v", m, err)
	}
	if m, err = receiver.ParseHostile("all"); err != nil || len(m) != len(receiver.HostileModes) {
		t.Fatalf("all = %v, %v", m, err)
	}
	if _, err = receiver.ParseHostile("huge,explode"); err == nil {
		t.Fatal("an unknown mode was accepted")
	}
}

// heapPeak samples the Go heap in use until stopped and returns the peak.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() uint64 { close(done); wg.Wait(); return peak.Load() }
}

// ended reports whether an operation reached a final state with its outcome settled, or an
// item for a person.
func ended(d operations.Detail) bool {
	if d.Reconciliation != nil {
		return true
	}
	if d.Task == nil {
		return d.Envelope != nil
	}
	return d.Task.State.Final() && (d.Envelope != nil || d.Task.ResultState != "pending")
}

// TestHostileModesAgainstTheConsole runs every hostile mode, in both eras, against the
// console's start path and watcher: every operation ends in a state or an item, nothing
// crashes, the heap stays bounded, no hostile payload is stored whole, and broken
// transitions are recorded as violations.
func TestHostileModesAgainstTheConsole(t *testing.T) {
	t.Parallel()
	const heapBound = 600 << 20
	for _, era := range []string{"legacy", "extension"} {
		for _, mode := range receiver.HostileModes {
			t.Run(era+"/"+string(mode), func(t *testing.T) {
				stop := heapPeak()
				b := opstest.Setup(t, opstest.Options{Era: era, Receiver: receiver.Config{Hostile: []receiver.Hostile{mode}}})
				_, passes := b.Watcher(t, "hostile-"+era, nil)
				var ids []string
				calls := []struct{ workflow, args string }{
					{"refund", `{"duration_ms": 200}`}, {"refund", `{"duration_ms": 400}`},
					{"report", `{"duration_ms": 150}`}, {"lookup", `{}`},
				}
				for i, c := range calls {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					res, err := b.Ops.Start(ctx, operations.Scope{Tenants: []string{"acme"}}, operations.StartRequest{
						IdempotencyKey: fmt.Sprintf("h-%s-%s-%d", era, mode, i), Workflow: c.workflow, Tenant: "acme",
						Actor: "app:billing", ObjectRef: "refund A-1", ObjectVersion: "1", IntendedEffect: "refund 1 EUR",
						Arguments: []byte(c.args)})
					cancel()
					if err != nil {
						t.Fatalf("start %s: %v (a hostile server's answer must end in a state or an item, not an error)", c.workflow, err)
					}
					ids = append(ids, res.Response.OperationID)
				}
				deadline := time.Now().Add(30 * time.Second)
				for {
					all := true
					for _, id := range ids {
						if !ended(b.Detail(t, id)) {
							all = false
						}
					}
					if all {
						break
					}
					if time.Now().After(deadline) {
						for _, id := range ids {
							d := b.Detail(t, id)
							t.Logf("%s %s route %s outcome %s task %+v item %+v", id, d.Workflow, d.Route, d.DomainOutcome, d.Task, d.Reconciliation)
							for _, e := range d.Timeline {
								t.Logf("  %s %s %s: %.200s", e.At.Format("15:04:05.000"), e.Source, e.State, e.Message)
							}
						}
						t.Fatal("not every operation ended in a state or an item")
					}
					select {
					case <-passes:
					case <-time.After(100 * time.Millisecond):
					}
				}
				ctx := context.Background()
				var maxMsg, maxResult, violations int
				if err := b.Pool.QueryRow(ctx, `SELECT coalesce(max(octet_length(status_message)),0) FROM tasks`).Scan(&maxMsg); err != nil {
					t.Fatal(err)
				}
				if err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM transition_violations`).Scan(&violations); err != nil {
					t.Fatal(err)
				}
				for _, id := range ids {
					d := b.Detail(t, id)
					if d.Envelope != nil {
						maxResult = max(maxResult, len(d.Envelope.Result), len(d.Envelope.Preview))
					}
					for _, e := range d.Timeline {
						maxMsg = max(maxMsg, len(e.Message))
					}
				}
				if maxMsg >= 1<<20 || maxResult >= receiver.HostileHugeBytes {
					t.Fatalf("a hostile payload was stored: longest status message %d bytes, longest result %d bytes", maxMsg, maxResult)
				}
				if hits := b.Receiver.HostileHits()[mode]; hits == 0 {
					t.Fatalf("mode %s rewrote nothing: the test proves nothing", mode)
				}
				// An answer naming another task id is a violation in both eras; so is a
				// 2025-11-25 task reported working after its early "completed" (its outcome is
				// still read with tasks/result). A 2026-07-28 early "cancelled" carries its
				// outcome, so the task is not read again and nothing later is seen.
				if (mode == receiver.HostileTaskID || mode == receiver.HostileTransitions && era == "legacy") && violations == 0 {
					t.Fatalf("mode %s: no transition violation recorded", mode)
				}
				if mode == receiver.HostileTransitions {
					for _, id := range ids {
						if d := b.Detail(t, id); d.Task != nil {
							t.Logf("%s: task %s, domain outcome %q, item %v", d.Workflow, d.Task.State, d.DomainOutcome, d.Reconciliation != nil)
						}
					}
				}
				if mode == receiver.HostileMarkup || mode == receiver.HostileNUL {
					var stored int
					if err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE status_message LIKE '%<script>%' OR status_message LIKE '%'||chr(65533)||'%'`).Scan(&stored); err != nil {
						t.Fatal(err)
					}
					t.Logf("%d status messages kept as data with the hostile text", stored)
				}
				peak := stop()
				if peak > heapBound {
					t.Fatalf("heap in use peaked at %d MB, bound %d MB", peak>>20, heapBound>>20)
				}
				t.Logf("%s/%s: %d operations ended; peak heap in use %d MB; longest stored status message %d B, result %d B; violations %d",
					era, mode, len(ids), peak>>20, maxMsg, maxResult, violations)
			})
		}
	}
}
