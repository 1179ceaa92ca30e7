package manifests

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/mcpclient"
)

// DialFunc opens an MCP connection (mcpclient.Dial by default).
type DialFunc func(ctx context.Context, opts mcpclient.Options) (mcpclient.Conn, error)

// Recorder stores probe results (implemented by *Store).
type Recorder interface {
	Record(ctx context.Context, m *Manifest, p Probe, affected []string) (Recorded, error)
	RecordFailure(ctx context.Context, server string, at time.Time, probeErr error, p Probe) error
}

// Result is the outcome of one probe.
type Result struct {
	// Server is the configured server name.
	Server string
	// At is when the probe started.
	At time.Time
	// Recorded is what the store did (zero on failure).
	Recorded Recorded
	// Err is why the probe failed (nil on success).
	Err error
}

// ProberConfig configures a Prober. Zero values take the documented defaults.
type ProberConfig struct {
	// Policy lists the servers to probe and the workflows on each (required).
	Policy *config.Config
	// Store records results (required).
	Store Recorder
	// DemoURL is the MCP endpoint of the in-process demo receiver that "builtin:demo" means.
	DemoURL string
	// Getenv resolves server token secrets (default: none set).
	Getenv func(string) string
	// Dial opens connections (default mcpclient.Dial). Every probe opens a new session; no
	// Detector is used, so nothing is concluded from a server's name or an earlier probe.
	Dial DialFunc
	// Timeout bounds one probe (default 20s).
	Timeout time.Duration
	// MinInterval is the floor for a server's probe_every (default 1s).
	MinInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives structured logs (default slog.Default()).
	Logger *slog.Logger
	// OnProbe, when set, is told about every probe result (tests wait on it).
	OnProbe func(Result)
}

func (c *ProberConfig) validate() error {
	if c.Policy == nil {
		return errors.New("manifests: ProberConfig.Policy is required")
	}
	if c.Store == nil {
		return errors.New("manifests: ProberConfig.Store is required")
	}
	if c.Getenv == nil {
		c.Getenv = func(string) string { return "" }
	}
	if c.Dial == nil {
		c.Dial = mcpclient.Dial
	}
	if c.Timeout <= 0 {
		c.Timeout = 20 * time.Second
	}
	if c.MinInterval <= 0 {
		c.MinInterval = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Prober probes every configured server at start, then each on its probe_every schedule, and
// on demand (ProbeNow). It is a service: Start, idempotent Stop.
type Prober struct {
	cfg ProberConfig

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
	next    map[string]time.Time
	wake    chan struct{}
}

// NewProber validates cfg and returns a stopped Prober.
func NewProber(cfg ProberConfig) (*Prober, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Prober{cfg: cfg, next: map[string]time.Time{}, wake: make(chan struct{}, 1)}, nil
}

// Start probes every server once (in the background) and then keeps to the schedule until ctx
// ends or Stop is called.
func (p *Prober) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return errors.New("manifests: prober already started")
	}
	p.started = true
	ctx, p.cancel = context.WithCancel(ctx)
	p.done = make(chan struct{})
	now := p.cfg.Now()
	for _, s := range p.cfg.Policy.Servers {
		p.next[s.Name] = now
	}
	go p.loop(ctx)
	return nil
}

// Stop ends the schedule and waits for the running pass. It is idempotent.
func (p *Prober) Stop() {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.cancel = nil
	p.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (p *Prober) loop(ctx context.Context) {
	defer close(p.done)
	first := true
	for {
		trigger := TriggerSchedule
		if first {
			trigger, first = TriggerStart, false
		}
		p.runOnce(ctx, trigger)
		wait := p.untilNext()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-p.wake:
			t.Stop()
		}
	}
}

// untilNext is the time until the earliest due server.
func (p *Prober) untilNext() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	wait := time.Hour
	for _, at := range p.next {
		if d := at.Sub(now); d < wait {
			wait = d
		}
	}
	return max(wait, 10*time.Millisecond)
}

// maxProbes bounds the probes one pass runs at once.
const maxProbes = 8

// runOnce probes every due server, each under the per-probe timeout, up to maxProbes at once,
// so that a server that stops answering delays no other server's probe (errors are logged and
// recorded; the loop goes on). It returns when every probe it started ended.
func (p *Prober) runOnce(ctx context.Context, trigger Trigger) {
	now := p.cfg.Now()
	var due []config.Server
	p.mu.Lock()
	for _, s := range p.cfg.Policy.Servers {
		if at, ok := p.next[s.Name]; ok && !at.After(now) {
			due = append(due, s)
			every := max(s.ProbeEvery.Duration, p.cfg.MinInterval)
			p.next[s.Name] = now.Add(every)
		}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxProbes)
	defer wg.Wait()
	for _, s := range due {
		select {
		case <-ctx.Done():
			return
		case slots <- struct{}{}:
		}
		wg.Go(func() {
			defer func() { <-slots }()
			_, _ = p.probe(ctx, s, Probe{Trigger: trigger})
		})
	}
}

