package operations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/taskgate/taskgate/internal/lifecycle"
)

// CompactorConfig configures a Compactor. Zero values take the documented defaults.
type CompactorConfig struct {
	// Store is the ledger (required).
	Store *Store
	// Interval is the pause between passes (default 1s). Reads are exact whatever it is; it
	// bounds how many dirty operations a read recomputes.
	Interval time.Duration
	// PassTimeout bounds one pass (default 1m; a first count of a large ledger gets 30m).
	PassTimeout time.Duration
	// Logger receives logs (default: discard).
	Logger *slog.Logger
	// AfterPass, when set, is called after every pass with the dirty marks it took and its
	// error.
	AfterPass func(taken int, err error)
}

func (c *CompactorConfig) validate() error {
	if c.Store == nil {
		return errors.New("operations: compactor needs a Store")
	}
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.PassTimeout <= 0 {
		c.PassTimeout = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Compactor moves the operations marked dirty into the console's counts, and the reconciliation
// queue's appended count changes into its counts (Store.CompactOverview), every Interval; it
// counts the whole ledger first when the counts do not hold it yet (a ledger that existed
// before the counters). Every console replica runs one; an advisory lock lets one
// pass at a time do the work, so there is no leader to elect or lose.
type Compactor struct {
	cfg  CompactorConfig
	life lifecycle.Loop
}

// NewCompactor validates cfg and returns a stopped Compactor.
func NewCompactor(cfg CompactorConfig) (*Compactor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Logger = cfg.Logger.With("component", "overview-counts")
	return &Compactor{cfg: cfg}, nil
}

// Start runs a pass at once and then every Interval until Stop. It returns an error if the
// compactor is running.
func (c *Compactor) Start(ctx context.Context) error {
	if err := c.life.Start(ctx, c.loop); err != nil {
		return fmt.Errorf("operations: compactor: %w", err)
	}
	return nil
}

// Stop ends the loop and waits for a running pass. It is idempotent.
func (c *Compactor) Stop() { c.life.Stop() }

func (c *Compactor) loop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := c.runOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			c.cfg.Logger.Error("overview counts", "err", err)
			failing = true
		case err == nil:
			failing = false
		}
		if c.cfg.AfterPass != nil {
			c.cfg.AfterPass(n, err)
		}
		t.Reset(c.cfg.Interval)
	}
}

// runOnce counts the ledger if the counts do not hold it, then compacts, under the pass
// timeout.
func (c *Compactor) runOnce(ctx context.Context) (int, error) {
	counted, err := c.cfg.Store.overviewCounted(ctx)
	if err != nil {
		return 0, err
	}
	if !counted {
		rctx, cancel := context.WithTimeout(ctx, max(c.cfg.PassTimeout, 30*time.Minute))
		defer cancel()
		t0 := time.Now()
		if err := c.cfg.Store.RecountOverviewIfNeeded(rctx); err != nil {
			return 0, err
		}
		c.cfg.Logger.Info("overview counts: ledger counted", "took", time.Since(t0).Round(time.Millisecond))
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.PassTimeout)
	defer cancel()
	return c.cfg.Store.CompactOverview(ctx)
}
