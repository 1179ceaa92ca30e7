// Package watch runs Taskgate's durable Task watchers.
//
// A replica takes due tasks into its hold in batches (FOR UPDATE SKIP LOCKED): a task is held
// while the replica beats (its heartbeat renews every hold at once), and passes to another
// replica when the beats lapse or the replica stops and hands its tasks back. The replica keeps
// each held task's next poll in memory, in a heap, and polls tasks as they fall due on a pool
// of pollers with a per-server limit, with no batch barrier: a slow server holds up none of
// another's tasks. It writes to PostgreSQL only when an answer changes something (status,
// message, lastUpdatedAt, pollInterval), and, every FlushEvery, persists the poll counts and
// next polls of the tasks it polled in one statement, so the console shows them (lagging by at
// most that period) and a replica taking a task over starts from them. A replica that could not
// beat for longer than its heartbeat timeout allows stops polling until it beats again and has
// checked which tasks it still holds, so two replicas never poll a task inside one interval. A
// task taken from a replica that died is polled no sooner than one interval after that
// replica's beats lapsed. An absolute deadline (creation + min(granted TTL, the policy's max
// TTL)) bounds watching; progress never extends it.
//
// Every observation is checked against the task state machine (violations are recorded and
// counted; a stored state never moves backwards). input_required becomes a pending input
// (field names and types, never values). A terminal task's outcome is fetched once under the
// result budget into a bounded envelope. A task that cannot be observed any more (unknown or
// expired at the server, refused authorisation, unreachable server, session gone) becomes
// unobservable or expired after a grace period with the domain outcome unknown and a
// reconciliation item: never failed. Status notifications are applied when they arrive but
// never relied on.
package watch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
)

// Config configures a watcher Service. Zero values take the documented defaults.
type Config struct {
	// Store is the ledger (required).
	Store *operations.Store
	// Servers holds the MCP connections (required).
	Servers *operations.Servers
	// Policy gives each workflow's budgets and max TTL (required).
	Policy *config.Config
	// Operations follows job_api jobs too when set.
	Operations *operations.Service
	// ReplicaID names this replica in leases (default hostname-random).
	ReplicaID string
	// BatchSize is how many due tasks one pass takes into the hold at most (default 512); a
	// pass that took a full batch is followed at once by another.
	BatchSize int
	// Parallel is how many reads run at once (default 64).
	Parallel int
	// ServerParallel is how many reads of one server run at once (default 16, at most
	// Parallel): a slow server holds no more than this many pollers. A due task of a server
	// at its limit waits, holding no poller, for one of that server's reads to end.
	ServerParallel int
	// Interval is the pause between passes, each of which takes into the hold the tasks falling
	// due before the next pass and follows due jobs (default 250ms, the default PollFloor: a task
	// started with the shortest interval is in hand before its first poll). Held tasks are polled
	// as they fall due, not by passes.
	Interval time.Duration
	// Lease bounds how long a task stays held by a replica that has no heartbeat row (default
	// 30s). While a replica beats, its holds need no renewal.
	Lease time.Duration
	// FlushEvery is how often the poll counts and next polls of held tasks are persisted in one
	// batch (default 2s). A task polled since its progress was last written is written at the
	// first flush once ProgressEvery has passed since that write: the console's poll counts and
	// next polls lag by at most ProgressEvery plus FlushEvery.
	FlushEvery time.Duration
	// ProgressEvery is the least time between two writes of one held task's progress (default
	// 5s, at least FlushEvery): a task polled every second is written every 6 s rather than at
	// every flush, a task polled every 30 s at the first flush after each poll. A change of the
	// task and the end of its hold write it at once.
	ProgressEvery time.Duration
	// PollFloor is the shortest interval between polls of one task (default 250ms).
	PollFloor time.Duration
	// DefaultPoll is the interval when the server suggests none (default 1s).
	DefaultPoll time.Duration
	// Jitter is the random fraction of the interval added to each poll's interval (default
	// 0.1; negative = none), at most MaxJitter.
	Jitter float64
	// MaxJitter bounds the jitter added to one interval (default 100ms). Held tasks are polled
	// from memory as they fall due, so jitter only spreads tasks created together.
	MaxJitter time.Duration
	// Coalesce is how long after a task falls due its read may wait, so that the reads due
	// together start together (default a fifth of PollFloor, at most 50ms; at most PollFloor). One wake of the loop and its
	// pollers then serves many reads instead of one: CPU per read falls to about half or less
	// at a thousand reads a second. A read is never earlier for it, at most this much later;
	// when reads fall due faster than 64 in Coalesce, a wake waits only for 64 of them.
	Coalesce time.Duration
	// UnobservableGrace is how long status reads may keep failing before the task becomes
	// unobservable or expired (default 30s).
	UnobservableGrace time.Duration
	// PassTimeout bounds one pass and one read (default 30s).
	PassTimeout time.Duration
	// Heartbeat is how often the replica records that it is alive (default 1s).
	Heartbeat time.Duration
	// HeartbeatTimeout is how long the replica may miss beats before other replicas take
	// over its tasks (default 3s; at least 2 beats). A replica whose last beat is older than
	// HeartbeatTimeout less half a beat stops polling until it beats again.
	HeartbeatTimeout time.Duration
	// Registerer receives the metrics (default: not registered).
	Registerer prometheus.Registerer
	// Logger receives logs; no tokens or elicited values are logged (default: discard).
	Logger *slog.Logger
	// NoListSweep turns off tasks/list sweeps: every task is read with tasks/get even where the
	// server declares tasks.list.
	NoListSweep bool
	// SweepSegmentPages is about how many pages one segment of a tasks/list sweep reads
	// (default 100): a short list is read as one chain, a long one in as many segments at once
	// as the server's read slots (ServerParallel) allow.
	SweepSegmentPages int
	// NoNotifications turns off the slower safety-net polling of tasks whose connection
	// delivers status notifications: they are polled at their interval like any other.
	NoNotifications bool
	// SafetyNet bounds the interval at which a task is polled while its connection delivers
	// status notifications (default 30s): such a task is polled every ten intervals, at most
	// SafetyNet apart and never more often than its interval, so a notification the server
	// did not send is caught within that time.
	SafetyNet time.Duration
	// AfterPass, when set, is called after every pass with the number of status reads made
	// since the previous pass.
	AfterPass func(polled int)

	// PollLog, when set, counts every status read of a task (answered or failed) by server
	// and tenant for the Servers page's poll-load chart (operations.PollLog). It is called
	// once per read, where the polls metric is counted, and must not block.
	PollLog PollCounter
}