// ProbeNow probes the named server at once, on a new session, and records the result.
func (p *Prober) ProbeNow(ctx context.Context, server string, by Probe) (Result, error) {
	s, ok := p.cfg.Policy.Server(server)
	if !ok {
		return Result{}, fmt.Errorf("probe %s: %w", server, ErrUnknownServer)
	}
	if by.Trigger == "" {
		by.Trigger = TriggerOperator
	}
	return p.probe(ctx, *s, by)
}

func (p *Prober) probe(ctx context.Context, s config.Server, by Probe) (Result, error) {
	res := Result{Server: s.Name, At: p.cfg.Now().UTC()}
	pctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	m, err := p.read(pctx, s, res.At)
	log := p.cfg.Logger.With("server", s.Name, "trigger", by.Trigger)
	// Store with a context that survives the probe's deadline, so the failure is recorded.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer scancel()
	if err != nil {
		res.Err = err
		log.Warn("manifest probe failed", "err", err)
		if rerr := p.cfg.Store.RecordFailure(sctx, s.Name, res.At, err, by); rerr != nil {
			log.Error("record failed probe", "err", rerr)
		}
	} else {
		rec, rerr := p.cfg.Store.Record(sctx, m, by, Affected(p.cfg.Policy, s.Name))
		if rerr != nil {
			res.Err = rerr
			log.Error("record manifest", "err", rerr)
		} else {
			res.Recorded = rec
			if rec.Changed {
				log.Warn("manifest changed: gate verdicts voided, promotion paused", "from", Short(rec.PreviousFingerprint),
					"to", Short(rec.Version.Fingerprint), "voided", rec.VoidedVerdicts, "paused", rec.PausedWorkflows)
			} else {
				log.Debug("manifest probed", "fingerprint", Short(rec.Version.Fingerprint))
			}
		}
	}
	if p.cfg.OnProbe != nil {
		p.cfg.OnProbe(res)
	}
	return res, res.Err
}

// Read opens a new session to the named server and returns its manifest without storing it
// (the console stores it with its audit row in one transaction).
func (p *Prober) Read(ctx context.Context, server string) (*Manifest, error) {
	s, ok := p.cfg.Policy.Server(server)
	if !ok {
		return nil, fmt.Errorf("probe %s: %w", server, ErrUnknownServer)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	return p.read(ctx, *s, p.cfg.Now().UTC())
}

// read opens a new session to s and builds its manifest.
func (p *Prober) read(ctx context.Context, s config.Server, at time.Time) (*Manifest, error) {
	opts, err := DialOptions(s, p.cfg.DemoURL, p.cfg.Getenv)
	if err != nil {
		return nil, err
	}
	opts.Logger = p.cfg.Logger
	conn, err := p.cfg.Dial(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", s.Name, err)
	}
	defer conn.Close()
	return FromInfo(s.Name, conn.Info(), conn.Tools(), at)
}

// ProbeOnce opens a new session with opts and returns the manifest, without storing it ("console
// probe URL" uses it). server names the manifest ("" for an ad-hoc URL).
func ProbeOnce(ctx context.Context, dial DialFunc, server string, opts mcpclient.Options, at time.Time) (*Manifest, error) {
	if dial == nil {
		dial = mcpclient.Dial
	}
	conn, err := dial(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	return FromInfo(server, conn.Info(), conn.Tools(), at)
}

// DialOptions turns a configured server into dial options: an http(s) URL, "stdio:COMMAND
// ARGS…", or "builtin:demo" (the in-process demo receiver at demoURL). The token secret is
// resolved with getenv; it is never logged.
func DialOptions(s config.Server, demoURL string, getenv func(string) string) (mcpclient.Options, error) {
	var opts mcpclient.Options
	switch {
	case s.URL == "builtin:demo":
		if demoURL == "" {
			return opts, fmt.Errorf("server %s is builtin:demo but no demo receiver runs", s.Name)
		}
		opts.URL = demoURL
	case strings.HasPrefix(s.URL, "stdio:"):
		fields := strings.Fields(strings.TrimPrefix(s.URL, "stdio:"))
		if len(fields) == 0 {
			return opts, fmt.Errorf("server %s: stdio URL without a command", s.Name)
		}
		opts.Command, opts.Args = fields[0], fields[1:]
	default:
		opts.URL = s.URL
	}
	choice, err := mcpclient.ParseEraChoice(s.Era)
	if err != nil {
		return opts, fmt.Errorf("server %s: %w", s.Name, err)
	}
	opts.Era = choice
	if s.Token != nil {
		tok, err := s.Token.Resolve(getenv)
		if err != nil {
			return opts, fmt.Errorf("server %s token: %w", s.Name, err)
		}
		opts.Token = tok
	}
	return opts, nil
}

// Affected lists the workflows that run on server: their gate verdicts are voided and their
// promotion paused when its manifest changes.
func Affected(policy *config.Config, server string) []string {
	var out []string
	for _, w := range policy.Workflows {
		if w.Server == server {
			out = append(out, w.Name)
		}
	}
	return out
}
