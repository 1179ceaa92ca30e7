package watch_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/watch"
)

// The watcher benchmarks hold the durable watcher against mcp-go's client.WaitForTask (a
// goroutine per task polling tasks/get) on the same reference receiver. The receiver runs in
// a child process (this test binary, re-executed) so that getrusage(RUSAGE_SELF) counts the
// requestor's CPU only: the watcher with its pgx pool, or the mcp-go client. PostgreSQL's own
// CPU is not counted.
//
// Reported: cpu-ms/poll (user+sys CPU of this process over the measured polls), B/task (heap
// and stacks in use while watching minus before, over the watched tasks) and polls/s.

const (
	benchTasks = 1000
	benchPoll  = time.Second // the receiver's suggested pollInterval
	benchStep  = 64          // polls per benchmark iteration
	envBenchRx = "TASKGATE_BENCH_RECEIVER"
)

// serveBenchReceiverIfAsked turns this process into the benchmark's receiver when the parent
// asked for it: legacy era, unauthenticated, many concurrent tasks, on 127.0.0.1. It prints
// the address and serves until stdin closes.
func serveBenchReceiverIfAsked() {
	if os.Getenv(envBenchRx) == "" {
		return
	}
	rcv := receiver.New(receiver.Config{Eras: receiver.ErasLegacy, DefaultPollInterval: benchPoll, MaxPollInterval: benchPoll,
		DefaultTTL: time.Hour, MaxTTL: time.Hour, MaxConcurrentTasks: 10 * benchTasks})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() { _ = http.Serve(ln, rcv.Handler()) }()
	fmt.Printf("LISTENING %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// startBenchReceiver re-executes the test binary as the receiver and returns its base URL.
func startBenchReceiver(b *testing.B) string {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envBenchRx+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "LISTENING ")
	if err != nil || !ok {
		b.Fatalf("bench receiver: %q %v", line, err)
	}
	return "http://" + addr
}

// cpuTime is this process's user+sys CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// inUse is heap and stack memory in use after a collection.
func inUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse + ms.StackInuse)
}

// pollMeter counts polls and wakes waiters every benchStep polls.
type pollMeter struct {
	n    atomic.Int64
	tick chan struct{}
}

func newPollMeter() *pollMeter { return &pollMeter{tick: make(chan struct{}, 1)} }

func (m *pollMeter) add(k int64) {
	if k == 0 {
		return
	}
	v := m.n.Add(k)
	if v/benchStep != (v-k)/benchStep {
		select {
		case m.tick <- struct{}{}:
		default:
		}
	}
}

func (m *pollMeter) waitFor(target int64) {
	for m.n.Load() < target {
		<-m.tick
	}
}

// measure runs the benchmark loop (benchStep polls an iteration) and reports the metrics.
func measure(b *testing.B, m *pollMeter, base int64, tasks int) {
	b.Helper()
	runtime.GC()
	cpu0, polls0, t0 := cpuTime(b), m.n.Load(), time.Now()
	target := polls0
	for b.Loop() {
		target += benchStep
		m.waitFor(target)
	}
	cpu, polls, wall := cpuTime(b)-cpu0, m.n.Load()-polls0, time.Since(t0)
	mem := inUse() - base
	b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(polls), "cpu-ms/poll")
	b.ReportMetric(float64(max(mem, 0))/float64(tasks), "B/task")
	b.ReportMetric(float64(polls)/wall.Seconds(), "polls/s")
}