// PollCounter counts status reads; operations.PollLog is one.
type PollCounter interface {
	Add(server, tenant string, ok bool)
}

func (c *Config) validate() error {
	if c.Store == nil || c.Servers == nil || c.Policy == nil {
		return errors.New("watch: Store, Servers and Policy are required")
	}
	if c.ReplicaID == "" {
		h, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.ReplicaID = h + "-" + hex.EncodeToString(b[:])
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 512
	}
	if c.Parallel <= 0 {
		c.Parallel = 64
	}
	if c.ServerParallel <= 0 {
		c.ServerParallel = min(16, c.Parallel)
	}
	if c.ServerParallel > c.Parallel {
		return fmt.Errorf("watch: ServerParallel %d above Parallel %d", c.ServerParallel, c.Parallel)
	}
	def(&c.Interval, 250*time.Millisecond)
	def(&c.Lease, 30*time.Second)
	def(&c.FlushEvery, 2*time.Second)
	def(&c.ProgressEvery, 5*time.Second)
	c.ProgressEvery = max(c.ProgressEvery, c.FlushEvery)
	def(&c.PollFloor, 250*time.Millisecond)
	def(&c.DefaultPoll, time.Second)
	def(&c.MaxJitter, 100*time.Millisecond)
	def(&c.Coalesce, min(50*time.Millisecond, c.PollFloor/5))
	def(&c.SafetyNet, 30*time.Second)
	if c.SweepSegmentPages <= 0 {
		c.SweepSegmentPages = 100
	}
	def(&c.UnobservableGrace, 30*time.Second)
	def(&c.PassTimeout, 30*time.Second)
	def(&c.Heartbeat, time.Second)
	def(&c.HeartbeatTimeout, 3*time.Second)
	if c.HeartbeatTimeout < 2*c.Heartbeat {
		return fmt.Errorf("watch: HeartbeatTimeout %v shorter than two heartbeats of %v", c.HeartbeatTimeout, c.Heartbeat)
	}
	if c.Jitter == 0 {
		c.Jitter = 0.1
	}
	if c.Jitter < 0 {
		c.Jitter = 0
	}
	if c.Jitter > 1 {
		return fmt.Errorf("watch: Jitter %v must be at most 1", c.Jitter)
	}
	if c.Coalesce > c.PollFloor {
		return fmt.Errorf("watch: Coalesce %v longer than PollFloor %v", c.Coalesce, c.PollFloor)
	}
	if c.Lease < c.PollFloor {
		return fmt.Errorf("watch: Lease %v shorter than PollFloor %v", c.Lease, c.PollFloor)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Service is one replica's watcher.
type Service struct {
	cfg     Config
	store   *operations.Store
	log     *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	bg      context.Context
	awaits  map[string]*awaitRun // legacy tasks/result waits running, by operation id
	awaitWG sync.WaitGroup
	// jobReads are the passes' job status reads (operations.Service.ReadJobs), which run
	// beside the loop so that a job API that stops answering never holds a pass.
	jobReads sync.WaitGroup

	hold hold // the tasks this replica holds, their next polls and their reads

	// polled counts status reads since the last AfterPass.
	polled atomic.Int64
	// beatAt is when the last beat that succeeded was sent (Unix nanoseconds).
	beatAt atomic.Int64
	// lastFlush is when the held tasks' progress was last persisted (the loop's own).
	lastFlush time.Time
	// workflows caches the policy's workflows by name (the policy does not change while the
	// service runs): a read looks its budgets up without a scan.
	workflows sync.Map
}

// New validates cfg and returns a stopped Service.
func New(cfg Config) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer, cfg.Store)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, store: cfg.Store, log: cfg.Logger.With("component", "watch", "replica", cfg.ReplicaID), metrics: m, awaits: map[string]*awaitRun{}}
	s.hold.init()
	cfg.Servers.Observe(s.onStatus, s.onInput)
	if cfg.Operations != nil {
		cfg.Operations.SetInputHolder(operations.InputHolder{Replica: cfg.ReplicaID, Reopen: s.reopen})
	}
	return s, nil
}

