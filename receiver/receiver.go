// Package receiver is Taskgate's reference MCP Task receiver: a spec-exact MCP
// server, hand-written on net/http, that runs long tool calls as Tasks in both
// protocol eras — 2025-11-25 core Tasks (initialize, sessions, tasks/result,
// related-task _meta) and the 2026-07-28 extension io.modelcontextprotocol/tasks
// (server/discover, stateless requests, resultType, tasks/update) — over
// Streamable HTTP and stdio.
//
// Beside the MCP endpoint it serves a fake system of record (GET
// /records/{key}: the authoritative outcome of each effect, applied at most
// once per idempotency key) and a fake incumbent job API (POST /jobs, GET
// /jobs/{id}). Tests and the embedded demo use it as a real peer: tools whose
// mode, duration and ending are chosen by arguments, bearer-token tenants,
// counters, and fault knobs that drop connections, delay, duplicate delivery
// or refuse tasks/get.
//
// Limits (documented as the 2025-11-25 security section asks): ttl is capped
// by Config.MaxTTL and tasks are purged once it has passed; each tenant may
// have at most Config.MaxConcurrentTasks non-terminal tasks. Without
// Config.Tokens the receiver runs single-user: task ids are still
// unguessable (crypto/rand) and tasks/list is neither declared nor served.
package receiver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Eras selects which protocol eras a receiver serves.
type Eras int

const (
	// ErasBoth serves 2025-11-25 after initialize and the 2026-07-28 extension
	// for modern requests. It is the zero value.
	ErasBoth Eras = iota
	// ErasLegacy serves only 2025-11-25: a modern request is answered the way a
	// 2025-11-25 server would (no modern error codes), so a client falls back.
	ErasLegacy
	// ErasExtension serves only 2026-07-28 with the Tasks extension: initialize
	// is refused with -32022 listing the supported version.
	ErasExtension
)

func (e Eras) legacy() bool    { return e == ErasBoth || e == ErasLegacy }
func (e Eras) extension() bool { return e == ErasBoth || e == ErasExtension }

// String names the mode: "both", "legacy" or "extension".
func (e Eras) String() string {
	switch e {
	case ErasLegacy:
		return "legacy"
	case ErasExtension:
		return "extension"
	}
	return "both"
}

// Identity is the authorisation context a bearer token maps to. Tasks are
// bound to the Tenant; the Actor is recorded in logs.
type Identity struct {
	Tenant string
	Actor  string
}

// anonymous is the identity of every request in single-user mode.
var anonymous = Identity{Tenant: "", Actor: "anonymous"}

// Config configures a Receiver. Zero values take the documented defaults.
type Config struct {
	// Tokens maps bearer tokens to identities. Empty = unauthenticated
	// single-user mode: no Authorization needed, tasks/list not offered.
	Tokens map[string]Identity
	// Eras selects the protocol eras served (default ErasBoth).
	Eras Eras
	// DefaultPollInterval is suggested to requestors (default 500ms).
	DefaultPollInterval time.Duration
	// MaxPollInterval caps the poll interval (default 5s).
	MaxPollInterval time.Duration
	// DefaultTTL is granted when a requestor asks for none, and always in the
	// extension era (default 1h).
	DefaultTTL time.Duration
	// MaxTTL caps a requested ttl (default 24h).
	MaxTTL time.Duration
	// MaxConcurrentTasks limits non-terminal tasks per tenant (default 64;
	// negative = unlimited).
	MaxConcurrentTasks int
	// PurgeInterval is how often expired tasks are deleted (default 1s).
	PurgeInterval time.Duration
	// Now is the clock used for timestamps and expiry (default time.Now).
	// Durations of tool work always use real timers.
	Now func() time.Time
	// Logger receives structured logs; tokens and elicited values are never
	// logged (default: discard).
	Logger *slog.Logger
	// ServerName and ServerVersion identify the implementation (defaults
	// "taskgate-reference-receiver", "1.0.0").
	ServerName    string
	ServerVersion string
	// AllowedHosts are the host names (no port) a request's Host header, and
	// its Origin header when present, may name; anything else is answered
	// 403, which stops DNS-rebinding attacks from browsers (default: the
	// loopback names localhost, 127.0.0.1 and ::1).
	AllowedHosts []string
	// Profile selects extra tools: "" (the default) or "conformance", which
	// adds the fixture tools the MCP conformance suites call.
	Profile string
	// Hostile turns on hostile modes: the receiver's answers on /mcp break the protocol on
	// purpose (see Hostile). Empty = a well-behaved receiver.
	Hostile []Hostile
}

