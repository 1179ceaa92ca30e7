package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
)

// countPosts counts the POST requests an mcp-go client sends: once its session is initialised
// they are its tasks/get polls.
type countPosts struct {
	base http.RoundTripper
	n    *atomic.Int64
}

func (c countPosts) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost {
		c.n.Add(1)
	}
	return c.base.RoundTrip(r)
}

// waitForTaskPhase watches as many tasks as the watch phase, on the same receiver at the same
// poll interval, the way mcp-go's client.WaitForTask does (one goroutine per task polling
// tasks/get, nothing durable), with the watcher's pooled HTTP transport. It measures the polls
// made against those due, and this process's CPU per poll (no database is involved).
func (e *env) waitForTaskPhase(ctx context.Context, res *Results) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := mcpclient.Dial(ctx, mcpclient.Options{URL: e.baseURL + "/mcp", Era: mcpclient.EraChoiceLegacy})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	n := e.o.WatchTasks
	ids := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				t, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"duration_ms": 7200000}, mcpclient.TaskOptions{})
				if err != nil {
					errs <- fmt.Errorf("create task %d: %w", i, err)
					return
				}
				ids[i] = t.ID
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	var posts atomic.Int64
	hc := &http.Client{Transport: countPosts{base: mcpclient.NewHTTPClient(0).Transport, n: &posts}}
	c, err := client.NewStreamableHttpClient(e.baseURL+"/mcp", transport.WithHTTPBasicClient(hc))
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	if err := c.Start(ctx); err != nil {
		return err
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		return err
	}
	var waiters sync.WaitGroup
	defer func() { cancel(); waiters.Wait() }()
	for _, id := range ids {
		waiters.Go(func() {
			_, _ = c.WaitForTask(ctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: id}}, e.o.WatchPoll)
		})
	}
	time.Sleep(2 * e.o.WatchPoll)
	p0, cpu0, t0 := posts.Load(), selfCPU(), time.Now()
	time.Sleep(e.o.WatchFor)
	p1, cpu1, el := posts.Load(), selfCPU(), time.Since(t0)
	polls := p1 - p0
	wf := &res.Watch
	due := float64(n) * el.Seconds() / e.o.WatchPoll.Seconds()
	amp := round2(float64(polls) / due)
	wf.WaitForTaskAmplification = &amp
	if amp >= 0.95 {
		// It kept every task's poll rate.
		wf.WaitForTaskMaxTasks1s = &n
	}
	if polls > 0 {
		v := math.Round(float64(cpu1-cpu0)/float64(time.Millisecond)/float64(polls)*1000) / 1000
		wf.WaitForTaskCPUMsPoll = &v
	}
	return nil
}