// ReplicaID returns the replica's lease name.
func (s *Service) ReplicaID() string { return s.cfg.ReplicaID }

// Start starts the watcher. It returns an error if the service is running.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return errors.New("watch: already started")
	}
	// The first beat comes before the first claim: a replica that never beat holds its
	// leases until they expire. Holds left under this name by an earlier run are handed back
	// first: this run knows nothing of them.
	bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
	sent := time.Now()
	err := s.store.Beat(bctx, s.cfg.ReplicaID, s.cfg.HeartbeatTimeout)
	if err == nil {
		err = s.store.ReleaseFrom(bctx, s.cfg.ReplicaID, s.cfg.PollFloor, s.cfg.DefaultPoll)
	}
	bcancel()
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	s.beatAt.Store(sent.UnixNano())
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel, s.done, s.bg = cancel, make(chan struct{}), ctx
	var wg sync.WaitGroup
	wg.Go(func() { s.beat(ctx) })
	wg.Go(func() { s.listenPokes(ctx) })
	wg.Go(func() { s.hold.run(ctx, s) })
	wg.Go(func() { s.loop(ctx) })
	go func(done chan struct{}) {
		wg.Wait()
		close(done)
	}(s.done)
	return nil
}

// fenceAfter is how long after its last beat this replica stops polling: before the other
// replicas may take its tasks (HeartbeatTimeout after that beat reached the database).
func (s *Service) fenceAfter() time.Duration { return s.cfg.HeartbeatTimeout - s.cfg.Heartbeat/2 }

// fenced reports whether this replica's beats lapsed: it must not poll until it beats again.
func (s *Service) fenced() bool {
	return time.Since(time.Unix(0, s.beatAt.Load())) > s.fenceAfter()
}

// beat records the replica's heartbeat every Heartbeat until ctx ends. A beat after a lapse
// first checks which tasks the replica still holds, dropping those others took meanwhile.
func (s *Service) beat(ctx context.Context) {
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		bctx, cancel := context.WithTimeout(ctx, s.cfg.Heartbeat)
		sent := time.Now()
		err := s.store.Beat(bctx, s.cfg.ReplicaID, s.cfg.HeartbeatTimeout)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("heartbeat", "err", err)
			}
			continue
		}
		if s.fenced() {
			cctx, cancel := context.WithTimeout(ctx, s.cfg.PassTimeout)
			err := s.recheck(cctx)
			cancel()
			if err != nil {
				s.log.Warn("check held tasks after the heartbeat lapsed", "err", err)
				continue
			}
		}
		s.beatAt.Store(sent.UnixNano())
	}
}

// recheck drops the held tasks that other replicas took while this one's beats lapsed.
func (s *Service) recheck(ctx context.Context) error {
	ids := s.hold.ids()
	if len(ids) == 0 {
		return nil
	}
	still, err := s.store.StillHeld(ctx, s.cfg.ReplicaID, ids)
	if err != nil {
		return err
	}
	lost := 0
	for _, id := range ids {
		if !still[id] {
			s.forget(id)
			lost++
		}
	}
	s.log.Warn("heartbeat lapsed; polling resumes", "held", len(ids), "taken_by_others", lost)
	return nil
}