func (c *Config) withDefaults() {
	if c.DefaultPollInterval <= 0 {
		c.DefaultPollInterval = 500 * time.Millisecond
	}
	if c.MaxPollInterval <= 0 {
		c.MaxPollInterval = 5 * time.Second
	}
	if c.DefaultPollInterval > c.MaxPollInterval {
		c.DefaultPollInterval = c.MaxPollInterval
	}
	if c.DefaultTTL <= 0 {
		c.DefaultTTL = time.Hour
	}
	if c.MaxTTL <= 0 {
		c.MaxTTL = 24 * time.Hour
	}
	if c.DefaultTTL > c.MaxTTL {
		c.DefaultTTL = c.MaxTTL
	}
	if c.MaxConcurrentTasks == 0 {
		c.MaxConcurrentTasks = 64
	}
	if c.PurgeInterval <= 0 {
		c.PurgeInterval = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ServerName == "" {
		c.ServerName = "taskgate-reference-receiver"
	}
	if c.ServerVersion == "" {
		c.ServerVersion = "1.0.0"
	}
	if len(c.AllowedHosts) == 0 {
		c.AllowedHosts = loopbackHosts
	}
}

// Receiver is the reference MCP Task receiver. Create it with New, serve
// Handler (or ServeStdio), and Close it to stop its background work.
type Receiver struct {
	cfg      Config
	log      *slog.Logger
	knobs    *Knobs
	tasks    *taskStore
	records  *Records
	jobs     *jobStore
	stats    *counters
	hostile  *hostile // nil unless hostile modes are on
	stateKey []byte   // HMAC key for MRTR requestState

	sessMu   sync.Mutex
	sessions map[string]*session

	notes *notifier
	subMu sync.Mutex
	subs  map[string]*subscription

	ctx       context.Context // cancelled by Close: ends tool work and jobs
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New builds a Receiver and starts its purge loop.
func New(cfg Config) *Receiver {
	cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Receiver{
		cfg:      cfg,
		log:      cfg.Logger,
		knobs:    newKnobs(),
		stats:    newCounters(),
		sessions: map[string]*session{},
		notes:    newNotifier(),
		subs:     map[string]*subscription{},
		ctx:      ctx,
		cancel:   cancel,
		stateKey: randomBytes(32),
	}
	r.records = newRecords(cfg.Now, r.stats)
	r.tasks = newTaskStore(r)
	r.jobs = newJobStore(r)
	r.wg.Add(2)
	go r.purgeLoop()
	go func() {
		defer r.wg.Done()
		r.notes.run(r.publishStatus)
	}()
	if len(r.cfg.Hostile) > 0 {
		r.hostile = newHostile(r.cfg.Hostile)
	}
	return r
}

// HostileHits counts, per hostile mode, the rewrites that mode has made (nil when no hostile
// mode is on).
func (r *Receiver) HostileHits() map[Hostile]int {
	if r.hostile == nil {
		return nil
	}
	return r.hostile.hitCounts()
}

// Knobs returns the fault knobs; tests set them while the receiver runs.
func (r *Receiver) Knobs() *Knobs { return r.knobs }

// Records returns the fake system of record.
func (r *Receiver) Records() *Records { return r.records }

// Config returns the effective configuration, defaults applied.
func (r *Receiver) Config() Config { return r.cfg }

// Close stops the purge loop, cancels running tool work and jobs, ends open
// event streams, and waits for all of it. It is idempotent.
func (r *Receiver) Close() {
	r.closeOnce.Do(func() {
		r.cancel()
		r.notes.shutdown()
		r.sessMu.Lock()
		for _, s := range r.sessions {
			s.close()
		}
		r.sessMu.Unlock()
		r.wg.Wait()
	})
}

func (r *Receiver) purgeLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.PurgeInterval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
			if n := r.PurgeExpired(); n > 0 {
				r.log.Info("purged expired tasks", "count", n)
			}
		}
	}
}

// PurgeExpired deletes every task whose ttl has passed (by Config.Now),
// cancelling its work, and reports how many it deleted. The purge loop calls
// it every PurgeInterval; tests call it directly.
func (r *Receiver) PurgeExpired() int { return r.tasks.purge() }

// go runs f as background work tied to the receiver's lifetime.
func (r *Receiver) goBackground(f func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
}

// Handler serves /mcp (Streamable HTTP, both eras), /records/{key} and /jobs,
// each behind the Host/Origin allow-list (Config.AllowedHosts).
func (r *Receiver) Handler() http.Handler {
	mux := http.NewServeMux()
	if r.hostile != nil {
		mux.Handle("/mcp", r.hostile.wrap(http.HandlerFunc(r.serveMCP)))
	} else {
		mux.HandleFunc("/mcp", r.serveMCP)
	}
	mux.HandleFunc("GET /records/{key}", r.serveRecord)
	mux.HandleFunc("POST /jobs", r.serveJobCreate)
	mux.HandleFunc("GET /jobs/{id}", r.serveJobGet)
	return r.guardOrigin(mux)
}

// ListenAndServe serves the receiver's Handler on addr (a 127.0.0.1 address;
// port 0 picks one) until ctx is done, then shuts down. logger may be nil.
// It logs the address it listens on.
func ListenAndServe(ctx context.Context, addr string, cfg Config, logger *slog.Logger) error {
	if logger != nil {
		cfg.Logger = logger
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	r := New(cfg)
	defer r.Close()
	return r.Serve(ctx, ln)
}

// Serve serves the receiver on ln until ctx is done, then shuts the server
// down (open streams are ended) and returns nil, or the serve error.
func (r *Receiver) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 10 * time.Second}
	r.log.Info("reference receiver listening", "addr", ln.Addr().String(), "eras", r.cfg.Eras.String(), "mcp", "http://"+ln.Addr().String()+"/mcp")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	r.sessMu.Lock()
	for _, s := range r.sessions {
		s.close()
	}
	r.sessMu.Unlock()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// authenticate maps the request's bearer token to an identity. ok is false
// when tokens are configured and the request carries no known token.
func (r *Receiver) authenticate(req *http.Request) (Identity, bool) {
	if len(r.cfg.Tokens) == 0 {
		return anonymous, true
	}
	h := req.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) <= len(prefix) || !equalFoldASCII(h[:len(prefix)], prefix) {
		return Identity{}, false
	}
	id, ok := r.cfg.Tokens[h[len(prefix):]]
	return id, ok
}

func (r *Receiver) authenticated() bool { return len(r.cfg.Tokens) > 0 }

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return b
}

// newID returns prefix + 128 random bits in hex.
func newID(prefix string) string { return prefix + hex.EncodeToString(randomBytes(16)) }
