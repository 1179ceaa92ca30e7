package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/dbpool"
	"github.com/taskgate/taskgate/internal/pgcluster"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/migrations"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/rollout"
)

// Options set the scale of a run.
type Options struct {
	Quick       bool
	DatabaseURL string
	// KeepDatabase names a database on DatabaseURL's server that the run uses and keeps: it is
	// created (and seeded) when missing and reused as it is, so a seeded ledger serves several
	// runs. Empty: a database of this run's own, dropped at the end.
	KeepDatabase string
	// PGStatements has each paired CPU window log the statements PostgreSQL spent the most
	// time on in it (pg_stat_statements: preloaded in the private cluster, and on a
	// -database-url server it must be in shared_preload_libraries).
	PGStatements bool
	Out          string
	// Operations is the ledger size of the scale phase; OpenTasks of them are still open and
	// OpenItems are open reconciliation items.
	Operations, OpenTasks, OpenItems int
	// Clients is the number of concurrent start clients (4).
	Clients int
	// Phase is the length of each timed start phase.
	Phase time.Duration
	// PageRequests is how many times each console page is fetched.
	PageRequests int
	// Toggles is the number of kill switch engage/release rounds.
	Toggles int
	// WatchTasks are the first step of the watch searches at a poll interval of WatchPoll, each
	// step measured for WatchFor; the searches stop at WatchMax tasks.
	WatchTasks int
	WatchMax   int
	WatchFor   time.Duration
	WatchPoll  time.Duration
	// WatchModes are the modes the watch phase measures besides tasks/get ("list", "notify").
	WatchModes []string
	// PairRounds is how many rounds the paired CPU windows alternate (0: none).
	PairRounds int
	// LongTasks are watched at a poll interval of LongPoll for LongFor.
	LongTasks int
	LongPoll  time.Duration
	LongFor   time.Duration
	// LongMode is how the long run reads the server: "list" (the default: the server offers
	// tasks/list) or "get".
	LongMode string
	// Only names the phases to run (empty: all). Setup always runs; the scale and console
	// phases seed the ledger first.
	Only []string
	// Pages, when set, keeps the console pages whose names it matches.
	Pages  *regexp.Regexp
	Logger *slog.Logger
	// Log receives the progress lines.
	Log io.Writer
}

// runs reports whether the phase named is selected.
func (o Options) runs(phase string) bool {
	switch {
	case len(o.Only) == 0 || slices.Contains(o.Only, phase):
		return true
	case phase == "seed":
		return o.runs("scale") || o.runs("console")
	}
	return false
}

func withScale(o Options, quick bool) Options {
	o.Quick = quick
	o.Operations, o.OpenTasks, o.OpenItems = 1_000_000, 20_000, 100_000
	o.Clients, o.Phase, o.PageRequests, o.Toggles = 4, 10*time.Second, 40, 50
	o.WatchTasks, o.WatchMax, o.WatchFor, o.WatchPoll = 1000, 24_000, 12*time.Second, time.Second
	o.LongTasks, o.LongPoll, o.LongFor = 100_000, 30*time.Second, 65*time.Second
	if quick {
		o.Operations, o.OpenItems = 100_000, 10_000
		o.Phase, o.PageRequests = 5*time.Second, 20
		o.WatchTasks, o.WatchMax, o.WatchFor = 500, 1700, 4*time.Second
		o.LongTasks, o.LongFor = 10_000, 32*time.Second
	}
	return o
}

