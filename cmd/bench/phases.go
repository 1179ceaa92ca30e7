package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/internal/pgcluster"
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

// postmasterOf is the pid of the postmaster of the server at admin: the private cluster's, or
// the parent of a backend when the server runs on this machine (a loopback address, and the
// backend's process visible here); 0 when it cannot be told.
func postmasterOf(ctx context.Context, admin string, c *pgcluster.Cluster) int {
	if c != nil {
		return c.Pid()
	}
	cfg, err := pgx.ParseConfig(admin)
	if err != nil {
		return 0
	}
	if ip := net.ParseIP(cfg.Host); cfg.Host != "localhost" && !strings.HasPrefix(cfg.Host, "/") && (ip == nil || !ip.IsLoopback()) {
		return 0
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var backend int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return 0
	}
	_, ppid, ok := procStat(backend)
	if !ok || ppid <= 1 {
		return 0
	}
	return ppid
}

// procStat reads a process's fields after its name in /proc/pid/stat and its parent's pid.
func procStat(pid int) (fields []string, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return nil, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f, ppid, true
}

// postgresCPU is the CPU time of the server's postmaster and its children (-1 when the server
// does not run on this machine).
func (e *env) postgresCPU() time.Duration {
	by := e.postgresCPUByRole()
	if by == nil {
		return -1
	}
	var total time.Duration
	for _, d := range by {
		total += d
	}
	return total
}

// postgresCPUByRole is the CPU time of the server's processes by what they do, told from the
// title PostgreSQL gives each: "backend" (the connections), "ended" (the children that ended,
// whose time the postmaster gathered: closed connections, finished autovacuum workers),
// "autovacuum", "checkpointer", "walwriter", "bgwriter" and "other" (the postmaster itself,
// the launchers). Nil when the server does not run on this machine.
func (e *env) postgresCPUByRole() map[string]time.Duration {
	root := e.pgRoot
	if root <= 0 {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	const hz = 100 // USER_HZ on Linux
	ticks := map[string]int64{}
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		f, ppid, ok := procStat(pid)
		if !ok || (pid != root && ppid != root) {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks[pgRole(pid, pid == root)] += ut + st
		if pid == root && len(f) >= 15 {
			// The children that ended: the server reaps them, and their CPU adds to its
			// children's (a connection the pool closed keeps counting).
			cut, _ := strconv.ParseInt(f[13], 10, 64)
			cst, _ := strconv.ParseInt(f[14], 10, 64)
			ticks["ended"] += cut + cst
		}
	}
	by := make(map[string]time.Duration, len(ticks))
	for role, n := range ticks {
		by[role] = time.Duration(n * int64(time.Second) / hz)
	}
	return by
}

// pgRole tells a PostgreSQL process's role from the title it shows in its command line.
func pgRole(pid int, postmaster bool) string {
	if postmaster {
		return "other"
	}
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	title := string(b)
	for _, r := range []struct{ in, role string }{
		{"autovacuum worker", "autovacuum"}, {"autovacuum launcher", "other"}, {"checkpointer", "checkpointer"},
		{"walwriter", "walwriter"}, {"background writer", "bgwriter"}, {"launcher", "other"},
	} {
		if strings.Contains(title, r.in) {
			return r.role
		}
	}
	return "backend"
}

// receiverCPU is the CPU time of the main receiver's process (-1 when unknown).
func (e *env) receiverCPU() time.Duration {
	if len(e.rcvs) == 0 || e.rcvs[0].cmd.Process == nil {
		return -1
	}
	f, _, ok := procStat(e.rcvs[0].cmd.Process.Pid)
	if !ok {
		return -1
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration((ut + st) * int64(time.Second) / 100)
}

// cpuMeter measures the CPU the console (this process), PostgreSQL and the receiver spend
// over a stretch of work, per unit of it: on a machine whose cores are busy with other work
// these figures hold where rates do not.
type cpuMeter struct {
	e             *env
	self, pg, rcv time.Duration
}

func (e *env) cpuMeter() cpuMeter {
	return cpuMeter{e: e, self: selfCPU(), pg: e.postgresCPU(), rcv: e.receiverCPU()}
}

// CPUPerUnit is the CPU milliseconds per unit of work, by process.
type CPUPerUnit struct {
	Console  float64 `json:"console"`
	Postgres float64 `json:"postgres"`
	Receiver float64 `json:"receiver"`
	Total    float64 `json:"total"`
}

func (m cpuMeter) per(n float64) CPUPerUnit {
	if n <= 0 {
		return CPUPerUnit{}
	}
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)/n*1000) / 1000 }
	var c CPUPerUnit
	c.Console = ms(selfCPU() - m.self)
	if m.pg >= 0 {
		c.Postgres = ms(m.e.postgresCPU() - m.pg)
	}
	if m.rcv >= 0 {
		c.Receiver = ms(m.e.receiverCPU() - m.rcv)
	}
	c.Total = math.Round((c.Console+c.Postgres+c.Receiver)*1000) / 1000
	return c
}