// Stop ends the loops and the running input waits, persists the held tasks' progress, then
// hands the tasks back so other replicas take them at once. It is idempotent.
func (s *Service) Stop() {
	if !s.halt() {
		return
	}
	ctx, c := context.WithTimeout(context.Background(), 10*time.Second)
	defer c()
	if err := s.flush(ctx, true); err != nil {
		s.log.Warn("persist watch progress", "err", err)
	}
	if err := s.store.ReleaseLeases(ctx, s.cfg.ReplicaID); err != nil {
		s.log.Warn("release leases", "err", err)
	}
	if err := s.store.Retire(ctx, s.cfg.ReplicaID); err != nil {
		s.log.Warn("retire replica", "err", err)
	}
	s.hold.clear()
}

// halt ends the loops, the heartbeat and the input waits, leaving leases and the heartbeat
// row as they are. It reports whether the service was running.
func (s *Service) halt() bool {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel = nil
	s.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel()
	<-done
	s.hold.reads.Wait()
	s.jobReads.Wait()
	s.awaitWG.Wait()
	return true
}

// loop runs a pass every Interval (at once after a pass that took a full batch) and persists
// the held tasks' progress every FlushEvery.
func (s *Service) loop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	lastFlush := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.runOnce(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Error("watch pass", "err", err)
		}
		if time.Since(lastFlush) >= s.cfg.FlushEvery {
			lastFlush = time.Now()
			fctx, cancel := context.WithTimeout(ctx, s.cfg.PassTimeout)
			if err := s.flush(fctx, false); err != nil && ctx.Err() == nil {
				s.log.Error("persist watch progress", "err", err)
			}
			cancel()
		}
		if s.cfg.AfterPass != nil {
			s.cfg.AfterPass(int(s.polled.Swap(0)))
		}
		wait := s.cfg.Interval
		if n >= s.cfg.BatchSize {
			wait = 0
		}
		t.Reset(wait)
	}
}

// runOnce takes the tasks falling due before the next pass into the hold and follows due jobs.
// It returns how many tasks it took.
func (s *Service) runOnce(loop context.Context) (int, error) {
	if s.fenced() {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(loop, s.cfg.PassTimeout)
	defer cancel()
	if s.cfg.Operations == nil {
		got, err := s.store.AcquireDue(ctx, s.cfg.ReplicaID, s.cfg.BatchSize, s.cfg.Interval, s.cfg.Lease, s.cfg.PollFloor, s.cfg.DefaultPoll)
		if err != nil {
			return 0, err
		}
		s.hold.add(s, got)
		return len(got), nil
	}
	// The tasks and the jobs in one round trip; the tasks are held at once, the jobs read beside
	// the loop, under the loop's context, not the pass's.
	n, jobs, err := s.cfg.Operations.TakeDue(ctx, s.cfg.ReplicaID, s.cfg.BatchSize, s.cfg.Interval, s.cfg.Lease, s.cfg.PollFloor, s.cfg.DefaultPoll,
		func(got []operations.Acquired) { s.hold.add(s, got) })
	if jobs.Len() > 0 {
		s.jobReads.Go(func() { s.cfg.Operations.ReadJobs(loop, jobs) })
	}
	return n, err
}

func (s *Service) workflow(name string) *config.Workflow {
	if wf, ok := s.workflows.Load(name); ok {
		return wf.(*config.Workflow)
	}
	wf := s.lookupWorkflow(name)
	s.workflows.Store(name, wf)
	return wf
}

func (s *Service) lookupWorkflow(name string) *config.Workflow {
	if wf, ok := s.cfg.Policy.Workflow(name); ok {
		return wf
	}
	return &config.Workflow{Name: name, Budgets: config.Budgets{
		Status: config.Budget{Timeout: config.Duration{Duration: 10 * time.Second}, Retries: 2},
		Result: config.Budget{Timeout: config.Duration{Duration: 30 * time.Second}, Retries: 2},
	}}
}

// watchOne reads one held task that fell due: it polls it once, or fetches its outcome, or
// ends it at its deadline. It says what comes next through e (next poll, or dropped).
func (s *Service) watchOne(ctx context.Context, e *entry) {
	d := e.d
	t := d.Task
	now := time.Now()
	s.metrics.lateness.Observe(max(0, now.Sub(e.due).Seconds()))
	e.next = s.nextPoll(t, now)
	wf := s.workflow(d.Workflow)
	if t.ResultState == "pending" {
		s.fetchOutcome(ctx, d, wf, nil)
		return
	}
	if t.Deadline != nil && now.After(*t.Deadline) {
		s.giveUp(ctx, d, operations.StateExpired, operations.ReasonTaskExpired, "the task's deadline passed before a terminal status")
		return
	}
	conn, err := s.cfg.Servers.TaskConn(ctx, t.Server, t)
	if err != nil {
		s.failure(ctx, d, nil, err)
		return
	}
	conn.Seed(t.TaskID, mcpclient.Status(t.State))
	snap, err := withRetries(ctx, wf.Budgets.Status, func(ctx context.Context) (mcpclient.Snapshot, error) { return conn.GetTask(ctx, t.TaskID) })
	s.counted(t.Server, pollResult(err), e)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			s.metrics.budget.WithLabelValues("status", t.Server).Inc()
		}
		var changed *mcpclient.TaskIDChangedError
		if errors.As(err, &changed) {
			s.violation(ctx, d, operations.ViolationRecord{Kind: operations.ViolationTaskIDChanged, TaskID: changed.Answered,
				From: string(t.State), To: string(changed.Status), Source: operations.SourcePoll,
				Detail: "a status read of task " + t.TaskID + " was answered for task " + changed.Answered})
		}
		if s.backOff(ctx, e, err) {
			return
		}
		s.failure(ctx, d, conn, err)
		return
	}
	if !s.cfg.NoListSweep && mcpclient.CanList(conn) {
		e.listKey = t.Server + "\x00" + conn.Info().SessionID
	}
	e.notify, e.conn = false, nil
	if !s.cfg.NoNotifications && mcpclient.NotifiesStatus(conn) {
		e.notify, e.conn = true, conn
	}
	e.next = s.nextPollFor(e, time.Now()) // the interval runs from the answer
	s.observed(ctx, e, conn, wf, snap)
}

