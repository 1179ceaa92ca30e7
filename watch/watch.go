// Package watch runs Taskgate's durable Task watchers.
//
// Watching is driven by due times in the database, not by a goroutine per task: every pass a
// replica claims a batch of due tasks (FOR UPDATE SKIP LOCKED, a lease with an expiry), polls
// each once under the workflow's status budget, and writes only what changed. The claim itself
// moves the next poll forward by max(pollInterval, floor) plus jitter, so replicas sharing a
// database never poll a task twice inside one interval, and a dead replica's tasks pass to the
// others when its leases expire. An absolute deadline (creation + min(granted TTL, the
// policy's max TTL)) bounds watching; progress never extends it.
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
	// BatchSize is how many due tasks one pass claims (default 64).
	BatchSize int
	// Parallel is how many polls of a pass run at once (default 16).
	Parallel int
	// ServerParallel is how many reads of one server run at once (default 4, at most
	// Parallel): a slow server holds no more than this many pollers. A due task of a server
	// at its limit waits, holding no poller, for one of that server's reads to end.
	ServerParallel int
	// PassWait is how long a pass waits for its reads before the next pass (default
	// PollFloor): a slow read goes on in the background and holds up no other task.
	PassWait time.Duration
	// Interval is the pause between passes that found nothing due (default 100ms). A pass
	// that filled its batch is followed at once by another.
	Interval time.Duration
	// Lease is how long a claim stays with this replica (default 30s).
	Lease time.Duration
	// PollFloor is the shortest interval between polls of one task (default 250ms).
	PollFloor time.Duration
	// DefaultPoll is the interval when the server suggests none (default 1s).
	DefaultPoll time.Duration
	// Jitter is the random fraction added to each interval (default 0.1; negative = none).
	Jitter float64
	// UnobservableGrace is how long status reads may keep failing before the task becomes
	// unobservable or expired (default 30s).
	UnobservableGrace time.Duration
	// PassTimeout bounds one pass (default 30s).
	PassTimeout time.Duration
	// Heartbeat is how often the replica records that it is alive (default 1s).
	Heartbeat time.Duration
	// HeartbeatTimeout is how long the replica may miss beats before other replicas take
	// over its leases, however long the leases still run (default 3s; at least 2 beats).
	HeartbeatTimeout time.Duration
	// Registerer receives the metrics (default: not registered).
	Registerer prometheus.Registerer
	// Logger receives logs; no tokens or elicited values are logged (default: discard).
	Logger *slog.Logger
	// AfterPass, when set, is called after every pass with the number of tasks it polled.
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
		c.BatchSize = 64
	}
	if c.Parallel <= 0 {
		c.Parallel = 16
	}
	if c.ServerParallel <= 0 {
		c.ServerParallel = min(4, c.Parallel)
	}
	if c.ServerParallel > c.Parallel {
		return fmt.Errorf("watch: ServerParallel %d above Parallel %d", c.ServerParallel, c.Parallel)
	}
	def(&c.Interval, 100*time.Millisecond)
	def(&c.Lease, 30*time.Second)
	def(&c.PollFloor, 250*time.Millisecond)
	def(&c.PassWait, c.PollFloor)
	def(&c.DefaultPoll, time.Second)
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
	// work feeds the Parallel pollers, which live as long as the loop: a goroutine per poll
	// would start on a small stack and grow it again for every poll.
	work chan func()

	readMu    sync.Mutex
	reading   map[string]bool         // operations whose read is running
	perServer map[string]int          // reads running, by server
	queued    map[string][]queuedRead // claimed tasks waiting for a read of their server
	reads     sync.WaitGroup
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
	s := &Service{cfg: cfg, store: cfg.Store, log: cfg.Logger.With("component", "watch", "replica", cfg.ReplicaID), metrics: m, awaits: map[string]*awaitRun{},
		reading: map[string]bool{}, perServer: map[string]int{}, queued: map[string][]queuedRead{}}
	cfg.Servers.Observe(s.onStatus, s.onInput)
	if cfg.Operations != nil {
		cfg.Operations.SetInputHolder(operations.InputHolder{Replica: cfg.ReplicaID, Reopen: s.reopen})
	}
	return s, nil
}

// ReplicaID returns the replica's lease name.
func (s *Service) ReplicaID() string { return s.cfg.ReplicaID }

// Start starts the watch loop. It returns an error if the service is running.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return errors.New("watch: already started")
	}
	// The first beat comes before the first claim: a replica that never beat holds its
	// leases until they expire.
	bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
	err := s.store.Beat(bctx, s.cfg.ReplicaID, s.cfg.HeartbeatTimeout)
	bcancel()
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel, s.done, s.bg = cancel, make(chan struct{}), ctx
	s.work = make(chan func())
	beating := make(chan struct{})
	go s.beat(ctx, beating)
	go func(done chan struct{}) {
		s.loop(ctx, make(chan struct{}), s.work)
		<-beating
		close(done)
	}(s.done)
	return nil
}

