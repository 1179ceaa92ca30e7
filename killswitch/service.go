package killswitch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/rollout"
)

// State is the provider's state, as OpenFeature names it.
type State string

// Provider states.
const (
	StateNotReady State = "NOT_READY"
	StateReady    State = "READY"
	StateStale    State = "STALE"
	StateError    State = "ERROR"
)

// Config configures a Service.
type Config struct {
	// ResyncEvery is how often every definition is read again whatever was notified (default 30s).
	ResyncEvery time.Duration
	// MaxStale is how long a replica that lost its notifications keeps answering from its
	// cache; after that new Task starts fail safe (default 10s).
	MaxStale time.Duration
	// Registerer receives the provider's metrics (optional).
	Registerer prometheus.Registerer
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Service is one replica's view of the flags: an in-memory snapshot kept current through
// LISTEN/NOTIFY and a periodic resync. Evaluations never touch the database.
type Service struct {
	store *Store
	pool  *pgxpool.Pool
	cfg   Config

	snap      atomic.Pointer[Snapshot]
	loadMu    sync.Mutex
	mu        sync.Mutex
	state     State
	stateErr  string
	lastGood  time.Time // when the cache was last known current
	listening bool
	subs      map[int]chan Snapshot
	nextSub   int

	reload chan struct{}
	cancel context.CancelFunc
	done   chan struct{}

	stateGauge *prometheus.GaugeVec
	version    prometheus.Gauge
	reloads    prometheus.Counter
}

// Open loads the flags, starts listening for changes and returns the running service. Close
// stops it.
func Open(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Service, error) {
	if cfg.ResyncEvery <= 0 {
		cfg.ResyncEvery = 30 * time.Second
	}
	if cfg.MaxStale <= 0 {
		cfg.MaxStale = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{store: NewStore(pool), pool: pool, cfg: cfg, state: StateNotReady, subs: map[int]chan Snapshot{},
		reload: make(chan struct{}, 1), done: make(chan struct{})}
	s.stateGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskgate_flags_provider_state",
		Help: "1 for the flag provider's current state (READY, STALE, ERROR, NOT_READY)."}, []string{"state"})
	s.version = prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskgate_flags_version",
		Help: "The latest flag change this replica's cache holds."})
	s.reloads = prometheus.NewCounter(prometheus.CounterOpts{Name: "taskgate_flags_reloads_total",
		Help: "Times this replica read the flag definitions again."})
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.stateGauge, s.version, s.reloads} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("flag metrics: %w", err)
			}
		}
	}
	if err := s.load(ctx); err != nil {
		s.setState(StateError, err.Error())
		cfg.Logger.Error("flags: first load failed; new Task starts fail safe until it succeeds", "err", err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	ready := make(chan struct{})
	go s.run(lctx, ready)
	select {
	case <-ready:
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	return s, nil
}

// Collectors are the provider's metrics, for a registry given after Open.
func (s *Service) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.stateGauge, s.version, s.reloads}
}

// Ready is nil when the provider is READY, else an error naming its state and why.
func (s *Service) Ready() error {
	if st, why := s.State(); st != StateReady {
		return fmt.Errorf("flag provider %s: %s", st, why)
	}
	return nil
}

// Close stops listening.
func (s *Service) Close() {
	s.cancel()
	<-s.done
}

// Store is the service's store.
func (s *Service) Store() *Store { return s.store }

// Snapshot is the current cache (nil before the first successful load).
func (s *Service) Snapshot() *Snapshot { return s.snap.Load() }

// State reports the provider's state and, when not ready, why.
func (s *Service) State() (State, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.stateErr
}

// Subscribe gives a channel that receives every new snapshot (dropping ones the reader is too
// slow for) and a function to stop.
func (s *Service) Subscribe() (<-chan Snapshot, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextSub
	s.nextSub++
	ch := make(chan Snapshot, 4)
	s.subs[id] = ch
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if c, ok := s.subs[id]; ok {
			delete(s.subs, id)
			close(c)
		}
	}
}

// Refresh reads the definitions again now (after a change made through this replica, so its own
// next start sees it without waiting for the notification).
func (s *Service) Refresh(ctx context.Context) error { return s.load(ctx) }

func (s *Service) load(ctx context.Context) error {
	// Loads are serialised, so the last one to finish read the newest state.
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	snap, err := s.store.Load(ctx)
	s.reloads.Inc()
	if err != nil {
		s.mu.Lock()
		if s.state == StateReady {
			s.state, s.stateErr = StateStale, err.Error()
		}
		s.mu.Unlock()
		s.publishState()
		return err
	}
	old := s.snap.Load()
	s.snap.Store(snap)
	s.version.Set(float64(snap.Version))
	s.mu.Lock()
	s.lastGood = s.cfg.Now()
	if s.listening {
		s.state, s.stateErr = StateReady, ""
	} else if s.state == StateNotReady || s.state == StateError {
		s.state, s.stateErr = StateStale, "not listening for flag changes yet"
	}
	changed := old == nil || old.ETag != snap.ETag
	var subs []chan Snapshot
	if changed {
		for _, c := range s.subs {
			subs = append(subs, c)
		}
	}
	s.mu.Unlock()
	s.publishState()
	for _, c := range subs {
		select {
		case c <- *snap:
		default:
		}
	}
	return nil
}

func (s *Service) setState(st State, why string) {
	s.mu.Lock()
	s.state, s.stateErr = st, why
	s.mu.Unlock()
	s.publishState()
}

func (s *Service) publishState() {
	st, _ := s.State()
	for _, x := range []State{StateNotReady, StateReady, StateStale, StateError} {
		v := 0.0
		if x == st {
			v = 1
		}
		s.stateGauge.WithLabelValues(string(x)).Set(v)
	}
}