// observed applies one status answer to a held task: nothing is written when nothing changed.
func (s *Service) observed(ctx context.Context, e *entry, conn mcpclient.Conn, wf *config.Workflow, snap mcpclient.Snapshot) {
	d := e.d
	log := func() *slog.Logger { return s.log.With("operation", d.ID, "task", d.Task.TaskID) } // built only to log
	t := d.Task
	if t.FailureKind != "" {
		if err := s.store.ClearFailure(ctx, d.ID); err == nil {
			t.FailureKind = ""
		}
	}
	before := t.State
	obs := observation(snap.Task)
	obs.Basis = before // the request was sent on the held state
	res := operations.ObserveResult{From: before, Now: before}
	if !t.Unchanged(obs) { // write only on change: an unchanged answer costs no database round trip
		obs.Polls = s.hold.unwritten(e)
		var err error
		if res, err = s.store.Observe(ctx, d.ID, obs, operations.SourcePoll); err != nil {
			log().Error("store observation", "err", err)
			return
		}
		if res.PollsWritten {
			s.hold.written(e, obs.Polls)
		}
		if res.Changed {
			learn(t, obs, res.Now)
		}
	}
	if res.Violation {
		s.metrics.violations.WithLabelValues(operations.ViolationTransition).Inc()
		log().Warn("task status transition violates the state machine", "from", res.From, "to", snap.Task.Status)
	}
	if res.Stale || res.From != before {
		// Another connection or replica stored a status this replica had not learnt (the final
		// one while this read was out, a cancel's answer): start again from the stored row,
		// whether or not this answer changed it too. The copy lacks what that writer set (an
		// outcome to fetch).
		if res.Stale {
			s.metrics.stale.Inc()
		}
		s.reload(ctx, e)
		return
	}
	if snap.Task.Status == mcpclient.StatusInputRequired && !res.Violation {
		if len(snap.InputRequests) > 0 {
			if _, err := s.store.UpsertInputs(ctx, d.ID, operations.InputsFrom(snap.InputRequests, t.Deadline)); err != nil {
				log().Error("store input requests", "err", err)
			}
		}
		if snap.Task.Era == mcpclient.EraLegacy {
			s.awaitLegacy(d, conn, wf, false)
		}
	}
	if res.BecameTerminal {
		t.ResultState = "pending"
		s.fetchOutcome(ctx, d, wf, &snap)
	}
}

// learn updates a held task's copy with what an observation stored.
func learn(t *operations.Task, obs operations.Observation, now operations.TaskState) {
	t.State, t.StatusMessage = now, obs.StatusMessage
	if !obs.UpdatedAt.IsZero() {
		u := obs.UpdatedAt.Truncate(time.Microsecond)
		t.ServerUpdatedAt = &u
	}
	if obs.PollInterval > 0 {
		t.PollInterval = obs.PollInterval
	}
}

// reload reads a held task's row again after another writer changed it.
func (s *Service) reload(ctx context.Context, e *entry) {
	ds, err := s.store.LoadDue(ctx, []string{e.d.ID})
	if err != nil || len(ds) == 0 {
		return // polled again at the next interval
	}
	d := ds[0]
	if !d.Task.State.Watchable() && d.Task.ResultState != "pending" {
		e.drop = true
		return
	}
	e.d.Operation = d.Operation
	e.d.DueAt = d.DueAt
	if d.Task.ResultState == "pending" {
		e.next = time.Now()
	}
}

