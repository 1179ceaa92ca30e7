package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/watch"
)

// The watch phases create their tasks directly on an authenticated receiver (8 workers on one
// connection) and, for the durable watcher, write the ledger rows the start path would have
// left (workflow bench_watch1 or bench_watch30, working, due at once): the start path's own
// rate is measured by the start phase, and 100,000 starts through it would take most of an
// hour on this machine. Lateness and observations are counted by the receiver.

// watchMode is how the durable watcher reads a server in a run.
type watchMode string

const (
	modeGet    watchMode = "get"    // tasks/get only, as on a server offering nothing else
	modeList   watchMode = "list"   // tasks/list sweeps (the receiver declares tasks.list)
	modeNotify watchMode = "notify" // status notifications, polling as the safety net
)

// createTasks creates n long tasks on the receiver at base and returns their ids.
func (e *env) createTasks(ctx context.Context, base string, n int) ([]string, error) {
	ts, err := e.createTaskRows(ctx, base, n)
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids, err
}

// createTaskRows creates n long tasks on the receiver at base and returns them as created.
func (e *env) createTaskRows(ctx context.Context, base string, n int) ([]mcpclient.Task, error) {
	conn, err := mcpclient.Dial(ctx, mcpclient.Options{URL: base + "/mcp", Era: mcpclient.EraChoiceLegacy, Token: benchToken,
		KeepSessionOnClose: true, Logger: e.o.Logger})
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	ids := make([]mcpclient.Task, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				t, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"duration_ms": 4 * 3600 * 1000}, mcpclient.TaskOptions{})
				if err != nil {
					errs <- fmt.Errorf("create task %d: %w", i, err)
					return
				}
				ids[i] = t
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return ids, nil
}

// ledgerTasks writes the ledger rows of watched tasks of workflow on server, as the start path
// leaves them: the status, message and lastUpdatedAt the CreateTaskResult gave.
func (e *env) ledgerTasks(ctx context.Context, workflow, server string, ts []mcpclient.Task, poll time.Duration) error {
	for len(ts) > 0 {
		part := ts[:min(len(ts), 10_000)]
		ts = ts[len(part):]
		ids, msgs := make([]string, len(part)), make([]string, len(part))
		created, updated := make([]time.Time, len(part)), make([]time.Time, len(part))
		for i, t := range part {
			ids[i], msgs[i], created[i], updated[i] = t.ID, t.StatusMessage, t.CreatedAt, t.LastUpdatedAt
		}
		if _, err := e.pool.Exec(ctx, `
			WITH i AS MATERIALIZED (SELECT u.task_id, u.msg, u.created, u.updated, `+seedID("clock_timestamp()")+` AS id
				FROM unnest($1::text[], $5::text[], $6::timestamptz[], $7::timestamptz[]) AS u(task_id, msg, created, updated)),
			o AS (INSERT INTO operations (id, tenant, workflow, idempotency_key, request_sha256, actor, object_ref, route, reason_code, reason,
			                            domain_outcome, created_at, updated_at)
				SELECT id, 'acme', $2, 'watch-' || task_id, '', 'app:bench', 'bench', 'task', 'task_capable', 'bench', 'pending', now(), now()
				FROM i RETURNING id)
			INSERT INTO tasks (operation_id, server, tool, era, task_id, state, status_message, poll_interval_ms, next_poll_at, deadline,
			                   server_created_at, server_updated_at, ttl_ms, created_at, updated_at)
			SELECT i.id, $3, 'work_optional', '2025-11-25', i.task_id, 'working', i.msg, $4, now(), now() + interval '4 hours',
			       i.created, i.updated, 14400000, now(), now()
			FROM i JOIN o ON o.id = i.id`, ids, workflow, server, poll.Milliseconds(), msgs, created, updated); err != nil {
			return fmt.Errorf("ledger rows of watched tasks: %w", err)
		}
	}
	return nil
}