func (o Options) filled() Options {
	d := withScale(Options{}, o.Quick)
	if o.Operations <= 0 {
		o.Operations = d.Operations
	}
	if o.OpenTasks <= 0 {
		o.OpenTasks = min(d.OpenTasks, o.Operations/5)
	}
	if o.OpenItems <= 0 {
		o.OpenItems = min(d.OpenItems, o.Operations/10)
	}
	if o.Clients <= 0 {
		o.Clients = d.Clients
	}
	if o.Phase <= 0 {
		o.Phase = d.Phase
	}
	if o.PageRequests <= 0 {
		o.PageRequests = d.PageRequests
	}
	if o.Toggles <= 0 {
		o.Toggles = d.Toggles
	}
	if o.WatchTasks <= 0 {
		o.WatchTasks = d.WatchTasks
	}
	if o.WatchFor <= 0 {
		o.WatchFor = d.WatchFor
	}
	if o.WatchMax <= 0 {
		o.WatchMax = max(d.WatchMax, o.WatchTasks)
	}
	if o.LongTasks <= 0 {
		o.LongTasks = d.LongTasks
	}
	if o.LongPoll <= 0 {
		o.LongPoll = d.LongPoll
	}
	if o.LongFor <= 0 {
		o.LongFor = d.LongFor
	}
	if o.LongMode == "" {
		o.LongMode = "list"
	}
	if o.WatchPoll <= 0 {
		o.WatchPoll = d.WatchPoll
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Results are the figures written to bench.json.
type Results struct {
	Scale      ScaleInfo          `json:"scale"`
	Start      StartFigures       `json:"start"`
	Watch      WatchFigures       `json:"watch"`
	KillSwitch KillSwitchFigures  `json:"killswitch"`
	Console    ConsoleFigures     `json:"console"`
	Notes      []string           `json:"notes,omitempty"`
	Machine    map[string]any     `json:"machine"`
	Phases     map[string]float64 `json:"phase_seconds"`
}

// ScaleInfo says what was measured.
type ScaleInfo struct {
	Quick      bool `json:"quick"`
	Operations int  `json:"operations"`
	OpenTasks  int  `json:"open_tasks"`
	OpenItems  int  `json:"open_items"`
	Clients    int  `json:"clients"`
}

// StartFigures are the start path's.
type StartFigures struct {
	InsertsPerS  float64 `json:"inserts_per_s"`
	TasksPerS    float64 `json:"tasks_per_s"`
	Ratio        float64 `json:"ratio"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	UncappedPerS float64 `json:"uncapped_tasks_per_s"`
	SyncPerS     float64 `json:"sync_per_s"`
	SyncRatio    float64 `json:"sync_ratio"`
	SyncP99Ms    float64 `json:"sync_p99_ms"`
	// CPU per insert, per capped Task start and per sync start: console, PostgreSQL and
	// receiver milliseconds (the console spends none on an insert of the bench's own).
	InsertCPU CPUPerUnit `json:"insert_cpu_ms"`
	TaskCPU   CPUPerUnit `json:"task_cpu_ms"`
	SyncCPU   CPUPerUnit `json:"sync_cpu_ms"`
	// The scale phase's capped starts on the seeded ledger (ScaleTasksPerS) and on an empty
	// one beside it (ScaleEmptyPerS), measured in alternating stretches: ScaleRatio is the one
	// over the other, ScaleRounds the same ratio round by round. ScaleCPU and ScaleEmptyCPU are
	// their TaskCPU.
	ScaleTasksPerS  float64    `json:"scale_tasks_per_s"`
	ScaleP99Ms      float64    `json:"scale_p99_ms"`
	ScaleRatio      float64    `json:"scale_ratio"`
	ScaleEmptyPerS  float64    `json:"scale_empty_tasks_per_s"`
	ScaleEmptyP99Ms float64    `json:"scale_empty_p99_ms"`
	ScaleRounds     []float64  `json:"scale_ratio_rounds"`
	ScaleCPU        CPUPerUnit `json:"scale_task_cpu_ms"`
	ScaleEmptyCPU   CPUPerUnit `json:"scale_empty_task_cpu_ms"`
	// The WAL figures are PostgreSQL's write-ahead log per capped start, bytes and full-page
	// images: in the start phase, and in the scale phase on each ledger.
	WAL              WALPerUnit `json:"wal_per_start"`
	ScaleWAL         WALPerUnit `json:"scale_wal_per_start"`
	ScaleEmptyWAL    WALPerUnit `json:"scale_empty_wal_per_start"`
	Errors           int64      `json:"errors"`
	CapExceeded      bool       `json:"cap_exceeded"`
	CapLimit         int        `json:"cap_limit"`
	CapMaxInFlight   int        `json:"cap_max_in_flight"`
	CapRefused       int64      `json:"cap_refused"`
	StatementsPerRun float64    `json:"statements_per_start,omitempty"`
	// UncachedPerS and UncachedStatements are the capped start with a router that reads its
	// inputs (stage, manifest status) for every decision: the figures before the cache.
	UncachedPerS       float64 `json:"uncached_router_tasks_per_s"`
	UncachedStatements float64 `json:"uncached_router_statements_per_start"`
	// The MCP calls alone, with no ledger, no route and no database: the bench_capped tool
	// created as a Task, and the bench_sync tool called plainly, by 4 clients through the same
	// pooled connection to the same receiver. A start makes exactly one such call, so its rate
	// is the most a start could reach on this machine if the database and the console's
	// bookkeeping cost nothing: CallCeiling and SyncCallCeiling are those rates ÷ the insert
	// rate, the bound on start.ratio and start.sync_ratio.
	BareTasksPerS   float64    `json:"bare_tasks_per_s"`
	BareTaskCPU     CPUPerUnit `json:"bare_task_cpu_ms"`
	CallCeiling     float64    `json:"call_ceiling_ratio"`
	BareSyncPerS    float64    `json:"bare_sync_per_s"`
	BareSyncCPU     CPUPerUnit `json:"bare_sync_cpu_ms"`
	SyncCallCeiling float64    `json:"sync_call_ceiling_ratio"`
	// The floor: the same calls, each between two plain single-row inserts committed on their
	// own, by the same clients. That is the least a start must do: its ledger row durable
	// before the call (so a crash can never resend it) and the call's answer durable before
	// the start is answered. FloorRatio and SyncFloorRatio (÷ the insert rate) bound
	// start.ratio and start.sync_ratio on this machine whatever the bookkeeping costs.
	FloorTasksPerS float64    `json:"floor_tasks_per_s"`
	FloorTaskCPU   CPUPerUnit `json:"floor_task_cpu_ms"`
	FloorRatio     float64    `json:"floor_ratio"`
	FloorSyncPerS  float64    `json:"floor_sync_per_s"`
	FloorSyncCPU   CPUPerUnit `json:"floor_sync_cpu_ms"`
	SyncFloorRatio float64    `json:"sync_floor_ratio"`
	// The ledger alone: what a capped Task start writes (the cap's reservation, the operation
	// with its task and call marker, then the created task), through the same Store calls and
	// the same pool, with no MCP call, no route and no answer built. LedgerRatio (÷ the insert
	// rate) bounds start.ratio whatever the call costs, as the floor bounds it whatever the
	// bookkeeping costs.
	LedgerTasksPerS float64    `json:"ledger_tasks_per_s"`
	LedgerTaskCPU   CPUPerUnit `json:"ledger_task_cpu_ms"`
	LedgerRatio     float64    `json:"ledger_ratio"`
	// RowsPerStart is the rows a Task start wrote, over every table (the ledger, the console's
	// read model, the live-update queue; see RowsPerUnit). A plain insert writes one.
	RowsPerStart RowsPerUnit `json:"rows_per_start"`
}

// WatchFigures are the durable watcher's, beside mcp-go's WaitForTask on the same receiver.
// Lateness and observations are counted by the receiver (see recorder).
type WatchFigures struct {
	// Tasks is the first step of the 1 s search, where the CPU and memory figures are taken.
	Tasks int `json:"tasks_1s"`
	// MaxTasks1s is the largest step whose lateness p99 was within 250 ms (null: none).
	MaxTasks1s    *int    `json:"max_tasks_1s"`
	LatenessP99Ms float64 `json:"lateness_p99_ms"`
	Polls         int64   `json:"polls"`
	// Amplification is observations made ÷ due over every task in flight, first step.
	Amplification        float64  `json:"amplification"`
	CPUMsPerObservation  float64  `json:"cpu_ms_per_observation"`
	ConsoleCPUMsPerPoll  float64  `json:"console_cpu_ms_per_poll"`
	PostgresCPUMsPerPoll *float64 `json:"postgres_cpu_ms_per_poll"`
	BytesPerTask         float64  `json:"bytes_per_task"`
	Steps                []Step   `json:"steps_1s"`
	// The same first step with the watcher reading tasks/list sweeps (list) and with status
	// notifications driving it (notify): CPU per observation and per task-interval watched.
	// ListMaxTasks1s is the same search with the watcher reading through tasks/list sweeps.
	ListMaxTasks1s             *int     `json:"list_max_tasks_1s"`
	ListSteps                  []Step   `json:"list_steps_1s"`
	ListCPUMsPerObservation    *float64 `json:"list_cpu_ms_per_observation"`
	ListCPUMsPerTaskInterval   *float64 `json:"list_cpu_ms_per_task_interval"`
	ListLatenessP99Ms          *float64 `json:"list_lateness_p99_ms"`
	ListRequestsPerSweep       *float64 `json:"list_requests_per_task_interval"`
	NotifyCPUMsPerTaskInterval *float64 `json:"notify_cpu_ms_per_task_interval"`
	NotifyPollsPerTaskInterval *float64 `json:"notify_polls_per_task_interval"`
	NotifyLatenessP99Ms        *float64 `json:"notify_lateness_p99_ms"`
	GetCPUMsPerTaskInterval    float64  `json:"get_cpu_ms_per_task_interval"`

	WaitForTaskMaxTasks1s *int     `json:"waitfortask_max_tasks_1s"`
	WaitForTaskCPUMsPoll  *float64 `json:"waitfortask_cpu_ms_per_poll"`
	// WaitForTaskAmplification is WaitForTask's observations ÷ due at its first step.
	WaitForTaskAmplification *float64 `json:"waitfortask_amplification"`
	WaitForTaskLatenessP99Ms *float64 `json:"waitfortask_lateness_p99_ms"`
	WaitForTaskSteps         []Step   `json:"waitfortask_steps_1s"`
	// Paired is the CPU of WaitForTask and the watcher's modes in alternating windows.
	Paired *Paired `json:"paired,omitempty"`

	// The long run: LongTasks at LongPoll on one replica.
	LongTasks               int      `json:"long_tasks"`
	LongMode                string   `json:"long_mode"`
	LongPollS               float64  `json:"long_poll_s"`
	LongLatenessP99Ms       *float64 `json:"long_lateness_p99_ms"`
	LongAmplification       *float64 `json:"long_amplification"`
	LongCPUMsPerObservation *float64 `json:"long_cpu_ms_per_observation"`
	LongBytesPerTask        *float64 `json:"long_bytes_per_task"`
}

// Paired is the CPU per task-interval of keeping the same Tasks watched, measured in
// alternating windows: WaitForTask ("waitfortask") and the watcher reading with tasks/get only
// ("get"), tasks/list sweeps ("list") and notifications ("notify"), one map per round. The
// ratios are the watcher's sums over WaitForTask's: the figures the CPU targets are read from.
type Paired struct {
	Tasks       int                  `json:"tasks"`
	Rounds      []map[string]float64 `json:"rounds"`
	GetRatio    *float64             `json:"get_cpu_ratio"`
	ListRatio   *float64             `json:"list_cpu_ratio"`
	NotifyRatio *float64             `json:"notify_cpu_ratio"`
}

// Step is one step of a search: how many tasks were watched and what the receiver saw.
type Step struct {
	Tasks         int     `json:"tasks"`
	LatenessP50Ms float64 `json:"lateness_p50_ms"`
	LatenessP99Ms float64 `json:"lateness_p99_ms"`
	Amplification float64 `json:"amplification"`
	Observations  int64   `json:"observations"`
	// CPUMs is this process's CPU (plus PostgreSQL's for the watcher) over the window.
	CPUMs float64 `json:"cpu_ms"`
}

// KillSwitchFigures are the kill switch's.
type KillSwitchFigures struct {
	Replicas int     `json:"replicas"`
	Toggles  int     `json:"toggles"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
}

// ConsoleFigures are the console's pages, server time measured on loopback.
type ConsoleFigures struct {
	P95Ms     float64            `json:"p95_ms"`
	WorstPage string             `json:"worst_page"`
	Pages     map[string]float64 `json:"pages_p95_ms"`
}

// env is one run's world.
type env struct {
	o       Options
	log     io.Writer
	cluster *pgcluster.Cluster
	// pgRoot is the PostgreSQL server's postmaster when it runs on this machine (the private
	// cluster's, or found from a backend of a -database-url server), 0 when unknown: its CPU
	// and its children's are PostgreSQL's.
	pgRoot int
	// world is the console wired on this run's database (dbName on the server at dbURL).
	*world
	dbURL   string
	dbName  string
	dropDB  func()
	rcvs    []child // receiver processes: the main one, then the watch phases' ones
	baseURL string
	// watchURL and watch30URL are the authenticated receivers of the watch phases, suggesting
	// WatchPoll and LongPoll (they offer tasks/list, as an authenticated server may).
	watchURL, watch30URL string
	// pairURL is the authenticated receiver of the paired CPU windows, suggesting WatchPoll:
	// it holds their tasks only, so that a tasks/list sweep there lists what is measured.
	pairURL string
	policy  *config.Config
	servers *operations.Servers
	keys    atomic.Int64
	// keyPrefix makes this run's idempotency keys its own (a kept database holds earlier runs').
	keyPrefix string
	// statements counts what the bench's pool sends to PostgreSQL.
	statements statementCounter
}

// world is what the console wires on one database: the pool, the manifests and their prober,
// the kill switch, the router kept fresh by the change listener, the start path and the
// compactor. The run has one; the scale phase opens a second on an empty database beside it.
type world struct {
	pool   *pgxpool.Pool
	mstore *manifests.Store
	prober *manifests.Prober
	router *rollout.Router
	flags  *killswitch.Service
	ops    *operations.Service
	// uncached is the start path with a router that reads its inputs for every decision.
	uncached *operations.Service
	// stopListen ends the change listener (it holds a connection of the pool).
	stopListen context.CancelFunc
	compactor  *operations.Compactor
}

// statementCounter counts the round trips made on a pool: each statement sent on its own
// (BEGIN and COMMIT included) and each batch (its statements travel together).
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// benchPolicy: %[1]s is the MCP URL. bench_capped runs under a concurrency cap, bench_open
// without one, bench_sync never uses a Task, bench_watch is watched.
const benchPolicy = `
tenants: [acme, globex]
owners: [{name: ops, contact: ops@example.com}]
servers:
  - {name: rcv, url: "%[1]s", era: legacy}
  - {name: rcvw, url: "%[4]s", era: legacy, token: {env: BENCH_WATCH_TOKEN}}
  - {name: rcvw30, url: "%[5]s", era: legacy, token: {env: BENCH_WATCH_TOKEN}}
  - {name: rcvp, url: "%[6]s", era: legacy, token: {env: BENCH_WATCH_TOKEN}}
workflows:
  - {name: bench_capped, server: rcv, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 2s},
     stage: full, max_ttl: 2h, owners: [ops], concurrency: %[2]d, backpressure: "429", retry_after: 1s}
  - {name: bench_open, server: rcv, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 2s},
     stage: full, max_ttl: 2h, owners: [ops]}
  - {name: bench_sync, server: rcv, tool: work_forbidden, effect: read_only, task_use: never, fallback: {kind: sync, max_duration: 2s},
     owners: [ops]}
  - {name: bench_watch, server: rcv, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 2s},
     stage: full, max_ttl: 2h, owners: [ops]}
  - {name: bench_watch1, server: rcvw, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 2s},
     stage: full, max_ttl: 4h, owners: [ops]}
  - {name: bench_watch30, server: rcvw30, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 2s},
     stage: full, max_ttl: 4h, owners: [ops]}
  - {name: bench_pair, server: rcvp, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 2s},
     stage: full, max_ttl: 4h, owners: [ops]}
  - {name: bench_tight, server: rcv, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 2s},
     stage: full, max_ttl: 2h, owners: [ops], concurrency: %[3]d, backpressure: "429", retry_after: 1s}
`

// capTight is the cap of bench_tight, which the cap phase drives past on purpose.
const capTight = 25

// Run runs every phase and returns the figures.
func Run(ctx context.Context, o Options, log io.Writer) (*Results, error) {
	o = o.filled()
	o.Log = log
	res := &Results{Scale: ScaleInfo{Quick: o.Quick, Operations: o.Operations, OpenTasks: o.OpenTasks, OpenItems: o.OpenItems, Clients: o.Clients},
		Phases: map[string]float64{}, Machine: machineInfo()}
	e := &env{o: o, log: log, keyPrefix: fmt.Sprintf("bench-%d-%d-", os.Getpid(), time.Now().UnixNano())}
	defer e.close()
	step := func(name string, f func() error) error {
		fmt.Fprintf(log, "bench: %s...\n", name)
		t0 := time.Now()
		err := f()
		res.Phases[name] = math.Round(time.Since(t0).Seconds()*10) / 10
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	if err := step("setup", func() error { return e.setup(ctx) }); err != nil {
		return nil, err
	}
	phases := []struct {
		name string
		f    func() error
	}{
		{"start", func() error { return e.startPhase(ctx, res) }},
		{"cap", func() error { return e.capPhase(ctx, res) }},
		{"killswitch", func() error { return e.killSwitchPhase(ctx, res) }},
		{"watch", func() error { return e.watchPhase(ctx, res) }},
		{"waitfortask", func() error { return e.waitForTaskPhase(ctx, res) }},
		{"watch30", func() error { return e.longPhase(ctx, res) }},
		{"seed", func() error { return e.seed(ctx) }},
		{"scale", func() error { return e.scalePhase(ctx, res) }},
		{"console", func() error { return e.consolePhase(ctx, res) }},
	}
	for _, p := range phases {
		if !o.runs(p.name) {
			continue
		}
		if err := step(p.name, p.f); err != nil {
			return nil, err
		}
	}
	res.Notes = append(res.Notes,
		"watch.* lateness and observations are counted by the receiver: an observation (a tasks/get of the task, or a tasks/list page listing it) is late by how long after the previous one plus the poll interval it came; a task not observed again by the end of a window counts as late since it fell due. WaitForTask is measured the same way on the same receiver.",
		"watch.max_tasks_1s and watch.waitfortask_max_tasks_1s are the largest steps of a search (each step half as many tasks more) whose lateness p99 was within 250 ms; the search stops at the first step over it or at -watch-max.",
		"watch.cpu_ms_per_observation is this process's CPU plus PostgreSQL's over the tasks/get observations of the first step; watch.waitfortask_cpu_ms_per_poll is this process's only (no database). *_per_task_interval divides by the task-intervals watched (tasks × seconds ÷ interval): what keeping one task watched for one poll interval costs, which is WaitForTask's per poll.")
	return res, nil
}

func (e *env) setup(ctx context.Context) error {
	admin := e.o.DatabaseURL
	if admin == "" {
		dir, err := os.MkdirTemp("", "taskgate-bench-")
		if err != nil {
			return err
		}
		settings := map[string]string{"max_connections": "200"}
		if e.o.PGStatements {
			settings["shared_preload_libraries"] = "pg_stat_statements"
		}
		c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Settings: settings, Logger: e.o.Logger})
		if err != nil {
			_ = os.RemoveAll(dir)
			return fmt.Errorf("private PostgreSQL: %w", err)
		}
		e.cluster = c
		admin = c.URL("postgres")
	}
	name := fmt.Sprintf("taskgate_bench_%d", os.Getpid())
	if e.o.KeepDatabase != "" {
		if e.cluster != nil {
			return errors.New("-keep-database needs -database-url: a private cluster is removed at the end")
		}
		name = e.o.KeepDatabase
	}
	drop, err := createDatabase(ctx, admin, name, e.o.KeepDatabase != "")
	if err != nil {
		return err
	}
	e.dropDB = func() {
		if e.o.KeepDatabase == "" {
			drop()
		}
	}
	e.dbURL, e.dbName = admin, name
	e.pgRoot = postmasterOf(ctx, admin, e.cluster)
	if e.baseURL, err = e.startReceiver(ctx, e.o.WatchPoll, false); err != nil {
		return err
	}
	if e.watchURL, err = e.startReceiver(ctx, e.o.WatchPoll, true); err != nil {
		return err
	}
	if e.watch30URL, err = e.startReceiver(ctx, e.o.LongPoll, true); err != nil {
		return err
	}
	if e.pairURL, err = e.startReceiver(ctx, e.o.WatchPoll, true); err != nil {
		return err
	}
	capped := 1_000_000_000 // a cap that is never reached: the cap's cost without its refusals
	if e.policy, err = config.Parse(fmt.Appendf(nil, benchPolicy, e.baseURL+"/mcp", capped, capTight, e.watchURL+"/mcp", e.watch30URL+"/mcp", e.pairURL+"/mcp")); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	e.servers = operations.NewServers(operations.ServersConfig{Policy: e.policy, Logger: e.o.Logger, Getenv: benchGetenv})
	e.world = &world{}
	if err := e.open(ctx, e.world, name, []string{"rcv", "rcvw", "rcvw30", "rcvp"}); err != nil {
		return err
	}
	if e.o.PGStatements {
		if _, err := e.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
			return fmt.Errorf("-pg-statements: %w", err)
		}
	}
	return nil
}