// interval is a task's poll interval: the server's suggestion (DefaultPoll when none), at
// least PollFloor.
func (s *Service) interval(t *operations.Task) time.Duration {
	iv := t.PollInterval
	if iv <= 0 {
		iv = s.cfg.DefaultPoll
	}
	return max(iv, s.cfg.PollFloor)
}

// pollEvery is how often a held task is polled: its interval, or the safety-net interval while
// its connection delivers status notifications.
func (s *Service) pollEvery(e *entry) time.Duration {
	iv := s.interval(e.d.Task)
	if e.notify {
		iv = max(iv, min(10*iv, s.cfg.SafetyNet))
	}
	return iv
}

// nextPollFor is nextPoll at the held task's own rate (pollEvery).
func (s *Service) nextPollFor(e *entry, from time.Time) time.Time {
	iv := s.pollEvery(e)
	next := from.Add(iv + s.jitter(iv))
	if t := e.d.Task; t.Deadline != nil && next.After(*t.Deadline) {
		next = *t.Deadline
		if floor := from.Add(s.cfg.PollFloor); next.Before(floor) {
			next = floor
		}
	}
	return next
}

// nextPoll is when a task read at from falls due again: one interval plus jitter later, or at
// its deadline when that comes first.
func (s *Service) nextPoll(t *operations.Task, from time.Time) time.Time {
	iv := s.interval(t)
	next := from.Add(iv + s.jitter(iv))
	if t.Deadline != nil && next.After(*t.Deadline) {
		// Ended at the deadline without another read; a deadline already past is checked again
		// no sooner than PollFloor (its end could not be written).
		next = *t.Deadline
		if floor := from.Add(s.cfg.PollFloor); next.Before(floor) {
			next = floor
		}
	}
	return next
}

func pollResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, mcpclient.ErrUnknownTask):
		return "unknown_task"
	case errors.Is(err, mcpclient.ErrUnauthorized):
		return "unauthorized"
	case errors.Is(err, mcpclient.ErrSessionGone):
		return "session_gone"
	case errors.Is(err, mcpclient.ErrBackpressure):
		return "backpressure"
	}
	return "unreachable"
}

func observation(t mcpclient.Task) operations.Observation {
	return operations.Observation{State: operations.TaskState(t.Status), StatusMessage: t.StatusMessage, UpdatedAt: t.LastUpdatedAt,
		TTL: t.TTL, PollInterval: t.PollInterval}
}

// withRetries runs f under the budget's timeout, retrying transport failures (reads only).
func withRetries[T any](ctx context.Context, b config.Budget, f func(context.Context) (T, error)) (T, error) {
	var last error
	var zero T
	for attempt := 0; attempt <= b.Retries; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, b.Timeout.Duration)
		v, err := f(cctx)
		cancel()
		if err == nil {
			return v, nil
		}
		last = err
		if !errors.Is(err, mcpclient.ErrTransportLost) && !errors.Is(err, mcpclient.ErrNotDelivered) || errors.Is(err, mcpclient.ErrBackpressure) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
			return zero, last
		case <-time.After(time.Duration(50*(attempt+1)) * time.Millisecond):
		}
	}
	return zero, last
}

// failure classifies a failed status read. After the grace period (at once for a session the
// server no longer knows) the task becomes unobservable, or expired when the server does not
// know it and its TTL has passed; the outcome stays unknown. Never failed.
func (s *Service) failure(ctx context.Context, d operations.Due, conn mcpclient.Conn, err error) {
	// The read may have used up its context: the failure is recorded on its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	kind := pollResult(err)
	log := s.log.With("operation", d.ID, "task", d.Task.TaskID, "kind", kind)
	if kind == "session_gone" {
		if conn != nil {
			s.cfg.Servers.Drop(conn)
		}
		s.giveUp(ctx, d, operations.StateUnobservable, operations.ReasonSessionGone, "the server no longer knows the session that created the task")
		return
	}
	since, ferr := s.store.RecordFailure(ctx, d.ID, kind)
	if ferr != nil {
		log.Error("record failed status read", "err", ferr)
		return
	}
	if time.Since(since) < s.cfg.UnobservableGrace {
		log.Info("status read failed", "err", err)
		return
	}
	ttlPassed := d.Task.Deadline != nil && time.Now().After(*d.Task.Deadline)
	if t := d.Task; t.ServerCreatedAt != nil && t.TTL != nil && time.Now().After(t.ServerCreatedAt.Add(*t.TTL)) {
		ttlPassed = true
	}
	if kind == "unknown_task" && ttlPassed {
		s.giveUp(ctx, d, operations.StateExpired, operations.ReasonTaskExpired, "the server no longer knows the task and its TTL has passed")
		return
	}
	s.giveUp(ctx, d, operations.StateUnobservable, operations.ReasonTaskUnobservable, "status reads failed for "+s.cfg.UnobservableGrace.String()+" ("+kind+")")
}

