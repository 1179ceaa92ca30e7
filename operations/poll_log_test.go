package operations_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

// pollRows reads server_poll_hours as "server/tenant/hour" → {ok, errors}.
func pollRows(t *testing.T, b *opstest.Bundle) map[string][2]int64 {
	t.Helper()
	rows, err := b.Pool.Query(context.Background(), `SELECT server, tenant, hour, ok, errors FROM server_poll_hours`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][2]int64{}
	for rows.Next() {
		var server, tenant string
		var hour time.Time
		var ok, errs int64
		if err := rows.Scan(&server, &tenant, &hour, &ok, &errs); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("%s/%s/%s", server, tenant, hour.UTC().Format("2006-01-02T15"))] = [2]int64{ok, errs}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return out
}

// clock is a settable time for the poll logs.
type clock struct{ at atomic.Int64 }

func (c *clock) now() time.Time  { return time.Unix(0, c.at.Load()).UTC() }
func (c *clock) set(t time.Time) { c.at.Store(t.UnixNano()) }

// Two replicas count reads concurrently in memory; their flushes, run at the same time, add up
// to exactly what was counted, per server, tenant and hour; a read in the next hour gets a row of
// its own; a failed flush keeps its counts for the next; Stop flushes what is left.
func TestPollLogAddsEveryReplicasCounts(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	ctx := context.Background()
	var clk clock
	h1 := time.Date(2026, 11, 30, 9, 59, 0, 0, time.UTC)
	clk.set(h1)
	logs := make([]*operations.PollLog, 2)
	for i := range logs {
		l, err := operations.NewPollLog(operations.PollLogConfig{Store: b.Store, Now: clk.now, FlushEvery: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		logs[i] = l
	}
	want := map[string][2]int64{}
	var mu sync.Mutex
	count := func(server, tenant string, hour time.Time, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		k := fmt.Sprintf("%s/%s/%s", server, tenant, hour.Format("2006-01-02T15"))
		c := want[k]
		if ok {
			c[0]++
		} else {
			c[1]++
		}
		want[k] = c
	}
	// 8 goroutines per replica, 500 reads each, over two servers and two tenants.
	var wg sync.WaitGroup
	for r, l := range logs {
		for g := range 8 {
			wg.Go(func() {
				for i := range 500 {
					server, tenant, ok := []string{"rcv", "slow"}[(g+i)%2], []string{"acme", "globex"}[(r+i/2)%2], i%7 != 0
					l.Add(server, tenant, ok)
					count(server, tenant, h1, ok)
				}
			})
		}
	}
	wg.Wait()
	// Both replicas flush at once: the upserts add, neither overwrites.
	errs := make(chan error, 2)
	for _, l := range logs {
		go func() { _, err := l.Flush(ctx); errs <- err }()
	}
	for range logs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := pollRows(t, b); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the first flushes:\n got %v\nwant %v", got, want)
	}
	if n, err := logs[0].Flush(ctx); err != nil || n != 0 {
		t.Fatalf("a flush with nothing counted wrote %d rows (%v)", n, err)
	}

	// The next hour; a flush that fails keeps its counts.
	h2 := h1.Add(2 * time.Minute)
	clk.set(h2)
	logs[0].Add("rcv", "acme", true)
	logs[0].Add("rcv", "acme", false)
	count("rcv", "acme", h2, true)
	count("rcv", "acme", h2, false)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := logs[0].Flush(cancelled); err == nil {
		t.Fatal("a flush on a cancelled context reported no error")
	}
	logs[0].Add("rcv", "acme", true)
	count("rcv", "acme", h2, true)
	if err := logs[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	logs[0].Stop()
	logs[0].Stop() // idempotent
	if got := pollRows(t, b); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after Stop:\n got %v\nwant %v", got, want)
	}
	if got := want[fmt.Sprintf("rcv/acme/%s", h2.Format("2006-01-02T15"))]; got != [2]int64{2, 1} {
		t.Fatalf("the second hour's counts %v, want 2 ok and 1 failed", got)
	}
}

// The loop flushes by itself every FlushEvery.
func TestPollLogFlushesOnItsOwn(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	flushed := make(chan int, 16)
	l, err := operations.NewPollLog(operations.PollLogConfig{Store: b.Store, FlushEvery: 20 * time.Millisecond,
		AfterFlush: func(n int, err error) {
			if err == nil {
				flushed <- n
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Stop)
	if err := l.Start(context.Background()); err == nil {
		t.Fatal("a second Start was accepted")
	}
	l.Add("rcv", "acme", true)
	for n := range flushed {
		if n == 1 {
			break
		}
	}
	var ok int64
	if err := b.Pool.QueryRow(context.Background(), `SELECT coalesce(sum(ok), 0) FROM server_poll_hours`).Scan(&ok); err != nil || ok != 1 {
		t.Fatalf("flushed reads %d (%v), want 1", ok, err)
	}
	if _, err := operations.NewPollLog(operations.PollLogConfig{}); err == nil {
		t.Fatal("a poll log without a store was accepted")
	}
}

// BenchmarkPollLogAdd measures the cost a status read pays to be counted: Add from many
// goroutines at once over a few servers and tenants (no flush runs).
func BenchmarkPollLogAdd(b *testing.B) {
	l, err := operations.NewPollLog(operations.PollLogConfig{Store: operations.NewStore(nil)})
	if err != nil {
		b.Fatal(err)
	}
	servers, tenants := []string{"rcv", "slow", "legacy", "ext"}, []string{"acme", "globex", "initech"}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Add(servers[i%len(servers)], tenants[i%len(tenants)], i%11 != 0)
			i++
		}
	})
}