// createDatabase creates the database name on the server at admin, or with keep reuses it
// when it exists, and returns what drops it.
func createDatabase(ctx context.Context, admin, name string, keep bool) (drop func(), err error) {
	ac, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	var exists bool
	if err = ac.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err == nil && !(exists && keep) {
		if exists {
			_, err = ac.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		}
		if err == nil {
			_, err = ac.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		}
	}
	ac.Close(ctx)
	if err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	return func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if ac, err := pgx.Connect(dctx, admin); err == nil {
			_, _ = ac.Exec(dctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			ac.Close(dctx)
		}
	}, nil
}

// open wires w on the database name of the run's server as the console does, with the
// bench's pool (its statements counted) and the run's policy; the prober has probed servers
// before it returns.
func (e *env) open(ctx context.Context, w *world, name string, servers []string) error {
	cfg, err := dbpool.Config(e.dbURL)
	if err != nil {
		return err
	}
	cfg.ConnConfig.Database = name
	cfg.MaxConns = 24
	cfg.ConnConfig.Tracer = &e.statements
	if w.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	runner, err := migrations.NewRunner(w.pool)
	if err != nil {
		return err
	}
	_, err = runner.Up(ctx)
	runner.Close()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := config.NewStore(w.pool).Record(ctx, e.policy); err != nil {
		return err
	}
	w.mstore = manifests.NewStore(w.pool)
	if w.prober, err = manifests.NewProber(manifests.ProberConfig{Policy: e.policy, Store: w.mstore, Logger: e.o.Logger, Getenv: benchGetenv}); err != nil {
		return err
	}
	if err := w.prober.Start(ctx); err != nil {
		return err
	}
	// Every server probed before anything is measured: a first probe landing in the start phase
	// would count among its statements.
	deadline := time.Now().Add(30 * time.Second)
	for _, server := range servers {
		for {
			st, err := w.mstore.Status(ctx, server)
			if err == nil && st.Latest != nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the receiver %s was not probed within 30s", server)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if w.flags, err = killswitch.Open(ctx, w.pool, killswitch.Config{Logger: e.o.Logger}); err != nil {
		return err
	}
	if w.router, err = e.newRouter(w); err != nil {
		return err
	}
	// As in the console: the change listener publishes the ledger's live changes and keeps the
	// router's cached inputs fresh.
	lctx, stop := context.WithCancel(ctx)
	w.stopListen = stop
	router := w.router
	audit.Listen(lctx, w.pool, e.o.Logger, func(c audit.Change) { router.Changed(c.Area) })
	w.ops, err = operations.NewService(operations.Config{Store: operations.NewStore(w.pool), Policy: e.policy, Servers: e.servers,
		Logger: e.o.Logger, Router: routerFunc(w.router)})
	if err != nil {
		return err
	}
	// As in the console: the compactor keeps the console's counters current.
	if w.compactor, err = operations.NewCompactor(operations.CompactorConfig{Store: w.ops.Store(), Logger: e.o.Logger}); err != nil {
		return err
	}
	if err := w.compactor.Start(ctx); err != nil {
		return err
	}
	uncached, err := rollout.NewRouter(rollout.RouterConfig{Policy: e.policy, Manifests: w.mstore, Stages: rollout.NewStore(w.pool, e.policy),
		KillSwitch: w.flags, Logger: e.o.Logger})
	if err != nil {
		return err
	}
	w.uncached, err = operations.NewService(operations.Config{Store: operations.NewStore(w.pool), Policy: e.policy, Servers: e.servers,
		Logger: e.o.Logger, Router: routerFunc(uncached)})
	return err
}

// stopWork stops the world's background work: the compactor, the prober and the kill switch's
// listener. close then ends the change listener and the pool; a world's close does both.
func (w *world) stopWork() {
	if w.compactor != nil {
		w.compactor.Stop()
	}
	if w.prober != nil {
		w.prober.Stop()
	}
	if w.flags != nil {
		w.flags.Close()
	}
	w.compactor, w.prober, w.flags = nil, nil, nil
}

func (w *world) close() {
	w.stopWork()
	if w.stopListen != nil {
		w.stopListen()
	}
	if w.pool != nil {
		w.pool.Close()
	}
}

// routeInputsFor is the console's bound on how stale the router's cached inputs may be.
const routeInputsFor = time.Second

func (e *env) newRouter(w *world) (*rollout.Router, error) {
	return rollout.NewRouter(rollout.RouterConfig{Policy: e.policy, Manifests: w.mstore, Stages: rollout.NewStore(w.pool, e.policy),
		KillSwitch: w.flags, Logger: e.o.Logger, CacheFor: routeInputsFor})
}

// routerFunc wires the rollout router into the start path as the console does.
func routerFunc(router *rollout.Router) operations.Router {
	return operations.RouterFunc(func(ctx context.Context, in operations.RouteInput) (operations.Decision, error) {
		r, err := router.Route(ctx, in.Request.Workflow, in.Request.Tenant)
		if err != nil {
			return operations.Decision{}, err
		}
		d := r.Decision
		return operations.Decision{Route: operations.Route(d.Route), ReasonCode: string(d.Reason), Reason: d.Sentence,
			DeclareExtension: d.DeclareExtension, Context: r.Context().JSON()}, nil
	})
}

// child is a receiver process: it ends when its standard input closes.
type child struct {
	cmd   *exec.Cmd
	stdin io.Closer
}

// benchToken is the bearer token of the watch phases' receivers (tenant bench).
const benchToken = "bench-watch-token"

// benchGetenv resolves the policy's token of the watch phases' receivers.
func benchGetenv(k string) string {
	if k == "BENCH_WATCH_TOKEN" {
		return benchToken
	}
	return ""
}

// startReceiver starts this binary again as the reference receiver on a loopback port,
// suggesting poll as every task's pollInterval; authenticated, it takes benchToken and offers
// tasks/list. It returns the base URL.
func (e *env) startReceiver(ctx context.Context, poll time.Duration, authenticated bool) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), receiverEnv+"=1", "BENCH_RECEIVER_POLL_MS="+strconv.FormatInt(poll.Milliseconds(), 10))
	if authenticated {
		cmd.Env = append(cmd.Env, "BENCH_RECEIVER_TOKEN="+benchToken)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("receiver: %w", err)
	}
	e.rcvs = append(e.rcvs, child{cmd: cmd, stdin: stdin})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case l, ok := <-line:
		addr, found := strings.CutPrefix(l, "listening ")
		if !ok || !found {
			return "", fmt.Errorf("receiver did not start: %q", l)
		}
		return "http://" + addr, nil
	case <-time.After(30 * time.Second):
		return "", errors.New("receiver did not start within 30s")
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// runReceiverChild is the receiver process: it serves until its standard input closes, and
// records when each task is observed (see recorder).
func runReceiverChild(stdout io.Writer) error {
	poll := time.Second
	if v, err := strconv.Atoi(os.Getenv("BENCH_RECEIVER_POLL_MS")); err == nil && v > 0 {
		poll = time.Duration(v) * time.Millisecond
	}
	cfg := receiver.Config{DefaultPollInterval: poll, MaxPollInterval: max(poll, 5*time.Second),
		MaxConcurrentTasks: -1, DefaultTTL: 4 * time.Hour, MaxTTL: 24 * time.Hour}
	if tok := os.Getenv("BENCH_RECEIVER_TOKEN"); tok != "" {
		cfg.Tokens = map[string]receiver.Identity{tok: {Tenant: "bench", Actor: "bench"}}
	}
	r := receiver.New(cfg)
	defer r.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newRecorder().handler(r.Handler()), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = srv.Close()
	}()
	fmt.Fprintf(stdout, "listening %s\n", ln.Addr())
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (e *env) close() {
	if e.world != nil {
		e.world.stopWork()
	}
	if e.servers != nil {
		e.servers.Close()
	}
	for _, c := range e.rcvs {
		_ = c.stdin.Close()
		done := make(chan struct{})
		go func() { _ = c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = c.cmd.Process.Kill()
		}
	}
	if e.world != nil {
		e.world.close()
	}
	if e.dropDB != nil && e.cluster == nil {
		e.dropDB()
	}
	if e.cluster != nil {
		_ = e.cluster.Remove()
	}
}