// transitionViolation records a forbidden status change a read outside Observe reported (a
// terminal task reported running again while its outcome was fetched); the stored state is
// not changed.
func (s *Service) transitionViolation(ctx context.Context, d operations.Due, v *mcpclient.TransitionError) {
	s.violation(ctx, d, operations.ViolationRecord{Kind: operations.ViolationTransition, TaskID: d.Task.TaskID,
		From: string(v.From), To: string(v.To), Source: operations.SourcePoll,
		Detail: "reported " + string(v.To) + " after " + string(v.From) + " while the outcome was fetched"})
}

// violation records and counts a violation on its own context: a pass running out must not
// lose it.
func (s *Service) violation(ctx context.Context, d operations.Due, v operations.ViolationRecord) {
	s.metrics.violations.WithLabelValues(v.Kind).Inc()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.store.RecordViolation(ctx, d.ID, v); err != nil {
		s.log.Error("record violation", "operation", d.ID, "err", err)
		return
	}
	s.log.Warn("task violates the state machine", "operation", d.ID, "kind", v.Kind, "from", v.From, "to", v.To)
}

func (s *Service) giveUp(ctx context.Context, d operations.Due, state operations.TaskState, reason, msg string) {
	if err := s.store.MarkUnknown(ctx, d.ID, state, reason, msg); err != nil {
		s.log.Error("mark task unknown", "operation", d.ID, "err", err)
		return
	}
	s.forget(d.ID)
	s.log.Warn("task sent to reconciliation", "operation", d.ID, "task", d.Task.TaskID, "state", state, "reason", reason)
}

// fetchOutcome fetches a terminal task's outcome once under the result budget and keeps the
// bounded envelope. Extension snapshots carry it inline; the legacy era asks tasks/result.
func (s *Service) fetchOutcome(ctx context.Context, d operations.Due, wf *config.Workflow, snap *mcpclient.Snapshot) {
	t := d.Task
	s.mu.Lock()
	waiting := s.awaits[d.ID] != nil
	s.mu.Unlock()
	if waiting {
		return // the running tasks/result wait records it (and drops the task from the hold)
	}
	var out mcpclient.Outcome
	var err error
	if snap != nil && snap.Outcome != nil {
		out = *snap.Outcome
	} else {
		conn, cerr := s.cfg.Servers.TaskConn(ctx, t.Server, t)
		if cerr == nil && t.State.Final() {
			conn.Seed(t.TaskID, mcpclient.Status(t.State)) // a read that says otherwise is a violation
		}
		if cerr != nil {
			err = cerr
		} else if t.Era == string(mcpclient.EraExtension) {
			var sn mcpclient.Snapshot
			sn, err = withRetries(ctx, wf.Budgets.Result, func(ctx context.Context) (mcpclient.Snapshot, error) { return conn.GetTask(ctx, t.TaskID) })
			if err == nil && sn.Violation != nil {
				s.transitionViolation(ctx, d, sn.Violation)
			}
			if err == nil && sn.Outcome != nil {
				out = *sn.Outcome
			} else if err == nil {
				err = fmt.Errorf("task %s: no outcome in a terminal snapshot: %w", t.TaskID, mcpclient.ErrMalformed)
			}
		} else {
			out, err = withRetries(ctx, wf.Budgets.Result, func(ctx context.Context) (mcpclient.Outcome, error) { return conn.AwaitOutcome(ctx, t.TaskID) })
		}
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			s.metrics.budget.WithLabelValues("result", t.Server).Inc()
		}
		if ctx.Err() != nil || s.backOffID(ctx, d.ID, err) {
			return // the read ran out or the server asked to wait: fetched at the next poll
		}
		if err := s.store.MarkResultFailed(ctx, d.ID, "outcome not retrievable: "+err.Error()); err != nil {
			s.log.Error("mark result failed", "operation", d.ID, "err", err)
			return
		}
		s.forget(d.ID)
		return
	}
	s.record(ctx, d, wf, out)
}