// taskIDs are the ids of ts.
func taskIDs(ts []mcpclient.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

// startWatcher starts one durable watcher replica reading its servers in mode.
func (e *env) startWatcher(ctx context.Context, name string, mode watchMode) (*watch.Service, error) {
	w, err := watch.New(watch.Config{Store: e.ops.Store(), Servers: e.servers, Policy: e.policy, Operations: e.ops, ReplicaID: name,
		NoListSweep: mode != modeList, NoNotifications: mode != modeNotify, Registerer: prometheus.NewRegistry(), Logger: e.o.Logger})
	if err != nil {
		return nil, err
	}
	return w, w.Start(ctx)
}

// measured is one window: what the receiver saw and the CPU this process (and PostgreSQL,
// when pg is set) spent meanwhile.
type measured struct {
	windowFigures
	selfMs, pgMs float64
	// pgRoles is pgMs by the role of the PostgreSQL process that spent it (postgresCPUByRole).
	pgRoles map[string]float64
	// statements are the statements PostgreSQL spent the most time on in the window, with
	// -pg-statements.
	statements []string
	// autovacuums is how many autovacuum and autoanalyze runs of the database's tables ended
	// in the window: PostgreSQL's background work, in its CPU when that is counted; autovacuumed
	// names their tables.
	autovacuums  int64
	autovacuumed []string
}

// window measures the tasks ids at interval for d.
func (e *env) window(base string, ids []string, interval, d time.Duration, pg bool) (measured, error) {
	var m measured
	if err := e.openWindowAt(base, ids, interval); err != nil {
		return m, err
	}
	traced := pg && e.o.PGStatements
	if traced {
		_, _ = e.pool.Exec(context.Background(), `SELECT pg_stat_statements_reset()`)
	}
	av0 := e.autovacuums()
	self0, pg0 := selfCPU(), e.postgresCPUByRole()
	time.Sleep(d)
	self1, pg1 := selfCPU(), e.postgresCPUByRole()
	m.autovacuums, m.autovacuumed = e.autovacuumsSince(av0)
	if traced {
		m.statements = e.topStatements(8)
	}
	f, err := e.closeWindowAt(base)
	if err != nil {
		return m, err
	}
	m.windowFigures = f
	m.selfMs = float64(self1-self0) / float64(time.Millisecond)
	if pg && pg0 != nil && pg1 != nil {
		m.pgRoles = map[string]float64{}
		for role, d := range pg1 {
			ms := float64(d-pg0[role]) / float64(time.Millisecond)
			m.pgRoles[role] = ms
			m.pgMs += ms
		}
	}
	return m, nil
}

// pgRoleText is the window's PostgreSQL CPU by role, in milliseconds, largest first.
func (m measured) pgRoleText() string {
	roles := slices.Collect(maps.Keys(m.pgRoles))
	slices.SortFunc(roles, func(a, b string) int { return cmp.Compare(m.pgRoles[b], m.pgRoles[a]) })
	var parts []string
	for _, r := range roles {
		if ms := m.pgRoles[r]; ms != 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", r, ms))
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func (m measured) step(n int) Step {
	return Step{Tasks: n, LatenessP50Ms: m.LatenessP50Ms, LatenessP99Ms: m.LatenessP99Ms, Amplification: m.Amplification,
		Observations: m.Observations, CPUMs: round3(m.selfMs + m.pgMs)}
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func ptr[T any](v T) *T { return &v }

// steps are the task counts of a search: half the measured count, the measured count (where
// CPU and memory are taken), then half as many more each time, up to limit.
func steps(measured, limit int) []int {
	out := []int{max(1, measured/2)}
	for n := measured; n <= limit; n += max(1, n/2) {
		out = append(out, n)
	}
	if out[len(out)-1] < limit {
		out = append(out, limit)
	}
	return out
}

// cpuStep is the step of a search at which CPU and memory are taken: the measured count.
const cpuStep = 1

// watchPhase searches, at WatchPoll, for the largest task count the durable watcher holds with
// lateness p99 within 250 ms, reading the server with tasks/get only; at the first step it
// measures CPU per observation (console plus PostgreSQL) and memory per held task, then the
// same tasks read through tasks/list sweeps and driven by notifications.
func (e *env) watchPhase(ctx context.Context, res *Results) error {
	wf := &res.Watch
	poll := e.o.WatchPoll
	if err := e.parkOthers(ctx, "bench_watch1"); err != nil {
		return err
	}
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	w, err := e.startWatcher(ctx, "bench-get", modeGet)
	if err != nil {
		return err
	}
	defer w.Stop()
	var ids []string
	ss := steps(e.o.WatchTasks, e.o.WatchMax)
	for i, n := range ss {
		more, err := e.createTaskRows(ctx, e.watchURL, n-len(ids))
		if err != nil {
			return err
		}
		if err := e.ledgerTasks(ctx, "bench_watch1", "rcvw", more, poll); err != nil {
			return err
		}
		ids = append(ids, taskIDs(more)...)
		time.Sleep(3 * poll) // every new task taken into the hold and polled once
		m, err := e.window(e.watchURL, ids, poll, e.o.WatchFor, true)
		if err != nil {
			return err
		}
		wf.Steps = append(wf.Steps, m.step(n))
		fmt.Fprintf(e.o.Log, "bench: watch %d tasks at %v: lateness p99 %.0f ms, amplification %.3f\n", n, poll, m.LatenessP99Ms, m.Amplification)
		if i == min(cpuStep, len(ss)-1) || (i < cpuStep && m.LatenessP99Ms > 250) {
			runtime.GC()
			var m1 runtime.MemStats
			runtime.ReadMemStats(&m1)
			wf.Tasks, wf.Polls, wf.LatenessP99Ms, wf.Amplification = n, m.Observations, m.LatenessP99Ms, m.Amplification
			wf.BytesPerTask = math.Round(math.Max(0, float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))) / float64(n))
			if m.Observations > 0 {
				wf.ConsoleCPUMsPerPoll = round3(m.selfMs / float64(m.Observations))
				p := round3(m.pgMs / float64(m.Observations))
				wf.PostgresCPUMsPerPoll = &p
				wf.CPUMsPerObservation = round3((m.selfMs + m.pgMs) / float64(m.Observations))
			}
			wf.GetCPUMsPerTaskInterval = round3((m.selfMs + m.pgMs) / (float64(n) * m.Seconds / poll.Seconds()))
		}
		if m.LatenessP99Ms > 250 {
			break
		}
		wf.MaxTasks1s = ptr(n)
	}
	w.Stop()
	if len(ids) < e.o.WatchTasks {
		more, err := e.createTaskRows(ctx, e.watchURL, e.o.WatchTasks-len(ids))
		if err != nil {
			return err
		}
		if err := e.ledgerTasks(ctx, "bench_watch1", "rcvw", more, poll); err != nil {
			return err
		}
		ids = append(ids, taskIDs(more)...)
	}
	// The same search with the watcher reading the receiver through tasks/list sweeps, as it
	// does by default on a server that declares tasks.list.
	if slices.Contains(e.o.WatchModes, string(modeList)) {
		if err := e.handBack(ctx, "bench_watch1"); err != nil {
			return err
		}
		lw, err := e.startWatcher(ctx, "bench-list-search", modeList)
		if err != nil {
			return err
		}
		for _, n := range ss {
			if len(ids) < n {
				more, err := e.createTaskRows(ctx, e.watchURL, n-len(ids))
				if err != nil {
					lw.Stop()
					return err
				}
				if err := e.ledgerTasks(ctx, "bench_watch1", "rcvw", more, poll); err != nil {
					lw.Stop()
					return err
				}
				ids = append(ids, taskIDs(more)...)
			}
			e.dropOthers(ctx, "bench_watch1", ids[:n])
			time.Sleep(3*poll + poll/2) // read once each, then aligned with the sweeps
			m, err := e.window(e.watchURL, ids[:n], poll, e.o.WatchFor, true)
			if err != nil {
				lw.Stop()
				return err
			}
			wf.ListSteps = append(wf.ListSteps, m.step(n))
			fmt.Fprintf(e.o.Log, "bench: watch %d tasks at %v, tasks/list sweeps: lateness p99 %.0f ms, amplification %.3f\n", n, poll, m.LatenessP99Ms, m.Amplification)
			if m.LatenessP99Ms > 250 {
				break
			}
			wf.ListMaxTasks1s = ptr(n)
		}
		lw.Stop()
	}
	// The measured count's tasks again, read by a replica using tasks/list sweeps, then by one
	// driven by status notifications.
	first := ids[:e.o.WatchTasks]
	for _, mode := range []watchMode{modeList, modeNotify} {
		if !slices.Contains(e.o.WatchModes, string(mode)) {
			continue
		}
		m, every, err := e.modeWindow(ctx, mode, watchTarget{"bench_watch1", "rcvw", e.watchURL}, first, false)
		if err != nil {
			return err
		}
		perInterval := m.perTaskInterval(len(first), poll)
		switch mode {
		case modeList:
			if m.Observations > 0 {
				wf.ListCPUMsPerObservation = ptr(round3((m.selfMs + m.pgMs) / float64(m.Observations)))
			}
			wf.ListCPUMsPerTaskInterval = ptr(perInterval)
			wf.ListLatenessP99Ms = ptr(m.LatenessP99Ms)
		case modeNotify:
			wf.NotifyCPUMsPerTaskInterval = ptr(perInterval)
			wf.NotifyPollsPerTaskInterval = ptr(round3(m.Amplification * poll.Seconds() / every.Seconds()))
			wf.NotifyLatenessP99Ms = ptr(m.LatenessP99Ms)
		}
		fmt.Fprintf(e.o.Log, "bench: watch %d tasks, %s: lateness p99 %.0f ms, %d observations, %.3f ms CPU per task-interval (console %.0f ms + PostgreSQL %.0f ms over %.1f s)\n",
			len(first), mode, m.LatenessP99Ms, m.Observations, perInterval, m.selfMs, m.pgMs, m.Seconds)
	}
	return e.handBack(ctx, "bench_watch1")
}

// watchTarget is where a window's tasks are: their workflow, its server and the receiver's URL.
type watchTarget struct{ workflow, server, url string }

// modeWindow measures the tasks ids of at read by a new watcher replica in mode after three
// intervals of warming up; with settled, the tasks table is vacuumed first (see settle). Notifications drive the tasks: they are polled at the safety net
// (ten intervals here), and lateness is counted against it, over at least one of them; every
// is the interval lateness was counted against.
func (e *env) modeWindow(ctx context.Context, mode watchMode, at watchTarget, ids []string, settled bool) (m measured, every time.Duration, err error) {
	poll := e.o.WatchPoll
	if err := e.handBack(ctx, at.workflow); err != nil {
		return m, 0, err
	}
	if settled {
		// The tasks are made due before the table settles: the bench's own writes then count
		// toward no autovacuum or autoanalyze in the window; the watcher's do.
		e.dropOthers(ctx, at.workflow, ids)
		if err := e.settle(ctx, "tasks"); err != nil {
			return m, 0, err
		}
	}
	if mode == modeNotify {
		if err := e.notifyOnce(ctx, at.server); err != nil {
			return m, 0, err
		}
	}
	w, err := e.startWatcher(ctx, "bench-"+string(mode), mode)
	if err != nil {
		return m, 0, err
	}
	defer w.Stop()
	if !settled {
		e.dropOthers(ctx, at.workflow, ids)
	}
	time.Sleep(3 * poll)
	every, span := poll, e.o.WatchFor
	if mode == modeNotify {
		every = 10 * poll
		span = max(span, every+2*poll)
	}
	m, err = e.window(at.url, ids, every, span, true)
	return m, every, err
}

// topStatements describes the n statements PostgreSQL spent the most time on since
// pg_stat_statements was last reset: calls, total and mean time, rows, and the text's start.
func (e *env) topStatements(n int) []string {
	rows, err := e.pool.Query(context.Background(), `SELECT format('%s calls, %s ms (%s ms each), %s rows: %s', calls,
			round(total_exec_time::numeric + total_plan_time::numeric, 1), round((total_exec_time + total_plan_time)::numeric / greatest(calls, 1), 3), rows,
			left(regexp_replace(query, '\s+', ' ', 'g'), 120))
		FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'
		ORDER BY total_exec_time + total_plan_time DESC LIMIT $1`, n)
	if err != nil {
		return []string{"pg_stat_statements: " + err.Error()}
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return []string{"pg_stat_statements: " + err.Error()}
	}
	return out
}

// autovacuums is how many autovacuum and autoanalyze runs have ended, by table (empty when it
// cannot be read).
func (e *env) autovacuums() map[string]int64 {
	out := map[string]int64{}
	rows, err := e.pool.Query(context.Background(), `SELECT relname, autovacuum_count + autoanalyze_count FROM pg_stat_user_tables`)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int64
		if rows.Scan(&name, &n) == nil {
			out[name] = n
		}
	}
	return out
}

// autovacuumsSince is how many autovacuum and autoanalyze runs ended since before, and of
// which tables.
func (e *env) autovacuumsSince(before map[string]int64) (n int64, tables []string) {
	for name, c := range e.autovacuums() {
		if d := c - before[name]; d > 0 {
			n += d
			tables = append(tables, name)
		}
	}
	slices.Sort(tables)
	return n, tables
}

// perTaskInterval is the window's CPU (this process's, plus PostgreSQL's when measured) per
// task kept watched for one poll interval: n tasks over the window's seconds.
func (m measured) perTaskInterval(n int, poll time.Duration) float64 {
	return round3((m.selfMs + m.pgMs) / (float64(n) * m.Seconds / poll.Seconds()))
}

// notifyOnce runs a short task on the watcher's connection to server, so the receiver sends
// a status notification on that connection's GET stream: the evidence on which the watcher
// treats the connection as delivering notifications (its tasks are quiet otherwise).
func (e *env) notifyOnce(ctx context.Context, server string) error {
	conn, err := e.servers.Conn(ctx, server)
	if err != nil {
		return err
	}
	if _, err := conn.CreateTask(ctx, receiver.ToolWorkOptional, map[string]any{"duration_ms": 100}, mcpclient.TaskOptions{}); err != nil {
		return err
	}
	for range 50 {
		if mcpclient.NotifiesStatus(conn) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("no status notification reached the watcher's connection to %s", server)
}

// parkOthers takes every running task of the other phases (the start phases leave thousands,
// working for hours) out of the watchers' way for a day: a watch phase measures its own tasks.
func (e *env) parkOthers(ctx context.Context, workflow string) error {
	_, err := e.pool.Exec(ctx, `UPDATE tasks t SET lease_owner = NULL, lease_expires_at = NULL, next_poll_at = now() + interval '1 day', held_poll_at = NULL
		FROM operations o WHERE o.id = t.operation_id AND o.workflow <> $1 AND t.state IN ('working', 'input_required')`, workflow)
	return err
}

// handBack ends the watching of a workflow's tasks by the bench's replicas (they stay running
// at the receiver): no lease, not due for a day.
func (e *env) handBack(ctx context.Context, workflow string) error {
	_, err := e.pool.Exec(ctx, `UPDATE tasks t SET lease_owner = NULL, lease_expires_at = NULL, next_poll_at = now() + interval '1 day', held_poll_at = NULL
		FROM operations o WHERE o.id = t.operation_id AND o.workflow = $1 AND t.state = 'working'`, workflow)
	return err
}

// dropOthers makes the tasks ids of workflow due at once and leaves the others out.
func (e *env) dropOthers(ctx context.Context, workflow string, ids []string) {
	_, _ = e.pool.Exec(ctx, `UPDATE tasks t SET next_poll_at = now(), held_poll_at = NULL FROM operations o
		WHERE o.id = t.operation_id AND o.workflow = $1 AND t.task_id = ANY($2::text[])`, workflow, ids)
}

// waitForTaskPhase runs the same search with mcp-go v1.2.1's client.WaitForTask (one goroutine
// per task polling tasks/get, nothing durable) on the same receiver and interval, with the
// watcher's pooled HTTP transport, and measures this process's CPU per poll at the first step.
func (e *env) waitForTaskPhase(ctx context.Context, res *Results) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	poll := e.o.WatchPoll
	c, err := waitForTaskClient(ctx, e.watchURL)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	// The search's waiters run until the search ends.
	sctx, scancel := context.WithCancel(ctx)
	var waiters sync.WaitGroup
	defer func() { scancel(); waiters.Wait() }()
	wf := &res.Watch
	var ids []string
	ss := steps(e.o.WatchTasks, e.o.WatchMax)
	for i, n := range ss {
		more, err := e.createTasks(ctx, e.watchURL, n-len(ids))
		if err != nil {
			return err
		}
		for _, id := range more {
			waiters.Go(func() {
				_, _ = c.WaitForTask(sctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: id}}, poll)
			})
		}
		ids = append(ids, more...)
		time.Sleep(3 * poll)
		m, err := e.window(e.watchURL, ids, poll, e.o.WatchFor, false)
		if err != nil {
			return err
		}
		wf.WaitForTaskSteps = append(wf.WaitForTaskSteps, m.step(n))
		fmt.Fprintf(e.o.Log, "bench: WaitForTask %d tasks at %v: lateness p99 %.0f ms, amplification %.3f\n", n, poll, m.LatenessP99Ms, m.Amplification)
		if i == min(cpuStep, len(ss)-1) || (i < cpuStep && m.LatenessP99Ms > 250) {
			wf.WaitForTaskAmplification = ptr(m.Amplification)
			wf.WaitForTaskLatenessP99Ms = ptr(m.LatenessP99Ms)
			if m.Observations > 0 {
				wf.WaitForTaskCPUMsPoll = ptr(round3(m.selfMs / float64(m.Observations)))
			}
		}
		if m.LatenessP99Ms > 250 {
			break
		}
		wf.WaitForTaskMaxTasks1s = ptr(n)
	}
	scancel()
	waiters.Wait()
	return e.pairedCPU(ctx, res)
}