// beat records the replica's heartbeat every Heartbeat until ctx ends.
func (s *Service) beat(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		bctx, cancel := context.WithTimeout(ctx, s.cfg.Heartbeat)
		if err := s.store.Beat(bctx, s.cfg.ReplicaID, s.cfg.HeartbeatTimeout); err != nil && ctx.Err() == nil {
			s.log.Warn("heartbeat", "err", err)
		}
		cancel()
	}
}

// Stop ends the loop and the running input waits, then releases this replica's leases so
// other replicas take its tasks at once. It is idempotent.
func (s *Service) Stop() {
	if !s.halt() {
		return
	}
	ctx, c := context.WithTimeout(context.Background(), 5*time.Second)
	defer c()
	if err := s.store.ReleaseLeases(ctx, s.cfg.ReplicaID); err != nil {
		s.log.Warn("release leases", "err", err)
	}
	if err := s.store.Retire(ctx, s.cfg.ReplicaID); err != nil {
		s.log.Warn("retire replica", "err", err)
	}
}

// halt ends the loop, the heartbeat and the input waits, leaving leases and the heartbeat
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
	s.reads.Wait()
	s.awaitWG.Wait()
	return true
}

func (s *Service) loop(ctx context.Context, done chan struct{}, work chan func()) {
	defer close(done)
	var pollers sync.WaitGroup
	for range s.cfg.Parallel {
		pollers.Go(func() {
			for f := range work {
				f()
			}
		})
	}
	defer pollers.Wait()
	defer close(work)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.runOnce(ctx, work)
		if err != nil && ctx.Err() == nil {
			s.log.Error("watch pass", "err", err)
		}
		if s.cfg.AfterPass != nil {
			s.cfg.AfterPass(n)
		}
		wait := s.cfg.Interval
		if n >= s.cfg.BatchSize {
			wait = 0
		}
		t.Reset(wait)
	}
}

// runOnce claims one batch of due tasks and polls each once; it also follows due jobs. It
// returns how many tasks it claimed, each of which is read exactly once: a task this replica
// is reading (or has queued) is not claimed again, and a task of a server at ServerParallel
// waits in that server's queue, holding no poller, until one of the server's reads ends.
func (s *Service) runOnce(loop context.Context, work chan<- func()) (int, error) {
	ctx, cancel := context.WithTimeout(loop, s.cfg.PassTimeout)
	defer cancel()
	due, err := s.store.ClaimDue(ctx, s.cfg.ReplicaID, s.cfg.BatchSize, s.cfg.Lease, s.cfg.PollFloor, s.cfg.DefaultPoll, s.cfg.Jitter, s.readingIDs()...)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, d := range due {
		wg.Add(1)
		s.reads.Add(1)
		r := queuedRead{d: d, done: wg.Done}
		if !s.startRead(r) {
			continue // queued behind the server's reads
		}
		f := func() { s.readServer(loop, r) }
		select {
		case work <- f:
		default: // every poller is busy (slow servers): the read runs beside them
			go f()
		}
	}
	reads := make(chan struct{})
	go func() { wg.Wait(); close(reads) }()
	pw := time.NewTimer(s.cfg.PassWait)
	select {
	case <-reads:
	case <-pw.C:
	case <-loop.Done():
	}
	pw.Stop()
	if s.cfg.Operations != nil {
		if _, err := s.cfg.Operations.FollowDueJobs(ctx, s.cfg.ReplicaID, s.cfg.BatchSize, s.cfg.Lease); err != nil {
			return len(due), err
		}
	}
	return len(due), nil
}

// queuedRead is a claimed task waiting for, or holding, a read slot of its server.
type queuedRead struct {
	d    operations.Due
	done func() // the pass's count of reads
}

// readServer reads r, then goes on with the reads queued for the same server, so the slot
// passes to the next of them without a poller of its own. Once the loop stops, queued tasks
// are handed back unread.
func (s *Service) readServer(loop context.Context, r queuedRead) {
	for {
		if loop.Err() == nil {
			// Each read has its own context: a pass that moves on neither cancels it nor
			// leaves its failure unrecorded.
			rctx, cancel := context.WithTimeout(loop, s.cfg.PassTimeout)
			s.watchOne(rctx, r.d)
			cancel()
		} else {
			s.handBack(r.d.ID)
		}
		next, ok := s.endRead(r)
		r.done()
		s.reads.Done()
		if !ok {
			return
		}
		r = next
	}
}

// handBack returns a claimed task that was never read: the poll its claim counted is taken back.
func (s *Service) handBack(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.store.Unclaim(ctx, []string{id}, time.Now()); err != nil {
		s.log.Warn("hand back unread task", "operation", id, "err", err)
	}
}