// BenchmarkDurableWatcher watches benchTasks tasks, created through the start path, with one
// watcher replica at its defaults on a real PostgreSQL database.
func BenchmarkDurableWatcher(b *testing.B) {
	base := startBenchReceiver(b)
	pol, err := config.Parse(fmt.Appendf(nil, opstest.Policy, base+"/mcp", base, "legacy"))
	if err != nil {
		b.Fatal(err)
	}
	pool := pgtest.New(b)
	bd := &opstest.Bundle{Pool: pool, BaseURL: base, Policy: pol, Store: operations.NewStore(pool)}
	bd.Servers = operations.NewServers(operations.ServersConfig{Policy: pol})
	b.Cleanup(bd.Servers.Close)
	bd.Ops, err = operations.NewService(operations.Config{Store: bd.Store, Policy: pol, Servers: bd.Servers})
	if err != nil {
		b.Fatal(err)
	}
	startAll(b, benchTasks, func(i int) error {
		res, err := bd.Ops.Start(context.Background(), operations.Scope{Tenants: []string{"acme"}}, operations.StartRequest{
			IdempotencyKey: fmt.Sprintf("bench-%d", i), Workflow: "refund", Tenant: "acme", Actor: "app:bench",
			ObjectRef: "bench", ObjectVersion: "1", IntendedEffect: "none", Arguments: []byte(`{"outcome": "hang"}`)})
		if err == nil && res.Response.Route != operations.RouteTask {
			err = fmt.Errorf("route %s: %s", res.Response.Route, res.Response.Reason)
		}
		return err
	})
	m := newPollMeter()
	mem0 := inUse()
	w, err := watch.New(watch.Config{Store: bd.Store, Servers: bd.Servers, Policy: pol, ReplicaID: "bench",
		AfterPass: func(n int) { m.add(int64(n)) }})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	m.waitFor(2 * benchTasks) // warm: every task polled, connections open
	measure(b, m, mem0, benchTasks)
}

// BenchmarkWaitForTaskBaseline watches benchTasks tasks the way mcp-go v1.2.1's
// client.WaitForTask does: one goroutine per task, polling tasks/get at the server's
// pollInterval, on one client. Nothing is durable. "pooled" gives the client the same pooled
// HTTP transport as the watcher (mcpclient.NewHTTPClient); "default-transport" keeps
// mcp-go's default (http.DefaultTransport: 2 idle connections per host).
func BenchmarkWaitForTaskBaseline(b *testing.B) {
	b.Run("pooled", func(b *testing.B) {
		hc := mcpclient.NewHTTPClient(0)
		benchWaitForTask(b, hc.Transport)
	})
	b.Run("default-transport", func(b *testing.B) { benchWaitForTask(b, http.DefaultTransport) })
}

func benchWaitForTask(b *testing.B, rt http.RoundTripper) {
	base := startBenchReceiver(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	conn, err := mcpclient.Dial(ctx, mcpclient.Options{URL: base + "/mcp", Era: mcpclient.EraChoiceLegacy})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	ids := make([]string, benchTasks)
	startAll(b, benchTasks, func(i int) error {
		t, err := conn.CreateTask(ctx, receiver.ToolWorkRequired, map[string]any{"outcome": "hang", "idempotency_key": fmt.Sprintf("base-%d", i)}, mcpclient.TaskOptions{})
		ids[i] = t.ID
		return err
	})

	m := newPollMeter()
	hc := &http.Client{Transport: countGets{base: rt, m: m}}
	c, err := client.NewStreamableHttpClient(base+"/mcp", transport.WithHTTPBasicClient(hc))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		b.Fatal(err)
	}
	mem0 := inUse()
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: id}}
			_, _ = c.WaitForTask(ctx, req, benchPoll)
		}()
	}
	m.waitFor(2 * benchTasks)
	measure(b, m, mem0, benchTasks)
}

// countGets counts the POST requests the mcp-go client sends: once the session is initialised
// they are its tasks/get polls.
type countGets struct {
	base http.RoundTripper
	m    *pollMeter
}

func (c countGets) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost {
		c.m.add(1)
	}
	return c.base.RoundTrip(r)
}

// startAll runs start(i) for i in [0,n) on 8 workers and fails on the first error.
func startAll(b *testing.B, n int, start func(i int) error) {
	b.Helper()
	var next atomic.Int64
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := start(i); err != nil {
					errs <- fmt.Errorf("start %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}