// waitForTaskClient is an initialized mcp-go client of the authenticated receiver at base, on
// the watcher's pooled HTTP transport.
func waitForTaskClient(ctx context.Context, base string) (*client.Client, error) {
	hc := &http.Client{Transport: mcpclient.NewHTTPClient(0).Transport}
	c, err := client.NewStreamableHttpClient(base+"/mcp", transport.WithHTTPBasicClient(hc),
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + benchToken}))
	if err != nil {
		return nil, err
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1"}
	if err := c.Start(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	if _, err := c.Initialize(ctx, init); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// pairedCPU measures what keeping one of WatchTasks tasks watched for one poll interval costs
// WaitForTask and the durable watcher in each mode the run measures, in windows alternating
// within a round and in reverse order in the next (ABBA), so that a machine whose speed drifts
// over minutes weighs on both alike: the watcher's CPU ratios against WaitForTask's are read
// from these windows, not from searches run minutes apart. The tasks are on a receiver of
// their own that holds nothing else (the searches leave thousands more on theirs, which a
// tasks/list sweep would list too). WaitForTask's CPU is this process's; the watcher's adds
// PostgreSQL's.
func (e *env) pairedCPU(ctx context.Context, res *Results) error {
	if e.o.PairRounds <= 0 {
		return nil
	}
	poll := e.o.WatchPoll
	at := watchTarget{"bench_pair", "rcvp", e.pairURL}
	rows, err := e.createTaskRows(ctx, at.url, e.o.WatchTasks)
	if err != nil {
		return err
	}
	if err := e.ledgerTasks(ctx, at.workflow, at.server, rows, poll); err != nil {
		return err
	}
	if err := e.parkOthers(ctx, at.workflow); err != nil {
		return err
	}
	if err := e.settle(ctx, ""); err != nil {
		return err
	}
	ids := taskIDs(rows)
	c, err := waitForTaskClient(ctx, at.url)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	sides := []string{"waitfortask", string(modeGet)}
	for _, m := range []watchMode{modeList, modeNotify} {
		if slices.Contains(e.o.WatchModes, string(m)) {
			sides = append(sides, string(m))
		}
	}
	sum := map[string]float64{}
	p := &Paired{Tasks: len(ids)}
	for r := range e.o.PairRounds {
		order := slices.Clone(sides)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		round := map[string]float64{}
		for _, side := range order {
			var m measured
			var err error
			if side == "waitfortask" {
				if err = e.handBack(ctx, at.workflow); err == nil {
					if err = e.settle(ctx, "tasks"); err == nil {
						m, err = e.waitForTaskWindow(ctx, c, at.url, ids)
					}
				}
			} else {
				m, _, err = e.modeWindow(ctx, watchMode(side), at, ids, true)
			}
			if err != nil {
				return fmt.Errorf("paired %s window: %w", side, err)
			}
			round[side] = m.perTaskInterval(len(ids), poll)
			sum[side] += round[side]
			fmt.Fprintf(e.o.Log, "bench: paired %s window: %.3f ms CPU per task-interval (console %.0f ms + PostgreSQL %.0f ms %s over %.1f s; %d autovacuum runs ended in it %v)\n",
				side, round[side], m.selfMs, m.pgMs, m.pgRoleText(), m.Seconds, m.autovacuums, m.autovacuumed)
			for _, st := range m.statements {
				fmt.Fprintf(e.o.Log, "bench:     %s\n", st)
			}
		}
		p.Rounds = append(p.Rounds, round)
		fmt.Fprintf(e.o.Log, "bench: paired CPU per task-interval, round %d: %v\n", r+1, round)
	}
	ratio := func(side string) *float64 {
		if sum[side] == 0 || sum["waitfortask"] == 0 {
			return nil
		}
		return ptr(round2(sum[side] / sum["waitfortask"]))
	}
	p.GetRatio, p.ListRatio, p.NotifyRatio = ratio(string(modeGet)), ratio(string(modeList)), ratio(string(modeNotify))
	res.Watch.Paired = p
	return e.handBack(ctx, at.workflow)
}

// settle has PostgreSQL do now the background work left to it (vacuuming what was deleted
// and updated, analyzing what changed, a checkpoint), which would otherwise land in whichever
// window it falls in: the watcher's PostgreSQL CPU is that of every PostgreSQL process. table
// names the one table to settle, empty for the whole database. In a whole run a notifications
// window read 1,080 ms of PostgreSQL CPU over 12 s for 1,000 observations, where the same
// window reads 90–140 ms on its own; a VACUUM alone leaves the changes counted toward the next
// autoanalyze, and autovacuum runs ending in a tasks/list window took its PostgreSQL CPU from
// 250 to 660 ms. The paired windows settle the whole database once, then the tasks table
// before each window: the bench itself rewrites two thousand of its rows between two windows
// (handing the tasks back, making them due), which is not the watcher's work.
func (e *env) settle(ctx context.Context, table string) error {
	if table == "" {
		e.drained(ctx)
	}
	what := `VACUUM (ANALYZE)`
	if table != "" {
		what += " " + pgx.Identifier{table}.Sanitize()
	}
	if _, err := e.pool.Exec(ctx, what); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	_, err := e.pool.Exec(ctx, `CHECKPOINT`)
	return err
}

// drained waits, up to a minute, until the console's background work has caught up with the
// ledger: no dirty marks for the compactor, no live changes to publish, no queue count changes
// to fold. The paired windows' ledger rows are written just before the database settles, and a
// compaction that ran after the settle rewrote the console's read model (tens of thousands of
// rows at a whole run's size), whose autovacuum and autoanalyze then ended in a later window:
// three of them took 490 ms of PostgreSQL's CPU in one tasks/list window of 12 s.
func (e *env) drained(ctx context.Context) {
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		var busy bool
		err := e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM overview_dirty) OR EXISTS (SELECT 1 FROM live_changes)
			OR EXISTS (SELECT 1 FROM queue_count_deltas)`).Scan(&busy)
		if err != nil || !busy {
			return
		}
	}
}

// waitForTaskWindow watches ids with one WaitForTask each on c (a client of the receiver at
// base) for a window, after three intervals of warming up, and stops them.
func (e *env) waitForTaskWindow(ctx context.Context, c *client.Client, base string, ids []string) (measured, error) {
	poll := e.o.WatchPoll
	wctx, cancel := context.WithCancel(ctx)
	var waiters sync.WaitGroup
	defer func() { cancel(); waiters.Wait() }()
	for _, id := range ids {
		waiters.Go(func() {
			_, _ = c.WaitForTask(wctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: id}}, poll)
		})
	}
	time.Sleep(3 * poll)
	return e.window(base, ids, poll, e.o.WatchFor, false)
}

// longPhase watches LongTasks at LongPoll with one replica for LongFor, reading the server in
// LongMode (the server offers tasks/list; "get" reads it with tasks/get only).
func (e *env) longPhase(ctx context.Context, res *Results) error {
	wf := &res.Watch
	poll := e.o.LongPoll
	if err := e.parkOthers(ctx, "bench_watch30"); err != nil {
		return err
	}
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	mode := watchMode(e.o.LongMode)
	w, err := e.startWatcher(ctx, "bench-long", mode)
	if err != nil {
		return err
	}
	defer w.Stop()
	rows, err := e.createTaskRows(ctx, e.watch30URL, e.o.LongTasks)
	if err != nil {
		return err
	}
	if err := e.ledgerTasks(ctx, "bench_watch30", "rcvw30", rows, poll); err != nil {
		return err
	}
	ids := taskIDs(rows)
	// Every task taken into the hold and polled once (all were due at once).
	deadline := time.Now().Add(poll)
	for time.Now().Before(deadline) {
		var left int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM tasks t JOIN operations o ON o.id = t.operation_id
			WHERE o.workflow = 'bench_watch30' AND t.lease_owner IS NULL`).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Two intervals more: every task read once on its own and, on the list mode, aligned with
	// the sweeps by the first of them; measured from there for LongFor.
	time.Sleep(2*poll + poll/10)
	m, err := e.window(e.watch30URL, ids, poll, e.o.LongFor, true)
	if err != nil {
		return err
	}
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	wf.LongTasks, wf.LongPollS, wf.LongMode = len(ids), poll.Seconds(), string(mode)
	wf.LongLatenessP99Ms, wf.LongAmplification = ptr(m.LatenessP99Ms), ptr(m.Amplification)
	if m.Observations > 0 {
		wf.LongCPUMsPerObservation = ptr(round3((m.selfMs + m.pgMs) / float64(m.Observations)))
	}
	wf.LongBytesPerTask = ptr(math.Round(math.Max(0, float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))) / float64(len(ids))))
	fmt.Fprintf(e.o.Log, "bench: watch %d tasks at %v: lateness p99 %.0f ms, amplification %.3f\n", len(ids), poll, m.LatenessP99Ms, m.Amplification)
	w.Stop()
	return e.handBack(ctx, "bench_watch30")
}