// readingIDs are the operations this replica is reading or has queued for a read.
func (s *Service) readingIDs() []string {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	ids := make([]string, 0, len(s.reading))
	for id := range s.reading {
		ids = append(ids, id)
	}
	return ids
}

// startRead reserves a read of r's server, or queues r behind the server's reads when the
// server is at ServerParallel (it reports false then).
func (s *Service) startRead(r queuedRead) bool {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	srv := r.d.Task.Server
	s.reading[r.d.ID] = true
	if s.perServer[srv] >= s.cfg.ServerParallel {
		s.queued[srv] = append(s.queued[srv], r)
		return false
	}
	s.perServer[srv]++
	s.metrics.inFlight.WithLabelValues(srv).Inc()
	return true
}

// endRead ends r's read; the next read queued for the server, if any, takes its slot.
func (s *Service) endRead(r queuedRead) (queuedRead, bool) {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	delete(s.reading, r.d.ID)
	srv := r.d.Task.Server
	if q := s.queued[srv]; len(q) > 0 {
		next := q[0]
		q[0] = queuedRead{}
		if q = q[1:]; len(q) == 0 {
			delete(s.queued, srv)
		} else {
			s.queued[srv] = q
		}
		return next, true
	}
	if s.perServer[srv]--; s.perServer[srv] <= 0 {
		delete(s.perServer, srv)
	}
	s.metrics.inFlight.WithLabelValues(srv).Dec()
	return queuedRead{}, false
}

func (s *Service) workflow(name string) *config.Workflow {
	if wf, ok := s.cfg.Policy.Workflow(name); ok {
		return wf
	}
	return &config.Workflow{Name: name, Budgets: config.Budgets{
		Status: config.Budget{Timeout: config.Duration{Duration: 10 * time.Second}, Retries: 2},
		Result: config.Budget{Timeout: config.Duration{Duration: 30 * time.Second}, Retries: 2},
	}}
}

// watchOne polls one claimed task once, or fetches its outcome, or ends it at its deadline.
func (s *Service) watchOne(ctx context.Context, d operations.Due) {
	t := d.Task
	log := s.log.With("operation", d.ID, "task", t.TaskID)
	now := time.Now()
	s.metrics.lateness.Observe(max(0, now.Sub(d.DueAt).Seconds()))
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
	s.metrics.polls.WithLabelValues(pollResult(err)).Inc()
	s.countPoll(t.Server, d.Tenant, err)
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
		if s.backOff(ctx, d, err) {
			return
		}
		s.failure(ctx, d, conn, err)
		return
	}
	if t.FailureKind != "" {
		_ = s.store.ClearFailure(ctx, d.ID)
	}
	obs := observation(snap.Task)
	obs.Basis = t.State // the request was sent on the claimed state
	res := operations.ObserveResult{From: t.State, Now: t.State}
	if !t.Unchanged(obs) { // write only on change: an unchanged poll costs no database round trip
		if res, err = s.store.Observe(ctx, d.ID, obs, operations.SourcePoll); err != nil {
			log.Error("store observation", "err", err)
			return
		}
	}
	if res.Violation {
		s.metrics.violations.WithLabelValues(operations.ViolationTransition).Inc()
		log.Warn("task status transition violates the state machine", "from", res.From, "to", snap.Task.Status)
	}
	if res.Stale {
		s.metrics.stale.Inc()
		return // another connection or replica stored a newer status while this read was out
	}
	if snap.Task.Status == mcpclient.StatusInputRequired && !res.Violation {
		if len(snap.InputRequests) > 0 {
			if _, err := s.store.UpsertInputs(ctx, d.ID, operations.InputsFrom(snap.InputRequests, t.Deadline)); err != nil {
				log.Error("store input requests", "err", err)
			}
		}
		if snap.Task.Era == mcpclient.EraLegacy {
			s.awaitLegacy(d, conn, wf, false)
		}
	}
	if res.BecameTerminal {
		s.fetchOutcome(ctx, d, wf, &snap)
	}
}

// countPoll gives one status read to the poll log, when there is one.
func (s *Service) countPoll(server, tenant string, err error) {
	if s.cfg.PollLog != nil {
		s.cfg.PollLog.Add(server, tenant, err == nil)
	}
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
		return // the running tasks/result wait records it
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
		if ctx.Err() != nil || s.backOff(ctx, d, err) {
			return // pass ended or the server asked to wait: fetched on a later pass
		}
		if err := s.store.MarkResultFailed(ctx, d.ID, "outcome not retrievable: "+err.Error()); err != nil {
			s.log.Error("mark result failed", "operation", d.ID, "err", err)
		}
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

// onStatus applies a status notification: a hint, recorded like a poll; a terminal one makes
// the task due at once so its outcome is fetched.
func (s *Service) onStatus(server string, snap mcpclient.Snapshot) {
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
	if res.BecameTerminal || snap.Task.Status == mcpclient.StatusInputRequired {
		_ = s.store.Reschedule(ctx, op.ID, time.Now())
	}
}