// load runs clients concurrent loops of f for d and returns the rate and latencies.
func load(ctx context.Context, clients int, d time.Duration, f func(ctx context.Context) error) (rate float64, lat []time.Duration, errs int64, firstErr error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var nerr atomic.Int64
	t0 := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for ctx.Err() == nil {
				s := time.Now()
				err := f(context.WithoutCancel(ctx))
				if err != nil {
					if nerr.Add(1) == 1 {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
					continue
				}
				mine = append(mine, time.Since(s))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(t0).Seconds()
	return float64(len(lat)) / el, lat, nerr.Load(), firstErr
}

func quantileMs(lat []time.Duration, q float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return round2(float64(s[max(0, min(i, len(s)-1))]) / float64(time.Millisecond))
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

func (e *env) startOne(workflow string, args string) func(ctx context.Context) error {
	return e.startWith(e.ops, workflow, args)
}

func (e *env) startWith(svc *operations.Service, workflow string, args string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		k := e.keys.Add(1)
		res, err := svc.Start(ctx, operations.Scope{All: true}, operations.StartRequest{IdempotencyKey: e.keyPrefix + strconv.FormatInt(k, 10),
			Workflow: workflow, Tenant: []string{"acme", "globex"}[k%2], Actor: "app:bench", ObjectRef: "bench " + strconv.FormatInt(k, 10),
			Arguments: []byte(args)})
		if err != nil {
			return err
		}
		if res.Status >= 300 {
			return fmt.Errorf("start answered %d: %s", res.Status, res.Response.Reason)
		}
		if want := e.policy.Workflows; want != nil {
			if wf, ok := e.policy.Workflow(workflow); ok && wf.TaskUse != config.TaskNever && res.Response.Route != operations.RouteTask {
				return fmt.Errorf("start of %s took route %s (%s)", workflow, res.Response.Route, res.Response.Reason)
			}
		}
		return nil
	}
}

// longWork keeps a Task working for the whole run: longWorkMs, as a start's arguments.
const (
	longWorkMs = 7_200_000
	longWork   = `{"duration_ms": 7200000}`
)

func (e *env) startPhase(ctx context.Context, res *Results) error {
	// A kept database has the table of an earlier run.
	if _, err := e.pool.Exec(ctx, `DROP TABLE IF EXISTS bench_inserts`); err != nil {
		return err
	}
	if _, err := e.pool.Exec(ctx, `CREATE TABLE bench_inserts (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, tenant text NOT NULL,
		k text NOT NULL, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	var n atomic.Int64
	m := e.cpuMeter()
	ins, _, _, err := load(ctx, e.o.Clients, e.o.Phase, func(ctx context.Context) error {
		return e.plainInsert(ctx, strconv.FormatInt(n.Add(1), 10))
	})
	if err != nil {
		return fmt.Errorf("inserts: %w", err)
	}
	res.Start.InsertCPU = m.per(ins * e.o.Phase.Seconds())
	// Warm the connections to the receiver before timing.
	if err := e.startOne("bench_capped", longWork)(ctx); err != nil {
		return fmt.Errorf("first start: %w", err)
	}
	before := e.statements.n.Load()
	rows := e.rowsWritten(ctx)
	m = e.cpuMeter()
	w := e.walMeter(ctx)
	rate, lat, errs, ferr := load(ctx, e.o.Clients, e.o.Phase, e.startOne("bench_capped", longWork))
	if rate == 0 {
		return fmt.Errorf("no start succeeded: %v", ferr)
	}
	res.Start.TaskCPU = m.per(rate * e.o.Phase.Seconds())
	res.Start.WAL = w.per(ctx, rate*e.o.Phase.Seconds())
	// Statements per start, the change publisher's and the prober's included (a few a second).
	res.Start.StatementsPerRun = round2(float64(e.statements.n.Load()-before) / (rate * e.o.Phase.Seconds()))
	before = e.statements.n.Load()
	unc, _, errs4, _ := load(ctx, e.o.Clients, e.o.Phase, e.startWith(e.uncached, "bench_capped", longWork))
	if unc > 0 {
		res.Start.UncachedPerS = round2(unc)
		res.Start.UncachedStatements = round2(float64(e.statements.n.Load()-before) / (unc * e.o.Phase.Seconds()))
	}
	un, _, errs2, _ := load(ctx, e.o.Clients, e.o.Phase, e.startOne("bench_open", longWork))
	s := &res.Start
	s.InsertsPerS, s.TasksPerS, s.Ratio = round2(ins), round2(rate), round2(rate/ins)
	s.P50Ms, s.P99Ms = quantileMs(lat, 0.50), quantileMs(lat, 0.99)
	s.UncappedPerS = round2(un)
	// A backend reports its rows when it ends: the pool's connections are closed (each as it
	// comes back), and the bare task creations, which write nothing, give them a phase to end
	// and the compactor and the change publisher the time to drain what the starts left them.
	e.pool.Reset()
	if err := e.bareTasks(ctx, s); err != nil {
		return err
	}
	s.RowsPerStart = rows.per(ctx, (rate+unc+un)*e.o.Phase.Seconds())
	if err := e.floorTasks(ctx, s); err != nil {
		return err
	}
	if err := e.ledgerStarts(ctx, s); err != nil {
		return err
	}
	m = e.cpuMeter()
	sy, slat, errs3, _ := load(ctx, e.o.Clients, e.o.Phase, e.startOne("bench_sync", `{}`))
	res.Start.SyncCPU = m.per(sy * e.o.Phase.Seconds())
	s.SyncPerS, s.SyncRatio, s.SyncP99Ms = round2(sy), round2(sy/ins), quantileMs(slat, 0.99)
	s.Errors += errs + errs2 + errs3 + errs4
	return e.bareSync(ctx, s)
}

// RowsPerUnit is what PostgreSQL's statistics say a unit of work wrote: rows inserted, updated
// (of which heap-only) and deleted, over every table, triggers and background work included.
type RowsPerUnit struct {
	Inserted float64 `json:"inserted"`
	Updated  float64 `json:"updated"`
	HOT      float64 `json:"hot_updated"`
	Deleted  float64 `json:"deleted"`
	Total    float64 `json:"total"`
}

type rowsMeter struct {
	e                      *env
	ins, upd, hot, del, ok float64
}

const rowsNow = `SELECT sum(n_tup_ins)::float8, sum(n_tup_upd)::float8, sum(n_tup_hot_upd)::float8, sum(n_tup_del)::float8 FROM pg_stat_user_tables`

// rowsWritten reads the row counters at the start of a stretch of work. A backend reports its
// counts when a transaction ends, at most once a second, and when it exits: read the end after
// the connections that did the work were closed.
func (e *env) rowsWritten(ctx context.Context) rowsMeter {
	m := rowsMeter{e: e}
	if e.pool.QueryRow(ctx, rowsNow).Scan(&m.ins, &m.upd, &m.hot, &m.del) == nil {
		m.ok = 1
	}
	return m
}

func (m rowsMeter) per(ctx context.Context, n float64) RowsPerUnit {
	var ins, upd, hot, del float64
	if n <= 0 || m.ok == 0 || m.e.pool.QueryRow(ctx, rowsNow).Scan(&ins, &upd, &hot, &del) != nil {
		return RowsPerUnit{}
	}
	r := RowsPerUnit{Inserted: round2((ins - m.ins) / n), Updated: round2((upd - m.upd) / n), HOT: round2((hot - m.hot) / n),
		Deleted: round2((del - m.del) / n)}
	r.Total = round2(r.Inserted + r.Updated + r.Deleted)
	return r
}

// bareTasks measures the MCP call a Task start makes, alone: 4 clients creating Tasks of
// bench_capped's tool on the same pooled connection to the same receiver, with nothing written
// anywhere. bareSync does the same for bench_sync's plain call.
func (e *env) bareTasks(ctx context.Context, s *StartFigures) error {
	rate, cpu, err := e.bareCalls(ctx, s, "task creation", createLongTask)
	s.BareTasksPerS, s.BareTaskCPU, s.CallCeiling = round2(rate), cpu, round2(rate/s.InsertsPerS)
	return err
}

// floorTasks measures bareTasks' call between two committed inserts; it writes rows, so it
// runs after the rows a start writes were read.
func (e *env) floorTasks(ctx context.Context, s *StartFigures) error {
	rate, cpu, err := e.bareCalls(ctx, s, "committed task creation", e.betweenCommits(createLongTask))
	s.FloorTasksPerS, s.FloorTaskCPU, s.FloorRatio = round2(rate), cpu, round2(rate/s.InsertsPerS)
	return err
}

// ledgerStarts measures the ledger writes of a capped Task start alone: 4 clients each reserve a
// slot of bench_capped's cap and write the operation, its creating task and its call marker
// (Store.CreateOperation, one commit), then record the created task (Store.RecordCreated,
// the second commit), with the decision a real start of the workflow was given and a task id
// of their own. The tasks are recorded working and not due for a day, so no watcher reads them.
func (e *env) ledgerStarts(ctx context.Context, s *StartFigures) error {
	wf, ok := e.policy.Workflow("bench_capped")
	if !ok {
		return errors.New("ledger: no bench_capped workflow")
	}
	// The decision a start of the workflow is given now.
	k := e.keys.Add(1)
	first, err := e.ops.Start(ctx, operations.Scope{All: true}, operations.StartRequest{IdempotencyKey: e.keyPrefix + strconv.FormatInt(k, 10),
		Workflow: wf.Name, Tenant: "acme", Actor: "app:bench", ObjectRef: "bench " + strconv.FormatInt(k, 10), Arguments: []byte(longWork)})
	if err != nil {
		return fmt.Errorf("ledger: first start: %w", err)
	}
	if first.Response.Route != operations.RouteTask {
		return fmt.Errorf("ledger: bench_capped took route %s", first.Response.Route)
	}
	d := operations.Decision{Route: operations.RouteTask, ReasonCode: first.Response.ReasonCode, Reason: first.Response.Reason}
	ttl := wf.MaxTTL.Duration
	store := e.ops.Store()
	one := func(ctx context.Context) error {
		k := e.keys.Add(1)
		req := operations.StartRequest{IdempotencyKey: e.keyPrefix + strconv.FormatInt(k, 10), Workflow: wf.Name,
			Tenant: []string{"acme", "globex"}[k%2], Actor: "app:bench", ObjectRef: "bench " + strconv.FormatInt(k, 10),
			Arguments: []byte(longWork)}
		hash, err := operations.RequestHash(req)
		if err != nil {
			return err
		}
		ins := operations.Insert{Request: req, Hash: hash, Arguments: req.Arguments, Decision: d, PolicySHA: e.policy.SHA256,
			Task: &operations.NewTaskRow{Server: wf.Server, Tool: wf.Tool, RequestedTTL: &ttl}, Sending: wf.Budgets.Create.Timeout.Duration,
			CapacityLimit: wf.Concurrency}
		full := ins
		ins.Capacity = func(int) (operations.Insert, error) { return full, nil }
		op, existing, err := store.CreateOperation(ctx, ins)
		if err != nil {
			return err
		}
		if existing {
			return fmt.Errorf("ledger: key %s was used before", req.IdempotencyKey)
		}
		now := time.Now()
		_, err = store.RecordCreated(ctx, op.ID, operations.CreatedTask{TaskID: "ledger-" + e.keyPrefix + strconv.FormatInt(k, 10),
			Era: string(mcpclient.EraLegacy), State: operations.StateWorking, StatusMessage: "working", ServerName: "bench", ServerVersion: "1",
			CreatedAt: now, UpdatedAt: now, TTL: &ttl, PollInterval: time.Second, Deadline: now.Add(ttl), NextPollAt: now.Add(24 * time.Hour)})
		return err
	}
	m := e.cpuMeter()
	rate, _, errs, ferr := load(ctx, e.o.Clients, e.o.Phase, one)
	s.Errors += errs
	if rate == 0 {
		return fmt.Errorf("no ledger write succeeded: %v", ferr)
	}
	s.LedgerTasksPerS, s.LedgerTaskCPU, s.LedgerRatio = round2(rate), m.per(rate*e.o.Phase.Seconds()), round2(rate/s.InsertsPerS)
	return nil
}

// createLongTask creates bench_capped's Task as a start does, working for longWork.
func createLongTask(ctx context.Context, conn mcpclient.Conn) error {
	_, err := conn.CreateTask(ctx, "work_optional", map[string]any{"duration_ms": longWorkMs}, mcpclient.TaskOptions{TTL: 2 * time.Hour})
	return err
}

// plainInsert is the insert rate's unit, committed on its own: one row into bench_inserts.
// The floor's commits are the same statement.
func (e *env) plainInsert(ctx context.Context, k string) error {
	_, err := e.pool.Exec(ctx, `INSERT INTO bench_inserts (tenant, k) VALUES ($1, $2)`, "acme", k)
	return err
}

// betweenCommits wraps call in what a start cannot do without: a plain single-row insert
// committed before it and another after it.
func (e *env) betweenCommits(call func(context.Context, mcpclient.Conn) error) func(context.Context, mcpclient.Conn) error {
	var n atomic.Int64
	insert := func(ctx context.Context) error {
		return e.plainInsert(ctx, "floor "+strconv.FormatInt(n.Add(1), 10))
	}
	return func(ctx context.Context, conn mcpclient.Conn) error {
		if err := insert(ctx); err != nil {
			return err
		}
		if err := call(ctx, conn); err != nil {
			return err
		}
		return insert(ctx)
	}
}

func (e *env) bareSync(ctx context.Context, s *StartFigures) error {
	call := func(ctx context.Context, conn mcpclient.Conn) error {
		_, err := conn.CallTool(ctx, "work_forbidden", map[string]any{}, mcpclient.CallOptions{})
		return err
	}
	rate, cpu, err := e.bareCalls(ctx, s, "sync call", call)
	s.BareSyncPerS, s.BareSyncCPU, s.SyncCallCeiling = round2(rate), cpu, round2(rate/s.InsertsPerS)
	if err != nil {
		return err
	}
	rate, cpu, err = e.bareCalls(ctx, s, "committed sync call", e.betweenCommits(call))
	s.FloorSyncPerS, s.FloorSyncCPU, s.SyncFloorRatio = round2(rate), cpu, round2(rate/s.InsertsPerS)
	return err
}

// bareCalls runs call from 4 clients for a phase on the main receiver's pooled connection and
// returns its rate and CPU per call; its failures count among the start phase's errors.
func (e *env) bareCalls(ctx context.Context, s *StartFigures, what string, call func(context.Context, mcpclient.Conn) error) (float64, CPUPerUnit, error) {
	conn, err := e.servers.Conn(ctx, "rcv")
	if err != nil {
		return 0, CPUPerUnit{}, fmt.Errorf("bare %s: %w", what, err)
	}
	m := e.cpuMeter()
	rate, _, errs, ferr := load(ctx, e.o.Clients, e.o.Phase, func(ctx context.Context) error { return call(ctx, conn) })
	s.Errors += errs
	if rate == 0 {
		return 0, CPUPerUnit{}, fmt.Errorf("no bare %s succeeded: %v", what, ferr)
	}
	return rate, m.per(rate * e.o.Phase.Seconds()), nil
}

// capPhase drives 4 clients of starts at a workflow capped at capTight and checks, while they
// run, that the workflow never has more Tasks in flight than the cap.
func (e *env) capPhase(ctx context.Context, res *Results) error {
	var refused atomic.Int64
	stop := make(chan struct{})
	maxSeen := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var n int
			if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM tasks t JOIN operations o ON o.id = t.operation_id
				WHERE o.workflow = 'bench_tight' AND t.state IN ('creating', 'working', 'input_required')`).Scan(&n); err == nil {
				maxSeen = max(maxSeen, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	start := e.startOne("bench_tight", longWork)
	// The starts go on until the cap has refused some (a short phase on a loaded machine may
	// not reach it at first), for at most 30 s.
	var ferr error
	for began := time.Now(); refused.Load() == 0 && ferr == nil && time.Since(began) < 30*time.Second; {
		_, _, _, ferr = load(ctx, e.o.Clients, min(e.o.Phase, 3*time.Second), func(ctx context.Context) error {
			err := start(ctx)
			if errors.Is(err, operations.ErrAtCapacity) {
				refused.Add(1)
				return nil
			}
			return err
		})
	}
	close(stop)
	wg.Wait()
	var final int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM tasks t JOIN operations o ON o.id = t.operation_id
		WHERE o.workflow = 'bench_tight' AND t.state IN ('creating', 'working', 'input_required')`).Scan(&final); err != nil {
		return err
	}
	maxSeen = max(maxSeen, final)
	res.Start.CapLimit, res.Start.CapMaxInFlight, res.Start.CapRefused = capTight, maxSeen, refused.Load()
	res.Start.CapExceeded = maxSeen > capTight
	if refused.Load() == 0 {
		return fmt.Errorf("the cap never refused a start (%d in flight; first error: %v)", maxSeen, ferr)
	}
	return nil
}

// scaleRounds is how many times the scale phase measures each ledger, alternating them.
const scaleRounds = 4

// scalePhase measures capped Task starts on the seeded ledger against the same starts on an
// empty ledger wired the same way beside it (a second database of the same server, with its
// own router, change listener and compactor), alternating the two in short stretches in the
// order ABBA so that a machine whose speed drifts over minutes weighs on both alike. A
// checkpoint before each stretch puts both at the same place of PostgreSQL's checkpoint cycle
// (the first change of a page after one logs the whole page: the seeded ledger, touching more
// distinct pages, pays more for it, as it would in service).
func (e *env) scalePhase(ctx context.Context, res *Results) error {
	empty := &world{}
	drop, err := createDatabase(ctx, e.dbURL, e.dbName+"_empty", false)
	if err != nil {
		return err
	}
	defer drop()
	defer empty.close()
	if err := e.open(ctx, empty, e.dbName+"_empty", []string{"rcv"}); err != nil {
		return fmt.Errorf("empty ledger: %w", err)
	}
	if err := e.startWith(empty.ops, "bench_capped", longWork)(ctx); err != nil {
		return fmt.Errorf("first start on the empty ledger: %w", err)
	}
	stretch := e.o.Phase / 2
	var full, none startTally
	s := &res.Start
	for r := range scaleRounds {
		order := []*world{empty, e.world}
		if r%2 == 1 {
			order = []*world{e.world, empty}
		}
		var round [2]float64
		for _, w := range order {
			if _, err := e.pool.Exec(ctx, `CHECKPOINT`); err != nil {
				return err
			}
			t := &none
			if w == e.world {
				t = &full
			}
			m, wal := e.cpuMeter(), e.walMeter(ctx)
			rate, lat, errs, ferr := load(ctx, e.o.Clients, stretch, e.startWith(w.ops, "bench_capped", longWork))
			if rate == 0 {
				return fmt.Errorf("no start succeeded: %v", ferr)
			}
			n := float64(len(lat))
			t.add(n, n/rate, lat, m.per(n), wal.per(ctx, n))
			s.Errors += errs
			if w == e.world {
				round[1] = rate
			} else {
				round[0] = rate
			}
		}
		s.ScaleRounds = append(s.ScaleRounds, round2(round[1]/round[0]))
	}
	s.ScaleEmptyPerS, s.ScaleTasksPerS = round2(none.rate()), round2(full.rate())
	s.ScaleRatio = round2(full.rate() / none.rate())
	s.ScaleP99Ms, s.ScaleEmptyP99Ms = quantileMs(full.lat, 0.99), quantileMs(none.lat, 0.99)
	s.ScaleCPU, s.ScaleEmptyCPU = full.cpuPer(), none.cpuPer()
	s.ScaleWAL, s.ScaleEmptyWAL = full.walPer(), none.walPer()
	return nil
}

// startTally adds up stretches of starts: their number, time, latencies, and CPU and WAL
// (given per start, kept as totals).
type startTally struct {
	n, secs             float64
	lat                 []time.Duration
	console, pg, rcv    float64
	walBytes, walImages float64
}

func (t *startTally) add(n, secs float64, lat []time.Duration, cpu CPUPerUnit, wal WALPerUnit) {
	t.n += n
	t.secs += secs
	t.lat = append(t.lat, lat...)
	t.console += cpu.Console * n
	t.pg += cpu.Postgres * n
	t.rcv += cpu.Receiver * n
	t.walBytes += wal.Bytes * n
	t.walImages += wal.FPI * n
}

func (t *startTally) rate() float64 {
	if t.secs <= 0 {
		return 0
	}
	return t.n / t.secs
}

func (t *startTally) cpuPer() CPUPerUnit {
	if t.n <= 0 {
		return CPUPerUnit{}
	}
	ms := func(v float64) float64 { return math.Round(v/t.n*1000) / 1000 }
	c := CPUPerUnit{Console: ms(t.console), Postgres: ms(t.pg), Receiver: ms(t.rcv)}
	c.Total = math.Round((c.Console+c.Postgres+c.Receiver)*1000) / 1000
	return c
}

func (t *startTally) walPer() WALPerUnit {
	if t.n <= 0 {
		return WALPerUnit{}
	}
	return WALPerUnit{Bytes: math.Round(t.walBytes / t.n), FPI: round2(t.walImages / t.n)}
}

// WALPerUnit is PostgreSQL's write-ahead log per unit of work: bytes (by the WAL position,
// exact) and full-page images (pg_stat_wal, which each backend updates about once a second:
// over a 10 s phase within a tenth).
type WALPerUnit struct {
	Bytes float64 `json:"bytes"`
	FPI   float64 `json:"full_page_images"`
}

// walMeter reads the WAL position and pg_stat_wal at the start of a stretch of work.
type walMeter struct {
	e          *env
	bytes, fpi float64
}

const walNow = `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8, wal_fpi::float8 FROM pg_stat_wal`

func (e *env) walMeter(ctx context.Context) walMeter {
	m := walMeter{e: e}
	_ = e.pool.QueryRow(ctx, walNow).Scan(&m.bytes, &m.fpi)
	return m
}

func (m walMeter) per(ctx context.Context, n float64) WALPerUnit {
	var b, f float64
	if n <= 0 || m.e.pool.QueryRow(ctx, walNow).Scan(&b, &f) != nil {
		return WALPerUnit{}
	}
	return WALPerUnit{Bytes: math.Round((b - m.bytes) / n), FPI: round2((f - m.fpi) / n)}
}

// seedID is SQL for an operation id as the console makes them (a version 7 UUID, see
// operations' newOperationID) for a row created at the timestamp expression at: the first 48
// bits its milliseconds, the version nibble 7, the rest a random UUID's.
func seedID(at string) string {
	return `encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) placing
		substring(int8send((extract(epoch FROM ` + at + `) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid`
}

// seed fills the ledger to o.Operations with o.OpenTasks open tasks of the capped workflow and
// o.OpenItems open reconciliation items, then runs VACUUM ANALYZE as an operator would.
func (e *env) seed(ctx context.Context) error {
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var have int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM operations`).Scan(&have); err != nil {
		return err
	}
	n := e.o.Operations - have
	if n <= 0 {
		// A kept database seeded before the counters existed is counted once (by whichever of
		// the compactor's first pass and this gets there first).
		return e.ops.Store().RecountOverviewIfNeeded(ctx)
	}
	// Seeded history is not news: the live-update triggers stay quiet while it is written.
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		return fmt.Errorf("seed needs a superuser connection: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `RESET session_replication_role`) }()
	const batch = 100_000
	for from := 1; from <= n; from += batch {
		to := min(n, from+batch-1)
		if _, err := conn.Exec(ctx, `
			WITH g AS (SELECT i, `+seedID("now() - make_interval(secs => i * 0.5)")+` AS id, i <= $3 AS open FROM generate_series($1::int, $2::int) AS i),
			o AS (
				INSERT INTO operations (id, tenant, workflow, idempotency_key, request_sha256, actor, object_ref, route, reason_code, reason,
				                        domain_outcome, attention, attention_reason, created_at, updated_at)
				SELECT id, CASE WHEN i % 3 = 0 THEN 'globex' ELSE 'acme' END,
				       CASE WHEN open THEN 'bench_capped' WHEN i % 2 = 0 THEN 'bench_open' ELSE 'bench_watch' END,
				       'seed-' || i, '', 'app:seed', 'seed ' || i, 'task', 'task_capable', 'seeded',
				       CASE WHEN open THEN 'pending' WHEN i % 50 = 0 THEN 'unknown' WHEN i % 997 = 0 THEN 'not_applied' ELSE 'applied' END,
				       CASE WHEN NOT open AND i % 50 = 0 THEN 'needs_reconciliation' END,
				       CASE WHEN NOT open AND i % 50 = 0 THEN 'task_unobservable' END,
				       now() - make_interval(secs => i * 0.5), now() - make_interval(secs => i * 0.5)
				FROM g RETURNING id, created_at, domain_outcome = 'pending' AS open)
			INSERT INTO tasks (operation_id, server, tool, era, task_id, state, poll_interval_ms, next_poll_at, polls, result_state,
			                   terminal_at, created_at, updated_at)
			SELECT id, 'rcv', 'work_optional', '2025-11-25', 'seed-' || id::text,
			       CASE WHEN open THEN 'working' ELSE 'completed' END, 1000,
			       CASE WHEN open THEN now() + interval '30 days' END, 3, CASE WHEN open THEN 'none' ELSE 'fetched' END,
			       CASE WHEN open THEN NULL ELSE created_at + interval '5 seconds' END, created_at, created_at
			FROM o`, from, to, e.o.OpenTasks); err != nil {
			return fmt.Errorf("seed operations: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, `
		INSERT INTO reconciliation_items (operation_id, reason, tenant, workflow, state, next_verify_at, opened_at)
		SELECT id, 'task_unobservable', tenant, workflow, CASE WHEN row_number() OVER () % 2 = 0 THEN 'needs_person' ELSE 'verifying' END,
		       now() + interval '30 days', created_at
		FROM (SELECT id, tenant, workflow, created_at FROM operations WHERE idempotency_key LIKE 'seed-%' AND domain_outcome <> 'pending'
		      ORDER BY created_at DESC LIMIT $1) s`, e.o.OpenItems); err != nil {
		return fmt.Errorf("seed reconciliation items: %w", err)
	}
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return err
	}
	return e.recount(ctx)
}

// recount counts the seeded ledger for the console's counters (the seed wrote it with the
// triggers off), as an operator repairs counts, and analyzes what it wrote.
func (e *env) recount(ctx context.Context) error {
	t0 := time.Now()
	if err := e.ops.Store().RecountOverview(ctx); err != nil {
		return err
	}
	fmt.Fprintf(e.log, "bench:   counters recounted in %s\n", time.Since(t0).Round(time.Millisecond))
	_, err := e.pool.Exec(ctx, `VACUUM ANALYZE overview_ops, overview_search, overview_totals, overview_created, overview_hourly,
		overview_server_hours, queue_counts`)
	return err
}

// stepList shows a search's steps as tasks:p99.
func stepList(ss []Step) string {
	var b strings.Builder
	for i, st := range ss {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%d:%.0fms", st.Tasks, st.LatenessP99Ms)
	}
	return b.String()
}

func writeJSON(path string, res *Results) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func printTable(w io.Writer, r *Results) {
	fmt.Fprintf(w, "\nTaskgate benchmark (%d operations, %d open tasks, %d open items, %d clients)\n", r.Scale.Operations,
		r.Scale.OpenTasks, r.Scale.OpenItems, r.Scale.Clients)
	row := func(k string, v any, note string) { fmt.Fprintf(w, "  %-36s %12v  %s\n", k, v, note) }
	s := r.Start
	row("start.inserts_per_s", s.InsertsPerS, "plain single-row inserts, same server")
	row("start.tasks_per_s", s.TasksPerS, "Task starts, capped workflow, empty ledger")
	row("start.ratio", s.Ratio, "target >= 0.35")
	row("start.p99_ms", s.P99Ms, "target <= 50")
	row("start.uncapped_tasks_per_s", s.UncappedPerS, "")
	row("start.statements_per_start", s.StatementsPerRun, "round trips per capped start, router inputs from memory")
	cpu := func(c CPUPerUnit) string {
		return fmt.Sprintf("console %.3f + postgres %.3f + receiver %.3f", c.Console, c.Postgres, c.Receiver)
	}
	row("start.insert_cpu_ms", s.InsertCPU.Total, cpu(s.InsertCPU))
	row("start.task_cpu_ms", s.TaskCPU.Total, cpu(s.TaskCPU))
	row("start.sync_cpu_ms", s.SyncCPU.Total, cpu(s.SyncCPU))
	row("start.uncached_router_tasks_per_s", s.UncachedPerS, fmt.Sprintf("router reading its inputs per start: %.1f statements", s.UncachedStatements))
	row("start.sync_ratio", s.SyncRatio, fmt.Sprintf("%.0f sync starts/s", s.SyncPerS))
	row("start.call_ceiling_ratio", s.CallCeiling, fmt.Sprintf("the MCP task creation alone, no database: %.0f/s, %s", s.BareTasksPerS, cpu(s.BareTaskCPU)))
	row("start.rows_per_start", s.RowsPerStart.Total, fmt.Sprintf("rows a Task start writes: %.1f inserted, %.1f updated (%.1f heap-only), %.1f deleted; an insert writes 1",
		s.RowsPerStart.Inserted, s.RowsPerStart.Updated, s.RowsPerStart.HOT, s.RowsPerStart.Deleted))
	row("start.sync_call_ceiling_ratio", s.SyncCallCeiling, fmt.Sprintf("the plain MCP call alone: %.0f/s, %s", s.BareSyncPerS, cpu(s.BareSyncCPU)))
	ofFloor := func(rate, floor float64) float64 {
		if floor <= 0 {
			return 0
		}
		return round2(rate / floor)
	}
	row("start.floor_ratio", s.FloorRatio, fmt.Sprintf("the task creation between two committed inserts: %.0f/s, %s; the start reaches %.2f of it",
		s.FloorTasksPerS, cpu(s.FloorTaskCPU), ofFloor(s.TasksPerS, s.FloorTasksPerS)))
	row("start.ledger_ratio", s.LedgerRatio, fmt.Sprintf("a capped Task start's ledger writes alone, no call: %.0f/s, %s; the start reaches %.2f of it",
		s.LedgerTasksPerS, cpu(s.LedgerTaskCPU), ofFloor(s.TasksPerS, s.LedgerTasksPerS)))
	row("start.sync_floor_ratio", s.SyncFloorRatio, fmt.Sprintf("the plain call between two committed inserts: %.0f/s, %s; the sync start reaches %.2f of it",
		s.FloorSyncPerS, cpu(s.FloorSyncCPU), ofFloor(s.SyncPerS, s.FloorSyncPerS)))
	row("start.scale_ratio", s.ScaleRatio, fmt.Sprintf("%.0f/s at %d operations against %.0f/s on an empty ledger, alternated; rounds %v; target >= 0.9",
		s.ScaleTasksPerS, r.Scale.Operations, s.ScaleEmptyPerS, s.ScaleRounds))
	row("start.scale_p99_ms", s.ScaleP99Ms, fmt.Sprintf("empty ledger alongside: %.2f", s.ScaleEmptyP99Ms))
	row("start.scale_task_cpu_ms", s.ScaleCPU.Total, fmt.Sprintf("%s (empty ledger alongside: %s)", cpu(s.ScaleCPU), cpu(s.ScaleEmptyCPU)))
	row("start.wal_per_start (bytes)", s.WAL.Bytes, fmt.Sprintf("%.2f full-page images; scale phase: %.0f bytes, %.2f images at scale, %.0f and %.2f on the empty ledger",
		s.WAL.FPI, s.ScaleWAL.Bytes, s.ScaleWAL.FPI, s.ScaleEmptyWAL.Bytes, s.ScaleEmptyWAL.FPI))
	row("start.cap_max_in_flight", s.CapMaxInFlight, fmt.Sprintf("cap %d, %d refused; exceeded=%v", s.CapLimit, s.CapRefused, s.CapExceeded))
	wf := r.Watch
	opt := func(v *float64) any {
		if v == nil {
			return "—"
		}
		return *v
	}
	opti := func(v *int) any {
		if v == nil {
			return "—"
		}
		return *v
	}
	row("watch.max_tasks_1s", opti(wf.MaxTasks1s), fmt.Sprintf("tasks/get only, lateness p99 <= 250 ms; steps %v", stepList(wf.Steps)))
	row("watch.list_max_tasks_1s", opti(wf.ListMaxTasks1s), fmt.Sprintf("tasks/list sweeps; steps %v", stepList(wf.ListSteps)))
	row("watch.waitfortask_max_tasks_1s", opti(wf.WaitForTaskMaxTasks1s), fmt.Sprintf("mcp-go WaitForTask, same receiver; steps %v", stepList(wf.WaitForTaskSteps)))
	row("watch.lateness_p99_ms", wf.LatenessP99Ms, fmt.Sprintf("%d tasks at 1 s, counted by the receiver", wf.Tasks))
	row("watch.amplification", wf.Amplification, fmt.Sprintf("%d observations, every task in flight", wf.Polls))
	row("watch.cpu_ms_per_observation", wf.CPUMsPerObservation, fmt.Sprintf("tasks/get only: console %.3f + PostgreSQL %v ms", wf.ConsoleCPUMsPerPoll, opt(wf.PostgresCPUMsPerPoll)))
	row("watch.waitfortask_cpu_ms_per_poll", opt(wf.WaitForTaskCPUMsPoll), fmt.Sprintf("amplification %v, lateness p99 %v ms", opt(wf.WaitForTaskAmplification), opt(wf.WaitForTaskLatenessP99Ms)))
	row("watch.get_cpu_ms_per_task_interval", wf.GetCPUMsPerTaskInterval, "tasks/get only")
	row("watch.list_cpu_ms_per_task_interval", opt(wf.ListCPUMsPerTaskInterval), fmt.Sprintf("tasks/list sweeps: %v ms per observation, lateness p99 %v ms", opt(wf.ListCPUMsPerObservation), opt(wf.ListLatenessP99Ms)))
	row("watch.notify_cpu_ms_per_task_interval", opt(wf.NotifyCPUMsPerTaskInterval), fmt.Sprintf("notifications: %v polls per task-interval, lateness p99 %v ms against the safety net",
		opt(wf.NotifyPollsPerTaskInterval), opt(wf.NotifyLatenessP99Ms)))
	if p := wf.Paired; p != nil {
		row("watch.paired_get_cpu_ratio", opt(p.GetRatio), fmt.Sprintf("÷ WaitForTask, %d tasks, alternating windows; target <= 1.0; per task-interval by round %v", p.Tasks, p.Rounds))
		row("watch.paired_list_cpu_ratio", opt(p.ListRatio), "÷ WaitForTask, same windows; target <= 0.5")
		row("watch.paired_notify_cpu_ratio", opt(p.NotifyRatio), "÷ WaitForTask, same windows; target <= 0.5")
	}
	row("watch.bytes_per_task", wf.BytesPerTask, "")
	row("watch.long_lateness_p99_ms", opt(wf.LongLatenessP99Ms), fmt.Sprintf("%d tasks at %.0f s, one replica, %s; amplification %v, %v ms CPU per observation, %v B per task",
		wf.LongTasks, wf.LongPollS, wf.LongMode, opt(wf.LongAmplification), opt(wf.LongCPUMsPerObservation), opt(wf.LongBytesPerTask)))
	row("killswitch.p99_ms", r.KillSwitch.P99Ms, fmt.Sprintf("%d replicas, %d toggles; target <= 50", r.KillSwitch.Replicas, r.KillSwitch.Toggles))
	row("console.p95_ms", r.Console.P95Ms, "worst page: "+r.Console.WorstPage+"; target <= 50")
	pages := make([]string, 0, len(r.Console.Pages))
	for p := range r.Console.Pages {
		pages = append(pages, p)
	}
	slices.Sort(pages)
	for _, p := range pages {
		row("  "+p, r.Console.Pages[p], "")
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "  note:", n)
	}
}
