package operations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskgate/taskgate/internal/lifecycle"
)

// PollLogConfig configures a PollLog. Zero values take the documented defaults.
type PollLogConfig struct {
	// Store is the ledger whose server_poll_hours table receives the counts (required).
	Store *Store
	// FlushEvery is the pause between flushes (default 10s).
	FlushEvery time.Duration
	// FlushTimeout bounds one flush (default 10s).
	FlushTimeout time.Duration
	// Now is the clock that files a read under its hour (default time.Now).
	Now func() time.Time
	// Logger receives logs (default: discard).
	Logger *slog.Logger
	// AfterFlush, when set, is called after every flush with the number of (server, tenant,
	// hour) rows it added to and its error.
	AfterFlush func(rows int, err error)
}

func (c *PollLogConfig) validate() error {
	if c.Store == nil {
		return errors.New("operations: poll log needs a Store")
	}
	if c.FlushEvery <= 0 {
		c.FlushEvery = 10 * time.Second
	}
	if c.FlushTimeout <= 0 {
		c.FlushTimeout = 10 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// PollLog counts the status reads the watchers make, per server, tenant and hour, for the
// Servers page's poll-load chart. A watcher makes up to thousands of reads a second, so Add only
// counts in memory; the counts are added to the server_poll_hours table every FlushEvery and on
// Stop, one upsert a flush. Replicas share the table: each adds its own counts. Counts a flush
// could not write are kept for the next one.
type PollLog struct {
	cfg PollLogConfig

	mu     sync.RWMutex
	counts map[pollKey]*pollCount
	// flushMu lets one flush run at a time.
	flushMu sync.Mutex

	life lifecycle.Loop
}

type pollKey struct {
	server, tenant string
	hour           time.Time
}

type pollCount struct{ ok, errors atomic.Int64 }

// NewPollLog validates cfg and returns a stopped PollLog; Add counts before Start too.
func NewPollLog(cfg PollLogConfig) (*PollLog, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Logger = cfg.Logger.With("component", "poll-log")
	return &PollLog{cfg: cfg, counts: map[pollKey]*pollCount{}}, nil
}

// Add counts one status read of a task of tenant on server, answered (ok) or failed. It is safe
// for concurrent use and costs no database round trip.
func (p *PollLog) Add(server, tenant string, ok bool) {
	k := pollKey{server: server, tenant: tenant, hour: p.cfg.Now().UTC().Truncate(time.Hour)}
	p.mu.RLock()
	c := p.counts[k]
	if c != nil {
		add(c, ok)
		p.mu.RUnlock()
		return
	}
	p.mu.RUnlock()
	p.mu.Lock()
	if c = p.counts[k]; c == nil {
		c = &pollCount{}
		p.counts[k] = c
	}
	add(c, ok)
	p.mu.Unlock()
}

func add(c *pollCount, ok bool) {
	if ok {
		c.ok.Add(1)
	} else {
		c.errors.Add(1)
	}
}

// Start flushes every FlushEvery until Stop. It returns an error if the log is running.
func (p *PollLog) Start(ctx context.Context) error {
	if err := p.life.Start(ctx, p.loop); err != nil {
		return fmt.Errorf("operations: poll log: %w", err)
	}
	return nil
}

// Stop ends the loop and flushes what is counted. It is idempotent.
func (p *PollLog) Stop() {
	if p.life.Stop() {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.FlushTimeout)
		defer cancel()
		p.flushLogged(ctx)
	}
}

func (p *PollLog) loop(ctx context.Context) {
	t := time.NewTicker(p.cfg.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fctx, cancel := context.WithTimeout(ctx, p.cfg.FlushTimeout)
		p.flushLogged(fctx)
		cancel()
	}
}

func (p *PollLog) flushLogged(ctx context.Context) {
	n, err := p.Flush(ctx)
	if err != nil {
		p.cfg.Logger.Error("flush poll counts", "err", err)
	}
	if p.cfg.AfterFlush != nil {
		p.cfg.AfterFlush(n, err)
	}
}

// Flush adds the counts made since the last flush to server_poll_hours now and reports how many
// rows it added to. On an error the counts are kept for the next flush.
func (p *PollLog) Flush(ctx context.Context) (int, error) {
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	// Swapping the map under the write lock waits for every Add holding the read lock, so the
	// counts taken are final.
	p.mu.Lock()
	taken := p.counts
	p.counts = map[pollKey]*pollCount{}
	p.mu.Unlock()
	if len(taken) == 0 {
		return 0, nil
	}
	keys := make([]pollKey, 0, len(taken))
	for k := range taken {
		keys = append(keys, k)
	}
	// One order for every replica, so concurrent upserts of the same rows never deadlock.
	slices.SortFunc(keys, func(a, b pollKey) int {
		if c := strings.Compare(a.server, b.server); c != 0 {
			return c
		}
		if c := strings.Compare(a.tenant, b.tenant); c != 0 {
			return c
		}
		return a.hour.Compare(b.hour)
	})
	servers, tenants := make([]string, len(keys)), make([]string, len(keys))
	hours := make([]time.Time, len(keys))
	oks, errs := make([]int64, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		servers[i], tenants[i], hours[i] = k.server, k.tenant, k.hour
		oks[i], errs[i] = taken[k].ok.Load(), taken[k].errors.Load()
	}
	_, err := p.cfg.Store.pool.Exec(ctx, `INSERT INTO server_poll_hours (server, tenant, hour, ok, errors)
		SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bigint[], $5::bigint[])
		ON CONFLICT (server, tenant, hour) DO UPDATE
		SET ok = server_poll_hours.ok + excluded.ok, errors = server_poll_hours.errors + excluded.errors`,
		servers, tenants, hours, oks, errs)
	if err != nil {
		p.mu.Lock()
		for _, k := range keys {
			c := p.counts[k]
			if c == nil {
				c = &pollCount{}
				p.counts[k] = c
			}
			c.ok.Add(taken[k].ok.Load())
			c.errors.Add(taken[k].errors.Load())
		}
		p.mu.Unlock()
		return 0, fmt.Errorf("add poll counts: %w", err)
	}
	return len(keys), nil
}