func (s *Service) record(ctx context.Context, d operations.Due, wf *config.Workflow, out mcpclient.Outcome) {
	t := d.Task
	if out.Violation != nil {
		s.transitionViolation(ctx, d, out.Violation)
	}
	env := operations.BuildEnvelope(out, t.Server, t.TaskID, wf.KeepResult, t.ServerCreatedAt, time.Now())
	if err := s.store.RecordEnvelope(ctx, d.ID, env, operations.SourcePoll); err != nil {
		s.log.Error("store envelope", "operation", d.ID, "err", err)
		return
	}
	s.forget(d.ID)
	if t.ServerCreatedAt != nil && t.PollInterval > 0 {
		implied := float64(time.Since(*t.ServerCreatedAt)) / float64(t.PollInterval)
		if implied >= 1 {
			s.metrics.amplification.Observe(float64(t.Polls) / implied)
		}
	}
}

// awaitLegacy keeps one tasks/result wait open for a 2025-11-25 task in input_required: the
// server's elicitation requests arrive on it (stored as pending inputs through onInput), and
// its answer is the outcome. It ends at the task's deadline or when the service stops.
func (s *Service) awaitLegacy(d operations.Due, conn mcpclient.Conn, wf *config.Workflow, fresh bool) {
	s.mu.Lock()
	if s.bg == nil || (s.awaits[d.ID] != nil && !fresh) {
		s.mu.Unlock()
		return
	}
	if old := s.awaits[d.ID]; old != nil {
		old.cancel() // a fresh stream: the server re-sends a question only on a stream opened after it saw the old one close
	}
	bg := s.bg
	ctx, cancel := context.WithCancel(bg)
	run := &awaitRun{cancel: cancel}
	s.awaits[d.ID] = run
	s.awaitWG.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.awaitWG.Done()
		defer cancel()
		defer func() {
			s.mu.Lock()
			if s.awaits[d.ID] == run {
				delete(s.awaits, d.ID)
			}
			s.mu.Unlock()
		}()
		if d.Task.Deadline != nil {
			var stop context.CancelFunc
			ctx, stop = context.WithDeadline(ctx, *d.Task.Deadline)
			defer stop()
		}
		ctx = mcpclient.WithInputWait(ctx, inputWait(wf, d.Task.Deadline, time.Now()))
		out, err := conn.AwaitOutcome(ctx, d.Task.TaskID)
		if err != nil {
			if bg.Err() == nil {
				s.log.Info("tasks/result wait ended; polling continues", "operation", d.ID, "err", err)
			}
			return
		}
		if out.Status.Terminal() {
			s.record(context.WithoutCancel(bg), d, wf, out)
		}
	}()
}

// awaitRun is one running tasks/result wait; a fresh one for the same task cancels it.
type awaitRun struct {
	cancel context.CancelFunc
}

// onInput stores a legacy input request (elicitation on the tasks/result stream).
func (s *Service) onInput(server string, r mcpclient.InputRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	op, err := s.store.ByTask(ctx, server, r.TaskID)
	if err != nil || op.Task == nil {
		s.log.Warn("input request for an unknown task", "server", server)
		return
	}
	if err := s.storeInput(ctx, op, r); err != nil {
		s.log.Error("store input request", "operation", op.ID, "err", err)
	}
}

// onStatus applies a status notification: a hint, recorded like a poll. A held task's copy
// learns it, and a terminal or input_required one makes the task due at once (through the
// database and the holder's poke when another replica holds it) so its outcome or question is
// fetched.
func (s *Service) onStatus(server string, snap mcpclient.Snapshot) {
	if snap.Violation == nil && s.hold.unchanged(server, snap.Task.ID, observation(snap.Task)) {
		s.metrics.notifications.Inc() // a held task, nothing new: nothing to write
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	op, err := s.store.ByTask(ctx, server, snap.Task.ID)
	if err != nil || op.Task == nil || !op.Task.State.Watchable() {
		return
	}
	obs := observation(snap.Task)
	if snap.Violation != nil {
		// The connection saw the final status this notification contradicts, on the same
		// ordered stream: the server went back on it.
		obs.Basis = operations.TaskState(snap.Violation.From)
	}
	res, err := s.store.Observe(ctx, op.ID, obs, operations.SourceNotification)
	if err != nil {
		s.log.Error("store notification", "operation", op.ID, "err", err)
		return
	}
	s.metrics.notifications.Inc()
	if res.Stale {
		s.metrics.stale.Inc()
		return
	}
	if res.Violation {
		s.metrics.violations.WithLabelValues(operations.ViolationTransition).Inc()
	}
	soon := res.BecameTerminal || snap.Task.Status == mcpclient.StatusInputRequired
	if s.hold.notified(op.ID, obs, res, soon) {
		return
	}
	if soon {
		_ = s.store.Reschedule(ctx, op.ID, time.Now())
	}
}