// run listens for changes on a dedicated connection, reloading on every notification, on every
// reconnection and every ResyncEvery.
func (s *Service) run(ctx context.Context, ready chan struct{}) {
	defer close(s.done)
	signalled := false
	signal := func() {
		if !signalled {
			signalled = true
			close(ready)
		}
	}
	defer signal()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listen(ctx, signal)
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.listening = false
		if s.snap.Load() != nil {
			s.state, s.stateErr = StateStale, "flag notifications lost: "+errString(err)
		} else {
			s.state, s.stateErr = StateError, errString(err)
		}
		s.mu.Unlock()
		s.publishState()
		s.cfg.Logger.Warn("flags: listening for changes failed; retrying", "err", err)
		signal()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "connection closed"
	}
	return err.Error()
}

func (s *Service) listen(ctx context.Context, ready func()) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// A connection that was listening is not handed back to the pool.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return err
	}
	s.mu.Lock()
	s.listening = true
	s.mu.Unlock()
	// Anything changed before LISTEN took effect is read now.
	if err := s.load(ctx); err != nil {
		return err
	}
	ready()
	next := time.Now().Add(s.cfg.ResyncEvery)
	for {
		wctx, cancel := context.WithDeadline(ctx, next)
		_, err := conn.Conn().WaitForNotification(wctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if err != nil { // resync
			next = time.Now().Add(s.cfg.ResyncEvery)
		}
		if err := s.load(ctx); err != nil {
			return err
		}
	}
}

// Evaluate resolves a flag from the cache. When there is no cache, or it has been stale longer
// than MaxStale, the result is a PROVIDER_NOT_READY error.
func (s *Service) Evaluate(key string, evalCtx map[string]any) Result {
	snap := s.snap.Load()
	if snap == nil {
		_, why := s.State()
		return Result{Key: key, Reason: ReasonError, ErrorCode: ErrorProviderNotReady, ErrorMessage: "flags not loaded: " + why}
	}
	s.mu.Lock()
	st, why, last := s.state, s.stateErr, s.lastGood
	s.mu.Unlock()
	now := s.cfg.Now()
	if st != StateReady && now.Sub(last) > s.cfg.MaxStale {
		return Result{Key: key, Reason: ReasonError, ErrorCode: ErrorProviderNotReady,
			ErrorMessage: fmt.Sprintf("flags stale since %s: %s", last.UTC().Format(time.RFC3339), why)}
	}
	return snap.Evaluate(key, evalCtx, now)
}

// Bool evaluates a declared boolean flag, answering its fail-safe default when it cannot be
// evaluated; then the reason is FAILED_SAFE and ErrorCode says why.
func (s *Service) Bool(f BoolFlag, evalCtx map[string]any) (bool, Result) {
	return BoolOf(f, s.Evaluate(f.Key, evalCtx))
}

// BoolOf applies f's fail-safe default to r.
func BoolOf(f BoolFlag, r Result) (bool, Result) {
	r = Typed(r, KindBool, f.FailSafe)
	if r.ErrorCode != "" {
		r.Reason = ReasonFailedSafe
		return f.FailSafe, r
	}
	if r.NoValue {
		return f.FailSafe, r
	}
	return r.Value.(bool), r
}

// StartContext is the evaluation context of a new Task start: the targeting key is the tenant.
func StartContext(tenant, workflow, server, actor string) map[string]any {
	return map[string]any{"targetingKey": tenant, "tenant": tenant, "workflow": workflow, "server": server, "actor": actor}
}

// Check answers the router from memory (rollout.KillSwitch).
func (s *Service) Check(_ context.Context, c rollout.StartCheck) rollout.KillVerdict {
	return VerdictOf(s.Bool(NewTaskStarts, StartContext(c.Tenant, c.Workflow, c.Server, "")))
}

// VerdictOf turns an evaluation of NewTaskStarts into the router's verdict.
func VerdictOf(allowed bool, r Result) rollout.KillVerdict {
	if r.Reason == ReasonFailedSafe {
		return rollout.KillVerdict{Blocked: !allowed, FailedSafe: true,
			Why: fmt.Sprintf("%s failed safe (%s): %s", NewTaskStarts.Key, r.ErrorCode, r.ErrorMessage)}
	}
	if allowed {
		return rollout.KillVerdict{}
	}
	name := r.Variant
	if name == "" {
		name = NewTaskStarts.Key + " (" + r.Reason + ")"
	}
	return rollout.KillVerdict{Blocked: true, Switch: name}
}

// Engage engages a switch (Store.Engage) and refreshes this replica's cache at once.
func (s *Service) Engage(ctx context.Context, actor audit.Actor, scope, name, reason string) error {
	if err := s.store.Engage(ctx, actor, scope, name, reason); err != nil {
		return err
	}
	return s.Refresh(ctx)
}

// Release releases a switch (Store.Release) and refreshes this replica's cache at once.
func (s *Service) Release(ctx context.Context, actor audit.Actor, scope, name, reason string, fourEyes bool) (bool, error) {
	pending, err := s.store.Release(ctx, actor, scope, name, reason, fourEyes)
	if err != nil {
		return false, err
	}
	return pending, s.Refresh(ctx)
}

// Approve approves a pending release (Store.Approve) and refreshes this replica's cache.
func (s *Service) Approve(ctx context.Context, actor audit.Actor, scope, name, reason string) error {
	if err := s.store.Approve(ctx, actor, scope, name, reason); err != nil {
		return err
	}
	return s.Refresh(ctx)
}
