package main

import (
	"context"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/reconcile"
	"github.com/taskgate/taskgate/web"
)

// killSwitchPhase: three replicas, each with its own flag cache kept current by the
// database's notifications; per toggle, the time from the switch's commit to the last replica
// answering new starts accordingly (the kill switch package's propagation hook).
func (e *env) killSwitchPhase(ctx context.Context, res *Results) error {
	const replicas = 3
	p, err := killswitch.MeasurePropagation(ctx, e.pool, replicas, e.o.Toggles)
	if err != nil {
		return err
	}
	res.KillSwitch = KillSwitchFigures{Replicas: replicas, Toggles: len(p.Samples), P50Ms: quantileMs(p.Samples, 0.5), P99Ms: quantileMs(p.Samples, 0.99)}
	return nil
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// postgresCPU is the CPU time of the private cluster's postmaster and its children (-1 when
// the server is not this run's own).
func (e *env) postgresCPU() time.Duration {
	if e.cluster == nil {
		return -1
	}
	root := e.cluster.Pid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	hz := int64(100) // USER_HZ on Linux
	var total int64
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		if pid != root && ppid != root {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += ut + st
	}
	return time.Duration(total * int64(time.Second) / hz)
}

var afterLink = regexp.MustCompile(`[?&](?:amp;)?after=([A-Za-z0-9_%.:-]+)`)

// consolePhase serves the console on loopback and fetches each page o.PageRequests times as a
// signed-in admin, after the ledger is seeded.
func (e *env) consolePhase(ctx context.Context, res *Results) error {
	as := auth.NewStore(e.pool, auth.Options{Hash: auth.TestHashParams})
	sys := audit.Actor{Name: "bench", Kind: audit.KindSystem}
	acct, _, err := as.CreateAccount(ctx, sys, auth.AllTenants, auth.NewAccount{Email: "bench@example.com", Role: auth.RoleAdmin, Scope: auth.AllTenants})
	if err != nil {
		return err
	}
	sess, err := as.CreateSession(ctx, acct.ID, "auth.signin", "")
	if err != nil {
		return err
	}
	srv, err := web.NewServer(web.Deps{Logger: e.o.Logger, Registry: prometheus.NewRegistry(), Version: "bench", Policy: e.policy,
		Auth: as, Audit: audit.NewStore(e.pool), Manifests: e.mstore, Router: e.router, Operations: e.ops,
		Reconcile: reconcile.NewStore(e.pool, reconcile.Options{ResolutionReasons: e.policy.ResolutionReasons}),
		Ready:     web.ReadinessFunc(func(context.Context) error { return nil })})
	if err != nil {
		return err
	}
	defer srv.CloseStreams()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: 60 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (string, time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return "", 0, err
		}
		req.AddCookie(&http.Cookie{Name: web.SessionCookie, Value: sess.Token})
		t0 := time.Now()
		r, err := client.Do(req)
		if err != nil {
			return "", 0, err
		}
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		d := time.Since(t0)
		if err != nil {
			return "", 0, err
		}
		if r.StatusCode != http.StatusOK {
			return "", 0, fmt.Errorf("GET %s: status %d", path, r.StatusCode)
		}
		return string(b), d, nil
	}
	// The deep keyset page: follow the list's next link 20 times.
	deep := "/operations"
	for range 20 {
		body, _, err := get(deep)
		if err != nil {
			return err
		}
		m := afterLink.FindStringSubmatch(body)
		if m == nil {
			break
		}
		deep = "/operations?after=" + html.UnescapeString(m[1])
	}
	deepQueue := "/reconcile"
	for range 20 {
		body, _, err := get(deepQueue)
		if err != nil {
			return err
		}
		m := afterLink.FindStringSubmatch(body)
		if m == nil {
			break
		}
		deepQueue = "/reconcile?after=" + html.UnescapeString(m[1])
	}
	pages := map[string]string{
		"overview":                     "/",
		"operations":                   "/operations",
		"operations.deep":              deep,
		"operations.tenant":            "/operations?tenant=globex",
		"operations.workflow":          "/operations?workflow=bench_capped",
		"operations.route":             "/operations?route=sync",
		"operations.task_state":        "/operations?task_state=working",
		"operations.domain_outcome":    "/operations?domain_outcome=unknown",
		"operations.attention":         "/operations?attention=true",
		"operations.mismatch":          "/operations?mismatch=true",
		"reconcile":                    "/reconcile",
		"reconcile.deep":               deepQueue,
		"reconcile.needs_person":       "/reconcile?state=needs_person",
		"reconcile.verifying":          "/reconcile?state=verifying",
		"reconcile.tenant":             "/reconcile?tenant=globex",
		"reconcile.workflow":           "/reconcile?workflow=bench_open",
		"reconcile.reason":             "/reconcile?reason=task_unobservable",
		"api.operations":               "/api/v1/operations",
		"workflows":                    "/workflows",
		"operations.tenant+task_state": "/operations?tenant=acme&task_state=completed",
	}
	// The API list needs a token, not a session; it is measured through the console list.
	delete(pages, "api.operations")
	c := &res.Console
	c.Pages = map[string]float64{}
	for name, path := range pages {
		var lat []time.Duration
		if _, _, err := get(path); err != nil { // warm
			return fmt.Errorf("%s: %w", name, err)
		}
		for range e.o.PageRequests {
			_, d, err := get(path)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			lat = append(lat, d)
		}
		p := quantileMs(lat, 0.95)
		c.Pages[name] = p
		if p > c.P95Ms {
			c.P95Ms, c.WorstPage = p, name
		}
	}
	return nil
}

func machineInfo() map[string]any {
	m := map[string]any{"cpus": runtime.NumCPU(), "goos": runtime.GOOS, "goarch": runtime.GOARCH, "go": runtime.Version()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m["loadavg_at_start"] = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, v, _ := strings.Cut(l, ":")
				m["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}