var afterLink = regexp.MustCompile(`[?&](?:amp;)?after=([A-Za-z0-9_%.:-]+)`)

// deepPages is how many keyset pages deep the deep pages are.
const deepPages = 20

// consolePages are the pages the console phase measures: the overview, the operations list and
// its API with every filter they offer (and each one's page deepPages deep where a deep page is
// a different query), the reconciliation queue with every filter, the inbox and the servers and
// workflows pages. A page named with the prefix "scoped." is read by an account scoped to one
// tenant, one named "api." with an API token bound to both tenants; the others by an
// administrator. A path ending in "…" is followed deepPages pages deep by its next links.
var consolePages = []struct{ name, path string }{
	{"overview", "/"},
	{"operations", "/operations"},
	{"operations.deep", "/operations?…"},
	{"operations.tenant", "/operations?tenant=globex"},
	{"operations.workflow", "/operations?workflow=bench_open"},
	{"operations.workflow.rare", "/operations?workflow=bench_capped"},
	{"operations.route", "/operations?route=task"},
	{"operations.route.none", "/operations?route=handoff"},
	{"operations.task_state", "/operations?task_state=working"},
	{"operations.task_state.completed", "/operations?task_state=completed"},
	{"operations.domain_outcome", "/operations?domain_outcome=unknown"},
	{"operations.domain_outcome.rare", "/operations?domain_outcome=not_applied"},
	{"operations.attention", "/operations?attention=true"},
	{"operations.attention.deep", "/operations?attention=true&…"},
	{"operations.mismatch", "/operations?mismatch=true"},
	{"operations.mismatch.deep", "/operations?mismatch=true&…"},
	{"operations.tenant+task_state", "/operations?tenant=acme&task_state=completed"},
	{"operations.tenant+task_state.deep", "/operations?tenant=acme&task_state=completed&…"},
	{"operations.workflow+domain_outcome", "/operations?workflow=bench_open&domain_outcome=applied"},
	{"operations.search", "/operations?q=seed+4242"},
	{"inbox", "/inbox"},
	{"reconcile", "/reconcile"},
	{"reconcile.deep", "/reconcile?…"},
	{"reconcile.needs_person", "/reconcile?state=needs_person"},
	{"reconcile.needs_person.deep", "/reconcile?state=needs_person&…"},
	{"reconcile.verifying", "/reconcile?state=verifying"},
	{"reconcile.closed", "/reconcile?state=closed"},
	{"reconcile.all", "/reconcile?state=all"},
	{"reconcile.tenant", "/reconcile?tenant=globex"},
	{"reconcile.workflow", "/reconcile?workflow=bench_watch"},
	{"reconcile.reason", "/reconcile?reason=task_unobservable"},
	{"reconcile.age", "/reconcile?age=6h"},
	{"reconcile.claimed_by.nobody", "/reconcile?claimed_by=nobody"},
	{"reconcile.claimed_by.me", "/reconcile?claimed_by=me"},
	{"servers", "/servers"},
	{"workflows", "/workflows"},
	{"scoped.overview", "/"},
	{"scoped.operations.attention", "/operations?attention=true"},
	{"scoped.reconcile", "/reconcile"},
	{"api.operations", "/api/v1/operations"},
	{"api.operations.deep", "/api/v1/operations?…"},
	{"api.operations.attention", "/api/v1/operations?attention=true"},
	{"api.operations.mismatch", "/api/v1/operations?mismatch=true"},
	{"api.operations.task_state", "/api/v1/operations?task_state=working"},
	{"api.operations.tenant+task_state", "/api/v1/operations?tenant=acme&task_state=completed"},
	{"api.operations.domain_outcome", "/api/v1/operations?domain_outcome=unknown"},
	{"api.operations.workflow", "/api/v1/operations?workflow=bench_capped"},
	{"api.operations.route", "/api/v1/operations?route=sync"},
}

// consolePhase serves the console on loopback and fetches each page o.PageRequests times (after
// one unmeasured fetch), after the ledger is seeded.
func (e *env) consolePhase(ctx context.Context, res *Results) error {
	as := auth.NewStore(e.pool, auth.Options{Hash: auth.TestHashParams})
	sys := audit.Actor{Name: "bench", Kind: audit.KindSystem}
	run := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	session := func(role auth.Role, scope auth.Scope) (string, error) {
		acct, _, err := as.CreateAccount(ctx, sys, auth.AllTenants, auth.NewAccount{Email: "bench-" + string(role) + "-" + run + "@example.com",
			Role: role, Scope: scope})
		if err != nil {
			return "", err
		}
		sess, err := as.CreateSession(ctx, acct.ID, "auth.signin", "")
		return sess.Token, err
	}
	admin, err := session(auth.RoleAdmin, auth.AllTenants)
	if err != nil {
		return err
	}
	scoped, err := session(auth.RoleSupport, auth.Scope{Tenants: []string{"acme"}})
	if err != nil {
		return err
	}
	_, apiToken, err := as.CreateToken(ctx, sys, auth.AllTenants, "bench "+run, auth.Scope{Tenants: []string{"acme", "globex"}})
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
	client := &http.Client{Timeout: 120 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(name, path string) (string, time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return "", 0, err
		}
		switch {
		case strings.HasPrefix(name, "api."):
			req.Header.Set("Authorization", "Bearer "+apiToken)
		case strings.HasPrefix(name, "scoped."):
			req.AddCookie(&http.Cookie{Name: web.SessionCookie, Value: scoped})
		default:
			req.AddCookie(&http.Cookie{Name: web.SessionCookie, Value: admin})
		}
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
	// deep follows a list's next links deepPages times and returns the last page's path.
	deep := func(name, path string) (string, error) {
		path = strings.TrimSuffix(strings.TrimSuffix(path, "…"), "&")
		path = strings.TrimSuffix(path, "?")
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		cur := path
		for range deepPages {
			body, _, err := get(name, cur)
			if err != nil {
				return "", err
			}
			var next string
			if strings.HasPrefix(name, "api.") {
				var p struct {
					Next string `json:"next"`
				}
				if err := json.Unmarshal([]byte(body), &p); err != nil {
					return "", err
				}
				next = url.QueryEscape(p.Next)
			} else if m := afterLink.FindStringSubmatch(body); m != nil {
				next = html.UnescapeString(m[1])
			}
			if next == "" {
				break
			}
			cur = path + sep + "after=" + next
		}
		return cur, nil
	}
	c := &res.Console
	c.Pages = map[string]float64{}
	for _, pg := range consolePages {
		if e.o.Pages != nil && !e.o.Pages.MatchString(pg.name) {
			continue
		}
		path := pg.path
		if strings.HasSuffix(path, "…") {
			if path, err = deep(pg.name, path); err != nil {
				return fmt.Errorf("%s: %w", pg.name, err)
			}
		}
		var lat []time.Duration
		if _, _, err := get(pg.name, path); err != nil { // warm
			return fmt.Errorf("%s: %w", pg.name, err)
		}
		for range e.o.PageRequests {
			_, d, err := get(pg.name, path)
			if err != nil {
				return fmt.Errorf("%s: %w", pg.name, err)
			}
			lat = append(lat, d)
		}
		p := quantileMs(lat, 0.95)
		c.Pages[pg.name] = p
		fmt.Fprintf(e.log, "bench:   %-40s p95 %9.2f ms\n", pg.name, p)
		if p > c.P95Ms {
			c.P95Ms, c.WorstPage = p, pg.name
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
